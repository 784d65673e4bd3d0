"""The result store of :mod:`itlin.book.runner`: where runs live (paths and their hash), the
:class:`Record` of a finished run, reading one back through its checksums (the arrays' and the
record's own), the lock on a run's folder and the atomic swap that puts a finished run's files in
place. :mod:`itlin.book.runner` re-exports these names."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from .. import _io
from . import registry
from ..core.history import Status

if TYPE_CHECKING:  # the store imports no experiment machinery: a run's plan names its experiment
    from .study import Experiment

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


# ---------------------------------------------------------------------------------- where
def source_checkout() -> Optional[Path]:
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
            root = source_checkout()
            if not path.is_absolute() and root is not None:
                path = root / path
        else:
            root = source_checkout()
            if root is not None:
                path = root / "results"
            else:
                try:
                    import pooch

                    path = Path(pooch.os_cache("itlin")) / "results"
                except Exception:  # pragma: no cover
                    path = Path.home() / ".cache" / "itlin" / "results"
    return Path(path).expanduser().absolute()



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


# ---------------------------------------------------------------------------------- Record
@dataclass
class Record:
    """A finished run: its arrays, its record and where it lives.

    ``arrays`` is the flat dict of arrays (keys ``"a/b"`` for nested results); ``record[key]``
    gives an array by flat key or a nested dict for a top-level key of the experiment's result.
    ``info`` is the content of ``record.json``. ``loaded`` says whether it came from disk.
    ``tallies``: per-example results a record file keeps as counts over seeds (shared by its
    parts), or ``None``.
    """

    experiment: str
    params: dict
    #: a :class:`itlin.Status` (completed, diverged, or running where a run did not finish), mapped
    #: once from the stored sentence or the runs' own statuses; :attr:`status_text` is the sentence
    status: Status
    path: Path
    arrays: dict
    paths: list
    info: dict
    loaded: bool = False
    #: per-example results kept as counts over seeds (:class:`itlin.book.opendata.ExampleTallies`)
    tallies: Optional[object] = field(default=None, compare=False, repr=False)

    @property
    def hash(self) -> str:
        return self.info.get("hash", self.path.name)

    @property
    def runs(self) -> dict:
        """``{tag: summary}`` of the training runs made with ``ctx.run``: status, diverged_at,
        steps, feature_updates, resumed_from and ``final`` (the last evaluation's metrics)."""
        return self.info.get("runs", {})

    @property
    def meta(self) -> dict:
        return self.info.get("meta", {})

    @property
    def settings(self):
        """The settings the run used, typed as its experiment's ``Params`` (``Params.rebuild`` of
        ``meta["resolved"]``, or of its parameters resolved where a record stores none)."""
        exp = registry.declared(self.experiment)
        if exp is None:
            raise ValueError(f"experiment {self.experiment!r} of the record at {self.path} is not registered.")
        stored = self.meta.get("resolved")
        return exp.params.rebuild(exp.params.from_dict(self.params, experiment=exp.name).resolved()
                                  if stored is None else stored)

    def __post_init__(self):
        if not isinstance(self.status, Status):
            self.status = record_status(self.status, self.runs)

    @property
    def status_text(self) -> str:
        """The status in words: ``"completed"``, or which runs diverged or did not complete and
        where (the sentence stored in ``record.json``; :func:`describe_runs` makes it)."""
        return str(self.info.get("status") or describe_runs(self.runs))

    @property
    def completed(self) -> bool:
        return self.status is Status.COMPLETED

    @property
    def diverged(self) -> bool:
        """Whether a training run diverged, read from the runs' data (``diverged_at``, or the
        status ``"diverged"`` of a run that does not name its step; an old record's
        ``"diverged at step N"`` reads as :class:`itlin.History` reads it: see :func:`run_status`)."""
        return any(run_status(r)[0] == "diverged" for r in self.runs.values())

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
        """The :class:`itlin.History` of the training run ``tag`` (as made by ``ctx.run``)."""
        from ..core.loop import History

        if tag not in self.runs:
            raise KeyError(f"no training run {tag!r} in {self.experiment}; runs: {', '.join(self.runs) or '(none)'}.")
        arrays = {"/".join(p[2:]): self.arrays["/".join(p)] for p in self._fit_paths().get(tag, ())}
        r = self.runs[tag]
        status, at = run_status(r)
        return History.from_arrays(arrays, {"status": status, "diverged_at": at, "loss_every": r.get("loss_every", 1)})

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


def run_status(summary: Mapping) -> tuple:
    """``(status, diverged_at)`` of a training run's summary (``Record.runs[tag]``), read the one
    way :class:`itlin.History` reads it (:meth:`itlin.Status.read`): an old record's status
    ``"diverged at step 5"`` (with no ``diverged_at``) is ``(DIVERGED, 5)``, and a ``diverged_at``
    alone makes the run diverged.

    >>> run_status({"status": "diverged at step 5"}), run_status({"status": "completed", "diverged_at": None})
    ((<Status.DIVERGED: 'diverged'>, 5), (<Status.COMPLETED: 'completed'>, None))
    """
    status, at = summary.get("status"), summary.get("diverged_at")
    if at is not None:
        return Status.DIVERGED, int(at)
    return Status.read(status, at)


def record_status(text, runs: Mapping) -> Status:
    """A record's :class:`itlin.Status` from its stored sentence (``"completed"``, ``"diverged at
    step 412"``, ``"3 of 10 runs diverged: ..."``, ``"2 of 4 runs did not complete: ..."``, an
    experiment's own ``"completed (...)"``, or the parts' sentences joined by ``"; "``) and its
    runs: diverged if a run diverged, running if a run or a part did not complete, else completed.

    >>> record_status("completed", {}), record_status("1 of 2 runs did not complete: a: running", {})
    (<Status.COMPLETED: 'completed'>, <Status.RUNNING: 'running'>)
    """
    if any(run_status(r)[0] is Status.DIVERGED for r in runs.values()) or "diverged" in str(text):
        return Status.DIVERGED
    if str(text).startswith("completed") and all(run_status(r)[0] is Status.COMPLETED for r in runs.values()):
        return Status.COMPLETED
    return Status.RUNNING


def describe_runs(runs: Mapping[str, dict]) -> str:
    """A record's status in words from its runs: ``"completed"``, one run's own status, or how many
    of them diverged or did not complete, naming the first five and the step each diverged at.

    >>> describe_runs({"a": {"status": "completed"}, "b": {"status": "diverged", "diverged_at": 7}})
    '1 of 2 runs diverged: b at step 7'
    """
    if not runs:
        return "completed"
    if len(runs) == 1:
        return Status.describe(*run_status(next(iter(runs.values()))))
    read = {t: run_status(r) for t, r in runs.items()}
    bad = {t: (s, at) for t, (s, at) in read.items() if s is not Status.COMPLETED}
    if not bad:
        return "completed"
    parts = [f"{t} at step {at}" if at is not None else f"{t}: {s}" for t, (s, at) in list(bad.items())[:5]]
    more = f", and {len(bad) - 5} more" if len(bad) > 5 else ""
    what = "diverged" if all(s is Status.DIVERGED for s, _ in bad.values()) else "did not complete"
    return f"{len(bad)} of {len(runs)} runs {what}: {', '.join(parts)}{more}"


# ---------------------------------------------------------------------------------- runs that pool
def same_settings(a: Mapping, b: Mapping) -> bool:
    """Resolved parameters equal in everything but the number of seeds (JSON-equal, so ``inf``
    and ``"inf"``, tuples and lists compare as stored). A parameter that is ``None`` on one side
    and absent on the other counts as equal: a parameter added after a record was made takes
    ``None`` for "as before" (e.g. ``feature_updates``' ``data_seed``), so the record still
    repeats the runs that leave it at ``None``."""
    strip = lambda r: json.dumps(_io.jsonable({k: v for k, v in r.items() if k not in ("seeds", "seed")
                                               and v is not None}), sort_keys=True)
    return strip(a) == strip(b)


def major_version(version) -> str:
    """An experiment's major version, without a minor version or the digest of its scale table
    (``"3.b0ee7979"`` and ``"3.1.b0ee7979"`` -> ``"3"``): what changes when ``run`` changes the
    numbers its claims read (see :mod:`itlin.book.study`).

    >>> major_version("3.b0ee7979"), major_version("3.1.b0ee7979"), major_version("12")
    ('3', '3', '12')
    """
    return str(version).split(".")[0]


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


def pool_over(info: Mapping) -> tuple:
    """The parameters a record's parts may differ in besides their seeds, as the record declares
    them (``meta["pool_over"]``, e.g. the ladder's ``("rungs",)``: each part made for its own rungs).

    >>> pool_over({"meta": {"pool_over": ["rungs"]}}), pool_over({"meta": {}})
    (('rungs',), ())
    """
    return tuple((info.get("meta") or {}).get("pool_over") or ())


def pool_problem(runs: Sequence[tuple], what: str = "pool records") -> Optional[str]:
    """Why the runs ``[(name, info), ...]`` (``info``: a ``record.json``'s content) cannot be pooled
    as one record, or ``None`` when they can: one of another experiment or major version than the
    first, one made with other settings (anything but its seeds and the parameters the first
    declares in :func:`pool_over`), or two that share a seed (it would count twice; where the
    record pools over parameters, two with the same values of them). :func:`pooled_record` and the
    joins of :mod:`itlin.book.opendata` (``what``: ``"join parts"``) refuse the same runs, so that
    every record file made in parts pools."""
    if not runs:
        return None
    (name0, first), resolved = runs[0], lambda info: (info.get("meta") or {}).get("resolved") or {}
    over = pool_over(first)
    free = ("seed", "seeds", *over)
    for name, info in runs[1:]:
        if info.get("experiment") != first.get("experiment") or major_version(info.get("version")) != major_version(first.get("version")):
            return (f"{name} is {info.get('experiment')} version {major_version(info.get('version'))}, {name0} is "
                    f"{first.get('experiment')} version {major_version(first.get('version'))}; {what} of one experiment and "
                    "version.")
        if pool_over(info) != over:
            return f"{name} pools over {list(pool_over(info))}, {name0} over {list(over)}; {what} of one kind."
        a, b = ({k: v for k, v in resolved(i).items() if k not in over} for i in (first, info))
        if not same_settings(a, b):
            key = next(k for k in sorted(set(a) | set(b)) if k not in free
                       and not same_settings({k: a.get(k)}, {k: b.get(k)}))
            return (f"{name} was made with {key}={b.get(key)!r}, {name0} with {key}={a.get(key)!r}; {what} that "
                    "differ only in their seeds" + (f" and {', '.join(over)}." if over else "."))
    seen: dict = {}
    for name, info in runs:
        group = json.dumps(_io.jsonable([resolved(info).get(k) for k in over]))
        seeds = [(group, s) for s in (seed_range(resolved(info)) or ())]
        twice = sorted(set(seeds) & set(seen))
        if twice:
            return f"{name} and {seen[twice[0]]} both have seed {twice[0][1]}; {what} of different seeds."
        seen.update(dict.fromkeys(seeds, name))
    return None


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
        # the folder as the other messages name it (no local path: chapters print these lines)
        say(f"waiting for process {holder}, which is running this experiment "
            f"({folder.parent.name}/{folder.name} in the results folder)")
        lock.acquire()
    try:
        pid_file.write_text(str(os.getpid()))
        yield
    finally:
        lock.release()



# ---------------------------------------------------------------------------------- swap
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


__all__ = ["Plan", "Record", "RunLockedError", "describe_runs", "record_digest", "record_status", "results_dir", "run_hash",
           "run_status", "source_checkout", "major_version", "pool_over", "pool_problem", "same_settings", "seed_range"]
