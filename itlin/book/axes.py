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

AXES: dict = {
    "arbel_damping": (
        ("eps0", ("damping_floor",)),
        ("eps0_ours", ("damping_floor",)),
        ("rf_test", ("seed",)),
        ("*", ("damping_floor", "seed")),
    ),
    "arbel_init": (
        ("tau0", ("init_scale",)),
        ("gn/lr", ("gn_step_size",)),
        ("gn/lr_ours", ("gn_step_size",)),
        ("gd/lr", ("gd_step_size",)),
        ("gd/lr_ours", ("gd_step_size",)),
        ("gn/ends", ("gn_checkpoint",)),
        ("gd/ends", ("gd_checkpoint",)),
        ("rf_test", ("init_scale", "seed")),
        ("gn/steps", ("gn_step_size", "init_scale", "seed")),
        ("gn/converged", ("gn_step_size", "init_scale", "seed")),
        ("gn/diverged", ("gn_step_size", "init_scale", "seed")),
        ("gn/*", ("gn_step_size", "init_scale", "seed", "gn_checkpoint")),
        ("gd/steps", ("gd_step_size", "init_scale", "seed")),
        ("gd/converged", ("gd_step_size", "init_scale", "seed")),
        ("gd/diverged", ("gd_step_size", "init_scale", "seed")),
        ("gd/*", ("gd_step_size", "init_scale", "seed", "gd_checkpoint")),
    ),
    "arbel_mnist": (
        ("gn/lr", ("gn_step_size",)),
        ("gn/lr_ours", ("gn_step_size",)),
        ("gd/lr", ("gd_step_size",)),
        ("gd/lr_ours", ("gd_step_size",)),
        ("gn/ends", ("gn_checkpoint",)),
        ("gd/ends", ("gd_checkpoint",)),
        ("rf_test", ("seed",)),
        ("gn/steps", ("gn_step_size", "seed")),
        ("gn/converged", ("gn_step_size", "seed")),
        ("gn/diverged", ("gn_step_size", "seed")),
        ("gn/*", ("gn_step_size", "seed", "gn_checkpoint")),
        ("gd/steps", ("gd_step_size", "seed")),
        ("gd/converged", ("gd_step_size", "seed")),
        ("gd/diverged", ("gd_step_size", "seed")),
        ("gd/*", ("gd_step_size", "seed", "gd_checkpoint")),
    ),
    "arbel_samples": (
        ("n_train", ("train_size",)),
        ("tau0", ("init_scale",)),
        ("gn/lr", ("gn_step_size",)),
        ("gd/lr", ("gd_step_size",)),
        ("rf_test", ("train_size", "init_scale", "seed")),
        ("gn/*", ("train_size", "gn_step_size", "init_scale", "seed")),
        ("gd/*", ("train_size", "gd_step_size", "init_scale", "seed")),
    ),
    "arbel_steps": (
        ("gn/lr", ("gn_step_size",)),
        ("gn/lr_ours", ("gn_step_size",)),
        ("gd/lr", ("gd_step_size",)),
        ("gd/lr_ours", ("gd_step_size",)),
        ("gn/ends", ("gn_checkpoint",)),
        ("gd/ends", ("gd_checkpoint",)),
        ("rf_test", ("seed",)),
        ("gn/steps", ("gn_step_size", "seed")),
        ("gn/converged", ("gn_step_size", "seed")),
        ("gn/diverged", ("gn_step_size", "seed")),
        ("gn/*", ("gn_step_size", "seed", "gn_checkpoint")),
        ("gd/steps", ("gd_step_size", "seed")),
        ("gd/converged", ("gd_step_size", "seed")),
        ("gd/diverged", ("gd_step_size", "seed")),
        ("gd/*", ("gd_step_size", "seed", "gd_checkpoint")),
    ),
    "arbel_width": (
        ("width", ("hidden_width",)),
        ("gn/lr", ("gn_step_size",)),
        ("gd/lr", ("gd_step_size",)),
        ("rf_test", ("hidden_width", "seed")),
        ("gn/*", ("hidden_width", "gn_step_size", "seed")),
        ("gd/*", ("hidden_width", "gd_step_size", "seed")),
    ),
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
