"""Architectures (issue 3): parameter counts against hand arithmetic, batch-norm modes, the
closed-form mean-field NTK against the empirical NTK in float64, and the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin import models
from itlin import ntk as empirical_ntk
from itlin import num_params as count_params
from itlin.models import Model, get_model


def _init(model, x, seed=0):
    return model.init(jax.random.PRNGKey(seed), x)


def _shape_count(model, x):
    """Parameter count from shapes only (no weights are materialised)."""
    params, _ = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)
    return count_params(params)


# ----------------------------------------------------------------------------------- LeNet
def test_lenet2d_parameter_counts():
    # CIFAR-10 32x32x3: conv 5x5 VALID + 2x2 pool: 32 -> 28 -> 14 -> 10 -> 5, so 5*5*50 = 1250 features
    cifar = (5 * 5 * 3 * 50 + 50) + (5 * 5 * 50 * 50 + 50) + (1250 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert cifar == 227_484
    model = models.lenet()
    params, state = _init(model, jnp.zeros((2, 32, 32, 3)))
    assert count_params(params) == cifar and state == {}
    # Fashion-MNIST 28x28x1: 28 -> 24 -> 12 -> 8 -> 4, so 4*4*50 = 800 features
    fashion = (5 * 5 * 1 * 50 + 50) + (5 * 5 * 50 * 50 + 50) + (800 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert _shape_count(model, jnp.zeros((2, 28, 28, 1))) == fashion
    # no pooling on CIFAR: 32 -> 28 -> 24, 24*24*50 = 28800 features
    no_pool = (5 * 5 * 3 * 50 + 50) + (5 * 5 * 50 * 50 + 50) + (28800 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert _shape_count(models.lenet(pooling="none"), jnp.zeros((2, 32, 32, 3))) == no_pool
    # configurable channels
    small = (5 * 5 * 3 * 8 + 8) + (5 * 5 * 8 * 8 + 8) + (5 * 5 * 8 * 120 + 120) + (120 * 84 + 84) + (84 * 2 + 2)
    assert _shape_count(models.lenet(num_outputs=2, channels=8), jnp.zeros((2, 32, 32, 3))) == small


def test_lenet1d_parameter_count_outputs_and_features():
    # MNIST-1D length 40: 40 -> 36 -> 18 -> 14 -> 7, so 7*50 = 350 features
    expected = (5 * 1 * 50 + 50) + (5 * 50 * 50 + 50) + (350 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    model = models.lenet1d()
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 40, 1))
    params, _ = _init(model, x)
    assert count_params(params) == expected == 65_984
    assert model.apply(params, x).shape == (3, 10)
    shapes = {name: model.features(params, x, name).shape for name in model.layers}
    assert shapes == {"conv1": (3, 18, 50), "conv2": (3, 7, 50), "dense1": (3, 120), "dense2": (3, 84)}
    # features are post-ReLU activations
    assert float(jnp.min(model.features(params, x, "dense2"))) >= 0
    with pytest.raises(ValueError, match="no layer 'conv3'"):
        model.features(params, x, "conv3")


def test_lenet_input_errors():
    with pytest.raises(ValueError, match="use lenet1d"):
        _init(models.lenet(), jnp.zeros((2, 40, 1)))
    with pytest.raises(ValueError, match="use lenet"):
        _init(models.lenet1d(), jnp.zeros((2, 28, 28, 1)))
    with pytest.raises(ValueError, match="too small"):
        _init(models.lenet(), jnp.zeros((2, 8, 8, 1)))
    with pytest.raises(ValueError, match="pooling"):
        models.lenet(pooling="median")


# ------------------------------------------------------------------------------------- MLP
def test_mlp_quintic_network():
    # 5 hidden layers of 50 on a scalar input, one output: 1*50+50 + 4*(50*50+50) + 50*1+1
    expected = (1 * 50 + 50) + 4 * (50 * 50 + 50) + (50 * 1 + 1)
    model = models.mlp()
    x = jnp.linspace(-3.5, 3.5, 7)[:, None]
    params, state = _init(model, x)
    assert count_params(params) == expected == 10_351 and state == {}
    assert model.apply(params, x).shape == (7, 1)
    assert model.layers == ("hidden1", "hidden2", "hidden3", "hidden4", "hidden5")
    assert model.features(params, x, "hidden5").shape == (7, 50)
    deep = models.mlp(num_outputs=3, widths=(4, 6))
    assert _shape_count(deep, jnp.zeros((2, 5))) == (5 * 4 + 4) + (4 * 6 + 6) + (6 * 3 + 3)
    # a pure apply usable by the core: the model's bind() works with the empirical NTK
    k = empirical_ntk(model.bind(), params, x)
    assert k.shape == (7, 7)


# ------------------------------------------------------------------------------ mean field
def test_mean_field_init_and_forward():
    m, d = 4000, 10
    model = models.mean_field(width=m, tau0=0.5)
    x = jax.random.normal(jax.random.PRNGKey(2), (6, d))
    params, state = _init(model, x)
    assert params["u"].shape == (m, d) and params["v"].shape == (m, 1) and state == {}
    assert count_params(params) == m * (d + 1)
    assert float(jnp.max(jnp.abs(params["v"]))) == 0.0  # readout initialised at 0
    assert float(jnp.std(params["u"])) == pytest.approx(0.5, rel=0.03)  # N(0, tau0^2)
    np.testing.assert_array_equal(model.apply(params, x), 0.0)
    v = jax.random.normal(jax.random.PRNGKey(3), (m, 1))
    p = {"u": params["u"], "v": v}
    manual = jax.nn.relu(x @ params["u"].T) @ v / m  # Arbel et al. Eq. 2
    np.testing.assert_allclose(model.apply(p, x), manual, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model.features(p, x, "hidden"), models.mean_field_features(p, x), rtol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("outputs", [1, 3])
def test_mean_field_closed_form_ntk_equals_empirical(activation, outputs):
    with jax.enable_x64(True):
        beta = 3.0
        model = models.mean_field(width=11, num_outputs=outputs, activation=activation, beta=beta)
        x1 = jax.random.normal(jax.random.PRNGKey(0), (6, 4), jnp.float64)
        x2 = jax.random.normal(jax.random.PRNGKey(1), (4, 4), jnp.float64)
        params, _ = _init(model, x1)
        params = {"u": jnp.asarray(params["u"], jnp.float64),
                  "v": jax.random.normal(jax.random.PRNGKey(2), (11, outputs), jnp.float64)}  # non-zero readout
        f = model.bind()
        for a, b in ((x1, None), (x1, x2)):
            for trace in (False, True):
                emp = empirical_ntk(f, params, a, b, trace=trace)
                closed = models.mean_field_ntk(params, a, b, activation=activation, beta=beta, trace=trace)
                assert closed.shape == emp.shape
                np.testing.assert_allclose(closed, emp, rtol=1e-12, atol=1e-14)
        # at initialisation (v = 0) only the readout term is left: Gamma Gamma^T / M^2
        p0 = {"u": params["u"], "v": jnp.zeros((11, outputs), jnp.float64)}
        g = models.mean_field_features(p0, x1, activation, beta)
        k0 = models.mean_field_ntk(p0, x1, activation=activation, beta=beta, trace=True)
        np.testing.assert_allclose(k0, outputs * g @ g.T / 11 ** 2, rtol=1e-12)


def test_mean_field_ntk_input_errors():
    params = {"u": jnp.ones((5, 3)), "v": jnp.zeros((5, 1))}
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        models.mean_field_ntk(params, jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="activation"):
        models.mean_field_ntk(params, jnp.ones((4, 3)), activation="elu")
    with pytest.raises(ValueError, match="flatten"):
        _init(models.mean_field(width=5), jnp.ones((2, 3, 3)))


# -------------------------------------------------------------------------------- ResNet-18
def _resnet18_count(w, classes=10, in_ch=3, bn=True):
    """Hand count: conv weights, plus BN (scale, bias) per conv with batch norm, or conv biases without."""
    def conv(cin, cout, k):
        return k * k * cin * cout + (0 if bn else cout)

    def norm(c):
        return 2 * c if bn else 0

    total = conv(in_ch, w, 3) + norm(w)                                   # stem
    widths = [w, 2 * w, 4 * w, 8 * w]
    prev = w
    for i, c in enumerate(widths):
        total += conv(prev, c, 3) + norm(c) + conv(c, c, 3) + norm(c)     # block 1
        if i > 0:
            total += conv(prev, c, 1) + norm(c)                           # projection shortcut
        total += 2 * (conv(c, c, 3) + norm(c))                            # block 2
        prev = c
    return total + 8 * w * classes + classes                              # dense head


def test_resnet18_parameter_counts():
    assert _resnet18_count(64) == 11_173_962  # the usual CIFAR ResNet-18 figure
    x = jnp.zeros((2, 32, 32, 3))
    assert _shape_count(models.resnet18(), x) == _resnet18_count(64)
    assert _shape_count(models.resnet18(width=4, batch_norm=False), x) == _resnet18_count(4, bn=False)
    assert _shape_count(models.resnet18(width=8, num_outputs=2), x) == _resnet18_count(8, classes=2)


@pytest.fixture(scope="module")
def small_resnet():
    model = models.resnet18(width=4)
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 8, 8, 3))
    params, state = jax.jit(model.init)(jax.random.PRNGKey(1), x)
    return model, params, state, x


def test_resnet_batchnorm_inference_is_per_example(small_resnet):
    model, params, state, x = small_resnet
    state = model.calibrate(params, state, 3.0 * x + 1.0)  # non-trivial stored statistics
    # in float64, so that batches of different sizes agree to rounding (float32 convolutions
    # of different batch sizes differ by ~1e-6 on some CPUs: a matter of summation order)
    with jax.enable_x64(True):
        to64 = lambda t: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), t)
        p64, s64, x64 = to64(params), to64(state), to64(x)
        full = model.apply(p64, x64, s64)
        np.testing.assert_allclose(model.apply(p64, x64[:2], s64), full[:2], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.apply(p64, x64[4:], s64), full[4:], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.bind(s64)(p64, x64), full)
    # in training mode the outputs do depend on the rest of the batch
    train_full, _ = model.train_apply(params, state, x)
    train_part, _ = model.train_apply(params, state, x[:2])
    assert not np.allclose(train_part, train_full[:2], atol=1e-3)


def test_resnet_train_apply_updates_and_calibrate_sets_batch_statistics(small_resnet):
    model, params, state, x = small_resnet
    assert set(state) == {"batch_stats"}
    calibrated = model.calibrate(params, state, x)
    _, updated = model.train_apply(params, state, x)
    # both passes normalise every layer with the batch's statistics, so the running averages
    # of train_apply are (momentum 0.9) 0.9 * old + 0.1 * the batch statistics stored by calibrate
    for old, new, cal in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(updated),
                             jax.tree_util.tree_leaves(calibrated)):
        np.testing.assert_allclose(new, 0.9 * old + 0.1 * cal, rtol=1e-5, atol=1e-6)
    assert not np.allclose(jax.tree_util.tree_leaves(updated)[0], jax.tree_util.tree_leaves(state)[0])
    # the stem's statistics are the per-channel mean and (biased) variance of the stem convolution
    conv = jax.lax.conv_general_dilated(x, params["stem_conv"]["kernel"], (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(calibrated["batch_stats"]["stem_bn"]["mean"], conv.mean((0, 1, 2)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(calibrated["batch_stats"]["stem_bn"]["var"], conv.var((0, 1, 2)), rtol=1e-4, atol=1e-6)
    # inference with the calibrated statistics reproduces the training-mode outputs on that batch
    train_out, _ = model.train_apply(params, state, x)
    np.testing.assert_allclose(model.apply(params, x, calibrated), train_out, rtol=1e-4, atol=1e-5)


def test_resnet_without_batchnorm_has_no_state():
    model = models.resnet18(width=2, batch_norm=False)
    x = jnp.zeros((3, 8, 8, 3))
    params, state = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)  # shapes only: cheap
    assert state == {} and model.calibrate_fn is None and model.name == "resnet18_nobn"
    assert "stem_bn" not in params and "bias" in params["stem_conv"]
    out, new_state = jax.eval_shape(model.train_apply, params, state, x)
    assert out.shape == (3, 10) and new_state == {}


# -------------------------------------------------------------------------------- registry
def test_get_model_registry():
    for name, arch, x in (("lenet", "lenet2d", jnp.zeros((1, 32, 32, 3))), ("lenet1d", "lenet1d", jnp.zeros((1, 40, 1))),
                          ("mlp", "mlp", jnp.zeros((1, 1))), ("mean_field", "mean_field", jnp.zeros((1, 10)))):
        model = get_model(name)
        assert isinstance(model, Model) and model.meta["arch"] == arch
        assert count_params(jax.eval_shape(model.init, jax.random.PRNGKey(0), x)[0]) > 0
    assert get_model("resnet18_nobn", width=2).meta["batch_norm"] is False
    assert get_model("mean_field", width=10, tau0=1e-3).meta["tau0"] == 1e-3
    with pytest.raises(ValueError, match="known models: lenet, lenet1d, mean_field, mlp, resnet18"):
        get_model("vgg16")
    with pytest.raises(ValueError, match="tau0"):
        get_model("mean_field", tau0=-1.0)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("shape", [(3, 9, 4), (2, 7, 10, 3), (2, 28, 28, 5)])
def test_pool2_equals_flax_pooling(kind, shape):
    import flax.linen as nn

    from itlin.models import pool2

    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    window = (2,) * (len(shape) - 2)
    ref = (nn.max_pool if kind == "max" else nn.avg_pool)(x, window, strides=window)
    np.testing.assert_allclose(pool2(x, kind), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "silu"])
@pytest.mark.parametrize("outputs", [1, 3])
def test_mlp_closed_form_ntk_equals_empirical_ntk(activation, outputs):
    with jax.enable_x64(True):
        model = models.mlp(num_outputs=outputs, width=7, depth=3, activation=activation)
        x1 = jax.random.normal(jax.random.PRNGKey(0), (5, 4), jnp.float64)
        x2 = jax.random.normal(jax.random.PRNGKey(1), (3, 4), jnp.float64)
        params, _ = model.init(jax.random.PRNGKey(2), x1)
        params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64) + 0.1, params)  # non-zero biases
        f = model.bind()
        for xb in (None, x2):
            ref = empirical_ntk(f, params, x1, xb)
            np.testing.assert_allclose(model.ntk_fn(params, x1, xb), ref, rtol=1e-11, atol=1e-12)
            np.testing.assert_allclose(models.mlp_ntk(params, x1, xb, activation=activation, trace=True),
                                       empirical_ntk(f, params, x1, xb, trace=True), rtol=1e-11, atol=1e-12)


def test_mlp_torch_initialisation_has_uniform_biases_and_a_full_rank_kernel():
    # the quintic network with PyTorch's default init: biases are not zero, so the kinks of the
    # ReLUs are spread over the inputs and the NTK on the 20 training points has full rank
    # (Flax's zero biases give rank 4); the closed-form NTK still matches the Jacobian one
    from itlin import data

    with jax.enable_x64(True):
        x = jnp.asarray(data.quintic().x_train, jnp.float64)
        for init, rank in (("flax", 4), ("torch", 20)):
            m = models.mlp(init=init)
            p, _ = m.init(jax.random.PRNGKey(0), x)
            p = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), p)
            k = empirical_ntk(m.bind(), p, x)
            np.testing.assert_allclose(m.ntk_fn(p, x), k, rtol=1e-10, atol=1e-12)
            ev = np.linalg.eigvalsh(np.asarray(k))
            assert int((ev > 1e-9 * ev[-1]).sum()) == rank, init
        b = p["Dense_0"]["bias"]
        assert float(jnp.abs(b).max()) <= 1.0 and float(jnp.abs(b).min()) > 0  # fan-in 1: U(-1, 1)
    with pytest.raises(ValueError, match="init must be"):
        models.mlp(init="he")
