"""The names of the axes an experiment stacks itself, for its record files.

A training run's arrays are stacked over the settings in its tag (``K``, ``seed``, ``n``, ...) by
:mod:`itlin.book.opendata`, which knows those dimensions' names. Some experiments also stack
arrays themselves: Arbel et al.'s ablations over step sizes and seeds, the Fig. 9 damping sweep,
Ortiz et al.'s eigenfunction targets. Their axes are named here, one table per experiment: each
entry is an ``fnmatch`` pattern over the result key (as a record file's ``key`` attribute shows
it, settings as ``{K}``) and the names of the array's own axes, in order. The first matching
entry wins. An array no entry names keeps generic names (``<variable>_dim<i>``).

A name must differ from the record's settings and variables; one name has one length in a
file (else the file tells the lengths apart, ``name_<length>``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Optional

#: the last axis of per-example results kept as ``numpy.packbits`` bytes
PACKED = "packed_examples"


def _gn_gd(outer: tuple = (), inner: tuple = (), checkpoints: bool = True) -> tuple:
    """The entries of one of Arbel et al.'s sweeps (:mod:`itlin.book.experiments.arbel._arbel`):
    for GN and GD, each run's arrays over ``outer`` (an ablation's own grid), the method's step
    sizes, ``inner`` (another grid), the seeds and, with ``checkpoints``, the points along
    training (``<method>/ends`` gives their steps; ``steps``, ``converged`` and ``diverged`` have
    one value per run); the step sizes themselves, and the random-features baseline
    ``rf_test``."""
    out = []
    for m in ("gn", "gd"):
        out.append((f"{m}/lr", (f"{m}_step_size",)))
        if checkpoints:
            out += [(f"{m}/lr_ours", (f"{m}_step_size",)), (f"{m}/ends", (f"{m}_checkpoint",))]
    out.append(("rf_test", (*outer, *inner, "seed")))
    for m in ("gn", "gd"):
        run = (*outer, f"{m}_step_size", *inner, "seed")
        if checkpoints:
            out += [(f"{m}/{k}", run) for k in ("steps", "converged", "diverged")]
            run += (f"{m}_checkpoint",)
        out.append((f"{m}/*", run))
    return tuple(out)


AXES: dict = {
    "arbel_damping": (
        ("eps0", ("damping_floor",)),
        ("eps0_ours", ("damping_floor",)),
        ("rf_test", ("seed",)),
        ("*", ("damping_floor", "seed")),
    ),
    "arbel_init": (("tau0", ("init_scale",)),) + _gn_gd(inner=("init_scale",)),
    "arbel_mnist": _gn_gd(),
    "arbel_samples": (("n_train", ("train_size",)), ("tau0", ("init_scale",)))
    + _gn_gd(outer=("train_size",), inner=("init_scale",), checkpoints=False),
    "arbel_steps": _gn_gd(),
    "arbel_width": (("width", ("hidden_width",)),) + _gn_gd(outer=("hidden_width",), checkpoints=False),
    "feature_learning": (
        ("snapshots/*/filters", ("snapshot", "filter", "tap", "in_channel")),
        ("snapshots/*/probe_conv*_correct", ("snapshot", PACKED)),
        ("snapshots/*/probe_conv*", ("snapshot",)),
        ("snapshots/*/step", ("snapshot",)),
    ),
    "fig9_damping": (
        ("train_rmse_trace", ("damping", "seed", "trace_point")),
        ("functions", ("damping", "sample_seed", "x_test_point")),
        ("dampings", ("damping",)),
        ("seed_index", ("seed",)),
        ("ntk_eigs_init", ("seed", "ntk_eigenvalue")),
        ("trace_steps", ("trace_point",)),
        ("sample_dampings", ("sample_damping",)),
        ("x_test", ("x_test_point",)),
        ("y_test", ("x_test_point",)),
        ("x_train", ("x_train_point",)),
        ("y_train", ("x_train_point",)),
        ("train_rmse", ("damping", "seed")),
        ("test_rmse", ("damping", "seed")),
        ("steps", ("damping", "seed")),
        ("diverged", ("damping", "seed")),
        ("reached_tol", ("damping", "seed")),
        ("still_descending", ("damping", "seed")),
    ),
    "ortiz_concentration": (
        ("models/*/link/K={K}/test_correct", ("seed", PACKED)),
        ("models/*/link/K={K}/ec_curve", ("seed", "top_eigenvectors")),
        ("models/*/link/K={K}/*", ("seed",)),
        ("models/*/test_correct", ("seed", PACKED)),
        ("models/*/*/ec_curve", ("seed", "top_eigenvectors")),
        ("models/*/*/eigvals", ("seed", "eigenvalue")),
        ("models/*/end/gain", ("seed", "eigenvalue")),
        ("models/*/align/a_init", ("seed", "init_eigenvector")),
        ("models/*/align/final_loss", ("seed", "target")),
        ("models/*/align/*", ("seed", "target", "init_eigenvector")),
        ("Ks", ("period",)),
        ("align_indices", ("target",)),
        ("models/*", ("seed",)),
    ),
    "ortiz_eigenfunctions": (
        ("eigen_indices", ("target",)),
        ("models/*/eigvals", ("seed", "eigenvalue")),
        ("models/*/*/val_correct", ("seed", "target_or_labels", PACKED)),
        ("models/*/*/epoch_loss", ("seed", "target_or_labels", "epoch")),
        ("models/*/*", ("seed", "target_or_labels")),
    ),
}


def names(experiment: str, key: str, rank: int) -> Optional[tuple]:
    """The names :data:`AXES` gives the ``rank`` own axes of ``experiment``'s result ``key``
    (``None`` when no entry matches); raises ``ValueError`` when an entry matches with another
    number of names (the table is out of date with the experiment). A scalar has none to name."""
    if rank == 0:
        return None
    for pattern, axis_names in AXES.get(experiment, ()):
        if fnmatchcase(key, pattern):
            if len(axis_names) != rank:
                raise ValueError(f"itlin.book.axes names {len(axis_names)} axes of {experiment} {key!r} "
                                 f"({pattern!r}), which has {rank}; update the table.")
            return tuple(axis_names)
    return None


__all__ = ["AXES", "PACKED", "names"]
