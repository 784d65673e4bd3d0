"""Issue 17 (itlin.book.experiments.main.adaptive_schedules): adaptive relinearisation against fixed K."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin
from itlin.book import runner
from itlin.book import verdicts as V
from itlin.book.experiments import ParameterError
from itlin.book.experiments.main import adaptive_schedules as ad


# ------------------------------------------------------------------------------ the schedule
def _toy():
    f = lambda p, x: jnp.tanh(x @ p["w"]) @ p["v"]
    x = jax.random.normal(jax.random.PRNGKey(0), (24, 3))
    y = jnp.sin(2 * x[:, 0]) + x[:, 1]
    p0 = {"w": jax.random.normal(jax.random.PRNGKey(1), (3, 12)),
          "v": 0.3 * jax.random.normal(jax.random.PRNGKey(2), (12,))}
    return f, x, y, p0


def _relins(trainer, state, steps=60):
    f, x, y, _ = _toy()
    st, log = itlin.run(trainer, state, x, y, steps)
    return [int(i) + 1 for i in np.flatnonzero(log.relinearised)]


def _lib(schedule, steps=60):
    f, x, y, p0 = _toy()
    tr = itlin.iterative_linearisation(f, optax.sgd(0.3), schedule, loss="squared")
    return _relins(tr, tr.init(p0), steps)


_OURS = {}


def _ours(family, value, *, loss_check_every=1, kernel_check_every=1, probe_n=5, run_steps=60, horizon=None):
    """Relinearisation steps of this chapter's schedule; one trainer per configuration, reused
    across families and values (the point of keeping them in the state)."""
    f, x, y, p0 = _toy()
    key = (loss_check_every, kernel_check_every, probe_n)
    if key not in _OURS:
        sched = ad.schedule_in_state(f, x[:probe_n], loss_check_every=loss_check_every,
                                     kernel_check_every=kernel_check_every)
        _OURS[key] = itlin.iterative_linearisation(f, optax.sgd(0.3), sched, loss="squared")
    tr = _OURS[key]
    kw = {"period": value} if family == "fixed" else {"value": value}
    return _relins(tr, tr.init(p0, family=family, horizon=horizon, **kw), run_steps)


def test_loss_mode_relinearises_where_the_library_does():
    lib = _lib(itlin.loss_drift(0.005, check_every=3))
    assert lib == _ours("loss", 0.005, loss_check_every=3) and len(lib) >= 3


def test_kernel_mode_relinearises_where_the_library_does():
    f, x, _, _ = _toy()
    lib = _lib(itlin.kernel_drift(0.02, x[:5], check_every=4))
    # the loss checks of another family change nothing here
    assert lib == _ours("kernel", 0.02, kernel_check_every=4, loss_check_every=3) and len(lib) >= 3


def test_fixed_mode_is_the_cores_periodic_schedule_and_never_relinearises_after_the_last_step():
    steps = 50
    for K in (1, 7):
        want = [s for s in _lib(itlin.Every(K), steps) if s < steps]  # Every(K) relinearises after the last
        assert _ours("fixed", K, run_steps=steps, horizon=steps, loss_check_every=4) == want
        assert _lib(itlin.periodic(K, horizon=steps), steps) == want
    assert _ours("fixed", math.inf, run_steps=steps, horizon=steps, loss_check_every=4) == []
    assert _ours("loss", 1e-9, run_steps=steps, horizon=steps, loss_check_every=4) == list(range(4, steps, 4))
    with pytest.raises(ValueError, match="family"):
        _ours("adam", 0.1)


def test_start_writes_family_tolerance_learning_rate_and_momentum_and_momentum_zero_is_plain_gd():
    f, x, y, p0 = _toy()
    sched = ad.schedule_in_state(f, x[:3], loss_check_every=2, kernel_check_every=2)
    tr = itlin.iterative_linearisation(f, ad.optimizer(), sched, loss="squared")
    st = ad.start(tr, p0, None, "fixed", 1, 0.05, 0.0, 100)
    assert int(st.schedule.mode) == ad.MODES["fixed"] and int(st.schedule.period.period) == 1
    assert int(st.schedule.period.horizon) == 100
    ref = itlin.iterative_linearisation(f, optax.sgd(0.05), 1, loss="squared", exact_gd=False)
    rs = ref.init(p0)
    for _ in range(3):
        st, _ = tr.step(st, x, y)
        rs, _ = ref.step(rs, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(st.params), jax.tree_util.tree_leaves(rs.params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # momentum in the state is heavy ball: optax.sgd(lr, momentum)
    st2 = ad.start(tr, p0, None, "fixed", math.inf, 0.05, 0.9, 100)
    ref2 = itlin.iterative_linearisation(f, optax.sgd(0.05, momentum=0.9), "inf", loss="squared")
    rs2 = ref2.init(p0)
    for _ in range(3):
        st2, _ = tr.step(st2, x, y)
        rs2, _ = ref2.step(rs2, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(st2.params), jax.tree_util.tree_leaves(rs2.params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    ks = ad.start(tr, p0, None, "kernel", 0.25, 0.1, 0.0, 100)
    assert int(ks.schedule.mode) == ad.MODES["kernel"] and float(ks.schedule.value) == 0.25
    np.testing.assert_allclose(ks.schedule.kernel, itlin.ntk(f, p0, x[:3]), rtol=1e-5)


def test_run_cost_counts_checks():
    r = ad.AdaptiveParams.rebuild({"loss_check_every": 5, "kernel_check_every": 10})
    flops = {"step": 10.0, "relinearise": 3.0, "loss_check": 2.0, "kernel_check": 25.0}
    assert ad.run_cost("fixed", 100, 4, r, flops) == {"train": 1012.0, "checks": 0.0, "total": 1012.0, "n_checks": 0}
    assert ad.run_cost("loss", 100, 4, r, flops)["checks"] == 20 * 2.0
    assert ad.run_cost("kernel", 100, 4, r, flops)["n_checks"] == 11  # the anchor's kernel at the start too


# ------------------------------------------------------------------------------ parameters
def test_paper_scale_resolves_without_running():
    pp = ad.AdaptiveParams.paper_resolved()
    assert pp["channels"] == 50 and pp["learning_rate"] == 1e-3 and pp["momentum"] == 0.0
    assert pp["n_train"] >= 10 ** 9 and pp["seeds"] >= 5 and math.isinf(pp["Ks"][-1])
    assert runner.plan(ad.NAME, {"scale": "paper"}).params["scale"] == "paper"


@pytest.mark.parametrize("bad,match", [
    ({"Ks": [5]}, "at least two"),
    ({"Ks": [5, 5, "inf"]}, "repeated"),
    ({"Ks": [5, 500]}, "below steps"),
    ({"stable_K": 1000}, "stable_K"),
    ({"probe_size": 10 ** 6}, "probe_size"),
    ({"loss_rtols": [-0.1]}, "loss_rtols"),
    ({"kernel_treshold": [0.1]}, "did you mean"),
    ({"eval_every": 10 ** 6}, "eval_every"),
])
def test_bad_parameters_fail_before_any_compute(bad, match, tmp_path):
    with pytest.raises(ParameterError, match=match) as err:
        runner.run(ad.NAME, {"scale": "tiny", **bad}, results_dir=tmp_path, progress=False, verbose=False)
    assert "\n" not in str(err.value)
    assert not any(tmp_path.iterdir())  # nothing was started


# ------------------------------------------------------------------------------ claims on constructed rows
def _row(group, family, value, seed, test, updates, status="completed", relin=(), lr=0.02, total=None):
    total = 100.0 + updates if total is None else total
    return {"tag": f"{group} {family} {value} {seed}", "group": group, "family": family, "value": value,
            "seed": seed, "test": test, "updates": updates, "status": status, "steps": 100,
            "relin_steps": list(relin), "learning_rate": lr, "momentum": 0.0, "diverged_at": None,
            "cost": {"train": 100.0 + updates, "checks": total - 100.0 - updates, "total": total, "n_checks": 3}}


def _frontier(offset, spread=0.002, seeds=6, relin=(10, 20, 30, 80)):
    rows, rng = [], np.random.default_rng(0)
    for s in range(seeds):
        for K, u, acc in ((5, 19, 0.60), (20, 4, 0.55), (math.inf, 0, 0.40)):
            rows.append(_row("frontier", "fixed", K, s, acc, u))
        # adaptive at 4 updates: fixed K=20 has 0.55 there
        rows.append(_row("frontier", "loss", 0.1, s, 0.55 + offset + spread * rng.standard_normal(), 4, relin=relin))
    return rows


def _judge(rows, **kw):
    args = dict(n_test=10 ** 6, steps=100, margin=0.02, stable_lr=None, stable_K=50) | kw
    return {v.id: v for v in ad.judge_rows(rows, **args)}


@pytest.mark.parametrize("offset,expected", [(0.0, V.HOLDS), (-0.08, V.FAILS), (0.08, V.FAILS)])
def test_frontier_claims_hold_and_fail(offset, expected):
    v = _judge(_frontier(offset))
    assert v["frontier.loss0.1.updates"].verdict == expected
    assert v["frontier.loss0.1.compute"].verdict == expected  # the compute is that of K=20 too
    assert v["frontier.loss0.1.updates"].rule == "close"


def test_frontier_cannot_resolve_with_one_seed_a_noisy_spread_or_a_diverged_run():
    assert _judge(_frontier(0.0, seeds=1))["frontier.loss0.1.updates"].verdict == V.UNRESOLVED
    assert _judge(_frontier(0.0, spread=0.06))["frontier.loss0.1.updates"].verdict == V.UNRESOLVED
    rows = _frontier(0.0)
    rows[3] = dict(rows[3], status="diverged", test=math.nan)  # seed 0's adaptive run diverged
    v = _judge(rows)["frontier.loss0.1.updates"]
    assert v.verdict == V.UNRESOLVED and v.dropped == 1


def test_frontier_interpolates_in_log_updates_per_seed():
    rows = [_row("frontier", "fixed", 5, 0, 0.6, 19), _row("frontier", "fixed", 50, 0, 0.4, 1),
            _row("frontier", "kernel", 0.3, 0, 0.5, 4)]
    seeds, a, b, outside, dropped = ad.matched(rows, "kernel", 0.3)[:5]
    w = (math.log(5) - math.log(2)) / (math.log(20) - math.log(2))
    assert seeds == [0] and a == [0.5] and outside == dropped == 0
    assert b[0] == pytest.approx(0.4 + w * 0.2)
    rows.append(_row("frontier", "kernel", 0.6, 0, 0.5, 30))  # beyond the fixed-K range: left out
    assert ad.matched(rows, "kernel", 0.6)[3] == 1 and ad.matched(rows, "kernel", 0.6)[0] == []
    rows.append(_row("frontier", "loss", 0.1, 0, 0.7, 4, total=500.0))  # costlier than every K: the costliest
    seeds, a, b, outside, dropped = ad.matched(rows, "loss", 0.1, axis="compute")[:5]
    assert b == [0.6] and outside == 1


def test_frontier_per_example_results_interpolate_like_the_accuracy():
    """The fixed curve's per-example results get the accuracy's interpolation weights, so their mean is
    the interpolated accuracy (an identity), and a paired test noise replaces the unpaired bound."""
    rng, n = np.random.default_rng(1), 4000
    rows = []
    for s in range(3):
        for K, u in ((5, 19), (50, 1)):
            c = rng.random(n) < (0.6 if K == 5 else 0.4)
            rows.append(dict(_row("frontier", "fixed", K, s, float(c.mean()), u), correct=c))
        c = rng.random(n) < 0.5
        rows.append(dict(_row("frontier", "kernel", 0.3, s, float(c.mean()), 4), correct=c))
    seeds, a, b, _, _, ea, eb = ad.matched(rows, "kernel", 0.3)
    assert ea.shape == eb.shape == (3, n)
    np.testing.assert_allclose(ea.mean(axis=1), a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(eb.mean(axis=1), b, rtol=0, atol=1e-12)
    v = _judge(rows, n_test=n)["frontier.kernel0.3.updates"]
    paired = V.paired_gap(a, b, test_se=V.paired_accuracy_se(ea, eb), level=v.level).test_half
    assert v.gap.test_half == pytest.approx(paired)
    rows[2] = dict(rows[2], correct=None)  # one run without per-example results: the unpaired bound
    assert ad.matched(rows, "kernel", 0.3)[5] is None
    v = _judge(rows, n_test=n)["frontier.kernel0.3.updates"]
    assert v.gap.test_half == pytest.approx(V.paired_gap(a, b, n_test=n, level=v.level).test_half)
    assert v.gap.test_half > paired


def test_timing_claims():
    early = _frontier(0.0, relin=(5, 10, 20, 80))
    late = _frontier(0.0, relin=(55, 70, 90, 10))
    mixed = [r if r["family"] == "fixed" else dict(r, relin_steps=[10, 90] if r["seed"] % 2 else [10, 20, 90])
             for r in _frontier(0.0)]
    assert _judge(early)["timing.loss0.1"].verdict == V.HOLDS
    assert _judge(late)["timing.loss0.1"].verdict == V.FAILS
    assert _judge(mixed)["timing.loss0.1"].verdict == V.UNRESOLVED


def _stable(fixed_status, loss_status, kernel_status, seeds=8):
    rows = []
    for s in range(seeds):
        rows.append(_row("stable", "fixed", 50, s, 0.1, 2, status=fixed_status(s), lr=0.4))
        rows.append(_row("stable", "loss", 0.1, s, 0.5, 9, status=loss_status(s), lr=0.4))
        rows.append(_row("stable", "kernel", 0.3, s, 0.5, 9, status=kernel_status(s), lr=0.4))
    rows.append(_row("control", "fixed", 1, 0, 0.6, 100, lr=0.4))
    return rows


def test_stability_claims_hold_fail_and_cannot_resolve():
    ok, bad = (lambda s: "completed"), (lambda s: "diverged")
    v = _judge(_stable(bad, ok, bad), stable_lr=0.4)
    assert (v["stability.loss"].verdict, v["stability.kernel"].verdict) == (V.HOLDS, V.FAILS)
    assert "8 of 8 seeds" in v["stability.loss"].measured and "K=1" in v["stability.loss"].detail
    assert v["stability.loss"].half == pytest.approx(V.proportion_gap(8, 8, 0, 8).half)
    # half of them saved, on two seeds: cannot tell
    v = _judge(_stable(bad, lambda s: "completed" if s < 1 else "diverged", bad, seeds=2), stable_lr=0.4)
    assert v["stability.loss"].verdict == V.UNRESOLVED
    # a fixed K that never diverged: the gap is 0, below the margin
    v = _judge(_stable(ok, ok, ok), stable_lr=0.4)
    assert v["stability.loss"].verdict == V.FAILS
    # no learning rate found: nothing to prevent
    v = _judge([], stable_lr=None)
    assert [v[k].verdict for k in ("stability.loss", "stability.kernel")] == [V.UNRESOLVED, V.UNRESOLVED]


# ------------------------------------------------------------------------------ the experiment at tiny scale
@pytest.fixture(scope="module")
def tiny(session_results):
    return runner.run(ad.NAME, {"scale": "tiny"}, results_dir=session_results, progress=False, verbose=False)


@pytest.mark.slow
def test_tiny_scale_returns_what_the_chapter_needs(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from itlin.book.figures import main as figures

    sc = ad.SCALES["tiny"]
    rows = ad.rows(tiny)
    front = [r for r in rows if r["group"] == "frontier"]
    n_settings = len(sc["Ks"]) + len(sc["loss_rtols"]) + len(sc["kernel_thresholds"])
    assert len(front) == n_settings * sc["seeds"] and {r["seed"] for r in front} == set(range(sc["seeds"]))
    for r in front:
        assert r["updates"] == len(r["relin_steps"]) and all(0 < s < sc["steps"] for s in r["relin_steps"])
        if r["family"] == "fixed":
            assert r["updates"] == (0 if math.isinf(r["value"]) else math.ceil(sc["steps"] / r["value"]) - 1)
        assert r["cost"]["total"] >= r["cost"]["train"] > 0
    assert set(tiny["flops"]) == {"step", "relinearise", "loss_check", "kernel_check"}
    assert all(float(v) > 0 for v in tiny["flops"].values())
    # tiny's candidate learning rate is absurd on purpose: the stability branch runs
    assert tiny.meta["stable_lr"] == sc["stable_lrs"][0]
    assert len([r for r in rows if r["group"] == "stable"]) == 3 * sc["seeds"]
    n_adaptive = len(sc["loss_rtols"]) + len(sc["kernel_thresholds"])
    assert len(ad.claims(tiny)) == 3 * n_adaptive + 2
    assert [r["schedule"] for r in ad.summary(tiny)] == ["K=5", "K=10", "K=∞", "loss rtol=0.1", "kernel thr=0.3"]
    for fig in (figures.adaptive_frontier(tiny), figures.adaptive_timing(tiny), figures.adaptive_stability(tiny)):
        assert len(fig.axes) >= 1
        plt.close(fig)


@pytest.mark.slow
def test_frontier_runs_trained_on_demand_are_the_records_runs(tiny):
    """FrontierRuns (the demo's thresholds that a record lacks) trains as the experiment does: at the
    record's own setting it gives the record's runs, relinearisations and accuracies included; at
    another threshold its rows are read the way the record's are (a run's updates are its relinearisations)."""
    rows = ad.rows(tiny)
    runs = ad.FrontierRuns(tiny)
    rtol = float(ad.SCALES["tiny"]["loss_rtols"][0])
    again = runs.rows("loss", rtol, [0, 1])
    for row in again:
        (rec_row,) = [r for r in rows if r["group"] == "frontier" and r["family"] == "loss" and r["value"] == rtol
                      and r["seed"] == row["seed"]]
        assert row["trained_here"] and row["status"] == rec_row["status"]
        assert (row["updates"], row["relin_steps"], row["steps"]) == (rec_row["updates"], rec_row["relin_steps"],
                                                                      rec_row["steps"])
        assert row["test"] == rec_row["test"] and row["cost"] == rec_row["cost"]
    assert runs.rows("loss", rtol, [1])[0] is again[1]  # cached: not trained twice
    other = runs.rows("kernel", 0.05, [0])[0]
    assert other["updates"] == len(other["relin_steps"]) and other["family"] == "kernel" and other["value"] == 0.05
    mixed = rows + [other]
    seeds, a, b, outside, dropped, *_ = ad.matched(mixed, "kernel", 0.05)  # against seed 0's fixed-K curve
    assert dropped == 0 and len(seeds) + outside == 1 and a == ([other["test"]] if seeds else [])
    with pytest.raises(ValueError, match="family is 'loss' or 'kernel'"):
        runs.rows("fixed", 10, [0])
