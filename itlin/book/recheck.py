"""Whether a page's re-run seeds reproduce a record's findings, not only its last bits.

A chapter judged on a recorded run (:func:`itlin.book.runner.matching_record`) re-runs the
record's first seeds. On another processor, thread count or jaxlib, the arrays differ in their
last bits (XLA's CPU kernels are chosen at run time; training makes the differences grow), so
array equality says little. What a reader needs is whether the *verdicts* stand:
:func:`recheck` puts the page's seeds in place of the record's same seeds (:func:`hybrid`),
re-judges the record's claims (:func:`itlin.book.render.judge`) and compares them verdict by
verdict, and measures how far each claim's gap moved per seed in units of the spread between
seeds. ``python -m itlin.book.verify`` (:mod:`itlin.book.verify`) does it for every chapter;
:func:`itlin.book.render.evidence` says it in each chapter's note::

    r = recheck.recheck(live)            # live: a chapter's run; None when no record matches
    r.agreement(), r.per_seed_text()     # '9 of 9 verdicts unchanged', '0.17 seed-spreads (full.u30)'
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import NamedTuple, Optional

import numpy as np

from . import intervals, judging, records, runner
from . import verdicts as V

#: the fields of a record's provenance whose difference can change a CPU run's last bits, in
#: the words a note uses
MACHINE_FIELDS = (("device", "device"), ("processor", "processor"), ("cores", "cores"),
                  ("xla_flags", "XLA flags"), ("jaxlib", "jaxlib"), ("jax_version", "JAX"))


def hybrid(rec: runner.Record, other: runner.Record) -> runner.Record:
    """A copy of ``other`` (a record with more seeds of ``rec``'s settings) in which ``rec``'s
    seeds replace ``other``'s same seeds: every array of ``rec`` that ``other`` also has, with the
    same key and shape for one seed's run (a key with a part ending in ``seed=N``, e.g.
    ``_fits/<tag>/...``), or stacked over seeds (one axis of ``rec``'s seeds against
    ``other``'s, replaced in the slice of those seeds); and ``rec``'s runs' summaries and meta
    (``info["runs"][tag]``, ``meta["runs"][tag]``). Everything else, its path included (so that
    :func:`itlin.book.plans.mark` still knows it), is ``other``'s."""
    n = int(rec.meta["resolved"]["seeds"])
    offset = int(rec.meta["resolved"]["seed"]) - int(other.meta["resolved"]["seed"])
    arrays = dict(other.arrays)
    for key, a in rec.arrays.items():
        b = other.arrays.get(key)
        if b is None or records._is_timing(key):
            continue
        a, b = np.asarray(a), np.asarray(b)
        axis = records._seed_axis(a.shape, b.shape, n, offset)
        if axis is None and records._per_run_group(key) is not None:
            arrays[key] = a.astype(b.dtype, copy=False)
        elif axis is not None and axis is not False:
            new = b.copy()
            index = [slice(None)] * b.ndim
            index[axis] = slice(offset, offset + n)
            new[tuple(index)] = a.astype(b.dtype, copy=False)
            arrays[key] = new
    info = copy.deepcopy(other.info)
    runs = info.setdefault("runs", {})
    for tag, summary in rec.runs.items():
        if tag in runs:
            runs[tag] = copy.deepcopy(summary)
    mine, theirs = rec.meta.get("runs"), info.get("meta", {}).get("runs")
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for tag, value in mine.items():
            if tag in theirs:
                theirs[tag] = copy.deepcopy(value)
    out = dataclasses.replace(other, arrays=arrays, info=info)
    out.__dict__.pop("_fit_index", None)
    return out


class Change(NamedTuple):
    """One claim's verdict on the record and with the page's seeds in place of its own."""
    id: str
    claim: str
    before: str
    after: str


class Recheck(NamedTuple):
    """What :func:`recheck` found. ``record``: the record; ``comparison``: the arrays seed for
    seed (:func:`itlin.book.runner.compare_seeds`); ``verdicts``: how many of the record's
    verdicts were compared (by id); ``changed``: those whose verdict differs with the page's
    seeds; ``per_seed``: the largest change of a tested claim's gap per re-run seed, in units of
    the standard deviation of that gap between seeds (NaN when no claim has such a spread), in
    ``per_seed_claim``; ``machines``: ``(field, the record's, this run's)`` for each field of
    :data:`MACHINE_FIELDS` both name and that differs; ``seeds``: the re-run seeds; ``named``:
    the fields besides device and JAX version that both runs name (in words)."""
    record: runner.Record
    comparison: runner.SeedComparison
    verdicts: int
    changed: tuple
    per_seed: float
    per_seed_claim: str
    machines: tuple
    seeds: int
    named: tuple = ()

    @property
    def unchanged(self) -> int:
        return self.verdicts - len(self.changed)

    def agreement(self) -> str:
        """``"7 of 7 verdicts unchanged"``."""
        return f"{self.unchanged} of {self.verdicts} verdict{'s' if self.verdicts != 1 else ''} unchanged"

    def per_seed_text(self) -> str:
        """The largest per-seed change, e.g. ``"0.031 seed-spreads (full.u2)"``."""
        if not math.isfinite(self.per_seed):
            return "no claim with a spread between seeds"
        return f"{self.per_seed:.2g} seed-spreads ({self.per_seed_claim})"

    def machines_text(self) -> str:
        """What differs between the record's machine and this one, e.g. ``"processor AMD ... here
        Intel ...; cores 16, here 2"``; ``""`` when nothing both name differs."""
        return "; ".join(f"{words} {_shown(theirs)}, here {_shown(mine)}" for words, theirs, mine in self.machines)


def _shown(value) -> str:
    return "none" if value in ("", None) else str(value)


def machines(rec_info, other_info) -> tuple:
    """``(words, the record's, this run's)`` for each field of :data:`MACHINE_FIELDS` that both
    ``other_info`` (the record's) and ``rec_info`` (this run's) name, where they differ.

    >>> machines({"cores": 2, "processor": "B"}, {"cores": 16, "xla_flags": ""})
    (('cores', 16, 2),)
    """
    return tuple((words, other_info[f], rec_info[f]) for f, words in MACHINE_FIELDS
                 if f in rec_info and f in other_info and rec_info[f] != other_info[f])


def _sd(gap: V.Gap) -> float:
    """The standard deviation between seeds of a gap's per-seed values, from its seed part
    (the inverse of the interval's ``seed_half = q sd / sqrt(n)``)."""
    if gap.n < 2 or not math.isfinite(gap.seed_half):
        return math.nan
    q = V.t_quantile(0.5 + V.LEVEL / 2, gap.n - 1) if gap.dist == "t" else intervals._z(0.5 + V.LEVEL / 2)
    return gap.seed_half / q * math.sqrt(gap.n)


def per_seed_change(before: V.Verdict, after: V.Verdict, seeds: int) -> float:
    """How far one re-run seed moved a claim's measured gap, in seed-spreads: the change of the
    gap's mean times ``n / seeds`` (``n`` the record's seeds in the gap, ``seeds`` those
    replaced), over the standard deviation between seeds (:func:`_sd`); NaN where there is no
    gap or no spread.

    >>> g = V.Gap(0.10, 0.02, 16, 0.02, 0.0)
    >>> v = V.judge("c", "", "", g, "exceeds")
    >>> round(per_seed_change(v, V.judge("c", "", "", g._replace(mean=0.101), "exceeds"), 2), 3)
    0.213
    """
    if before.gap is None or after.gap is None or seeds < 1:
        return math.nan
    delta = after.gap.mean - before.gap.mean
    sd = _sd(before.gap)
    if not (math.isfinite(delta) and math.isfinite(sd)):
        return math.nan
    if delta == 0:
        return 0.0
    return abs(delta) * before.gap.n / seeds / sd if sd > 0 else math.nan


def recheck(rec: runner.Record, other: Optional[runner.Record] = None) -> Optional[Recheck]:
    """Re-judge ``other`` (default: :func:`itlin.book.runner.matching_record` of ``rec``) with
    ``rec``'s seeds in place of its own (:func:`hybrid`); ``None`` when no record matches."""
    if other is None:
        other = runner.matching_record(rec)
        if other is None:
            return None
    seeds = int(rec.meta["resolved"]["seeds"])
    before = judging.judge(other)
    after = judging.judge(hybrid(rec, other))
    after_by_id = {v.id: v for v in after}
    changed, worst, worst_id, compared = [], math.nan, "", 0
    for v in before:
        w = after_by_id.get(v.id)
        if w is None:
            continue
        compared += 1
        if w.verdict != v.verdict:
            changed.append(Change(v.id, v.claim, v.verdict, w.verdict))
        units = per_seed_change(v, w, seeds)
        if math.isfinite(units) and not units <= worst:
            worst, worst_id = units, v.id
    named = tuple(words for f, words in MACHINE_FIELDS
                  if f not in ("device", "jax_version") and f in rec.info and f in other.info)
    return Recheck(other, runner.compare_seeds(rec, other), compared, tuple(changed), worst, worst_id,
                   machines(rec.info, other.info), seeds, named)


__all__ = ["Change", "MACHINE_FIELDS", "Recheck", "hybrid", "machines", "per_seed_change", "recheck"]
