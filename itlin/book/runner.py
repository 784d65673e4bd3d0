"""Run experiments so that they survive crashes and are never computed twice.

Every chapter of the book runs its experiment through :func:`run`::

    from itlin.book import runner
    rec = runner.run("fig9_damping", {"dampings": [1e-3, 1e-1], "scale": "tiny"})
    rec.status            # "completed", "diverged at step 412", or a summary of several runs (text;
                          # each run's status is data in rec.runs[tag]: "status" and "diverged_at")
    rec["test_rmse"]      # the arrays the experiment returned
    rec.history("K=inf")  # the History of one training run made with ctx.fit

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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import datetime as _dt
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from .. import _io
from . import experiments as _experiments
from .experiments import Experiment

DEFAULT_CHECKPOINT_EVERY_STEPS = 10_000
DEFAULT_CHECKPOINT_EVERY_SECONDS = 300.0
PROGRESS_SECONDS = 30.0  # a text progress line per training run at most this often

RECORD_FILE = "record.json"
RESULTS_FILE = "results.npz"
PARAMS_FILE = "params.json"
WORK_DIR = "work"
#: in ``work/``: the wall-clock seconds of the sittings so far, as of each one's latest checkpoint
ELAPSED_FILE = "elapsed.json"
LOCK_FILE = ".lock"
LOCK_PID_FILE = ".lock.pid"
#: suffix of a finished run's two files while they are written beside the ones they replace
NEW_SUFFIX = ".new"
FITS_KEY = "_fits"

_FORMAT = 1
_DEFAULT = object()


def quiet() -> bool:
    """True when ``CI`` or ``ITLIN_QUIET`` is set: no progress lines."""
    return bool(os.environ.get("CI")) or os.environ.get("ITLIN_QUIET", "") not in ("", "0")


# ---------------------------------------------------------------------------------- where
def _source_checkout() -> Optional[Path]:
    """The repository root if itlin is imported from a source checkout (editable install)."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    try:
        if pyproject.is_file() and re.search(r'^name\s*=\s*"itlin"', pyproject.read_text(), re.M):
            return root
    except OSError:
        pass
    return None


def results_dir(path=None) -> Path:
    """The folder that holds all results.

    In order: ``path`` if given (relative paths are relative to the current directory);
    ``$ITLIN_RESULTS`` if set (a relative value is relative to the repository root in a source
    checkout, so chapters executed from ``book/`` and scripts run from the root share it, and to
    the current directory otherwise); ``<repository root>/results`` when itlin is imported from
    a source checkout (the usual editable install); otherwise the user cache
    (``~/.cache/itlin/results`` on Linux, ``~/Library/Caches/itlin/results`` on macOS).
    """
    if path is None:
        env = os.environ.get("ITLIN_RESULTS")
        if env:
            path = Path(env).expanduser()
            root = _source_checkout()
            if not path.is_absolute() and root is not None:
                path = root / path
        else:
            root = _source_checkout()
            if root is not None:
                path = root / "results"
            else:
                try:
                    import pooch

                    path = Path(pooch.os_cache("itlin")) / "results"
                except Exception:  # pragma: no cover
                    path = Path.home() / ".cache" / "itlin" / "results"
    return Path(path).expanduser().absolute()


_results_root = results_dir  # run() and plan() take an argument of the same name


def run_hash(name: str, version: str, params: Mapping) -> str:
    """The key of a run: 16 hex digits of sha256 over name, version and resolved parameters."""
    import hashlib
    import json

    blob = json.dumps({"experiment": name, "version": str(version), "params": _io.jsonable(params)},
                      sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    """Where a run's files go, before it runs: the experiment, resolved params, hash and folder."""

    experiment: Experiment
    params: dict
    hash: str
    path: Path

    @property
    def complete(self) -> bool:
        return (self.path / RECORD_FILE).is_file()


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


# ---------------------------------------------------------------------------------- provenance
def _git_commit() -> tuple:
    """``(commit, dirty)`` of the checkout itlin is imported from, or ``(None, None)``."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return None, None
        commit = out.stdout.strip() or None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                            capture_output=True, text=True, timeout=10)
        dirty = bool(st.stdout.strip()) if st.returncode == 0 else None
        return commit, dirty
    except Exception:  # git missing, not a repository, timeout: never fail because of git
        return None, None


def processor() -> str:
    """The host processor, as far as it changes a CPU run's numbers: vendor, model name, family,
    model and a digest of the vector-instruction flags of ``/proc/cpuinfo`` (XLA compiles CPU
    code for the host's instruction set, so one program gives other last bits on another
    processor, and training makes them grow). The machine's name where there is no
    ``/proc/cpuinfo``.

    >>> processor() == processor() != ""
    True
    """
    import platform

    fields: dict = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine() or "unknown"
    flags = sorted(f for f in fields.get("flags", "").split()
                   if f.startswith(("avx", "fma", "f16c", "bmi", "amx", "sse", "vnni", "vaes", "vpclmul")))
    which = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]
    return (f"{fields.get('vendor_id', platform.machine())} {fields.get('model name', platform.processor())} "
            f"(family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}, flags {which})")


def cores() -> Optional[int]:
    """The number of cores this process may run on (its CPU affinity; all of the machine's where
    the system does not say): XLA's CPU thread pool is sized from it, and the split of a
    reduction over threads changes the last bits of its result.

    >>> cores() >= 1
    True
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count()


def jaxlib_build() -> Optional[str]:
    """jaxlib's version and the commit it was built from (``"0.10.2 (990e6a0b8413)"``): the
    compiler whose kernels give a CPU run its last bits."""
    try:
        import jaxlib.version as v
    except ImportError:  # pragma: no cover
        return None
    commit = getattr(v, "_git_hash", None)
    return v.__version__ + (f" ({commit[:12]})" if commit else "")


def machine_fields() -> dict:
    """What this machine records about itself besides its device, each of which can change a CPU
    run's last bits: :func:`processor`, ``cores`` (:func:`cores`), ``xla_flags`` (the
    ``XLA_FLAGS`` in force, ``""`` for none) and ``jaxlib`` (:func:`jaxlib_build`)."""
    return {"processor": processor(), "cores": cores(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "jaxlib": jaxlib_build()}


def _device() -> dict:
    try:
        import jax

        devs = jax.devices()
        d = devs[0]
        return {"device": f"{d.platform} ({d.device_kind})", "device_count": len(devs), **machine_fields(),
                "jax_version": jax.__version__, "x64": bool(jax.config.read("jax_enable_x64"))}
    except Exception as err:  # pragma: no cover
        return {"device": f"unknown ({err})", "device_count": None, "jax_version": None, "x64": None}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------- Record
@dataclass
class Record:
    """A finished run: its arrays, its record and where it lives.

    ``arrays`` is the flat dict of arrays (keys ``"a/b"`` for nested results); ``record[key]``
    gives an array by flat key or a nested dict for a top-level key of the experiment's result.
    ``info`` is the content of ``record.json``. ``loaded`` says whether it came from disk.
    """

    experiment: str
    params: dict
    status: str
    path: Path
    arrays: dict
    paths: list
    info: dict
    loaded: bool = False

    @property
    def hash(self) -> str:
        return self.info.get("hash", self.path.name)

    @property
    def runs(self) -> dict:
        """``{tag: summary}`` of the training runs made with ``ctx.fit``: status, diverged_at,
        steps, feature_updates, resumed_from and ``final`` (the last evaluation's metrics)."""
        return self.info.get("runs", {})

    @property
    def meta(self) -> dict:
        return self.info.get("meta", {})

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def diverged(self) -> bool:
        return "diverged" in self.status or any(r.get("diverged_at") is not None for r in self.runs.values())

    def tree(self) -> dict:
        """The experiment's results as the nested dict ``run`` returned (numpy arrays)."""
        t = _io.unflatten_tree(self.arrays, self.paths)
        if isinstance(t, dict):
            t = {k: v for k, v in t.items() if k != FITS_KEY}
        return t

    def keys(self) -> list:
        """Top-level keys of the experiment's results."""
        t = self.tree()
        return list(t) if isinstance(t, dict) else []

    def __contains__(self, key) -> bool:
        return key in self.arrays or any(p and p[0] == key for p in self.paths)

    def __getitem__(self, key):
        if key in self.arrays:
            return self.arrays[key]
        sub = [p for p in self.paths if p and p[0] == key]
        if sub:
            return _io.unflatten_tree(self.arrays, sub)[key]
        raise KeyError(f"{key!r} is not in the results of {self.experiment}; keys: {', '.join(self.keys())}.")

    def history(self, tag: str):
        """The :class:`itlin.History` of the training run ``tag`` (as made by ``ctx.fit``)."""
        from ..core.loop import History

        if tag not in self.runs:
            raise KeyError(f"no training run {tag!r} in {self.experiment}; runs: {', '.join(self.runs) or '(none)'}.")
        arrays = {"/".join(p[2:]): self.arrays["/".join(p)] for p in self._fit_paths().get(tag, ())}
        r = self.runs[tag]
        return History.from_arrays(arrays, {"status": r["status"], "diverged_at": r.get("diverged_at"),
                                            "loss_every": r.get("loss_every", 1)})

    def _fit_paths(self) -> dict:
        """``{tag: [path, ...]}`` of the training runs' arrays, indexed once: a record of many runs
        has tens of thousands of paths, and a scan of them per run made reading every run's
        history quadratic (a minute for the 1,920 runs of the 120-seed Fig. 5 record)."""
        index = self.__dict__.get("_fit_index")
        if index is None:
            index = {}
            for p in self.paths:
                if len(p) >= 2 and p[0] == FITS_KEY:
                    index.setdefault(p[1], []).append(p)
            self.__dict__["_fit_index"] = index
        return index

    def histories(self) -> dict:
        """Every training run's :class:`itlin.History`, keyed by its tag."""
        return {tag: self.history(tag) for tag in self.runs}

    def __repr__(self):
        return (f"Record({self.experiment!r}, status={self.status!r}, loaded={self.loaded}, "
                f"path='{self.path}')")


def _read_record(plan_: Plan) -> tuple:
    """``(Record, None)`` if the stored result is complete and intact, else ``(None, reason)``;
    reason is None when there is simply nothing stored."""
    rec_path, res_path = plan_.path / RECORD_FILE, plan_.path / RESULTS_FILE
    if not rec_path.exists():
        return None, None
    info = _io.read_json(rec_path)
    if info is None:
        return None, f"{rec_path} is unreadable"
    if info.get("experiment") != plan_.experiment.name or info.get("params") != _io.jsonable(plan_.params) \
            or str(info.get("version")) != plan_.experiment.version:
        return None, f"{rec_path} belongs to other parameters or another version"
    problem = _record_problem(info, rec_path)
    if problem is not None:
        return None, problem
    if not res_path.is_file():
        return None, f"{res_path} is missing"
    try:
        digest = _io.sha256_file(res_path)
    except OSError as err:
        return None, f"{res_path} is unreadable ({err})"
    if digest != info.get("arrays_sha256"):
        return None, f"{res_path} does not match its checksum (truncated or modified)"
    try:
        flat, paths, _ = _io.load_tree(res_path)
    except Exception as err:
        return None, f"{res_path} is unreadable ({type(err).__name__}: {err})"
    rec = Record(plan_.experiment.name, dict(plan_.params), info.get("status", "unknown"), plan_.path,
                 flat, paths, info, loaded=True)
    return rec, None


def record_digest(info: Mapping) -> str:
    """sha256 over a record's own content (every field but ``record_sha256``), so that an edited
    status, metric or parameter in ``record.json`` is detected like a modified array file."""
    body = {k: v for k, v in _io.jsonable(dict(info)).items() if k != "record_sha256"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _record_problem(info: Mapping, rec_path) -> Optional[str]:
    if "record_sha256" not in info:
        return f"{rec_path} has no checksum of its own (made by an older itlin, or edited)"
    if record_digest(info) != info["record_sha256"]:
        return f"{rec_path} does not match its own checksum (edited after the run)"
    return None


def load(experiment, params=None, *, results_dir=None) -> Optional[Record]:
    """The stored result of ``experiment`` with ``params``, or ``None`` if there is none (or it
    is damaged). Never computes anything."""
    rec, reason = _read_record(plan(experiment, params, results_dir=results_dir))
    if reason is not None:
        warnings.warn(f"itlin.book.runner: {reason}; it will be recomputed by run().", RuntimeWarning, stacklevel=2)
    return rec


def recorded_dir() -> Path:
    """Where the recorded runs kept with the book live: ``<repository>/book/recorded`` (found
    from the package's own location, so it does not depend on the working directory)."""
    root = _source_checkout()
    if root is None:
        raise FileNotFoundError("the recorded runs live in book/recorded of a source checkout of itlin; this itlin "
                                "is not imported from one (clone the repository and pip install -e it).")
    return root / "book" / "recorded"


def open_record(folder) -> Record:
    """The finished run stored in ``folder`` (a ``<results>/<experiment>/<hash>`` folder, or the
    name of a recorded run in :func:`recorded_dir`), whatever parameters or experiment version
    it was made with.

    For recorded runs kept with the book (e.g. a paper-scale run on a GPU): the record tells
    its parameters, version, git commit and device. Raises ``FileNotFoundError`` if the folder
    holds no finished run and ``ValueError`` if its arrays do not match their checksum.
    """
    folder = Path(folder)
    if not folder.is_absolute() and not folder.exists() and _source_checkout() is not None \
            and (recorded_dir() / folder).exists():
        folder = recorded_dir() / folder
    rec_path, res_path = folder / RECORD_FILE, folder / RESULTS_FILE
    info = _io.read_json(rec_path)
    if info is None or not res_path.is_file():
        raise FileNotFoundError(f"{folder} holds no finished run (need {RECORD_FILE} and {RESULTS_FILE}).")
    problem = _record_problem(info, rec_path)
    if problem is not None:
        raise ValueError(problem + ".")
    if _io.sha256_file(res_path) != info.get("arrays_sha256"):
        raise ValueError(f"{res_path} does not match the checksum in {rec_path} (truncated or modified).")
    flat, paths, _ = _io.load_tree(res_path)
    return Record(info.get("experiment", "?"), dict(info.get("params", {})), info.get("status", "unknown"),
                  folder, flat, paths, info, loaded=True)


def open_records(name) -> list:
    """Every finished run kept under ``name`` (a recorded run's folder, or a folder of such
    folders, e.g. one per seed), each through :func:`open_record`, in folder order."""
    folder = Path(name)
    if not folder.is_absolute() and not folder.exists() and _source_checkout() is not None:
        folder = recorded_dir() / folder
    if (folder / RECORD_FILE).is_file():
        return [open_record(folder)]
    subs = sorted(p for p in folder.iterdir() if (p / RECORD_FILE).is_file()) if folder.is_dir() else []
    if not subs:
        raise FileNotFoundError(f"{folder} holds no finished run (need {RECORD_FILE} and {RESULTS_FILE}, "
                                "in it or in its sub-folders).")
    return [open_record(p) for p in subs]


def pooled_record(records: Sequence[Record], arrays: dict, paths: list, *, params: Optional[dict] = None,
                  meta: Optional[dict] = None, info: Optional[dict] = None) -> Record:
    """One :class:`Record` of several made for their own seeds, from their joined ``arrays`` and
    ``paths`` (how to join them is the experiment's: e.g. ``_rows.pool_seeds``,
    ``_arbel.pool_lr_sweeps``): ``seeds`` in the resolved parameters the total, the wall time
    summed, completed when every part is; the first record's parameters (or ``params``) and
    provenance otherwise, with ``meta`` and ``info`` updating its meta and info. Parts made on
    several machines (device or processor) give a ``device`` that names each with its seeds, no
    ``processor``, and ``machines``, their count: the pool's wall time then prices no one machine.

    Raises ``ValueError`` when a part is of another experiment or version, or was made with
    other settings than the first (anything but its seeds): pooled, it would be judged as if it
    were the same runs; and when two parts share a seed (it would count twice)."""
    if not records:
        raise ValueError("pooled_record: no records to pool.")
    first = records[0]
    for rec in records[1:]:
        if rec.experiment != first.experiment or _major(rec.info.get("version")) != _major(first.info.get("version")):
            raise ValueError(f"pooled_record: {rec.path} is {rec.experiment} version {_major(rec.info.get('version'))}, "
                             f"{first.path} is {first.experiment} version {_major(first.info.get('version'))}; "
                             "pool records of one experiment and version.")
        a, b = first.meta.get("resolved", {}), rec.meta.get("resolved", {})
        if not _same_settings(a, b):
            key = next(k for k in sorted(set(a) | set(b)) if k not in ("seed", "seeds")
                       and not _same_settings({k: a.get(k)}, {k: b.get(k)}))
            raise ValueError(f"pooled_record: {rec.path} was made with {key}={b.get(key)!r}, {first.path} with "
                             f"{key}={a.get(key)!r}; pool records that differ only in their seeds.")
    seen: dict = {}
    for rec in records:
        seeds = seed_range(rec.meta.get("resolved", {}))
        twice = sorted(set(seeds or ()) & set(seen))
        if twice:
            raise ValueError(f"pooled_record: {rec.path} and {seen[twice[0]]} both have seed {twice[0]}; pool records "
                             "of different seeds.")
        seen.update(dict.fromkeys(seeds or (), rec.path))
    seeds = sum(int(rec.meta["resolved"]["seeds"]) for rec in records)
    machines: dict = {}
    for rec in records:
        where = (rec.info.get("device", "?"), rec.info.get("processor"))
        machines[where] = machines.get(where, 0) + int(rec.meta["resolved"]["seeds"])
    meta = {**first.meta, **(meta or {}), "resolved": {**first.meta["resolved"], "seeds": seeds}}
    info = {**first.info, **(info or {}), "meta": meta, "wall_seconds": sum(rec.info["wall_seconds"] for rec in records)}
    if len(machines) > 1:  # the first part's machine is not where the pool was made
        info.update(device="several machines (" + "; ".join(
            f"{n} seeds on {device}" + (f", processor {proc}" if proc else "") for (device, proc), n in machines.items())
            + ")", processor=None, machines=len(machines))
    status = "completed" if all(rec.completed for rec in records) else "; ".join(rec.status for rec in records)
    return Record(first.experiment, dict(first.params if params is None else params), status, first.path.parent,
                  arrays, paths, info, loaded=True)


# ---------------------------------------------------------------------------------- a record with more seeds
def seed_range(resolved: Mapping) -> Optional[range]:
    """The seeds of a run from its resolved parameters (``seed``, ``seed + 1``, ...,
    ``seed + seeds - 1``), e.g. to check that a confirmatory record shares no seed with the
    record it follows; ``None`` when they do not say.

    >>> seed_range({"seed": 1000, "seeds": 3})
    range(1000, 1003)
    """
    try:
        return range(int(resolved["seed"]), int(resolved["seed"]) + int(resolved["seeds"]))
    except (KeyError, TypeError, ValueError):
        return None


def _ranges_text(ranges: Sequence[range]) -> str:
    """``"1256-1479 and 1512-1603"``: runs of consecutive seeds, as a reader would write them."""
    parts = [f"{r.start}" if len(r) == 1 else f"{r.start}-{r.stop - 1}" for r in ranges]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


class SeedProgress(NamedTuple):
    """How far a record planned for the seeds ``planned`` has come, part by part (see
    :func:`seed_progress`): ``made`` seeds are in, ``missing`` holds the runs of consecutive
    seeds still to make."""
    planned: range
    made: int
    parts: int
    missing: tuple

    @property
    def complete(self) -> bool:
        return not self.missing

    def text(self) -> str:
        """``"188 of the 504 planned seeds (1100-1603) are made, in 46 parts; still to make:
        1256-1479 and 1512-1603"``."""
        head = (f"{self.made:,} of the {len(self.planned):,} planned seeds ({_ranges_text([self.planned])}) "
                f"are made, in {self.parts} part{'s' if self.parts != 1 else ''}")
        return head if self.complete else head + "; still to make: " + _ranges_text(self.missing)


def seed_progress(resolved: Sequence[Mapping], planned: range) -> SeedProgress:
    """How much of a record planned for the seeds ``planned`` (fixed before any of its runs,
    e.g. a confirmatory record) the parts made so far cover, from each part's resolved
    parameters (``seed`` and ``seeds``, see :func:`seed_range`). A chapter judges such a record
    only when it is complete: a look at part of it would be a look at the data that judges.

    Raises ``ValueError`` when a part does not say its seeds, has seeds outside ``planned``, or
    shares a seed with another part (pooled, it would count that seed twice).

    >>> seed_progress([{"seed": 10, "seeds": 2}, {"seed": 14, "seeds": 1}], range(10, 16)).text()
    '3 of the 6 planned seeds (10-15) are made, in 2 parts; still to make: 12-13 and 15'
    """
    if planned.step != 1 or not len(planned):
        raise ValueError(f"seed_progress: planned must be a non-empty range of consecutive seeds, not {planned!r}.")
    seen: dict = {}
    for i, r in enumerate(resolved):
        seeds = seed_range(r)
        if seeds is None or not len(seeds):
            raise ValueError(f"seed_progress: part {i} does not say its seeds (needs 'seed' and 'seeds' >= 1).")
        outside = [s for s in seeds if s not in planned]
        if outside:
            raise ValueError(f"seed_progress: part {i} has seeds {_ranges_text(_runs(outside))}, outside the planned "
                             f"{_ranges_text([planned])}.")
        twice = [s for s in seeds if s in seen]
        if twice:
            raise ValueError(f"seed_progress: parts {seen[twice[0]]} and {i} both have seeds "
                             f"{_ranges_text(_runs(twice))}; keep one of them.")
        seen.update(dict.fromkeys(seeds, i))
    missing = _runs([s for s in planned if s not in seen])
    return SeedProgress(planned, len(seen), len(resolved), tuple(missing))


def _runs(seeds: Sequence[int]) -> list:
    """Sorted integers as runs of consecutive ones: ``[1, 2, 3, 7]`` -> ``[range(1, 4), range(7, 8)]``."""
    out: list = []
    for s in sorted(seeds):
        if out and out[-1].stop == s:
            out[-1] = range(out[-1].start, s + 1)
        else:
            out.append(range(s, s + 1))
    return out


def _same_settings(a: Mapping, b: Mapping) -> bool:
    """Resolved parameters equal in everything but the number of seeds (JSON-equal, so ``inf``
    and ``"inf"``, tuples and lists compare as stored). A parameter that is ``None`` on one side
    and absent on the other counts as equal: a parameter added after a record was made takes
    ``None`` for "as before" (e.g. ``feature_updates``' ``data_seed``), so the record still
    repeats the runs that leave it at ``None``."""
    strip = lambda r: json.dumps(_io.jsonable({k: v for k, v in r.items() if k not in ("seeds", "seed")
                                               and v is not None}), sort_keys=True)
    return strip(a) == strip(b)


def _major(version) -> str:
    """An experiment's own version, without the digest of its scale table (``"3.b0ee7979"`` ->
    ``"3"``): what changes when ``run`` changes its numbers."""
    return str(version).split(".")[0]


def matching_record(rec: Record, folder=None) -> Optional[Record]:
    """The recorded run kept with the book (``folder``, default :func:`recorded_dir`) that repeats
    ``rec`` with more seeds: the same experiment and version (bumped whenever ``run`` changes its
    numbers), the same resolved parameters but ``seeds`` (so every value a scale table supplies
    too), and a list of seeds that contains ``rec``'s; finished, whatever its status (runs that
    diverge are measurements too, e.g. Fig. 4's). The
    one with the most seeds when several match; ``None`` when none does (or there is no source
    checkout). Chosen on parameters alone, never on results.

    A chapter judges its claims on this record when there is one: the live run repeats some of
    its seeds, and :func:`compare_seeds` says whether the two agree.
    """
    if folder is None:
        root = _source_checkout()
        if root is None:
            return None
        folder = root / "book" / "recorded"
    folder = Path(folder)
    mine = rec.meta.get("resolved")
    seeds = seed_range(mine or {})
    if not folder.is_dir() or mine is None or seeds is None:
        return None
    best = None
    for path in sorted(p.parent for p in folder.glob(f"*/{RECORD_FILE}")):
        info = _io.read_json(path / RECORD_FILE) or {}
        theirs = (info.get("meta") or {}).get("resolved")
        if info.get("experiment") != rec.experiment or _major(info.get("version")) != _major(rec.info.get("version")) \
                or not theirs:
            continue
        others = seed_range(theirs)
        if others is None or len(others) <= len(seeds) or not set(seeds) <= set(others) \
                or not _same_settings(mine, theirs):
            continue
        if best is None or len(others) > len(seed_range(best.meta["resolved"])):
            best = open_record(path)
    return best


class SeedComparison(NamedTuple):
    """How a run agrees with a record that repeats its seeds (:func:`compare_seeds`).

    ``arrays``: numeric arrays compared; ``max_abs`` and ``max_rel``: the largest absolute and
    relative differences of their floating-point entries finite on both sides (packed bits and
    non-finite entries are not numbers to subtract: see below); ``identical``: every compared
    number equal (NaNs included), every packed bit and every run's divergence step too.

    ``max_spread``: the largest difference in units of the spread between seeds (each entry's
    difference over the standard deviation of the same entry over the record's seeds; NaN when no
    array has such a spread), found in ``spread_key``. ``max_flip``: the largest fraction of
    examples whose per-example result (packed bits: ``np.packbits`` arrays, or the base64 text of
    :func:`itlin.book.verdicts.pack_correct` in a run's meta) differs, found in ``flip_key``;
    ``packed``: how many such results were compared (NaN ``max_flip`` when none). ``diverged``:
    ``(tag, the record's step, this run's step)`` for each run that diverges on one side but not
    the other or at another step (``None``: it did not); those runs' arrays are left out of the
    differences. ``nonfinite``: ``(key, entries)`` for arrays whose non-finite entries sit
    elsewhere (a run stacked over seeds that diverged at another step)."""

    arrays: int
    max_abs: float
    max_rel: float
    identical: bool
    max_spread: float = math.nan
    spread_key: str = ""
    max_flip: float = math.nan
    flip_key: str = ""
    packed: int = 0
    diverged: tuple = ()
    nonfinite: tuple = ()


def _is_timing(key: str) -> bool:
    """Whether an array holds wall-clock times (``.../seconds``, ``..._seconds``), which no two
    runs share: left out of :func:`compare_seeds`."""
    name = key.rsplit("/", 1)[-1]
    return name == "seconds" or name.endswith("_seconds")


def _seed_axis(a_shape: tuple, b_shape: tuple, n: int, offset: int):
    """Where ``b`` holds the seeds of ``a``: ``None`` for the same shape (a run of one seed),
    the seed axis (one axis of length ``n`` in ``a`` against one of more seeds in ``b`` that has
    ``a``'s at ``offset``), or ``False`` when the two cannot be matched seed for seed."""
    if tuple(a_shape) == tuple(b_shape):
        return None
    if len(a_shape) != len(b_shape) or offset < 0:
        return False
    axes = [i for i, (p, q) in enumerate(zip(a_shape, b_shape)) if p != q]
    if len(axes) != 1 or a_shape[axes[0]] != n or b_shape[axes[0]] < offset + n:
        return False
    return axes[0]


def _seed_slices(a: np.ndarray, b: np.ndarray, n: int, offset: int):
    """``a`` and the part of ``b`` that holds ``a``'s seeds: the same shape (a run of one seed),
    or one axis of length ``n`` in ``a`` against one of more seeds in ``b`` (the seed axis)."""
    axis = _seed_axis(a.shape, b.shape, n, offset)
    if axis is False:
        return None
    if axis is None:
        return a, b
    return a, np.take(b, np.arange(offset, offset + n), axis=axis)


_SEED_PART = re.compile(r"^(.*\bseed=)(-?\d+)$")


def _per_run_group(key: str) -> Optional[tuple]:
    """``(the key with its run's seed left out, that seed)`` for an array of one seed's run
    (a path part ending in ``seed=N``, e.g. ``_fits/full K=1 seed=3/loss``), else ``None``."""
    parts = key.split("/")
    for i, part in enumerate(parts):
        m = _SEED_PART.match(part)
        if m:
            return "/".join(parts[:i] + [m.group(1) + "*"] + parts[i + 1:]), int(m.group(2))
    return None


def _run_tag(key: str) -> Optional[str]:
    """The run an array of ``_fits`` belongs to (``_fits/<tag>/...``)."""
    parts = key.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == FITS_KEY else None


def _spread(values: np.ndarray, axis: int) -> np.ndarray:
    """The standard deviation over seeds along ``axis`` of the finite entries (NaN where fewer
    than two are finite)."""
    v = np.where(np.isfinite(values), values, np.nan)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanstd(v, axis=axis, ddof=1, keepdims=True)


def _examples(other: Record, nbytes: int) -> int:
    """How many examples a packed array of ``nbytes`` bytes on its last axis holds: the record's
    test-set size when it fits (``np.packbits`` pads to whole bytes), else every bit."""
    for key in ("n_test", "n_val"):
        n = other.meta.get(key)
        if isinstance(n, (int, np.integer)) and 8 * nbytes - 7 <= int(n) <= 8 * nbytes:
            return int(n)
    return 8 * nbytes


def _flips(x: np.ndarray, y: np.ndarray, n: int) -> float:
    """The largest fraction, over the rows of two packed arrays (the last axis packed), of the
    ``n`` examples whose bit differs."""
    x, y = np.asarray(x, np.uint8), np.asarray(y, np.uint8)
    diff = np.unpackbits(np.bitwise_xor(x, y), axis=-1).sum(axis=-1)
    return float(np.max(diff)) / n if diff.size else 0.0


def compare_seeds(rec: Record, other: Record) -> SeedComparison:
    """Compare ``rec`` with a record of the same settings and more seeds, seed for seed: every
    numeric array of ``rec`` whose key ``other`` has too, either with the same shape (a training
    run of a seed both made) or with one axis of ``rec``'s seeds against ``other``'s (arrays
    stacked over seeds), is compared with ``other``'s values for the same seeds. Wall-clock times
    are left out.

    Packed per-example results (``uint8`` arrays of ``np.packbits``, and the ``*correct`` texts in
    the runs' meta) are compared as the fraction of examples that flip; a run that diverges on one
    side only, or at another step, is reported by its steps (and its arrays left out); non-finite
    entries are compared by where they are, not subtracted. Each floating-point difference is also
    measured against the spread between seeds of the same entry in ``other`` (along the seed axis
    of a stacked array; over the other seeds' runs of the same key for a run's own array), the
    largest of them is ``max_spread``. See :class:`SeedComparison`."""
    n = int(rec.meta["resolved"]["seeds"])
    offset = int(rec.meta["resolved"]["seed"]) - int(other.meta["resolved"]["seed"])
    count, max_abs, max_rel, same = 0, 0.0, 0.0, True
    max_spread, spread_key, max_flip, flip_key, packed = math.nan, "", math.nan, "", 0
    diverged, nonfinite = [], []
    for tag in rec.runs:
        if tag in other.runs:
            a, b = rec.runs[tag].get("diverged_at"), other.runs[tag].get("diverged_at")
            if a != b:
                diverged.append((tag, b, a))
    skip = {tag for tag, _, _ in diverged}
    groups = None  # other's per-run arrays by key with the seed left out, built when first needed

    def flip(value, key):
        nonlocal max_flip, flip_key, same
        if not value <= max_flip:  # NaN max_flip: the first
            max_flip, flip_key = value, key
        same = same and value == 0

    for key, a in rec.arrays.items():
        b = other.arrays.get(key)
        if b is None or _is_timing(key) or _run_tag(key) in skip:
            continue
        a, b = np.asarray(a), np.asarray(b)
        if not (np.issubdtype(a.dtype, np.number) and np.issubdtype(b.dtype, np.number)):
            continue
        axis = _seed_axis(a.shape, b.shape, n, offset)
        if axis is False:
            continue
        y_all = b
        b = b if axis is None else np.take(b, np.arange(offset, offset + n), axis=axis)
        count += 1
        if a.dtype == np.uint8 and b.dtype == np.uint8 and a.ndim >= 1 and a.shape[-1] > 0:
            packed += 1
            flip(_flips(a, b, _examples(other, a.shape[-1])), key)
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        fx, fy = np.isfinite(x), np.isfinite(y)
        both = fx & fy
        if not np.array_equal(fx, fy) or not np.array_equal(x[~both], y[~both], equal_nan=True):
            same = False
            nonfinite.append((key, int(np.sum((fx != fy) | (~both & ~((x == y) | (np.isnan(x) & np.isnan(y))))))))
        if not both.any():
            continue
        d = np.abs(x - y)
        max_abs = max(max_abs, float(d[both].max()))
        max_rel = max(max_rel, float((d[both] / np.maximum(np.abs(y[both]), 1e-300)).max()))
        same = same and not d[both].any()
        # the spread between seeds of each entry
        if axis is not None:
            scale = np.broadcast_to(_spread(y_all.astype(np.float64), axis), x.shape)
        else:
            group = _per_run_group(key)
            if group is None:
                continue
            if groups is None:
                groups = {}
                for k in other.arrays:
                    g = _per_run_group(k)
                    if g is not None:
                        groups.setdefault(g[0], []).append((g[1], k))
            peers = [np.asarray(other.arrays[k], np.float64) for s, k in groups.get(group[0], ())
                     if s != group[1] and np.shape(other.arrays[k]) == x.shape]
            if len(peers) < 2:
                continue
            scale = _spread(np.stack(peers), 0)[0]
        ok = both & np.isfinite(scale) & (scale > 0)
        if ok.any():
            units = float((d[ok] / scale[ok]).max())
            if not units <= max_spread:
                max_spread, spread_key = units, key
    # per-example results kept as text in the runs' meta
    mine, theirs = rec.meta.get("runs"), other.meta.get("runs")
    if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
        from .verdicts import unpack_correct

        for tag, m in mine.items():
            t = theirs.get(tag)
            if tag in skip or not (isinstance(m, Mapping) and isinstance(t, Mapping)):
                continue
            for field, bits in m.items():
                if "correct" not in field or not isinstance(bits, str) or not isinstance(t.get(field), str):
                    continue
                try:
                    u, v = unpack_correct(bits, 1 << 62), unpack_correct(t[field], 1 << 62)
                except ValueError:
                    continue
                if u.shape != v.shape or not u.size:
                    continue
                packed += 1
                try:
                    examples = int(float(t.get("n_test_final", u.size)))
                except (TypeError, ValueError):
                    examples = u.size
                flip(float(np.sum(u != v)) / max(min(examples, u.size), 1), f"{tag}/{field}")
    return SeedComparison(count, max_abs, max_rel, same and not diverged and count + packed > 0,
                          max_spread, spread_key, max_flip, flip_key, packed, tuple(diverged), tuple(nonfinite))


# ---------------------------------------------------------------------------------- locking
class RunLockedError(RuntimeError):
    """Another process holds the lock of this run."""


@contextlib.contextmanager
def _locked(folder: Path, say: Callable[[str], None], wait: bool = True):
    """Hold an exclusive lock on ``folder/.lock`` (the maintained ``filelock`` library: an OS
    lock, freed when the process dies, even by SIGKILL); the holder's pid is kept beside it in
    ``.lock.pid`` for the message a second process prints."""
    from filelock import FileLock, Timeout

    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / LOCK_FILE))
    pid_file = folder / LOCK_PID_FILE
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            holder = pid_file.read_text().strip() or "?"
        except OSError:
            holder = "?"
        if not wait:
            raise RunLockedError(f"process {holder} is running this experiment in {folder}.") from None
        say(f"waiting for process {holder}, which is running this experiment in {folder}")
        lock.acquire()
    try:
        pid_file.write_text(str(os.getpid()))
        yield
    finally:
        lock.release()


# ---------------------------------------------------------------------------------- checkpoints
def _safe_tag(tag: str) -> str:
    """A file-name-safe version of a tag (with a short hash when characters were replaced)."""
    import hashlib

    safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", tag)[:80]
    if safe != tag:
        safe += "-" + hashlib.sha256(tag.encode()).hexdigest()[:8]
    return safe


def _history_snapshot(h) -> tuple:
    """What is needed to rebuild ``h`` as it is now, cheaply (fit keeps appending to it)."""
    return (len(h.loss), list(h.pending), len(h.relin_steps), len(h.evals.get("step", [])),
            h.status, h.diverged_at)


def _history_from_snapshot(h, snap):
    n_loss, pending, n_relin, n_eval, status, diverged_at = snap
    return h.truncated(losses=n_loss, relin_steps=n_relin, evals=n_eval, pending=pending, status=status,
                       diverged_at=diverged_at)


def _final_metrics(history) -> dict:
    out = {}
    for k, v in history.evals.items():
        if k in ("step", "seconds", "feature_updates") or not v:
            continue
        out[k] = float(v[-1])
    return out


# ---------------------------------------------------------------------------------- context
class RunContext:
    """What an experiment's ``run(params, ctx)`` uses to train, save and report.

    Attributes: ``experiment``, ``params`` (resolved), ``path`` (the run's folder), ``hash``,
    ``runs`` (``{tag: summary}`` of the fits so far), ``checkpoint_every_steps``,
    ``checkpoint_every_seconds``, ``show_progress``, ``sittings`` (this process's sitting: 1 for
    a run that starts fresh, one more for each resumption after a checkpoint).
    """

    def __init__(self, plan_: Plan, *, checkpoint_every_steps, checkpoint_every_seconds, progress: bool,
                 verbose: bool):
        self.experiment = plan_.experiment
        self.params = dict(plan_.params)
        self.path = plan_.path
        self.hash = plan_.hash
        self.work = plan_.path / WORK_DIR
        self.checkpoint_every_steps = checkpoint_every_steps
        self.checkpoint_every_seconds = checkpoint_every_seconds
        self.show_progress = bool(progress) and not quiet()
        self.verbose = verbose
        self.runs: dict = {}
        self.histories: dict = {}
        self.resumed: dict = {}
        self._tags: set = set()
        # the clock over sittings: a resumed run adds the seconds its earlier sittings reached by
        # their latest checkpoints (time after that was lost with the process, and is redone here)
        before = _io.read_json(self.work / ELAPSED_FILE) or {}
        self._seconds_before = float(before.get("seconds", 0.0))
        self.sittings = int(before.get("sittings", 0)) + 1
        self._clock = time.perf_counter()

    def elapsed(self) -> float:
        """Wall-clock seconds of this run over all its sittings (see ``sittings``)."""
        return self._seconds_before + time.perf_counter() - self._clock

    def _note_elapsed(self):
        _io.write_json(self.work / ELAPSED_FILE, {"seconds": self.elapsed(), "sittings": self.sittings}, fsync=False)

    # ------------------------------------------------------------ helpers
    @property
    def checkpointing(self) -> bool:
        return self.checkpoint_every_steps is not None or self.checkpoint_every_seconds is not None

    def say(self, msg: str):
        """Print one line (``[itlin] <experiment>: msg``) unless the run is silent."""
        if self.verbose:
            print(f"[itlin] {self.experiment.name}: {msg}", flush=True)

    def progress(self, iterable: Iterable, *, desc: Optional[str] = None, total: Optional[int] = None):
        """``iterable``, with one text line per item (``desc: i/total``) when progress is on."""
        items = list(iterable) if total is None else iterable
        total = len(items) if total is None else total
        for i, item in enumerate(items, 1):
            yield item
            if self.show_progress:
                self.say(f"{desc or 'progress'}: {i}/{total}")

    def _claim(self, kind: str, tag: str):
        if not isinstance(tag, str) or not tag:
            raise ValueError(f"ctx.{kind} needs a non-empty string tag, got {tag!r}.")
        if tag in self._tags:
            raise ValueError(f"ctx.{kind}: tag {tag!r} is already used in this run; tags must be unique "
                             "(they name the checkpoints).")
        self._tags.add(tag)

    # ------------------------------------------------------------ stage
    def stage(self, tag: str, fn: Callable[[], Any]):
        """Compute ``fn()`` once and keep it: on a resumed run, the saved value is returned.

        ``fn`` returns a dict (nested dicts allowed) of arrays, numbers or strings, or a single
        array. The value returned is the saved one (numpy arrays), the same on the first run as
        on a resumed one. Use it for expensive sub-results that are not training runs (e.g. a
        vmapped Gauss-Newton sweep); keep each stage deterministic.
        """
        self._claim("stage", tag)
        path = self.work / f"stage-{_safe_tag(tag)}.npz"
        if path.exists():
            try:
                flat, paths, meta = _io.load_tree(path)
                if meta.get("tag") != tag:
                    raise ValueError(f"it holds stage {meta.get('tag')!r}")
                self.say(f"stage {tag}: loaded from {path.name}")
                return _io.unflatten_tree(flat, paths)
            except Exception as err:
                warnings.warn(f"itlin.book.runner: stage file {path} is unusable ({err}); recomputing the stage.",
                              RuntimeWarning, stacklevel=2)
        value = fn()
        flat, paths = _io.flatten_tree(value, what=f"stage {tag!r}")
        if self.checkpointing:
            _io.save_tree(path, value, {"format": _FORMAT, "kind": "stage", "tag": tag, "saved_at": _now()},
                          what=f"stage {tag!r}", checksum=False)
            self._note_elapsed()
        return _io.unflatten_tree(flat, paths)

    # ------------------------------------------------------------ fit
    def fit(self, tag: str, trainer, state, x, y, steps: int, **fit_kwargs):
        """:func:`itlin.fit` with checkpoints; returns its :class:`itlin.FitResult`.

        ``tag`` names the training run (unique within the experiment, e.g. ``"K=100"``). If a
        checkpoint of this run exists it is restored (the fresh ``state`` is the template its
        pytree paths are matched against) and training continues from there; a run that had
        already finished is returned at once. Checkpoints are saved from ``fit``'s callback every
        ``checkpoint_every_steps`` steps or ``checkpoint_every_seconds`` seconds, whichever
        comes first, and when the run ends (completed or diverged). ``fit_kwargs`` go to
        :func:`itlin.fit` (``batch_size``, ``eval_sets``, ``eval_every``, ``seed``, ``blowup``,
        ...); ``history`` and ``progress`` are managed here.
        """
        from ..core.loop import FitResult
        from ..core.loop import fit as train_fit

        self._claim("fit", tag)
        if "history" in fit_kwargs:
            raise TypeError("ctx.fit manages the history itself (it restores it from the checkpoint); "
                            "do not pass history=.")
        user_cb = fit_kwargs.pop("callback", None)
        steps = int(steps)
        fingerprint = _io.jsonable({
            "steps": steps,
            "seed": int(fit_kwargs.get("seed", 0)),
            "eval_every": fit_kwargs.get("eval_every"),
            "loss_every": fit_kwargs.get("loss_every"),
            "batch_size": fit_kwargs.get("batch_size"),
            "blowup": fit_kwargs.get("blowup"),
            "x": [list(np.shape(x)), str(getattr(x, "dtype", ""))],
            "y": [list(np.shape(y)), str(getattr(y, "dtype", ""))],
            "eval_sets": sorted((fit_kwargs.get("eval_sets") or {}).keys()),
            "schedule": trainer.schedule.spec,
        })
        path = self.work / f"fit-{_safe_tag(tag)}.msgpack"

        history, resumed_from = None, None
        restored = self._restore_fit(path, tag, state, fingerprint) if path.exists() else None
        if restored is not None:
            state, history, done = restored
            if done:
                self.say(f"{tag}: finished earlier ({history.status}, step {int(state.step)}); restored")
                result = FitResult(state, history)
                self._summarize(tag, result, steps, resumed_from=int(state.step))
                return result
            resumed_from = int(state.step)
            self.resumed[tag] = resumed_from
            self.say(f"resuming {tag} from step {resumed_from}")

        every_steps, every_seconds = self.checkpoint_every_steps, self.checkpoint_every_seconds
        mark = {"step": int(state.step), "time": time.monotonic(), "saved": None, "said": time.monotonic()}
        last = {}

        def save(st, hist, done):
            self._save_fit(path, tag, st, hist, fingerprint, done)

        def callback(st, hist):
            step = int(st.step)
            if self.checkpointing:
                last["state"], last["snap"], last["history"] = st, _history_snapshot(hist), hist
                due = (every_steps is not None and step - mark["step"] >= every_steps) or \
                      (every_seconds is not None and time.monotonic() - mark["time"] >= every_seconds)
                if due:
                    save(st, hist, False)
                    mark.update(step=step, time=time.monotonic(), saved=step)
            if self.show_progress and time.monotonic() - mark["said"] >= PROGRESS_SECONDS:
                mark["said"] = time.monotonic()
                loss = hist.loss[-1] if hist.loss else float("nan")
                self.say(f"{tag}: step {step:,}/{steps:,}, loss {loss:.4g}, {int(st.updates):,} feature updates")
            if user_cb is not None:
                user_cb(st, hist)

        try:
            result = train_fit(trainer, state, x, y, steps, history=history, callback=callback, **fit_kwargs)
        except KeyboardInterrupt:
            # Keep what was reached: the state and history as of the latest chunk.
            if self.checkpointing and last and mark["saved"] != int(last["state"].step):
                save(last["state"], _history_from_snapshot(last["history"], last["snap"]), False)
                self.say(f"{tag}: interrupted; checkpoint saved at step {int(last['state'].step)}")
            raise
        if self.checkpointing:
            save(result.state, result.history, True)
        self._summarize(tag, result, steps, resumed_from=resumed_from)
        return result

    def _save_fit(self, path, tag, state, history, fingerprint, done):
        from flax import serialization

        meta = {"format": _FORMAT, "kind": "fit", "tag": tag, "step": int(state.step), "done": bool(done),
                "history_meta": history.meta(), "fingerprint": fingerprint, "saved_at": _now()}
        body = serialization.msgpack_serialize({"state": serialization.to_state_dict(state),
                                                "history": history.arrays(), "meta": json.dumps(meta)})
        blob = serialization.msgpack_serialize({"body": body, "sha256": hashlib.sha256(body).hexdigest()})
        _io.atomic_write(path, lambda fh: fh.write(blob), fsync=False)
        self._note_elapsed()

    def _restore_fit(self, path, tag, template, fingerprint):
        import jax
        from flax import serialization

        from ..core.loop import History

        try:
            outer = serialization.msgpack_restore(path.read_bytes())
            if hashlib.sha256(outer["body"]).hexdigest() != outer["sha256"]:
                raise ValueError("its contents do not match their checksum")
            raw = serialization.msgpack_restore(outer["body"])
            meta = json.loads(raw["meta"])
            if meta.get("tag") != tag or meta.get("kind") != "fit":
                raise ValueError(f"it holds {meta.get('kind')} {meta.get('tag')!r}")
            if meta.get("fingerprint") != fingerprint:
                raise ValueError(f"it was made by a different call (saved {meta.get('fingerprint')}, now {fingerprint})")
            state = serialization.from_state_dict(template, raw["state"])
            spec = lambda t: jax.tree_util.tree_map(lambda a: (np.shape(a), np.asarray(a).dtype.str), t)
            if spec(state) != spec(template):
                raise ValueError("its state does not have the shapes and dtypes of the fresh state")
            history = History.from_arrays(dict(raw["history"]), meta["history_meta"])
        except Exception as err:
            warnings.warn(f"itlin.book.runner: checkpoint {path} is unusable ({err}); starting {tag} from scratch.",
                          RuntimeWarning, stacklevel=3)
            return None
        return state, history, bool(meta.get("done"))

    def _summarize(self, tag, result, steps, resumed_from):
        h = result.history
        self.histories[tag] = h
        self.runs[tag] = {
            "status": h.status,
            "diverged_at": h.diverged_at,
            "steps": int(result.state.step),
            "target_steps": int(steps),
            "feature_updates": int(result.state.feature_updates),
            "loss_every": int(h.loss_every),
            "resumed_from": resumed_from,
            "final": _final_metrics(h),
        }


# ---------------------------------------------------------------------------------- status
def _overall_status(runs: Mapping[str, dict]) -> str:
    if not runs:
        return "completed"
    if len(runs) == 1:
        r = next(iter(runs.values()))
        if str(r["status"]).startswith("diverged") and r.get("diverged_at") is not None:
            return f"diverged at step {r['diverged_at']}"
        return r["status"]
    bad = {t: r for t, r in runs.items() if r["status"] != "completed"}
    if not bad:
        return "completed"
    parts = []
    for t, r in list(bad.items())[:5]:
        s = r["status"]
        parts.append(f"{t} at step {r['diverged_at']}" if r.get("diverged_at") is not None else f"{t}: {s}")
    more = f", and {len(bad) - 5} more" if len(bad) > 5 else ""
    n_div = sum(1 for r in bad.values() if r.get("diverged_at") is not None)
    what = "diverged" if n_div == len(bad) else "did not complete"
    return f"{len(bad)} of {len(runs)} runs {what}: {', '.join(parts)}{more}"


# ---------------------------------------------------------------------------------- run
def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"received {signal.Signals(signum).name}")


def pause_on_signals(signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> dict:
    """Make each of ``signals`` raise KeyboardInterrupt in the main thread, so a run stopped
    politely saves a checkpoint of the training run in progress and the same call resumes it.

    Two cases need it: a shell without job control starts a background command (``nohup ... &``)
    with SIGINT *ignored*, so ``kill -INT`` does nothing; and Python dies on SIGTERM (what
    ``kill``, ``timeout`` and cluster schedulers send) without saving, losing the work since the
    last periodic checkpoint. Call it once, from the main thread, before :func:`run`. Returns
    the previous handlers, ``{signal: handler}``, for :func:`signal.signal` to restore.
    """
    return {s: signal.signal(s, _interrupt) for s in signals}


def run(experiment: Union[str, Experiment], params: Optional[Mapping] = None, *, results_dir=None,
        force: bool = False, checkpoint_every_steps=_DEFAULT, checkpoint_every_seconds=_DEFAULT,
        progress: bool = True, verbose: bool = True, _worker: bool = False) -> Record:
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
      progress: progress bars (always off when ``CI`` or ``ITLIN_QUIET`` is set).
      verbose: print one line when loading, resuming or finishing.

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
    exp = p.experiment
    if not _worker:
        import jax

        if jax.process_count() > 1:
            return _run_on_processes(p, params, results_dir=results_dir, force=force, progress=progress,
                                     verbose=verbose)
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
            print(f"[itlin] {exp.name}: {msg}", flush=True)

    if not force:
        rec = _load_or_warn(p)
        if rec is not None:
            say(f"loaded stored result ({rec.status}) {exp.name}/{p.hash} from the results folder")
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
                say(f"loaded stored result ({rec.status}) {exp.name}/{p.hash} from the results folder")
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
        out = exp.run(exp.params.from_dict(p.params, experiment=exp.name).resolved(), ctx)
        wall = time.perf_counter() - t0
        rec = _finish(p, ctx, out, wall=wall, started=started, first_started=first_started or started)
        shutil.rmtree(p.path / WORK_DIR, ignore_errors=True)
    say(f"{rec.status} in {wall:.1f} s; saved as {exp.name}/{p.hash} in the results folder")
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
                    print(f"[itlin] {p.experiment.name}: loaded stored result ({stored.status}) "
                          f"{p.experiment.name}/{p.hash} from the results folder; sent to every process", flush=True)
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
        return run(p.experiment, params, results_dir=results_dir if main else scratch, force=True,
                   checkpoint_every_steps=None, checkpoint_every_seconds=None,
                   progress=progress and main, verbose=verbose and main, _worker=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _complete_swap(folder: Path) -> None:
    """Put a finished run's files, written beside the previous ones (``*.new``), in their place.

    Called with the run's lock held. A complete new record (``record.json.new``, whose
    checksum names the new arrays) replaces the old files: the old record first goes (the new
    arrays are then already complete on disk), then the arrays, then the record, each an
    atomic ``os.replace``. A kill at any point leaves either the old result, or the new one,
    or the new one with this swap still to finish; never nothing."""
    new_rec, new_res = folder / (RECORD_FILE + NEW_SUFFIX), folder / (RESULTS_FILE + NEW_SUFFIX)
    if not new_rec.exists():
        with contextlib.suppress(FileNotFoundError):
            os.remove(new_res)  # arrays of a run killed before its record was written
        return
    info = _io.read_json(new_rec)
    sha = info.get("arrays_sha256") if isinstance(info, dict) else None
    if sha is None:
        os.remove(new_rec)
        return
    if new_res.exists():
        if _io.sha256_file(new_res) != sha:
            os.remove(new_rec)
            os.remove(new_res)
            return
        with contextlib.suppress(FileNotFoundError):
            os.remove(folder / RECORD_FILE)
        os.replace(new_res, folder / RESULTS_FILE)
    elif not ((folder / RESULTS_FILE).exists() and _io.sha256_file(folder / RESULTS_FILE) == sha):
        os.remove(new_rec)
        return
    os.replace(new_rec, folder / RECORD_FILE)


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
    status = status or _overall_status(ctx.runs)
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
