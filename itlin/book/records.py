"""Recorded runs of :mod:`itlin.book.runner`: the runs kept with the book (:func:`recorded_dir`,
:func:`open_record`), the one that repeats a live run with more seeds (:func:`matching_record`),
pooling parts made for their own seeds (:func:`pooled_record`), seed ranges and progress, and the
seed-for-seed comparison of a run with such a record (:func:`compare_seeds`).
:mod:`itlin.book.runner` re-exports these names."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from .. import _io
from .store import (FITS_KEY, RECORD_FILE, RESULTS_FILE, Record, _record_problem, major_version,  # noqa: F401
                    pool_over, pool_problem, same_settings, seed_range, source_checkout)

def recorded_dir() -> Path:
    """Where the recorded runs kept with the book live: ``<repository>/book/recorded`` (found
    from the package's own location, so it does not depend on the working directory)."""
    root = source_checkout()
    if root is None:
        raise FileNotFoundError("the recorded runs live in book/recorded of a source checkout of itlin; this itlin "
                                "is not imported from one (clone the repository and pip install -e it).")
    return root / "book" / "recorded"


def _resolve(folder) -> Path:
    """A folder given by path, or by the name of a recorded run in :func:`recorded_dir`."""
    folder = Path(folder)
    if not folder.is_absolute() and not folder.exists() and source_checkout() is not None \
            and (recorded_dir() / folder).exists():
        folder = recorded_dir() / folder
    return folder


def _no_run(folder: Path, sub_folders: bool = False) -> FileNotFoundError:
    """The one-line error of a folder that holds no finished run; for a recorded run kept with the
    book (its ``record.nc`` deleted), how to restore it."""
    from . import opendata

    where = ", in it or in its sub-folders" if sub_folders else ""
    text = f"{folder} holds no finished run (need {opendata.FILE}, or {RECORD_FILE} and {RESULTS_FILE}{where})"
    root = source_checkout()
    if root is not None and (root / "book" / "recorded") in Path(folder).absolute().parents:
        text += f"; {opendata.restore_hint(Path(folder) / opendata.FILE)}"
    return FileNotFoundError(text + ".")


def _from_file(folder: Path) -> list:
    """The runs of a record file (:mod:`itlin.book.opendata`) in ``folder``, one per part."""
    from . import opendata

    tallies = opendata.tallies_in(folder / opendata.FILE)
    return [Record(part.info.get("experiment", "?"), dict(part.info.get("params", {})),
                   part.info.get("status", "unknown"), folder / part.name if part.name else folder,
                   part.arrays, part.paths, part.info, loaded=True, tallies=tallies)
            for part in opendata.read(folder / opendata.FILE)]


def open_record(folder) -> Record:
    """The finished run stored in ``folder`` (a ``<results>/<experiment>/<hash>`` folder, or the
    name of a recorded run in :func:`recorded_dir`), whatever parameters or experiment version
    it was made with.

    For recorded runs kept with the book (e.g. a paper-scale run on a GPU): the record tells
    its parameters, version, git commit and device. Those are ``record.nc`` files
    (:mod:`itlin.book.opendata`); the runner's own results are ``record.json`` and
    ``results.npz``. Raises ``FileNotFoundError`` if the folder holds no finished run and
    ``ValueError`` if its file is damaged (unreadable, truncated, or its arrays do not match their
    checksum), or it holds a record made in parts (:func:`open_records` reads those): one line
    each, which for a recorded run says how to restore its file (``git checkout -- <path>``).
    """
    from . import opendata

    folder = _resolve(folder)
    if (folder / opendata.FILE).is_file():
        runs = _from_file(folder)
        if len(runs) != 1:
            raise ValueError(f"{folder} holds a record made in {len(runs)} parts; open it with open_records.")
        return runs[0]
    rec_path, res_path = folder / RECORD_FILE, folder / RESULTS_FILE
    info = _io.read_json(rec_path)
    if info is None or not res_path.is_file():
        raise _no_run(folder)
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
    folders, e.g. one per seed), each through :func:`open_record`, in folder order; for a
    ``record.nc`` made in parts, one per part (its ``path`` is the part's folder as it was made),
    then any parts in sub-folders not yet joined to it (a sub-folder's ``record.nc`` may hold
    several parts too)."""
    from . import opendata

    folder = _resolve(name)
    subs = sorted(p for p in folder.iterdir() if (p / RECORD_FILE).is_file() or (p / opendata.FILE).is_file()) \
        if folder.is_dir() else []
    # a sub-folder's record file may itself hold several parts (e.g. one file per rung of a ladder)
    each = lambda p: _from_file(p) if (p / opendata.FILE).is_file() else [open_record(p)]
    if (folder / opendata.FILE).is_file():  # then the parts not yet joined to it
        return _from_file(folder) + [r for p in subs for r in each(p)]
    if (folder / RECORD_FILE).is_file():
        return [open_record(folder)]
    if not subs:
        raise _no_run(folder, sub_folders=True)
    return [r for p in subs for r in each(p)]


def made_parts(name) -> list:
    """The parts made so far of a record made in parts (:func:`open_records`): ``[]`` while its
    folder holds none yet (a planned record's folder holds its plan, ``NOTES.md``, before any run);
    a folder that does not exist is an error, as for :func:`open_records`."""
    try:
        return open_records(name)
    except FileNotFoundError:
        if _resolve(name).is_dir():
            return []
        raise


def recorded_runs(folder=None) -> list:
    """Every finished run kept with the book (``folder``, default :func:`recorded_dir`): each
    part of each record, in folder order."""
    from . import opendata

    folder = recorded_dir() if folder is None else Path(folder)
    tops = sorted({p.parent for name in (opendata.FILE, RECORD_FILE) for p in folder.glob(f"*/{name}")}
                  | {p.parent.parent for name in (opendata.FILE, RECORD_FILE) for p in folder.glob(f"*/*/{name}")})
    return [rec for top in tops for rec in open_records(top)]


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
    other settings than the first (anything but its seeds, and the list-valued parameters the
    record pools over, :func:`~itlin.book.store.pool_over`, which the pool holds every part's
    values of): pooled, it would be judged as if it were the same runs; and when two parts share
    a seed (it would count twice)."""
    if not records:
        raise ValueError("pooled_record: no records to pool.")
    problem = pool_problem([(str(rec.path), rec.info) for rec in records])
    if problem is not None:
        raise ValueError(f"pooled_record: {problem}")
    first = records[0]
    seeds = sum(int(rec.meta["resolved"]["seeds"]) for rec in records)
    machines: dict = {}
    for rec in records:
        where = (rec.info.get("device", "?"), rec.info.get("processor"))
        machines[where] = machines.get(where, 0) + int(rec.meta["resolved"]["seeds"])
    resolved = {**first.meta["resolved"], "seeds": seeds}
    for key in pool_over(first.info):  # the values of every part, in order, each once
        resolved[key] = list(dict.fromkeys(v for rec in records for v in rec.meta["resolved"][key]))
    meta = {**first.meta, **(meta or {}), "resolved": resolved}
    info = {**first.info, **(info or {}), "meta": meta, "wall_seconds": sum(rec.info["wall_seconds"] for rec in records)}
    if len(machines) > 1:  # the first part's machine is not where the pool was made
        info.update(device="several machines (" + "; ".join(
            f"{n} seeds on {device}" + (f", processor {proc}" if proc else "") for (device, proc), n in machines.items())
            + ")", processor=None, machines=len(machines))
    status = "completed" if all(rec.completed for rec in records) else "; ".join(rec.status_text for rec in records)
    tallies = first.tallies if all(rec.tallies is first.tallies for rec in records) else None  # parts of one file
    return Record(first.experiment, dict(first.params if params is None else params), status, first.path.parent,
                  arrays, paths, info, loaded=True, tallies=tallies)



# ---------------------------------------------------------------------------------- a record with more seeds

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


def plan_progress(resolved: Sequence[Mapping], planned, over: str = "") -> dict:
    """:func:`seed_progress` of a plan: ``{None: progress}`` for ``planned`` a range; for a record
    pooled over ``over`` (a list-valued parameter, e.g. the ladder's ``rungs``) whose plan gives
    each value its seeds (``planned`` a mapping value -> range), the progress of each value, every
    part made for exactly one of them.

    >>> p = plan_progress([{"rungs": ["a"], "seed": 0, "seeds": 2}], {"a": range(0, 2), "b": range(0, 4)}, "rungs")
    >>> [(k, v.made, v.complete) for k, v in p.items()]
    [('a', 2, True), ('b', 0, False)]
    """
    if not isinstance(planned, Mapping):
        return {None: seed_progress(resolved, planned)}
    groups: dict = {k: [] for k in planned}
    for i, r in enumerate(resolved):
        values = list(r.get(over) or ())
        if len(values) != 1 or values[0] not in groups:
            raise ValueError(f"plan_progress: part {i} is made for {over}={values!r}; the plan makes each part for one "
                             f"of {list(groups)}.")
        groups[values[0]].append(r)
    out = {}
    for k, rs in groups.items():
        out[k] = seed_progress(rs, planned[k]) if rs else SeedProgress(planned[k], 0, 0, (planned[k],))
    return out


def _runs(seeds: Sequence[int]) -> list:
    """Sorted integers as runs of consecutive ones: ``[1, 2, 3, 7]`` -> ``[range(1, 4), range(7, 8)]``."""
    out: list = []
    for s in sorted(seeds):
        if out and out[-1].stop == s:
            out[-1] = range(out[-1].start, s + 1)
        else:
            out.append(range(s, s + 1))
    return out


def matching_record(rec: Record, folder=None) -> Optional[Record]:
    """The recorded run kept with the book (``folder``, default :func:`recorded_dir`) that repeats
    ``rec`` with more seeds: the same experiment and version (bumped whenever ``run`` changes its
    numbers), the same resolved parameters but ``seeds`` (so every value a scale table supplies
    too), and a list of seeds that contains ``rec``'s; finished, whatever its status (runs that
    diverge are measurements too, e.g. Fig. 4's). The
    one with the most seeds when several match; ``None`` when none does (or there is no source
    checkout). Chosen on parameters alone, never on results. A record file too damaged to say
    its parameters is left out with a ``RuntimeWarning`` naming it and how to restore it; a
    damaged record that matches raises a one-line ``ValueError`` (:func:`open_record`).

    A chapter judges its claims on this record when there is one: the live run repeats some of
    its seeds, and :func:`compare_seeds` says whether the two agree.
    """
    if folder is None:
        root = source_checkout()
        if root is None:
            return None
        folder = root / "book" / "recorded"
    folder = Path(folder)
    mine = rec.meta.get("resolved")
    seeds = seed_range(mine or {})
    if not folder.is_dir() or mine is None or seeds is None:
        return None
    from . import opendata

    best = None
    for path in sorted({p.parent for name in (RECORD_FILE, opendata.FILE) for p in folder.glob(f"*/{name}")}):
        if (path / opendata.FILE).is_file():
            try:
                attrs = opendata.attributes(path / opendata.FILE)
            except ValueError as err:  # damaged: said, and left out (it repeats a run or it does not)
                warnings.warn(f"{err} (left out of the records matched)", RuntimeWarning, stacklevel=2)
                continue
            if attrs.get("parts") != 1:
                continue
            info = {"experiment": attrs.get("experiment"), "version": attrs.get("version"),
                    "meta": {"resolved": json.loads(attrs.get("resolved_params", "{}"))}}
        else:
            info = _io.read_json(path / RECORD_FILE) or {}
        theirs = (info.get("meta") or {}).get("resolved")
        if info.get("experiment") != rec.experiment or major_version(info.get("version")) != major_version(rec.info.get("version")) \
                or not theirs:
            continue
        others = seed_range(theirs)
        if others is None or len(others) <= len(seeds) or not set(seeds) <= set(others) \
                or not same_settings(mine, theirs):
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

    A training run's per-step loss that ``other`` keeps as block means (a record file's
    ``thinned_loss``, see :func:`itlin.book.opendata.thin_curves`) is compared as the same block
    means of ``rec``'s. Packed per-example results (``uint8`` arrays of ``np.packbits``, and the
    ``*correct`` texts in the runs' meta) are compared as the fraction of examples that flip; a run that diverges on one
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

    thinned = other.info.get("thinned_loss") or {}
    for key, a in rec.arrays.items():
        b = other.arrays.get(key)
        if b is None or _is_timing(key) or _run_tag(key) in skip:
            continue
        a, b = np.asarray(a), np.asarray(b)
        if _run_tag(key) in thinned and key == f"{FITS_KEY}/{_run_tag(key)}/loss" and a.ndim == 1:
            m = int(thinned[_run_tag(key)][0])  # the record keeps this curve as means of blocks of m
            a = a[:a.size // m * m].reshape(-1, m).mean(axis=1)
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
        with np.errstate(invalid="ignore", over="ignore"):  # entries not finite on both sides are left out below
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



__all__ = ["SeedComparison", "SeedProgress", "compare_seeds", "matching_record", "open_record", "open_records",
           "pool_problem", "pooled_record", "recorded_dir", "made_parts", "recorded_runs", "plan_progress", "seed_progress", "seed_range"]
