"""The verdict rules (itlin.book.verdicts) on synthetic results: each can hold, fail, or say it
cannot resolve, and the interval has the coverage it claims."""

import math

import numpy as np
import pytest

from itlin.book import verdicts as V


def test_interval_against_a_hand_computed_t_interval():
    g = V.paired_gap([0.80, 0.82, 0.84, 0.86, 0.88], [0.80] * 5)
    sd = np.std([0.0, 0.02, 0.04, 0.06, 0.08], ddof=1)
    assert g.mean == pytest.approx(0.04) and g.n == 5
    assert g.half == pytest.approx(2.7764451 * sd / math.sqrt(5), rel=1e-6)  # t(0.975, 4)
    assert g.test_half == 0.0


def test_test_set_noise_adds_in_quadrature():
    g = V.paired_gap([0.8, 0.81, 0.79], [0.7, 0.71, 0.69], n_test=1000)
    assert g.seed_half == pytest.approx(0.0) and g.half == pytest.approx(g.test_half)
    assert g.test_half == pytest.approx(1.959964 * math.sqrt(2 * 0.75 * 0.25 / 1000), rel=1e-5)


@pytest.mark.parametrize("a, b, margin, expected", [
    ([0.85] * 5, [0.80] * 5, 0.0, V.HOLDS),
    ([0.80] * 5, [0.85] * 5, 0.0, V.FAILS),
    ([0.81, 0.79, 0.82, 0.78, 0.80], [0.80] * 5, 0.0, V.UNRESOLVED),
    ([0.85], [0.80], 0.0, V.UNRESOLVED),                       # one seed resolves nothing
    ([0.85, math.nan], [0.80, 0.8], 0.0, V.UNRESOLVED),
])
def test_exceeds(a, b, margin, expected):
    assert V.exceeds(V.paired_gap(a, b), margin) == expected


def test_close_is_an_equivalence_test_that_can_fail():
    tight = [0.001, -0.002, 0.0, 0.002, -0.001]
    assert V.close(V.paired_gap(np.add(0.8, tight), [0.8] * 5), 0.01) == V.HOLDS
    assert V.close(V.paired_gap(np.add(0.85, tight), [0.8] * 5), 0.01) == V.FAILS
    noisy = [0.05, -0.05, 0.04, -0.04, 0.0]
    assert V.close(V.paired_gap(np.add(0.8, noisy), [0.8] * 5), 0.01) == V.UNRESOLVED
    # the same tight runs on a 1,000-example test set cannot resolve a 1-point margin
    assert V.close(V.paired_gap(np.add(0.8, tight), [0.8] * 5, n_test=1000), 0.01) == V.UNRESOLVED


def test_coverage_of_the_interval_on_synthetic_seeds():
    # 95% intervals over 5 seeds cover the true gap about 95% of the time
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        a = 0.8 + 0.01 + rng.normal(0, 0.01, 5)
        b = 0.8 + rng.normal(0, 0.01, 5)
        g = V.paired_gap(a, b)
        hits += g.lo <= 0.01 <= g.hi
    assert 0.93 < hits / 2000 < 0.97


def test_claims_table_and_bottom_line():
    from itlin.book import render

    g = lambda mean, half: V.Gap(mean, half, 5, half, 0.0)
    rows = [V.judge("a", "a", "p", g(0.05, 0.01), "exceeds", 0.0), V.judge("b", "b", "p", g(-0.05, 0.01), "exceeds"),
            V.judge("c", "c", "p", g(0.01, 0.05), "exceeds")]
    assert [v.verdict for v in rows] == [V.HOLDS, V.FAILS, V.UNRESOLVED]
    md = render.claims(rows)
    assert "**does not hold**" in md and "*cannot resolve*" in md and "1.0 points" in md
    line = V.bottom_line(rows)
    assert line.startswith("At these settings 1 of 3 claims hold") and "*b*" in line and "*c*" in line


def test_paired_test_noise_of_two_runs_on_one_test_set():
    rng = np.random.default_rng(0)
    a = rng.random((5, 2000)) < 0.8
    flip = rng.random((5, 2000)) < 0.05          # b disagrees with a on about 5% of the examples
    b = a ^ flip
    se = V.paired_accuracy_se(a, b)
    e = (a.astype(float) - b.astype(float)).mean(axis=0)
    assert se == pytest.approx(np.std(e, ddof=1) / math.sqrt(2000))
    # far below the unpaired bound, which ignores that the runs agree on most examples
    assert 1.96 * se < 0.4 * V.accuracy_noise(0.8, 2000)
    assert V.paired_accuracy_se(a, a) == 0.0
    g = V.paired_gap(a.mean(1), a.mean(1) - 0.001, test_se=0.0)
    assert g.test_half == 0.0 and g.half == g.seed_half
    with pytest.raises(ValueError, match="one shape"):
        V.paired_accuracy_se(a, b[:, :10])


def _crossed(seeds, n, rng):
    """Per-seed, per-example correctness of two models whose advantage varies by example: on
    example i, a is right with probability p_i and b with q_i (independently over seeds)."""
    p = rng.uniform(0.55, 0.95, n)
    q = np.clip(p - rng.normal(0.0, 0.1, n), 0.0, 1.0)
    return rng.random((seeds, n)) < p, rng.random((seeds, n)) < q, p - q


def test_the_paired_noise_floor_is_the_examples_own_spread():
    """The floor estimates sqrt(var(p_i - q_i) / n), whatever the number of seeds; the whole
    standard error is larger by the seeds' disagreement, which falls as 1/seeds."""
    rng = np.random.default_rng(3)
    n = 4000
    for seeds in (3, 8, 32):
        a, b, mu = _crossed(seeds, n, rng)
        truth = math.sqrt(np.var(mu, ddof=1) / n)
        floor, se = V.paired_accuracy_floor_se(a, b), V.paired_accuracy_se(a, b)
        assert floor == pytest.approx(truth, rel=0.15), seeds
        assert floor < se
    a, b, _ = _crossed(1, n, rng)
    assert V.paired_accuracy_floor_se(a, b) == V.paired_accuracy_se(a, b)  # one seed: nothing to separate
    same = np.repeat(a, 4, axis=0), np.repeat(b, 4, axis=0)  # four seeds that agree example by example
    assert V.paired_accuracy_floor_se(*same) == pytest.approx(V.paired_accuracy_se(*same), rel=1e-12)


def test_the_projected_test_term_matches_more_seeds():
    """From 4 seeds, test_half_with(32) predicts the test term 32 seeds of the same models give."""
    rng = np.random.default_rng(4)
    a, b, _ = _crossed(32, 3000, rng)
    few = V.paired_gap(a[:4].mean(1), b[:4].mean(1), examples=(a[:4], b[:4]))
    many = V.paired_gap(a.mean(1), b.mean(1), examples=(a, b))
    assert many.test_half < 0.8 * few.test_half  # more seeds do shrink it
    assert few.test_half_with(32) == pytest.approx(many.test_half, rel=0.1)
    assert few.test_half_with(few.n) == pytest.approx(few.test_half)
    # a gap known only by its standard error keeps its whole test term
    given = V.paired_gap(a[:4].mean(1), b[:4].mean(1), test_se=V.paired_accuracy_se(a[:4], b[:4]))
    assert math.isnan(given.test_floor) and given.test_half_with(10_000) == given.test_half


def test_seeds_needed_counts_the_test_term_that_seeds_remove():
    """A close claim whose distance to the margin is below the 12-seed test term but above its
    floor: seeds decide it (a number, not None), and the number is one the rule then meets."""
    g = V.Gap(-0.023, math.hypot(0.012, 0.0035), 12, 0.012, 0.0035, test_floor=0.001)
    v = V.judge("c", "", "", g, "close", 0.02)
    assert v.verdict == V.UNRESOLVED
    n = V.seeds_needed(v)
    assert n is not None and n > 12
    sd = 0.012 / V.t_quantile(0.975, 11) * math.sqrt(12)
    at = lambda m: math.hypot(V.t_quantile(0.975, m - 1) * sd / math.sqrt(m), g.test_half_with(m))
    assert at(n) < 0.003 <= at(n - 1)  # the first n whose interval fits between the gap and the margin
    fixed = V.judge("c", "", "", g._replace(test_floor=math.nan), "close", 0.02)
    assert V.seeds_needed(fixed) is None  # the whole 0.0035 kept: wider than the 0.003 to the margin


def test_no_seeds_reason_names_the_case_and_its_numbers():
    """Each way seeds_needed finds no number gets its own reason, with the numbers that decide
    it; a claim that seeds would decide gets none."""
    g = V.Gap(-0.023, math.hypot(0.012, 0.0035), 12, 0.012, 0.0035, test_floor=0.001)
    assert V.no_seeds_reason(V.judge("c", "", "", g, "close", 0.02)) == ""  # 13+ seeds decide it
    fixed = V.judge("c", "", "", g._replace(test_floor=math.nan), "close", 0.02)
    assert V.no_seeds_reason(fixed) == ("the gap lies 0.30 points from its threshold, inside the held-out set's "
                                        "own noise (± 0.35 points), which seeds do not average out")
    decades = V.judge("d", "", "", V.Gap(0.099, 0.05, 24, 0.049, 0.01, test_floor=0.01), "exceeds", 0.1,
                      unit="decades", scale=1.0, digits=2)
    assert V.no_seeds_reason(decades).startswith("the gap lies 0.001 decades from its threshold")
    on = V.judge("e", "", "", V.Gap(-0.02001, 0.007, 100, 0.004, 0.006, test_floor=0.003), "close", 0.02)
    assert V.no_seeds_reason(on).startswith("the gap sits on its threshold (less than 0.005 points from it), inside")
    one = V.judge("o", "", "", V.Gap(0.05, math.inf, 1, math.inf, 0.0), "exceeds")
    assert V.seeds_needed(one) is None and V.no_seeds_reason(one) == "one seed measures no spread between seeds"
    slow = V.judge("s", "", "", V.Gap(0.001, 0.5, 3, 0.5, 0.0), "exceeds")
    assert V.seeds_needed(slow, max_seeds=50) is None and V.no_seeds_reason(slow, max_seeds=50) == "more than 50"
    assert V.no_seeds_reason(V.stated("x", "", "", "m", V.HOLDS)) == "not a test over seeds"


def test_rows_with_per_example_results_get_the_paired_noise():
    from itlin.book.experiments.main import _rows as R

    rng = np.random.default_rng(1)
    a = rng.random((5, 3000)) < 0.7
    b = a ^ (rng.random((5, 3000)) < 0.02)
    rows_a = [{"seed": s, "test": a[s].mean(), "status": "completed", "correct": a[s]} for s in range(5)]
    rows_b = [{"seed": s, "test": b[s].mean(), "status": "completed", "correct": b[s]} for s in range(5)]
    v = R.gap_verdict("x", "", "", rows_a, rows_b, n_test=3000, rule="close", margin=0.02, label_a="a", label_b="b")
    assert v.gap.test_half == pytest.approx(1.959964 * V.paired_accuracy_se(a, b), rel=1e-6)
    no_bits = [{k: r[k] for k in r if k != "correct"} for r in rows_a]
    w = R.gap_verdict("x", "", "", no_bits, rows_b, n_test=3000, rule="close", margin=0.02, label_a="a", label_b="b")
    assert w.gap.test_half == pytest.approx(V.accuracy_noise((a.mean() + b.mean()) / 2, 3000), rel=1e-6)
    assert v.gap.test_half < 0.5 * w.gap.test_half


def test_an_equivalence_with_dropped_seeds_does_not_stop_holms_procedure_for_the_others():
    """A "close" claim with a diverged seed cannot hold; ranked by its "holds" p-value it stood
    first in Holm's order and, not resolving, stopped every claim after it (a gap of 8 points
    far outside the margin read "cannot resolve"). Its p-value is now that of "does not hold",
    its only reachable decision: it goes last, and the others resolve as they would."""
    tight = np.array([0.001, -0.002, 0.0, 0.002, -0.001, 0.001, 0.0, -0.001])
    stuck = V.judge("near", "", "", V.paired_gap(0.8 + tight, [0.8] * 8), "close", 0.02, dropped=1)
    far = V.judge("far", "", "", V.paired_gap(0.72 + 3 * tight, [0.8] * 8), "close", 0.02)
    assert stuck.verdict == V.UNRESOLVED and far.verdict == V.FAILS
    assert stuck.p > 0.5 > far.p  # "does not hold" is far from reachable for the first
    judged = V.holm([stuck, far])
    assert judged["far"].verdict == V.FAILS and judged["near"].verdict == V.UNRESOLVED
    # a dropped seed still lets "does not hold" be reached
    out = V.judge("out", "", "", V.paired_gap(0.72 + 3 * tight, [0.8] * 8), "close", 0.02, dropped=1)
    assert out.verdict == V.FAILS and V.holm([out, far])["out"].verdict == V.FAILS


# ---------------------------------------------------------------- one-sided rules and margins (issue 44)
from hypothesis import given, settings
from hypothesis import strategies as st

TIGHT = np.array([0.001, -0.002, 0.0, 0.002, -0.001, 0.001, 0.0, -0.001])


@pytest.mark.parametrize("above, expected", [(0.06, V.HOLDS), (0.0, V.HOLDS), (-0.05, V.FAILS),
                                             (-0.02, V.UNRESOLVED)])
def test_non_inferiority_is_one_sided(above, expected):
    """A paper that says large K is "on par" with K=1 claims it is no worse: ending far above K=1
    supports that claim (an equivalence test says it does not hold)."""
    g = V.paired_gap(0.8 + above + 3 * TIGHT, [0.8] * 8)
    v = V.judge("suffices", "", "", g, "not_worse", 0.02)
    assert v.verdict == expected
    if above == 0.06:
        assert V.judge("eq", "", "", g, "close", 0.02).verdict == V.FAILS


@given(mean=st.floats(-1, 1), half=st.floats(0, 1), margin=st.floats(0, 0.5))
@settings(max_examples=200, deadline=None)
def test_non_inferiority_is_superiority_over_minus_the_margin(mean, half, margin):
    g = V.Gap(mean, half, 8, half, 0.0)
    assert V.not_worse(g, margin) == V.exceeds(g, -margin)
    p = V.p_value(g, "not_worse", margin)
    assert (p < 1 - V.LEVEL) == (V.not_worse(g, margin) != V.UNRESOLVED) or abs(abs(mean + margin) - half) < 1e-9


@given(mean=st.floats(-1, 1), half=st.floats(0.001, 1), rule=st.sampled_from(["exceeds", "not_worse"]),
       margins=st.lists(st.floats(0, 1), min_size=2, max_size=6))
@settings(max_examples=200, deadline=None)
def test_a_one_sided_verdict_changes_monotonically_with_its_margin(mean, half, rule, margins):
    """Raising the margin can only move "exceeds" from holds towards does not hold (and
    "not_worse" the other way); margin_sensitivity and flip_margin agree."""
    v = V.judge("c", "", "", V.Gap(mean, half, 8, half, 0.0), rule, 0.0)
    order = [V.HOLDS, V.UNRESOLVED, V.FAILS] if rule == "exceeds" else [V.FAILS, V.UNRESOLVED, V.HOLDS]
    seen = [order.index(r) for _, r in V.margin_sensitivity(v, sorted(margins))]
    assert seen == sorted(seen)
    lo, hi = V.flip_margin(v)
    for m, r in V.margin_sensitivity(v, sorted(margins)):
        if math.isfinite(lo) and m < lo - 1e-9:
            assert r == order[0]
        if math.isfinite(hi) and m > hi + 1e-9:
            assert r == order[2]


@pytest.mark.parametrize("rule, margin", [("exceeds", 0.0), ("not_worse", 0.02), ("close", 0.02)])
def test_dropped_seeds_count_against_every_rule(rule, margin):
    """A claim that holds on the seeds that survived cannot hold once any seed was dropped because
    its run diverged (the survivors are selected on the outcome); "does not hold" stays reachable."""
    base = 0.8 + 0.005 if rule == "exceeds" else 0.8
    good = V.paired_gap(base + 0.01 + TIGHT, [0.8] * 8) if rule != "close" else V.paired_gap(0.8 + TIGHT, [0.8] * 8)
    assert V.judge("c", "", "", good, rule, margin).verdict == V.HOLDS
    with_drop = V.judge("c", "", "", good, rule, margin, dropped=3)
    assert with_drop.verdict == V.UNRESOLVED and with_drop.p == 1.0
    assert V.holm([with_drop])["c"].verdict == V.UNRESOLVED
    bad = V.paired_gap(0.7 + TIGHT, [0.8] * 8)
    assert V.judge("c", "", "", bad, rule, margin, dropped=3).verdict == V.FAILS


def test_at_margin_re_judges_at_the_verdicts_own_level():
    g = V.paired_gap(0.83 + 3 * TIGHT, [0.8] * 8)
    v = V.holm([V.judge("a", "", "", g, "exceeds", 0.02), V.judge("b", "", "", g, "exceeds", 0.0)])["a"]
    assert v.family == 2 and v.at_margin(0.01).level == v.level
    assert [r for _, r in V.margin_sensitivity(v, [0.01, 0.02, 0.04])] == [V.HOLDS, V.HOLDS, V.FAILS]
    with pytest.raises(ValueError, match="margin"):
        v.at_margin(-1.0)
