"""Small pytree helpers shared by the library (public: :func:`num_params`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def tree_sub(a, b):
    return jax.tree_util.tree_map(lambda u, v: u - v, a, b)


def tree_axpy(alpha, x, y):
    """alpha * x + y, leaf by leaf."""
    return jax.tree_util.tree_map(lambda u, v: alpha * u + v, x, y)


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


__all__ = [
    "ravel_pytree",
    "tree_all_finite",
    "tree_axpy",
    "tree_select",
    "num_params",
    "tree_sub",
]
