"""Data parallelism with ``jax.sharding``: the same training step, the batch split over devices.

The trainer's compiled functions are ordinary SPMD programs, so nothing in them changes: put the
batch (or the whole training set) on a mesh with its example axis split across devices and the
training state replicated, and XLA partitions the step (each device runs its share of the
examples; gradients are summed across devices). On one CPU, try it with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before JAX starts.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def data_mesh(devices: Optional[Sequence] = None, axis: str = "data") -> Mesh:
    """A one-axis mesh over ``devices`` (default: all of them) for data parallelism.

    >>> data_mesh().axis_names
    ('data',)
    """
    devices = list(jax.devices() if devices is None else devices)
    return Mesh(np.asarray(devices), (axis,))


def shard_batch(x, mesh: Mesh, axis: str = "data"):
    """Place ``x`` (an array or pytree of arrays) with its leading (example) axis split over
    ``mesh``. The number of examples must be divisible by the number of devices.

    >>> import jax.numpy as jnp
    >>> shard_batch(jnp.ones((4, 3)), data_mesh()).shape
    (4, 3)
    """
    n_dev = mesh.shape[axis]

    def put(a):
        if a.shape[0] % n_dev:
            raise ValueError(f"cannot split {a.shape[0]} examples evenly over {n_dev} devices; "
                             f"use a batch size that is a multiple of {n_dev}.")
        spec = PartitionSpec(axis, *([None] * (a.ndim - 1)))
        return jax.device_put(a, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map(put, x)


def replicate(tree, mesh: Mesh):
    """Place every array of ``tree`` (e.g. a :class:`itlin.TrainState`) on all devices.

    >>> import jax.numpy as jnp
    >>> replicate({"w": jnp.ones(2)}, data_mesh())["w"].tolist()
    [1.0, 1.0]
    """
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), tree)


__all__ = ["data_mesh", "replicate", "shard_batch"]
