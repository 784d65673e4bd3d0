"""Run experiments so that they survive crashes and are never computed twice.

Every chapter of the book runs its experiment through :func:`run`::

    from itlin.book import runner
    rec = runner.run("fig9_damping", {"dampings": [1e-3, 1e-1], "scale": "tiny"})
    rec.status            # an itlin.Status: completed, diverged, or running (a run did not finish)
    rec.status_text       # in words: "completed", "diverged at step 412", or a summary of several
                          # runs (each run's status is data in rec.runs[tag]: "status" and "diverged_at")
    rec["test_rmse"]      # the arrays the experiment returned
    rec.history("K=inf")  # the History of one training run made with ctx.run

What it does:

1. **Validates** the parameters before anything is computed (unknown names with a "did you
   mean" hint, types, ranges, dataset/model/schedule names), fills in defaults and hashes the
   resolved dict with the experiment's name and version.
2. **Loads** the stored result if one exists for that hash and its checksum is right; otherwise
   runs the experiment. A truncated or damaged result file is detected, reported with a warning
   and recomputed, never used.
3. **Checkpoints** every training run made through :meth:`RunContext.fit` every
   ``checkpoint_every_steps`` steps or ``checkpoint_every_seconds`` seconds, whichever comes
   first, and saves sub-results made with :meth:`RunContext.stage`. If the process dies (even
   by SIGKILL), running the same call again resumes from the last checkpoint; on the CPU the
   final numbers equal those of an uninterrupted run bit for bit. A KeyboardInterrupt saves a
   checkpoint at once; :func:`pause_on_signals` turns SIGINT and SIGTERM into one, for runs
   started in the background or under a scheduler.
4. **Saves** the results atomically: ``results.npz`` (arrays) and ``record.json`` (parameters,
   versions, git commit, device, wall time, status, sha256 of ``results.npz``).

Where results live (see :func:`results_dir`)::

    <results>/<experiment>/<hash>/
        params.json     the resolved parameters (written when the run starts)
        results.npz     the arrays (written when it completes)
        record.json     written last: the run is complete when this file exists
        work/           while running: fit-<tag>.msgpack checkpoints (flax.serialization, keyed
                        by pytree paths), stage-<tag>.npz sub-results, elapsed.json (the
                        seconds and sittings so far, as of the latest checkpoint)
                        (removed when the run completes)
        .lock           held (filelock) by the process running it; .lock.pid: its pid
        results.npz.new, record.json.new
                        a finished run's files, written beside the previous ones and then
                        swapped in: a result is never deleted before its replacement is complete

``<hash>`` is the first 16 hex digits of the sha256 of ``{"experiment", "version", "params"}``.

The code is split by concern into modules beside this one, whose names it re-exports:
:mod:`~itlin.book.store` (paths, hashing, :class:`Record`, checksums, the lock, the atomic swap),
:mod:`~itlin.book.checkpoints` (:class:`RunContext`, checkpoint files, signals),
:mod:`~itlin.book.records` (recorded runs: matching, pooling, seeds, comparison) and
:mod:`~itlin.book.provenance` (commit, device, processor).
"""

from __future__ import annotations

import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from .. import _io
from . import experiments as _experiments
from .checkpoints import PROGRESS_SECONDS, RunContext, pause_on_signals, quiet  # noqa: F401
from .checkpoints import log as _log
from .experiments import Experiment
from .provenance import _device, _git_commit, _now, cores, jaxlib_build, machine_fields, processor  # noqa: F401
# the public names of the records module, which readers of runs reach through the runner
from .records import (SeedComparison, SeedProgress, compare_seeds, matching_record, open_record,  # noqa: F401
                      open_records, pooled_record, recorded_dir, recorded_runs, seed_progress, seed_range)
from .store import (_FORMAT, ELAPSED_FILE, FITS_KEY, LOCK_FILE, LOCK_PID_FILE, NEW_SUFFIX,  # noqa: F401
                    PARAMS_FILE, RECORD_FILE, RESULTS_FILE, WORK_DIR, Plan, Record, RunLockedError,
                    _complete_swap, _locked, _read_record, describe_runs, record_digest, results_dir, run_hash)

DEFAULT_CHECKPOINT_EVERY_STEPS = 10_000
DEFAULT_CHECKPOINT_EVERY_SECONDS = 300.0

_DEFAULT = object()


_results_root = results_dir  # run() and plan() take an argument of the same name


def plan(experiment, params=None, *, results_dir=None) -> Plan:
    """Validate ``params`` and say where the run's files are (nothing is computed)."""
    exp = _experiments.get(experiment)
    resolved = exp.resolve(params)
    h = run_hash(exp.name, exp.version, resolved)
    root = _results_root(results_dir)
    return Plan(exp, resolved, h, root / exp.name / h)


def params_from(experiment, namespace: Mapping) -> dict:
    """The experiment's parameters found in ``namespace`` (a chapter's ``globals()`` after
    papermill's parameters cell), to forward to :func:`run`::

        rec = runner.run("fig9_damping", runner.params_from("fig9_damping", globals()))
    """
    exp = _experiments.get(experiment)
    return {k: namespace[k] for k in exp.params.names() if k in namespace}



def load(experiment, params=None, *, results_dir=None) -> Optional[Record]:
    """The stored result of ``experiment`` with ``params``, or ``None`` if there is none (or it
    is damaged). Never computes anything."""
    rec, reason = _read_record(plan(experiment, params, results_dir=results_dir))
    if reason is not None:
        warnings.warn(f"itlin.book.runner: {reason}; it will be recomputed by run().", RuntimeWarning, stacklevel=2)
    return rec


# ---------------------------------------------------------------------------------- run
def run(experiment: Union[str, Experiment], params: Optional[Mapping] = None, *, results_dir=None,
        force: bool = False, checkpoint_every_steps=_DEFAULT, checkpoint_every_seconds=_DEFAULT,
        progress: bool = True, verbose: bool = True) -> Record:
    """Run ``experiment`` with ``params``, or load its stored result.

    Args:
      experiment: a registered name (see :func:`itlin.book.experiments.names`) or an Experiment.
      params: parameter values, e.g. what papermill injected into a chapter's parameters cell;
        missing ones take their defaults. Validated before anything runs.
      results_dir: where results live (default: :func:`results_dir`).
      force: recompute even if a stored result exists (and ignore checkpoints).
      checkpoint_every_steps: checkpoint each training run every so many steps (default
        10_000); ``None`` for no step trigger.
      checkpoint_every_seconds: ... or every so many seconds (default 300), whichever comes
        first; ``None`` for no time trigger. Both ``None``: no checkpoints or stage files.
      progress: progress lines (always off when ``CI`` or ``ITLIN_QUIET`` is set).
      verbose: one line when loading, resuming or finishing. Every line goes to standard error,
        and none is printed inside a Jupyter kernel: a chapter's page shows no progress log.

    With several processes (:func:`itlin.init_distributed`), process 0 decides for all of them,
    so that their collectives stay in step: a stored record that process 0 finds is loaded there
    and sent to the others; otherwise every process runs the experiment from the start (a sweep
    inside it gathers every result to every process) and process 0 alone writes the record. Such a
    run is not resumed from checkpoints and writes none (the other processes could not resume
    with it); the others compute in a scratch folder and return their record from memory.

    Returns:
      :class:`Record` with the arrays, status and provenance.

    Raises:
      itlin.book.experiments.ParameterError (a ValueError) for a bad parameter, before any compute;
      itlin.book.experiments.UnknownExperimentError for an unknown experiment.
    """
    p = plan(experiment, params, results_dir=results_dir)
    import jax

    if jax.process_count() > 1:
        return _run_on_processes(p, params, results_dir=results_dir, force=force, progress=progress,
                                 verbose=verbose)
    return _run_here(p, force=force, checkpoint_every_steps=checkpoint_every_steps,
                     checkpoint_every_seconds=checkpoint_every_seconds, progress=progress, verbose=verbose)


def _run_here(p: Plan, *, force: bool, checkpoint_every_steps, checkpoint_every_seconds, progress: bool,
              verbose: bool) -> Record:
    """:func:`run` of the planned ``p`` in this process alone (what each process does in
    :func:`_run_on_processes` when nothing is stored)."""
    exp = p.experiment
    every_steps = DEFAULT_CHECKPOINT_EVERY_STEPS if checkpoint_every_steps is _DEFAULT else checkpoint_every_steps
    every_secs = DEFAULT_CHECKPOINT_EVERY_SECONDS if checkpoint_every_seconds is _DEFAULT else checkpoint_every_seconds
    if every_steps is not None:
        from ..core._checks import check_positive_int
        check_positive_int("checkpoint_every_steps", every_steps, none_means="no checkpoints by steps")
    if every_secs is not None and not float(every_secs) >= 0:
        raise ValueError(f"checkpoint_every_seconds must be >= 0 or None, got {every_secs!r}.")
    every_steps = None if every_steps is None else int(every_steps)
    every_secs = None if every_secs is None else float(every_secs)

    def say(msg):
        if verbose:
            _log(f"[itlin] {exp.name}: {msg}")

    if not force:
        rec = _load_or_warn(p)
        if rec is not None:
            say(f"loaded stored result ({rec.status_text}) {exp.name}/{p.hash} from the results folder")
            return rec

    # Everything the run will write, checked before any work (a dataset generated and then lost
    # to an unwritable cache, or a run that cannot be saved, costs the whole run).
    _io.ensure_writable(p.path.parent.parent, "set ITLIN_RESULTS (or pass results_dir=...) to a writable folder")
    from .. import data as _data

    _data.cache_dir()
    with _locked(p.path, say):
        _complete_swap(p.path)  # a swap a killed process left half done
        if not force:  # another process may have finished it while we waited for the lock
            rec = _load_or_warn(p, quiet=True)
            if rec is not None:
                say(f"loaded stored result ({rec.status_text}) {exp.name}/{p.hash} from the results folder")
                return rec
        if force:
            shutil.rmtree(p.path / WORK_DIR, ignore_errors=True)
        prev = _io.read_json(p.path / PARAMS_FILE) or {}
        first_started = prev.get("first_started_at") if prev.get("hash") == p.hash else None
        started = _now()
        _io.write_json(p.path / PARAMS_FILE, {"experiment": exp.name, "version": exp.version, "hash": p.hash,
                                              "params": p.params, "first_started_at": first_started or started})
        ctx = RunContext(p, checkpoint_every_steps=every_steps, checkpoint_every_seconds=every_secs,
                         progress=progress, verbose=verbose)
        if (p.path / WORK_DIR).is_dir() and any((p.path / WORK_DIR).iterdir()):
            say(f"found checkpoints of {exp.name}/{p.hash}; resuming")
        t0 = time.perf_counter()
        out = exp.run(exp.params.from_dict(p.params, experiment=exp.name).resolve(), ctx)
        wall = time.perf_counter() - t0
        rec = _finish(p, ctx, out, wall=wall, started=started, first_started=first_started or started)
        shutil.rmtree(p.path / WORK_DIR, ignore_errors=True)
    say(f"{rec.status_text} in {wall:.1f} s; saved as {exp.name}/{p.hash} in the results folder")
    return rec


def _run_on_processes(p: Plan, params, *, results_dir, force, progress, verbose) -> Record:
    """:func:`run` on several processes: one decision, process 0's, for all of them."""
    import tempfile

    from jax.experimental import multihost_utils

    from ..core.sweep import is_main_process

    main = is_main_process()
    stored = _load_or_warn(p) if main and not force else None
    files = (RECORD_FILE, RESULTS_FILE)
    sizes = np.array([(stored.path / f).stat().st_size for f in files] if stored is not None else [0, 0], np.int64)
    sizes = np.asarray(multihost_utils.broadcast_one_to_all(sizes))
    scratch = Path(tempfile.mkdtemp(prefix="itlin-worker-"))
    try:
        if sizes.sum() > 0:  # process 0 holds the record: send its two files to every process
            blob = (np.frombuffer(b"".join((stored.path / f).read_bytes() for f in files), np.uint8) if main
                    else np.zeros(int(sizes.sum()), np.uint8))
            blob = np.asarray(multihost_utils.broadcast_one_to_all(blob)).tobytes()
            if main:
                if verbose:
                    _log(f"[itlin] {p.experiment.name}: loaded stored result ({stored.status_text}) "
                         f"{p.experiment.name}/{p.hash} from the results folder; sent to every process")
                return stored
            q = plan(p.experiment, params, results_dir=scratch)
            q.path.mkdir(parents=True)
            (q.path / RECORD_FILE).write_bytes(blob[:int(sizes[0])])
            (q.path / RESULTS_FILE).write_bytes(blob[int(sizes[0]):])
            rec, reason = _read_record(q)
            if rec is None:
                raise RuntimeError(f"the record process 0 sent for {p.experiment.name} is unreadable here: {reason}")
            return rec
        # Nothing stored: every process computes from the start, without checkpoints; process 0
        # writes the record, the others work in a scratch folder and keep nothing.
        return _run_here(plan(p.experiment, params, results_dir=results_dir if main else scratch), force=True,
                         checkpoint_every_steps=None, checkpoint_every_seconds=None,
                         progress=progress and main, verbose=verbose and main)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _load_or_warn(p: Plan, quiet: bool = False) -> Optional[Record]:
    rec, reason = _read_record(p)
    if reason is not None and not quiet:
        warnings.warn(f"itlin.book.runner: stored result of {p.experiment.name} is damaged: {reason}; recomputing.",
                      RuntimeWarning, stacklevel=3)
    return rec


def _finish(p: Plan, ctx: RunContext, out, *, wall: float, started: str, first_started: str) -> Record:
    import itlin

    if out is None:
        out = {}
    if not isinstance(out, Mapping):
        raise TypeError(f"experiment {p.experiment.name!r}: run must return a dict of results, "
                        f"got {type(out).__name__}.")
    out = dict(out)
    status = out.pop("status", None)
    meta = dict(out.pop("meta", {}) or {})
    # what the run used: the parameters with the scale's values filled in, plus whatever the
    # run measured or derived (e.g. the sizes of the data as loaded) under meta["resolved"]
    meta["resolved"] = {**p.experiment.params.from_dict(p.params, experiment=p.experiment.name).resolved(),
                        **dict(meta.get("resolved") or {})}
    if FITS_KEY in out:
        raise ValueError(f"experiment {p.experiment.name!r}: the result key {FITS_KEY!r} is reserved.")
    if status is not None and not isinstance(status, str):
        raise TypeError(f"experiment {p.experiment.name!r}: 'status' must be a string, got {status!r}.")
    status = status or describe_runs(ctx.runs)
    tree = dict(out)
    if ctx.histories:
        tree[FITS_KEY] = {tag: h.arrays() for tag, h in ctx.histories.items()}
    new_results = p.path / (RESULTS_FILE + NEW_SUFFIX)
    # compressed: per-step curves of many seeds make a committed record's arrays tens of MB (half as deflated)
    sha, flat, paths = _io.save_tree(new_results, tree, what=f"result of {p.experiment.name!r}", compress=True)
    commit, dirty = _git_commit()
    info = {
        "format": _FORMAT,
        "experiment": p.experiment.name,
        "version": p.experiment.version,
        "hash": p.hash,
        "params": _io.jsonable(p.params),
        "status": status,
        "runs": ctx.runs,
        "resumed": ctx.resumed,
        "meta": meta,
        "itlin_version": getattr(itlin, "__version__", None),
        "git_commit": commit,
        "git_dirty": dirty,
        **_device(),
        "python": sys.version.split()[0],
        "numpy_version": np.__version__,
        # over every sitting of a resumed run (this one's alone: sitting_seconds)
        "wall_seconds": ctx.elapsed() if ctx.sittings > 1 else wall,
        "sitting_seconds": wall,
        "sittings": ctx.sittings,
        "started_at": started,
        "first_started_at": first_started,
        "finished_at": _now(),
        "arrays_file": RESULTS_FILE,
        "arrays_sha256": sha,
        "arrays_bytes": new_results.stat().st_size,
    }
    info["record_sha256"] = record_digest(info)
    _io.write_json(p.path / (RECORD_FILE + NEW_SUFFIX), info)
    _complete_swap(p.path)
    info = _io.read_json(p.path / RECORD_FILE)  # exactly what a later load sees
    return Record(p.experiment.name, dict(p.params), status, p.path, flat, paths, info, loaded=False)


__all__ = [
    "DEFAULT_CHECKPOINT_EVERY_SECONDS",
    "DEFAULT_CHECKPOINT_EVERY_STEPS",
    "Plan",
    "Record",
    "RunContext",
    "RunLockedError",
    "SeedComparison",
    "SeedProgress",
    "compare_seeds",
    "cores",
    "jaxlib_build",
    "machine_fields",
    "load",
    "matching_record",
    "open_record",
    "open_records",
    "params_from",
    "pause_on_signals",
    "recorded_dir",
    "recorded_runs",
    "record_digest",
    "plan",
    "pooled_record",
    "processor",
    "results_dir",
    "run",
    "run_hash",
    "seed_progress",
    "seed_range",
]
