"""Property-based tests (hypothesis; issue 26): identities checked on generated problems against
oracles computed independently (a plain optax loop, float64 numpy solves, scipy's matrix
exponential), and the parameter parsers fuzzed.

Fast by default (a few hundred examples in all); ``HYPOTHESIS_PROFILE=thorough`` runs ten times
as many of each.
"""

import dataclasses
import math
import os
import typing

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import itlin

settings.register_profile("fast", deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("thorough", parent=settings.get_profile("fast"))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fast")
settings.load_profile(PROFILE)
#: examples per test: the counts below in the default run, ten times more with the thorough profile
FACTOR = 10 if PROFILE == "thorough" else 1


def examples(n: int):
    return settings(max_examples=n * FACTOR)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _array(draw, shape, lo=-2.0, hi=2.0):
    seed = draw(st.integers(0, 2 ** 31 - 1))
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


# ------------------------------------------------------------------------------ K = 1 is a plain optax loop
OPTIMIZERS = {"sgd": lambda: optax.sgd(0.1), "momentum": lambda: optax.sgd(0.05, momentum=0.9),
              "adam": lambda: optax.adam(0.01)}


def _mlp(p, x):
    return jnp.tanh(x @ p["w"]) @ p["v"]


@examples(6)
@given(data=st.data(), opt=st.sampled_from(sorted(OPTIMIZERS)), reduction=st.sampled_from(["mean", "sum"]),
       loss=st.sampled_from(["squared", "cross_entropy"]), batch_size=st.sampled_from([None, 2, 4]))
def test_K1_equals_a_plain_optax_loop(data, opt, reduction, loss, batch_size):
    n, steps = 8, 6
    x = _array(data.draw, (n, 3))
    p0 = {"w": _array(data.draw, (3, 4), -1, 1), "v": _array(data.draw, (4, 3), -1, 1)}
    if loss == "squared":
        y = _array(data.draw, (n, 3))
    else:
        y = np.asarray(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), np.int32)
    optimizer = OPTIMIZERS[opt]()
    tr = itlin.iterative_linearisation(_mlp, optimizer, 1, loss=loss, reduction=reduction)
    state, log = itlin.run(tr, tr.init(p0), x, y, steps, batch_size=batch_size, seed=3)

    lossf = itlin.get_loss(loss, reduction)
    order = (itlin.batch_indices(3, 0, steps, n, batch_size) if batch_size else [np.arange(n)] * steps)
    p, opt_state, losses = p0, optimizer.init(p0), []
    for idx in order:
        value, grads = jax.value_and_grad(lambda q: lossf(_mlp(q, x[idx]), y[idx]))(p)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        p = optax.apply_updates(p, updates)
        losses.append(float(value))
    np.testing.assert_allclose(log.loss, losses, rtol=1e-10, atol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(state.params), jax.tree_util.tree_leaves(p)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert state.feature_updates == steps


# ------------------------------------------------------------------------------ Gauss-Newton: kernel form = primal
def _linear(p, x):
    return x @ p


def _reference_direction(x, p, y, loss, reduction, lam):
    """``(J^T H J + lam I)^+ J^T g`` in float64 numpy (the primal system, H and g by hand)."""
    n, c = y.shape[0], p.shape[1]
    f = x @ p
    scale = 1.0 / n if reduction == "mean" else 1.0
    if loss == "squared":
        g = scale * (f - y)
        h = [scale * np.eye(c) for _ in range(n)]
    else:
        e = np.exp(f - f.max(1, keepdims=True))
        prob = e / e.sum(1, keepdims=True)
        g = scale * (prob - np.eye(c)[y])
        h = [scale * (np.diag(q) - np.outer(q, q)) for q in prob]
    J = np.zeros((n * c, p.size))  # d f[n, k] / d p[i, k'] = x[n, i] [k == k'] (row-major p)
    for i in range(n):
        for k in range(c):
            J[i * c + k, np.arange(p.shape[0]) * c + k] = x[i]
    H = scipy.linalg.block_diag(*h)
    A = J.T @ H @ J + lam * np.eye(p.size)
    return (np.linalg.pinv(A, rcond=1e-10, hermitian=True) @ (J.T @ g.reshape(-1))).reshape(p.shape), A


@examples(30)
@given(data=st.data(), loss=st.sampled_from(["squared", "cross_entropy"]), reduction=st.sampled_from(["mean", "sum"]),
       solve=st.sampled_from(["eigh", "cholesky"]), lam=st.sampled_from([0.0, 1e-3, 0.5]))
def test_gauss_newton_kernel_form_equals_a_float64_primal_solve(data, loss, reduction, solve, lam):
    assume(not (solve == "cholesky" and lam == 0.0))  # Cholesky needs damping > 0
    n, d, c = 5, 2, 3
    x = _array(data.draw, (n, d))
    p = _array(data.draw, (d, c), -1, 1)
    y = (_array(data.draw, (n, c)) if loss == "squared"
         else np.asarray(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)), np.int32))
    ref, A = _reference_direction(x, p, y, loss, reduction, lam)
    s = np.linalg.eigvalsh(A)
    assume(s[0] > 1e-6 * s[-1])  # well posed in float64: the oracle is then exact to ~1e-10
    d_k, _ = itlin.gauss_newton_direction(_linear, jnp.asarray(p), jnp.asarray(x), jnp.asarray(y), loss=loss,
                                          reduction=reduction, damping=lam, solve=solve)
    np.testing.assert_allclose(d_k, ref, rtol=1e-6, atol=1e-9 * max(1.0, np.abs(ref).max()))


@examples(20)
@given(data=st.data(), loss=st.sampled_from(["squared", "cross_entropy"]),
       alpha=st.floats(0.0, 4.0), eps0=st.floats(1e-6, 1.0))
def test_arbel_damping_gives_the_same_step_for_either_reduction(data, loss, alpha, eps0):
    n, d, c = 4, 3, 3
    x = jnp.asarray(_array(data.draw, (n, d)))
    p = jnp.asarray(_array(data.draw, (d, c), -1, 1))
    y = (jnp.asarray(_array(data.draw, (n, c))) if loss == "squared"
         else jnp.asarray(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)), jnp.int32))
    damping = itlin.ArbelDamping(alpha, eps0)
    d_mean, i_mean = itlin.gauss_newton_direction(_linear, p, x, y, loss=loss, reduction="mean", damping=damping)
    d_sum, i_sum = itlin.gauss_newton_direction(_linear, p, x, y, loss=loss, reduction="sum", damping=damping)
    np.testing.assert_allclose(d_mean, d_sum, rtol=1e-7, atol=1e-10 * max(1.0, float(jnp.abs(d_sum).max())))
    np.testing.assert_allclose(float(i_sum.damping), n * float(i_mean.damping), rtol=1e-9)


# ------------------------------------------------------------------------------ sigma_min without eigh
@examples(30)
@given(data=st.data(), n=st.sampled_from([2, 7, 24, 60]), scale_exp=st.integers(-6, 6),
       zeros=st.integers(0, 3), cluster=st.integers(1, 4), decades=st.floats(0.0, 12.0))
def test_smallest_eigenvalue_equals_float64_eigvalsh_on_random_spectra(data, n, scale_exp, zeros, cluster, decades):
    # a spectrum spread over `decades` decades, some exact zeros (singular PSD) and a cluster of
    # nearly tied smallest non-zero eigenvalues; oracle: float64 eigvalsh of the same matrix.
    # Tolerance: each is backward stable, within n eps ||a|| of the exact value, so within twice
    # that of each other (tests/test_eigmin.py).
    zeros, cluster = min(zeros, n - 1), min(cluster, n)
    logs = _array(data.draw, (n,), -decades, 0.0)
    s = 10.0 ** logs
    s[:cluster] = s.min() * (1.0 + 1e-10 * np.arange(cluster))
    s[:zeros] = 0.0
    s = 10.0 ** scale_exp * s
    q, _ = np.linalg.qr(_array(data.draw, (n, n)))
    a = (q * s) @ q.T
    a = 0.5 * (a + a.T)
    got = float(itlin.smallest_eigenvalue(jnp.asarray(a)))
    ref = np.linalg.eigvalsh(a)[0]
    assert abs(got - ref) <= 2 * n * np.finfo(np.float64).eps * np.linalg.norm(a, 2), (got, ref)


# ------------------------------------------------------------------------------ the flow: expm and the limit
@examples(25)
@given(data=st.data(), m=st.integers(1, 6), rank=st.integers(1, 6), reduction=st.sampled_from(["mean", "sum"]),
       t=st.floats(0.0, 50.0))
def test_flow_equals_expm_and_the_pseudo_inverse_limit(data, m, rank, reduction, t):
    rank = min(rank, m)  # rank < m: a singular kernel
    a = _array(data.draw, (m, rank))
    kernel = a @ a.T
    s = np.linalg.eigvalsh(kernel)
    assume(s[-rank] > 1e-6 * s[-1])  # the kernel's rank is clear in float64
    f0, y = _array(data.draw, (m,)), _array(data.draw, (m,))
    flow = itlin.gradient_flow(jnp.asarray(kernel), jnp.asarray(f0), jnp.asarray(y), reduction=reduction)
    r = 1.0 / m if reduction == "mean" else 1.0
    expected = y + scipy.linalg.expm(-r * t * kernel) @ (f0 - y)
    np.testing.assert_allclose(flow.predict(t), expected, rtol=1e-8, atol=1e-9)
    # t = inf: the residual's part outside the kernel's range is left, the rest fitted
    proj = kernel @ np.linalg.pinv(kernel, rcond=1e-10, hermitian=True)
    limit = y + (np.eye(m) - proj) @ (f0 - y)
    np.testing.assert_allclose(flow.predict(jnp.inf), limit, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(flow.dual(jnp.inf), np.linalg.pinv(kernel, rcond=1e-10, hermitian=True) @ (f0 - y),
                               rtol=1e-6, atol=1e-7 * max(1.0, float(np.abs(flow.dual(jnp.inf)).max())))


# ------------------------------------------------------------------------------ parsers: only ValueError
NUMBERS = st.one_of(st.integers(-10 ** 30, 10 ** 30), st.floats(allow_nan=True, allow_infinity=True),
                    st.just(10 ** 400), st.just(-10 ** 400))
WORDS = st.one_of(st.text(max_size=12), st.sampled_from(["inf", "+Inf", "never", "-inf", "nan", "1e999", "1e3",
                                                          "2.5", "0", " 7 ", "[1, inf]", "[]", "[1e-3, inf]",
                                                          "tiny", "paper", "None", "True", "'inf'"]))


@examples(150)
@given(value=st.one_of(NUMBERS, WORDS, NUMBERS.map(str)))
def test_parse_period_raises_only_value_errors_on_strings_and_numbers(value):
    try:
        K = itlin.parse_period(value)
    except ValueError as err:
        assert str(err) and "\n" not in str(err)
        return
    assert K == math.inf or (isinstance(K, int) and 1 <= K <= 2 ** 31 - 1)


def _fields():
    from itlin.book import experiments as E

    out = []
    for name in E.names():
        cls = E.get(name).params
        hints = typing.get_type_hints(cls)
        out += [(name, f.name, hints[f.name], f.metadata) for f in dataclasses.fields(cls)]
    return out


FIELDS = _fields()


@examples(150)
@given(field=st.sampled_from(FIELDS),
       value=st.one_of(NUMBERS, WORDS, st.booleans(), st.none(), st.lists(st.one_of(NUMBERS, WORDS), max_size=3)))
def test_every_chapter_parameter_parser_raises_only_value_errors(field, value):
    from itlin.book import experiments as E

    experiment, name, tp, meta = field
    try:
        E.coerce(name, tp, value, meta)
    except ValueError as err:  # ParameterError is a ValueError
        assert str(err) and "\n" not in str(err)
    try:
        E.get(experiment).params.from_dict({name: value}, experiment=experiment)
    except ValueError as err:
        assert str(err) and "\n" not in str(err)


# ------------------------------------------------------------------------------ issue 46: the kernel validators
KERNEL_KINDS = ("psd", "singular", "indefinite", "asymmetric", "round_off_asymmetric", "nan")
KERNEL_DTYPES = ("float64", "float32", "int32", "complex64")


def _kernel(draw):
    """A kernel of a generated kind and dtype, its float64 value and whether the flow must take it."""
    n = draw(st.integers(1, 4))
    kind, dtype = draw(st.sampled_from(KERNEL_KINDS)), draw(st.sampled_from(KERNEL_DTYPES))
    a = _array(draw, (n, n))
    if dtype == "int32":
        a = np.round(2 * a)
    k = {"psd": a @ a.T + 0.5 * np.eye(n), "singular": a[:, :1] @ a[:, :1].T, "indefinite": 0.5 * (a + a.T),
         "asymmetric": a @ a.T + np.triu(np.ones((n, n)), 1), "round_off_asymmetric": a @ a.T + 1e-13 * np.triu(a, 1),
         "nan": a @ a.T}[kind]
    if kind == "nan":
        k = k.copy()
        k[0, -1] = np.nan
    kernel = jnp.asarray(k.astype({"float64": np.float64, "float32": np.float32, "int32": np.int32,
                                   "complex64": np.complex64}[dtype]) if kind != "nan" or dtype != "int32" else k)
    must_accept = kind in ("psd", "singular", "round_off_asymmetric") and dtype in ("float64", "float32") and (
        kind != "round_off_asymmetric" or dtype == "float64")
    must_refuse = kind in ("nan", "asymmetric") or dtype == "complex64"
    if kind == "asymmetric" and n == 1:
        must_refuse = dtype == "complex64"
    return kernel, np.asarray(kernel, np.complex128).real if dtype == "complex64" else np.asarray(kernel, np.float64), \
        must_accept, must_refuse


@examples(60)
@given(data=st.data(), t=st.sampled_from([0.0, 0.3, 2.0, math.inf]), reduction=st.sampled_from(["mean", "sum"]))
def test_the_flow_on_any_kernel_is_right_or_refused_in_one_line(data, t, reduction):
    kernel, k, must_accept, must_refuse = _kernel(data.draw)
    n = k.shape[0]
    f0, y = _array(data.draw, (n,)), _array(data.draw, (n,))
    try:
        flow = itlin.gradient_flow(kernel, f0, y, reduction=reduction)
        got = np.asarray(flow.predict(t), np.float64)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        assert not must_accept, (str(err), k)
        return
    assert not must_refuse, k
    # the float64 reference: Eq. 14 on (K + K^T) / 2 with round-off negative eigenvalues at 0
    s, v = np.linalg.eigh(0.5 * (k + k.T))
    s = np.clip(s, 0.0, None)
    r = 1.0 / n if reduction == "mean" else 1.0
    if math.isinf(t):
        decay = np.where(s > s.max() * n * np.finfo(np.asarray(flow.eigenvalues).dtype).eps, 0.0, 1.0)
    else:
        decay = np.exp(-r * s * t)
    want = y + v @ (decay * (v.T @ (f0 - y)))
    scale = 1.0 + np.max(np.abs(f0 - y))
    eps = np.finfo(np.asarray(flow.eigenvalues).dtype).eps
    np.testing.assert_allclose(got, want, atol=1e4 * eps * scale * max(1.0, np.max(np.abs(s)) * 10), rtol=0)


@examples(60)
@given(data=st.data())
def test_smallest_eigenvalue_of_any_matrix_is_right_or_refused_in_one_line(data):
    kernel, k, must_accept, must_refuse = _kernel(data.draw)
    try:
        got = float(itlin.smallest_eigenvalue(kernel))
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        assert not must_accept, (str(err), k)
        return
    assert not must_refuse, k
    ref = float(np.linalg.eigvalsh(0.5 * (k + k.T))[0])
    eps = np.finfo(np.float32 if kernel.dtype == jnp.float32 else np.float64).eps
    assert abs(got - ref) <= 100 * k.shape[0] * eps * (1.0 + np.max(np.abs(k))), (got, ref)


@examples(40)
@given(data=st.data(), x_dtype=st.sampled_from(["float64", "float32", "int32", "complex64"]),
       p_dtype=st.sampled_from(["float64", "float32", "int32", "complex64"]), d2=st.integers(1, 3))
def test_ntk_and_the_flow_params_of_any_dtype_and_shape_are_right_or_refused(data, x_dtype, p_dtype, d2):
    n, d = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    x = jnp.asarray(np.round(4 * _array(data.draw, (n, d))).astype(x_dtype))
    x2 = jnp.asarray(_array(data.draw, (2, d2)))
    p = jnp.zeros(d, p_dtype)
    f = lambda p, x: x @ p
    try:
        k = itlin.ntk(f, p, x, x2)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        assert d2 != d or "complex64" in (x_dtype, p_dtype) or p_dtype == "int32", str(err)
    else:
        assert d2 == d and "complex64" not in (x_dtype, p_dtype) and p_dtype != "int32"
        np.testing.assert_allclose(np.asarray(k, np.float64), np.asarray(x, np.float64) @ np.asarray(x2).T,
                                   rtol=1e-5, atol=1e-5)
    if "complex64" in (x_dtype, p_dtype) or p_dtype == "int32":
        return
    xf = jnp.asarray(x, p.dtype)
    lin = itlin.linearise_at(f, p, xf)
    m = data.draw(st.integers(1, 3))
    y = jnp.asarray(_array(data.draw, (m,)))
    kernel = np.asarray(xf, np.float64) @ np.asarray(xf, np.float64).T
    try:
        flow = itlin.gradient_flow(jnp.eye(m) if m != n else jnp.asarray(kernel), jnp.zeros(m), y, reduction="sum")
        params = itlin.flow_params(lin, flow, math.inf)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        assert m != n, str(err)
        return
    assert m == n
    # the limit is the minimum-norm least-squares solution
    want = np.linalg.pinv(np.asarray(xf, np.float64), rcond=1e-10) @ np.asarray(y)
    np.testing.assert_allclose(np.asarray(params, np.float64), want, atol=1e-3 * (1 + np.max(np.abs(want))))
