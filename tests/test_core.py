"""Identities of the core (issue 2), checked against independent oracles in float64.

Tolerances: 1e-10 relative where both sides are the same arithmetic in another order (exact
identities); looser ones are stated where a discretisation or a limit is being checked.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import itlin
from itlin import (batch_indices, fit, flow_params, gradient_flow, iterative_linearisation, jacobian, linearise,
                   linearise_at, linearised_apply, ntk, run)
from itlin.core import gauss_newton as gn
from itlin.core.losses import get_loss

from nets import TinyCNN, TinyMLP, make, to64

EXACT = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _data(n, shape, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + shape)
    y = rng.integers(0, classes, size=n).astype(np.int32)
    return jnp.asarray(x), jnp.asarray(y)


def _flat(tree):
    return ravel_pytree(tree)[0]


# ----------------------------------------------------------------------------- linearisation
def test_linearised_model_is_first_order_taylor():
    x, _ = _data(5, (4,))
    model, p0, _ = make(TinyMLP(), x)
    f = model.bind()
    f_lin = linearise(f, p0)
    np.testing.assert_allclose(f_lin(p0, x), f(p0, x), **EXACT)
    # against an explicit Jacobian: f_lin(p) = f(p0) + J (p - p0)
    flat0, unravel = ravel_pytree(p0)
    delta = 1e-2 * jax.random.normal(jax.random.PRNGKey(1), flat0.shape, flat0.dtype)
    p1 = unravel(flat0 + delta)
    J = jacobian(f, p0, x)
    expected = f(p0, x).reshape(-1) + J @ delta
    np.testing.assert_allclose(f_lin(p1, x).reshape(-1), expected, **EXACT)
    # and the Taylor error of the network shrinks quadratically (finite differences)
    errs = []
    for eps in (1e-2, 5e-3):
        pe = unravel(flat0 + eps * delta / 1e-2)
        errs.append(float(jnp.max(jnp.abs(f(pe, x) - f_lin(pe, x)))))
    assert errs[1] < 0.3 * errs[0]


def test_reusable_linearisation_matches_jvp_and_transpose():
    x, _ = _data(6, (5, 5, 1))
    model, p0, _ = make(TinyCNN(), x)
    f = model.bind()
    lin = linearise_at(f, p0, x)
    flat0, unravel = ravel_pytree(p0)
    d = unravel(jax.random.normal(jax.random.PRNGKey(2), flat0.shape, flat0.dtype))
    J = jacobian(f, p0, x)
    np.testing.assert_allclose(lin.jvp(d).reshape(-1), J @ _flat(d), **EXACT)
    r = jax.random.normal(jax.random.PRNGKey(3), lin.outputs.shape, lin.outputs.dtype)
    np.testing.assert_allclose(_flat(lin.vjp(r)), J.T @ r.reshape(-1), **EXACT)


# ----------------------------------------------------------------------------- K = 1 is GD
def _plain_gd(model, params, opt, x, y, steps, batch_size=None, seed=0):
    """Reference: the network trained by optax directly, no itlin trainer involved."""
    loss = get_loss("cross_entropy")
    f = model.bind()
    state = opt.init(params)
    traj = []
    idx = batch_indices(seed, 0, steps, x.shape[0], batch_size) if batch_size else None
    for t in range(steps):
        xb, yb = (x, y) if idx is None else (x[idx[t]], y[idx[t]])
        g = jax.grad(lambda p: loss(f(p, xb), yb))(params)
        upd, state = opt.update(g, state, params)
        params = optax.apply_updates(params, upd)
        traj.append(_flat(params))
    return traj


@pytest.mark.parametrize("net,shape", [(TinyMLP(), (6,)), (TinyCNN(), (6, 6, 2))], ids=["mlp", "cnn"])
@pytest.mark.parametrize("batch_size", [None, 8], ids=["fullbatch", "minibatch"])
def test_K1_equals_gradient_descent_step_for_step(net, shape, batch_size):
    # the MLP runs in a compiled device loop, the CNN as one compiled call per step (loop="auto")
    x, y = _data(24, shape)
    model, p0, _ = make(net, x)
    opt = optax.sgd(0.3, momentum=0.9)
    steps = 6
    ref = _plain_gd(model, p0, opt, x, y, steps, batch_size)
    # exact_gd=False forces K=1 through the linearised code path (linearise, step, relinearise)
    tr = iterative_linearisation(model, opt, 1, exact_gd=False)
    st = tr.init(p0)
    assert itlin.device_loop(tr, st, x) == isinstance(net, TinyMLP)
    for t in range(steps):
        st, log = run(tr, st, x, y, 1, batch_size=batch_size, chunk_size=4)
        assert bool(log.relinearised[0])
        np.testing.assert_allclose(_flat(st.params), ref[t], **EXACT)
    assert st.feature_updates == steps
    # the default fast path (plain gradient steps) gives the same numbers
    tr_fast = iterative_linearisation(model, opt, 1)
    st2, _ = run(tr_fast, tr_fast.init(p0), x, y, steps, batch_size=batch_size, chunk_size=4)
    np.testing.assert_allclose(_flat(st2.params), ref[-1], **EXACT)


# ----------------------------------------------------------------------------- K = inf
@pytest.mark.parametrize("batch_size", [None, 8], ids=["fullbatch", "minibatch"])
def test_K_inf_equals_training_an_explicit_linear_model(batch_size):
    x, y = _data(24, (6,))
    model, p0, _ = make(TinyMLP(), x)
    f = model.bind()
    # an independently built linearised model: explicit Jacobian matrix, flat parameter vector
    flat0, unravel = ravel_pytree(p0)
    J = jacobian(f, p0, x).reshape(x.shape[0], -1, flat0.shape[0])  # (N, C, P)
    f0 = f(p0, x)
    loss = get_loss("cross_entropy")
    opt = optax.adam(1e-2)
    steps = 7
    theta, ostate = flat0, opt.init(flat0)
    idx = batch_indices(1, 0, steps, x.shape[0], batch_size) if batch_size else None
    for t in range(steps):
        rows = slice(None) if idx is None else idx[t]
        g = jax.grad(lambda th: loss(f0[rows] + J[rows] @ (th - flat0), y[rows]))(theta)
        upd, ostate = opt.update(g, ostate, theta)
        theta = theta + upd
    tr = iterative_linearisation(model, opt, math.inf)
    st, log = run(tr, tr.init(p0), x, y, steps, batch_size=batch_size, seed=1, chunk_size=3)
    np.testing.assert_allclose(_flat(st.params), theta, rtol=1e-9, atol=1e-11)
    assert st.feature_updates == 0 and not log.relinearised.any()
    np.testing.assert_allclose(_flat(st.anchor), flat0, **EXACT)


# ----------------------------------------------------------------------------- linear models
def _linear_model(p_dim=10, out=2, seed=0):
    feats = jax.random.normal(jax.random.PRNGKey(seed), (out, 6, p_dim))

    def apply(params, x):
        return jnp.einsum("ni,cip->nc", x, feats) @ params["w"] + params["b"]

    # make it linear in params: outputs = (x-features) . w + b, w shaped (p_dim,) broadcast per output
    def apply_lin(params, x):
        return jnp.einsum("ni,cip,p->nc", x, feats, params["w"]) + params["b"]

    params = {"w": jax.random.normal(jax.random.PRNGKey(seed + 1), (p_dim,)), "b": jnp.zeros((out,))}
    return apply_lin, to64(params)


@pytest.mark.parametrize("loop", ["device", "host"])
@pytest.mark.parametrize("batch_size", [None, 6], ids=["fullbatch", "minibatch"])
def test_linear_in_parameters_gives_same_trajectory_for_every_K(batch_size, loop):
    apply, p0 = _linear_model()
    x = jax.random.normal(jax.random.PRNGKey(5), (18, 6))
    y = jax.random.randint(jax.random.PRNGKey(6), (18,), 0, 2)
    finals = []
    for K in (1, 2, 5, math.inf):
        tr = iterative_linearisation(apply, optax.sgd(0.05, momentum=0.5), K, exact_gd=False)
        st, log = run(tr, tr.init(p0), x, y, 11, batch_size=batch_size, seed=3, chunk_size=4, loop=loop)
        finals.append((_flat(st.params), log.loss))
    for params, losses in finals[1:]:
        np.testing.assert_allclose(params, finals[0][0], **EXACT)
        np.testing.assert_allclose(losses, finals[0][1], **EXACT)


# ----------------------------------------------------------------------------- schedules in the trainer
@pytest.mark.parametrize("K,steps", [(3, 10), (4, 12), (1, 5), (math.inf, 6)])
def test_feature_updates_follow_definition_1(K, steps):
    x, y = _data(12, (6,))
    model, p0, _ = make(TinyMLP(), x)
    tr = iterative_linearisation(model, optax.sgd(0.1), K)
    res = fit(tr, tr.init(p0), x, y, steps, eval_every=5, chunk_size=4)
    expected = itlin.Every.of(K).updates(steps)
    assert res.state.feature_updates == expected
    assert res.history.relin_steps == ([] if math.isinf(K) else list(range(K, steps + 1, K)))
    assert res.history.evals["feature_updates"][-1] == expected
    assert res.status == "completed"


@pytest.mark.parametrize("loop", ["device", "host"])
def test_fullbatch_reuse_path_equals_per_step_jvp_path(loop):
    x, y = _data(16, (6,))
    model, p0, _ = make(TinyMLP(), x)
    opt = optax.sgd(0.2, momentum=0.9)
    fb = iterative_linearisation(model, opt, 4)
    st_fb, log_fb = run(fb, fb.init(p0), x, y, 13, chunk_size=5, loop=loop)
    # the per-step path on the full batch: one step() call per step with the whole data (a
    # fresh JVP through the network each step, no stored linearisation)
    st = fb.init(p0)
    losses = []
    for _ in range(13):
        st, log = fb.step(st, x, y)
        losses.append(float(log.loss))
    np.testing.assert_allclose(_flat(st_fb.params), _flat(st.params), **EXACT)
    np.testing.assert_allclose(log_fb.loss, losses, **EXACT)


def test_optimizer_state_carries_across_relinearisation_unless_reset():
    x, y = _data(16, (6,))
    model, p0, _ = make(TinyMLP(), x)
    opt = optax.sgd(0.2, momentum=0.9)
    carry = iterative_linearisation(model, opt, 2)
    reset = iterative_linearisation(model, opt, 2, reset_optimizer=True)
    st_c, _ = run(carry, carry.init(p0), x, y, 4)
    st_r, _ = run(reset, reset.init(p0), x, y, 4)
    mom = lambda s: _flat(s.opt_state[0].trace)
    assert float(jnp.linalg.norm(mom(st_r))) == 0.0  # reset right after the relinearisation at step 4
    assert float(jnp.linalg.norm(mom(st_c))) > 0.0
    assert not np.allclose(_flat(st_c.params), _flat(st_r.params))


def test_batch_norm_statistics_frozen_while_linearised():
    from nets import TinyBN
    from itlin import Model

    x = jax.random.normal(jax.random.PRNGKey(0), (16, 5)) * 3 + 1
    y = jax.random.randint(jax.random.PRNGKey(1), (16,), 0, 2)
    module = TinyBN()
    model = Model.from_flax(module, "bn", calibration_module=module.clone(bn_momentum=0.0))
    p0, s0 = model.init(jax.random.PRNGKey(2), x)
    p0 = to64(p0)
    s0 = to64(s0)
    tr = iterative_linearisation(model, optax.sgd(0.1), 5)
    st = tr.init(p0, s0)
    st, _ = run(tr, st, x, y, 4, batch_size=8, chunk_size=8)  # inside the first phase: statistics untouched
    for a, b in zip(jax.tree_util.tree_leaves(st.model_state), jax.tree_util.tree_leaves(s0)):
        np.testing.assert_array_equal(a, b)
    st, _ = run(tr, st, x, y, 1, batch_size=8, chunk_size=8)  # step 5 relinearises: statistics measured there
    moved = [not np.allclose(a, b) for a, b in zip(jax.tree_util.tree_leaves(st.model_state),
                                                   jax.tree_util.tree_leaves(s0))]
    assert any(moved)
    # the linearised model's outputs depend only on the frozen state: one example alone gives
    # the same outputs as inside a batch (no batch statistics)
    f = model.bind(st.model_state)
    np.testing.assert_allclose(linearised_apply(f, st.anchor, st.params, x[:1]),
                               linearised_apply(f, st.anchor, st.params, x)[:1], **EXACT)


# ----------------------------------------------------------------------------- Gauss-Newton
def _random_J_problem(n=7, c=1, p=5, seed=0):
    """A model that *is* a random Jacobian: f(theta) = A theta (+ nothing), P < N*C or > N*C."""
    A = jax.random.normal(jax.random.PRNGKey(seed), (n, c, p))

    def apply(params, x):  # x is one-hot: example k's Jacobian is A[k]
        return jnp.einsum("nk,kcp,p->nc", x, A, params["w"])

    params = {"w": jax.random.normal(jax.random.PRNGKey(seed + 1), (p,))}
    x = jnp.eye(n)
    y = jax.random.normal(jax.random.PRNGKey(seed + 2), (n, c))
    return apply, to64(params), x, y


@pytest.mark.parametrize("p", [4, 30], ids=["P<N", "P>N"])
@pytest.mark.parametrize("lam", [1e-3, 0.7, 50.0])
def test_woodbury_kernel_equals_primal_random_J(p, lam):
    apply, params, x, y = _random_J_problem(n=8, p=p)
    dk, ik = gn.gauss_newton_direction(apply, params, x, y, damping=lam, method="kernel")
    dp, ip = gn.gauss_newton_direction(apply, params, x, y, damping=lam, method="primal")
    np.testing.assert_allclose(_flat(dk), _flat(dp), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
@pytest.mark.parametrize("damping", [0.3, gn.ArbelDamping(alpha=1.0, eps0=1e-7)], ids=["const", "arbel"])
def test_woodbury_kernel_equals_primal_real_network(loss, damping):
    x, labels = _data(6, (4,))
    model, p0, _ = make(TinyMLP(width=5), x)
    f = model.bind()
    y = labels if loss == "cross_entropy" else jax.random.normal(jax.random.PRNGKey(9), (6, 3))
    kw = dict(loss=loss, damping=damping, reduction="mean")
    dk, ik = gn.gauss_newton_direction(f, p0, x, y, method="kernel", **kw)
    dp, ip = gn.gauss_newton_direction(f, p0, x, y, method="primal", **kw)
    np.testing.assert_allclose(_flat(dk), _flat(dp), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ik.damping, ip.damping, rtol=1e-9)
    if isinstance(damping, gn.ArbelDamping):
        # the damping is Arbel's rule on the system actually solved, S K S with H = S S, restricted
        # to the range of H (H = I/N per example for the mean squared loss, the softmax Hessian / N
        # for cross-entropy, whose blocks are singular: S K S is zero on their null space), with
        # the floor eps0 in the sum's units (eps0 / N for the mean)
        K = np.asarray(ntk(f, p0, x))
        out = np.asarray(f(p0, x))
        if loss == "squared":
            h = np.stack([np.eye(3) / 6] * 6)
        else:
            p = np.exp(out - out.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            h = np.stack([(np.diag(q) - np.outer(q, q)) / 6 for q in p])
        w, v = np.linalg.eigh(h)
        roots = [vi @ np.diag(np.sqrt(np.clip(wi, 0, None))) @ vi.T for wi, vi in zip(w, v)]
        S = np.zeros((18, 18))
        for n, r in enumerate(roots):
            S[3 * n:3 * n + 3, 3 * n:3 * n + 3] = r
        U = np.zeros((18, 0))
        for n, (wi, vi) in enumerate(zip(w, v)):
            keep = vi[:, wi > 1e-12]
            block = np.zeros((18, keep.shape[1]))
            block[3 * n:3 * n + 3] = keep
            U = np.concatenate([U, block], axis=1)
        assert U.shape[1] == (18 if loss == "squared" else 12)  # softmax blocks: rank C - 1
        eigmin = np.linalg.eigvalsh(U.T @ S @ K @ S @ U)[0]
        assert eigmin > 1e-6  # not structurally zero
        np.testing.assert_allclose(ik.eigmin, eigmin, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(ip.eigmin, eigmin, rtol=1e-7, atol=1e-12)
        np.testing.assert_allclose(ik.damping, max(eigmin, 1e-7 / 6), rtol=1e-7)


def test_undamped_gauss_newton_interpolates_in_one_step():
    # Eq. 5 on a linearised squared-loss problem: one step with eta=1 fits the training data.
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 4))
    y = jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    model, p0, _ = make(TinyMLP(width=12), x)  # P >> N*C: the kernel is invertible
    f = model.bind()
    f_lin = linearise(f, p0)
    p1, info = gn.gauss_newton_step(f_lin, p0, x, y, damping=0.0, learning_rate=1.0)
    np.testing.assert_allclose(f_lin(p1, x), y, rtol=1e-8, atol=1e-9)
    # on a model linear in its parameters the network itself interpolates
    apply, params, xs, ys = _random_J_problem(n=5, p=12)
    p2, _ = gn.gauss_newton_step(apply, params, xs, ys, damping=0.0)
    np.testing.assert_allclose(apply(p2, xs), ys, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("lam", [1e-2, 1.0, 20.0])
def test_damped_gauss_newton_minimises_ridge_linearised_loss(lam):
    # Eq. 6: theta* = argmin 0.5||f_lin(theta) - Y||^2 + 0.5 lam ||theta - theta_s||^2.
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 4))
    y = jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    model, p0, _ = make(TinyMLP(width=6), x)
    f = model.bind()
    p1, _ = gn.gauss_newton_step(f, p0, x, y, damping=lam, learning_rate=1.0, reduction="sum")
    f_lin = linearise(f, p0)

    def objective(p):
        r = f_lin(p, x) - y
        d = _flat(p) - _flat(p0)
        return 0.5 * jnp.sum(r * r) + 0.5 * lam * jnp.dot(d, d)

    grad = _flat(jax.grad(objective)(p1))
    scale = float(jnp.linalg.norm(_flat(jax.grad(objective)(p0))))
    assert float(jnp.linalg.norm(grad)) < 1e-9 * scale
    # the objective is convex: any perturbation increases it
    d = jax.random.normal(jax.random.PRNGKey(3), _flat(p0).shape)
    unravel = ravel_pytree(p0)[1]
    assert objective(unravel(_flat(p1) + 1e-3 * d)) > objective(p1)


def test_arbel_damping_floor_and_value():
    dmp = gn.ArbelDamping(alpha=2.0, eps0=1e-3)
    assert float(dmp.value(jnp.asarray(1.0))) == 2.0
    assert float(dmp.value(jnp.asarray(1e-9))) == 1e-3


def test_gauss_newton_fit_converges_and_stops_at_tol():
    apply, params, x, y = _random_J_problem(n=5, p=12)
    p, trace = gn.gauss_newton_fit(apply, params, x, y, 20, damping=1e-3, learning_rate=1.0, tol=1e-12)
    assert int(trace.steps) < 20 and not bool(trace.diverged)
    assert float(get_loss("squared")(apply(p, x), y)) < 1e-12  # tol is on the loss minimised (mean)


# ----------------------------------------------------------------------------- closed-form gradient flow
def test_linearised_gd_matches_closed_form_flow_and_error_shrinks_with_step():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (5, 2))
    model, p0, _ = make(TinyMLP(width=8, out=2), x)
    f = model.bind()
    K = ntk(f, p0, x)
    tau = 0.5 / float(jnp.linalg.eigvalsh(K)[-1]) * 40  # forty steps at half the stability limit
    flow = gradient_flow(K, f(p0, x), y, reduction="sum")
    f_flow = flow.predict(tau)
    p_flow = flow_params(linearise_at(f, p0, x), flow, tau)
    np.testing.assert_allclose(linearise(f, p0)(p_flow, x), f_flow, rtol=1e-9, atol=1e-10)
    errors = []
    for n_steps in (40, 80, 160):
        eta = tau / n_steps
        tr = iterative_linearisation(f, optax.sgd(eta), math.inf, loss="squared", reduction="sum")
        st, _ = run(tr, tr.init(p0), x, y, n_steps, chunk_size=64)
        errors.append(float(jnp.linalg.norm(_flat(st.params) - _flat(p_flow))))
        f_gd = linearised_apply(f, p0, st.params, x)
        assert float(jnp.max(jnp.abs(f_gd - f_flow))) < 0.05 * float(jnp.max(jnp.abs(f(p0, x) - y)))
    # first-order convergence in the step size: halving eta halves the error
    assert errors[1] / errors[0] == pytest.approx(0.5, abs=0.06)
    assert errors[2] / errors[1] == pytest.approx(0.5, abs=0.06)


def test_large_K_small_step_converges_to_gauss_newton_step():
    # Section 3.1: solving one linearisation to convergence with squared loss is the GN step.
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (4, 1))
    model, p0, _ = make(TinyMLP(width=6, out=1), x)
    f = model.bind()
    K = ntk(f, p0, x)
    s = np.linalg.eigvalsh(np.asarray(K))
    eta = 1.0 / s[-1]
    steps = int(np.ceil(40.0 / (eta * s[0])))  # e^{-40} of the slowest mode left
    tr = iterative_linearisation(f, optax.sgd(eta), 10 ** 9, loss="squared", reduction="sum")
    st, _ = run(tr, tr.init(p0), x, y, steps, chunk_size=4096)
    p_gn, _ = gn.gauss_newton_step(f, p0, x, y, damping=0.0)
    np.testing.assert_allclose(_flat(st.params), _flat(p_gn), rtol=1e-7, atol=1e-9)
    p_inf = flow_params(linearise_at(f, p0, x), gradient_flow(K, f(p0, x), y), math.inf)
    np.testing.assert_allclose(_flat(p_inf), _flat(p_gn), rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------- cross-entropy gradient
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_gradient_of_linearised_loss(reduction):
    x, y = _data(7, (4,))
    model, p0, _ = make(TinyMLP(width=5), x)
    f = model.bind()
    flat0, unravel = ravel_pytree(p0)
    p1 = unravel(flat0 + 0.3 * jax.random.normal(jax.random.PRNGKey(4), flat0.shape))
    loss = get_loss("cross_entropy", reduction)
    g = jax.grad(lambda p: loss(linearised_apply(f, p0, p, x), y))(p1)
    J = jacobian(f, p0, x)  # (N*C, P)
    f_lin = linearised_apply(f, p0, p1, x)
    residual = jax.nn.softmax(f_lin, axis=-1) - jax.nn.one_hot(y, 3)
    if reduction == "mean":
        residual = residual / x.shape[0]
    np.testing.assert_allclose(_flat(g), J.T @ residual.reshape(-1), **EXACT)


# ----------------------------------------------------------------------------- bad input
def test_bad_input_errors_say_what_to_fix():
    x, y = _data(8, (6,))
    model, p0, _ = make(TinyMLP(), x)
    opt = optax.sgd(0.1)
    with pytest.raises(ValueError, match=r"K must be >= 1"):
        iterative_linearisation(model, opt, 0)
    with pytest.raises(ValueError, match=r"whole number"):
        iterative_linearisation(model, opt, 2.5)
    with pytest.raises(TypeError, match=r'integer >= 1 or "inf"'):
        iterative_linearisation(model, opt, [3])
    with pytest.raises(ValueError, match=r"damping lambda must be >= 0"):
        gn.gauss_newton_step(model.bind(), p0, x, y, damping=-1.0)
    with pytest.raises(ValueError, match=r"learning_rate \(eta\) must be > 0"):
        gn.gauss_newton_step(model.bind(), p0, x, y, learning_rate=-0.5)
    with pytest.raises(ValueError, match=r"targets must be shaped like the outputs"):
        gn.gauss_newton_step(model.bind(), p0, x, jnp.zeros((8, 2)), damping=1.0)
    tr = iterative_linearisation(model, opt, 3)
    with pytest.raises(ValueError, match=r"same length along axis 0"):
        fit(tr, tr.init(p0), x, y[:5], 2)
    with pytest.raises(ValueError, match=r"non-finite"):
        fit(tr, tr.init(p0), x.at[0, 0].set(jnp.nan), y, 2)
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer"):
        fit(tr, tr.init(p0), x, y, 2, batch_size=0)
    with pytest.raises(ValueError, match=r"more than the 8 training examples"):
        run(tr, tr.init(p0), x, y, 1, batch_size=50)
    with pytest.raises(ValueError, match=r"unknown loss"):
        iterative_linearisation(model, opt, loss="hinge")
    with pytest.raises(ValueError, match=r"cross-entropy needs integer labels"):
        itlin.evaluate(tr, tr.init(p0), x, jnp.zeros((8, 5)))
    with pytest.raises(ValueError, match=r"augmentation needs mini-batches"):
        fit(iterative_linearisation(model, opt, 3, augment=lambda k, a: a), tr.init(p0), x, y, 2)
    with pytest.raises(ValueError, match=r"solve must be 'eigh'"):
        gn.gauss_newton_step(model.bind(), p0, x, y, loss="cross_entropy", solve="lu")


@pytest.mark.parametrize("K", [1, 2])
def test_divergence_stops_cleanly_with_the_step(K):
    x, y = _data(16, (6,))
    x = x * 50.0
    model, p0, _ = make(TinyMLP(), x)
    tr = iterative_linearisation(model, optax.sgd(1e6), K, loss="squared")
    yr = jax.random.normal(jax.random.PRNGKey(0), (16, 3)) * 10
    res = fit(tr, tr.init(p0), x, yr, 40, eval_every=4, eval_sets={"train": (x, yr)}, chunk_size=8)
    assert res.status == "diverged" and res.history.diverged  # status is data: the value and the step
    s = res.history.diverged_at
    assert isinstance(s, int) and res.history.describe() == f"diverged at step {s}"
    assert len(res.history.loss) == s - 1 and np.all(np.isfinite(res.history.loss))
    assert all(step < s for step in res.history.evals["step"])
    # what is kept is a state whose parameters still give finite losses (K=2: full-batch chunks
    # end at relinearisations, so the divergent chunk can start at the bad parameters)
    assert int(res.state.step) < s
    kept = itlin.evaluate(tr, res.state, x, yr)
    assert np.isfinite(kept["loss"]) and np.isfinite(kept["loss_lin"])


@pytest.mark.parametrize("net,shape", [(TinyMLP(), (6,)), (TinyCNN(), (6, 6, 2))], ids=["mlp", "cnn"])
def test_per_example_ntk_equals_whole_batch_jacobian(net, shape):
    x, _ = _data(5, shape)
    x2, _ = _data(3, shape, seed=1)
    model, p0, _ = make(net, x)
    f = model.bind()
    J1, J2 = jacobian(f, p0, x), jacobian(f, p0, x2)
    for kw in ({}, {"chunk_size": 2}):
        np.testing.assert_allclose(ntk(f, p0, x, x2, **kw), J1 @ J2.T, **EXACT)
        np.testing.assert_allclose(ntk(f, p0, x, x2, per_example=False, **kw), J1 @ J2.T, **EXACT)
    np.testing.assert_allclose(ntk(f, p0, x, trace=True),
                               (J1 @ J1.T).reshape(5, 3, 5, 3).trace(axis1=1, axis2=3), **EXACT)


def test_undamped_cross_entropy_gauss_newton_is_the_limit_of_damping():
    # H (softmax) is singular; the lambda = 0 step must be the lambda -> 0 limit in both forms.
    x, labels = _data(5, (4,))
    model, p0, _ = make(TinyMLP(width=5), x)
    f = model.bind()
    kw = dict(loss="cross_entropy", reduction="mean")
    d0k, _ = gn.gauss_newton_direction(f, p0, x, labels, damping=0.0, method="kernel", **kw)
    d0p, _ = gn.gauss_newton_direction(f, p0, x, labels, damping=0.0, method="primal", **kw)
    np.testing.assert_allclose(_flat(d0k), _flat(d0p), rtol=1e-6, atol=1e-8)
    dsmall, _ = gn.gauss_newton_direction(f, p0, x, labels, damping=1e-9, method="kernel", **kw)
    assert float(jnp.linalg.norm(_flat(dsmall) - _flat(d0k))) < 1e-4 * float(jnp.linalg.norm(_flat(d0k)))


# ----------------------------------------------------------------------------- issue 11: one convention, no concreteness
def test_vmapped_damping_sweep_equals_one_call_per_value_zero_included():
    # damping = 0 used to give a finite step when concrete and NaN under vmap (the solve was
    # chosen by a concreteness check); now the solve is an explicit argument.
    apply, params, x, y = _random_J_problem(n=6, p=4)  # P < N: the kernel is singular
    lams = jnp.asarray([0.0, 1e-3, 1.0])
    step = lambda lam: gn.gauss_newton_step(apply, params, x, y, damping=lam)[0]["w"]
    batched = jax.vmap(step)(lams)
    assert bool(jnp.all(jnp.isfinite(batched)))
    for i, lam in enumerate([0.0, 1e-3, 1.0]):
        np.testing.assert_allclose(batched[i], step(lam), **EXACT)
    # and lambda = 0 is the minimum-norm least-squares step (the pseudo-inverse)
    J = jacobian(apply, params, x)
    r = (apply(params, x) - y).reshape(-1)
    np.testing.assert_allclose(batched[0], params["w"] - np.linalg.pinv(np.asarray(J)) @ np.asarray(r), rtol=1e-8)


def test_vmapped_arbel_alpha_and_eps0_equal_one_call_per_value():
    # a traced alpha (or eps0) is taken as it is, as a traced constant lambda is: a sweep over
    # Arbel's factor is one vmapped program with the steps of one call per value
    apply, params, x, y = _random_J_problem(n=6, p=30)  # P > N: sigma_min > 0, so alpha matters
    alphas = jnp.asarray([0.0, 0.5, 2.0])
    step = lambda a, e=1e-3: gn.gauss_newton_step(apply, params, x, y, damping=gn.ArbelDamping(a, e))
    batched, info = jax.vmap(step)(alphas)
    for i, a in enumerate([0.0, 0.5, 2.0]):
        one, one_info = step(a)
        np.testing.assert_allclose(batched["w"][i], one["w"], **EXACT)
        np.testing.assert_allclose(info.damping[i], one_info.damping, **EXACT)
    assert float(info.damping[0]) == pytest.approx(1e-3 / 6)  # alpha = 0: the floor eps0, in the sum's units
    assert float(info.damping[2]) > 1e-3 and float(jnp.abs(batched["w"][2] - batched["w"][1]).max()) > 1e-3
    eps = jnp.asarray([1e-6, 1e-2])
    by_eps, _ = jax.vmap(lambda e: step(0.0, e))(eps)
    np.testing.assert_allclose(by_eps["w"][1], step(0.0, 1e-2)[0]["w"], **EXACT)


@pytest.mark.parametrize("kind", ["python", "numpy0d", "numpy_scalar", "jax0d"])
def test_damping_values_are_checked_alike_whatever_their_type(kind):
    # concrete values of every kind are checked (a negative 0-d array used to pass for lambda and
    # a 0-d NumPy array used to be refused); the error is one line and names the argument
    cast = {"python": float, "numpy0d": np.asarray, "numpy_scalar": np.float64, "jax0d": jnp.asarray}[kind]
    apply, params, x, y = _random_J_problem(n=6, p=4)
    ref = gn.gauss_newton_step(apply, params, x, y, damping=0.3)[0]["w"]
    np.testing.assert_allclose(gn.gauss_newton_step(apply, params, x, y, damping=cast(0.3))[0]["w"], ref, **EXACT)
    ok = gn.gauss_newton_step(apply, params, x, y, damping=gn.ArbelDamping(cast(0.5), cast(1e-3)))[0]["w"]
    np.testing.assert_allclose(ok, gn.gauss_newton_step(apply, params, x, y,
                                                        damping=gn.ArbelDamping(0.5, 1e-3))[0]["w"], **EXACT)
    bad = [(cast(-1.0), "damping lambda must be >= 0"), (gn.ConstantDamping(cast(-1.0)), "damping lambda must be >= 0"),
           (gn.ArbelDamping(cast(-1.0)), "damping alpha must be >= 0"),
           (gn.ArbelDamping(1.0, cast(-1e-3)), "damping eps0 must be >= 0"),
           (gn.ConstantDamping(cast(float("nan"))), "damping lambda must be finite")]
    for damping, message in bad:
        with pytest.raises(ValueError, match=message) as err:
            gn.gauss_newton_step(apply, params, x, y, damping=damping)
        assert "\n" not in str(err.value)
    for damping in (gn.ConstantDamping(jnp.asarray([0.1, 0.2])), gn.ArbelDamping("1"), True):
        with pytest.raises(TypeError, match=r"damping .*(a scalar|number)") as err:
            gn.get_damping(damping)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("solve", ["eigh", "cholesky"])
def test_cholesky_and_eigh_solves_agree_for_positive_damping(solve):
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 4))
    y = jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    model, p0, _ = make(TinyMLP(width=6), x)
    d_ref, _ = gn.gauss_newton_direction(model.bind(), p0, x, y, damping=0.3, method="primal")
    d, _ = gn.gauss_newton_direction(model.bind(), p0, x, y, damping=0.3, solve=solve)
    np.testing.assert_allclose(_flat(d), _flat(d_ref), rtol=1e-8, atol=1e-10)


def test_arbel_damping_gives_the_same_step_for_mean_and_sum():
    # defined on the system solved, Arbel's rule does not depend on the loss's reduction
    x = jax.random.normal(jax.random.PRNGKey(0), (7, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (7, 2))
    model, p0, _ = make(TinyMLP(width=5, out=2), x)
    f = model.bind()
    arbel = gn.ArbelDamping(alpha=1.0, eps0=1e-12)
    d_mean, i_mean = gn.gauss_newton_direction(f, p0, x, y, damping=arbel, reduction="mean")
    d_sum, i_sum = gn.gauss_newton_direction(f, p0, x, y, damping=arbel, reduction="sum")
    np.testing.assert_allclose(_flat(d_mean), _flat(d_sum), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(i_sum.damping), 7 * float(i_mean.damping), rtol=1e-9)
    # also where the floor binds (alpha = 0; issue 26's counterexample had alpha * sigma_min < eps0)
    floor = gn.ArbelDamping(alpha=0.0, eps0=0.0625)
    d_mean, i_mean = gn.gauss_newton_direction(f, p0, x, y, damping=floor, reduction="mean")
    d_sum, i_sum = gn.gauss_newton_direction(f, p0, x, y, damping=floor, reduction="sum")
    np.testing.assert_allclose(_flat(d_mean), _flat(d_sum), rtol=1e-9, atol=1e-12)
    assert float(i_sum.damping) == 0.0625 and float(i_mean.damping) == pytest.approx(0.0625 / 7, rel=1e-12)
    # hessian="identity" is Arbel et al.'s own update: (J J^T + eps I)^{-1} with g = (f - y) / N
    d_id, i_id = gn.gauss_newton_direction(f, p0, x, y, damping=arbel, hessian="identity")
    K = np.asarray(ntk(f, p0, x))
    eps = np.linalg.eigvalsh(K)[0]
    z = np.linalg.solve(K + eps * np.eye(14), np.asarray(f(p0, x) - y).reshape(-1) / 7)
    J = np.asarray(jacobian(f, p0, x))
    np.testing.assert_allclose(_flat(d_id), J.T @ z, rtol=1e-8, atol=1e-12)


def test_K_inf_sgd_with_default_settings_follows_the_flow_at_lr_times_steps():
    # The trainer (reduction="mean", the default) and the flow (the same default) share one
    # time: t = learning_rate * steps. First order in the step: the error halves with eta.
    x = jax.random.normal(jax.random.PRNGKey(0), (6, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (6, 2))
    model, p0, _ = make(TinyMLP(width=8, out=2), x)
    f = model.bind()
    K = ntk(f, p0, x)
    t = 3.0 * x.shape[0] / float(jnp.linalg.eigvalsh(K)[-1])  # three "time constants" of the top mode
    flow = gradient_flow(K, f(p0, x), y)
    errors = []
    for steps in (50, 100):
        tr = iterative_linearisation(f, optax.sgd(t / steps), "inf", loss="squared")
        st, _ = run(tr, tr.init(p0), x, y, steps)
        errors.append(float(jnp.max(jnp.abs(linearised_apply(f, p0, st.params, x) - flow.predict(t)))))
    scale = float(jnp.max(jnp.abs(f(p0, x) - y)))
    assert errors[0] < 0.05 * scale
    assert errors[1] / errors[0] == pytest.approx(0.5, abs=0.06)
    # the wrong time (the sum convention's t, N times too long) is far off
    wrong = float(jnp.max(jnp.abs(flow.predict(t * x.shape[0]) - flow.predict(t))))
    assert wrong > 20 * errors[1]


def test_flow_predicts_test_points_and_many_times_from_one_eigendecomposition():
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    xt = jax.random.normal(jax.random.PRNGKey(2), (4, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (5, 2))
    model, p0, _ = make(TinyMLP(width=8, out=2), x)
    f = model.bind()
    flow = gradient_flow(ntk(f, p0, x), f(p0, x), y)
    lin = linearise_at(f, p0, x)
    ts = jnp.asarray([0.0, 0.5, 4.0, jnp.inf])
    many = flow.predict(ts)
    test_many = flow.predict(ts, ntk(f, p0, xt, x), f(p0, xt))
    assert many.shape == (4, 5, 2) and test_many.shape == (4, 4, 2)
    for i, t in enumerate(ts):
        p_t = flow_params(lin, flow, t)
        np.testing.assert_allclose(many[i], linearised_apply(f, p0, p_t, x), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(test_many[i], linearised_apply(f, p0, p_t, xt), rtol=1e-9, atol=1e-10)


def test_flow_params_takes_an_array_of_times_like_predict():
    # issue 11: flow_params, predict and dual all take a scalar or an array of times (leading axes)
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    y = jax.random.normal(jax.random.PRNGKey(1), (5, 2))
    model, p0, _ = make(TinyMLP(width=8, out=2), x)
    f = model.bind()
    flow = gradient_flow(ntk(f, p0, x), f(p0, x), y)
    lin = linearise_at(f, p0, x)
    ts = jnp.asarray([[0.0, 0.5, 4.0], [2.0, 30.0, jnp.inf]])
    many = flow_params(lin, flow, ts)
    outputs = flow.predict(ts)
    for leaf, ref in zip(jax.tree_util.tree_leaves(many), jax.tree_util.tree_leaves(p0)):
        assert leaf.shape == ts.shape + ref.shape
    for i in range(ts.shape[0]):
        for j in range(ts.shape[1]):
            one = flow_params(lin, flow, ts[i, j])
            got = jax.tree_util.tree_map(lambda a: a[i, j], many)
            np.testing.assert_allclose(_flat(got), _flat(one), **EXACT)
            np.testing.assert_allclose(linearised_apply(f, p0, got, x), outputs[i, j], rtol=1e-9, atol=1e-10)
    # a list of Python floats works too, and a scalar keeps the parameters' own shapes
    listed = flow_params(lin, flow, [0.5, 4.0])
    np.testing.assert_allclose(_flat(jax.tree_util.tree_map(lambda a: a[1], listed)),
                               _flat(flow_params(lin, flow, 4.0)), **EXACT)
    one = flow_params(lin, flow, 1.0)
    assert jax.tree_util.tree_map(jnp.shape, one) == jax.tree_util.tree_map(jnp.shape, p0)


def test_trainer_is_pure_and_hashable():
    x, y = _data(8, (6,))
    model, p0, _ = make(TinyMLP(), x)
    tr = iterative_linearisation(model, optax.sgd(0.1), 3)
    hash(tr)  # usable as a static argument of jax.jit
    step = jax.jit(tr.step)
    a, _ = step(tr.init(p0), x, y)
    b, _ = step(tr.init(p0), x, y)
    np.testing.assert_array_equal(_flat(a.params), _flat(b.params))
    # no state hides in the trainer: a second run from the same state gives the same numbers
    r1, _ = run(tr, tr.init(p0), x, y, 7)
    r2, _ = run(tr, tr.init(p0), x, y, 7)
    np.testing.assert_array_equal(_flat(r1.params), _flat(r2.params))


def test_blowup_counts_as_divergence_with_the_step():
    x, y = _data(16, (6,))
    model, p0, _ = make(TinyMLP(), x)
    yr = jax.random.normal(jax.random.PRNGKey(0), (16, 3))
    tr = iterative_linearisation(model, optax.sgd(3.0), 1, loss="squared")
    free = fit(tr, tr.init(p0), x, yr, 30, eval_every=10)
    capped = fit(tr, tr.init(p0), x, yr, 30, eval_every=10, blowup=10.0)
    losses = np.asarray(free.history.loss)
    first_bad = int(np.argmax(~(np.abs(losses) <= 10 * losses[0]))) + 1
    assert np.isfinite(losses).all() and first_bad > 1   # finite, but blown up
    assert capped.status == "diverged" and capped.history.diverged_at == first_bad


def test_binary_cross_entropy_trains_evaluates_and_takes_gauss_newton_steps():
    # one output, sigmoid cross-entropy (Ortiz-Jimenez et al.'s binary models): gradient, the
    # Hessian p (1 - p) against autodiff, accuracy by sign, and the kernel GN step = primal
    x, _ = _data(8, (4,))
    labels = jnp.asarray([1, 0, 1, 1, 0, 0, 1, 0])
    model, p0, _ = make(TinyMLP(width=5, out=1), x)
    f = model.bind()
    loss = get_loss("bce")
    out = f(p0, x)
    h = loss.hessian_outputs(out, labels)
    h_ad = jax.hessian(lambda o: loss(o, labels))(out).reshape(8, 8)
    np.testing.assert_allclose(h[:, 0, 0], np.diag(h_ad), **EXACT)
    np.testing.assert_allclose(h_ad - np.diag(np.diag(h_ad)), 0.0, atol=1e-15)
    tr = iterative_linearisation(model, optax.sgd(0.5), 2, loss="bce")
    res = fit(tr, tr.init(p0), x, labels, 6, eval_sets={"train": (x, labels)}, eval_every=3)
    acc = itlin.accuracy(f(res.state.params, x), labels * 2 - 1)
    assert res.history.evals["train/accuracy"][-1] == pytest.approx(float(acc))
    dk, _ = gn.gauss_newton_direction(f, p0, x, labels, loss="bce", damping=0.1)
    dp, _ = gn.gauss_newton_direction(f, p0, x, labels, loss="bce", damping=0.1, method="primal")
    np.testing.assert_allclose(_flat(dk), _flat(dp), rtol=1e-8, atol=1e-10)


def test_ntk_eigh_is_the_float64_spectrum_descending():
    # issue 25: the NTK's eigendecomposition (the Ortiz chapters' targets) is a public function
    x = jax.random.normal(jax.random.PRNGKey(3), (7, 4))
    model, p0, _ = make(TinyMLP(width=6, out=1), x)
    f = model.bind()
    s, v = itlin.ntk_eigh(f, p0, x)
    k = np.asarray(jacobian(f, p0, x), np.float64)
    k = k @ k.T
    ref = np.linalg.eigvalsh(k)[::-1]
    assert s.dtype == np.float64 and v.dtype == np.float64 and s.shape == (7,) and v.shape == (7, 7)
    assert np.all(np.diff(s) <= 0)
    np.testing.assert_allclose(s, ref, rtol=1e-8, atol=1e-10 * ref[0])
    np.testing.assert_allclose(v.T @ v, np.eye(7), atol=1e-10)
    np.testing.assert_allclose(k @ v, v * s, atol=1e-8 * ref[0])
    # kernel_eigh symmetrises and refuses what is not a kernel
    a = np.asarray([[2.0, 1.0 + 1e-9], [1.0 - 1e-9, 2.0]])
    np.testing.assert_allclose(itlin.kernel_eigh(a)[0], [3.0, 1.0], rtol=1e-12)
    with pytest.raises(ValueError, match="square"):
        itlin.kernel_eigh(np.zeros((2, 3)))
