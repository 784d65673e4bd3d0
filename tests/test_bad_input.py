"""Issue 26: every bad input gives the right answer or a one-line error that names the argument
and the fix, before any work starts (and issue 25's Loss Hessian as data). One test per case."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin
from itlin import gauss_newton_direction, gauss_newton_fit, gauss_newton_step, get_loss


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg, msg
    return msg


def _linear():
    f = lambda p, x: x @ p
    x = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    return f, x


# ------------------------------------------------------------------------------ losses carry their Hessian
def test_custom_loss_without_a_hessian_is_refused_by_gauss_newton_with_the_fix():
    f, x = _linear()
    y = jnp.asarray([1.0, 0.0, 2.0])
    bare = itlin.Loss("my_squared", lambda out, t: 0.5 * (out - t) ** 2)
    with pytest.raises(ValueError, match="carries no output Hessian: give it one, Loss") as e:
        gauss_newton_direction(f, jnp.zeros(2), x, y, loss=bare)
    _one_line(e)
    # hessian="identity" needs none: the same step as the built-in squared loss with H = I
    d_bare, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, loss=bare, hessian="identity", damping=0.1)
    d_ref, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, loss="squared", hessian="identity", damping=0.1)
    np.testing.assert_array_equal(d_bare, d_ref)


def test_custom_loss_with_its_hessian_gives_the_builtin_step():
    # a custom softmax cross-entropy with its Hessian as data equals the built-in, both solvers
    f = lambda p, x: x @ p
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3))
    p0 = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (3, 4))
    y = jnp.asarray([0, 3, 1, 2, 1])
    per = lambda out, t: -jnp.take_along_axis(jax.nn.log_softmax(out), t[:, None], axis=1)[:, 0]

    def hess(out, t):
        p = jax.nn.softmax(out)
        return jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]

    mine = itlin.Loss("my_xent", per, hessian=hess)
    for damping in (0.0, 0.2, itlin.ArbelDamping(1.0, 1e-3)):
        d_mine, i_mine = gauss_newton_direction(f, p0, x, y, loss=mine, damping=damping)
        d_ref, i_ref = gauss_newton_direction(f, p0, x, y, loss="cross_entropy", damping=damping)
        np.testing.assert_allclose(d_mine, d_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(i_mine.damping, i_ref.damping, rtol=1e-5)
    # the reduction is kept for a custom loss (it used to be looked up again by name)
    assert get_loss(mine, "sum").per_example is per and get_loss(mine, "sum").reduction == "sum"
    # a scalar Hessian c means c * I per example
    sq = itlin.Loss("my_sq", lambda out, t: 0.5 * jnp.sum((out - t) ** 2, -1), hessian=lambda out, t: 1.0)
    h = sq.hessian_outputs(jnp.zeros((2, 3)), jnp.zeros((2, 3)))
    np.testing.assert_array_equal(h, np.stack([np.eye(3) / 2] * 2))


def test_every_loss_is_listed_in_the_docstrings():
    from itlin.core.losses import LOSSES

    for name, aliases in LOSSES.items():
        for word in (name,) + aliases:
            assert f'"{word}"' in get_loss.__doc__, word
        assert get_loss(name).hessian is not None and get_loss(name).check is not None
        assert f'"{name}"' in itlin.iterative_linearisation.__doc__, name
