"""Verdicts that can fail: gaps judged over seeds, with intervals and the smallest gap resolvable.

Every claim of the book is judged by one of two rules on a :class:`Gap`, the mean over seeds of a
paired difference ``a - b`` (the same seed gives both runs the same initialisation and batches)
with a two-sided interval:

* :func:`exceeds` (``a`` is larger than ``b`` by more than ``margin``): **holds** when the whole
  interval lies above ``margin``, **does not hold** when it lies below, and **cannot resolve**
  otherwise;
* :func:`close` (``a`` and ``b`` agree within ``margin``, an equivalence test): **holds** when
  the whole interval lies inside ``[-margin, margin]``, **does not hold** when it lies outside,
  and **cannot resolve** when it straddles an edge, in particular whenever the interval's
  half-width (the smallest gap the setting resolves) exceeds ``margin``.

The half-width combines the spread between seeds (Student's t over ``n`` seeds; one seed gives
an infinite interval: a single run resolves nothing) and, for accuracies, the noise of a finite
test set, ``z sqrt(2 p (1 - p) / n_test)`` for a difference of two accuracies near ``p``. The two
are added in quadrature: a conservative choice, since paired runs on one test set share part of
that noise.

Everything here is a pure function of numbers, tested on synthetic results.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

HOLDS, FAILS, UNRESOLVED = "holds", "does not hold", "cannot resolve"
LEVEL = 0.95


def _t_quantile(q: float, dof: int) -> float:
    """Student's t quantile (scipy when available, else a Cornish-Fisher expansion, accurate to
    ~1e-3 for dof >= 2)."""
    try:
        from scipy.stats import t

        return float(t.ppf(q, dof))
    except ImportError:  # pragma: no cover - scipy is a dependency of the research layer
        z = _z(q)
        g1 = (z ** 3 + z) / 4
        g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
        return z + g1 / dof + g2 / dof ** 2


def _z(q: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


class Gap(NamedTuple):
    """A paired difference over seeds: ``mean`` of ``a - b``, the interval ``[lo, hi]`` and its
    ``half`` width (the smallest gap this setting resolves), from ``n`` seeds; ``seed_half`` and
    ``test_half`` are the two parts of ``half``."""

    mean: float
    half: float
    n: int
    seed_half: float
    test_half: float

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half


def seed_interval(values: Sequence[float], level: float = LEVEL) -> tuple:
    """``(mean, half-width)`` of a t-interval over seeds; ``(value, inf)`` for one seed, NaN if
    any value is not finite.

    >>> m, h = seed_interval([1.0, 2.0, 3.0])
    >>> m, round(h, 3)
    (2.0, 2.484)
    """
    v = np.asarray(values, np.float64)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return math.nan, math.nan
    if v.size == 1:
        return float(v[0]), math.inf
    return float(v.mean()), _t_quantile(0.5 + level / 2, v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)


def accuracy_noise(accuracy: float, n_test: int, level: float = LEVEL) -> float:
    """Half-width of the interval of a difference of two accuracies near ``accuracy``, each
    measured on ``n_test`` examples: ``z sqrt(2 p (1 - p) / n_test)``.

    >>> round(accuracy_noise(0.5, 1000), 4)
    0.0438
    """
    p = min(max(float(accuracy), 0.0), 1.0)
    if not math.isfinite(p) or n_test < 1:
        return math.nan
    return _z(0.5 + level / 2) * math.sqrt(2 * p * (1 - p) / int(n_test))


def paired_gap(a: Sequence[float], b: Sequence[float], *, n_test: Optional[int] = None,
               level: float = LEVEL) -> Gap:
    """The gap ``a - b`` seed by seed (``a[i]`` and ``b[i]`` from seed ``i``), with its interval.

    ``n_test`` (accuracies only) adds the test-set noise of :func:`accuracy_noise`.

    >>> g = paired_gap([0.82, 0.83, 0.81], [0.80, 0.80, 0.79], n_test=10_000)
    >>> round(g.mean, 4), g.n, round(g.lo, 4) > 0
    (0.0233, 3, True)
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_gap needs one value per seed on both sides, got {a.shape} and {b.shape}.")
    mean, seed_half = seed_interval(a - b, level)
    test_half = 0.0
    if n_test is not None:
        test_half = accuracy_noise(float(np.mean((a + b) / 2)), n_test, level)
    half = math.hypot(seed_half, test_half) if math.isfinite(seed_half) else seed_half
    return Gap(mean, half, int(a.size), seed_half, test_half)


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple:
    """Wilson score interval ``(lo, hi)`` of a proportion ``k / n`` (sensible at 0 and ``n``).

    >>> [round(v, 3) for v in wilson_interval(1, 6)]
    [0.03, 0.564]
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n >= 1, got k={k}, n={n}.")
    z = _z(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def proportion_gap(k_a: int, n_a: int, k_b: int, n_b: int, level: float = LEVEL) -> Gap:
    """The gap ``k_a / n_a - k_b / n_b`` between two proportions of independent runs (e.g. the
    share of runs that diverged), with Newcombe's hybrid score interval (from the two Wilson
    intervals). That interval is asymmetric; the :class:`Gap` keeps its wider side as ``half``
    (conservative). Unlike a t-interval over seeds it does not collapse to zero width when a few
    seeds happen to agree.

    >>> g = proportion_gap(10, 10, 5, 10)
    >>> round(g.mean, 2), round(g.lo, 3) > 0
    (0.5, True)
    >>> exceeds(proportion_gap(2, 10, 5, 10))
    'cannot resolve'
    """
    pa, pb = k_a / n_a, k_b / n_b
    la, ua = wilson_interval(k_a, n_a, level)
    lb, ub = wilson_interval(k_b, n_b, level)
    d = pa - pb
    below = math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    above = math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    half = max(below, above)
    return Gap(d, half, int(min(n_a, n_b)), half, 0.0)


def exceeds(gap: Gap, margin: float = 0.0) -> str:
    """Verdict on "a exceeds b by more than ``margin``".

    >>> exceeds(Gap(0.05, 0.01, 5, 0.01, 0.0)), exceeds(Gap(-0.05, 0.01, 5, 0.01, 0.0))
    ('holds', 'does not hold')
    >>> exceeds(Gap(0.05, 0.1, 5, 0.1, 0.0))
    'cannot resolve'
    """
    if not (math.isfinite(gap.mean) and not math.isnan(gap.half)):
        return UNRESOLVED
    if gap.lo > margin:
        return HOLDS
    if gap.hi < margin:
        return FAILS
    return UNRESOLVED


def close(gap: Gap, margin: float) -> str:
    """Verdict on "a and b agree within ``margin``" (both signs).

    >>> close(Gap(0.002, 0.004, 5, 0.004, 0.0), 0.01), close(Gap(0.03, 0.004, 5, 0.004, 0.0), 0.01)
    ('holds', 'does not hold')
    >>> close(Gap(0.0, 0.02, 5, 0.02, 0.0), 0.01)         # the setting cannot resolve 1 point
    'cannot resolve'
    """
    if not (math.isfinite(gap.mean) and not math.isnan(gap.half)):
        return UNRESOLVED
    if gap.half <= margin and -margin <= gap.lo and gap.hi <= margin:
        return HOLDS
    if gap.lo > margin or gap.hi < -margin:
        return FAILS
    return UNRESOLVED


def fmt_gap(gap: Gap, scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
    """``"+2.3 ± 0.8 points (5 seeds)"``; ``± ∞`` for one seed.

    >>> fmt_gap(Gap(0.023, 0.008, 5, 0.007, 0.004))
    '+2.3 ± 0.8 points (5 seeds)'
    """
    if not math.isfinite(gap.mean):
        return "n/a"
    half = "∞" if math.isinf(gap.half) else f"{scale * gap.half:.{digits}f}"
    seeds = f"{gap.n} seed" + ("" if gap.n == 1 else "s")
    return f"{scale * gap.mean:+.{digits}f} ± {half}{unit} ({seeds})"


def fmt_mean(values: Sequence[float], scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    """``"82.3 ± 0.4%"`` over seeds (``"82.3%"`` for one seed).

    >>> fmt_mean([0.81, 0.83])
    '82.0 ± 12.7%'
    """
    m, h = seed_interval(values)
    if not math.isfinite(m):
        return "n/a"
    if math.isinf(h):
        return f"{scale * m:.{digits}f}{unit}"
    return f"{scale * m:.{digits}f} ± {scale * h:.{digits}f}{unit}"


def verdict(claim: str, paper: str, measured: str, result: str, resolvable: Optional[float] = None,
            detail: str = "") -> dict:
    """One row of a verdict table."""
    if result not in (HOLDS, FAILS, UNRESOLVED):
        raise ValueError(f"a verdict is one of {HOLDS!r}, {FAILS!r}, {UNRESOLVED!r}; got {result!r}.")
    return {"claim": claim, "paper": paper, "measured": measured, "verdict": result, "resolvable": resolvable,
            "detail": detail}


def verdicts_markdown(rows: Sequence[dict], resolvable_unit: str = "points", scale: float = 100.0,
                      digits: int = 1) -> str:
    """A Markdown table: claim, the paper, ours, the smallest gap resolvable (``scale`` times the
    verdict's ``resolvable``, ``digits`` significant digits past the point), verdict."""
    lines = ["| claim | paper | ours | resolves gaps of | verdict |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        res = r.get("resolvable")
        res_s = "—" if res is None or (isinstance(res, float) and math.isnan(res)) else \
            ("∞ (one seed)" if math.isinf(res) else f"{scale * res:.{digits}f} {resolvable_unit}")
        word = {HOLDS: "holds", FAILS: "**does not hold**", UNRESOLVED: "*cannot resolve*"}[r["verdict"]]
        measured = r["measured"] + (f" ({r['detail']})" if r.get("detail") else "")
        lines.append(f"| {r['claim']} | {r['paper']} | {measured} | {res_s} | {word} |")
    return "\n".join(lines)


def bottom_line(rows: Sequence[dict]) -> str:
    """One sentence: how many claims hold, do not hold, or cannot be resolved, naming the latter two."""
    fails = [r["claim"] for r in rows if r["verdict"] == FAILS]
    unresolved = [r["claim"] for r in rows if r["verdict"] == UNRESOLVED]
    held = len(rows) - len(fails) - len(unresolved)
    text = f"At these settings {held} of {len(rows)} claims hold"
    if fails:
        text += "; not holding: " + "; ".join(f"*{c}*" for c in fails)
    if unresolved:
        text += "; too close to call here: " + "; ".join(f"*{c}*" for c in unresolved)
    return text + "."


__all__ = ["FAILS", "Gap", "HOLDS", "LEVEL", "UNRESOLVED", "bottom_line", "close", "exceeds", "fmt_gap", "fmt_mean",
           "paired_gap", "proportion_gap", "seed_interval", "accuracy_noise", "verdict", "verdicts_markdown",
           "wilson_interval"]
