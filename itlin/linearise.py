"""The first-order Taylor model of a network around an anchor (main paper Eq. 3-4, Appendix A).

For a pure ``apply(params, x)`` and anchor parameters ``theta_s``::

    f_lin(theta, x) = f(theta_s, x) + J_s(x) (theta - theta_s)

Everything here is matrix-free: the Jacobian is never formed, only Jacobian-vector products
(``jax.jvp``) and their transposes. Parameters may be any pytree. Non-trainable model state
(batch-norm statistics) is not an argument here: close over it (``Model.bind``) so that it
stays frozen at the anchor.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax

from ._tree import tree_sub

ApplyFn = Callable  # apply(params, x) -> outputs


def linearised_apply(apply_fn: ApplyFn, anchor, params, x):
    """Evaluate the linearised network (Eq. 3-4) at ``params`` on inputs ``x``.

    ``f(anchor, x) + J_anchor(x) (params - anchor)``, computed with one ``jax.jvp`` (a forward
    pass carrying a tangent). The anchor is an argument, not a closure constant, so a jitted
    caller can change it without recompiling.
    """
    delta = tree_sub(params, anchor)
    y0, dy = jax.jvp(lambda p: apply_fn(p, x), (anchor,), (delta,))
    return y0 + dy


def linearise(apply_fn: ApplyFn, anchor) -> ApplyFn:
    """Return ``f_lin(params, x)``: the network linearised at ``anchor`` (Eq. 3-4).

    The returned function is linear (affine) in ``params`` and equals ``apply_fn`` at
    ``params == anchor``. It is a closure over ``anchor``; inside ``jax.jit`` prefer
    :func:`linearised_apply`, which takes the anchor as an argument.
    """

    def f_lin(params, x):
        return linearised_apply(apply_fn, anchor, params, x)

    return f_lin


class Linearisation(NamedTuple):
    """A linearisation at a fixed anchor and a fixed input batch, stored for reuse.

    ``outputs`` is ``f(anchor, x)``; ``jvp(delta)`` is ``J delta`` and ``vjp(r)`` is ``J^T r``
    (Eq. 4: ``phi_s^lin = grad f(theta_s, X)``). Both reuse the residuals saved by one forward
    pass, so evaluating the linearised model and its gradient costs one tangent pass and one
    transposed pass, with no new forward pass through the network.
    """

    outputs: jax.Array
    jvp: Callable
    vjp: Callable


def linearisation_at(apply_fn: ApplyFn, anchor, x) -> Linearisation:
    """Linearise ``apply_fn(., x)`` at ``anchor`` once and return reusable J and J^T products.

    Call this inside a jitted function (as the full-batch trainer does): the residuals then
    live as intermediate values of the compiled program instead of being folded in as
    constants.
    """
    outputs, jvp_fn = jax.linearize(lambda p: apply_fn(p, x), anchor)
    transpose = jax.linear_transpose(jvp_fn, anchor)

    def vjp_fn(r):
        (g,) = transpose(r)
        return g

    return Linearisation(outputs, jvp_fn, vjp_fn)


__all__ = ["Linearisation", "linearisation_at", "linearise", "linearised_apply"]
