"""Verdicts that can fail: gaps judged over seeds, with intervals and the smallest gap resolvable.

Every claim of the book is judged by one of two rules on a :class:`Gap`, the mean over seeds of a
paired difference ``a - b`` (the same seed gives both runs the same initialisation and batches)
with a two-sided interval:

* :func:`exceeds` (``a`` is larger than ``b`` by more than ``margin``): **holds** when the whole
  interval lies above ``margin``, **does not hold** when it lies below, and **cannot resolve**
  otherwise;
* :func:`not_worse` (``a`` is no worse than ``b`` by more than ``margin``, a non-inferiority
  test: one-sided, what a paper claims when it says a cheaper method performs "on par" or
  "comparably", i.e. that it suffices): **holds** when the whole interval lies above
  ``-margin``, **does not hold** when it lies below, **cannot resolve** otherwise; ``a`` ending
  far *above* ``b`` holds;
* :func:`close` (``a`` and ``b`` agree within ``margin``, an equivalence test): **holds** when
  the whole interval lies inside ``[-margin, margin]``, **does not hold** when it lies outside,
  and **cannot resolve** when it straddles an edge, in particular whenever the interval's
  half-width (the smallest gap the setting resolves) exceeds ``margin``.

A margin is a threshold, and a verdict depends on it: :meth:`Verdict.at_margin` re-judges a
claim at another margin and :func:`margin_sensitivity` shows where the verdict flips.

The half-width combines the spread between seeds (Student's t over ``n`` seeds; one seed gives
an infinite interval: a single run resolves nothing) and, for accuracies, the noise of a finite
test set, ``z sqrt(2 p (1 - p) / n_test)`` for a difference of two accuracies near ``p``. The two
are added in quadrature: a conservative choice, since paired runs on one test set share part of
that noise.

The gaps themselves, their intervals and how they are printed are in
:mod:`itlin.book.intervals` (re-exported here, so ``verdicts.paired_gap`` works); this module
has the rules, the :class:`Verdict` of a claim, Holm's correction over one family of claims and
what a verdict would need (:func:`seeds_needed`, :func:`margin_sensitivity`). Everything here is
a pure function of numbers, tested on synthetic results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from .intervals import (LEVEL, Gap, PairedTally, _z, accuracy_noise, bootstrap_gap, fmt_gap, fmt_mean, largest_rise,
                        log_slope_weights, pack_correct, paired_accuracy_floor_se, paired_accuracy_se, paired_gap,
                        proportion_gap, seed_interval, slope_noise, t_quantile, tally, tally_noise, unpack_correct,
                        wilson_interval)

HOLDS, FAILS, UNRESOLVED = "holds", "does not hold", "cannot resolve"
#: a superiority claim judged against a margin above 0 that does not hold there but holds at margin
#: 0: the direction the paper states is reproduced, not the size read in its words (:func:`word`)
DIRECTION = "direction reproduced"
#: every verdict a claim can read in words, as :func:`word` gives them
WORDS = (HOLDS, DIRECTION, FAILS, UNRESOLVED)


def exceeds(gap: Gap, margin: float = 0.0, level: float = LEVEL) -> str:
    """Verdict on "a exceeds b by more than ``margin``", with the interval at ``level``.

    >>> exceeds(Gap(0.05, 0.01, 5, 0.01, 0.0)), exceeds(Gap(-0.05, 0.01, 5, 0.01, 0.0))
    ('holds', 'does not hold')
    >>> exceeds(Gap(0.05, 0.1, 5, 0.1, 0.0))
    'cannot resolve'
    """
    if not (math.isfinite(gap.mean) and not math.isnan(gap.half)):
        return UNRESOLVED
    half = gap.half_at(level)
    if gap.mean - half > margin:
        return HOLDS
    if gap.mean + half < margin:
        return FAILS
    return UNRESOLVED


def not_worse(gap: Gap, margin: float = 0.0, level: float = LEVEL) -> str:
    """Verdict on "a is no worse than b by more than ``margin``" (non-inferiority, one-sided):
    :func:`exceeds` with the threshold at ``-margin``. A gap far above zero holds, where
    :func:`close` would say it does not.

    >>> not_worse(Gap(0.06, 0.02, 8, 0.02, 0.0), 0.02), close(Gap(0.06, 0.02, 8, 0.02, 0.0), 0.02)
    ('holds', 'does not hold')
    >>> not_worse(Gap(-0.05, 0.01, 8, 0.01, 0.0), 0.02), not_worse(Gap(-0.02, 0.01, 8, 0.01, 0.0), 0.02)
    ('does not hold', 'cannot resolve')
    """
    return exceeds(gap, -float(margin), level)


def close(gap: Gap, margin: float, level: float = LEVEL) -> str:
    """Verdict on "a and b agree within ``margin``" (both signs), with the interval at ``level``:
    an equivalence test (two one-sided tests).

    >>> close(Gap(0.002, 0.004, 5, 0.004, 0.0), 0.01), close(Gap(0.03, 0.004, 5, 0.004, 0.0), 0.01)
    ('holds', 'does not hold')
    >>> close(Gap(0.0, 0.02, 5, 0.02, 0.0), 0.01)         # the setting cannot resolve 1 point
    'cannot resolve'
    """
    if not (math.isfinite(gap.mean) and not math.isnan(gap.half)):
        return UNRESOLVED
    half = gap.half_at(level)
    lo, hi = gap.mean - half, gap.mean + half
    if half <= margin and -margin <= lo and hi <= margin:
        return HOLDS
    if lo > margin or hi < -margin:
        return FAILS
    return UNRESOLVED


RULES = {"exceeds": exceeds, "not_worse": not_worse, "close": close}

#: what each rule tests, in words (for tables and the Findings page)
RULE_WORDS = {"exceeds": "superiority (one-sided)", "not_worse": "non-inferiority (one-sided)",
              "close": "equivalence (two-sided)"}


def threshold(rule: str, margin: float) -> float:
    """The value a one-sided rule's interval must clear: ``margin`` for :func:`exceeds`,
    ``-margin`` for :func:`not_worse` (NaN for :func:`close`, which has two edges).

    >>> threshold("exceeds", 0.02), threshold("not_worse", 0.02)
    (0.02, -0.02)
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}.")
    return {"exceeds": float(margin), "not_worse": -float(margin)}.get(rule, math.nan)


def p_value(gap: Gap, rule: str, margin: float, *, can_hold: bool = True) -> float:
    """The p-value of the decision ``rule`` can reach on ``gap`` (whichever of "holds" or "does
    not hold" the data point to), on the scale of :func:`exceeds` and :func:`close`: the claim
    resolves at level ``L`` exactly when ``p_value < 1 - L``. This is what a multiple-testing
    correction (:func:`holm`) ranks. ``can_hold=False``: an equivalence that cannot hold (seeds
    were dropped), whose only reachable decision is "does not hold".

    >>> g = paired_gap([0.85, 0.86, 0.84], [0.80, 0.80, 0.80])
    >>> p_value(g, "exceeds", 0.0) < 0.05, p_value(g, "close", 0.01) < 0.05
    (True, True)
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}.")
    if not (math.isfinite(gap.mean) and not math.isnan(gap.half)):
        return 1.0
    if rule != "close":
        t = threshold(rule, margin)
        if not can_hold and gap.mean >= t:
            return 1.0  # the data point to "holds", which a claim with dropped seeds cannot reach
        return gap.p_beyond(abs(gap.mean - t))
    inside = gap.p_beyond(margin - abs(gap.mean))  # "holds": the interval within [-margin, margin]
    outside = gap.p_beyond(abs(gap.mean) - margin)  # "does not hold": the interval beyond an edge
    return min(inside, outside) if can_hold else outside


# ------------------------------------------------------------------------------ verdicts
@dataclass(frozen=True)
class Verdict:
    """One claim, judged: what a verdict table shows and what chapters glue into prose.

    ``id`` is stable (chapters pick claims by it); ``claim`` says what is tested, ``paper`` what
    the paper states; ``rule`` and ``margin`` the test (``"exceeds"``: ``a - b > margin``;
    ``"close"``: ``|a - b| <= margin``) on ``gap``; ``measured`` describes the two sides (the
    gap itself is appended when shown, at the level the claim was judged at). A verdict with
    no ``gap`` is not a statistical test (a count, a stated check): its ``verdict`` is given,
    and a multiple-testing correction leaves it alone. ``unit``, ``scale`` and ``digits`` say
    how gaps are printed (``scale * gap`` ``unit``). ``level`` is the confidence level the
    verdict was reached at (:data:`LEVEL`, or the claim's own after :func:`holm`); ``dropped``
    counts the seeds left out because a run diverged; ``confirmatory`` marks the one claim a
    record was planned to test before its runs (:mod:`itlin.book.plans`; every other verdict is
    exploratory).
    """

    id: str
    claim: str
    paper: str
    measured: str
    verdict: str
    gap: Optional[Gap] = None
    rule: Optional[str] = None
    margin: Optional[float] = None
    detail: str = ""
    headline: bool = False
    unit: str = "points"
    scale: float = 100.0
    digits: int = 1
    level: float = LEVEL
    dropped: int = 0
    family: int = 1
    confirmatory: bool = False

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"a verdict needs a non-empty string id, got {self.id!r}.")
        if self.verdict not in (HOLDS, FAILS, UNRESOLVED):
            raise ValueError(f"a verdict is one of {HOLDS!r}, {FAILS!r}, {UNRESOLVED!r}; got {self.verdict!r}.")
        if (self.gap is None) != (self.rule is None):
            raise ValueError(f"verdict {self.id!r}: a gap and its rule go together.")

    @property
    def tested(self) -> bool:
        """Whether the verdict is a statistical test of a gap (and so part of a correction)."""
        return self.gap is not None

    @property
    def resolved(self) -> bool:
        return self.verdict != UNRESOLVED

    @property
    def p(self) -> Optional[float]:
        """:func:`p_value` of the test (``None`` for a verdict that is not a test): of "does not
        hold" alone for a claim with dropped seeds, which cannot hold (so that, ranked by
        :func:`holm`, it does not stand before the claims that can resolve and stop them)."""
        return None if self.gap is None else p_value(self.gap, self.rule, self.margin or 0.0,
                                                     can_hold=not self.dropped)

    @property
    def half(self) -> Optional[float]:
        """The half-width of the gap's interval at this verdict's level: the smallest gap it resolves."""
        return None if self.gap is None else self.gap.half_at(self.level)

    @property
    def mean(self) -> Optional[float]:
        return None if self.gap is None else self.gap.mean

    def gap_text(self) -> str:
        """The gap with its interval at this verdict's level, e.g. ``+2.3 ± 0.8 points (5 seeds)``,
        with digits added (up to 4) where the interval would print as "± 0.0": the same text on
        a chapter's page and on the Findings page.

        >>> judge("c", "", "", Gap(0.0002, 0.00003, 8, 0.00003, 0.0), "exceeds", unit="decades", scale=1.0,
        ...       digits=2).gap_text()
        '+0.00020 ± 0.00003 decades (8 seeds)'
        """
        if self.gap is None:
            return ""
        digits, half = self.digits, self.half
        while math.isfinite(half) and 0 < self.scale * half < 10 ** -digits and digits < 5:
            digits += 1
        return fmt_gap(self.gap, self.scale, f" {self.unit}" if self.unit else "", digits, self.level)

    def judged_at(self, level: float) -> "Verdict":
        """The same claim re-judged at ``level`` (verdicts that are not tests are returned as they are)."""
        if self.gap is None:
            return self
        result = RULES[self.rule](self.gap, self.margin or 0.0, level)
        if self.dropped and result == HOLDS:
            result = UNRESOLVED  # diverged runs count against any claim about the trained models
        return replace(self, verdict=result, level=level)

    def at_margin(self, margin: float) -> "Verdict":
        """The same claim re-judged with another ``margin`` at the same level (what a reader who
        reads the paper's adjective differently would conclude; verdicts that are not tests are
        returned as they are).

        >>> v = judge("c", "", "", Gap(0.03, 0.005, 8, 0.005, 0.0), "exceeds", 0.02)
        >>> v.verdict, v.at_margin(0.04).verdict
        ('holds', 'does not hold')
        """
        if self.gap is None:
            return self
        if not (math.isfinite(float(margin)) and float(margin) >= 0):
            raise ValueError(f"a margin is a finite number >= 0, got {margin!r}.")
        return replace(self, margin=float(margin)).judged_at(self.level)


def judge(id: str, claim: str, paper: str, gap: Gap, rule: str, margin: float = 0.0, *, measured: str = "",
          detail: str = "", headline: bool = False, unit: str = "points", scale: float = 100.0, digits: int = 1,
          dropped: int = 0) -> Verdict:
    """A claim on ``gap`` judged by ``rule`` (``"exceeds"``, ``"not_worse"`` or ``"close"``) with
    ``margin``, at :data:`LEVEL`. ``dropped`` seeds left out because a run diverged make any
    claim at most *cannot resolve*: the runs that would count most against it are missing, and
    a verdict that holds on the survivors alone would select on the outcome.

    >>> v = judge("k1_beats_inf", "K=1 beats K=inf", "K=inf is worse", paired_gap([0.9, 0.91], [0.5, 0.52]),
    ...           "exceeds")
    >>> v.verdict, v.gap_text()
    ('holds', '+39.5 ± 6.4 points (2 seeds)')
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule!r}.")
    v = Verdict(id, claim, paper, measured, UNRESOLVED, gap, rule, float(margin), detail, headline, unit, scale,
                digits, LEVEL, int(dropped))
    return v.judged_at(LEVEL)


def stated(id: str, claim: str, paper: str, measured: str, result: str, *, detail: str = "",
           headline: bool = False) -> Verdict:
    """A verdict that is not a test of a gap (a count against a stated rule, a check): its
    ``result`` is given and no correction changes it.

    >>> stated("phases", "each phase solved", "each reaches 100%", "5 of 5", HOLDS).tested
    False
    """
    return Verdict(id, claim, paper, measured, result, detail=detail, headline=headline)


class Verdicts(tuple):
    """The verdicts of one chapter (or one study), in order, picked by id: ``verdicts["id"]``.

    >>> vs = Verdicts([stated("a", "A", "", "", HOLDS), stated("b", "B", "", "", FAILS)])
    >>> vs["b"].verdict, len(vs), vs.ids
    ('does not hold', 2, ('a', 'b'))
    """

    def __new__(cls, items=()):
        items = tuple(items)
        seen = set()
        for v in items:
            if not isinstance(v, Verdict):
                raise TypeError(f"Verdicts holds Verdict objects, got {type(v).__name__}.")
            if v.id in seen:
                raise ValueError(f"two verdicts share the id {v.id!r}; ids must be unique within a chapter.")
            seen.add(v.id)
        return super().__new__(cls, items)

    @property
    def ids(self) -> tuple:
        return tuple(v.id for v in self)

    def __getitem__(self, key):
        if isinstance(key, str):
            for v in self:
                if v.id == key:
                    return v
            raise KeyError(f"no verdict with id {key!r}; ids: {', '.join(self.ids)}.")
        return super().__getitem__(key)

    def __add__(self, other):
        return Verdicts(tuple(self) + tuple(other))

    def select(self, *ids) -> "Verdicts":
        """The verdicts with these ids, in the order given."""
        return Verdicts(self[i] for i in ids)

    def counts(self) -> dict:
        """``{HOLDS: n, FAILS: n, UNRESOLVED: n}``."""
        return {r: sum(v.verdict == r for v in self) for r in (HOLDS, FAILS, UNRESOLVED)}


# Holm's step-down procedure stays written here: scipy has none, and it must re-judge each claim
# by its own rule at the level the procedure gives it (a claim stops the procedure when it does
# not resolve), which a correction of p-values alone (as statsmodels' multipletests) does not do.
def holm(verdicts: Sequence[Verdict], alpha: float = 1 - LEVEL) -> Verdicts:
    """Holm's step-down correction over the tests among ``verdicts`` (family-wise error
    ``alpha``): sorted by p-value, the ``k``-th of ``m`` is judged at level
    ``1 - alpha / (m - k + 1)``, and once one does not resolve, none after it does. Verdicts
    that are not tests are returned unchanged. Order is kept.

    >>> vs = [judge(f"c{i}", "", "", paired_gap(np.add(0.8, d), [0.8] * 5), "exceeds")
    ...       for i, d in enumerate([[0.03, 0.02, 0.0, 0.03, 0.01], [0.002, 0.02, 0.015, 0.025, 0.003]])]
    >>> [round(v.p, 3) for v in vs], [v.verdict for v in vs]       # each alone resolves at 95%
    ([0.037, 0.047], ['holds', 'holds'])
    >>> [v.verdict for v in holm(vs)]                              # the first needs p < 0.025
    ['cannot resolve', 'cannot resolve']
    """
    verdicts = list(verdicts)
    tests = sorted((i for i, v in enumerate(verdicts) if v.tested), key=lambda i: verdicts[i].p)
    m = len(tests)
    out = list(verdicts)
    stopped = False
    for k, i in enumerate(tests):
        level = 1 - alpha / (m - k)
        v = replace(verdicts[i], family=m).judged_at(level)
        if stopped or not v.resolved:
            stopped = True
            v = replace(v, verdict=UNRESOLVED)
        out[i] = v
    return Verdicts(out)


def seeds_needed(v: Verdict, *, max_seeds: int = 10_000) -> Optional[int]:
    """How many seeds would resolve an unresolved test at its level, if the gap and the spread
    between seeds stayed as measured: the smallest ``n`` whose interval half-width (the seed
    part shrinking as ``t_{n-1} / sqrt(n)``, the test-set part as :meth:`Gap.test_half_with`:
    towards its floor where per-example results measured one, else fixed) is below the
    distance from the mean gap to the threshold the rule needs cleared. ``None`` when no
    number of seeds would (the mean sits on the threshold, or the test set's own noise, what
    seeds do not average out, is too wide: then a larger test set is needed), or for a verdict
    that is not a test; the current ``n`` when it already resolves. :func:`no_seeds_reason`
    says which case a ``None`` is.

    >>> v = judge("c", "", "", paired_gap([0.83, 0.80, 0.84, 0.79, 0.82], [0.80] * 5), "exceeds")
    >>> v.verdict, seeds_needed(v)
    ('cannot resolve', 9)
    """
    return _seeds_needed(v, max_seeds)[0]


def no_seeds_reason(v: Verdict, *, max_seeds: int = 10_000) -> str:
    """Why :func:`seeds_needed` finds no number of seeds for ``v``, in words with the numbers
    that decide it ("" when it finds one): the distance from the mean gap to the threshold the
    rule needs cleared against the test set's own noise (the half-width that seeds do not
    average out), a spread that one seed cannot measure, or more than ``max_seeds``.

    >>> g = Gap(-0.0201, 0.007, 100, 0.004, 0.006, test_floor=0.003)
    >>> print(no_seeds_reason(judge("c", "", "", g, "close", 0.02)))
    the gap lies 0.01 points from its threshold, inside the held-out set's own noise (± 0.30 points), which seeds do not average out
    """
    return _seeds_needed(v, max_seeds)[1]


def _seeds_needed(v: Verdict, max_seeds: int) -> tuple:
    """``(seeds or None, reason)``: :func:`seeds_needed` and, when it is ``None``, why."""
    if v.gap is None:
        return None, "not a test over seeds"
    if not math.isfinite(v.gap.mean):
        return None, "no pair of runs completed"
    g, margin = v.gap, v.margin or 0.0
    if v.rule != "close":
        distance = abs(g.mean - threshold(v.rule, margin))
        towards_holds = g.mean > threshold(v.rule, margin)
    elif abs(g.mean) < margin:
        distance, towards_holds = margin - abs(g.mean), True
    else:
        distance, towards_holds = abs(g.mean) - margin, False
    if v.dropped and towards_holds:
        return None, (f"{v.dropped} seed{'s' if v.dropped != 1 else ''} left out: a claim with seeds left out "
                      "cannot hold, and its gap points to holding")
    q = 0.5 + v.level / 2
    scale = _z(q) / _z(0.5 + LEVEL / 2)
    floor = g.test_half_with(max_seeds) * scale
    if not distance > floor:
        unit = f" {v.unit}" if v.unit else ""
        amount = lambda x: f"{v.scale * x:.{v.digits + 1}f}{unit}"
        where = (f"sits on its threshold (less than {0.5 * 10 ** -(v.digits + 1):g}{unit} from it)"
                 if round(v.scale * distance, v.digits + 1) == 0 else f"lies {amount(distance)} from its threshold")
        return None, (f"the gap {where}, inside the held-out set's own noise (± {amount(floor)}), which seeds do "
                      "not average out")
    if g.n < 2 or not math.isfinite(g.seed_half):
        return None, "one seed measures no spread between seeds"  # nothing says how many would do
    quantile = t_quantile if g.dist == "t" else (lambda qq, dof: _z(qq))
    sd = g.seed_half / quantile(0.5 + LEVEL / 2, g.n - 1) * math.sqrt(g.n)
    for n in range(max(2, g.n), max_seeds + 1):
        if math.hypot(quantile(q, n - 1) * sd / math.sqrt(n), g.test_half_with(n) * scale) < distance:
            return n, ""
    return None, f"more than {max_seeds:,}"


def margin_sensitivity(v: Verdict, margins: Sequence[float]) -> list:
    """``[(margin, verdict), ...]``: ``v`` re-judged at each margin (:meth:`Verdict.at_margin`),
    so a reader sees where the verdict flips; ``[]`` for a verdict that is not a test.

    >>> v = judge("c", "", "", Gap(0.03, 0.005, 8, 0.005, 0.0), "exceeds", 0.02)
    >>> margin_sensitivity(v, [0.01, 0.02, 0.03, 0.04])
    [(0.01, 'holds'), (0.02, 'holds'), (0.03, 'cannot resolve'), (0.04, 'does not hold')]
    """
    if v.gap is None:
        return []
    return [(float(m), v.at_margin(m).verdict) for m in margins]


def flip_margin(v: Verdict) -> tuple:
    """``(low, high)``: the margins between which ``v`` (a one-sided test, at its level) cannot
    resolve. Below ``low`` it holds for :func:`exceeds` (does not hold for :func:`not_worse`)
    and above ``high`` the opposite; either end is NaN where no margin >= 0 reaches it. ``(nan,
    nan)`` for :func:`close` or a verdict that is not a test.

    >>> lo, hi = flip_margin(judge("c", "", "", Gap(0.03, 0.005, 8, 0.005, 0.0), "exceeds", 0.02))
    >>> round(lo, 4), round(hi, 4)
    (0.025, 0.035)
    """
    if v.gap is None or v.rule == "close" or not math.isfinite(v.gap.mean):
        return math.nan, math.nan
    half = v.half
    a, b = v.gap.mean - half, v.gap.mean + half  # exceeds: holds below a, fails above b
    if v.rule == "not_worse":
        a, b = -b, -a  # threshold -m: fails for m < -(mean + half), holds for m > -(mean - half)
    nonneg = lambda x: x if math.isfinite(x) and x >= 0 else math.nan
    return nonneg(a), nonneg(b)


def word(v: Verdict, *, paper_margin: bool = False) -> str:
    """A claim's verdict in words, one of :data:`WORDS`: :data:`DIRECTION` for a superiority claim
    (``exceeds``) judged against a margin above 0 (not one the paper states: ``paper_margin``)
    that does not hold at it but holds at margin 0; else its verdict.

    >>> v = judge("c", "", "", Gap(0.012, 0.004, 8, 0.004, 0.0), "exceeds", 0.02)
    >>> v.verdict, word(v), word(v, paper_margin=True)
    ('does not hold', 'direction reproduced', 'does not hold')
    """
    if (v.verdict == FAILS and v.tested and v.rule == "exceeds" and (v.margin or 0.0) > 0 and not paper_margin
            and v.at_margin(0.0).verdict == HOLDS):
        return DIRECTION
    return v.verdict


def _amount(v: Verdict, x: float) -> str:
    return f"{v.scale * x:.{v.digits}f}" + (f" {v.unit}" if v.unit else "")


def why_unresolved(v: Verdict) -> str:
    """Why a claim that cannot resolve does not, in a few words ("" when it resolves, or when it
    is not a test: a stated verdict says why in its ``measured``): seeds left out because a run
    diverged (or, for a claim on how fast runs finish, did not finish), Holm's correction stopping before it (its own interval clears the threshold at its
    level), or an interval too wide.

    >>> why_unresolved(judge("c", "", "", Gap(0.01, 0.05, 8, 0.05, 0.0), "exceeds"))
    'interval too wide'
    >>> why_unresolved(judge("c", "", "", Gap(0.05, 0.01, 8, 0.01, 0.0), "exceeds", dropped=3))
    '3 seeds left out'
    """
    if v.verdict != UNRESOLVED or not v.tested:
        return ""
    if v.dropped:
        return f"{v.dropped} seed{'s' if v.dropped != 1 else ''} left out"  # the claim's detail says why
    if math.isfinite(v.gap.mean) and RULES[v.rule](v.gap, v.margin or 0.0, v.level) != UNRESOLVED:
        return "Holm's correction stopped before it"
    return "interval too wide"


def says(verdict, *, why: Optional[str] = None, smaller_than: Optional[str] = None, paper_margin: bool = False) -> str:
    """A verdict as the predicate of a sentence whose subject is the claim ("the claim that ...
    *holds*"): ``"holds"``, ``"does not hold"``, ``"cannot be resolved (interval too wide)"``,
    ``"reproduces the direction, smaller than 2.0 points"``. Every sentence of the book that reads
    a verdict puts it through here, so that it reads for every value (never "is does not hold").

    ``verdict``: a :class:`Verdict` (its word, :func:`word`, with its reason and threshold), or a
    word of :data:`WORDS`; ``why``: the reason a claim cannot resolve (default: the verdict's own,
    :func:`why_unresolved`); ``smaller_than``: the threshold a direction falls short of (default:
    the verdict's margin).

    >>> [says(w) for w in WORDS]
    ['holds', 'reproduces the direction', 'does not hold', 'cannot be resolved']
    >>> says(judge("c", "", "", Gap(0.012, 0.004, 8, 0.004, 0.0), "exceeds", 0.02))
    'reproduces the direction, smaller than 2.0 points'
    >>> says(UNRESOLVED, why="premise unmet")
    'cannot be resolved (premise unmet)'
    """
    if isinstance(verdict, Verdict):
        w = word(verdict, paper_margin=paper_margin)
        if why is None:
            why = why_unresolved(verdict)
        if smaller_than is None and w == DIRECTION:
            smaller_than = _amount(verdict, verdict.margin)
    elif verdict in WORDS:
        w = verdict
    else:
        raise ValueError(f"a verdict is a Verdict or one of {', '.join(map(repr, WORDS))}; got {verdict!r}.")
    if w == UNRESOLVED:
        return "cannot be resolved" + (f" ({why})" if why else "")
    if w == DIRECTION:
        return "reproduces the direction" + (f", smaller than {smaller_than}" if smaller_than else "")
    return w


def bottom_line(rows: Sequence[Verdict]) -> str:
    """One sentence: how many claims hold, reproduce only the direction (:func:`word`), do not hold,
    or cannot be resolved, naming all but the first.

    >>> g = Gap(0.012, 0.004, 8, 0.004, 0.0)
    >>> bottom_line([judge("a", "A", "", g, "exceeds"), judge("b", "B", "", g, "exceeds", 0.02)])
    'At these settings 1 of 2 claims hold; the direction only: *B*.'
    """
    words = [word(r) for r in rows]
    named = lambda w: [r.claim for r, x in zip(rows, words) if x == w]
    text = f"At these settings {words.count(HOLDS)} of {len(rows)} claims hold"
    for w, label in ((DIRECTION, "the direction only"), (FAILS, "not holding"), (UNRESOLVED, "too close to call here")):
        if named(w):
            text += f"; {label}: " + "; ".join(f"*{c}*" for c in named(w))
    return text + "."


__all__ = ["DIRECTION", "FAILS", "Gap", "HOLDS", "WORDS", "says", "why_unresolved", "word", "LEVEL", "PairedTally", "RULES", "UNRESOLVED", "Verdict", "Verdicts", "accuracy_noise",
           "RULE_WORDS", "bootstrap_gap", "bottom_line", "close", "exceeds", "flip_margin", "fmt_gap", "fmt_mean", "holm", "judge", "largest_rise",
           "log_slope_weights", "margin_sensitivity", "not_worse", "pack_correct", "p_value", "paired_accuracy_floor_se", "paired_accuracy_se",
           "paired_gap", "proportion_gap",
           "no_seeds_reason", "seed_interval", "seeds_needed", "slope_noise", "stated", "t_quantile", "tally", "tally_noise", "threshold",
           "unpack_correct", "wilson_interval"]
