"""Gaps over seeds and their intervals: the statistics under :mod:`itlin.book.verdicts`.

A :class:`Gap` is the mean over seeds of a paired difference ``a - b`` (the same seed gives both
runs the same initialisation and batches) with a two-sided interval at :data:`LEVEL`. Here:

* the seed part: a Student's t interval over seeds (:func:`seed_interval`; one seed gives an
  infinite interval: a single run resolves nothing), or a bootstrap one for a statistic of all
  seeds together (:func:`bootstrap_gap`, :func:`largest_rise`);
* the test-set part, for accuracies: the unpaired bound ``z sqrt(2 p (1 - p) / n_test)``
  (:func:`accuracy_noise`, :func:`slope_noise` for slopes), or the paired noise from per-example
  results (:func:`paired_accuracy_se`, with the floor more seeds do not remove,
  :func:`paired_accuracy_floor_se`; kept in records by :func:`pack_correct`, or counted over
  seeds by :func:`tally`). The two parts are added in quadrature (:func:`paired_gap`): a
  conservative choice, since paired runs on one test set share part of that noise;
* proportions of independent runs (:func:`wilson_interval`, :func:`proportion_gap`);
* gaps and means in words (:func:`fmt_gap`, :func:`fmt_mean`).

The rules that judge a gap, and the verdicts, are in :mod:`itlin.book.verdicts`, which
re-exports every name here. Everything here is a pure function of numbers, tested on synthetic
results.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

LEVEL = 0.95


def t_quantile(q: float, dof: int) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``).

    >>> round(t_quantile(0.975, 4), 3)
    2.776
    """
    from scipy.stats import t

    return float(t.ppf(q, dof))


def _z(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


class Gap(NamedTuple):
    """A paired difference over seeds: ``mean`` of ``a - b``, the interval ``[lo, hi]`` and its
    ``half`` width at :data:`LEVEL` (the smallest gap this setting resolves), from ``n`` seeds;
    ``seed_half`` and ``test_half`` are the two parts of ``half``. ``dist`` says how the seed
    part scales with the confidence level: ``"t"`` (Student's t over ``n - 1`` degrees of
    freedom) or ``"normal"`` (a normal approximation, e.g. Newcombe's interval of a difference
    of proportions). ``test_floor``: the part of ``test_half`` that no number of seeds removes
    (:func:`paired_accuracy_floor_se`); NaN when not known, and then all of ``test_half`` is
    taken to stay (:meth:`test_half_with`)."""

    mean: float
    half: float
    n: int
    seed_half: float
    test_half: float
    dist: str = "t"
    test_floor: float = math.nan

    def test_half_with(self, seeds: int) -> float:
        """The test-set part of the half-width at :data:`LEVEL` with ``seeds`` seeds, if the
        runs' disagreements stayed as measured: paired per-example noise is the examples'
        spread of the mean over seeds, which falls towards ``test_floor`` as seeds are added
        (``floor^2 + (test_half^2 - floor^2) n / seeds``); all of ``test_half`` without a floor.

        >>> g = Gap(0.0, 0.05, 4, 0.03, 0.04, test_floor=0.02)
        >>> round(g.test_half_with(4), 4), round(g.test_half_with(16), 4), round(g.test_half_with(10**9), 4)
        (0.04, 0.0265, 0.02)
        """
        floor = self.test_floor
        if not (math.isfinite(floor) and self.n >= 1 and math.isfinite(self.test_half)):
            return self.test_half
        floor = min(floor, self.test_half)
        return math.sqrt(floor ** 2 + (self.test_half ** 2 - floor ** 2) * self.n / max(int(seeds), 1))

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half

    def half_at(self, level: float) -> float:
        """The interval's half-width at another two-sided confidence ``level`` (the seed part
        rescaled by its quantile, the test-set part by the normal one).

        >>> g = paired_gap([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
        >>> round(g.half_at(LEVEL), 3), round(g.half_at(0.99), 3)
        (2.484, 5.73)
        """
        if level == LEVEL or not math.isfinite(self.half):
            return self.half
        q0, q1 = 0.5 + LEVEL / 2, 0.5 + level / 2
        if self.dist == "t" and self.n >= 2:
            seed = self.seed_half * t_quantile(q1, self.n - 1) / t_quantile(q0, self.n - 1)
        else:
            seed = self.seed_half * _z(q1) / _z(q0)
        test = self.test_half * _z(q1) / _z(q0)
        return math.hypot(seed, test) if math.isfinite(seed) else seed

    def p_beyond(self, distance: float) -> float:
        """The smallest two-sided ``alpha`` at which the ``1 - alpha`` interval's half-width is
        below ``distance``: the p-value of a one-sided test at a threshold ``distance`` away
        from the mean, doubled (so ``p < 1 - LEVEL`` exactly when the interval at
        :data:`LEVEL` clears that threshold). 1 when ``distance <= 0`` or nothing resolves.

        >>> g = paired_gap([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
        >>> round(g.p_beyond(g.half), 4), g.p_beyond(0.0)
        (0.05, 1.0)
        """
        if not (distance > 0 and math.isfinite(self.mean) and math.isfinite(self.half)):
            return 1.0
        if self.half == 0:
            return 0.0
        from scipy.optimize import brentq

        top = 1.0 - 1e-15  # levels; half_at grows with the level from 0 at level 0
        if self.half_at(top) < distance:
            return 1.0 - top
        return 1.0 - brentq(lambda level: self.half_at(level) - distance, 0.0, top, xtol=1e-15)


def seed_interval(values: Sequence[float], level: float = LEVEL) -> tuple:
    """``(mean, half-width)`` of a t-interval over seeds; ``(value, inf)`` for one seed, NaN if
    any value is not finite.

    >>> m, h = seed_interval([1.0, 2.0, 3.0])
    >>> m, round(h, 3)
    (2.0, 2.484)
    """
    from scipy.stats import sem

    v = np.asarray(values, np.float64)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return math.nan, math.nan
    if v.size == 1:
        return float(v[0]), math.inf
    return float(v.mean()), t_quantile(0.5 + level / 2, v.size - 1) * float(sem(v))


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


def log_slope_weights(x) -> np.ndarray:
    """Least-squares weights ``w`` of ``log10 x``: the slope of values ``v`` against ``log10 x``
    is ``w @ v`` (e.g. accuracy gained per tenfold data, main paper Fig. 5).

    >>> log_slope_weights([10, 100]).tolist(), round(float(log_slope_weights([1, 10, 100]) @ [0.5, 0.6, 0.7]), 12)
    ([-1.0, 1.0], 0.1)
    """
    u = np.log10(np.asarray(x, np.float64))
    return (u - u.mean()) / np.sum((u - u.mean()) ** 2)


def slope_noise(x, p_a, p_b, n_test: int, level: float = LEVEL) -> float:
    """Half-width the finite test set alone puts on a difference of two slopes
    (:func:`log_slope_weights`) of accuracies ``p_a`` / ``p_b`` (one per ``x``) measured on
    ``n_test`` examples: ``z sqrt(sum_i w_i^2 (p_a,i (1 - p_a,i) + p_b,i (1 - p_b,i)) / n_test)``,
    the unpaired bound (conservative when both share the test set; :func:`paired_accuracy_se`
    on per-example slope contributions is the paired term).

    >>> round(slope_noise([100, 1000, 10000], [0.5] * 3, [0.5] * 3, 1000), 4)
    0.031
    """
    w = log_slope_weights(x)
    pa, pb = np.clip(np.asarray(p_a, np.float64), 0, 1), np.clip(np.asarray(p_b, np.float64), 0, 1)
    return _z(0.5 + level / 2) * math.sqrt(np.sum(w ** 2 * (pa * (1 - pa) + pb * (1 - pb))) / int(n_test))


def paired_accuracy_se(correct_a, correct_b) -> float:
    """The standard error, from the finite test set, of the mean over seeds of a difference of
    two accuracies measured on the same test examples: ``correct_a`` and ``correct_b`` are
    ``(seeds, n_test)`` booleans (example ``i`` classified right by seed ``s``'s run). With
    ``e_i`` the mean over seeds of ``a_si - b_si``, the mean gap is the mean of the ``e_i`` over
    a sample of ``n_test`` examples, so its standard error is ``std(e) / sqrt(n_test)``: the
    paired (McNemar-like) noise, usually far below the unpaired ``sqrt(2 p (1 - p) / n_test)``
    of :func:`accuracy_noise`, since two runs agree on most examples.

    >>> a = np.array([[1, 1, 0, 1]] * 2, bool); b = np.array([[1, 0, 0, 1]] * 2, bool)
    >>> round(paired_accuracy_se(a, b), 4)
    0.25
    """
    a, b = np.asarray(correct_a, np.float64), np.asarray(correct_b, np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] < 2:
        raise ValueError(f"paired_accuracy_se needs two (seeds, n_test) arrays of one shape, got {a.shape} and "
                         f"{b.shape}.")
    e = (a - b).mean(axis=0)
    return float(e.std(ddof=1) / math.sqrt(e.size))


def paired_accuracy_floor_se(correct_a, correct_b) -> float:
    """The part of :func:`paired_accuracy_se` that adding seeds would not remove. With
    ``d_si = a_si - b_si``, the example means ``e_i`` vary over examples as the examples' own
    advantages ``mu_i`` do plus, for each, the spread ``w_i`` of ``d_si`` over seeds divided by
    the number of seeds ``S``: ``var(e) = var(mu) + mean(w) / S``. The floor is
    ``sqrt(max(var(e) - mean(w) / S, 0) / n_test)`` (the method of moments of a random-effects
    model); with one seed ``w`` is unknown and the floor is the whole standard error.

    >>> a = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], bool); b = np.zeros((2, 4), bool)
    >>> paired_accuracy_se(a, b), paired_accuracy_floor_se(a, b)  # one seed's luck on one example: seeds remove it
    (0.125, 0.0)
    >>> a = np.array([[1, 1, 0, 1]] * 2, bool); b = np.array([[1, 0, 0, 1]] * 2, bool)
    >>> paired_accuracy_floor_se(a, b) == paired_accuracy_se(a, b)  # the seeds agree: none of it is
    True
    """
    return _paired_noise(correct_a, correct_b)[1]


class PairedTally(NamedTuple):
    """Per-example results of two settings over the same ``seeds`` seeds, kept as counts: on
    example ``i``, ``a_only[i]`` seeds got it right with ``a`` and wrong with ``b``, ``b_only[i]``
    the reverse. Enough for :func:`paired_accuracy_se` and :func:`paired_accuracy_floor_se`
    (:func:`tally_noise`), in a size that does not grow with the seeds (:func:`tally`)."""

    a_only: np.ndarray
    b_only: np.ndarray
    seeds: int


def tally(correct_a, correct_b) -> PairedTally:
    """The :class:`PairedTally` of two ``(seeds, n_test)`` boolean arrays.

    >>> t = tally([[1, 1, 0], [1, 0, 0]], [[0, 1, 0], [1, 1, 0]])
    >>> t.a_only.tolist(), t.b_only.tolist(), t.seeds
    ([1, 0, 0], [0, 1, 0], 2)
    """
    a, b = np.asarray(correct_a, bool), np.asarray(correct_b, bool)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"tally needs two (seeds, n_test) arrays of one shape, got {a.shape} and {b.shape}.")
    return PairedTally(np.sum(a & ~b, axis=0), np.sum(~a & b, axis=0), a.shape[0])


def tally_noise(t: PairedTally) -> tuple:
    """``(paired_accuracy_se, paired_accuracy_floor_se)`` of the per-example results a
    :class:`PairedTally` counts: with ``d_si`` in ``{-1, 0, 1}``, ``sum_s d_si = a_only - b_only``
    and ``sum_s d_si^2 = a_only + b_only`` are all the two need.

    >>> a = np.array([[1, 1, 0, 1]] * 2, bool); b = np.array([[1, 0, 0, 1]] * 2, bool)
    >>> tally_noise(tally(a, b)) == (paired_accuracy_se(a, b), paired_accuracy_floor_se(a, b))
    True
    """
    a, b, seeds = np.asarray(t.a_only, np.float64), np.asarray(t.b_only, np.float64), int(t.seeds)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2 or seeds < 1:
        raise ValueError(f"tally_noise needs two counts per example of at least 2 examples and 1 seed, got "
                         f"{a.shape}, {b.shape} and {seeds} seeds.")
    e = (a - b) / seeds
    se = float(e.std(ddof=1) / math.sqrt(e.size))
    if seeds < 2:
        return se, se
    within = ((a + b) - (a - b) ** 2 / seeds) / (seeds - 1)  # each example's variance of d over seeds
    between = float(e.var(ddof=1)) - float(within.mean()) / seeds
    return se, math.sqrt(max(between, 0.0) / e.size)


def _paired_noise(correct_a, correct_b=None) -> tuple:
    """``(paired_accuracy_se, paired_accuracy_floor_se)`` from one pass over the differences (or
    from a :class:`PairedTally` alone)."""
    if isinstance(correct_a, PairedTally):
        return tally_noise(correct_a)
    se = paired_accuracy_se(correct_a, correct_b)  # checks the shapes
    d = np.asarray(correct_a, np.float64) - np.asarray(correct_b, np.float64)
    seeds, n = d.shape
    if seeds < 2:
        return se, se
    between = float(d.mean(axis=0).var(ddof=1)) - float(d.var(axis=0, ddof=1).mean()) / seeds
    return se, math.sqrt(max(between, 0.0) / n)


def paired_gap(a: Sequence[float], b: Sequence[float], *, n_test: Optional[int] = None,
               test_se: Optional[float] = None, examples: Optional[tuple] = None, level: float = LEVEL) -> Gap:
    """The gap ``a - b`` seed by seed (``a[i]`` and ``b[i]`` from seed ``i``), with its interval
    (all NaN, ``n = 0``, without a seed: a verdict on it cannot resolve).

    For accuracies, the finite test set adds noise: from ``examples`` (``(correct_a,
    correct_b)``, per seed and example, when the runs' per-example results are known, or a
    :class:`PairedTally` of them: the paired :func:`paired_accuracy_se`, with the floor more
    seeds would not remove, :func:`paired_accuracy_floor_se`), from ``test_se`` (a standard
    error given), or, failing both, from ``n_test`` (the unpaired bound of
    :func:`accuracy_noise`, conservative).

    >>> g = paired_gap([0.82, 0.83, 0.81], [0.80, 0.80, 0.79], n_test=10_000)
    >>> round(g.mean, 4), g.n, round(g.lo, 4) > 0
    (0.0233, 3, True)
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_gap needs one value per seed on both sides, got {a.shape} and {b.shape}.")
    if a.size == 0:
        return Gap(math.nan, math.nan, 0, math.nan, math.nan)
    mean, seed_half = seed_interval(a - b, level)
    test_half, test_floor = 0.0, math.nan
    if examples is not None:
        se, floor = _paired_noise(examples) if isinstance(examples, PairedTally) else _paired_noise(*examples)
        test_half, test_floor = _z(0.5 + level / 2) * se, _z(0.5 + level / 2) * floor
    elif test_se is not None:
        test_half = _z(0.5 + level / 2) * float(test_se)
    elif n_test is not None:
        test_half = accuracy_noise(float(np.mean((a + b) / 2)), n_test, level)
    half = math.hypot(seed_half, test_half) if math.isfinite(seed_half) else seed_half
    return Gap(mean, half, int(a.size), seed_half, test_half, test_floor=test_floor)


def bootstrap_gap(observed, resampled, a: int, b: int, n: int, log: bool = False) -> Gap:
    """The gap ``observed[a] - observed[b]`` (of log10 with ``log``) of a statistic over ``n``
    seeds, with its interval from ``resampled`` (the statistic on bootstrap resamples of the
    seeds, ``resampled[i]`` paired across ``i``): the bootstrap standard error times Student's t
    quantile for ``n`` seeds (the bootstrap alone is too narrow for a few seeds).

    >>> g = bootstrap_gap(np.array([2.0, 1.0]), np.array([[2.1, 1.9, 2.0], [1.0, 1.1, 0.9]]), 0, 1, 10)
    >>> g.mean, round(g.half, 3)           # std 0.173 of the resampled gaps, times t(0.975, 9) = 2.262
    (1.0, 0.392)
    """
    f = np.log10 if log else (lambda z: z)
    with np.errstate(all="ignore"):
        d, boot = float(f(observed[a]) - f(observed[b])), f(resampled[a]) - f(resampled[b])
    boot = np.asarray(boot)[np.isfinite(boot)]
    if not math.isfinite(d) or boot.size < 2 or n < 2:
        return Gap(math.nan, math.nan, n, math.nan, 0.0)
    half = t_quantile(0.5 + LEVEL / 2, max(n - 1, 1)) * float(np.std(boot, ddof=1))
    return Gap(d, half, n, half, 0.0)


def largest_rise(observed, resampled, n: int) -> Gap:
    """Minus the largest rise in log10 of a statistic between neighbours along its first axis
    (:func:`bootstrap_gap` of each), with the simultaneous interval of the Bonferroni-widened
    intervals of every step (``[-U, -L]``, ``L``/``U`` the largest lower/upper ends): "it falls at
    every step" holds when this exceeds 0."""
    gaps = [bootstrap_gap(observed, resampled, i + 1, i, n, log=True) for i in range(len(observed) - 1)]
    if not gaps or any(not math.isfinite(g.half) for g in gaps):
        return Gap(math.nan, math.nan, n, math.nan, 0.0)
    dof = max(n - 1, 1)
    w = t_quantile(1 - (1 - LEVEL) / len(gaps) / 2, dof) / t_quantile(0.5 + LEVEL / 2, dof)
    lo, hi = max(g.mean - w * g.half for g in gaps), max(g.mean + w * g.half for g in gaps)
    return Gap(-(lo + hi) / 2, (hi - lo) / 2, n, (hi - lo) / 2, 0.0)


def pack_correct(correct) -> str:
    """Per-example results (booleans) as text for a record's JSON: packed bits in base64.

    >>> pack_correct([True, False, True]), unpack_correct(pack_correct([True, False, True]), 3).tolist()
    ('oA==', [1.0, 0.0, 1.0])
    """
    import base64

    return base64.b64encode(np.packbits(np.asarray(correct, bool)).tobytes()).decode("ascii")


def unpack_correct(bits, n: int) -> np.ndarray:
    """Per-example results kept as packed bits (``np.packbits`` along the last axis, or the text
    of :func:`pack_correct`) back as floats, the last axis cut to ``n`` examples: what
    :func:`paired_accuracy_se` compares.

    >>> unpack_correct(np.packbits([True, False, True]), 3).tolist()
    [1.0, 0.0, 1.0]
    """
    if isinstance(bits, str):
        import base64

        bits = np.frombuffer(base64.b64decode(bits), np.uint8)
    return np.unpackbits(np.asarray(bits, np.uint8), axis=-1)[..., :int(n)].astype(np.float64)


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple:
    """Wilson score interval ``(lo, hi)`` of a proportion ``k / n`` (sensible at 0 and ``n``).

    >>> [round(v, 3) for v in wilson_interval(1, 6)]
    [0.03, 0.564]
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a proportion needs 0 <= k <= n and n >= 1, got k={k}, n={n}.")
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


# Newcombe's hybrid score interval of a difference of proportions (below) stays written here:
# scipy has none.
def proportion_gap(k_a: int, n_a: int, k_b: int, n_b: int, level: float = LEVEL) -> Gap:
    """The gap ``k_a / n_a - k_b / n_b`` between two proportions of independent runs (e.g. the
    share of runs that diverged), with Newcombe's hybrid score interval (from the two Wilson
    intervals). That interval is asymmetric; the :class:`Gap` keeps its wider side as ``half``
    (conservative). Unlike a t-interval over seeds it does not collapse to zero width when a few
    seeds happen to agree.

    >>> g = proportion_gap(10, 10, 5, 10)
    >>> round(g.mean, 2), round(g.lo, 3) > 0
    (0.5, True)
    >>> from itlin.book.verdicts import exceeds
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
    return Gap(d, half, int(min(n_a, n_b)), half, 0.0, "normal")


def fmt_gap(gap: Gap, scale: float = 100.0, unit: str = " points", digits: int = 1,
            level: float = LEVEL) -> str:
    """``"+2.3 ± 0.8 points (5 seeds)"`` (the interval at ``level``); ``± ∞`` for one seed.

    >>> fmt_gap(Gap(0.023, 0.008, 5, 0.007, 0.004))
    '+2.3 ± 0.8 points (5 seeds)'
    """
    if not math.isfinite(gap.mean):
        return "n/a"
    half = gap.half_at(level)
    half_s = "∞" if math.isinf(half) else f"{scale * half:.{digits}f}"
    seeds = f"{gap.n} seed" + ("" if gap.n == 1 else "s")
    return f"{scale * gap.mean:+.{digits}f} ± {half_s}{unit} ({seeds})"


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


__all__ = ["Gap", "LEVEL", "accuracy_noise", "bootstrap_gap", "fmt_gap", "fmt_mean", "largest_rise",
           "log_slope_weights", "pack_correct", "paired_accuracy_floor_se", "paired_accuracy_se", "paired_gap",
           "PairedTally", "tally", "tally_noise",
           "proportion_gap", "seed_interval", "slope_noise", "t_quantile", "unpack_correct", "wilson_interval"]
