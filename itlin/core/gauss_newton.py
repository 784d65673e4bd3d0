"""Damped (generalised) Gauss-Newton in kernel form.

Main paper Eq. 5-6 and Arbel et al. Section 3.2::

    theta <- theta - eta * (J^T H J + lambda I)^{-1} J^T g,     g = dL/df,  H = d^2L/df^2

``H = c I`` for the squared loss (``c = 1/N`` for the mean over examples, ``1`` for the sum;
``hessian="identity"`` forces ``c = 1`` as Arbel et al. do) and the softmax Hessian
``diag(p) - p p^T`` per example for cross-entropy (generalised Gauss-Newton). The Hessian is
data of the loss (``itlin.Loss.hessian``): a loss of one's own brings its own, or is refused. With the
push-through (Woodbury) identity the step is computed in *kernel form*::

    (J^T H J + lambda I)^{-1} J^T g  =  J^T S (S K S + lambda I)^{-1} S^+ g,     K = J J^T,  H = S S

(``S = sqrt(c) I`` for the squared loss, so the system is ``(c K + lambda I) z = g``). The only
linear system is ``N*C x N*C``; ``J^T z`` is one transposed pass of the linearisation. The step is
composed from three parts:

1. the linearisation (:func:`itlin.linearise_at`: outputs and ``J^T``) and the kernel
   (:func:`itlin.ntk`, or a model's closed form ``ntk_fn``);
2. a damping rule, evaluated on the **system actually solved** (``S K S``, ``c K`` for the
   squared loss): :class:`ConstantDamping` ``lambda``, or :class:`ArbelDamping`
   ``alpha * sigma_min(S K S)`` (on the range of ``H``) floored at ``c * eps0`` (Arbel et al.
   Eq. 5). The Arbel step is then the same for either reduction;
3. a symmetric linear solve, chosen explicitly: ``solve="eigh"`` (default; exact for every
   ``lambda >= 0``, with the pseudo-inverse at ``lambda = 0``: the minimum-norm step, Eq. 5) or
   ``solve="cholesky"`` (faster, for ``lambda > 0``; singular at ``lambda = 0``). Nothing
   depends on whether ``lambda`` is a concrete number, so ``jax.vmap`` over damping values,
   ``0`` included, gives the same steps as one call per value.

With ``solve="cholesky"`` the Arbel damping still needs ``sigma_min`` (part 2), and ``eigmin``
says how it is computed: ``"eigvalsh"`` (default: the eigenvalues alone, a dense
eigendecomposition) or ``"inverse_squaring"`` (:func:`smallest_eigenvalue`: a Cholesky inverse
squared ``squarings`` times, then a Rayleigh quotient; no eigendecomposition). Both are exact to
rounding, ``O(n eps ||a||)``. The second is meant for accelerators: it is made of matrix
products, which they run at full speed, where a dense eigensolver is latency-bound (on an H100
the ``500 x 500`` ``eigvalsh`` is most of a step); a CPU runs it several times slower than
``eigvalsh``. It needs ``H = c I`` (the squared loss, or ``hessian="identity"``): it cannot skip
the structural zeros of a Hessian with a null space.

``method="primal"`` forms the ``P x P`` system instead (small ``P``; the tests use it to check
the identity). Solving the linearised squared-loss problem with ``eta = 1`` and ``lambda = 0``
gives the minimum-norm interpolating step (Eq. 5, Appendix B Eq. 19); ``lambda > 0`` gives the
minimiser of ``L(f_lin(theta)) + 0.5 lambda ||theta - theta_s||^2`` (Eq. 6).
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._checks import (check_finite_array, check_float_dtype, check_float_params, check_nonempty, check_real_dtype,
                      check_same_leading, check_scalar, check_steps, output_shape)
from ._tree import tree_all_finite, tree_axpy, tree_select
from .linearise import jacobian, linearise_at, ntk
from .losses import _no_hessian, get_loss


class ConstantDamping(NamedTuple):
    """A fixed damping ``lambda >= 0`` (Eq. 6).

    >>> float(ConstantDamping(0.5).value(5.0))
    0.5
    """

    lam: float

    def value(self, eigmin, scale=1.0):
        """``lam``, whatever the system's smallest eigenvalue and the reduction's scale."""
        return jnp.asarray(self.lam)


class ArbelDamping(NamedTuple):
    """Arbel et al. Eq. 5: ``lambda = max(alpha * sigma_min, c * eps0)``.

    ``sigma_min`` is the smallest eigenvalue of the system solved **on the range of the loss's
    Hessian** (``J J^T`` for their ``H = I``; ``c K`` for the squared loss; ``S K S`` for
    cross-entropy, whose softmax Hessian blocks are singular: the eigenvalues that are zero
    because of that null space, one per example, are skipped, so ``sigma_min`` is not
    structurally zero). ``c`` is the scale the reduction puts on the Hessian (``1/N`` for the
    mean, ``1`` for the sum or ``hessian="identity"``), so ``eps0`` is in the sum's units and
    the step is the same for either reduction. Their runs use ``alpha = 1``, ``eps0 = 1e-7``.

    >>> float(ArbelDamping().value(2.0)), float(ArbelDamping(eps0=0.25).value(0.0))
    (2.0, 0.25)
    >>> float(ArbelDamping(eps0=0.25).value(0.0, scale=0.5))     # the mean over 2 examples
    0.125
    """

    alpha: float = 1.0
    eps0: float = 1e-7

    def value(self, eigmin, scale=1.0):
        """``max(alpha * eigmin, scale * eps0)``."""
        return jnp.maximum(self.alpha * eigmin, scale * self.eps0)


def get_damping(spec):
    """A damping rule from a number (constant ``lambda``; a Python, NumPy or JAX scalar, or a
    traced one in a vmapped sweep), a dict ``{"kind": "constant" | "arbel", ...}`` or a damping
    object. Every value is checked the same way: concrete values must be finite and ``>= 0``;
    traced ones (``jax.vmap`` over ``lambda``, ``alpha`` or ``eps0``) are taken as they are.

    >>> get_damping(0.5), get_damping({"kind": "arbel", "alpha": 2.0})
    (ConstantDamping(lam=0.5), ArbelDamping(alpha=2.0, eps0=1e-07))
    >>> get_damping(ArbelDamping(alpha=-1.0))
    Traceback (most recent call last):
    ...
    ValueError: damping alpha must be >= 0, got -1.0; pass 0 for no damping alpha.
    """
    if isinstance(spec, ConstantDamping):
        check_scalar("damping lambda", spec.lam, allow_zero=True)
        return spec
    if isinstance(spec, ArbelDamping):
        check_scalar("damping alpha", spec.alpha, allow_zero=True)
        check_scalar("damping eps0", spec.eps0, allow_zero=True)
        return spec
    if isinstance(spec, dict):
        spec = dict(spec)
        kind = spec.pop("kind", "constant")
        if kind not in ("constant", "arbel"):
            raise ValueError(f"unknown damping kind {kind!r}; choose 'constant' or 'arbel'.")
        return get_damping(ConstantDamping(**spec) if kind == "constant" else ArbelDamping(**spec))
    if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
        return get_damping(ConstantDamping(float(spec)))
    if isinstance(spec, (jax.Array, np.ndarray)):
        return get_damping(ConstantDamping(spec))
    raise TypeError(f"damping must be a number >= 0, ConstantDamping or ArbelDamping, got {spec!r}.")


class GNInfo(NamedTuple):
    """Diagnostics of one Gauss-Newton step: the loss before it, the damping used, and the
    smallest eigenvalue of the system matrix on the range of the Hessian (``c K`` or ``S K S``;
    NaN where not computed: ``solve="cholesky"`` with a constant damping).

    >>> import jax.numpy as jnp
    >>> _, info = gauss_newton_step(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2),
    ...                             damping=ArbelDamping(2.0))
    >>> float(info.loss), float(info.eigmin), float(info.damping)   # mean loss; c K = I / 2; 2 * 0.5
    (0.5, 0.5, 1.0)
    """

    loss: jax.Array
    damping: jax.Array
    eigmin: jax.Array


def _sym_solve(a, u, lam, solve: str, eig=None):
    """``(a + lam I)^{-1} u`` for symmetric PSD ``a``; the pseudo-inverse where ``a + lam I`` is
    singular (``solve="eigh"``, with ``eig = (s, v)`` if already computed)."""
    if solve == "cholesky":
        eye = jnp.eye(a.shape[0], dtype=a.dtype)
        return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a + lam * eye), u)
    s, v = eig if eig is not None else jnp.linalg.eigh(a)
    d = s + lam
    tol = jnp.max(jnp.abs(d)) * a.shape[0] * jnp.finfo(a.dtype).eps
    inv = jnp.where(jnp.abs(d) > tol, 1.0 / jnp.where(jnp.abs(d) > tol, d, 1.0), 0.0)
    return v @ (inv * (v.T @ u))


_EIGMIN_METHODS = ("eigvalsh", "inverse_squaring")


def smallest_eigenvalue(a, squarings: int | None = None):
    """The smallest eigenvalue of a symmetric positive semi-definite matrix ``a`` (``n x n``),
    without an eigendecomposition: a Cholesky factorisation and ``squarings`` matrix products.

    With ``a`` scaled to unit trace and shifted by ``tau = n eps`` (``n eps tr a`` in ``a``'s units,
    more than the factorisation's backward error and ``a``'s own rounding, ``O(n eps ||a||)``, so
    that it exists when ``a`` is singular), ``A = (a / tr a + tau I)^{-1}``
    is formed by a Cholesky solve, normalised ``B = A / tr A`` and squared ``B <- B^2 / tr B^2``
    ``squarings`` times: ``B``'s eigenvalues are ``w_i ∝ (1 / (s_i + tau'))^(2^k)``, so ``B`` tends
    to the projector on the eigenvectors of the smallest eigenvalue(s) (several, equally
    weighted, when they are tied or clustered). The result is the Rayleigh quotient ``tr(a B)``
    on the **original** ``a``: the shift does not bias it. An eigenvalue ``s_1 (1 + d)`` keeps the
    weight ``exp(-d 2^k)`` and moves the quotient by at most ``d exp(-d 2^k) s_1 <= 2^-k s_1 / e``,
    so the error is at most ``(n - 1) 2^-k s_1 / e`` plus the factorisation's backward error,
    ``O(n eps ||a||)``. The default ``squarings`` is the dtype's mantissa length (53 in float64,
    24 in float32), ``2^-k <= eps``: then the first term is below the second and the result is as
    exact as a dense ``eigvalsh``, also for a nearly flat spectrum. Fewer squarings are faster
    and still exact when the smallest eigenvalue is separated by a relative gap well above
    ``2^-k``. Pure ``jnp``, a fixed number of operations: ``jit`` and ``vmap`` it.

    ``a`` must be PSD (a kernel system ``c K``); ``squarings`` ``None`` (the default above) or an
    integer ``>= 1``. A concrete ``a`` that is not is refused with a one-line ValueError: NaN or
    Inf entries, an asymmetry beyond ``sqrt(eps) max |a|``, or a negative eigenvalue beyond what the
    shift ``n eps tr a`` absorbs (the Cholesky factorisation then fails; the error names the
    eigenvalue). Small negative eigenvalues within the shift are returned as they are. Inside
    ``jit``/``vmap`` nothing can be checked, and an indefinite ``a`` gives NaN.

    >>> import jax.numpy as jnp
    >>> a = jnp.asarray([[2.0, 1.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 5.0]])   # eigenvalues 1, 3, 5
    >>> round(float(smallest_eigenvalue(a)), 6), round(float(smallest_eigenvalue(jnp.ones((3, 3)))), 6)
    (1.0, 0.0)
    """
    if squarings is not None and (isinstance(squarings, bool) or not isinstance(squarings, numbers.Integral)
                                  or squarings < 1):
        raise ValueError(f"squarings must be None or an integer >= 1, got {squarings!r}.")
    a = jnp.asarray(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"a must be a square matrix, got shape {a.shape}.")
    check_real_dtype("a", a, "smallest_eigenvalue")
    check_float_dtype("a", a, "smallest_eigenvalue")
    if a.shape[0] == 0:
        raise ValueError("a must be a non-empty square matrix, got shape (0, 0).")
    if not jnp.issubdtype(a.dtype, jnp.floating):
        a = a.astype(jnp.result_type(float))
    concrete = not isinstance(a, jax.core.Tracer)
    if concrete:
        check_finite_array("a", a)
        host = np.asarray(a, np.float64)
        tol, scale = float(np.sqrt(jnp.finfo(a.dtype).eps)), float(np.max(np.abs(host)))
        if np.max(np.abs(host - host.T)) > tol * scale:
            raise ValueError(f"a is not symmetric (max |a - a^T| = {np.max(np.abs(host - host.T)):.3g}); give a "
                             "symmetric PSD matrix, e.g. (a + a.T) / 2.")
    result = _smallest_eigenvalue(a, squarings)
    if concrete and not bool(jnp.isfinite(result)):
        low = float(np.linalg.eigvalsh(0.5 * (host + host.T))[0])
        raise ValueError(f"a is not positive semi-definite: its smallest eigenvalue is {low:.3g}, beyond the shift "
                         "that absorbs round-off; smallest_eigenvalue needs a PSD matrix (a kernel system c K): use "
                         "jnp.linalg.eigvalsh for an indefinite one.")
    return result


def _smallest_eigenvalue(a, squarings):
    n, dtype = a.shape[0], a.dtype
    if squarings is None:
        squarings = jnp.finfo(dtype).nmant + 1
    a = 0.5 * (a + a.T)
    trace = jnp.trace(a)
    unit = a / jnp.where(trace > 0, trace, 1.0)  # unit trace: no over/underflow in the inverse, any scale
    eye = jnp.eye(n, dtype=dtype)
    tau = n * jnp.finfo(dtype).eps
    inverse = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(unit + tau * eye), eye)
    b = 0.5 * (inverse + inverse.T)
    b = b / jnp.trace(b)

    def square(_, b):
        b = b @ b
        b = 0.5 * (b + b.T)
        return b / jnp.trace(b)

    b = jax.lax.fori_loop(0, squarings, square, b)
    return jnp.sum(a * b)


def _eigmin(a, nullity, eigmin: str, squarings: int | None = None):
    """``sigma_min`` of the system ``a`` on the range of ``S`` by the ``eigmin`` method."""
    if eigmin == "inverse_squaring":
        if nullity is not None:  # refused by _validate; never silently wrong
            raise ValueError("eigmin='inverse_squaring' cannot skip a Hessian's null space; use eigmin='eigvalsh'.")
        return _smallest_eigenvalue(a, squarings)
    return _eigmin_on_range(jnp.linalg.eigvalsh(a), nullity)


def _hessian_root(h_blocks):
    """``S = H^{1/2}``, ``S^+`` (block by block; ``H`` per example PSD, ``(N, C, C)``) and the
    dimension of ``H``'s null space (the structural zeros of ``S K S``)."""
    c = h_blocks.shape[-1]
    hs, hv = jnp.linalg.eigh(h_blocks)
    hs = jnp.clip(hs, 0.0, None)
    tol = jnp.max(hs) * c * jnp.finfo(h_blocks.dtype).eps
    root = jnp.sqrt(hs)
    inv_root = jnp.where(hs > tol, 1.0 / jnp.where(hs > tol, root, 1.0), 0.0)
    sq = jnp.einsum("nce,ne,nde->ncd", hv, root, hv)
    sq_pinv = jnp.einsum("nce,ne,nde->ncd", hv, inv_root, hv)
    nullity = jnp.sum(hs <= tol)
    return jax.scipy.linalg.block_diag(*sq), jax.scipy.linalg.block_diag(*sq_pinv), nullity


def _eigmin_on_range(eigenvalues, nullity):
    """The smallest eigenvalue of ``S K S`` on the range of ``S``: ``S K S`` is zero on ``S``'s
    null space (``nullity`` eigenvalues), so that is the ``nullity``-th in ascending order."""
    if nullity is None:
        return eigenvalues[0]
    return eigenvalues[jnp.minimum(nullity, eigenvalues.shape[0] - 1)]


def _system(loss, f, y, hessian):
    """``g`` (flattened) and ``H`` as a scalar ``c`` (``H = c I``) or per-example blocks, plus
    the reduction's scale on ``H`` (the Arbel floor's units)."""
    g = loss.grad_outputs(f, y).reshape(-1)
    if hessian == "identity":
        return g, 1.0, None, 1.0
    n = f.shape[0]
    scale = loss.scale(n)
    h = loss.hessian(f, y)
    if jnp.ndim(h) == 0:
        return g, scale * h, None, scale
    c = g.shape[0] // n
    return g, None, scale * jnp.asarray(h, f.dtype).reshape(n, c, c), scale


def _check_args(hessian, method, solve, eigmin="eigvalsh"):
    if hessian not in ("loss", "identity"):
        raise ValueError(f"hessian must be 'loss' or 'identity', got {hessian!r}.")
    if method not in ("kernel", "primal"):
        raise ValueError(f"method must be 'kernel' or 'primal', got {method!r}.")
    if solve not in ("eigh", "cholesky"):
        raise ValueError(f"solve must be 'eigh' (any damping >= 0) or 'cholesky' (damping > 0), got {solve!r}.")
    if eigmin not in _EIGMIN_METHODS:
        raise ValueError(f"eigmin must be 'eigvalsh' or 'inverse_squaring', got {eigmin!r}.")
    if eigmin != "eigvalsh" and solve == "eigh":
        raise ValueError(f"eigmin={eigmin!r} is for solve='cholesky'; solve='eigh' already has sigma_min from its "
                         "decomposition: drop eigmin or pass solve='cholesky'.")


def _hessian_is_scalar(loss, out_shape, dtype, y) -> bool:
    """Whether the loss's Hessian is ``c I`` (a scalar), from its shape alone (no computation)."""
    h = jax.eval_shape(loss.hessian, jax.ShapeDtypeStruct(out_shape, dtype), y)
    return len(getattr(h, "shape", ())) == 0


def _is_zero(v) -> bool:
    """Whether ``v`` is a concrete 0 (a traced value is not known to be)."""
    return not isinstance(v, jax.core.Tracer) and float(np.asarray(v)) == 0.0


def _check_solve_damping(solve, damping):
    """``solve="cholesky"`` needs ``lambda > 0``: refuse a damping that is 0 for sure (concrete)."""
    if solve != "cholesky":
        return
    if isinstance(damping, ConstantDamping) and _is_zero(damping.lam):
        raise ValueError("solve='cholesky' needs damping > 0 (the system is singular at lambda = 0 when the kernel "
                         "is); pass solve='eigh' for damping 0 (the minimum-norm step) or a damping > 0.")
    if isinstance(damping, ArbelDamping) and _is_zero(damping.eps0):
        raise ValueError("solve='cholesky' needs damping > 0, but ArbelDamping(eps0=0) is 0 on a singular kernel; "
                         "give eps0 > 0 (Arbel et al. use 1e-7) or pass solve='eigh'.")


def _check_solved(direction, params, solve):
    """After a concrete Cholesky solve from finite parameters: a non-finite direction means the
    damped system was not positive definite (lambda at round-off of a singular kernel); raise
    instead of returning NaN."""
    leaves = jax.tree_util.tree_leaves((direction, params))
    if solve != "cholesky" or any(isinstance(l, jax.core.Tracer) for l in leaves):
        return
    if bool(tree_all_finite(params)) and not bool(tree_all_finite(direction)):
        raise ValueError("solve='cholesky' failed: the damped system c K + lambda I is not positive definite (a "
                         "singular kernel with a damping at round-off); use solve='eigh' or a larger damping.")


def _validate(f, params, x, y, loss, hessian, method, solve, eigmin="eigvalsh"):
    """Every check of the Gauss-Newton entry points, before any work (cheap; concrete inputs only)."""
    _check_args(hessian, method, solve, eigmin)
    if hessian == "loss" and loss.hessian is None:
        raise ValueError(_no_hessian(loss))
    check_nonempty("x", x)
    check_nonempty("y", y)
    check_same_leading("x", x, "y", y)
    check_float_params("parameters", params, "Gauss-Newton")
    check_float_dtype("parameters", params, "Gauss-Newton")
    check_real_dtype("inputs x", x, "Gauss-Newton")
    check_real_dtype("targets y", y, "Gauss-Newton")
    check_float_dtype("inputs x", x, "Gauss-Newton")
    check_finite_array("inputs x", x)
    out_shape = output_shape(f, params, x)
    loss.check_targets(out_shape, y)
    if eigmin == "inverse_squaring" and hessian == "loss":
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
        if not _hessian_is_scalar(loss, out_shape, dtype, y):
            raise ValueError("eigmin='inverse_squaring' needs a Hessian c*I (the squared loss, or "
                             f"hessian='identity'); loss {loss.name!r} has per-example Hessian blocks, whose null "
                             "space sigma_min must skip: use eigmin='eigvalsh'.")


def gauss_newton_direction(f: Callable, params, x, y, *, loss="squared", reduction: str = "mean", damping=0.0,
                           hessian: str = "loss", solve: str = "eigh", method: str = "kernel",
                           ntk_fn: Optional[Callable] = None, eigmin: str = "eigvalsh"):
    """The damped Gauss-Newton direction ``(J^T H J + lambda I)^{-1} J^T g`` (Eq. 5-6).

    Args:
      f: pure ``f(params, x)``.
      params: parameters (any pytree) at which ``J`` is taken.
      x, y: the training batch (targets shaped like the outputs; labels for cross-entropy).
      loss: ``"squared"``, ``"cross_entropy"`` (``H`` = softmax Hessian),
        ``"binary_cross_entropy"`` or an :class:`itlin.Loss` that carries its ``hessian``
        (a loss without one is refused unless ``hessian="identity"``).
      reduction: ``"mean"`` over examples (default, as the trainer) or ``"sum"`` (the main
        paper's ``0.5 ||f - Y||^2``). For the squared loss a constant ``lambda`` with ``"mean"``
        is ``N lambda`` with ``"sum"``; the Arbel damping gives the same step for both (its
        floor ``eps0`` is scaled with the reduction).
      damping: ``lambda >= 0``, :class:`ConstantDamping` or :class:`ArbelDamping`.
      hessian: ``"loss"`` (the loss's own) or ``"identity"`` (``H = I`` whatever the loss and
        reduction: Arbel et al.'s update ``J^T (J J^T + eps I)^{-1} g``).
      solve: ``"eigh"`` (any ``lambda >= 0``) or ``"cholesky"`` (``lambda > 0``, faster; a
        damping that is 0 for sure, ``0`` or ``ArbelDamping(eps0=0)``, is refused up front, and a
        solve that fails because ``lambda`` is at round-off of a singular kernel raises a
        ValueError instead of returning NaN).
      eigmin: how ``solve="cholesky"`` gets ``sigma_min`` for :class:`ArbelDamping`:
        ``"eigvalsh"`` (default; the eigenvalues by a dense eigensolver) or
        ``"inverse_squaring"`` (:func:`smallest_eigenvalue`; no eigendecomposition, faster on an
        accelerator, slower on a CPU; needs ``H = c I``: the squared loss or
        ``hessian="identity"``). Refused with ``solve="eigh"``, whose decomposition gives it.
      method: ``"kernel"`` (Woodbury, an ``NC x NC`` system) or ``"primal"`` (``P x P``).
      ntk_fn: optional ``ntk_fn(params, x) -> K`` (a closed form); default :func:`itlin.ntk`.

    Returns:
      ``(direction, GNInfo)``; the step is ``params - learning_rate * direction``. Jitted.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: x @ p                      # linear: one undamped step interpolates
    >>> x, y = jnp.asarray([[1.0, 2.0]]), jnp.asarray([3.0])
    >>> d, info = gauss_newton_direction(f, jnp.zeros(2), x, y)
    >>> (x @ (jnp.zeros(2) - d)).tolist(), float(info.damping)
    ([3.0], 0.0)
    """
    loss = get_loss(loss, reduction)
    damping = get_damping(damping)
    _check_solve_damping(solve, damping)
    _validate(f, params, x, y, loss, hessian, method, solve, eigmin)
    direction, info = _direction(f, params, x, y, damping, loss=loss, hessian=hessian, method=method, solve=solve,
                                 ntk_fn=ntk_fn, eigmin=eigmin)
    _check_solved(direction, params, solve)
    return direction, info


@partial(jax.jit, static_argnums=(0,), static_argnames=("loss", "hessian", "method", "solve", "ntk_fn", "eigmin"))
def _direction(f, params, x, y, damping, *, loss, hessian, method, solve, ntk_fn, eigmin="eigvalsh"):
    lin = linearise_at(f, params, x)
    out = lin.outputs
    if loss.name == "squared" and out.shape != y.shape:
        raise ValueError(f"targets must be shaped like the outputs: outputs {out.shape}, targets {y.shape}.")
    loss_value = loss(out, y)
    g, scale, h_blocks, floor_scale = _system(loss, out, y, hessian)
    arbel = isinstance(damping, ArbelDamping)
    nan = jnp.asarray(jnp.nan, out.dtype)
    if method == "kernel":
        kernel = ntk_fn(params, x) if ntk_fn is not None else ntk(f, params, x)
        if kernel.shape != (g.shape[0], g.shape[0]):
            raise ValueError(f"the NTK must be {g.shape[0]} x {g.shape[0]} (examples x outputs), got {kernel.shape}.")
        kernel = 0.5 * (kernel + kernel.T)
        nullity = None
        if h_blocks is None:
            a, u, root = scale * kernel, g, None
        else:
            root, root_pinv, nullity = _hessian_root(h_blocks)
            a, u = root @ kernel @ root, root_pinv @ g
            a = 0.5 * (a + a.T)
        eig = jnp.linalg.eigh(a) if solve == "eigh" else None
        if eig is not None:
            sigma_min = _eigmin_on_range(eig[0], nullity)
        else:
            sigma_min = _eigmin(a, nullity, eigmin) if arbel else nan
        lam = damping.value(sigma_min, floor_scale).astype(a.dtype)
        z = _sym_solve(a, u, lam, solve, eig)
        if root is not None:
            z = root @ z
        return lin.vjp(z.reshape(out.shape).astype(out.dtype)), GNInfo(loss_value, lam, sigma_min)
    flat, unravel = ravel_pytree(params)
    jac = jacobian(f, params, x)  # (NC, P)
    nullity = None
    if h_blocks is None:
        h_jac = scale * jac
        kernel_system = scale * (jac @ jac.T)
    else:
        h_full = jax.scipy.linalg.block_diag(*h_blocks)
        h_jac = h_full @ jac
        root, _, nullity = _hessian_root(h_blocks)
        kernel_system = root @ (jac @ jac.T) @ root
    sigma_min = _eigmin(0.5 * (kernel_system + kernel_system.T), nullity, eigmin) if arbel else nan
    lam = damping.value(sigma_min, floor_scale).astype(flat.dtype)
    d = _sym_solve(jac.T @ h_jac, jac.T @ g, lam, solve)
    return unravel(d), GNInfo(loss_value, lam, sigma_min)


def _check_learning_rate(learning_rate):
    if isinstance(learning_rate, jax.core.Tracer):
        return learning_rate
    return check_scalar("learning_rate (eta)", learning_rate)


def gauss_newton_step(f: Callable, params, x, y, *, learning_rate: float = 1.0, **kwargs):
    """One damped Gauss-Newton step ``params - learning_rate * direction`` (Eq. 6; Arbel et al. Eq. 4).

    Keyword arguments are those of :func:`gauss_newton_direction`. Returns ``(params, GNInfo)``.

    >>> import jax.numpy as jnp
    >>> p, info = gauss_newton_step(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2), damping=1.0,
    ...                             reduction="sum")
    >>> p.tolist()                                     # ridge: (I + 1 I)^{-1} y
    [0.5, 0.5]
    """
    _check_learning_rate(learning_rate)
    direction, info = gauss_newton_direction(f, params, x, y, **kwargs)
    return tree_axpy(-learning_rate, direction, params), info


class GNTrace(NamedTuple):
    """Per-iteration record of :func:`gauss_newton_fit`: the training loss before each step
    (NaN after the run stopped), the number of steps taken, and whether the run diverged (a
    non-finite loss or step; the parameters are those before it).

    >>> import jax.numpy as jnp
    >>> _, trace = gauss_newton_fit(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2), 4, tol=1e-12)
    >>> int(trace.steps), bool(trace.diverged), trace.loss.tolist()     # one step interpolates
    (1, False, [0.5, 0.0, nan, nan])
    """

    loss: jax.Array
    steps: jax.Array
    diverged: jax.Array


def gauss_newton_fit(f: Callable, params, x, y, steps: int, *, learning_rate: float = 1.0, tol: float = 0.0,
                     blowup: Optional[float] = None, loss="squared", reduction: str = "mean", damping=0.0,
                     hessian: str = "loss", solve: str = "eigh", method: str = "kernel",
                     ntk_fn: Optional[Callable] = None, eigmin: str = "eigvalsh"):
    """Full-batch damped Gauss-Newton for at most ``steps`` iterations (``steps >= 1``).

    Stops early when the training loss falls below ``tol`` or diverges: becomes non-finite or,
    with ``blowup`` set, exceeds ``blowup`` times the initial loss (the parameters before the
    bad step are kept; ``trace.diverged`` is set). Pure and jittable; ``jax.vmap`` over initial
    parameters and damping values runs a whole sweep as one program. The other keyword
    arguments are those of :func:`gauss_newton_direction`.

    Returns ``(params, GNTrace)``.

    >>> import jax.numpy as jnp
    >>> p, trace = gauss_newton_fit(lambda p, x: jnp.tanh(x @ p), jnp.zeros(2), jnp.eye(2),
    ...                             jnp.asarray([0.5, -0.5]), 20, tol=1e-12)
    >>> int(trace.steps) < 20, float(trace.loss[0]) > 0.1
    (True, True)
    """
    _check_learning_rate(learning_rate)
    if not isinstance(tol, jax.core.Tracer):
        check_scalar("tol", tol, allow_zero=True)
    if blowup is not None and not isinstance(blowup, jax.core.Tracer):
        check_scalar("blowup", blowup)
        if not float(blowup) > 1:
            raise ValueError(f"blowup must be a factor > 1 (or None), got {blowup!r}.")
    steps = check_steps("steps", steps)
    loss = get_loss(loss, reduction)
    damping = get_damping(damping)
    _check_solve_damping(solve, damping)
    _validate(f, params, x, y, loss, hessian, method, solve, eigmin)
    losses0 = jnp.full((steps,), jnp.nan, dtype=jnp.result_type(*jax.tree_util.tree_leaves(params)))

    def direction_at(p):
        return _direction(f, p, x, y, damping, loss=loss, hessian=hessian, method=method, solve=solve, ntk_fn=ntk_fn,
                          eigmin=eigmin)

    def cond(carry):
        i, p, losses, stop, bad = carry
        return jnp.logical_and(i < steps, ~stop)

    def body(carry):
        i, p, losses, stop, _ = carry
        direction, info = direction_at(p)
        new_p = tree_axpy(-learning_rate, direction, p)
        bad = jnp.logical_or(~jnp.isfinite(info.loss), ~tree_all_finite(new_p))
        if blowup is not None:
            first = jnp.where(i == 0, info.loss, losses[0])
            bad = jnp.logical_or(bad, jnp.abs(info.loss) > blowup * jnp.maximum(jnp.abs(first), 1e-30))
        keep = jnp.logical_or(bad, info.loss < tol)
        new_p = tree_select(keep, p, new_p)
        losses = losses.at[i].set(info.loss.astype(losses.dtype))
        return i + jnp.where(keep, 0, 1), new_p, losses, keep, bad

    i, params, losses, _, bad = jax.lax.while_loop(
        cond, body, (jnp.zeros((), jnp.int32), params, losses0, jnp.asarray(False), jnp.asarray(False)))
    return params, GNTrace(losses, i, bad)


__all__ = ["ArbelDamping", "ConstantDamping", "GNInfo", "GNTrace", "gauss_newton_direction", "gauss_newton_fit",
           "gauss_newton_step", "get_damping", "smallest_eigenvalue"]
