"""Issue 46: inputs that cannot lie, round two. One test per example of the issue: each ends in
the right answer (checked) or a one-line ValueError/TypeError from itlin that names the argument,
raised before any work. The property tests for the validators are in tests/test_properties.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


lin = lambda p, x: x @ p  # noqa: E731
X = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
Y = jnp.asarray([1.0, 0.0, 2.0])


def _mlp(p, x):
    return jnp.tanh(x @ p["w"]) @ p["v"]


def _p1():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {"w": 0.5 * jax.random.normal(k1, (2, 4)), "v": 0.5 * jax.random.normal(k2, (4,))}


# ------------------------------------------------------------------------------ 1. kernels given to the flow
def test_non_symmetric_kernel_is_refused_and_round_off_asymmetry_is_forgiven():
    with pytest.raises(ValueError, match="kernel is not symmetric") as e:
        itlin.gradient_flow(jnp.asarray([[1.0, 5.0], [0.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    # an asymmetry at round-off level is the symmetrised kernel's flow (documented)
    k = jnp.asarray([[2.0, 1.0], [1.0 + 1e-7, 2.0]])
    got = itlin.gradient_flow(k, jnp.zeros(2), jnp.ones(2)).predict(1.0)
    ref = itlin.gradient_flow(0.5 * (k + k.T), jnp.zeros(2), jnp.ones(2)).predict(1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_indefinite_kernel_is_refused_naming_its_negative_eigenvalue():
    with pytest.raises(ValueError, match=r"not positive semi-definite: its smallest eigenvalue is -1 ") as e:
        itlin.gradient_flow(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    # a round-off negative eigenvalue (a computed singular NTK) is taken as 0
    flow = itlin.gradient_flow(jnp.asarray([[1.0, 0.0], [0.0, -1e-9]]), jnp.zeros(2), jnp.ones(2), reduction="sum")
    assert flow.eigenvalues.tolist() == [0.0, 1.0]


def test_nan_kernel_and_nan_targets_are_refused():
    with pytest.raises(ValueError, match="kernel contains 1 non-finite") as e:
        itlin.gradient_flow(jnp.asarray([[jnp.nan, 0.0], [0.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    _one_line(e)
    with pytest.raises(ValueError, match="^y contains"):
        itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.asarray([1.0, jnp.inf]))


def test_negative_or_nan_time_is_refused_and_inf_is_the_limit():
    flow = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), reduction="sum")
    for t in (-1.0, float("nan"), jnp.asarray([1.0, -2.0])):
        with pytest.raises(ValueError, match="t must be >= 0") as e:
            flow.predict(t)
        _one_line(e)
    with pytest.raises(ValueError, match="t must be >= 0"):
        flow.dual(-1.0)
    assert flow.predict(jnp.inf).tolist() == [1.0, 1.0]


def test_empty_problem_is_refused():
    with pytest.raises(ValueError, match="at least one example") as e:
        itlin.gradient_flow(jnp.zeros((0, 0)), jnp.zeros(0), jnp.zeros(0))
    _one_line(e)


def test_test_kernel_of_the_wrong_width_is_refused():
    flow = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2))
    with pytest.raises(ValueError, match=r"k_test_train must be K\(x_test, X\) of shape \(M\*1, 2\)") as e:
        flow.predict(1.0, jnp.ones((1, 3)), jnp.zeros(1))
    _one_line(e)
    with pytest.raises(ValueError, match="f_test0 must hold the 1 test outputs"):
        flow.predict(1.0, jnp.ones((1, 2)), jnp.zeros(2))


def test_flow_params_with_a_flow_of_another_problem_size_is_refused():
    lin3 = itlin.linearise_at(lin, jnp.zeros(2), X)
    flow2 = itlin.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2))
    with pytest.raises(ValueError, match=r"lin's outputs have shape \(3,\), the flow's \(2,\)") as e:
        itlin.flow_params(lin3, flow2, 1.0)
    _one_line(e)


def test_smallest_eigenvalue_of_an_indefinite_matrix_is_refused():
    with pytest.raises(ValueError, match="smallest eigenvalue is -1,") as e:
        itlin.smallest_eigenvalue(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]))
    _one_line(e)
    with pytest.raises(ValueError, match="not symmetric"):
        itlin.smallest_eigenvalue(jnp.asarray([[1.0, 5.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="non-finite"):
        itlin.smallest_eigenvalue(jnp.asarray([[jnp.nan, 0.0], [0.0, 1.0]]))
    assert abs(float(itlin.smallest_eigenvalue(jnp.asarray([[2.0, 1.0], [1.0, 2.0]]))) - 1.0) < 1e-5


# ------------------------------------------------------------------------------ 2. Gauss-Newton solve and damping
def test_cholesky_with_zero_damping_is_refused_up_front():
    x1 = jnp.ones((3, 2))  # rank one: K singular
    with pytest.raises(ValueError, match="solve='cholesky' needs damping > 0") as e:
        itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="cholesky", damping=0.0)
    _one_line(e)
    with pytest.raises(ValueError, match=r"ArbelDamping\(eps0=0\)"):
        itlin.gauss_newton_fit(lin, jnp.zeros(2), x1, jnp.ones(3), 2, solve="cholesky",
                               damping=itlin.ArbelDamping(1.0, 0.0))


def test_cholesky_that_fails_at_round_off_damping_raises_instead_of_nan():
    x1 = jnp.ones((3, 2))
    with pytest.raises(ValueError, match="solve='cholesky' failed") as e:
        itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="cholesky", damping=1e-30)
    _one_line(e)
    # the same damping with eigh is the (damped) minimum-norm step, finite: x1 @ p = 1
    p, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), x1, jnp.ones(3), solve="eigh", damping=1e-30)
    np.testing.assert_allclose(x1 @ p, jnp.ones(3), rtol=1e-5)
    # a damping > 0 with Cholesky is the ridge step
    p, _ = itlin.gauss_newton_step(lin, jnp.zeros(2), jnp.eye(2), jnp.ones(2), solve="cholesky", damping=1.0,
                                   reduction="sum")
    np.testing.assert_allclose(p, [0.5, 0.5], rtol=1e-6)
