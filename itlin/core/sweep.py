"""Sweeps (seeds x hyper-parameters) spread over every device of every process, with ``jax.sharding``.

A sweep is one function of one grid point, ``fn(point) -> pytree of arrays``, and a grid: a pytree
of arrays with one common leading axis of ``G`` points (:func:`grid_product` builds a cartesian
one). :func:`sweep` runs ``jax.vmap(fn)`` over the grid as one jitted SPMD program whose leading
axis is split over a one-axis mesh (:func:`sweep_mesh`): each device runs its share of the points.
Nothing else schedules anything: no queue, no lock files, no workers; XLA partitions the program
and, across hosts, JAX's distributed runtime runs the same program in every process.

One host, several GPUs: call :func:`sweep`; the mesh covers every local device. Several hosts (or
several processes on one host): start one process per host (or per GPU) with the same script and
call :func:`init_distributed` first thing; every process then builds the same grid, runs its
devices' share, and gets back the whole result (:func:`sweep` gathers it to every process), and
:func:`is_main_process` picks the one process that writes records.

The environment :func:`init_distributed` reads, in this order:

* ``JAX_COORDINATOR_ADDRESS`` (``host:port`` of process 0; JAX itself reads it),
  ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` (read here: JAX 0.10 does not read these two):
  set all three to run any set of processes, e.g. two shells on two hosts;
  ``JAX_LOCAL_DEVICE_IDS`` (optional, read by JAX: the GPUs this process uses, e.g. ``0,1``);
* otherwise a cluster launch found in the environment (SLURM under ``srun``, Open MPI under
  ``mpirun``: ``SLURM_ENV``, ``OMPI_ENV``): ``jax.distributed.initialize()`` with no
  arguments, which detects it by itself (``JAX_COORDINATOR_PORT`` overrides the port JAX derives
  from the SLURM job id); on other clusters (Cloud TPU, Kubernetes) call
  ``jax.distributed.initialize()`` yourself before :func:`init_distributed`;
* otherwise one process: nothing is initialised.

On CPUs, processes exchange data through JAX's CPU collectives (``jax_cpu_collectives_implementation``,
``"gloo"`` by default in JAX 0.10), which is how the tests run two processes on one machine.
"""

from __future__ import annotations

import os
import zlib
from functools import partial
from typing import Callable, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import _memory
from ._checks import check_positive_int

#: the environment variables :func:`init_distributed` reads for an explicit set of processes
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"


# --------------------------------------------------------------------------------- processes
#: the environment of the clusters :func:`init_distributed` hands to ``jax.distributed.initialize()``
#: (the variables JAX's own SLURM and Open MPI detection reads), and each one's process count
SLURM_ENV = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
OMPI_ENV = ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")


def _detected_cluster():
    """``(found, processes)`` for a cluster launch in the environment, read from the documented
    variables of SLURM (``srun``) and Open MPI (``mpirun``), the launchers JAX detects without
    opting in; ``processes`` is None where the count does not parse. Other clusters (Cloud TPU,
    Kubernetes) are started by calling ``jax.distributed.initialize()`` yourself first."""
    env = os.environ
    if all(k in env for k in SLURM_ENV):
        count = env["SLURM_NTASKS"]
    elif "OMPI_MCA_orte_hnp_uri" in env or "OMPI_COMM_WORLD_SIZE" in env:
        count = env.get("OMPI_COMM_WORLD_SIZE", "")
    else:
        return False, None
    try:
        return True, int(count)
    except ValueError:
        return True, None


def init_distributed() -> int:
    """Start JAX's distributed runtime from the environment, if it describes several processes;
    return the number of processes (1 when there is nothing to start).

    Explicit ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` first, then a
    SLURM or Open MPI launch (one with a single process is left alone, since JAX
    would otherwise narrow that process to one GPU), else nothing. Idempotent: a second call (or a
    call after ``jax.distributed.initialize``) only returns the count. Call it before any other JAX
    call of the program.

    >>> init_distributed()  # no cluster in the doctest's environment: one process
    1
    """
    if jax.distributed.is_initialized():
        return jax.process_count()
    env_vals = {k: os.environ.get(k) for k in (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)}
    given = {k: v for k, v in env_vals.items() if v not in (None, "")}
    if given:
        missing = [k for k in env_vals if k not in given]
        if missing:
            raise ValueError(f"{', '.join(sorted(given))} set but {', '.join(missing)} not: set all of "
                             f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} (or none of them)")
        try:
            n, pid = int(given[ENV_NUM_PROCESSES]), int(given[ENV_PROCESS_ID])
        except ValueError:
            raise ValueError(f"{ENV_NUM_PROCESSES}={given[ENV_NUM_PROCESSES]!r} and {ENV_PROCESS_ID}="
                             f"{given[ENV_PROCESS_ID]!r} must be integers") from None
        if not (n >= 1 and 0 <= pid < n):
            raise ValueError(f"need {ENV_NUM_PROCESSES} >= 1 and 0 <= {ENV_PROCESS_ID} < {ENV_NUM_PROCESSES}, "
                             f"got {n} and {pid}")
        # the coordinator address is left to JAX, which reads JAX_COORDINATOR_ADDRESS itself
        _initialize(num_processes=n, process_id=pid)
        return jax.process_count()
    found, processes = _detected_cluster()
    if not found or processes == 1:
        return 1
    _initialize()
    return jax.process_count()


def _initialize(**kwargs):
    try:
        jax.distributed.initialize(**kwargs)
    except RuntimeError as e:
        if "must be called before" in str(e):
            raise RuntimeError("init_distributed() must run before any JAX computation or jax.devices() call "
                               "of the program; call it first thing") from None
        raise


def is_main_process() -> bool:
    """True in process 0, the one process that should write files (every process gets the same
    results from :func:`sweep`).

    >>> is_main_process()
    True
    """
    return jax.process_index() == 0


# --------------------------------------------------------------------------------- grids
def sweep_mesh(devices: Optional[Sequence] = None, axis: str = "sweep") -> Mesh:
    """A one-axis mesh over ``devices`` (default: every device of every process) to split a sweep's
    grid over.

    >>> m = sweep_mesh()
    >>> m.axis_names, m.size == jax.device_count()
    (('sweep',), True)
    """
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("sweep_mesh needs at least one device")
    return Mesh(np.asarray(devices), (axis,))


def grid_product(**axes):
    """The cartesian product of named axes, flattened: ``(grid, shape)`` with ``grid[name]`` an array
    of length ``prod(shape)`` (the first axis varies slowest, as in ``np.meshgrid(indexing="ij")``)
    and ``shape`` the axes' sizes, to reshape :func:`sweep`'s results with
    ``out.reshape(shape + out.shape[1:])``. An axis's values may be arrays (their leading axis
    indexes the values).

    >>> grid, shape = grid_product(seed=np.arange(2), damping=np.array([0.1, 1.0, 10.0]))
    >>> shape, grid["seed"].tolist(), grid["damping"].tolist()
    ((2, 3), [0, 0, 0, 1, 1, 1], [0.1, 1.0, 10.0, 0.1, 1.0, 10.0])
    """
    if not axes:
        raise ValueError("grid_product needs at least one named axis, e.g. grid_product(seed=np.arange(4))")
    vals = {}
    for name, v in axes.items():
        a = np.asarray(v)
        if a.ndim == 0:
            raise ValueError(f"axis {name!r} is a scalar ({a!r}); give a sequence of values, e.g. [{a!r}]")
        if a.shape[0] == 0:
            raise ValueError(f"axis {name!r} has no values; the grid would be empty")
        vals[name] = a
    shape = tuple(a.shape[0] for a in vals.values())
    index = np.indices(shape).reshape(len(shape), -1)
    grid = {name: np.take(a, index[i], axis=0) for i, (name, a) in enumerate(vals.items())}
    return grid, shape


def _check_grid(grid):
    """The grid's leaves as numpy arrays, its tree and its number of points; one-line errors."""
    leaves_p, tree = jax.tree_util.tree_flatten_with_path(grid)
    if not leaves_p:
        raise ValueError("the grid has no arrays; give a pytree of arrays with a common leading axis "
                         "(e.g. from grid_product)")
    names = [jax.tree_util.keystr(p) or "grid" for p, _ in leaves_p]
    leaves = []
    for name, (_, leaf) in zip(names, leaves_p):
        a = np.asarray(leaf)
        if a.dtype.kind not in "biufc":
            raise TypeError(f"grid leaf {name} has dtype {a.dtype}; a sweep's grid holds numbers only")
        if a.ndim == 0:
            raise ValueError(f"grid leaf {name} is a scalar; every leaf needs the leading grid axis "
                             "(close over constants in fn instead)")
        _check_fits_32_bits(name, a)
        leaves.append(a)
    sizes = {name: a.shape[0] for name, a in zip(names, leaves)}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"grid leaves have no common leading axis: sizes {sizes}")
    g = leaves[0].shape[0]
    if g == 0:
        raise ValueError("the grid is empty (leading axis of length 0)")
    return leaves, tree, g


def _check_fits_32_bits(name, a):
    """With 64-bit mode off, JAX stores int64/uint64/float64 leaves in 32 bits: refuse values that
    would change on the way (wrapped integers, floats overflowing to inf) instead of sweeping
    other points than the grid's."""
    if jax.config.jax_enable_x64 or a.dtype.itemsize <= 4 or a.size == 0:
        return
    if a.dtype.kind in "iu":
        info = np.iinfo(np.int32 if a.dtype.kind == "i" else np.uint32)
        bad = a[(a < info.min) | (a > info.max)]
    elif a.dtype.kind == "f":
        bad = a[np.isfinite(a) & (np.abs(a) > np.finfo(np.float32).max)]
    else:
        return
    if bad.size:
        raise ValueError(f"grid leaf {name} holds {bad.ravel()[0].item()!r}, which {a.dtype} -> 32 bits would change (JAX's "
                         "64-bit mode is off); enable it with jax.config.update('jax_enable_x64', True) or use values "
                         "that fit in 32 bits.")


def _fingerprint(leaves, tree) -> int:
    h = zlib.crc32(str(tree).encode())
    for a in leaves:
        h = zlib.crc32(f"{a.shape}{a.dtype}".encode(), h)
        h = zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1), h)
    return h


def _pad(a, n):
    """``a`` with its last point repeated to length ``n`` along the leading axis."""
    if a.shape[0] == n:
        return a
    return np.concatenate([a, np.repeat(a[-1:], n - a.shape[0], axis=0)], axis=0)


def _check_sizes(fn, leaves, tree, g: int, per_dev: int, sharding) -> None:
    """The outputs of a sweep, from their shapes alone (``eval_shape`` of the program that runs it:
    its trace is reused when it runs), against the memory of a device (a program's ``per_dev``
    points, inputs and outputs) and of the host (every point's outputs, gathered), before anything
    is placed or compiled."""
    piece = per_dev * sharding.mesh.size
    spec = jax.tree_util.tree_unflatten(tree, [
        jax.ShapeDtypeStruct((piece,) + a.shape[1:], jax.dtypes.canonicalize_dtype(a.dtype), sharding=sharding)
        for a in leaves])
    out = _vmapped.eval_shape(fn, sharding, spec)
    nbytes = lambda t: sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize
                           for s in jax.tree_util.tree_leaves(t)) // piece
    out_point, in_point = nbytes(out), nbytes(spec)
    one = out_point + in_point

    def per_device(have):
        if one > have:
            return f"one point's inputs and outputs alone take {_memory.size(one)}: return less per point"
        return f"pass chunk={max(1, int(have // one))} (points per device per program) or less"

    k = lambda have: max(1, int(have // max(out_point, 1)))
    _memory.check(f"sweep's outputs ({g:,} points, {_memory.size(out_point)} each, gathered on the host)", g * out_point,
                  lambda have: f"sweep slices of the grid of at most {k(have):,} points each (e.g. jax.tree_util.tree_map("
                               f"lambda a: a[i:i + {k(have)}], grid)) and keep each slice's results before the next",
                  None)
    _memory.check(f"sweep ({per_dev:,} points per device, {_memory.size(one)} of inputs and outputs each)",
                  per_dev * one, per_device, sharding.mesh.devices.flat[0])


@partial(jax.jit, static_argnums=(0, 1))
def _vmapped(fn, sharding, points):
    """``jax.vmap(fn)`` on each device's own block of points, as one program over the mesh.

    ``shard_map`` keeps the devices independent: under plain ``jit`` partitioning, a batched
    ``while_loop`` (a Gauss-Newton run that stops at a tolerance) reduces its stop flag over the
    whole grid, i.e. an all-reduce across devices (and hosts) at every iteration. ``fn`` and the
    sharding are static, so a second sweep of the same ``fn`` on the same mesh and piece size
    reuses the compiled program."""
    spec = sharding.spec
    # check_vma=False: fn is any user function, and its loops need not mark their carries as
    # varying over the mesh axis (nothing in it communicates, so there is nothing to check)
    return jax.shard_map(jax.vmap(fn), mesh=sharding.mesh, in_specs=spec, out_specs=spec, check_vma=False)(points)


def sweep(fn: Callable, grid, *, mesh: Optional[Mesh] = None, chunk: Optional[int] = None):
    """``jax.vmap(fn)`` over the grid's leading axis as one jitted program split over ``mesh``.

    ``grid`` is a pytree of arrays sharing a leading axis of ``G`` points; ``fn(point)`` gets one
    point (the same pytree without that axis) and returns a pytree of arrays. The points are split
    over the mesh's devices (``NamedSharding(mesh, PartitionSpec(axis))``), ``G`` padded to a
    multiple of the device count by repeating the last point; the padding is dropped from the
    result. ``chunk`` (points per device per program) bounds memory: the grid runs in pieces of
    ``chunk * devices`` points, all of the same shape (the last one padded), so the program is
    compiled once. With several processes (:func:`init_distributed`) every process must pass the
    same grid (checked) and gets the whole result.

    Returns ``fn``'s output tree of numpy arrays with a leading axis of ``G``, the same in every
    process. ``mesh`` defaults to :func:`sweep_mesh` (every device).

    Sizes are checked before anything is placed or compiled, from the outputs' shapes
    (``jax.eval_shape`` of one point): a program's points on one device (their inputs and
    outputs) must fit in that device's memory (a GPU's own limit, else the machine's physical
    memory), and every point's outputs in the host's, or the call is refused with a one-line
    ValueError that says which ``chunk`` (or which slices of the grid) would fit.
    ``ITLIN_MEMORY_LIMIT`` (bytes, e.g. ``8e9`` or ``8G``; ``inf`` for no check) overrides the
    limit. Memory ``fn`` uses inside a point is not counted. With JAX's 64-bit mode off,
    a 64-bit leaf whose values do not fit in 32 bits (an int64 beyond int32, a float64 beyond
    float32's range) is refused rather than silently truncated.

    >>> import jax.numpy as jnp
    >>> out = sweep(lambda p: {"sq": p["a"] ** 2, "v": p["a"] * jnp.ones(2)}, {"a": np.arange(3.0)})
    >>> out["sq"].tolist(), out["v"].shape
    ([0.0, 1.0, 4.0], (3, 2))
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (one grid point -> pytree of arrays), got {type(fn).__name__}")
    leaves, tree, g = _check_grid(grid)
    mesh = sweep_mesh() if mesh is None else mesh
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh (e.g. sweep_mesh()), got {type(mesh).__name__}")
    n_dev = mesh.size
    if chunk is None:
        per_dev = -(-g // n_dev)
    else:
        chunk = check_positive_int("chunk", chunk, none_means="every point in one program per device")
        per_dev = min(chunk, -(-g // n_dev))
    piece = per_dev * n_dev
    n_pieces = -(-g // piece)
    axis = mesh.axis_names[0] if len(mesh.axis_names) == 1 else tuple(mesh.axis_names)
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    try:
        hash(fn)
    except TypeError:
        raise TypeError(f"fn must be hashable (a function, not an unhashable {type(fn).__name__} instance); "
                        "wrap it: sweep(lambda p: fn(p), grid)") from None

    _check_sizes(fn, leaves, tree, g, per_dev, sharding)

    multi = len({d.process_index for d in mesh.devices.flat}) > 1
    if multi:
        from jax.experimental import multihost_utils

        fp = np.asarray([_fingerprint(leaves, tree) % (2 ** 31)], np.int32)
        try:
            multihost_utils.assert_equal(fp, "grid differs")
        except AssertionError:
            raise ValueError("the processes passed different grids to sweep; every process must build the "
                             "same grid (same values, same order)") from None

    padded = [_pad(a, n_pieces * piece) for a in leaves]

    def place(k):
        host = [a[k * piece:(k + 1) * piece] for a in padded]
        arrays = [jax.make_array_from_callback(h.shape, sharding, lambda idx, h=h: h[idx]) for h in host]
        return jax.tree_util.tree_unflatten(tree, arrays)

    def fetch(out):
        if multi:  # every process gets every device's points
            return multihost_utils.process_allgather(out, tiled=True)
        return jax.tree_util.tree_map(np.asarray, out)

    results, pending = [], None
    for k in range(n_pieces):
        out = _vmapped(fn, sharding, place(k))  # dispatched asynchronously ...
        if pending is not None:
            results.append(fetch(pending))  # ... while the previous piece is brought back
        pending = out
    results.append(fetch(pending))
    if len(results) == 1:
        return jax.tree_util.tree_map(lambda a: a[:g], results[0])
    return jax.tree_util.tree_map(lambda *a: np.concatenate(a, axis=0)[:g], *results)


__all__ = ["ENV_COORDINATOR", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID", "OMPI_ENV", "SLURM_ENV", "grid_product",
           "init_distributed", "is_main_process", "sweep", "sweep_mesh"]
