"""The linearisation primitive: the first-order Taylor model of a network (main paper Eq. 2-4).

For a pure ``f(params, x)`` and an anchor ``theta_s``::

    f_lin(theta, x) = f(theta_s, x) + J_s(x) (theta - theta_s)          (Eq. 3-4)
    Theta_s(x1, x2) = J_s(x1) J_s(x2)^T                                    (Eq. 2, the empirical NTK)

Everything the library does with a linearisation goes through this module:

* :func:`linearise` keeps ``f``'s signature (``f_lin(params, x)``), one ``jax.jvp`` per call;
* :func:`linearise_at` linearises once on a fixed batch and returns a :class:`Linearisation`
  whose ``jvp`` (``J v``) and ``vjp`` (``J^T r``) reuse one forward pass: the full-batch
  trainer, Gauss-Newton and the closed-form flow all take their ``J`` and ``J^T`` from it;
* :func:`ntk` forms ``J J^T`` from per-example Jacobians (or calls a model's closed form).

Matrix-free except :func:`ntk` and :func:`jacobian`: ``J`` itself is never formed. Parameters
may be any pytree. Non-trainable model state (batch-norm statistics) is not an argument here:
close over it (``Model.bind``) so that it stays frozen at the anchor.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._checks import check_float_params, check_nonempty, check_positive_int, check_real_dtype, output_shape
from ._tree import tree_sub

ApplyFn = Callable  # f(params, x) -> outputs


def linearised_apply(f: ApplyFn, anchor, params, x):
    """The linearised network at ``params`` on ``x``: ``f(anchor, x) + J_anchor(x) (params - anchor)``.

    One ``jax.jvp`` (a forward pass carrying a tangent). The anchor is an argument, so a jitted
    caller can move it without recompiling.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: jnp.tanh(p * x)
    >>> float(linearised_apply(f, 0.0, 0.5, jnp.asarray(2.0)))  # tanh(0) + 2 * (0.5 - 0)
    1.0
    """
    y0, dy = jax.jvp(lambda p: f(p, x), (anchor,), (tree_sub(params, anchor),))
    return y0 + dy


def linearise(f: ApplyFn, anchor) -> ApplyFn:
    """``f`` linearised at ``anchor``, with ``f``'s signature: ``f_lin(params, x)`` (Eq. 3-4).

    Affine in ``params`` and equal to ``f`` at ``params == anchor``. A closure over ``anchor``;
    inside ``jax.jit`` prefer :func:`linearised_apply`, which takes the anchor as an argument.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: jnp.sin(p * x)
    >>> f_lin = linearise(f, 0.0)
    >>> float(f_lin(0.1, jnp.asarray(3.0)))  # sin(0) + 3 * cos(0) * 0.1
    0.3...
    """
    return partial(linearised_apply, f, anchor)


class Linearisation(NamedTuple):
    """``f`` linearised at ``anchor`` on one fixed batch ``x``, stored for reuse (a pytree).

    ``outputs`` is ``f(anchor, x)``; ``tangent`` is ``v -> J v`` with the residuals of one
    forward pass (a ``jax.tree_util.Partial``, so a Linearisation crosses ``jit`` boundaries as
    an argument instead of being folded in as constants); ``anchor`` fixes the parameter
    structure for the transpose. Build one with :func:`linearise_at`.

    >>> import jax.numpy as jnp
    >>> lin = linearise_at(lambda p, x: jnp.sin(p * x), 0.0, jnp.asarray([1.0, 2.0]))
    >>> lin(0.5).tolist(), float(lin.vjp(jnp.ones(2)))      # sin(0) + 0.5 x;  J^T 1 = 1 + 2
    ([0.5, 1.0], 3.0)
    """

    outputs: jax.Array
    tangent: Callable
    anchor: Any

    def jvp(self, v):
        """``J v`` for a parameter-shaped ``v`` (one tangent pass, no forward pass)."""
        return self.tangent(v)

    def vjp(self, r):
        """``J^T r`` for an output-shaped ``r`` (one transposed pass)."""
        (g,) = jax.linear_transpose(self.tangent, self.anchor)(r)
        return g

    def __call__(self, params):
        """The linearised outputs at ``params`` on the stored batch: ``outputs + J (params - anchor)``."""
        return self.outputs + self.tangent(tree_sub(params, self.anchor))


def linearise_at(f: ApplyFn, anchor, x) -> Linearisation:
    """Linearise ``f(., x)`` at ``anchor`` once; the result gives ``J v`` and ``J^T r`` for reuse.

    Call it inside a jitted function (the trainer and Gauss-Newton do), so the residuals live
    as values of the compiled program.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: p["w"] * x ** 2
    >>> lin = linearise_at(f, {"w": 2.0}, jnp.arange(3.0))
    >>> lin.outputs.tolist(), lin.jvp({"w": 1.0}).tolist(), float(lin.vjp(jnp.ones(3))["w"])
    ([0.0, 2.0, 8.0], [0.0, 1.0, 4.0], 5.0)
    """
    outputs, tangent = jax.linearize(lambda p: f(p, x), anchor)
    return Linearisation(outputs, tangent, anchor)


# ------------------------------------------------------------------------------- kernels
def jacobian(f: ApplyFn, params, x):
    """The Jacobian of the flattened outputs, ``(N*C, P)`` with example-major rows.

    Materialises ``N*C*P`` numbers: for small problems and tests. Columns follow
    ``jax.flatten_util.ravel_pytree``'s leaf order.

    >>> import jax.numpy as jnp
    >>> jacobian(lambda p, x: p * x, jnp.ones(2), jnp.asarray([3.0, 4.0])).tolist()
    [[3.0, 0.0], [0.0, 4.0]]
    """
    return _jacobian(f, params, x)


@partial(jax.jit, static_argnums=(0,))
def _jacobian(f, params, x):
    flat, unravel = ravel_pytree(params)
    return jax.jacrev(lambda v: f(unravel(v), x).reshape(-1))(flat)


def _jacobian_blocks(f, params, x, per_example):
    """Per-leaf Jacobian blocks ``(N*C, leaf_size)`` (not concatenated).

    ``per_example=True`` differentiates one example at a time (``N*C`` single-example backward
    passes instead of ``N*C`` passes over the whole batch); valid when examples do not interact
    (every itlin model in inference mode, not batch norm in training mode).
    """
    if per_example:
        jac = jax.vmap(lambda xi: jax.jacrev(lambda p: f(p, xi[None]).reshape(-1))(params))(x)
        return [j.reshape(j.shape[0] * j.shape[1], -1) for j in jax.tree_util.tree_leaves(jac)]
    jac = jax.jacrev(lambda p: f(p, x).reshape(-1))(params)
    return [j.reshape(j.shape[0], -1) for j in jax.tree_util.tree_leaves(jac)]


def _gram(blocks_a, blocks_b):
    return sum(a @ b.T for a, b in zip(blocks_a, blocks_b))


def ntk(f: ApplyFn, params, x1, x2=None, *, chunk_size: Optional[int] = None, trace: bool = False,
        per_example: bool = True):
    """The empirical NTK ``J(x1) J(x2)^T`` at ``params`` (main paper Eq. 2).

    Args:
      f: pure ``f(params, x)``.
      params: parameter pytree.
      x1, x2: input batches; ``x2=None`` gives the Gram matrix on ``x1``.
      chunk_size: form Jacobians for at most this many inputs at a time (memory
        ``O(chunk_size * C * P)`` instead of ``O(N * C * P)``).
      trace: sum over outputs and return ``(N1, N2)``.
      per_example: Jacobians one example at a time (``N`` times fewer backward passes); valid
        when an example's outputs do not depend on the others.

    Returns:
      ``(N1*C, N2*C)`` (example-major: row ``n*C + c`` is output ``c`` of example ``n``), or
      ``(N1, N2)`` if ``trace`` or ``C == 1``.

    Refused with a one-line ValueError/TypeError: parameters that are not floating point, complex
    inputs, ``x2`` of another feature shape than ``x1``, inputs the model cannot take.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: x @ p            # a linear model: the NTK is x x^T
    >>> ntk(f, jnp.zeros(2), jnp.eye(2) * 3.0).tolist()
    [[9.0, 0.0], [0.0, 9.0]]
    """
    name1 = "x" if x2 is None else "x1"
    check_nonempty(name1, x1)
    check_float_params("params", params, "ntk")
    check_real_dtype(name1, x1, "ntk")
    if x2 is not None:
        check_nonempty("x2", x2)
        check_real_dtype("x2", x2, "ntk")
        if tuple(np.shape(x1))[1:] != tuple(np.shape(x2))[1:]:
            raise ValueError(f"x1 and x2 must have the same feature shape, got {tuple(np.shape(x1))[1:]} and "
                             f"{tuple(np.shape(x2))[1:]}; give x2 the model's input features.")
    if chunk_size is not None:
        chunk_size = check_positive_int("chunk_size", chunk_size, none_means="one chunk")
    try:
        return _ntk(f, params, x1, x2, chunk_size=chunk_size, trace=bool(trace), per_example=bool(per_example))
    except (TypeError, ValueError):
        output_shape(f, params, x1, name1)  # a one-line error when the model cannot take the inputs
        raise


@partial(jax.jit, static_argnums=(0,), static_argnames=("chunk_size", "trace", "per_example"))
def _ntk(f, params, x1, x2, *, chunk_size, trace, per_example):
    n1 = x1.shape[0]
    xs2 = x1 if x2 is None else x2
    n2 = xs2.shape[0]
    if chunk_size is None or chunk_size >= max(n1, n2):
        a = _jacobian_blocks(f, params, x1, per_example)
        k = _gram(a, a if x2 is None else _jacobian_blocks(f, params, x2, per_example))
    else:
        rows = []
        for i in range(0, n1, chunk_size):
            a = _jacobian_blocks(f, params, x1[i:i + chunk_size], per_example)
            rows.append(jnp.concatenate([_gram(a, _jacobian_blocks(f, params, xs2[j:j + chunk_size], per_example))
                                         for j in range(0, n2, chunk_size)], axis=1))
        k = jnp.concatenate(rows, axis=0)
    c = k.shape[0] // n1
    if trace and c > 1:
        k = k.reshape(n1, c, n2, c).trace(axis1=1, axis2=3)
    return k


def kernel_eigh(kernel):
    """Eigendecomposition of a symmetric kernel, **eigenvalues descending** (index 0 the
    largest; the NTK's eigenfunctions of Ortiz-Jimenez et al. are numbered so), in float64 on
    the host: ``(eigenvalues (M,), eigenvectors (M, M))``, column ``j`` the unit eigenvector of
    eigenvalue ``j``. The kernel is symmetrised first (``(K + K^T) / 2``), so round-off
    asymmetry of a computed NTK does not matter. Signs of eigenvectors are LAPACK's.

    >>> import numpy as np
    >>> s, v = kernel_eigh(np.asarray([[2.0, 1.0], [1.0, 2.0]]))
    >>> s.tolist(), np.abs(v[:, 0]).round(6).tolist()           # (1, 1)/sqrt(2) has eigenvalue 3
    ([3.0, 1.0], [0.707107, 0.707107])
    """
    k = np.asarray(kernel, np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1] or k.shape[0] == 0:
        raise ValueError(f"kernel must be a non-empty square matrix, got shape {k.shape}.")
    if not np.all(np.isfinite(k)):
        raise ValueError("kernel contains non-finite values (NaN or Inf); check the model and parameters.")
    s, v = np.linalg.eigh(0.5 * (k + k.T))
    return s[::-1].copy(), v[:, ::-1].copy()


def ntk_eigh(f: ApplyFn, params, x, *, chunk_size: Optional[int] = None, per_example: bool = True,
             trace: bool = False):
    """The eigendecomposition of the empirical NTK on ``x`` (:func:`ntk`, then
    :func:`kernel_eigh`): ``(eigenvalues, eigenvectors)``, eigenvalues descending, float64
    numpy arrays. The rows follow :func:`ntk`'s example-major layout (``N*C``, or ``N`` for
    one output or ``trace=True``).

    >>> import jax.numpy as jnp
    >>> s, v = ntk_eigh(lambda p, x: x @ p, jnp.zeros(2), jnp.asarray([[1.0, 0.0], [0.0, 2.0]]))
    >>> s.tolist(), v[:, 0].tolist()                 # K = diag(1, 4)
    ([4.0, 1.0], [0.0, 1.0])
    """
    return kernel_eigh(ntk(f, params, x, chunk_size=chunk_size, trace=trace, per_example=per_example))


def kernel_distance(k_a, k_b):
    """Relative Frobenius distance ``||K_a - K_b|| / ||K_b||`` between two kernels.

    >>> import jax.numpy as jnp
    >>> float(kernel_distance(2 * jnp.eye(2), jnp.eye(2)))
    1.0
    """
    return jnp.linalg.norm(k_a - k_b) / jnp.maximum(jnp.linalg.norm(k_b), jnp.finfo(k_b.dtype).tiny)


__all__ = ["Linearisation", "jacobian", "kernel_distance", "kernel_eigh", "linearise", "linearise_at",
           "linearised_apply", "ntk", "ntk_eigh"]
