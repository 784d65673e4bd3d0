"""Metrics (issue 3), each on a case with a known answer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin import data, metrics, models
from itlin import accuracy, jacobian, ntk, rmse


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


# -------------------------------------------------------------------------------- accuracy
def test_accuracy_multiclass_and_single_output():
    logits = jnp.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [4.0, 0.0, 0.0]])
    labels = jnp.array([0, 1, 1, 0])
    assert float(accuracy(logits, labels)) == 0.75
    assert float(accuracy(logits, jax.nn.one_hot(labels, 3))) == 0.75
    out = jnp.array([[0.3], [-2.0], [0.1], [-0.5]])
    assert float(accuracy(out, jnp.array([[1.0], [-1.0], [-1.0], [-1.0]]))) == 0.75  # +-1 targets
    assert float(accuracy(out[:, 0], jnp.array([1, 0, 0, 0]))) == 0.75  # 0/1 labels
    assert float(jax.jit(accuracy)(out, jnp.array([[1.0], [-1.0], [1.0], [-1.0]]))) == 1.0
    with pytest.raises(ValueError, match="one target per example"):
        accuracy(out, jnp.ones(3))
    with pytest.raises(ValueError):
        accuracy(logits, jnp.ones((4, 2)))
    assert float(rmse(jnp.array([[1.0], [3.0]]), jnp.array([[0.0], [0.0]]))) == pytest.approx(np.sqrt(5))


# ---------------------------------------------------------------------------- WCD (Eq. 9)
def test_weighted_cosine_distance_known_values():
    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(5, 10))
    # students that copy teacher directions (any positive scale, repeats, dead units): WCD = 0
    student = np.concatenate([3.0 * teacher, 0.1 * teacher[[0, 2]], np.zeros((4, 10))])
    assert metrics.weighted_cosine_distance(student, teacher) == pytest.approx(0.0, abs=1e-12)
    assert metrics.weighted_cosine_distance(rng.permutation(student), teacher) == pytest.approx(0.0, abs=1e-12)
    # orthogonal to every teacher unit: 2 * (1 - 0) = 2; opposite to the only teacher unit: 4
    t = np.eye(3)[:2]
    assert metrics.weighted_cosine_distance(np.array([[0.0, 0.0, 7.0]]), t) == pytest.approx(2.0)
    assert metrics.weighted_cosine_distance(np.array([[-2.0, 0.0, 0.0]]), t[:1]) == pytest.approx(4.0)
    # hand computation: unit a along e1 (norm^2 1), unit b at 45 degrees to e1 and e2 (norm^2 8)
    s = np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 2.0]])
    expected = 2 * (1 / 9 * 0.0 + 8 / 9 * (1 - 1 / np.sqrt(2)))
    assert metrics.weighted_cosine_distance(s, t) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="all student weights are zero"):
        metrics.weighted_cosine_distance(np.zeros((3, 3)), t)
    with pytest.raises(ValueError, match="same d"):
        metrics.weighted_cosine_distance(np.ones((3, 4)), t)


# ---------------------------------------------------------------------- linear re-fit (Eq. 8)
def test_linear_refit_with_teacher_features_has_zero_test_loss():
    ds = data.teacher_student(n_train=200, n_test=500, seed=1)
    t = ds.meta["teacher"]
    gamma = data.activation_numpy("relu")
    feats = lambda x: gamma(np.asarray(x, np.float64) @ t["u"].T)  # noqa: E731
    out = metrics.linear_refit(feats(ds.x_train), ds.y_train, feats(ds.x_test), ds.y_test)
    assert out["train_loss"] < 1e-12 and out["test_loss"] < 1e-12
    np.testing.assert_allclose(out["weights"][:, 0], t["scale"] * t["v"], rtol=1e-5)  # recovers the teacher
    # random features: interpolate the training set (over-parameterised) but do not generalise as well
    u_rand = np.random.default_rng(0).normal(size=(400, 10))
    rf = metrics.linear_refit(gamma(ds.x_train @ u_rand.T), ds.y_train, gamma(ds.x_test @ u_rand.T), ds.y_test)
    assert rf["train_loss"] < 1e-10 and rf["test_loss"] > 1e-3
    # minimum-norm solution of Eq. 8: v = Phi^T (Phi Phi^T)^+ Y
    phi = gamma(ds.x_train.astype(np.float64) @ u_rand.T)
    v = phi.T @ np.linalg.pinv(phi @ phi.T) @ ds.y_train.astype(np.float64)
    np.testing.assert_allclose(rf["weights"], v, rtol=1e-6, atol=1e-8)


def test_mean_field_refit_with_teacher_hidden_weights(x64):
    ds = data.teacher_student(n_train=100, n_test=300, seed=2)
    u_star = ds.meta["teacher"]["u"]
    # a student whose hidden units copy the teacher's (each 3 times) re-fits to the teacher exactly
    params = {"u": jnp.asarray(np.repeat(u_star, 3, axis=0)), "v": jnp.zeros((15, 1))}
    loss = metrics.mean_field_refit_test_loss(params, ds.x_train.astype(np.float64), ds.y_train,
                                              ds.x_test.astype(np.float64), ds.y_test)
    assert loss < 1e-12
    assert metrics.weighted_cosine_distance(params["u"], u_star) == pytest.approx(0.0, abs=1e-12)
    rand = {"u": jax.random.normal(jax.random.PRNGKey(0), (15, 10)), "v": jnp.zeros((15, 1))}
    assert metrics.mean_field_refit_test_loss(rand, ds.x_train, ds.y_train, ds.x_test, ds.y_test) > 1e-3


# ------------------------------------------------------------------------------ linear probe
def test_linear_probe_on_separable_features():
    rng = np.random.default_rng(0)
    centres = 6.0 * np.eye(4, 20)
    y_tr, y_te = rng.integers(0, 4, 200), rng.integers(0, 4, 100)
    f_tr = centres[y_tr] + rng.normal(size=(200, 20))
    f_te = centres[y_te] + rng.normal(size=(100, 20))
    assert metrics.linear_probe_accuracy(f_tr, y_tr, f_te, y_te) == 1.0
    assert metrics.linear_probe_accuracy(f_tr, y_tr, f_te, y_te, method="logistic") == 1.0
    # more features (300) than examples (200) takes the dual route; repeating every feature 15
    # times adds no information, so the probe still separates the classes
    wide_tr, wide_te = np.repeat(f_tr, 15, axis=1), np.repeat(f_te, 15, axis=1)
    assert metrics.linear_probe_accuracy(wide_tr, y_tr, wide_te, y_te) == 1.0
    # labels unrelated to the features: near chance (25%)
    assert metrics.linear_probe_accuracy(f_tr, y_tr, f_te, rng.integers(0, 4, 100)) < 0.5
    with pytest.raises(ValueError, match="method"):
        metrics.linear_probe_accuracy(f_tr, y_tr, f_te, y_te, method="svm")


def test_layer_probe_on_lenet1d_features():
    # class 0: signals around -2, class 1: around +2; random-init conv features separate them
    rng = np.random.default_rng(0)
    y_tr, y_te = np.arange(40) % 2, np.arange(20) % 2
    x_tr = (4.0 * y_tr - 2.0)[:, None, None] + rng.normal(size=(40, 40, 1))
    x_te = (4.0 * y_te - 2.0)[:, None, None] + rng.normal(size=(20, 40, 1))
    model = models.lenet1d(num_outputs=2, channels=8)
    params, _ = model.init(jax.random.PRNGKey(0), jnp.asarray(x_tr[:2], jnp.float32))
    for layer in ("conv1", "dense2"):
        acc = metrics.layer_probe_accuracy(model, params, layer, jnp.asarray(x_tr, jnp.float32), y_tr,
                                           jnp.asarray(x_te, jnp.float32), y_te, batch_size=16)
        assert acc == 1.0
    with pytest.raises(TypeError, match="features"):
        metrics.layer_probe_accuracy(models.Model.from_apply(lambda p, x: x), {}, "conv1", x_tr, y_tr, x_te, y_te)


# ------------------------------------------------------------- energy concentration, alignment
def _kernel(n=12, seed=0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    s = np.sort(rng.uniform(0.1, 10.0, n))[::-1]  # distinct eigenvalues, largest first
    return (q * s) @ q.T, s, q


def test_energy_concentration_known_values():
    k, s, q = _kernel()
    assert metrics.energy_concentration(k, q[:, 2], k=3) == pytest.approx(1.0)  # an eigenvector in the top 3
    assert metrics.energy_concentration(k, -5.0 * q[:, 0], k=1) == pytest.approx(1.0)
    assert metrics.energy_concentration(k, q[:, 3], k=3) == pytest.approx(0.0, abs=1e-12)
    y = 3.0 * q[:, 1] + 4.0 * q[:, 7]
    assert metrics.energy_concentration(k, y, k=5) == pytest.approx(3.0 / 5.0)
    assert metrics.energy_concentration(k, np.random.default_rng(1).normal(size=12), k=12) == pytest.approx(1.0)
    # (N*C, N*C) kernel with (N, C) targets, flattened example-major
    y2 = q[:, 0].reshape(6, 2)
    assert metrics.energy_concentration(k, y2, k=1) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="k must be"):
        metrics.energy_concentration(k, y, k=13)
    with pytest.raises(ValueError, match="does not match"):
        metrics.energy_concentration(k, np.ones(5), k=2)


def test_eigenvector_alignment_known_values():
    k, s, q = _kernel()
    np.testing.assert_allclose(metrics.eigenvector_alignment(k, k), s, rtol=1e-10)  # self: the eigenvalues
    np.testing.assert_allclose(metrics.eigenvector_alignment(k, k, k=4), s[:4], rtol=1e-10)
    np.testing.assert_allclose(metrics.eigenvector_alignment(k, np.eye(12)), 1.0, rtol=1e-10)
    # B grows along A's 3rd eigenvector only: only that quotient changes
    b = k + 7.0 * np.outer(q[:, 2], q[:, 2])
    expected = s.copy()
    expected[2] += 7.0
    np.testing.assert_allclose(metrics.eigenvector_alignment(k, b), expected, rtol=1e-10)
    rel = metrics.eigenvector_alignment(k, b, relative=True)
    assert rel.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape of kernel_a"):
        metrics.eigenvector_alignment(k, np.eye(3))


def test_target_alignment_is_lemma_1_for_the_ntk(x64):
    # Ortiz-Jimenez et al. Lemma 1: alpha(f) = E_{x,x'} f(x) Theta(x,x') f(x') = ||E_x f(x) grad f(x)||^2
    model = models.mlp(num_outputs=1, width=6, depth=2)
    x = jax.random.normal(jax.random.PRNGKey(0), (9, 3), jnp.float64)
    params, _ = model.init(jax.random.PRNGKey(1), x)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)
    f = np.random.default_rng(0).choice([-1.0, 1.0], size=9)
    kernel = ntk(model.bind(), params, x)
    j = np.asarray(jacobian(model.bind(), params, x))
    lemma = np.sum((f @ j / 9) ** 2)
    assert metrics.target_alignment(kernel, f) == pytest.approx(lemma, rel=1e-10)
    # and for a unit eigenvector phi, alpha(sqrt(N) phi) = Rayleigh quotient / N
    quot = metrics.eigenvector_alignment(kernel, kernel, k=1)[0]
    phi = np.linalg.eigh(np.asarray(kernel))[1][:, -1]
    assert metrics.target_alignment(kernel, 3.0 * phi) == pytest.approx(quot / 9, rel=1e-10)
