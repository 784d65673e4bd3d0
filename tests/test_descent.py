"""The library's one descent loop (``itlin.core.gauss_newton.Descent``, issue 47 item 2): its result
codes on constructed problems, the rollback of a diverged step, the stop rules' comparisons, runs
in segments, and the gradient direction against a hand-written gradient descent."""

import jax
import jax.numpy as jnp
import numpy as np

from itlin import gauss_newton_direction, gauss_newton_fit
from itlin.core.gauss_newton import (Descent, DescentState, GaussNewtonDirection, GNResult, GradientDirection,
                                     Stop)


def _code(state):
    return GNResult(int(state.result))


def _linear():
    x = jnp.asarray([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0]])
    return (lambda p, x: x @ p), x, jnp.asarray([3.0, -1.0])


def test_linear_least_squares_converges_in_one_gauss_newton_step():
    f, x, y = _linear()
    loop = Descent(GaussNewtonDirection(f, x, y), 1.0, Stop(tol=1e-10))
    s = loop.run(loop.init(jnp.zeros(3), record=5), 5)
    assert _code(s) is GNResult.converged and int(s.step) == 1
    np.testing.assert_allclose(x @ s.params, y, atol=1e-5)          # the minimum-norm interpolant
    assert float(s.losses[0]) > 0 and float(s.losses[1]) < 1e-10 and np.isnan(np.asarray(s.losses[2:])).all()


def test_a_budget_that_runs_out_is_max_steps():
    f, x, y = _linear()
    loop = Descent(GaussNewtonDirection(f, x, y), 0.5, Stop(tol=1e-10))
    s = loop.run(loop.init(jnp.zeros(3)), 4)
    assert _code(s) is GNResult.max_steps and int(s.step) == 4 and s.losses is None
    # a stopped run is returned as it is: running it further changes nothing
    done = Descent(GaussNewtonDirection(f, x, y), 1.0, Stop(tol=1e-10))
    s = done.run(done.init(jnp.zeros(3)), 5)
    again = done.run(s, 9)
    assert all(bool(jnp.all(a == b)) for a, b in zip(jax.tree_util.tree_leaves(s), jax.tree_util.tree_leaves(again)))


def test_a_blow_up_is_diverged_with_the_parameters_before_the_bad_step():
    # GD on 0.5 p^2 with step 3: p -> -2 p, the loss x4 a step: 0.5, 2, 8 > 10 x 0.5 at step 2
    loop = Descent(GradientDirection(lambda p: 0.5 * jnp.sum(p ** 2)), 3.0, Stop(blowup=10.0))
    s = loop.run(loop.init(jnp.asarray([1.0]), record=6), 6)
    assert _code(s) is GNResult.diverged and int(s.step) == 1
    assert s.params.tolist() == [-2.0]                       # back to step 1's parameters, exactly
    assert s.losses.tolist()[:3] == [0.5, 2.0, 8.0] and np.isnan(np.asarray(s.losses[3:])).all()
    # the same through gauss_newton_fit: loss 0.5 -> 40.5 -> 3280.5 > 100 x 0.5
    f, x, y = (lambda p, x: x @ p), jnp.eye(2), jnp.asarray([1.0, -1.0])
    p, trace = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=30.0, damping=1.0, blowup=100.0)
    d, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, damping=1.0)
    assert bool(trace.diverged) and GNResult(int(trace.result)) is GNResult.diverged and int(trace.steps) == 1
    assert np.array_equal(p, jnp.zeros(2) - 30.0 * d)        # the parameters of step 1, not the blown ones
    np.testing.assert_allclose(trace.loss[:3], [0.5, 40.5, 3280.5], rtol=1e-5)


def test_a_non_finite_step_is_diverged_and_not_taken():
    loop = Descent(GradientDirection(lambda p: jnp.sum(jnp.sqrt(jnp.abs(p)))), 0.1)
    s = loop.run(loop.init(jnp.asarray([0.0, 1.0])), 5)      # the gradient at 0 is not finite
    assert _code(s) is GNResult.diverged and int(s.step) == 0 and s.params.tolist() == [0.0, 1.0]


def test_the_stop_rules_compare_as_documented():
    flat = GradientDirection(lambda p: jnp.sum(0.0 * p) + 1.0)  # the loss is 1 everywhere
    absolute = Descent(flat, 1.0, Stop(tol=1.0))              # 1 < 1 is false: never converged
    assert _code(absolute.run(absolute.init(jnp.zeros(1)), 3)) is GNResult.max_steps
    relative = Descent(flat, 1.0, Stop(rtol=1.0))             # 1 <= 1 x first: converged at once
    s = relative.run(relative.init(jnp.zeros(1)), 3)
    assert _code(s) is GNResult.converged and int(s.step) == 0 and float(s.first) == 1.0
    # ``first`` given to init is the reference of the relative rule and of blowup
    s = relative.run(relative.init(jnp.zeros(1), jnp.asarray(0.5)), 3)
    assert _code(s) is GNResult.max_steps and int(s.step) == 3
    blown = Descent(flat, 1.0, Stop(blowup=1.5))
    assert _code(blown.run(blown.init(jnp.zeros(1), jnp.asarray(0.5)), 3)) is GNResult.diverged


def test_running_in_segments_is_running_at_once():
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        x, y = jnp.asarray(rng.normal(size=(6, 4))), jnp.asarray(0.5 * rng.normal(size=6))
        f = lambda p, x: jnp.tanh(x @ p)  # noqa: E731
        for direction, lr in ((GaussNewtonDirection(f, x, y, damping=1e-3), 0.5),
                              (GradientDirection(lambda p: 0.5 * jnp.mean((f(p, x) - y) ** 2)), 0.3)):
            loop = Descent(direction, lr, Stop(rtol=1e-12, blowup=1e3))
            s0 = loop.init(0.1 * jnp.ones(4), record=7)
            whole = loop.run(s0, 7)
            parts = loop.run(loop.run(s0, 3), 7)
            assert int(whole.step) == 7 and _code(whole) is GNResult.max_steps
            for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(parts)):
                assert np.array_equal(a, b, equal_nan=True)
            # and under jit, with a traced checkpoint, as Arbel's engine runs it
            seg = jax.jit(lambda s, until: loop.run(s, until))
            jitted = seg(seg(s0, jnp.int32(3)), jnp.int32(7))
            np.testing.assert_allclose(jitted.params, whole.params, rtol=1e-12)


def test_the_gradient_direction_is_plain_gradient_descent_in_float64():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        x, y = jnp.asarray(rng.normal(size=(5, 3))), jnp.asarray(rng.normal(size=5))
        loss = lambda p: 0.5 * jnp.mean((jnp.sin(x @ p["w"]) + p["b"] - y) ** 2)  # noqa: E731
        p0 = {"w": jnp.asarray(rng.normal(size=3)), "b": jnp.asarray(0.1)}
        loop = Descent(GradientDirection(loss), 0.2)
        s = loop.run(loop.init(p0, record=6), 6)
        assert isinstance(s, DescentState) and int(s.step) == 6 and _code(s) is GNResult.max_steps
        p, losses, grad = p0, [], jax.value_and_grad(loss)
        for _ in range(6):
            value, g = grad(p)
            losses.append(float(value))
            p = jax.tree_util.tree_map(lambda a, b: a - 0.2 * b, p, g)
        assert s.params["w"].dtype == jnp.float64
        for k in ("w", "b"):
            np.testing.assert_allclose(s.params[k], p[k], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(s.losses, losses, rtol=1e-13)


def test_result_codes_vmapped_over_the_step_size():
    loop = lambda lr: Descent(GradientDirection(lambda p: 0.5 * jnp.sum(p ** 2)), lr,  # noqa: E731
                              Stop(tol=1e-6, blowup=10.0))
    codes = jax.vmap(lambda lr: loop(lr).run(loop(lr).init(jnp.ones(2)), 4).result)(jnp.asarray([1.0, 0.1, 3.0]))
    assert [GNResult(int(c)) for c in codes] == [GNResult.converged, GNResult.max_steps, GNResult.diverged]
