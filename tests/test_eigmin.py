"""``sigma_min`` without an eigendecomposition (``itlin.smallest_eigenvalue``, the
``eigmin="inverse_squaring"`` option of the Cholesky Gauss-Newton step), against float64
``numpy.linalg.eigvalsh`` as the oracle.

Tolerances come from the float64 error analysis, not from what the runs happen to give: the
method's answer is a Rayleigh quotient ``tr(a B)`` on the original ``a`` with ``B`` (almost) the
projector on the smallest eigenvector of ``a + delta``, where ``delta`` is the backward error of
the Cholesky factorisation and of ``a``'s own rounding, ``O(n eps ||a||)``. A dense ``eigvalsh``
has an error of the same order. Taking each within ``n eps ||a||_2`` of the exact eigenvalue of
the stored matrix, the two agree within ``2 n eps ||a||_2`` in absolute terms, whatever the
conditioning (for ``cond(a) = 1e12`` and ``n = 200`` that is a *relative* tolerance of ~0.1 on
``sigma_min``; it is the right one, a backward-stable eigensolver promises no more). The runs
below stay far inside it (about 1% of it at ``n = 500``).
"""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import itlin
from itlin import ArbelDamping, gauss_newton_fit, gauss_newton_step, smallest_eigenvalue

EPS64 = np.finfo(np.float64).eps


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _psd(spectrum, seed=0):
    """``Q diag(s) Q^T`` with a random orthogonal ``Q`` (float64, exactly symmetric)."""
    s = np.asarray(spectrum, np.float64)
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((s.size, s.size)))
    a = (q * s) @ q.T
    return 0.5 * (a + a.T)


def _tolerance(a, eps=EPS64):
    """Each method within ``n eps ||a||`` of the exact value: within twice that of each other."""
    return 2 * a.shape[0] * eps * np.linalg.norm(a, 2)


_eigmin = jax.jit(smallest_eigenvalue)
N = 200
rng = np.random.default_rng(0)
SPECTRA = {
    "separated": np.linspace(1.0, 10.0, N),
    # three eigenvalues within a relative 1e-10 of each other, then a gap
    "clustered": np.r_[1.0, 1.0 + 1e-10, 1.0 + 2e-10, np.linspace(2.0, 10.0, N - 3)],
    "tied": np.r_[np.full(5, 0.5), np.linspace(1.0, 10.0, N - 5)],
    # every eigenvalue within a relative 1e-11 or 1e-13: gaps the squarings cannot separate (below
    # 2^-40), so the default squaring count must reach the dtype's eps
    "nearly_flat_1e-11": 1.0 + 1e-11 * np.linspace(0.0, 1.0, N),
    "nearly_flat_1e-13": 1.0 + 1e-13 * np.linspace(0.0, 1.0, N),
    "ill_conditioned_1e10": np.logspace(-10, 0, N),
    "ill_conditioned_1e12": np.logspace(-12, 0, N),
    "large_scale": 1e8 * np.linspace(1.0, 10.0, N),
    "small_scale": 1e-8 * np.linspace(1.0, 10.0, N),
}
SINGULAR = {
    "rank_one": np.r_[np.zeros(N - 1), 5.0],
    "rank_deficient": np.r_[np.zeros(40), rng.uniform(0.1, 10.0, N - 40)],
    "one_zero": np.r_[0.0, np.linspace(1.0, 10.0, N - 1)],
}


@pytest.mark.parametrize("name", sorted(SPECTRA))
def test_smallest_eigenvalue_equals_float64_eigvalsh(name):
    a = _psd(SPECTRA[name])
    got = float(_eigmin(jnp.asarray(a)))
    ref = np.linalg.eigvalsh(a)[0]
    assert abs(got - ref) <= _tolerance(a), (got, ref, _tolerance(a))


@pytest.mark.parametrize("name", sorted(SINGULAR))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_singular_psd_gives_zero_within_rounding_and_no_nan(name, seed):
    # the shift n eps tr(a) makes the factorisation exist; the Rayleigh quotient on a is unbiased
    a = _psd(SINGULAR[name], seed)
    got = float(_eigmin(jnp.asarray(a)))
    assert np.isfinite(got)
    assert abs(got) <= _tolerance(a)
    assert abs(got - np.linalg.eigvalsh(a)[0]) <= _tolerance(a)


def test_zero_matrix_and_float32():
    assert float(_eigmin(jnp.zeros((4, 4)))) == 0.0
    # float32: the same analysis with float32's epsilon; the oracle is float64 on the rounded matrix
    a32 = _psd(np.linspace(1.0, 10.0, 100)).astype(np.float32)
    got = _eigmin(jnp.asarray(a32))
    assert got.dtype == jnp.float32
    ref = np.linalg.eigvalsh(a32.astype(np.float64))[0]
    assert abs(float(got) - ref) <= _tolerance(a32.astype(np.float64), np.finfo(np.float32).eps)


@pytest.mark.parametrize("squarings", [10, 20, 30, 40])
@pytest.mark.parametrize("width", [1e-4, 1e-8, 1e-11])
def test_fewer_squarings_stay_within_the_documented_bound(squarings, width):
    # the docstring's bound: an eigenvalue s_1 (1 + d) moves the Rayleigh quotient by at most
    # d exp(-d 2^k) s_1 <= 2^-k s_1 / e, so |error| <= (n - 1) 2^-k s_1 / e + the rounding tolerance
    n = 60
    s = 1.0 + width * np.random.default_rng(3).uniform(0.0, 1.0, n)
    a = _psd(s, seed=4)
    ref = np.linalg.eigvalsh(a)[0]
    got = float(smallest_eigenvalue(jnp.asarray(a), squarings))
    bound = (n - 1) * 2.0 ** -squarings * ref / np.e + _tolerance(a)
    assert abs(got - ref) <= bound, (got, ref, bound)


def test_default_squarings_follow_the_dtype():
    # 2^-k <= eps: float64 53 squarings, float32 24; a nearly flat spectrum then meets the
    # rounding tolerance in both precisions
    a = _psd(1.0 + 1e-13 * np.linspace(0.0, 1.0, 7), seed=5)
    for dtype, eps in ((np.float64, EPS64), (np.float32, np.finfo(np.float32).eps)):
        x = a.astype(dtype)
        assert float(smallest_eigenvalue(jnp.asarray(x))) == float(smallest_eigenvalue(jnp.asarray(x),
                                                                                      np.finfo(dtype).nmant + 1))
        ref = np.linalg.eigvalsh(x.astype(np.float64))[0]
        assert abs(float(smallest_eigenvalue(jnp.asarray(x))) - ref) <= _tolerance(x.astype(np.float64), eps)


def test_vmap_and_squarings():
    batch = np.stack([_psd(SPECTRA["separated"], s)[:50, :50] for s in range(3)])
    got = jax.vmap(smallest_eigenvalue)(jnp.asarray(batch))
    for a, g in zip(batch, np.asarray(got)):
        assert abs(g - np.linalg.eigvalsh(a)[0]) <= _tolerance(a)
    with pytest.raises(ValueError, match="squarings must be None or an integer >= 1, got 0"):
        smallest_eigenvalue(jnp.eye(2), squarings=0)
    with pytest.raises(ValueError, match="a must be a square matrix"):
        smallest_eigenvalue(jnp.ones((2, 3)))


# ------------------------------------------------------------------------------ the Gauss-Newton step
def _mean_field_problem(n=60, width=300):
    """benchmarks/run.py's _bench_gauss_newton problem, small: a non-zero readout as after a few steps."""
    from itlin import data, models

    ds = data.teacher_student(n_train=n, n_test=10)
    x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
    model = models.mean_field(width=width, tau0=1.0)
    p0, _ = model.init(jax.random.PRNGKey(0), x[:2])
    p0 = {"u": jnp.asarray(p0["u"], jnp.float64),
          "v": 0.1 * jax.random.normal(jax.random.PRNGKey(1), p0["v"].shape, jnp.float64)}
    return model.bind(), p0, x, y, (lambda p, xx: models.mean_field_ntk(p, xx))


def _rel(a, b, origin):
    fa, fb, f0 = (jax.flatten_util.ravel_pytree(t)[0] for t in (a, b, origin))
    return float(jnp.linalg.norm(fa - fb) / jnp.linalg.norm(fa - f0))


CONFIGS = {"eigh": dict(solve="eigh"), "cholesky": dict(solve="cholesky"),
           "inverse_squaring": dict(solve="cholesky", eigmin="inverse_squaring")}


@pytest.mark.parametrize("hessian", ["identity", "loss"])
def test_gauss_newton_step_with_inverse_squaring_equals_eigh(hessian):
    f, p0, x, y, ntk_fn = _mean_field_problem()
    damping = ArbelDamping(alpha=1.0, eps0=1e-7)
    out = {name: gauss_newton_step(f, p0, x, y, damping=damping, hessian=hessian, ntk_fn=ntk_fn, **kw)
           for name, kw in CONFIGS.items()}
    # sigma_min itself, against the float64 oracle on the system solved (c K)
    kernel = np.asarray(ntk_fn(p0, x))
    c = 1.0 if hessian == "identity" else 1.0 / x.shape[0]
    system = c * 0.5 * (kernel + kernel.T)
    ref = np.linalg.eigvalsh(system)[0]
    assert ref > 1e-7 * c  # the alpha * sigma_min branch of the damping is what is tested
    for name, (_, info) in out.items():
        assert abs(float(info.eigmin) - ref) <= _tolerance(system), name
    # the steps: within 1e-10 relative (the solves' rounding, about cond(c K + lambda I) eps)
    for name in ("cholesky", "inverse_squaring"):
        assert _rel(out[name][0], out["eigh"][0], p0) < 1e-10, name
    assert _rel(out["inverse_squaring"][0], out["cholesky"][0], p0) < 1e-10


def test_gauss_newton_inverse_squaring_under_vmap_over_damping_and_in_fit():
    f, p0, x, y, ntk_fn = _mean_field_problem()
    alphas = jnp.asarray([1.0, 0.25])

    def step(alpha, **kw):
        return gauss_newton_step(f, p0, x, y, damping=ArbelDamping(alpha, 1e-7), hessian="identity", ntk_fn=ntk_fn,
                                 **kw)[0]

    batched = jax.vmap(lambda a: step(a, solve="cholesky", eigmin="inverse_squaring"))(alphas)
    for i, alpha in enumerate(np.asarray(alphas)):
        one = jax.tree_util.tree_map(lambda t: t[i], batched)
        assert _rel(one, step(float(alpha), solve="eigh"), p0) < 1e-10
    # gauss_newton_fit forwards the option: the same trajectory as eigvalsh
    fits = [gauss_newton_fit(f, p0, x, y, 3, damping=ArbelDamping(1.0, 1e-7), hessian="identity", ntk_fn=ntk_fn,
                             solve="cholesky", eigmin=e) for e in ("eigvalsh", "inverse_squaring")]
    np.testing.assert_allclose(fits[0][1].loss, fits[1][1].loss, rtol=1e-10)
    assert _rel(fits[0][0], fits[1][0], p0) < 1e-10


def test_smallest_eigenvalue_is_public():
    assert "smallest_eigenvalue" in itlin.__all__ and itlin.smallest_eigenvalue is smallest_eigenvalue
