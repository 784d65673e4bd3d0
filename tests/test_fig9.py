"""Main paper Fig. 9 (itlin.book.experiments.main.fig9_damping): the damping sweep and its analysis."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin import data, models
from itlin.book import runner
from itlin.book.experiments import ParameterError
from itlin.book.experiments.main import fig9_damping as f9
from itlin import gauss_newton_fit


@pytest.fixture(scope="module")
def tiny(session_results):
    return runner.run(f9.NAME, {"scale": "tiny"}, results_dir=session_results, progress=False, verbose=False)


def test_tiny_scale_runs_and_returns_what_the_chapter_needs(tiny):
    sizes = f9.SCALES["tiny"]
    d, s, m = len(sizes["dampings"]), sizes["seeds"], sizes["samples"]
    t = len(f9.trace_steps(sizes["gn_steps"]))
    assert tiny.completed
    for key in ("train_rmse", "test_rmse", "steps", "diverged", "reached_tol", "still_descending"):
        assert tiny[key].shape == (d, s), key
    assert tiny["train_rmse_trace"].shape == (d, s, t)
    assert tiny["functions"].shape == (d, m, 1000)
    assert tiny["x_test"].shape == tiny["y_test"].shape == (1000,)
    assert tiny["x_train"].shape == tiny["y_train"].shape == (20,)
    np.testing.assert_allclose(tiny["dampings"], sizes["dampings"])
    assert tiny["diverged"].dtype == bool and tiny["steps"].max() <= sizes["gn_steps"]
    res = tiny.meta["resolved"]  # the runner stores the resolved parameters, the run its derived sizes
    assert res["seeds"] == s and res["gn_steps"] == sizes["gn_steps"] and res["samples"] == m
    assert res["init"] == "flax" and res["learning_rate"] == 1.0 and tiny.meta["dtype"] == "float64"
    # the learnt functions are those of seeds 0..m-1: their test RMSE matches the record's
    rmse = np.sqrt(np.mean((tiny["functions"] - tiny["y_test"]) ** 2, axis=-1))
    np.testing.assert_allclose(rmse, tiny["test_rmse"][:, :m], rtol=1e-10)
    # the trace starts at the initial loss (the same network for every damping) and ends where the run did
    np.testing.assert_allclose(tiny["train_rmse_trace"][:, :, 0], tiny["train_rmse_trace"][:1, :, 0].repeat(d, 0))
    done = ~tiny["diverged"] & ~tiny["reached_tol"]
    assert np.all(np.isfinite(tiny["train_rmse_trace"][:, :, -1][done]))
    # the summary: one row per damping, the counts adding up; the claims: every id, prefixed by the init
    rows = f9.summary(tiny)
    assert [r["λ"] for r in rows] == [f9.fmt_lam(v) for v in sizes["dampings"]]
    assert all(sum(map(int, r[f9.RUN_COUNTS].split(" / "))) == s for r in rows)
    assert [v.id for v in f9.claims(tiny)] == [f"flax.{c}" for c in f9.CLAIM_IDS]
    assert f9.EXPERIMENT.summary is f9.summary and f9.EXPERIMENT.claims is f9.claims
    # the figures: a scatter, four panels of learnt functions (or one per damping), training, a comparison
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from itlin.book.figures import main as figures

    drawn = [len(f.axes) for f in (figures.fig9(tiny), figures.fig9_functions(tiny),
                                   figures.fig9_functions(tiny, every=True), figures.fig9_training(tiny),
                                   figures.fig9_compare([tiny, tiny], ["a", "b"]))]
    assert drawn[0] == 1 and drawn[1] == 4 and drawn[2] >= d and drawn[3] == 3 and drawn[4] == 1
    plt.close("all")


def test_vmapped_sweep_equals_one_run_alone():
    with jax.enable_x64(True):
        ds = data.load("quintic")
        x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
        xt, yt = jnp.asarray(ds.x_test, jnp.float64), jnp.asarray(ds.y_test, jnp.float64)
        model = models.mlp()
        params = f9.init_params(model, x, 3, seed=5)
        steps, lam, pick = 12, 10.0, 2
        sweep = f9.make_sweep(model, x, y, xt, yt, gn_steps=steps, learning_rate=1.0, train_tol=0.0, samples=3)
        batched = sweep(params, lam)
        alone = jax.tree_util.tree_map(lambda a: a[pick], params)
        # the same run with the library alone: no vmap, damping a Python float
        apply = model.bind()
        p, trace = gauss_newton_fit(apply, alone, x, y, steps, damping=lam, learning_rate=1.0, ntk_fn=model.ntk_fn,
                                    reduction="sum", solve="cholesky")
        test_rmse = float(jnp.sqrt(jnp.mean((apply(p, xt) - yt) ** 2)))
        train_rmse = float(jnp.sqrt(jnp.mean((apply(p, x) - y) ** 2)))
        outputs = np.asarray(apply(p, xt))[:, 0]
        single = sweep(jax.tree_util.tree_map(lambda a: a[None], alone), lam)
    assert outputs.dtype == np.float64
    assert int(trace.steps) == steps and not bool(trace.diverged)
    np.testing.assert_allclose(batched["test_rmse"][pick], test_rmse, rtol=1e-10)
    np.testing.assert_allclose(batched["train_rmse"][pick], train_rmse, rtol=1e-10)
    np.testing.assert_allclose(batched["functions"][pick], outputs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(batched["train_rmse_trace"][pick],
                               np.sqrt(2 * np.asarray(trace.loss)[f9.trace_steps(steps)] / 20), rtol=1e-10)
    for key in ("train_rmse", "test_rmse", "train_rmse_trace"):
        np.testing.assert_allclose(single[key][0], batched[key][pick], rtol=1e-10)
    assert single["steps"][0] == batched["steps"][pick] == steps


class _FakeRecord:
    """The few fields masks / summary read, with chosen values."""

    def __init__(self, train, diverged, threshold):
        train = np.asarray(train, float)
        self.arrays = {"dampings": np.array([1e-3, 1.0]), "train_rmse": train, "test_rmse": train + 0.1,
                       "diverged": np.asarray(diverged, bool), "steps": np.full(train.shape, 7),
                       "reached_tol": np.zeros(train.shape, bool), "still_descending": np.zeros(train.shape, bool),
                       "train_rmse_trace": train[..., None]}
        self.params = {"rmse_threshold": threshold}
        self.meta = {}

    def __getitem__(self, key):
        return self.arrays[key]


def test_dropping_rule_drops_exactly_runs_over_the_threshold_and_diverged_ones():
    train = [[0.1, 2.5, 2.5000001, 40.0, np.nan], [1.0, 3.0, 0.2, 2.4, 0.3]]
    diverged = [[False, False, False, False, False], [False, False, False, False, True]]
    rec = _FakeRecord(train, diverged, threshold=2.5)
    kept, dropped, div = f9.masks(rec)
    t = np.asarray(train)
    np.testing.assert_array_equal(kept, (t <= 2.5) & ~np.asarray(diverged))  # NaN: dropped, counted as diverged
    assert [(k.sum(), d.sum(), v.sum()) for k, d, v in zip(kept, dropped, div)] == [(2, 2, 1), (3, 1, 1)]
    rows = f9.summary(rec)
    assert [r[f9.RUN_COUNTS] for r in rows] == ["2 / 2 / 1", "3 / 1 / 1"]
    assert rows[1]["mean [95% CI]"].startswith(f"{np.mean([1.1, 0.3, 2.5]):.3g} [")  # over the kept runs only
    np.testing.assert_array_equal(f9.masks(rec, threshold=1.0)[0], (t <= 1.0) & ~np.asarray(diverged))
    # the columns the claims read: NaN where a run is dropped
    assert np.isnan(f9.columns(rec)).sum() == (~kept).sum()


def test_the_real_records_drop_rule(tiny):
    thr = float(np.median(tiny["train_rmse"]))
    kept = f9.masks(tiny, threshold=thr)[0]
    np.testing.assert_array_equal(kept, (tiny["train_rmse"] <= thr) & ~tiny["diverged"])
    assert 0 < kept.sum() < kept.size


@pytest.mark.parametrize("params, needle", [
    ({"dampings": [1.0, -0.1]}, "dampings"),
    ({"dampings": [0.0, 1.0]}, "dampings"),
    ({"dampings": [1.0, 1.0]}, "distinct"),
    ({"dampings": [None, 1.0]}, "dampings"),
    ({"seeds": 0}, "seeds"),
    ({"gn_steps": 0}, "gn_steps"),
    ({"learning_rate": 0}, "learning_rate"),
    ({"rmse_threshold": -1}, "rmse_threshold"),
    ({"samples": 0}, "samples"),
    ({"scale": "huge"}, "scale"),
    ({"damping": [1.0]}, "did you mean 'dampings'"),
])
def test_bad_parameters_fail_before_anything_runs(params, needle, tmp_path):
    with pytest.raises(ParameterError, match=needle):
        runner.run(f9.NAME, params, results_dir=tmp_path, progress=False, verbose=False)
    assert not any(tmp_path.iterdir())


def test_scale_fills_in_only_what_is_not_given(tmp_path):
    r = lambda **p: f9.Fig9Params.from_dict(p).resolved()
    assert r(scale="tiny", seeds=2)["gn_steps"] == f9.SCALES["tiny"]["gn_steps"] and r(scale="tiny", seeds=2)["seeds"] == 2
    assert all(math.isfinite(v) for v in f9.SCALES["paper"]["dampings"])
    # every scale's largest damping gets the same gradient-flow time, gn_steps / lambda = 20
    assert {s["gn_steps"] / max(s["dampings"]) for k, s in f9.SCALES.items() if k != "tiny"} == {20.0}
    # samples come from the scale; a run keeps at most one per seed, and its resolved parameters
    # stay those asked for (so a run of fewer seeds matches a record of more: runner.matching_record)
    rec = runner.run(f9.NAME, {"scale": "tiny", "seeds": 2, "gn_steps": 3, "dampings": [1.0, 10.0]}, results_dir=tmp_path,
                     progress=False, verbose=False)
    assert rec["functions"].shape == (2, 2, 1000) and rec.meta["resolved"]["samples"] == f9.SCALES["tiny"]["samples"]


def test_a_seed_gives_the_same_numbers_in_a_sweep_of_any_number_of_seeds(tmp_path):
    """The sweep runs in pieces of SEED_CHUNK initialisations, so a run of a few seeds repeats, to
    the last digit, those seeds of a record with many (Gauss-Newton at small damping amplifies the
    rounding of a vectorised program of another batch size)."""
    p = {"scale": "tiny", "gn_steps": 40, "dampings": [1e-4, 1.0]}
    few = runner.run(f9.NAME, {**p, "seeds": f9.SEED_CHUNK}, results_dir=tmp_path, progress=False, verbose=False)
    many = runner.run(f9.NAME, {**p, "seeds": 3 * f9.SEED_CHUNK}, results_dir=tmp_path, progress=False, verbose=False)
    assert runner.compare_seeds(few, many).identical


class _Crash(Exception):
    pass


def test_an_interrupted_sweep_resumes_at_the_damping_it_had_reached(tiny, tmp_path, monkeypatch):
    real = f9.make_sweep
    calls, crash = [], [True]

    def make_sweep(*args, **kwargs):
        sweep = real(*args, **kwargs)

        def interrupted(params, damping):
            calls.append(damping)
            if len(calls) == 2 and crash[0]:
                raise _Crash("the process dies here")
            return sweep(params, damping)

        return interrupted

    monkeypatch.setattr(f9, "make_sweep", make_sweep)
    with pytest.raises(_Crash):
        runner.run(f9.NAME, {"scale": "tiny"}, results_dir=tmp_path, progress=False, verbose=False)
    plan = runner.plan(f9.NAME, {"scale": "tiny"}, results_dir=tmp_path)
    assert len(list((plan.path / runner.WORK_DIR).glob("stage-*.npz"))) == 1
    calls.clear()
    crash[0] = False
    rec = runner.run(f9.NAME, {"scale": "tiny"}, results_dir=tmp_path, progress=False, verbose=False)
    assert calls == f9.SCALES["tiny"]["dampings"][1:]  # the first damping came from its stage file
    for key in ("train_rmse", "test_rmse", "steps", "train_rmse_trace", "functions"):
        np.testing.assert_array_equal(rec[key], tiny[key])


def _sweep(means, spread, seeds=32, seed=0, lams=None):
    """Test RMSE (D, S): log-normal around ``means`` with log10 spread ``spread`` per damping."""
    rng = np.random.default_rng(seed)
    sp = np.broadcast_to(np.asarray(spread, float), (len(means),))
    v = np.asarray(means, float)[:, None] * 10 ** (sp[:, None] * rng.standard_normal((len(means), seeds)))
    return (np.logspace(-6, 2, len(means)) if lams is None else np.asarray(lams)), v


def _verdicts(lams, v, **kw):
    return {x.id: x.verdict for x in f9.judge_columns(lams, v, **kw)}


def test_fig9_claims_hold_on_a_falling_sweep_with_a_shrinking_tail():
    lams, v = _sweep([2.0, 1.0, 0.5, 0.2, 0.1], [0.2, 0.15, 0.1, 0.05, 0.02])
    v[0, :8] = 5.0  # a tail of high-RMSE runs at the smallest damping
    got = _verdicts(lams, v, best_quantile=0.1, similar_factor=1.5)
    assert got["mean.falls"] == "holds"
    assert got["spread.narrows"] == got["tail.shrinks"] == got["mean.steady"] == "holds"
    assert got["best.similar"] == "does not hold"  # the best tenth at 2.0 x 10^-0.26 is not 0.1 x 10^-0.03
    # ids are prefixed, in order
    assert [x.id for x in f9.judge_columns(lams, v, prefix="torch.")] == [f"torch.{c}" for c in f9.CLAIM_IDS]


def test_fig9_claims_fail_on_a_rising_sweep_and_a_mid_grid_rise():
    lams, v = _sweep([0.1, 0.2, 0.5, 1.0, 2.0], 0.05)
    got = _verdicts(lams, v)
    assert got["mean.falls"] == got["spread.narrows"] == "does not hold"
    assert got["mean.steady"] == "does not hold"
    lams, v = _sweep([2.0, 1.0, 0.2, 0.5, 0.1], 0.05)  # falls end to end, but rises in the middle
    got = _verdicts(lams, v)
    assert got["mean.falls"] == "holds" and got["mean.steady"] == "does not hold"


def test_fig9_claims_cannot_resolve_on_noise_and_the_best_runs_can_be_similar():
    lams, v = _sweep([1.0, 0.9, 1.1, 0.95, 1.0], 0.4, seeds=6)
    got = _verdicts(lams, v)
    assert got["mean.falls"] == got["spread.narrows"] == "cannot resolve"
    assert got["tail.shrinks"] == "cannot resolve"  # the same share above 1 at both ends, give or take
    lams, v = _sweep([1.0, 0.5, 0.45, 0.2], [0.05, 0.05, 0.3, 0.05], seeds=8)  # one noisy step: not resolved
    assert _verdicts(lams, v)["mean.steady"] == "cannot resolve"
    # the same distribution at both ends, many seeds: the best tenth agrees within a factor 1.5
    lams, v = _sweep([0.3, 0.3], 0.1, seeds=400)
    assert _verdicts(lams, v)["best.similar"] == "holds"


def test_the_median_and_trimmed_mean_are_robustness_rows_of_one_claim_not_verdicts():
    # three statistics of one effect make one claim: the mean, as the paper states it
    lams, v = _sweep([2.0, 1.0, 0.5, 0.2, 0.1], [0.2, 0.15, 0.1, 0.05, 0.02])
    rows = f9.judge_columns(lams, v)
    assert not any(x.id.startswith(("median.", "trimmed.")) for x in rows)
    assert sum(x.id.endswith(".falls") for x in rows) == 1 and len(rows) == len(f9.CLAIM_IDS) == 5
    mean = {x.id: x for x in rows}["mean.falls"]
    assert "median" in mean.detail and "trimmed mean" in mean.detail and "not verdicts" in mean.detail
    table = f9.robustness_columns(lams, v)
    assert [r["statistic"] for r in table] == ["mean (the claim)", "median", "10%-trimmed mean"]
    assert [r["interval lies"] for r in table] == ["above zero"] * 3
    # the robustness rows can disagree with the claim: a mean carried by one outlier at the smallest
    # damping, with the median and trimmed mean flat, reads "across zero" for those two
    rng = np.random.default_rng(1)
    flat = 0.5 * 10 ** (0.05 * rng.standard_normal((2, 40)))
    flat[0, 0] = 1e4
    table = f9.robustness_columns([1e-3, 1.0], flat)
    assert [r["interval lies"] for r in table[1:]] == ["across zero", "across zero"]
    # and below zero when the bulk rises while the tail falls
    rise = np.vstack([0.3 * 10 ** (0.02 * rng.standard_normal(40)), 0.6 * 10 ** (0.02 * rng.standard_normal(40))])
    assert [r["interval lies"] for r in f9.robustness_columns([1e-3, 1.0], rise)] == ["below zero"] * 3


def test_dropped_runs_count_against_the_best_runs():
    lams, v = _sweep([0.3, 0.3], 0.05, seeds=40)
    v[0, :10] = np.nan  # a quarter of the smallest damping's runs dropped: its best tenth is no longer 0.3
    assert f9.stats(v)["best"][0] > f9.stats(v)["best"][1]
    s = f9.stats(np.array([0.1, 0.2, np.nan, np.nan, np.nan]), best_quantile=0.5)
    assert math.isinf(s["best"]) and s["tail"] == 0.0


def test_fig9_statistics_and_the_paired_bootstrap():
    v = np.array([[0.1, 0.2, 0.4, 0.3, 0.25, 0.35, 0.15, 0.5, 9.0, np.nan]])
    s = f9.stats(v, high_rmse=1.0, best_quantile=0.1)
    kept = v[0][~np.isnan(v[0])]
    assert s["mean"][0] == pytest.approx(kept.mean()) and s["median"][0] == pytest.approx(np.median(kept))
    assert s["trimmed"][0] == pytest.approx(np.sort(kept)[0:9].mean())  # 10% of 9 runs: none cut
    assert s["std"][0] == pytest.approx(kept.std(ddof=1)) and s["tail"][0] == pytest.approx(1 / 9)
    b = f9.bootstrap(np.vstack([v, v]), resamples=50)
    assert b["mean"].shape == (2, 50)
    np.testing.assert_array_equal(b["mean"][0], b["mean"][1])  # the same resampled seeds in every damping
    np.testing.assert_array_equal(f9.bootstrap(v, resamples=50)["median"], f9.bootstrap(v, resamples=50)["median"])
    assert f9.fmt_lam(10 ** -0.5) == "0.316" and f9.fmt_lam(1e-6) == "1e-06" and f9.fmt_lam(100.0) == "100"


def test_fig9_flags_the_same_columns_for_any_record():
    row = dict(runs=20, still_descending=9, stalled=0, train_median=1e-6, worst=0.1, median=0.07)
    assert f9.flags(row) == ["still descending"]
    assert f9.flags(dict(row, still_descending=0, stalled=18, train_median=0.45)) == ["stalled"]
    assert f9.flags(dict(row, still_descending=0, worst=40.0, median=0.4)) == ["outlier-driven"]


def test_blowup_is_divergence_in_gauss_newton_and_in_recorded_traces():
    f = lambda p, x: x @ p
    x, y = jnp.eye(2), jnp.asarray([1.0, -1.0])
    _, plain = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=30.0, damping=1.0)
    assert not bool(plain.diverged) and int(plain.steps) == 20 and float(plain.loss[-1]) > 1e10  # non-finite only
    _, tr = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=30.0, damping=1.0, blowup=100.0)
    # loss 0.5 -> 40.5 -> 3280.5: the third exceeds 100 x 0.5, so the run stops there, diverged, and
    # the step that made it is undone (the parameters before the bad step: one step taken)
    assert bool(tr.diverged) and int(tr.steps) == 1
    _, ok = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=1.0, damping=1e-3, blowup=100.0)
    assert not bool(ok.diverged)
    with pytest.raises(ValueError, match="blowup"):
        gauss_newton_fit(f, jnp.zeros(2), x, y, 5, blowup=1.0)
    # the same rule on logged train RMSE traces (loss ~ RMSE^2): 10x the RMSE is 100x the loss
    traces = np.array([[1.0, 9.9, 0.5, np.nan], [1.0, 10.1, 0.5, np.nan], [2.0, np.inf, np.nan, np.nan]])
    assert f9.blown_up(traces, f9.BLOWUP).tolist() == [False, True, True]
    assert f9.blown_up(traces, blowup=1000.0).tolist() == [False, False, True]


    class Rec(dict):
        params = {"blowup": None, "rmse_threshold": 2.5}
        meta = {}

    rec = Rec(diverged=np.array([[False, False, True]]), train_rmse_trace=traces[None],
              train_rmse=np.array([[0.5, 3.0, np.nan]]))
    assert f9.diverged(rec).tolist() == [[False, False, True]]                   # the record's rule: non-finite
    assert f9.diverged(rec, blowup=100.0).tolist() == [[False, True, True]]      # the same rule as fit's
    Rec.params = {"blowup": 100.0, "rmse_threshold": 2.5}
    assert f9.diverged(rec).tolist() == [[False, True, True]]


def test_fig9_demo_draws_the_records_own_runs_at_each_damping(tiny):
    """The chapter's demo shows the record: per damping, its sampled seeds' learnt functions, the mean
    over its kept runs' test RMSE, and that damping's row of the chapter's summary; legibly."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from itlin.book.figures import main as figures
    from itlin.book.plotting import MIN_TEXT_PX, smallest_text

    demo = figures.fig9_demo(tiny)
    (knob,) = demo.knobs
    np.testing.assert_array_equal(knob.values, tiny["dampings"])
    rows = f9.summary(tiny)
    cols = f9.columns(tiny)
    for d, lam in enumerate(tiny["dampings"]):
        view = demo.compute(damping=float(lam))
        top, bottom = view.figure.axes
        drawn = [np.asarray(line.get_ydata()) for line in top.lines if len(line.get_ydata()) == tiny["x_test"].size]
        for s, f in enumerate(tiny["functions"][d]):  # each sampled seed's function, as the record holds it
            assert any(np.array_equal(y, np.clip(f, tiny["y_test"].min() - 2.5, tiny["y_test"].max() + 2.5))
                       for y in drawn), (d, s)
        (mean_line,) = [line for line in bottom.lines if line.get_marker() == "D"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a damping whose runs were all dropped
            np.testing.assert_allclose(mean_line.get_ydata(), np.nanmean(cols, axis=1))
        assert view.table == [{k: rows[d][k] for k in figures.FIG9_DEMO_COLUMNS}]
        assert smallest_text(view.figure)[0] >= MIN_TEXT_PX
        plt.close(view.figure)
