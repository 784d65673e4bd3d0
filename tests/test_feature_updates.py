"""The feature-updates sweep (book/feature_updates.md): periods that give the asked-for number of
updates, and its claims on constructed rows (hold, fail, cannot resolve)."""

import math

import pytest

from itlin.book import runner
from itlin.book import verdicts as V
from itlin.book.experiments import ParameterError
from itlin.book.experiments.main import _setup as S
from itlin.book.experiments.main import feature_updates as FU


@pytest.mark.parametrize("steps", [40, 400, 1200, 3001])
def test_periods_give_the_asked_for_updates_or_the_nearest_below(steps):
    for u in (1, 2, 3, 4, 8, 12, 16, 32):
        if u >= steps:
            continue
        K = FU.period(u, steps)
        got = S.updates_of(K, steps)
        assert got <= u and K * (got + 1) >= steps  # the last phase runs to the end of the budget
        if steps > u * (u + 1):                       # then a period gives exactly u
            assert got == u
    assert S.updates_of(math.inf, 400) == 0


def _rows(gaps: dict, *, sweep="full", steps=400, base=(0.80, 0.81, 0.79, 0.80, 0.805)):
    rows = [{"sweep": sweep, "K": 1.0, "seed": s, "test": b, "updates": steps, "status": "completed",
             "target_steps": steps} for s, b in enumerate(base)]
    for u, gap in gaps.items():
        K = float(FU.period(u, steps))
        rows += [{"sweep": sweep, "K": K, "seed": s, "test": b + g, "updates": S.updates_of(K, steps),
                  "status": "completed", "target_steps": steps} for s, (b, g) in enumerate(zip(base, gap))]
    return rows


def test_a_diverged_run_neither_renames_its_setting_nor_counts_for_close():
    """A run that diverged made fewer feature updates than its setting: the claim keeps the
    setting's count (16 here, not the 6 of the first seed, which diverged at step 160), and a
    dropped seed keeps "close" from holding."""
    rows = _rows({16: [0.0, 0.001, -0.001, 0.0, 0.0]})
    first = next(r for r in rows if r["K"] > 1)
    first.update(status="diverged at step 160", updates=6)
    assert [u for u, _, _ in FU.curve(rows)] == [16]
    vs = V.Verdicts(FU.judge_rows(rows, n_test=100_000, margin=0.02))
    assert vs.ids == ("full.u16",) and vs["full.u16"].dropped == 1 and vs["full.u16"].verdict == V.UNRESOLVED


def test_claims_hold_fail_and_stay_unresolved_on_constructed_rows():
    rows = _rows({1: [-0.10] * 5, 2: [0.04, -0.04, 0.03, -0.03, 0.0], 8: [0.001, -0.001, 0.0, 0.002, -0.002]})
    vs = V.Verdicts(FU.judge_rows(rows, n_test=100_000, margin=0.02))
    assert vs.ids == ("full.u1", "full.suffices_u2", "full.u2", "full.suffices_u8", "full.u8", "full.closes")
    assert [vs[i].verdict for i in vs.ids] == [V.FAILS, V.UNRESOLVED, V.UNRESOLVED, V.HOLDS, V.HOLDS, V.HOLDS]
    assert [v.id for v in vs if v.headline] == ["full.suffices_u2", "full.suffices_u8"]
    assert vs["full.suffices_u2"].rule == "not_worse" and vs["full.u2"].rule == "close"
    assert "8-12" in vs["full.u8"].paper and "2-3" in vs["full.u2"].paper and "8-12" in vs["full.suffices_u8"].paper
    # two updates ending well above K=1 suffice (the paper's claim), though they are not "close"
    above = V.Verdicts(FU.judge_rows(_rows({2: [0.05, 0.051, 0.049, 0.05, 0.05]}), n_test=100_000, margin=0.02))
    assert above["full.suffices_u2"].verdict == V.HOLDS and above["full.u2"].verdict == V.FAILS
    assert FU.first_close(vs) == 8
    assert FU.first_close(V.Verdicts([vs["full.u1"]])) is None


def test_the_mini_batch_rows_quote_what_the_paper_says_of_its_mini_batch_runs():
    """The workshop's "2-3 updates" is said of its full-batch runs; of SGD it says more are needed."""
    assert "2-3" in FU.paper_says("full", 2) and "caught up" in FU.paper_says("full", 3)
    for u in (2, 3):
        assert "caught up" not in FU.paper_says("mini", u) and "more feature updates" in FU.paper_says("mini", u)
    assert FU.paper_says("mini", 8) == FU.paper_says("full", 8) == FU.PAPER_SAYS[8]


def test_a_gap_that_does_not_shrink_fails_the_trend_claim():
    rows = _rows({1: [-0.001] * 5, 16: [-0.05, -0.051, -0.049, -0.05, -0.05]})
    vs = V.Verdicts(FU.judge_rows(rows, n_test=100_000, margin=0.02))
    assert vs["full.closes"].verdict == V.FAILS and vs["full.u16"].verdict == V.FAILS


@pytest.mark.parametrize("params, message", [
    ({"updates": [1, 1]}, "repeated"),
    ({"mini_updates": [3]}, "mini_updates must be among updates"),
    ({"updates": [1, 400]}, "need more than steps=400"),
    ({"steps": 10, "eval_every": 20}, "eval_every=20 is more than steps=10"),
])
def test_bad_parameters_fail_before_any_compute(params, message, tmp_path):
    with pytest.raises(ParameterError, match=message):
        runner.run("feature_updates", params, results_dir=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_tiny_run_has_the_periods_and_the_claims():
    rec = runner.run("feature_updates", {"scale": "tiny"}, progress=False, verbose=False)
    assert rec.completed
    runs = {(r["sweep"], int(r["K"]) if math.isfinite(r["K"]) else r["K"]) for r in FU.rows(rec)}
    assert runs == {("full", 1), ("full", 20), ("full", 8), ("mini", 1), ("mini", 200)}
    ids = V.Verdicts(FU.claims(rec)).ids
    assert ids == ("full.u1", "full.u4", "full.closes", "mini.u1")
    assert {r["updates"] for r in FU.rows(rec) if r["K"] == 8} == {4}


@pytest.mark.slow
def test_records_of_consecutive_seeds_on_one_subset_pool_to_the_record_of_all(tmp_path):
    """``data_seed``: records of consecutive seeds that share their subsets give, pooled, every run
    of the one record of all those seeds bit for bit (a long record made in parts by several
    processes judges the same runs); without it each part would draw its own subset."""
    from itlin.book.experiments.main import _rows as R

    tiny = {"scale": "tiny", "updates": [1], "mini_updates": [1], "steps": 20, "eval_every": 10}
    whole = runner.run("feature_updates", {**tiny, "seed": 3, "seeds": 2}, results_dir=tmp_path / "whole",
                       progress=False, verbose=False)
    parts = [runner.run("feature_updates", {**tiny, "seed": s, "seeds": 1, "data_seed": 3},
                        results_dir=tmp_path / "parts", progress=False, verbose=False) for s in (3, 4)]
    pooled = R.pool_seeds(parts)
    key = lambda rows: sorted((r["setting"], r["seed"], r["test"], r["train"]) for r in rows)
    assert key(FU.rows(pooled)) == key(FU.rows(whole)) and len(FU.rows(whole)) == 8
    own = runner.run("feature_updates", {**tiny, "seed": 4, "seeds": 1}, results_dir=tmp_path / "own",
                     progress=False, verbose=False)
    assert key(FU.rows(own)) != key([r for r in FU.rows(whole) if r["seed"] == 4])


def test_a_training_pool_keeps_every_seeds_subset_out_of_the_enlarged_test_set():
    """train_pool: each seed draws its training subset from one fixed pool, and the final test set
    is the test split plus every training example outside the pool (issue 44's record design)."""
    import numpy as np

    from itlin import data
    from itlin.book.experiments.main import _setup as S

    full = data.load("mnist1d")
    r = {"dataset": "mnist1d", "n_train": 100, "n_test": 200, "seed": 3, "train_pool": 1000, "n_test_final": 15_000}
    ds, (xf, yf) = S.load_with_final(S.SparseParams.rebuild(r))
    ds2, (xf2, _) = S.load_with_final(S.SparseParams.rebuild({**r, "seed": 4}))
    inside, rest = S.pool_split(full.y_train, 1000)
    assert ds.n_train == 100 and ds.n_test == 200 and xf.shape[0] == full.n_test + full.n_train - 1000
    assert np.array_equal(np.asarray(xf), np.asarray(xf2))  # one test set for every seed
    for d in (ds, ds2):
        idx = np.asarray(d.meta["train_index"])
        assert set(idx) <= set(inside) and np.array_equal(full.x_train[idx], d.x_train)
    assert set(ds.meta["train_index"]) != set(ds2.meta["train_index"])  # each seed its own subset
    held = np.asarray(xf)[full.n_test:]
    assert np.array_equal(held, full.x_train[rest]) and np.array_equal(np.asarray(yf)[full.n_test:], full.y_train[rest])
    with pytest.raises(ValueError, match="train_pool"):
        S.pool_split(full.y_train, full.n_train)
    with pytest.raises(ValueError, match="train_pool=50 is smaller than n_train"):
        FU.UpdatesParams.from_dict({"scale": "tiny", "train_pool": 50, "n_train": 256}).check()


@pytest.mark.slow
def test_subset_per_seed_gives_each_seed_its_own_subset_and_the_runs_of_the_one_subset_design(tmp_path):
    """With subset_per_seed each seed trains on the subsets its own seed draws: the runs of seed s
    are those of a one-seed run at seed s (whose subsets are drawn with s), bit for bit."""
    import numpy as np

    base = {"scale": "tiny", "updates": [1, 4], "steps": 20, "eval_every": 10}
    both = runner.run("feature_updates", {**base, "seed": 5, "seeds": 2, "subset_per_seed": True},
                      results_dir=tmp_path, progress=False, verbose=False)
    one = runner.run("feature_updates", {**base, "seed": 6, "seeds": 1}, results_dir=tmp_path, progress=False,
                     verbose=False)
    shared = runner.run("feature_updates", {**base, "seed": 5, "seeds": 2}, results_dir=tmp_path, progress=False,
                        verbose=False)
    for tag in ("full K=1 seed=6", "full K=4 seed=6"):
        assert np.array_equal(both.history(tag).loss, one.history(tag).loss)
    # the one-subset design trains seed 6 on seed 5's subset: other numbers
    assert not np.array_equal(both.history("full K=1 seed=6").loss, shared.history("full K=1 seed=6").loss)
    with pytest.raises(ParameterError, match="data_seed"):
        runner.run("feature_updates", {**base, "subset_per_seed": True, "data_seed": 3}, results_dir=tmp_path,
                   progress=False, verbose=False)


def test_a_complete_planned_record_reads_its_interval_in_points(monkeypatch):
    """The chapter's reading of a complete pre-registered record (the full-batch one of 955abd6)
    says where the interval lies in the same points as its gap: the two numbers are the gap's
    ends, which the gap text gives as mean and half-width (a reading once said "0.0 and 0.0")."""
    import re

    from itlin.book.chapters import feature_updates as C

    monkeypatch.setattr(C, "display", lambda *a, **k: None)
    text = C._pooled_planned(C.FM6, C.FM6_PLAN, "full.suffices_u2", "fu_fm6", "Two updates")["fu_fm6_reading"].data
    mean, half = map(float, re.search(r"(-?\d+\.\d) ± (\d+\.\d) points", text).groups())
    lo, hi = map(float, re.search(r"between (\d+\.\d) and (\d+\.\d) points below", text).groups())
    assert abs(-mean - half - lo) <= 0.11 and abs(-mean + half - hi) <= 0.11, text


def test_the_demos_per_seed_gaps_are_the_pairs_the_claims_average():
    """The demo's dots (figures.feature_updates.seed_gaps) pair each seed's run with K=1 of that seed,
    leave out a seed whose run diverged, and average to the verdict's gap (computed by gap_verdict)."""
    from itlin.book.figures import feature_updates as F

    rows = _rows({2: [0.04, -0.04, 0.03, -0.03, 0.01], 8: [0.001, -0.001, 0.0, 0.002, -0.002]})
    next(r for r in rows if r["K"] == FU.period(8, 400) and r["seed"] == 3).update(status="diverged at step 100")
    vs = V.Verdicts(FU.judge_rows(rows, n_test=100_000, margin=0.02))
    g2, g8 = F.seed_gaps(rows, 2), F.seed_gaps(rows, 8)
    assert list(g2) == [0, 1, 2, 3, 4] and list(g8) == [0, 1, 2, 4]
    assert g2 == pytest.approx(dict(enumerate([0.04, -0.04, 0.03, -0.03, 0.01])), abs=1e-12)
    assert sum(g2.values()) / 5 == pytest.approx(vs["full.u2"].mean, abs=1e-12)
    assert sum(g8.values()) / 4 == pytest.approx(vs["full.u8"].mean, abs=1e-12) and vs["full.u8"].dropped == 1
    with pytest.raises(KeyError, match="no run with 4 feature updates"):
        F.seed_gaps(rows, 4)
