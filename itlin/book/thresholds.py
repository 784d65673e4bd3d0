"""A paper's adjective read as a threshold, and where the verdict flips with it.

Where a paper says "much faster" or "clearly ahead" without a number, the book reads the
adjective as a margin and names the margin's source. A reader who would read it otherwise needs
to see the verdict at other margins: :func:`itlin.book.render.sensitivity` tables it, and
:func:`across` says it in one sentence a chapter can glue. Pure functions of a
:class:`~itlin.book.verdicts.Verdict`, tested on constructed gaps.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from . import verdicts as V


def _join(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def across(v: V.Verdict, margins: Sequence[float], fmt: Callable[[float], str]) -> str:
    """One sentence: the verdict of ``v`` re-judged at each of ``margins`` (at its own level,
    :meth:`~itlin.book.verdicts.Verdict.at_margin`), grouped by verdict, and, for a one-sided
    rule, the thresholds between which it cannot resolve
    (:func:`~itlin.book.verdicts.flip_margin`). ``fmt`` writes a margin as the chapter says it
    (e.g. ``lambda m: f"{math.exp(m):.2g}x"`` for a log ratio).

    >>> fmt = lambda m: f"{100 * m:g} points"
    >>> v = V.judge("c", "", "", V.Gap(0.03, 0.005, 8, 0.005, 0.0), "exceeds", 0.02)
    >>> across(v, [0.0, 0.02, 0.03, 0.04], fmt)
    'holds at 0 points and 2 points, cannot resolve at 3 points, does not hold at 4 points; it holds for any threshold below 2.5 points and does not hold for any above 3.5 points'
    >>> across(V.judge("c", "", "", V.Gap(-0.01, 0.005, 8, 0.005, 0.0), "exceeds"), [0.0, 0.01], fmt)
    'does not hold at 0 points and 1 points; it does not hold at any threshold of 0 or more'
    """
    if v.gap is None:
        raise ValueError(f"verdict {v.id!r} is not a test of a gap: it has no margin to vary.")
    groups = {V.HOLDS: [], V.UNRESOLVED: [], V.FAILS: []}
    for m, verdict in V.margin_sensitivity(v, margins):
        groups[verdict].append(fmt(m))
    text = ", ".join(f"{verdict} at {_join(ms)}" for verdict, ms in groups.items() if ms)
    if v.rule == "close":
        return text
    lo, hi = V.flip_margin(v)
    # exceeds: holds below lo, fails above hi; not_worse: fails below lo, holds above hi
    below, above = (V.HOLDS, V.FAILS) if v.rule == "exceeds" else (V.FAILS, V.HOLDS)
    if not math.isfinite(v.half):
        return text + "; it resolves no threshold"
    if math.isnan(lo) and math.isnan(hi):  # the whole interval on one side of every threshold >= 0
        return text + f"; it {above} at any threshold of 0 or more"
    parts = ([f"{below} for any threshold below {fmt(lo)}"] if math.isfinite(lo) else []) + \
        ([f"{above} for any {'threshold ' if math.isnan(lo) else ''}above {fmt(hi)}"] if math.isfinite(hi) else [])
    return text + "; it " + " and ".join(parts)

__all__ = ["across"]
