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
def tiny(tmp_path_factory):
    return runner.run(f9.NAME, {"scale": "tiny"}, results_dir=tmp_path_factory.mktemp("results"),
                      progress=False, verbose=False)


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
    assert tiny["sample_dampings"].shape == (f9.N_SAMPLE_DAMPINGS,)
    assert tiny["diverged"].dtype == bool and tiny["steps"].max() <= sizes["gn_steps"]
    # the sizes used are recorded
    res = tiny.meta["resolved"]
    assert res["seeds"] == s and res["gn_steps"] == sizes["gn_steps"] and res["samples"] == m
    assert tiny.meta["dtype"] == "float64"
    # the learnt functions are those of seeds 0..m-1: their test RMSE matches the record's
    rmse = np.sqrt(np.mean((tiny["functions"] - tiny["y_test"]) ** 2, axis=-1))
    np.testing.assert_allclose(rmse, tiny["test_rmse"][:, :m], rtol=1e-10)
    # the trace starts at the initial loss (the same network for every damping) and ends where the run did
    np.testing.assert_allclose(tiny["train_rmse_trace"][:, :, 0], tiny["train_rmse_trace"][:1, :, 0].repeat(d, 0))
    done = ~tiny["diverged"] & ~tiny["reached_tol"]
    last = tiny["train_rmse_trace"][:, :, -1]
    assert np.all(np.isfinite(last[done]))
    # analysis: one row per damping, the verdict's ingredients present
    rows = f9.summarize(tiny)
    assert [r["damping"] for r in rows] == sizes["dampings"]
    assert all(r["kept"] + r["dropped_threshold"] + r["diverged"] == s for r in rows)
    check = f9.claim_check(rows)
    assert check["enough"] and {"rho_mean", "rho_std", "mean_falls", "spread_narrows"} <= set(check)


def test_vmapped_sweep_equals_one_run_alone():
    with jax.enable_x64(True):
        ds = data.load("quintic")
        x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
        xt, yt = jnp.asarray(ds.x_test, jnp.float64), jnp.asarray(ds.y_test, jnp.float64)
        model = models.mlp()
        params = f9.init_params(model, x, 3, seed=5)
        steps, lam, pick = 12, 10.0, 2
        sweep = f9.make_sweep(model, x, y, xt, yt, gn_steps=steps, lr=1.0, train_tol=0.0, samples=3)
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
    """The few fields filter_by_damping / summarize read, with chosen values."""

    def __init__(self, train, diverged, threshold):
        train = np.asarray(train, float)
        self.arrays = {"dampings": np.array([1e-3, 1.0]), "train_rmse": train, "test_rmse": train + 0.1,
                       "diverged": np.asarray(diverged, bool), "steps": np.full(train.shape, 7),
                       "reached_tol": np.zeros(train.shape, bool), "still_descending": np.zeros(train.shape, bool)}
        self.params = {"rmse_threshold": threshold}

    def __getitem__(self, key):
        return self.arrays[key]


def test_dropping_rule_drops_exactly_runs_over_the_threshold_and_diverged_ones():
    train = [[0.1, 2.5, 2.5000001, 40.0, np.nan], [1.0, 3.0, 0.2, 2.4, 0.3]]
    diverged = [[False, False, False, False, False], [False, False, False, False, True]]
    rec = _FakeRecord(train, diverged, threshold=2.5)
    kept = f9.kept_mask(rec)
    t = np.asarray(train)
    expected = (t <= 2.5) & ~np.asarray(diverged)  # NaN compares False: dropped (counted as diverged)
    np.testing.assert_array_equal(kept, expected)
    rows = f9.summarize(rec)
    assert [(r["kept"], r["dropped_threshold"], r["diverged"]) for r in rows] == [(2, 2, 1), (3, 1, 1)]
    # statistics over the kept runs only
    assert rows[1]["mean"] == pytest.approx(np.mean([1.1, 0.3, 2.5]))
    # another threshold given explicitly
    np.testing.assert_array_equal(f9.kept_mask(rec, threshold=1.0), (t <= 1.0) & ~np.asarray(diverged))


def test_the_real_records_drop_rule(tiny):
    thr = float(np.median(tiny["train_rmse"]))
    kept = f9.kept_mask(tiny, threshold=thr)
    np.testing.assert_array_equal(kept, (tiny["train_rmse"] <= thr) & ~tiny["diverged"])
    assert 0 < kept.sum() < kept.size


@pytest.mark.parametrize("params, needle", [
    ({"dampings": [1.0, -0.1]}, "dampings"),
    ({"dampings": [0.0, 1.0]}, "dampings"),
    ({"dampings": [1.0, 1.0]}, "distinct"),
    ({"dampings": [None, 1.0]}, "dampings"),
    ({"seeds": 0}, "seeds"),
    ({"gn_steps": 0}, "gn_steps"),
    ({"lr": 0}, "lr"),
    ({"rmse_threshold": -1}, "rmse_threshold"),
    ({"sample_dampings": [0.5], "scale": "tiny"}, "sample_dampings"),
    ({"samples": 9, "seeds": 4}, "samples"),
    ({"scale": "huge"}, "scale"),
    ({"damping": [1.0]}, "did you mean 'dampings'"),
])
def test_bad_parameters_fail_before_anything_runs(params, needle, tmp_path):
    with pytest.raises(ParameterError, match=needle):
        runner.run(f9.NAME, params, results_dir=tmp_path, progress=False, verbose=False)
    assert not any(tmp_path.iterdir())


def test_scale_fills_in_only_what_is_not_given():
    exp = runner.plan(f9.NAME, {}).experiment
    sizes = f9.resolve_sizes(exp.resolve({"scale": "tiny", "seeds": 2}))
    assert sizes["seeds"] == 2 and sizes["samples"] == 2  # samples clipped to seeds when not given
    assert sizes["gn_steps"] == f9.SCALES["tiny"]["gn_steps"]
    sizes = f9.resolve_sizes(exp.resolve({"dampings": [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]}))
    assert sizes["sample_dampings"] == [1e-3, 1e-1, 1.0, 100.0]  # smallest, largest, two spread between
    sizes = f9.resolve_sizes(exp.resolve({"dampings": [3.0, 1.0]}))
    assert sizes["sample_dampings"] == [1.0, 3.0]
    assert all(math.isfinite(v) for v in f9.SCALES["paper"]["dampings"])


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


def _row(lam, mean, std, kept=30):
    return {"damping": lam, "kept": kept, "mean": mean, "median": mean, "trimmed": mean, "std": std, "iqr": std,
            "sem": std / math.sqrt(kept), "min": mean - std, "max": mean + 3 * std}


def test_claim_check_on_made_up_statistics():
    falling = [_row(1e-4, 2.0, 1.0), _row(1e-2, 1.0, 0.5), _row(1.0, 0.5, 0.1), _row(100.0, 0.2, 0.05)]
    c = f9.claim_check(list(reversed(falling)))  # the order of the rows does not matter
    assert c["enough"] and c["mean_falls"] and c["spread_narrows"] and c["monotone_mean"]
    assert c["rho_mean"] == pytest.approx(-1.0) and c["rho_std"] == pytest.approx(-1.0)
    assert c["first_damping"] == 1e-4 and c["best_damping"] == 100.0 and c["mean_rises"] == []
    rising = [_row(r["damping"], 3.0 - r["mean"], 1.2 - r["std"]) for r in falling]
    c = f9.claim_check(rising)
    assert not c["mean_falls"] and not c["spread_narrows"]
    # a rise within two standard errors is noise, a larger one is not
    bumpy = [_row(1e-4, 1.0, 0.3), _row(1e-2, 1.05, 0.3), _row(1.0, 0.5, 0.1), _row(100.0, 0.9, 0.1)]
    c = f9.claim_check(bumpy)
    assert c["mean_rises"] == [100.0] and c["mean_rises_within_noise"] == [1e-2]
    assert c["mean_falls"] and not c["monotone_mean"]
    # runs with fewer than two kept runs do not count; fewer than three dampings: nothing to test
    assert f9.claim_check([_row(1.0, 1.0, 0.1), _row(2.0, 0.5, 0.1), _row(3.0, 0.1, 0.1, kept=1)]) == \
        {"dampings": [1.0, 2.0], "enough": False}


def _srow(lam, mean, std, mn, *, median=None, trimmed=None, runs=20, descending=0, stalled=0, train=1e-6, mx=None,
          half=0.02):
    r = {"damping": lam, "mean": mean, "median": mean if median is None else median,
         "trimmed": mean if trimmed is None else trimmed, "std": std, "iqr": std, "min": mn,
         "max": mean * 3 if mx is None else mx, "kept": runs, "runs": runs, "sem": std / 4,
         "still_descending": descending, "stalled": stalled, "train_median": train}
    for key in ("mean", "median", "trimmed", "std"):
        r[f"{key}_lo"], r[f"{key}_hi"] = r[key] - half, r[key] + half
    return r


def test_fig9_verdicts_hold_fail_or_cannot_resolve_on_synthetic_sweeps():
    lams = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    falling = [_srow(l, 1.0 / (i + 1), 0.5 / (i + 1), 0.05) for i, l in enumerate(lams)]
    v = {r["claim"]: r["verdict"] for r in f9.verdicts(falling)}
    assert v["the mean test RMSE falls as damping grows"] == "holds"
    assert v["the spread narrows as damping grows"] == "holds"
    assert v["the best runs are similar at low and high damping"] == "holds"
    rising = [_srow(l, 0.1 * (i + 1), 0.1, 0.05 * (i + 1)) for i, l in enumerate(lams)]
    v = {r["claim"]: r["verdict"] for r in f9.verdicts(rising)}
    assert v["the mean test RMSE falls as damping grows"] == "does not hold"
    assert v["the best runs are similar at low and high damping"] == "does not hold"
    wobbly = [_srow(l, m, 0.1, 0.05) for l, m in zip(lams[:4], [0.5, 0.3, 0.45, 0.4])]
    assert f9.verdicts(wobbly)[0]["verdict"] == "cannot resolve"   # falls at the ends, rho not significant
    # a mean driven by one outlier falls while the median rises
    outlier = [_srow(l, m, 0.1, 0.05, median=0.3 + 0.05 * i) for i, (l, m) in
               enumerate(zip(lams, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5]))]
    v = {r["claim"]: r["verdict"] for r in f9.verdicts(outlier)}
    assert v["the mean test RMSE falls as damping grows"] == "holds"
    assert v["the median test RMSE falls as damping grows"] == "does not hold"
    # a significant rank trend whose end-to-end fall the seed spread cannot resolve: cannot resolve
    noisy = [_srow(l, 1.0 - 0.01 * i, 0.5, 0.05, half=0.5) for i, l in enumerate(lams)]
    v = {r["claim"]: r for r in f9.verdicts(noisy)}
    assert v["the mean test RMSE falls as damping grows"]["verdict"] == "cannot resolve"
    # every trend states its resolution: the adjacent-damping change the seed spread resolves
    row = v["the mean test RMSE falls as damping grows"]
    assert row["resolvable"] == pytest.approx(math.hypot(0.5, 0.5))
    assert "0 of 5 resolved" in row["detail"] and "[" in row["measured"]
    table = f9.verdicts_markdown(noisy)
    assert "0.707 RMSE" in table


def test_per_damping_intervals_and_resolution():
    v = np.array([0.1, 0.2, 0.4, 0.3, 0.25, 0.35, 0.15, 0.5])
    iv = f9.intervals(v)
    from scipy.stats import t
    h = t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    assert iv["mean_lo"] == pytest.approx(v.mean() - h) and iv["mean_hi"] == pytest.approx(v.mean() + h)
    for key, stat in (("median", np.median(v)), ("std", v.std(ddof=1))):
        assert iv[f"{key}_lo"] <= stat <= iv[f"{key}_hi"] and iv[f"{key}_lo"] < iv[f"{key}_hi"]
    assert f9.intervals(v) == iv                                   # reproducible
    assert all(math.isnan(x) for x in f9.intervals([0.3]).values())  # one run: no interval
    rows = [_srow(l, m, 0.1, 0.05, half=h) for l, m, h in ((1.0, 1.0, 0.1), (10.0, 0.5, 0.1), (100.0, 0.45, 0.1))]
    res = f9.resolution(rows, "mean")
    assert res["resolved"] == 1 and res["pairs"] == 2 and res["typical"] == pytest.approx(math.hypot(0.1, 0.1))
    assert f9.fmt_lam(10 ** -0.5) == "0.316" and f9.fmt_lam(1e-6) == "1e-06" and f9.fmt_lam(100.0) == "100"


def test_blowup_is_divergence_in_gauss_newton_and_in_recorded_traces():
    f = lambda p, x: x @ p
    x, y = jnp.eye(2), jnp.asarray([1.0, -1.0])
    _, plain = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=30.0, damping=1.0)
    assert not bool(plain.diverged) and int(plain.steps) == 20 and float(plain.loss[-1]) > 1e10  # non-finite only
    _, tr = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=30.0, damping=1.0, blowup=100.0)
    # loss 0.5 -> 40.5 -> 3280.5: the third exceeds 100 x 0.5, so the run stops there, diverged
    assert bool(tr.diverged) and int(tr.steps) == 2
    _, ok = gauss_newton_fit(f, jnp.zeros(2), x, y, 20, learning_rate=1.0, damping=1e-3, blowup=100.0)
    assert not bool(ok.diverged)
    with pytest.raises(ValueError, match="blowup"):
        gauss_newton_fit(f, jnp.zeros(2), x, y, 5, blowup=1.0)
    # the same rule on logged train RMSE traces (loss ~ RMSE^2): 10x the RMSE is 100x the loss
    traces = np.array([[1.0, 9.9, 0.5, np.nan], [1.0, 10.1, 0.5, np.nan], [2.0, np.inf, np.nan, np.nan]])
    assert f9.blown_up(traces).tolist() == [False, True, True]
    assert f9.blown_up(traces, blowup=1000.0).tolist() == [False, False, True]


    class Rec(dict):
        params = {"blowup": None, "rmse_threshold": 2.5}

    rec = Rec(diverged=np.array([[False, False, True]]), train_rmse_trace=traces[None],
              train_rmse=np.array([[0.5, 3.0, np.nan]]))
    assert f9.diverged(rec).tolist() == [[False, False, True]]                   # the record's rule: non-finite
    assert f9.diverged(rec, blowup=100.0).tolist() == [[False, True, True]]      # the same rule as fit's
    Rec.params = {"blowup": 100.0, "rmse_threshold": 2.5}
    assert f9.diverged(rec).tolist() == [[False, True, True]]
    ev = f9.blowup_evidence(rec, multiples=(50.0, 1000.0))
    assert [(e["rose"], e["recovered"]) for e in ev] == [(2, 1), (0, 0)]


def test_fig9_exceptions_flag_the_same_columns_for_any_record():
    rows = [_srow(1e-4, 2.0, 1.0, 0.1, mx=40.0), _srow(1.0, 0.4, 0.05, 0.3, stalled=18, train=0.45),
            _srow(1e3, 0.07, 0.01, 0.06, descending=9)]
    ex = f9.exceptions(rows)
    assert ex == {"undertrained": [1e3], "stalled": [1.0], "outliers": [1e-4]}
    assert [r["damping"] for r in f9.trained(rows)] == [1e-4]
