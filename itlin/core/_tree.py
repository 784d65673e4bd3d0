"""Small pytree helpers shared by the library (public: :func:`num_params`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def tree_sub(a, b):
    return jax.tree_util.tree_map(lambda u, v: u - v, a, b)


def tree_add(a, b):
    return jax.tree_util.tree_map(lambda u, v: u + v, a, b)


def tree_scale(a, s):
    return jax.tree_util.tree_map(lambda u: s * u, a)


def tree_axpy(alpha, x, y):
    """alpha * x + y, leaf by leaf."""
    return jax.tree_util.tree_map(lambda u, v: alpha * u + v, x, y)


def tree_vdot(a, b):
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda u, v: jnp.vdot(u, v), a, b))
    return sum(leaves) if leaves else jnp.zeros(())


def tree_norm(a):
    return jnp.sqrt(tree_vdot(a, a))


def tree_select(pred, on_true, on_false):
    """Leafwise ``where(pred, on_true, on_false)`` for a scalar boolean ``pred``."""
    return jax.tree_util.tree_map(lambda u, v: jnp.where(pred, u, v), on_true, on_false)


def num_params(tree) -> int:
    """Number of scalars in a pytree (the trainable parameters of a model).

    >>> import jax.numpy as jnp
    >>> num_params({"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)})
    8
    """
    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))


def tree_all_finite(a):
    leaves = jax.tree_util.tree_leaves(a)
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def tree_cast(a, dtype):
    return jax.tree_util.tree_map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, a
    )


__all__ = [
    "ravel_pytree",
    "tree_add",
    "tree_all_finite",
    "tree_axpy",
    "tree_cast",
    "tree_norm",
    "tree_scale",
    "tree_select",
    "num_params",
    "tree_sub",
    "tree_vdot",
]
