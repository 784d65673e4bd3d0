"""Empirical neural tangent kernel and the closed-form gradient flow of a linearised model.

Main paper Eq. 2 (the empirical NTK ``Theta_t = J J^T``) and Appendix B, Eq. 9-19 (gradient flow
of the linearised squared-loss model in closed form).

Layout. For ``N`` inputs and ``C`` outputs per input, Jacobians are ``(N*C, P)`` and kernels
``(N1*C, N2*C)`` with example-major rows: row ``n*C + c`` is output ``c`` of example ``n``.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp


def _flat_outputs(apply_fn, params, x):
    out = apply_fn(params, x)
    return out.reshape(-1)


@partial(jax.jit, static_argnums=(0,))
def jacobian(apply_fn, params, x):
    """The Jacobian ``J`` of the flattened outputs (``(N*C, P)``, example-major rows).

    Materialises ``N*C*P`` numbers: meant for small problems and tests. The leaf order of the
    columns is ``jax.flatten_util.ravel_pytree``'s.
    """
    from jax.flatten_util import ravel_pytree

    flat, unravel = ravel_pytree(params)
    return jax.jacrev(lambda v: _flat_outputs(apply_fn, unravel(v), x))(flat)


def _jacobian_blocks(apply_fn, params, x, per_example=True):
    """Per-leaf Jacobian blocks ``(N*C, leaf_size)`` without concatenating them.

    ``per_example=True`` differentiates one example at a time (``vmap`` over examples): ``N*C``
    single-example backward passes instead of ``N*C`` passes over the whole batch, valid when
    the network treats examples independently (every itlin model in inference mode; not
    batch norm in training mode).
    """
    if per_example:
        jac = jax.vmap(lambda xi: jax.jacrev(lambda p: apply_fn(p, xi[None]).reshape(-1))(params))(x)
        return [j.reshape(j.shape[0] * j.shape[1], -1) for j in jax.tree_util.tree_leaves(jac)]
    jac = jax.jacrev(lambda p: _flat_outputs(apply_fn, p, x))(params)
    return [j.reshape(j.shape[0], -1) for j in jax.tree_util.tree_leaves(jac)]


def _ntk_block(apply_fn, params, x1, x2, per_example):
    j1 = _jacobian_blocks(apply_fn, params, x1, per_example)
    j2 = j1 if x2 is None else _jacobian_blocks(apply_fn, params, x2, per_example)
    return sum(a @ b.T for a, b in zip(j1, j2))


@partial(jax.jit, static_argnums=(0,), static_argnames=("chunk_size", "trace", "per_example"))
def empirical_ntk(apply_fn, params, x1, x2=None, *, chunk_size: Optional[int] = None, trace: bool = False,
                  per_example: bool = True):
    """Empirical NTK ``J(x1) J(x2)^T`` at ``params`` (main paper Eq. 2).

    Args:
      apply_fn: pure ``apply(params, x)``.
      params: parameter pytree.
      x1, x2: input batches; ``x2=None`` means ``x2 = x1`` (the Gram matrix on one batch).
      chunk_size: if given, Jacobians are formed for at most this many inputs at a time, so
        memory is ``O(chunk_size * C * P)`` instead of ``O(N * C * P)``.
      trace: if True, sum over the output dimension and return ``(N1, N2)``.
      per_example: form Jacobians one example at a time (``N`` times fewer backward passes);
        valid when outputs of one example do not depend on the others (all itlin models in
        inference mode). ``False`` differentiates the batch as a whole.

    Returns:
      ``(N1*C, N2*C)`` array (example-major), or ``(N1, N2)`` if ``trace`` or ``C == 1``.
    """
    n1 = x1.shape[0]
    same = x2 is None
    if chunk_size is None or chunk_size >= max(n1, n1 if same else x2.shape[0]):
        k = _ntk_block(apply_fn, params, x1, None if same else x2, per_example)
    else:
        xs2 = x1 if same else x2
        rows = []
        for i in range(0, n1, chunk_size):
            ja = _jacobian_blocks(apply_fn, params, x1[i:i + chunk_size], per_example)
            cols = []
            for j in range(0, xs2.shape[0], chunk_size):
                jb = _jacobian_blocks(apply_fn, params, xs2[j:j + chunk_size], per_example)
                cols.append(sum(a @ b.T for a, b in zip(ja, jb)))
            rows.append(jnp.concatenate(cols, axis=1))
        k = jnp.concatenate(rows, axis=0)
    n2 = x1.shape[0] if same else x2.shape[0]
    c = k.shape[0] // n1
    if trace and c > 1:
        k = k.reshape(n1, c, n2, c).trace(axis1=1, axis2=3)
    return k


def ntk_smallest_eigenvalue(apply_fn, params, x, **kwargs):
    """Smallest eigenvalue of the empirical NTK on ``x`` (Arbel et al. Eq. 5's ``sigma^2``)."""
    k = empirical_ntk(apply_fn, params, x, **kwargs)
    return jnp.linalg.eigvalsh(0.5 * (k + k.T))[0]


def _flow_factor(s, tau):
    """``(1 - exp(-s tau)) / s``, continued to ``tau`` at ``s = 0`` (no division by zero)."""
    safe = jnp.where(jnp.abs(s) > 0, s, 1.0)
    return jnp.where(jnp.abs(s) > 0, -jnp.expm1(-safe * tau) / safe, tau)


def gradient_flow_outputs(kernel, f0, y, tau):
    """Outputs of the linearised squared-loss model under gradient flow (Appendix B, Eq. 14).

    ``f(tau) = y + exp(-K tau) (f0 - y)`` with ``K`` the empirical NTK on the training inputs and
    ``tau = learning_rate * time`` (``tau = eta * k`` approximates ``k`` gradient steps of size
    ``eta`` on ``0.5 * ||f - y||^2``). ``tau`` may be a scalar or a 1-D array of times.
    ``f0`` and ``y`` are flattened example-major to match ``kernel``.
    """
    s, v = jnp.linalg.eigh(0.5 * (kernel + kernel.T))
    s = jnp.clip(s, 0.0, None)
    r0 = (f0 - y).reshape(-1)
    coeff = v.T @ r0
    tau = jnp.asarray(tau)
    decay = jnp.exp(-jnp.multiply.outer(tau, s))  # (..., NC)
    out = y.reshape(-1) + (decay * coeff) @ v.T
    return out.reshape(tau.shape + f0.shape)


def gradient_flow_params(apply_fn, anchor, x, y, tau, *, kernel=None):
    """Parameters of the linearised squared-loss model under gradient flow (Eq. 18-19).

    ``theta(tau) = theta_s - J^T V diag((1 - exp(-s tau)) / s) V^T (f(theta_s, X) - Y)`` with
    ``K = J J^T = V diag(s) V^T``. This is Eq. 18 written so that it also holds when the kernel
    is singular (the factor tends to ``tau`` as ``s -> 0``); ``tau = inf`` gives Eq. 19, the
    minimum-norm interpolating step (undamped Gauss-Newton, Eq. 5). ``tau`` is a scalar.
    Jitted (``apply_fn`` static).
    """
    if kernel is None:
        kernel = empirical_ntk(apply_fn, anchor, x)
    return _gradient_flow_params(apply_fn, anchor, x, y, jnp.asarray(tau, dtype=kernel.dtype), kernel)


@partial(jax.jit, static_argnums=(0,))
def _gradient_flow_params(apply_fn, anchor, x, y, tau, kernel):
    f0, vjp_fn = jax.vjp(lambda p: apply_fn(p, x), anchor)
    s, v = jnp.linalg.eigh(0.5 * (kernel + kernel.T))
    s = jnp.clip(s, 0.0, None)
    r0 = (f0 - y).reshape(-1)
    rel = s > jnp.max(s) * s.shape[0] * jnp.finfo(s.dtype).eps
    at_inf = jnp.where(rel, 1.0 / jnp.where(rel, s, 1.0), 0.0)  # the pseudo-inverse (Eq. 19)
    finite_tau = jnp.where(jnp.isinf(tau), 0.0, tau)
    factor = jnp.where(jnp.isinf(tau), at_inf, _flow_factor(s, finite_tau))
    z = v @ (factor * (v.T @ r0))
    (step,) = vjp_fn(z.reshape(f0.shape).astype(f0.dtype))
    return jax.tree_util.tree_map(lambda a, g: a - g, anchor, step)


def kernel_distance(k_a, k_b):
    """Relative Frobenius distance ``||K_a - K_b|| / ||K_b||`` between two kernels."""
    return jnp.linalg.norm(k_a - k_b) / jnp.maximum(jnp.linalg.norm(k_b), jnp.finfo(k_b.dtype).tiny)


__all__ = [
    "empirical_ntk",
    "gradient_flow_outputs",
    "gradient_flow_params",
    "jacobian",
    "kernel_distance",
    "ntk_smallest_eigenvalue",
]
