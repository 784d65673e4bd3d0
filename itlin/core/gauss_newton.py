"""Damped (generalised) Gauss-Newton in kernel form.

Main paper Eq. 5-6 and Arbel et al. Section 3.2::

    theta <- theta - eta * (J^T H J + lambda I)^{-1} J^T g,     g = dL/df,  H = d^2L/df^2

``H = c I`` for the squared loss (``c = 1/N`` for the mean over examples, ``1`` for the sum;
``IdentityHessian()`` forces ``c = 1`` as Arbel et al. do) and the softmax Hessian
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
3. a symmetric linear solve, chosen explicitly: :class:`Eigh` (default; exact for every
   ``lambda >= 0``, with the pseudo-inverse at ``lambda = 0``: the minimum-norm step, Eq. 5) or
   :class:`Cholesky` (faster, for ``lambda > 0``; singular at ``lambda = 0``). Nothing
   depends on whether ``lambda`` is a concrete number, so ``jax.vmap`` over damping values,
   ``0`` included, gives the same steps as one call per value.

With :class:`Cholesky` the Arbel damping still needs ``sigma_min`` (part 2), and its ``eigmin``
says how it is computed: :class:`Eigvalsh` (default: the eigenvalues alone, a dense
eigendecomposition) or :class:`InverseSquaring` (:func:`smallest_eigenvalue`: a Cholesky inverse
squared ``squarings`` times, then a Rayleigh quotient; no eigendecomposition). Both are exact to
rounding, ``O(n eps ||a||)``. The second is meant for accelerators: it is made of matrix
products, which they run at full speed, where a dense eigensolver is latency-bound (on an H100
the ``500 x 500`` ``eigvalsh`` is most of a step); a CPU runs it several times slower than
``eigvalsh``. It needs ``H = c I`` (the squared loss, or :class:`IdentityHessian`): it cannot skip
the structural zeros of a Hessian with a null space.

:class:`PrimalForm` forms the ``P x P`` system instead of :class:`KernelForm`'s (small ``P``; the tests use it to check
the identity). Solving the linearised squared-loss problem with ``eta = 1`` and ``lambda = 0``
gives the minimum-norm interpolating step (Eq. 5, Appendix B Eq. 19); ``lambda > 0`` gives the
minimiser of ``L(f_lin(theta)) + 0.5 lambda ||theta - theta_s||^2`` (Eq. 6).

Each part is a small immutable object (:mod:`itlin.core.gn_parts`: the Hessian
:class:`LossHessian` / :class:`IdentityHessian`, the form, the solve, the damping
:class:`ConstantDamping` / :class:`ArbelDamping`); invalid combinations cannot be built. The
strings of earlier versions (``hessian="identity"``, ``solve="cholesky"``,
``eigmin="inverse_squaring"``, ``method="primal"``) are kept as a short form, mapped to the
objects in one place (``gn_parts.SHORT_FORMS``). :func:`gauss_newton_fit` is the library's one
descent loop (:class:`Descent`, which also runs gradient descent with :class:`GradientDirection`)
with :class:`GaussNewtonDirection`, and says how it stopped with a :class:`GNResult` code.
"""

from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import _memory
from ._checks import (check_finite_array, check_float_dtype, check_float_params, check_nonempty, check_real_dtype,
                      check_same_leading, check_scalar, check_steps, output_shape)
from ._divergence import diverged
from ._tree import tree_all_finite, tree_axpy, tree_select
from .gn_parts import (SHORT_FORMS, ArbelDamping, Cholesky, ConstantDamping, Eigh, Eigvalsh, IdentityHessian,
                       InverseSquaring, KernelForm, LossHessian, PrimalForm, _smallest_eigenvalue, _strategies,
                       get_damping)
from .linearise import linearise_at
from .losses import _no_hessian, get_loss


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


def _hessian_is_scalar(loss, out_shape, dtype, y) -> bool:
    """Whether the loss's Hessian is ``c I`` (a scalar), from its shape alone (no computation)."""
    h = jax.eval_shape(loss.hessian, jax.ShapeDtypeStruct(out_shape, dtype), y)
    return len(getattr(h, "shape", ())) == 0


def _is_zero(v) -> bool:
    """Whether ``v`` is a concrete 0 (a traced value is not known to be)."""
    return not isinstance(v, jax.core.Tracer) and float(np.asarray(v)) == 0.0


def _check_solve_damping(solve, damping):
    """:class:`Cholesky` needs ``lambda > 0``: refuse a damping that is 0 for sure (concrete)."""
    if not isinstance(solve, Cholesky):
        return
    if isinstance(damping, ConstantDamping) and _is_zero(damping.lam):
        raise ValueError("solve='cholesky' needs damping > 0 (the system is singular at lambda = 0 when the kernel "
                         "is); pass solve='eigh' for damping 0 (the minimum-norm step) or a damping > 0.")
    if isinstance(damping, ArbelDamping) and _is_zero(damping.eps0):
        raise ValueError("solve='cholesky' needs damping > 0, but ArbelDamping(eps0=0) is 0 on a singular kernel; "
                         "give eps0 > 0 (Arbel et al. use 1e-7) or pass solve='eigh'.")


def _check_ntk_fn(form, ntk_fn):
    """``ntk_fn`` is the kernel form's: refuse it where it would be ignored, or is no function."""
    if ntk_fn is None:
        return
    if not callable(ntk_fn):
        raise TypeError(f"ntk_fn must be a function ntk_fn(params, x) -> K, or None for itlin.ntk; got "
                        f"{type(ntk_fn).__name__}.")
    if isinstance(form, PrimalForm):
        raise ValueError("ntk_fn is used by the kernel form only: PrimalForm() forms J^T H J from the Jacobian and "
                         "would ignore it; drop ntk_fn or pass form=KernelForm().")


def _check_solved(direction, params, solve):
    """After a concrete Cholesky solve from finite parameters: a non-finite direction means the
    damped system was not positive definite (lambda at round-off of a singular kernel); raise
    instead of returning NaN."""
    leaves = jax.tree_util.tree_leaves((direction, params))
    if not isinstance(solve, Cholesky) or any(isinstance(l, jax.core.Tracer) for l in leaves):
        return
    if bool(tree_all_finite(params)) and not bool(tree_all_finite(direction)):
        raise ValueError("solve='cholesky' failed: the damped system c K + lambda I is not positive definite (a "
                         "singular kernel with a damping at round-off); use solve='eigh' or a larger damping.")


def _validate(f, params, x, y, loss, hessian, solve):
    """Every check of the Gauss-Newton entry points that needs the data, before any work (cheap;
    concrete inputs only; the strategies are checked by :func:`_strategies`)."""
    if isinstance(hessian, LossHessian) and loss.hessian is None:
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
    if isinstance(solve, Cholesky) and isinstance(solve.eigmin, InverseSquaring) and isinstance(hessian, LossHessian):
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
        if not _hessian_is_scalar(loss, out_shape, dtype, y):
            raise ValueError("eigmin='inverse_squaring' (InverseSquaring) needs a Hessian c*I (the squared loss, or "
                             f"hessian='identity'); loss {loss.name!r} has per-example Hessian blocks, whose null "
                             "space sigma_min must skip: use eigmin='eigvalsh' (Cholesky(eigmin=Eigvalsh())).")
    return out_shape


_STEP_COUNTER = 2 ** 31 - 1  # DescentState.step is int32


def _check_memory(params, out_shape, steps: int, form) -> None:
    """A run's trace (one loss per step) and the system it solves (``NC x NC``, or ``P x P`` in primal
    form) against the memory of the device the parameters live on, before anything is allocated
    (``_memory``: ``$ITLIN_MEMORY_LIMIT`` overrides the limit)."""
    leaves = jax.tree_util.tree_leaves(params)
    item = jnp.dtype(jnp.result_type(*leaves)).itemsize
    n = sum(int(np.prod(np.shape(a))) for a in leaves) if isinstance(form, PrimalForm) else int(np.prod(out_shape))
    trace, system = steps * item, n * n * item

    def fix(have):
        if trace >= system:
            most = min(max(1, int((have - system) // item)), _STEP_COUNTER)
            return f"run at most {most:,} steps per call, each from the last call's parameters"
        return f"fit fewer examples (or outputs) at a time: the {n:,} x {n:,} system is solved whole"

    _memory.check(f"gauss_newton_fit ({steps:,} steps' trace of losses, {_memory.size(trace)}, and the {n:,} x {n:,} "
                  f"system, {_memory.size(system)})", trace + system, fix, _memory.default_device(params))


def gauss_newton_direction(f: Callable, params, x, y, *, loss="squared", reduction: str = "mean", damping=0.0,
                           hessian=LossHessian(), solve=Eigh(), form=KernelForm(), ntk_fn: Optional[Callable] = None,
                           method: Optional[str] = None, eigmin: Optional[str] = None):
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
      hessian: :class:`LossHessian` (default, the loss's own) or :class:`IdentityHessian`
        (``H = I`` whatever the loss and reduction: Arbel et al.'s update ``J^T (J J^T + eps I)^{-1} g``).
      solve: :class:`Eigh` (default; any ``lambda >= 0``) or :class:`Cholesky` (``lambda > 0``,
        faster; a damping that is 0 for sure, ``0`` or ``ArbelDamping(eps0=0)``, is refused up
        front, and a solve that fails because ``lambda`` is at round-off of a singular kernel
        raises a ValueError instead of returning NaN). ``Cholesky(eigmin=...)`` says how it gets
        ``sigma_min`` for :class:`ArbelDamping`: :class:`Eigvalsh` (default) or
        :class:`InverseSquaring` (no eigendecomposition, faster on an accelerator, slower on a
        CPU; needs ``H = c I``: the squared loss or :class:`IdentityHessian`).
      form: :class:`KernelForm` (default; Woodbury, an ``NC x NC`` system) or :class:`PrimalForm`
        (``P x P``).
      method: the short form of ``form``, ``"kernel"`` or ``"primal"``. Short forms are kept for
        existing callers and mapped to the objects in one place (``gn_parts.SHORT_FORMS``); so
        are ``hessian="loss" | "identity"`` and ``solve="eigh" | "cholesky"``.
      eigmin: the short form of a Cholesky solve's smallest-eigenvalue method, ``"eigvalsh"`` or
        ``"inverse_squaring"`` (with ``solve="cholesky"``; refused with ``"eigh"``, whose
        decomposition gives ``sigma_min``).
      ntk_fn: optional ``ntk_fn(params, x) -> K`` (a closed form) for :class:`KernelForm`; default
        :func:`itlin.ntk`. Refused with :class:`PrimalForm`, which has no use for it.

    Returns:
      ``(direction, GNInfo)``; the step is ``params - learning_rate * direction``. Jitted.

    >>> import jax.numpy as jnp
    >>> f = lambda p, x: x @ p                      # linear: one undamped step interpolates
    >>> x, y = jnp.asarray([[1.0, 2.0]]), jnp.asarray([3.0])
    >>> d, info = gauss_newton_direction(f, jnp.zeros(2), x, y)
    >>> (x @ (jnp.zeros(2) - d)).tolist(), float(info.damping)
    ([3.0], 0.0)
    >>> d2, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, damping=ArbelDamping(), solve=Cholesky(),
    ...                                hessian=IdentityHessian(), form=PrimalForm())
    >>> d3, _ = gauss_newton_direction(f, jnp.zeros(2), x, y, damping=ArbelDamping(), solve="cholesky",
    ...                                hessian="identity", method="primal")       # the short form: the same
    >>> bool((d2 == d3).all())
    True
    """
    hessian, form, solve = _strategies(hessian, form, solve, method, eigmin)
    _check_ntk_fn(form, ntk_fn)
    loss = get_loss(loss, reduction)
    damping = get_damping(damping)
    _check_solve_damping(solve, damping)
    _validate(f, params, x, y, loss, hessian, solve)
    direction, info = _direction(f, params, x, y, damping, loss=loss, hessian=hessian, form=form, solve=solve,
                                 ntk_fn=ntk_fn)
    _check_solved(direction, params, solve)
    return direction, info


@partial(jax.jit, static_argnums=(0,), static_argnames=("loss", "hessian", "form", "solve", "ntk_fn"))
def _direction(f, params, x, y, damping, *, loss, hessian, form, solve, ntk_fn):
    """One step's direction, composed: the linearisation, the Hessian part, the form (which calls
    the damping and the solve)."""
    lin = linearise_at(f, params, x)
    out = lin.outputs
    if loss.name == "squared" and out.shape != y.shape:
        raise ValueError(f"targets must be shaped like the outputs: outputs {out.shape}, targets {y.shape}.")
    loss_value = loss(out, y)
    direction, lam, sigma_min = form(f, params, x, lin, hessian(loss, out, y), damping, solve, ntk_fn)
    return direction, GNInfo(loss_value, lam, sigma_min)


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


# ------------------------------------------------------------------------------ the descent loop
# One full-batch loop, optimistix-style, for Gauss-Newton and gradient descent: a small state
# (DescentState), the direction as a strategy (``direction(params) -> (loss, d)``:
# GaussNewtonDirection or GradientDirection), the step size and the stop rule (Stop); pure
# ``init``, and ``run(state, until)`` continues a state, so a caller that records metrics at
# checkpoints runs the same loop in segments (to 3, then to 7, is to 7). One step:
#
#     loss, d = direction(params)                 the loss at params, and the direction there
#     loss not finite or above blowup * first  -> diverged: back to the params before the step
#                                                 that made these (step count - 1)
#     loss < tol or loss <= rtol * first       -> converged: params kept
#     params - learning_rate * d not finite    -> diverged: params kept
#     otherwise params <- params - learning_rate * d (step count + 1)
#
# The divergence test is _divergence.diverged, the one of the library. Used by gauss_newton_fit
# and by Arbel et al.'s engine (GN and GD): there is no other loop.


class GNResult(enum.IntEnum):
    """How :func:`gauss_newton_fit` (a :class:`Descent` run) stopped, as the code in
    ``GNTrace.result`` / ``DescentState.result`` (an int32 array, so that it is ``jit``/``vmap``-able;
    ``GNResult(int(trace.result))`` reads one):

    * ``converged`` (0): the training loss fell below ``tol`` (or to ``rtol`` times the first);
    * ``max_steps`` (1): the step budget ran out first (also the code of a run still going);
    * ``diverged`` (2): a non-finite loss or step, or a loss above ``blowup`` times the first.

    >>> GNResult(0).name, int(GNResult.diverged)
    ('converged', 2)
    """

    converged = 0
    max_steps = 1
    diverged = 2


class DescentState(NamedTuple):
    """Where a descent run stands: ``params``; ``prev``, the parameters before the step that made
    them (where a divergence goes back to); ``step``, the steps taken (int32); ``first``, the loss
    the relative rules compare with (NaN until the first step when :meth:`Descent.init` is not given
    one); ``result``, a :class:`GNResult` code (``max_steps`` while running); ``losses``, the loss
    before each step (NaN where none was taken) or None.

    >>> s = Descent(GradientDirection(lambda p: 0.5 * p ** 2), 0.5).init(jnp.asarray(4.0))
    >>> int(s.step), GNResult(int(s.result)).name, bool(jnp.isnan(s.first))
    (0, 'max_steps', True)
    """

    params: Any
    prev: Any
    step: jax.Array
    first: jax.Array
    result: jax.Array
    losses: Optional[jax.Array] = None


class Stop(NamedTuple):
    """When a run stops: converged at ``loss < tol`` (absolute) or ``loss <= rtol * first``
    (relative), each left out when None; diverged at a loss that the library's one divergence
    test (``_divergence.diverged``) calls so: not finite or, with ``blowup`` set,
    ``|loss| > blowup * max(|first|, floor)``
    (``floor`` None: ``blowup * |first|``). Values may be traced (``vmap`` over ``tol``).

    >>> rule = Stop(tol=1e-3, blowup=10.0)
    >>> bool(rule.converged(jnp.asarray(1e-4), 1.0)), bool(rule.diverged(jnp.asarray(11.0), 1.0))
    (True, True)
    >>> bool(Stop(rtol=0.5).converged(jnp.asarray(0.5), jnp.asarray(1.0)))
    True
    """

    tol: Optional[Any] = None
    rtol: Optional[Any] = None
    blowup: Optional[Any] = None
    floor: Optional[float] = None

    def converged(self, loss, first):
        """Whether ``loss`` meets the absolute or the relative rule (False when neither is set)."""
        out = jnp.zeros(jnp.shape(loss), bool)
        if self.tol is not None:
            out = out | (loss < self.tol)
        if self.rtol is not None:
            out = out | (loss <= self.rtol * first)
        return out

    def diverged(self, loss, first):
        """Whether ``loss`` is not finite or has blown up (the library's one divergence test, ``_divergence.diverged``)."""
        return diverged(loss, None if self.blowup is None else first, self.blowup, floor=self.floor)


@dataclass(frozen=True)
class GradientDirection:
    """The plain gradient as the direction: ``params -> (loss_fn(params), grad loss_fn(params))``.

    >>> loss, d = GradientDirection(lambda p: 0.5 * p ** 2)(jnp.asarray(3.0))
    >>> float(loss), float(d)
    (4.5, 3.0)
    """

    loss_fn: Callable

    def __call__(self, params):
        return jax.value_and_grad(self.loss_fn)(params)


@dataclass(frozen=True)
class Descent:
    """The descent loop: ``direction(params) -> (loss, d)`` (:class:`GradientDirection`, or
    :class:`GaussNewtonDirection`), the step ``params - learning_rate * d`` and the :class:`Stop`
    rule (one step: the comment above). Pure and jittable: call :meth:`init`, then :meth:`run` to a
    step count, as often as wanted.

    >>> loop = Descent(GradientDirection(lambda p: 0.5 * jnp.sum(p ** 2)), 0.5, Stop(rtol=1e-6))
    >>> s = loop.run(loop.init(jnp.asarray([4.0]), record=30), 30)
    >>> int(s.step), GNResult(int(s.result)).name, s.losses[:3].tolist()   # the loss falls 4x a step
    (10, 'converged', [8.0, 2.0, 0.5])
    """

    direction: Callable
    learning_rate: Any = 1.0
    stop: Stop = Stop()

    def init(self, params, first=None, *, record: Optional[int] = None) -> DescentState:
        """The state before any step: ``first``, the loss the relative rules compare with (default:
        the loss at the first step's parameters, taken then); ``record``, the number of steps whose
        losses are kept (``DescentState.losses``; None: none)."""
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
        first = jnp.asarray(jnp.nan, dtype) if first is None else jnp.asarray(first)
        losses = None if record is None else jnp.full((int(record),), jnp.nan, dtype)
        return DescentState(params, params, jnp.zeros((), jnp.int32), first,
                            jnp.asarray(int(GNResult.max_steps), jnp.int32), losses)

    def step(self, state: DescentState) -> DescentState:
        """One step (whatever the state's result: :meth:`run` stops at a code other than ``max_steps``)."""
        p, prev, k = state.params, state.prev, state.step
        value, d = self.direction(p)
        # a value that is NaN only before the first step: the first loss is the first step's
        first = jnp.where(jnp.isnan(state.first), value, state.first)
        # ``value`` is the loss at ``p``; a bad value means the step that made ``p`` diverged: go
        # back to ``prev``, the parameters before it
        bad = self.stop.diverged(value, first)
        reached = self.stop.converged(value, first) & ~bad
        lr = self.learning_rate
        new = jax.tree_util.tree_map(lambda a, b: a - lr * b, p, d)
        bad_step = ~tree_all_finite(new) & ~bad & ~reached
        halt = bad | reached | bad_step
        losses = state.losses if state.losses is None else state.losses.at[k].set(value.astype(state.losses.dtype))
        result = jnp.where(bad | bad_step, int(GNResult.diverged),
                           jnp.where(reached, int(GNResult.converged), int(GNResult.max_steps)))
        return DescentState(tree_select(bad, prev, tree_select(halt, p, new)), tree_select(halt, prev, p),
                            jnp.maximum(k + jnp.where(halt, jnp.where(bad, -1, 0), 1), 0),
                            first.astype(state.first.dtype), result.astype(jnp.int32), losses)

    def run(self, state: DescentState, until) -> DescentState:
        """Steps until ``state.step`` reaches ``until`` (a number, possibly traced) or the run has
        converged or diverged; a stopped state is returned as it is."""
        return jax.lax.while_loop(lambda s: (s.step < until) & (s.result == int(GNResult.max_steps)), self.step,
                                  state)


@dataclass(frozen=True, init=False)
class GaussNewtonDirection:
    """The damped Gauss-Newton direction as the strategy of the descent loop
    (:class:`Descent`): ``params -> (loss at params, direction)``, with the keyword
    arguments of :func:`gauss_newton_direction` (checked when called with concrete parameters).

    >>> import jax.numpy as jnp
    >>> loss, d = GaussNewtonDirection(lambda p, x: x @ p, jnp.eye(2), jnp.ones(2), damping=1.0)(jnp.zeros(2))
    >>> float(loss), [round(v, 6) for v in d.tolist()]     # mean loss 0.5; (I / 2 + I)^{-1} (f - y) / 2
    (0.5, [-0.333333, -0.333333])
    """

    f: Callable
    x: Any
    y: Any
    options: dict

    def __init__(self, f: Callable, x, y, **options):
        for name, value in (("f", f), ("x", x), ("y", y), ("options", options)):
            object.__setattr__(self, name, value)

    def __call__(self, params):
        d, info = gauss_newton_direction(self.f, params, self.x, self.y, **self.options)
        return info.loss, d


class GNTrace(NamedTuple):
    """Per-iteration record of :func:`gauss_newton_fit`: the training loss before each step
    (NaN after the run stopped; a diverged run's last entry is the bad loss), the number of
    steps taken (not counting a step undone), whether the run diverged (a non-finite or blown-up
    loss, or a non-finite step; the parameters are those before it), and how it stopped
    (``result``, a :class:`GNResult` code).

    >>> import jax.numpy as jnp
    >>> _, trace = gauss_newton_fit(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2), 4, tol=1e-12)
    >>> int(trace.steps), bool(trace.diverged), trace.loss.tolist()     # one step interpolates
    (1, False, [0.5, 0.0, nan, nan])
    >>> GNResult(int(trace.result)).name
    'converged'
    """

    loss: jax.Array
    steps: jax.Array
    diverged: jax.Array
    result: jax.Array


def gauss_newton_fit(f: Callable, params, x, y, steps: int, *, learning_rate: float = 1.0, tol: float = 0.0,
                     blowup: Optional[float] = None, loss="squared", reduction: str = "mean", damping=0.0,
                     hessian=LossHessian(), solve=Eigh(), form=KernelForm(), ntk_fn: Optional[Callable] = None,
                     method: Optional[str] = None, eigmin: Optional[str] = None):
    """Full-batch damped Gauss-Newton for at most ``steps`` iterations (``steps >= 1``).

    Stops early when the training loss falls below ``tol`` or diverges: becomes non-finite or,
    with ``blowup`` set, exceeds ``blowup`` times the initial loss, or the next step is not
    finite. The parameters before the bad step are returned (``trace.diverged`` is set): a bad
    loss at the parameters of step ``k`` undoes that step (``trace.steps`` is ``k - 1``), a
    non-finite step is not taken. The loop is :class:`Descent` with the :class:`GaussNewtonDirection`, the
    library's one loop. Pure and jittable; ``jax.vmap`` over initial
    parameters and damping values runs a whole sweep as one program. The other keyword
    arguments are those of :func:`gauss_newton_direction`.

    Sizes are checked before anything is allocated: ``steps`` (at most ``2**31 - 1``, the int32
    step counter) losses of the trace and the solved system (``NC x NC``; ``P x P`` with
    :class:`PrimalForm`) must fit in the memory of the parameters' device (a GPU's own limit, else
    the machine's physical memory), or the call is refused with a one-line ValueError that says
    how many steps a call can take. ``ITLIN_MEMORY_LIMIT`` (bytes, e.g. ``8e9`` or ``8G``; ``inf``
    for no check) overrides the limit. Under ``vmap`` the check is per run.

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
    hessian, form, solve = _strategies(hessian, form, solve, method, eigmin)
    _check_ntk_fn(form, ntk_fn)
    loss = get_loss(loss, reduction)
    damping = get_damping(damping)
    _check_solve_damping(solve, damping)
    out_shape = _validate(f, params, x, y, loss, hessian, solve)
    _check_memory(params, out_shape, steps, form)
    if steps > _STEP_COUNTER:
        raise ValueError(f"steps = {steps:,} is more than the int32 step counter counts ({_STEP_COUNTER:,}); run at most "
                         "that many per call, each from the last call's parameters.")
    direction = GaussNewtonDirection(f, x, y, loss=loss, reduction=loss.reduction, damping=damping, hessian=hessian,
                                     form=form, solve=solve, ntk_fn=ntk_fn)
    loop = Descent(direction, learning_rate, Stop(tol=tol, blowup=blowup, floor=1e-30))
    state = loop.run(loop.init(params, record=steps), steps)
    return state.params, GNTrace(state.losses, state.step, state.result == int(GNResult.diverged), state.result)


__all__ = ["ArbelDamping", "Cholesky", "ConstantDamping", "Descent", "DescentState", "Eigh", "Eigvalsh", "GNInfo",
           "GNResult", "GNTrace", "GaussNewtonDirection", "GradientDirection", "IdentityHessian", "InverseSquaring",
           "KernelForm", "LossHessian", "PrimalForm", "Stop", "gauss_newton_direction", "gauss_newton_fit",
           "gauss_newton_step", "get_damping", "smallest_eigenvalue"]
