"""The parts a damped Gauss-Newton step is composed of (:mod:`itlin.core.gauss_newton`), each a
small immutable object, optimistix-style:

* the damping: :class:`ConstantDamping`, :class:`ArbelDamping` (:func:`get_damping` builds one
  from a number or a dict);
* the Hessian of the loss in the outputs: :class:`LossHessian`, :class:`IdentityHessian`;
* the form of the system: :class:`KernelForm` (``NC x NC``), :class:`PrimalForm` (``P x P``);
* the linear solve: :class:`Eigh`, :class:`Cholesky`, whose ``eigmin`` (:class:`Eigvalsh`,
  :class:`InverseSquaring`) gives ``sigma_min`` to the Arbel damping.

Invalid combinations cannot be built. The strings of earlier versions are a short form of the
objects, mapped to them in one place (``SHORT_FORMS``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._checks import check_scalar
from .linearise import jacobian, ntk


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


# ------------------------------------------------------------------------------ strategies
# The parts a Gauss-Newton step is composed of, as small immutable objects (frozen dataclasses,
# not NamedTuples: two empty NamedTuples compare equal, and these are static arguments of a jitted
# function, where equal means "the same compiled program"). Each has a short form, a string, mapped
# to it in one place (:func:`_strategies`).


@dataclass(frozen=True)
class Eigvalsh:
    """``sigma_min`` by a dense eigensolver (``jnp.linalg.eigvalsh``): the default, exact to
    rounding for any loss (it skips a Hessian's null space). Short form ``eigmin="eigvalsh"``.

    >>> import jax.numpy as jnp
    >>> float(Eigvalsh()(jnp.asarray([[2.0, 1.0], [1.0, 2.0]])))
    1.0
    """

    def __call__(self, a, nullity=None):
        """The smallest eigenvalue of the symmetric ``a`` on the range of ``S`` (``nullity`` structural zeros)."""
        return _eigmin_on_range(jnp.linalg.eigvalsh(a), nullity)


@dataclass(frozen=True)
class InverseSquaring:
    """``sigma_min`` without an eigendecomposition (:func:`smallest_eigenvalue`: a Cholesky inverse
    squared ``squarings`` times; ``None``: the dtype's mantissa length). Meant for accelerators;
    needs ``H = c I`` (the squared loss, or :class:`IdentityHessian`). Short form
    ``eigmin="inverse_squaring"``.

    >>> import jax.numpy as jnp
    >>> round(float(InverseSquaring()(jnp.asarray([[2.0, 1.0], [1.0, 2.0]]))), 6)
    1.0
    >>> InverseSquaring(squarings=0)
    Traceback (most recent call last):
    ...
    ValueError: squarings must be None or an integer >= 1, got 0; e.g. InverseSquaring(squarings=24).
    """

    squarings: Optional[int] = None

    def __post_init__(self):
        q = self.squarings
        if q is not None and (isinstance(q, bool) or not isinstance(q, numbers.Integral) or q < 1):
            raise ValueError(f"squarings must be None or an integer >= 1, got {q!r}; e.g. "
                             "InverseSquaring(squarings=24).")

    def __call__(self, a, nullity=None):
        """The smallest eigenvalue of the PSD ``a`` (``nullity`` must be None: ``H = c I``)."""
        if nullity is not None:  # refused by _validate; never silently wrong
            raise ValueError("InverseSquaring cannot skip a Hessian's null space; use Cholesky(eigmin=Eigvalsh()).")
        return _smallest_eigenvalue(a, self.squarings)


@dataclass(frozen=True)
class Eigh:
    """The linear solve by an eigendecomposition: exact for every damping ``lambda >= 0``, the
    pseudo-inverse (minimum-norm step) at ``lambda = 0``; ``sigma_min`` comes from the same
    decomposition. The default. Short form ``solve="eigh"``.

    >>> import jax.numpy as jnp
    >>> Eigh()(jnp.asarray([[1.0, 0.0], [0.0, 0.0]]), jnp.asarray([2.0, 3.0]), 0.0).tolist()
    [2.0, 0.0]
    """

    #: how ``sigma_min`` is computed where the decomposition is not at hand (the primal form)
    eigmin = Eigvalsh()

    def decompose(self, a):
        """``(eigenvalues, eigenvectors)`` of the symmetric ``a``."""
        return jnp.linalg.eigh(a)

    def __call__(self, a, u, lam, eig=None):
        """``(a + lam I)^{-1} u`` for symmetric PSD ``a``; the pseudo-inverse where ``a + lam I`` is
        singular (``eig = (s, v)`` if already computed)."""
        s, v = eig if eig is not None else jnp.linalg.eigh(a)
        d = s + lam
        tol = jnp.max(jnp.abs(d)) * a.shape[0] * jnp.finfo(a.dtype).eps
        inv = jnp.where(jnp.abs(d) > tol, 1.0 / jnp.where(jnp.abs(d) > tol, d, 1.0), 0.0)
        return v @ (inv * (v.T @ u))


@dataclass(frozen=True)
class Cholesky:
    """The linear solve by a Cholesky factorisation: faster, for a damping ``lambda > 0`` (singular
    at ``lambda = 0``; a damping 0 for sure is refused, and a failed factorisation raises instead of
    returning NaN). :class:`ArbelDamping` still needs ``sigma_min``: ``eigmin`` says how,
    :class:`Eigvalsh` (default) or :class:`InverseSquaring`. Short form ``solve="cholesky"``
    (with ``eigmin="eigvalsh" | "inverse_squaring"``).

    >>> import jax.numpy as jnp
    >>> jnp.round(Cholesky()(jnp.eye(2), jnp.asarray([2.0, 4.0]), 1.0), 6).tolist()
    [1.0, 2.0]
    >>> Cholesky(eigmin=InverseSquaring(squarings=30)).eigmin
    InverseSquaring(squarings=30)
    """

    eigmin: Union[Eigvalsh, InverseSquaring] = Eigvalsh()

    def __post_init__(self):
        if not isinstance(self.eigmin, (Eigvalsh, InverseSquaring)):
            raise ValueError(f"Cholesky's eigmin must be Eigvalsh() or InverseSquaring(), got {self.eigmin!r}; e.g. "
                             "Cholesky(eigmin=InverseSquaring()).")

    def decompose(self, a):
        """None: a Cholesky solve has no eigenvalues to share (``eigmin`` computes ``sigma_min``)."""
        return None

    def __call__(self, a, u, lam, eig=None):
        """``(a + lam I)^{-1} u`` for symmetric ``a + lam I`` positive definite."""
        eye = jnp.eye(a.shape[0], dtype=a.dtype)
        return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a + lam * eye), u)


class _System(NamedTuple):
    """What the Hessian part gives the form: the flat output gradient ``g``, ``H`` as a scalar
    ``c`` (``H = c I``) or as per-example blocks ``(N, C, C)`` (one of the two is None), and the
    reduction's scale on ``H`` (the Arbel floor's units)."""

    g: jax.Array
    scale: Optional[jax.Array]
    h_blocks: Optional[jax.Array]
    floor_scale: float


@dataclass(frozen=True)
class LossHessian:
    """``H`` = the loss's own Hessian in the outputs (``itlin.Loss.hessian``: ``c I`` for the
    squared loss, the softmax blocks ``diag(p) - p p^T`` for cross-entropy), scaled by the
    reduction. The default. Short form ``hessian="loss"``.

    >>> import jax.numpy as jnp
    >>> from itlin import get_loss
    >>> float(LossHessian()(get_loss("squared", "mean"), jnp.zeros(4), jnp.ones(4)).scale)   # c = 1/N
    0.25
    """

    def __call__(self, loss, f, y) -> _System:
        """The system's parts at outputs ``f`` and targets ``y``."""
        g = loss.grad_outputs(f, y).reshape(-1)
        n = f.shape[0]
        scale = loss.scale(n)
        h = loss.hessian(f, y)
        if jnp.ndim(h) == 0:
            return _System(g, scale * h, None, scale)
        c = g.shape[0] // n
        return _System(g, None, scale * jnp.asarray(h, f.dtype).reshape(n, c, c), scale)


@dataclass(frozen=True)
class IdentityHessian:
    """``H = I`` whatever the loss and reduction: Arbel et al.'s update ``J^T (J J^T + eps I)^{-1} g``
    (also for a loss that brings no Hessian). Short form ``hessian="identity"``.

    >>> import jax.numpy as jnp
    >>> from itlin import get_loss
    >>> float(IdentityHessian()(get_loss("squared", "mean"), jnp.zeros(4), jnp.ones(4)).scale)
    1.0
    """

    def __call__(self, loss, f, y) -> _System:
        """The system's parts at outputs ``f`` and targets ``y``."""
        return _System(loss.grad_outputs(f, y).reshape(-1), 1.0, None, 1.0)


@dataclass(frozen=True)
class KernelForm:
    """The step in kernel form (push-through identity): one ``NC x NC`` system ``S K S + lambda I``
    and one transposed pass ``J^T z``. The default. Short form ``method="kernel"``.

    >>> import jax.numpy as jnp
    >>> from itlin import gauss_newton_direction
    >>> d, _ = gauss_newton_direction(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2), form=KernelForm())
    >>> d.tolist()
    [-1.0, -1.0]
    """

    def __call__(self, f, params, x, lin, system: _System, damping, solve, ntk_fn):
        """``(direction, loss-free GNInfo parts (damping, sigma_min))``."""
        out = lin.outputs
        g, scale, h_blocks, floor_scale = system
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
        eig = solve.decompose(a)
        if eig is not None:
            sigma_min = _eigmin_on_range(eig[0], nullity)
        else:
            sigma_min = solve.eigmin(a, nullity) if isinstance(damping, ArbelDamping) else jnp.asarray(jnp.nan,
                                                                                                        out.dtype)
        lam = damping.value(sigma_min, floor_scale).astype(a.dtype)
        z = solve(a, u, lam, eig)
        if root is not None:
            z = root @ z
        return lin.vjp(z.reshape(out.shape).astype(out.dtype)), lam, sigma_min


@dataclass(frozen=True)
class PrimalForm:
    """The step in primal form: the ``P x P`` system ``J^T H J + lambda I`` (small ``P``; the tests
    use it to check the kernel form). Short form ``method="primal"``.

    >>> import jax.numpy as jnp
    >>> from itlin import gauss_newton_direction
    >>> d, _ = gauss_newton_direction(lambda p, x: x @ p, jnp.zeros(2), jnp.eye(2), jnp.ones(2), form=PrimalForm())
    >>> d.tolist()
    [-1.0, -1.0]
    """

    def __call__(self, f, params, x, lin, system: _System, damping, solve, ntk_fn):
        """``(direction, damping, sigma_min)``; ``ntk_fn`` is not used."""
        g, scale, h_blocks, floor_scale = system
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
        arbel = isinstance(damping, ArbelDamping)
        nan = jnp.asarray(jnp.nan, lin.outputs.dtype)
        sigma_min = solve.eigmin(0.5 * (kernel_system + kernel_system.T), nullity) if arbel else nan
        lam = damping.value(sigma_min, floor_scale).astype(flat.dtype)
        d = solve(jac.T @ h_jac, jac.T @ g, lam)
        return unravel(d), lam, sigma_min


#: the short forms: each string argument and the object it stands for (the one place they are mapped)
SHORT_FORMS = {
    "hessian": {"loss": LossHessian(), "identity": IdentityHessian()},
    "method": {"kernel": KernelForm(), "primal": PrimalForm()},
    "solve": {"eigh": Eigh(), "cholesky": Cholesky()},
    "eigmin": {"eigvalsh": Eigvalsh(), "inverse_squaring": InverseSquaring()},
}
_KINDS = {"hessian": (LossHessian, IdentityHessian), "method": (KernelForm, PrimalForm), "solve": (Eigh, Cholesky),
          "eigmin": (Eigvalsh, InverseSquaring)}
_ERRORS = {"hessian": "hessian must be 'loss' or 'identity'", "method": "method must be 'kernel' or 'primal'",
           "solve": "solve must be 'eigh' (any damping >= 0) or 'cholesky' (damping > 0)",
           "eigmin": "eigmin must be 'eigvalsh' or 'inverse_squaring'"}
_FIXES = {"hessian": "LossHessian() or IdentityHessian()", "method": "form=KernelForm() or form=PrimalForm()",
          "solve": "Eigh() or Cholesky(eigmin=Eigvalsh() | InverseSquaring())",
          "eigmin": "Cholesky(eigmin=Eigvalsh() | InverseSquaring())"}


def _strategy(what, value):
    if isinstance(value, _KINDS[what]):
        return value
    if isinstance(value, str) and value in SHORT_FORMS[what]:
        return SHORT_FORMS[what][value]
    raise ValueError(f"{_ERRORS[what]}, got {value!r}; or pass the object: {_FIXES[what]}.")


def _strategies(hessian, form, solve, method=None, eigmin=None):
    """``(hessian, form, solve)`` as strategy objects from the objects or their short forms, every
    bad value or combination refused with one line naming the fix."""
    hessian = _strategy("hessian", hessian)
    if method is not None:
        if form != KernelForm():
            raise ValueError(f"pass form={form!r} or its short form method={method!r}, not both.")
        form = method
    form = _strategy("method", form)
    solve = _strategy("solve", solve)
    if eigmin is not None:
        given, eigmin = eigmin, _strategy("eigmin", eigmin)
        if isinstance(solve, Eigh) and eigmin != Eigvalsh():
            raise ValueError(f"eigmin={given!r} is for solve='cholesky' (Cholesky(eigmin=...)); solve='eigh' already "
                             "has sigma_min from its decomposition: drop eigmin or pass solve='cholesky'.")
        if isinstance(solve, Cholesky):
            if solve != Cholesky() and solve.eigmin != eigmin:
                raise ValueError(f"pass eigmin inside the solve, solve=Cholesky(eigmin={eigmin!r}), not both.")
            solve = Cholesky(eigmin=eigmin)
    return hessian, form, solve


__all__ = ["ArbelDamping", "Cholesky", "ConstantDamping", "Eigh", "Eigvalsh", "IdentityHessian", "InverseSquaring",
           "KernelForm", "LossHessian", "PrimalForm", "SHORT_FORMS", "get_damping"]
