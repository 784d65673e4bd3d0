"""Damped (generalised) Gauss-Newton in kernel form.

Main paper Eq. 5-6 and Arbel et al. Section 3.2::

    theta <- theta - eta * (J^T H J + lambda I)^{-1} J^T g,     g = dL/df,  H = d^2L/df^2

``H = I`` for the squared loss (Gauss-Newton) and the softmax cross-entropy Hessian
``diag(p) - p p^T`` per example for cross-entropy (generalised Gauss-Newton). The step is
computed in *kernel form* with the push-through (Woodbury) identity::

    (J^T H J + lambda I)^{-1} J^T g  =  J^T (H K + lambda I)^{-1} g,       K = J J^T

so the only linear system is ``N*C x N*C`` and no ``P x P`` matrix is ever formed; ``J^T z`` is
one vector-Jacobian product. :func:`gauss_newton_direction` with ``method="primal"`` forms the
``P x P`` system instead, for small ``P``: the tests use it to check the identity.

Damping is a constant ``lambda`` (:class:`ConstantDamping`, or just a float) or Arbel et al.'s
Eq. 5 choice ``alpha * sigma_min(J J^T)`` floored at ``eps0`` (:class:`ArbelDamping`).

Solving the linearised squared-loss problem exactly with ``eta = 1`` and ``lambda = 0`` gives
the minimum-norm interpolating step (Eq. 5, Appendix B Eq. 19); with ``lambda > 0`` it is the
minimiser of ``0.5 ||f_lin(theta) - Y||^2 + 0.5 lambda ||theta - theta_s||^2`` (Eq. 6).
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ._checks import check_positive
from ._tree import tree_all_finite, tree_axpy, tree_select
from .kernels import empirical_ntk, jacobian
from .losses import Loss, get_loss


class ConstantDamping(NamedTuple):
    """A fixed damping ``lambda >= 0`` (Eq. 6)."""

    lam: float

    def value(self, eigmin):
        """The damping: ``lam`` whatever the kernel's smallest eigenvalue."""
        return jnp.asarray(self.lam)


class ArbelDamping(NamedTuple):
    """Arbel et al. Eq. 5: ``lambda = max(alpha * sigma_min(J J^T), eps0)``.

    Their experiments use ``alpha = 1`` and ``eps0 = 1e-7``.
    """

    alpha: float = 1.0
    eps0: float = 1e-7

    def value(self, eigmin):
        """``max(alpha * eigmin, eps0)`` with ``eigmin`` the NTK's smallest eigenvalue (Eq. 5)."""
        return jnp.maximum(self.alpha * eigmin, self.eps0)


def get_damping(spec):
    """A damping rule from a number (constant ``lambda``) or a damping object."""
    if isinstance(spec, (ConstantDamping, ArbelDamping)):
        if isinstance(spec, ConstantDamping) and isinstance(spec.lam, numbers.Real):
            check_positive("damping lambda", spec.lam, allow_zero=True)
        if isinstance(spec, ArbelDamping):
            check_positive("damping alpha", spec.alpha, allow_zero=True)
            check_positive("damping eps0", spec.eps0, allow_zero=True)
        return spec
    if isinstance(spec, dict):
        spec = dict(spec)
        kind = spec.pop("kind", "constant")
        if kind == "constant":
            return get_damping(ConstantDamping(**spec))
        if kind == "arbel":
            return get_damping(ArbelDamping(**spec))
        raise ValueError(f"unknown damping kind {kind!r}; choose 'constant' or 'arbel'.")
    if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
        check_positive("damping lambda", spec, allow_zero=True)
        return ConstantDamping(float(spec))
    if isinstance(spec, jax.Array):  # a traced or concrete array: constant damping (vmapped sweeps)
        return ConstantDamping(spec)
    raise TypeError(f"damping must be a number >= 0, ConstantDamping or ArbelDamping, got {spec!r}.")


class GNInfo(NamedTuple):
    """Diagnostics of one Gauss-Newton step: the loss before the step, the damping used and
    the smallest eigenvalue of the NTK (NaN where it was not computed)."""

    loss: jax.Array
    damping: jax.Array
    ntk_eigmin: jax.Array


def _needs_eig(damping) -> bool:
    return isinstance(damping, ArbelDamping)


def _output_terms(loss: Loss, f, y, hessian: str):
    g = loss.grad_outputs(f, y).reshape(-1)
    if hessian == "identity" or loss.name == "squared" and loss.reduction == "sum":
        return g, None
    return g, loss.hessian_outputs(f, y)  # (N, C, C)


def _solve_kernel(kernel, h_blocks, g, damping, singular_ok):
    """Solve ``(H K + lambda I) z = g``; returns ``z``, ``lambda`` and ``sigma_min(K)``."""
    nc = kernel.shape[0]
    kernel = 0.5 * (kernel + kernel.T)
    eye = jnp.eye(nc, dtype=kernel.dtype)
    if h_blocks is None:
        if _needs_eig(damping) or singular_ok:
            s, v = jnp.linalg.eigh(kernel)
            eigmin = s[0]
            lam = damping.value(eigmin).astype(kernel.dtype)
            d = s + lam
            tol = jnp.max(jnp.abs(d)) * nc * jnp.finfo(kernel.dtype).eps
            inv = jnp.where(jnp.abs(d) > tol, 1.0 / jnp.where(jnp.abs(d) > tol, d, 1.0), 0.0)
            z = v @ (inv * (v.T @ g))
            return z, lam, eigmin
        lam = damping.value(jnp.nan).astype(kernel.dtype)
        chol = jax.scipy.linalg.cho_factor(kernel + lam * eye)
        return jax.scipy.linalg.cho_solve(chol, g), lam, jnp.asarray(jnp.nan, kernel.dtype)
    n, c, _ = h_blocks.shape
    eigmin = jnp.linalg.eigvalsh(kernel)[0] if _needs_eig(damping) else jnp.asarray(jnp.nan, kernel.dtype)
    lam = damping.value(eigmin).astype(kernel.dtype)
    if singular_ok:
        # lambda = 0 with a singular H (softmax): the limit of the damped step is
        # J^T S (S K S)^+ S^+ g with S = H^{1/2}; g lies in the range of H (each example's
        # softmax gradient sums to zero), so g = S S^+ g. Solved symmetrically, pseudo-inverses
        # by eigendecomposition.
        hs, hv = jnp.linalg.eigh(h_blocks)  # (N, C), (N, C, C)
        hs = jnp.clip(hs, 0.0, None)
        tol_h = jnp.max(hs) * c * jnp.finfo(kernel.dtype).eps
        root = jnp.sqrt(hs)
        inv_root = jnp.where(hs > tol_h, 1.0 / jnp.where(hs > tol_h, root, 1.0), 0.0)
        sq = jnp.einsum("nce,ne,nde->ncd", hv, root, hv)  # S, blockwise
        sq_pinv = jnp.einsum("nce,ne,nde->ncd", hv, inv_root, hv)  # S^+
        blk = jax.scipy.linalg.block_diag(*sq)
        m = blk @ kernel @ blk
        u = jnp.einsum("ncd,nd->nc", sq_pinv, g.reshape(n, c)).reshape(-1)
        ms, mv = jnp.linalg.eigh(0.5 * (m + m.T))
        tol = jnp.max(jnp.abs(ms)) * nc * jnp.finfo(kernel.dtype).eps
        inv = jnp.where(ms > tol, 1.0 / jnp.where(ms > tol, ms, 1.0), 0.0)
        z = blk @ (mv @ (inv * (mv.T @ u)))
        return z, lam, eigmin
    hk = jnp.einsum("nce,nemd->ncmd", h_blocks, kernel.reshape(n, c, n, c)).reshape(nc, nc)
    return jnp.linalg.solve(hk + lam * eye, g), lam, eigmin


def _maybe_zero(lam) -> bool:
    """True if ``lam`` is a concrete zero (then the kernel system may be singular and is solved
    with pseudo-inverses: the lambda -> 0 limit of the damped step, the minimum-norm step)."""
    try:
        return float(lam) == 0.0
    except (TypeError, jax.errors.ConcretizationTypeError):
        return False


def gauss_newton_direction(apply_fn: Callable, params, x, y, *, loss="squared", reduction: str = "sum",
                           damping=0.0, hessian: str = "loss", method: str = "kernel",
                           ntk_fn: Optional[Callable] = None):
    """The damped Gauss-Newton direction ``(J^T H J + lambda I)^{-1} J^T g`` (Eq. 5-6).

    Args:
      apply_fn: pure ``apply(params, x)``.
      params: parameters (any pytree) at which ``J`` is taken.
      x, y: the training batch (targets shaped like the outputs, or labels for cross-entropy).
      loss: ``"squared"`` (``H = I``) or ``"cross_entropy"`` (``H`` = softmax Hessian).
      reduction: ``"sum"`` (the paper's ``0.5 ||f - Y||^2``, default) or ``"mean"``.
      damping: ``lambda`` (float >= 0), :class:`ConstantDamping` or :class:`ArbelDamping`.
      hessian: ``"loss"`` (the loss Hessian, default) or ``"identity"`` (``H = I`` whatever the
        loss, as in Arbel et al.'s experiments with a mean squared loss).
      method: ``"kernel"`` (Woodbury, an ``NC x NC`` solve) or ``"primal"`` (``P x P``; small P).
      ntk_fn: optional ``ntk_fn(params, x) -> K`` (e.g. a closed-form NTK); defaults to the
        empirical NTK by Jacobians.

    Returns:
      ``(direction, GNInfo)``; the step is ``params - eta * direction``. Jitted.
    """
    loss = get_loss(loss, reduction)
    damping = get_damping(damping)
    if hessian not in ("loss", "identity"):
        raise ValueError(f"hessian must be 'loss' or 'identity', got {hessian!r}.")
    if method not in ("kernel", "primal"):
        raise ValueError(f"method must be 'kernel' or 'primal', got {method!r}.")
    singular_ok = isinstance(damping, ConstantDamping) and _maybe_zero(damping.lam)
    return _direction(apply_fn, params, x, y, damping, loss=loss, hessian=hessian, method=method,
                      ntk_fn=ntk_fn, singular_ok=singular_ok)


@partial(jax.jit, static_argnums=(0,), static_argnames=("loss", "hessian", "method", "ntk_fn", "singular_ok"))
def _direction(apply_fn, params, x, y, damping, *, loss, hessian, method, ntk_fn, singular_ok):
    f, vjp_fn = jax.vjp(lambda p: apply_fn(p, x), params)
    if loss.name == "squared" and f.shape != y.shape:
        raise ValueError(f"targets must be shaped like the outputs: outputs {f.shape}, targets {y.shape}.")
    loss_value = loss(f, y)
    g, h_blocks = _output_terms(loss, f, y, hessian)
    if method == "kernel":
        kernel = ntk_fn(params, x) if ntk_fn is not None else empirical_ntk(apply_fn, params, x)
        if kernel.shape != (g.shape[0], g.shape[0]):
            raise ValueError(f"the NTK must be {g.shape[0]} x {g.shape[0]} (examples x outputs), got {kernel.shape}.")
        z, lam, eigmin = _solve_kernel(kernel, h_blocks, g, damping, singular_ok)
        (direction,) = vjp_fn(z.reshape(f.shape).astype(f.dtype))
        return direction, GNInfo(loss_value, lam, eigmin)
    flat, unravel = ravel_pytree(params)
    jac = jacobian(apply_fn, params, x)  # (NC, P)
    if h_blocks is None:
        gram = jac.T @ jac
    else:
        h_full = jax.scipy.linalg.block_diag(*h_blocks)
        gram = jac.T @ h_full @ jac
    eigmin = jnp.linalg.eigvalsh(jac @ jac.T)[0] if _needs_eig(damping) else jnp.asarray(jnp.nan, flat.dtype)
    lam = damping.value(eigmin).astype(flat.dtype)
    rhs = jac.T @ g
    a = gram + lam * jnp.eye(flat.shape[0], dtype=flat.dtype)
    d = jnp.linalg.lstsq(a, rhs)[0] if singular_ok else jnp.linalg.solve(a, rhs)
    return unravel(d), GNInfo(loss_value, lam, eigmin)


def gauss_newton_step(apply_fn: Callable, params, x, y, *, lr: float = 1.0, **kwargs):
    """One damped Gauss-Newton step ``params - lr * direction`` (Eq. 6; Arbel et al. Eq. 4).

    Keyword arguments are those of :func:`gauss_newton_direction`. Returns ``(params, GNInfo)``.
    """
    if isinstance(lr, numbers.Real):
        check_positive("lr (eta)", lr)
    direction, info = gauss_newton_direction(apply_fn, params, x, y, **kwargs)
    return tree_axpy(-lr, direction, params), info


class GNTrace(NamedTuple):
    """Per-iteration record of :func:`gauss_newton_fit`: the training loss before each step
    (NaN after the run stopped), the number of steps taken, and whether the run diverged (a
    non-finite loss or step; the parameters are those before it)."""

    loss: jax.Array
    steps: jax.Array
    diverged: jax.Array


def gauss_newton_fit(apply_fn: Callable, params, x, y, steps: int, *, lr: float = 1.0, tol: float = 0.0,
                     **kwargs):
    """Run full-batch damped Gauss-Newton for at most ``steps`` iterations.

    Stops early when the training loss falls below ``tol`` (Arbel et al. stop at ``1e-7``) or
    becomes non-finite (diverged: the parameters before the bad step are kept). Pure and
    jittable; ``jax.vmap`` over seeds (initial params) and damping values runs a whole sweep as
    one program. Keyword arguments are those of :func:`gauss_newton_direction`.

    Returns ``(params, GNTrace)``.
    """
    if isinstance(lr, numbers.Real):
        check_positive("lr (eta)", lr)
    if isinstance(tol, numbers.Real):
        check_positive("tol", tol, allow_zero=True)
    steps = int(steps)
    losses0 = jnp.full((steps,), jnp.nan, dtype=jnp.result_type(*jax.tree_util.tree_leaves(params)))

    def cond(carry):
        i, p, losses, stop, bad = carry
        return jnp.logical_and(i < steps, ~stop)

    def body(carry):
        i, p, losses, stop, _ = carry
        direction, info = gauss_newton_direction(apply_fn, p, x, y, **kwargs)
        new_p = tree_axpy(-lr, direction, p)
        bad = jnp.logical_or(~jnp.isfinite(info.loss), ~tree_all_finite(new_p))
        keep = jnp.logical_or(bad, info.loss < tol)
        new_p = tree_select(keep, p, new_p)
        losses = losses.at[i].set(info.loss.astype(losses.dtype))
        return i + jnp.where(keep, 0, 1), new_p, losses, keep, bad

    i, params, losses, _, bad = jax.lax.while_loop(
        cond, body, (jnp.zeros((), jnp.int32), params, losses0, jnp.asarray(False), jnp.asarray(False)))
    return params, GNTrace(losses, i, bad)


__all__ = [
    "ArbelDamping",
    "ConstantDamping",
    "GNInfo",
    "GNTrace",
    "gauss_newton_direction",
    "gauss_newton_fit",
    "gauss_newton_step",
    "get_damping",
]
