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
from itlin.book.experiments.main import _sparse as S
from itlin.book.experiments.main import adaptive_schedules as ad


# ------------------------------------------------------------------------------ the schedules
def _toy():
    f = lambda p, x: jnp.tanh(x @ p["w"]) @ p["v"]
    x = jax.random.normal(jax.random.PRNGKey(0), (24, 3))
    y = jnp.sin(2 * x[:, 0]) + x[:, 1]
    p0 = {"w": jax.random.normal(jax.random.PRNGKey(1), (3, 12)), "v": 0.3 * jax.random.normal(jax.random.PRNGKey(2),
                                                                                                  (12,))}
    return f, x, y, p0


def _relins(schedule, state_value=None, steps=60, lr=0.3, f=None):
    f_, x, y, p0 = _toy()
    tr = itlin.iterative_linearisation(f_, optax.sgd(lr), schedule, loss="squared")
    st = tr.init(p0)
    if state_value is not None:
        st = st._replace(schedule=state_value(st.schedule))
    st, log = itlin.run(tr, st, x, y, steps)
    return [int(i) + 1 for i in np.flatnonzero(log.relinearised)], st


_OURS = {}


def _ours(mode, value, *, loss_check_every=1, kernel_check_every=1, steps=10 ** 6, probe_n=5, run_steps=60):
    """Relinearisation steps of this chapter's schedule in ``mode``; one trainer per schedule
    configuration, reused across values (the point of keeping the value in the state)."""
    f, x, y, p0 = _toy()
    key = (loss_check_every, kernel_check_every, steps, probe_n)
    if key not in _OURS:
        sched = ad.schedule_in_state(f, x[:probe_n], loss_check_every=loss_check_every,
                                     kernel_check_every=kernel_check_every, steps=steps)
        _OURS[key] = itlin.iterative_linearisation(f, optax.sgd(0.3), sched, loss="squared")
    tr = _OURS[key]
    st = tr.init(p0)
    st = st._replace(schedule=(jnp.asarray(ad.MODES[mode], jnp.int32), jnp.asarray(value, jnp.float32),
                               st.schedule[2]))
    st, log = itlin.run(tr, st, x, y, run_steps)
    return [int(i) + 1 for i in np.flatnonzero(log.relinearised)]


def test_loss_mode_relinearises_where_the_library_does():
    lib, _ = _relins(itlin.loss_drift(0.005, check_every=3))
    assert lib == _ours("loss", 0.005, loss_check_every=3) and len(lib) >= 3


def test_kernel_mode_relinearises_where_the_library_does():
    f, x, _, _ = _toy()
    lib, _ = _relins(itlin.kernel_drift(0.02, x[:5], check_every=4))
    # the loss checks of another family change nothing here
    assert lib == _ours("kernel", 0.02, kernel_check_every=4, loss_check_every=3) and len(lib) >= 3


def test_fixed_mode_is_the_books_fixed_schedule_and_never_relinearises_after_the_last_step():
    steps = 50
    for K in (1, 7):
        want, _ = _relins(S.schedule(K, steps), steps=steps)
        want = [s for s in want if s < steps]  # Every(1) relinearises after the last step too
        assert _ours("fixed", K, steps=steps, run_steps=steps, loss_check_every=4) == want
    assert _ours("fixed", math.inf, steps=steps, run_steps=steps, loss_check_every=4) == []
    assert _ours("loss", 1e-9, steps=steps, run_steps=steps, loss_check_every=4) == list(range(4, steps, 4))


def test_start_writes_mode_tolerance_learning_rate_and_momentum_and_momentum_zero_is_plain_gd():
    f, x, y, p0 = _toy()
    sched = ad.schedule_in_state(f, x[:3], loss_check_every=2, kernel_check_every=2, steps=100)
    tr = itlin.iterative_linearisation(f, ad.optimizer(), sched, loss="squared")
    st = ad.start(tr, p0, None, "fixed", 1, 0.05, 0.0)
    assert int(st.schedule[0]) == ad.MODES["fixed"] and float(st.schedule[1]) == 1.0
    ref = itlin.iterative_linearisation(f, optax.sgd(0.05), 1, loss="squared", exact_gd=False)
    rs = ref.init(p0)
    for _ in range(3):
        st, _ = tr.step(st, x, y)
        rs, _ = ref.step(rs, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(st.params), jax.tree_util.tree_leaves(rs.params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # momentum in the state is heavy ball: optax.sgd(lr, momentum)
    st2 = ad.start(tr, p0, None, "fixed", math.inf, 0.05, 0.9)
    ref2 = itlin.iterative_linearisation(f, optax.sgd(0.05, momentum=0.9), "inf", loss="squared")
    rs2 = ref2.init(p0)
    for _ in range(3):
        st2, _ = tr.step(st2, x, y)
        rs2, _ = ref2.step(rs2, x, y)
    for a, b in zip(jax.tree_util.tree_leaves(st2.params), jax.tree_util.tree_leaves(rs2.params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    ks = ad.start(tr, p0, None, "kernel", 0.25, 0.1, 0.0)
    assert int(ks.schedule[0]) == ad.MODES["kernel"] and float(ks.schedule[1]) == 0.25
    np.testing.assert_allclose(ks.schedule[2], itlin.ntk(f, p0, x[:3]), rtol=1e-5)
    with pytest.raises(ValueError, match="family"):
        ad.start(tr, p0, None, "adam", 1, 0.1, 0.0)


def test_run_cost_counts_checks():
    r = {"loss_check_every": 5, "kernel_check_every": 10}
    flops = {"step": 10.0, "relinearise": 3.0, "loss_check": 2.0, "kernel_check": 25.0}
    assert ad.run_cost("fixed", 100, 4, r, flops) == {"train": 1012.0, "checks": 0.0, "total": 1012.0, "n_checks": 0}
    assert ad.run_cost("loss", 100, 4, r, flops)["checks"] == 20 * 2.0
    assert ad.run_cost("kernel", 100, 4, r, flops)["n_checks"] == 11  # the anchor's kernel at the start too


# ------------------------------------------------------------------------------ parameters
def test_paper_scale_resolves_without_running():
    pp = ad.paper_settings()
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


# ------------------------------------------------------------------------------ claims on synthetic results
def _row(group, family, value, seed, test, updates, status="completed", relin=(), lr=0.02, total=None):
    total = 100.0 + updates if total is None else total
    return {"tag": f"{group} {family} {value} {seed}", "group": group, "family": family, "value": value,
            "seed": seed, "test": test, "updates": updates, "status": status, "steps": 100,
            "relin_steps": list(relin), "learning_rate": lr, "momentum": 0.0,
            "cost": {"train": 100.0 + updates, "checks": total - 100.0 - updates, "total": total, "n_checks": 3}}


def _frontier(offset, spread=0.002, seeds=6):
    rows = []
    rng = np.random.default_rng(0)
    for s in range(seeds):
        for K, u, acc in ((5, 19, 0.60), (20, 4, 0.55), (math.inf, 0, 0.40)):
            rows.append(_row("frontier", "fixed", K, s, acc, u))
        # adaptive at 4 updates: fixed K=20 has 0.55 there
        rows.append(_row("frontier", "loss", 0.1, s, 0.55 + offset + spread * rng.standard_normal(), 4))
    return rows


@pytest.mark.parametrize("offset,expected", [(0.08, V.HOLDS), (-0.08, V.FAILS), (0.0, V.UNRESOLVED)])
def test_frontier_claims_hold_fail_and_cannot_resolve(offset, expected):
    rows = _frontier(offset)
    c = ad.frontier_claims(rows, n_test=100_000)
    assert [x["claim"] for x in c] == ["loss rtol=0.1 beats fixed K at the same number of feature updates",
                                       "loss rtol=0.1 beats fixed K at the same compute"]
    assert c[0]["verdict"] == expected
    assert c[1]["verdict"] == expected  # the compute is that of K=20 too


def test_frontier_interpolates_in_log_updates_per_seed():
    rows = [_row("frontier", "fixed", 5, 0, 0.6, 19), _row("frontier", "fixed", 50, 0, 0.4, 1),
            _row("frontier", "kernel", 0.3, 0, 0.5, 4)]
    seeds, a, b, outside = ad.matched(rows, "kernel", 0.3)
    w = (math.log(5) - math.log(2)) / (math.log(20) - math.log(2))
    assert seeds == [0] and a == [0.5] and outside == 0
    assert b[0] == pytest.approx(0.4 + w * 0.2)
    # outside the fixed-K range: left out
    rows.append(_row("frontier", "kernel", 0.6, 0, 0.5, 30))
    assert ad.matched(rows, "kernel", 0.6)[3] == 1 and ad.matched(rows, "kernel", 0.6)[0] == []
    # at compute beyond the costliest K: compared with that K, and counted
    rows.append(_row("frontier", "loss", 0.1, 0, 0.7, 4, total=500.0))
    seeds, a, b, outside = ad.matched(rows, "loss", 0.1, axis="compute")
    assert b == [0.6] and outside == 1


def test_frontier_too_few_seeds_or_diverged_cannot_resolve():
    rows = _frontier(0.08, seeds=1)
    assert ad.frontier_claims(rows, n_test=10_000)[0]["verdict"] == V.UNRESOLVED  # one seed resolves nothing
    rows = [dict(r, status="diverged at step 3") if r["family"] == "loss" else r for r in _frontier(0.08)]
    c = ad.frontier_claims(rows, n_test=10_000)
    assert c[0]["verdict"] == V.UNRESOLVED and "no seed" in c[0]["measured"]


def test_timing_claims():
    early = [_row("frontier", "kernel", 0.3, s, 0.5, 4, relin=(5, 10, 20, 80 + s)) for s in range(5)]
    late = [_row("frontier", "kernel", 0.3, s, 0.5, 4, relin=(55, 70, 90, 10 + s)) for s in range(5)]
    mixed = [_row("frontier", "kernel", 0.3, s, 0.5, 2, relin=((10, 90) if s % 2 else (10, 20, 90)))
             for s in range(4)]
    assert ad.timing_claims(early, steps=100)[0]["verdict"] == V.HOLDS
    assert ad.timing_claims(late, steps=100)[0]["verdict"] == V.FAILS
    assert ad.timing_claims(mixed, steps=100)[0]["verdict"] == V.UNRESOLVED
    assert ad.early_fraction([], 100) != ad.early_fraction([], 100)  # NaN without updates


def _stable(fixed_status, loss_status, kernel_status, seeds=5):
    rows = []
    for s in range(seeds):
        rows.append(_row("stable", "fixed", 50, s, 0.1, 2, status=fixed_status(s), lr=0.4))
        rows.append(_row("stable", "loss", 0.1, s, 0.5, 9, status=loss_status(s), lr=0.4))
        rows.append(_row("stable", "kernel", 0.3, s, 0.5, 9, status=kernel_status(s), lr=0.4))
    rows.append(_row("control", "fixed", 1, 0, 0.6, 100, lr=0.4))
    return rows


def test_stability_claims_hold_fail_and_cannot_resolve():
    ok, bad = (lambda s: "completed"), (lambda s: "diverged at step 7")
    c = ad.stability_claims(_stable(bad, ok, bad), stable_lr=0.4, stable_K=50)
    assert [x["verdict"] for x in c] == [V.HOLDS, V.FAILS]
    assert "5 of 5 seeds" in c[0]["measured"] and "K=1" in c[0]["detail"]
    # Newcombe's interval of 5/5 against 0/5 (and 5/5): the resolvable gap is its wider half
    assert c[0]["resolvable"] == pytest.approx(V.proportion_gap(5, 5, 0, 5).half)
    assert "fewer by 100 points" in c[0]["measured"] and "fewer by 0 points" in c[1]["measured"]
    # three of five saved: the interval of 5/5 against 2/5 lies above 0
    c = ad.stability_claims(_stable(bad, lambda s: "completed" if s < 3 else "diverged at step 4", bad),
                            stable_lr=0.4, stable_K=50)
    assert c[0]["verdict"] == V.HOLDS and "completed on 3 of the 5 seeds" in c[0]["detail"]
    # one of two saved: two seeds cannot tell
    c = ad.stability_claims(_stable(bad, lambda s: "completed" if s < 1 else "diverged at step 4", bad, seeds=2),
                            stable_lr=0.4, stable_K=50)
    assert c[0]["verdict"] == V.UNRESOLVED and c[0]["resolvable"] > abs(0.5)
    # a fixed K that never diverged: nothing to prevent
    c = ad.stability_claims(_stable(ok, ok, ok), stable_lr=0.4, stable_K=50)
    assert [x["verdict"] for x in c] == [V.UNRESOLVED, V.UNRESOLVED]
    # no learning rate found
    c = ad.stability_claims([], stable_lr=None, stable_K=50)
    assert [x["verdict"] for x in c] == [V.UNRESOLVED, V.UNRESOLVED]
    # the schedule completes where the fixed K diverged but diverges elsewhere: not fewer divergences
    c = ad.stability_claims(_stable(lambda s: "diverged at step 3" if s < 2 else "completed",
                                    lambda s: "completed" if s < 2 else "diverged at step 9", ok),
                            stable_lr=0.4, stable_K=50)
    assert c[0]["verdict"] == V.UNRESOLVED and "completed on 2 of the 2 seeds" in c[0]["detail"]


# ------------------------------------------------------------------------------ the experiment at tiny scale
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return runner.run(ad.NAME, {"scale": "tiny"}, results_dir=tmp_path_factory.mktemp("results"), progress=False,
                      verbose=False)


def test_tiny_scale_returns_what_the_chapter_needs(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = ad.SCALES["tiny"]
    rows = ad.summary(tiny)
    front = [r for r in rows if r["group"] == "frontier"]
    n_settings = len(sc["Ks"]) + len(sc["loss_rtols"]) + len(sc["kernel_thresholds"])
    assert len(front) == n_settings * sc["seeds"]
    assert {r["seed"] for r in front} == set(range(sc["seeds"]))
    for r in front:
        assert r["updates"] == len(r["relin_steps"]) and all(0 < s < sc["steps"] for s in r["relin_steps"])
        if r["family"] == "fixed":
            assert r["updates"] == (0 if math.isinf(r["value"]) else math.ceil(sc["steps"] / r["value"]) - 1)
        assert r["cost"]["total"] >= r["cost"]["train"] > 0
    assert set(tiny["flops"]) == {"step", "relinearise", "loss_check", "kernel_check"}
    assert all(float(v) > 0 for v in tiny["flops"].values())
    for fam in ad.FAMILIES:
        m = tiny["movement"][fam]
        assert m["step"].shape == m["from_anchor"].shape == m["from_init"].shape
        assert np.all(np.isfinite(m["from_init"]))
    # tiny's candidate learning rate is absurd on purpose: the stability branch runs
    assert tiny.meta["stable_lr"] == sc["stable_lrs"][0]
    assert len([r for r in rows if r["group"] == "stable"]) == 3 * sc["seeds"]
    claims = ad.claims_of(tiny)
    assert all(c["verdict"] in (V.HOLDS, V.FAILS, V.UNRESOLVED) for c in claims)
    assert len(claims) == 2 * (len(sc["loss_rtols"]) + len(sc["kernel_thresholds"])) + \
        (len(sc["loss_rtols"]) + len(sc["kernel_thresholds"])) + 2
    assert "| schedule |" in ad.summary_markdown(rows) and "paper-scale source" in ad.settings_markdown(tiny)
    for fig in (ad.frontier_figure(rows, tiny["flops"]),
                ad.timing_figure(rows, tiny["movement"], tiny.meta["movement_picks"], sc["steps"]),
                ad.stability_figure(tiny, rows)):
        plt.close(fig)
