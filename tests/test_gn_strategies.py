"""Gauss-Newton's parts as strategy objects (issue 47, item 2): the short forms (strings) give
bit-identical directions, infos and traces to the objects they stand for; bad values and
combinations are one-line errors naming the fix; ``GNTrace.result`` tells converged from
max_steps from diverged; the one divergence test keeps each caller's floor."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin
from itlin import (ArbelDamping, Cholesky, Eigh, Eigvalsh, GNResult, IdentityHessian, InverseSquaring, KernelForm,
                   LossHessian, PrimalForm, gauss_newton_direction, gauss_newton_fit)
from itlin.core._divergence import diverged
from itlin.metrics import blown_up


def _net(p, x):
    return jnp.tanh(x @ p["w"]) @ p["v"]


def _problem(loss, dtype):
    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    c = 1 if loss == "squared" else 3
    x = jax.random.normal(k1, (5, 3), dtype)
    p = {"w": 0.7 * jax.random.normal(k2, (3, 4), dtype), "v": 0.5 * jax.random.normal(k3, (4, c), dtype)}
    y = jax.random.normal(k4, (5, 1), dtype) if loss == "squared" else jnp.asarray([0, 2, 1, 1, 0])
    return p, x, y


SHORT = [  # (short-form keywords, object keywords)
    (dict(solve="eigh", method="kernel"), dict(solve=Eigh(), form=KernelForm())),
    (dict(solve="eigh", method="primal"), dict(solve=Eigh(), form=PrimalForm())),
    (dict(solve="cholesky", method="kernel"), dict(solve=Cholesky(), form=KernelForm())),
    (dict(solve="cholesky", method="primal"), dict(solve=Cholesky(), form=PrimalForm())),
    (dict(solve="cholesky", eigmin="eigvalsh", hessian="loss"), dict(solve=Cholesky(eigmin=Eigvalsh()),
                                                                     hessian=LossHessian())),
    (dict(solve="eigh", hessian="identity"), dict(solve=Eigh(), hessian=IdentityHessian())),
]


def _same(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        assert np.array_equal(u, v, equal_nan=True), (u, v)


@pytest.mark.parametrize("loss", ["squared", "cross_entropy"])
@pytest.mark.parametrize("damping", [0.3, ArbelDamping(1.0, 1e-3)])
@pytest.mark.parametrize("short,obj", SHORT)
def test_short_forms_and_objects_give_bit_identical_directions_and_traces(loss, damping, short, obj):
    p, x, y = _problem(loss, jnp.float32)
    d_s, i_s = gauss_newton_direction(_net, p, x, y, loss=loss, damping=damping, **short)
    d_o, i_o = gauss_newton_direction(_net, p, x, y, loss=loss, damping=damping, **obj)
    _same((d_s, i_s), (d_o, i_o))
    q_s, t_s = gauss_newton_fit(_net, p, x, y, 4, learning_rate=0.5, loss=loss, damping=damping, tol=1e-9,
                                blowup=1e6, **short)
    q_o, t_o = gauss_newton_fit(_net, p, x, y, 4, learning_rate=0.5, loss=loss, damping=damping, tol=1e-9,
                                blowup=1e6, **obj)
    _same((q_s, t_s), (q_o, t_o))


def test_inverse_squaring_short_form_is_the_object():
    p, x, y = _problem("squared", jnp.float32)
    arbel = ArbelDamping(1.0, 1e-3)
    a = gauss_newton_direction(_net, p, x, y, damping=arbel, solve="cholesky", eigmin="inverse_squaring")
    b = gauss_newton_direction(_net, p, x, y, damping=arbel, solve=Cholesky(eigmin=InverseSquaring()))
    _same(a, b)


def test_bad_strategies_are_one_line_errors_naming_the_fix():
    p, x, y = _problem("squared", jnp.float32)
    cases = [
        (dict(solve="lu"), r"solve must be 'eigh' .* or pass the object: Eigh\(\) or Cholesky"),
        (dict(solve=Eigvalsh()), r"solve must be .* got Eigvalsh\(\); or pass the object: Eigh\(\)"),
        (dict(hessian="ones"), r"hessian must be 'loss' or 'identity', got 'ones'; .*IdentityHessian\(\)"),
        (dict(form="dual"), r"method must be 'kernel' or 'primal', got 'dual'; .*form=PrimalForm\(\)"),
        (dict(form=PrimalForm(), method="kernel"), r"not both"),
        (dict(solve=Eigh(), eigmin=InverseSquaring()), r"is for solve='cholesky'.*drop eigmin"),
        (dict(solve=Cholesky(eigmin=InverseSquaring()), eigmin="eigvalsh"), r"pass eigmin inside the solve"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            gauss_newton_direction(_net, p, x, y, damping=0.1, **kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"squarings must be None or an integer >= 1"):
        InverseSquaring(squarings=0)
    with pytest.raises(ValueError, match=r"Cholesky's eigmin must be Eigvalsh\(\) or InverseSquaring\(\)"):
        Cholesky(eigmin="inverse_squaring")
    # an object combination that cannot apply is refused as before (cross-entropy's null space)
    pc, xc, yc = _problem("cross_entropy", jnp.float32)
    with pytest.raises(ValueError, match=r"needs a Hessian c\*I"):
        gauss_newton_direction(_net, pc, xc, yc, loss="cross_entropy", damping=ArbelDamping(),
                               solve=Cholesky(eigmin=InverseSquaring()))


def test_strategies_are_distinct_static_arguments():
    """Empty NamedTuples would compare equal; these must not (they key jit's cache)."""
    assert LossHessian() != IdentityHessian() and KernelForm() != PrimalForm() and Eigh() != Cholesky()
    assert len({LossHessian(), IdentityHessian(), KernelForm(), PrimalForm(), Eigh(), Cholesky(), Eigvalsh()}) == 7
    p, x, y = _problem("squared", jnp.float32)
    a, _ = gauss_newton_direction(_net, p, x, y, damping=0.1, hessian=LossHessian())
    b, _ = gauss_newton_direction(_net, p, x, y, damping=0.1, hessian=IdentityHessian())
    assert not np.allclose(a["v"], b["v"])  # c = 1/5 against c = 1


def test_gn_result_codes():
    f = lambda p, x: x @ p  # noqa: E731
    x, y = jnp.eye(2), jnp.ones(2)
    _, t = gauss_newton_fit(f, jnp.zeros(2), x, y, 4, tol=1e-12)
    assert GNResult(int(t.result)) is GNResult.converged and int(t.steps) == 1
    _, t = gauss_newton_fit(f, jnp.zeros(2), x, y, 3, learning_rate=0.5)
    assert GNResult(int(t.result)) is GNResult.max_steps and int(t.steps) == 3 and not bool(t.diverged)
    _, t = gauss_newton_fit(f, jnp.zeros(2), x, y, 5, learning_rate=5.0, blowup=2.0)
    assert GNResult(int(t.result)) is GNResult.diverged and bool(t.diverged)
    # vmapped: one code per run
    fit = jax.vmap(lambda lr: gauss_newton_fit(f, jnp.zeros(2), x, y, 3, learning_rate=lr, tol=1e-12,
                                               blowup=2.0)[1].result)
    assert [GNResult(int(c)) for c in fit(jnp.asarray([1.0, 0.5, 5.0]))] == [
        GNResult.converged, GNResult.max_steps, GNResult.diverged]
    assert "GNResult" in itlin.__all__


def test_one_divergence_test_keeps_each_floor():
    loss = np.array([1.0, 5.0, np.inf, 50.0])
    assert diverged(loss).tolist() == [False, False, True, False]
    assert diverged(loss, 1.0, 10.0).tolist() == [False, False, True, True]
    # the floor: a reference of 0 blows up against any positive loss unless floored
    assert diverged(np.array([1e-35]), 0.0, 10.0, floor=1e-30).tolist() == [False]
    assert diverged(np.array([1e-35]), 0.0, 10.0).tolist() == [True]
    # jnp in, jnp out (jittable, traced factor)
    out = jax.jit(lambda v, b: diverged(v, jnp.asarray(1.0), b, floor=1e-30))(jnp.asarray([1.0, 3.0]), 2.0)
    assert isinstance(out, jax.Array) and out.tolist() == [False, True]
    # metrics.blown_up is the same test on squared RMSE traces, NaN = not recorded
    assert blown_up(np.array([[1.0, 5.0, 0.1], [1.0, 11.0, 0.1], [1.0, np.inf, np.nan]]), 100.0).tolist() == [
        False, True, True]
