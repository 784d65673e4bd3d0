"""The headline experiments (issue 6): main paper Figs. 2, 3 and 8.

Tiny runs of each experiment return what its chapter needs (runs, histories, resolved settings,
tables, claims, figures); dataset switching picks the 2-D LeNet; the paper-scale parameters
resolve without running anything; bad parameters fail before any compute, naming the problem.
"""

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from itlin.book import runner  # noqa: E402
from itlin.book.experiments import ParameterError  # noqa: E402
from itlin.book import render  # noqa: E402
from itlin.book.experiments.main import _rows as R  # noqa: E402
from itlin.book.experiments.main import _setup as S  # noqa: E402
from itlin.book.experiments.main import fig2_k_sweep as fig2  # noqa: E402
from itlin.book.experiments.main import fig3_augmentation as fig3  # noqa: E402
from itlin.book.experiments.main import fig8_adam as fig8  # noqa: E402
from itlin.book.figures import main as figures  # noqa: E402
from itlin import Every  # noqa: E402

MODULES = {"fig2_k_sweep": fig2, "fig3_augmentation": fig3, "fig8_adam": fig8}


@pytest.fixture(scope="module")
def tiny(session_results):
    """The three experiments at scale="tiny", run once for the session (their chapters load them)."""
    return {name: runner.run(name, {"scale": "tiny"}, results_dir=session_results, progress=False, verbose=False)
            for name in MODULES}


# ------------------------------------------------------------------------------ tiny runs
@pytest.mark.slow
def test_fig2_tiny_run_has_both_sweeps_the_control_the_rescaling_and_seeds(tiny):
    rec = tiny["fig2_k_sweep"]
    assert rec.completed
    r = rec.meta["resolved"]
    assert r["scale"] == "tiny" and r["rescale"] == 10 and r["Ks"] == [1, 10, "inf"] and r["seeds"] == 2
    settings = {"full K=1", "full K=10", "full K=inf", "full K=inf lr x10", "mini K=1", "mini K=100"}
    assert set(rec.runs) == {f"{t} seed={s}" for t in settings for s in (0, 1)}
    rows = fig2.rows(rec)
    one = {(row["setting"], row["seed"]): row for row in rows}
    # no relinearisation after the last step: ceil(steps / K) - 1 feature updates
    assert one[("full K=10", 1)]["updates"] == math.ceil(r["steps"] / 10) - 1
    assert one[("mini K=100", 0)]["updates"] == math.ceil(10 * r["steps"] / 100) - 1
    assert one[("mini K=100", 0)]["steps"] == 10 * r["steps"]
    assert one[("mini K=100", 0)]["learning_rate"] == pytest.approx(r["learning_rate"] / 10)
    assert one[("full K=1", 0)]["updates"] == r["steps"] and one[("full K=inf", 1)]["updates"] == 0
    assert rec.history("mini K=100 seed=0").relin_steps == list(range(100, 10 * r["steps"], 100))
    for row in rows:
        assert 0.0 <= row["test"] <= 1.0 and 0.0 <= row["test_net"] <= 1.0 and 0.0 <= row["train"] <= 1.0
    # K=1 trains the network itself: both models coincide; seeds give different runs
    assert one[("full K=1", 0)]["test"] == one[("full K=1", 0)]["test_net"]
    assert rec.history("full K=1 seed=0").loss != rec.history("full K=1 seed=1").loss
    h = rec.history("full K=10 seed=0")
    for key in ("step", "feature_updates", "test/accuracy", "test/accuracy_lin", "train/accuracy_lin"):
        assert h.eval_array(key).size == r["steps"] // r["eval_every"] + 1
    verdicts = render.judge(rec)
    assert verdicts.ids == ("full.large_not_worse", "full.large_close", "full.inf_short", "mini.large_not_worse",
                            "mini.large_close", "full.control_short", "mini_full.K1", "mini_full.K10")
    assert verdicts["full.large_not_worse"].headline and verdicts["full.large_not_worse"].rule == "not_worse"
    assert not verdicts["full.large_close"].headline and verdicts["full.large_close"].rule == "close"
    md = render.claims(verdicts)
    assert md.startswith("| claim |") and "At these settings" in md and md.count("\n| ") == 9
    summary = fig2.summary(rec)
    assert [(x["sweep"], x["run"]) for x in summary] == [
        ("full", "K=1"), ("full", "K=10"), ("full", "K=∞"), ("full", "K=∞, lr x10"), ("mini", "K=1"), ("mini", "K=100")]
    assert "| full | K=∞, lr x10 |" in render.summary(rec)
    settings = render.settings(rec)
    assert "| mini-batch K | 1, 100 | 1, 1e5, 5e5, ∞ | Fig. 2 caption" in settings
    assert "| mini-batch learning rate | 0.001 | 0.0001 |" in settings
    fig = figures.fig2(rec)
    assert len(fig.axes) == 3 and all(ax.lines for ax in fig.axes)
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_fig3_tiny_run_records_network_and_linearised_accuracy(tiny):
    rec = tiny["fig3_augmentation"]
    assert rec.completed
    r = rec.meta["resolved"]
    assert r["max_shift"] == 4 and "augment_1d" in fig3.augmentation(r)
    assert set(rec.runs) == {"K=1 seed=0", "K=1 seed=1", "K=20 seed=0", "K=20 seed=1"}
    rows = R.rows_of(rec)
    assert R.select(rows, K=20, seed=1)[0]["updates"] == math.ceil(r["steps"] / 20) - 1
    h = rec.history("K=20 seed=0")
    # large K: the network at the trained weights is not the linearised model being trained
    assert not np.allclose(h.eval_array("test/accuracy"), h.eval_array("test/accuracy_lin"))
    verdicts = render.judge(rec)
    assert verdicts.ids == ("large.fits", "large.not_worse", "large.close")
    measured = {v.id: v for v in fig3.judge_rows(rows, n_test=S.n_test_judged(r), margin=r["close_margin"],
                                                  premise=False)}
    assert measured["large.not_worse"].headline and measured["large.not_worse"].rule == "not_worse"
    assert measured["large.not_worse"].margin == fig3.PAPER_TOLERANCE == 0.01  # the paper's "under 1%"
    assert not measured["large.close"].headline and measured["large.close"].rule == "close"
    assert not verdicts["large.fits"].tested and "82.3%" in verdicts["large.not_worse"].paper
    if verdicts["large.fits"].verdict != "holds":  # the premise unmet: the gaps are shown, not judged
        assert all(verdicts[i].verdict == "cannot resolve" and not verdicts[i].tested
                   and verdicts[i].detail.startswith(R.PREMISE_UNMET) for i in ("large.not_worse", "large.close"))
    assert [x["run"] for x in fig3.summary(rec)] == ["K=1", "K=20"]
    settings = render.settings(rec)
    assert "| K | 1, 20 | 1, 5e6 | Section 4.1" in settings and "| feature updates (largest finite K) | 2 | 9 |" in settings
    assert "| augmentation | random circular shifts by up to 4 positions" in settings
    fig = figures.fig3(rec)
    assert len(fig.axes) == 2 and all(ax.lines and ax.child_axes for ax in fig.axes)  # two panels, each with its top axis
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_fig8_tiny_run_has_three_runs_phases_and_claims(tiny):
    rec = tiny["fig8_adam"]
    assert rec.completed
    r = rec.meta["resolved"]
    assert r["reset_optimizer"] is True and r["K"] == 20
    assert {row["setting"] for row in fig8.rows(rec)} == {"SGD K=1", "Adam K=1", "Adam solved K=20"}
    assert rec.meta["runs"]["Adam solved K=20 seed=1"]["optimizer"] == "adam"
    by_seed = fig8.phases(rec)
    assert sorted(by_seed) == [0, 1]
    assert [(p["start"], p["end"]) for p in by_seed[0]] == [(0, 20), (20, 40), (40, 60), (60, 80)]
    # the evaluation read for a phase lies inside it, before its relinearisation
    assert [p["eval_step"] for p in by_seed[1]] == [15, 35, 55, 80]
    table = fig8.phase_rows(by_seed)
    assert [row["steps"] for row in table] == ["0-20", "20-40", "40-60", "60-80"] and set(table[0]) == \
        {"phase", "steps", "seed 0", "seed 1"}
    verdicts = render.judge(rec)
    assert verdicts.ids == ("phases.solved", "solved.below_sgd", "adam.not_cause", "solved.below_adam")
    assert "61.3%" in verdicts["solved.below_sgd"].paper and "69.4%" in verdicts["solved.below_sgd"].paper
    assert verdicts["adam.not_cause"].margin == -0.02
    assert "| K of the Adam-solved run | 20 | 2e5 | Fig. 8 caption" in render.settings(rec)
    fig = figures.fig8(rec)
    assert len(fig.axes) == 2 and all(ax.lines and ax.child_axes for ax in fig.axes)
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_tiny_results_are_loaded_not_recomputed(tiny, tmp_path):
    rec = tiny["fig8_adam"]
    again = runner.run("fig8_adam", {"scale": "tiny"}, results_dir=rec.path.parent.parent, progress=False,
                       verbose=False)
    assert again.loaded and again.hash == rec.hash


# ------------------------------------------------------------------------------ claims on synthetic results
def _rows(setting_values: dict, *, status=None, **fields):
    """Synthetic summary rows: ``{setting: [test accuracy per seed]}``."""
    rows = []
    for setting, values in setting_values.items():
        for seed, v in enumerate(values):
            rows.append({"setting": setting, "seed": seed, "test": v, "test_net": v, "train": v, "updates": 3,
                         "status": (status or {}).get((setting, seed), "completed"), **fields.get(setting, {})})
    return rows


def _fig3_rows(big, *, big_train=None, status=None, inf=None):
    f = {"K=1": {"K": 1.0}, "K=1000": {"K": 1000.0}, "K=inf": {"K": math.inf}}
    values = {"K=1": [0.80] * 5, "K=1000": big, **({"K=inf": inf} if inf else {})}
    rows = _rows(values, status=status, **f)
    for row in rows:  # train accuracy: K=1 fits its training set; the large K as given
        row["train"] = 1.0 if row["K"] == 1 or big_train is None else big_train[row["seed"]]
    return rows


@pytest.mark.parametrize("big, expected, one_sided", [
    ([0.801, 0.799, 0.802, 0.800, 0.798], "holds", "holds"),                    # within 2 points, tightly
    ([0.75, 0.751, 0.749, 0.752, 0.748], "does not hold", "does not hold"),     # 5 points below, tightly
    ([0.80, 0.74, 0.86, 0.77, 0.83], "cannot resolve", "cannot resolve"),       # seeds too spread to say
    ([0.851, 0.849, 0.852, 0.850, 0.848], "does not hold", "holds"),            # 5 points above: sufficient
    ([0.785, 0.784, 0.786, 0.785, 0.785], "holds", "does not hold"),            # 1.5 below: past the paper's 1%
])
def test_fig3_claim_can_hold_fail_or_be_unresolved(big, expected, one_sided):
    v = fig3.judge_rows(_fig3_rows(big), n_test=100_000, margin=0.02)
    assert [x.id for x in v] == ["large.fits", "large.not_worse", "large.close"]
    assert v[0].verdict == "holds" and v[2].verdict == expected and v[2].half > 0
    assert v[1].verdict == one_sided and v[1].margin == 0.01


def test_fig3_premise_fails_when_one_seed_of_the_large_K_does_not_fit_its_training_set():
    v = fig3.judge_rows(_fig3_rows([0.80] * 5, big_train=[1.0, 0.99, 0.97, 1.0, 0.985]), n_test=100_000, margin=0.02)
    assert v[0].id == "large.fits" and v[0].verdict == "does not hold" and "4 of 5 seeds; lowest 97.0%" in v[0].measured
    edge = fig3.judge_rows(_fig3_rows([0.80] * 5, big_train=[0.98] * 5), n_test=100_000, margin=0.02)
    assert edge[0].verdict == "holds"  # within the margin of K=1's 100%


def test_fig3_inf_short_is_judged_when_K_inf_ran():
    v = fig3.judge_rows(_fig3_rows([0.80] * 5, inf=[0.70, 0.71, 0.69, 0.70, 0.70]), n_test=100_000, margin=0.02)
    assert v[-1].id == "inf.short" and v[-1].verdict == "holds"
    v = fig3.judge_rows(_fig3_rows([0.80] * 5, inf=[0.74, 0.82, 0.76, 0.80, 0.78]), n_test=100_000, margin=0.02)
    assert v[-1].verdict == "cannot resolve"  # 2 +- 4 points: the interval straddles the margin
    v = fig3.judge_rows(_fig3_rows([0.80] * 5, inf=[0.90, 0.91, 0.89, 0.90, 0.90]), n_test=100_000, margin=0.02)
    assert v[-1].verdict == "does not hold"
    # "clearly worse": a resolved 1-point shortfall is less than the margin (2 points), so it does not hold
    v = fig3.judge_rows(_fig3_rows([0.80] * 5, inf=[0.79, 0.791, 0.789, 0.79, 0.79]), n_test=100_000, margin=0.02)
    assert v[-1].verdict == "does not hold" and v[-1].margin == 0.02


def test_a_diverged_run_never_enters_a_verdict():
    rows = _fig3_rows([0.801, 0.799, 0.10, 0.800, 0.798], status={("K=1000", 2): "diverged at step 7"})
    fits, not_worse, close = fig3.judge_rows(rows, n_test=100_000, margin=0.02)
    assert fits.verdict == "does not hold"  # a diverged run has not fitted its training set
    # so the premise is unmet: the gaps are not judged, and the description keeps what they measured
    assert not_worse.verdict == close.verdict == "cannot resolve" and not not_worse.tested
    assert not_worse.detail.startswith(R.PREMISE_UNMET) and "1 seed(s) left out" in not_worse.measured
    # measured whatever the premise, a claim with a seed left out is at most "cannot resolve", one-sided or not
    fits, not_worse, close = fig3.judge_rows(rows, n_test=100_000, margin=0.02, premise=False)
    assert close.verdict == "cannot resolve" and close.dropped == 1 and close.gap.n == 4
    assert not_worse.verdict == "cannot resolve" and not_worse.dropped == 1


@pytest.mark.slow
def test_blown_up_runs_are_diverged_not_completed_and_judge_nothing(tmp_path):
    """Issue 15's repro: at learning rate 1e3 the losses blow up without becoming NaN. Every run must
    be marked diverged at the step it passed the blow-up multiple, and no claim may be judged."""
    rec = runner.run("fig2_k_sweep", {"scale": "tiny", "learning_rate": 1e3}, results_dir=tmp_path,
                     progress=False, verbose=False)
    assert not rec.completed and "diverged" in rec.status
    assert rec.runs and all(r["status"].startswith("diverged") for r in rec.runs.values())
    assert all(r["diverged_at"] >= 1 for r in rec.runs.values())
    verdicts = fig2.claims(rec)
    assert verdicts and all(v.verdict == "cannot resolve" for v in verdicts)
    assert all(v.dropped == 2 and v.gap.n == 0 for v in verdicts)


def _fig2_rows(full_large, mini_large, *, status=None):
    f = {"full K=1": {"sweep": "full", "K": 1.0, "control": False}, "full K=100": {"sweep": "full", "K": 100.0,
         "control": False}, "full K=inf": {"sweep": "full", "K": math.inf, "control": False},
         "mini K=1": {"sweep": "mini", "K": 1.0, "control": False},
         "mini K=1000": {"sweep": "mini", "K": 1000.0, "control": False}}
    base = [0.80, 0.81, 0.79, 0.80, 0.805]
    return _rows({"full K=1": base, "full K=100": [v + d for v, d in zip(base, full_large)],
                  "full K=inf": [v - 0.1 for v in base], "mini K=1": [v + 0.002 for v in base],
                  "mini K=1000": [v + d for v, d in zip(base, mini_large)]}, status=status, **f)


def test_fig2_claims_on_synthetic_rows_hold_fail_and_stay_unresolved():
    rows = _fig2_rows([0.001] * 5, [-0.06] * 5)
    v = {x.id: x.verdict for x in fig2.judge_rows(rows, n_test=100_000, margin=0.02, rescale=10)}
    assert v == {"full.large_not_worse": "holds", "full.large_close": "holds", "full.inf_short": "holds",
                 "mini.large_not_worse": "does not hold", "mini.large_close": "does not hold",
                 "mini_full.K1": "holds", "mini_full.K100": "does not hold"}
    # large K far above K=1: sufficient (the paper's claim), though not "close"
    above = {x.id: x.verdict for x in fig2.judge_rows(_fig2_rows([0.06] * 5, [0.0] * 5), n_test=100_000,
                                                      margin=0.02, rescale=10)}
    assert above["full.large_not_worse"] == "holds" and above["full.large_close"] == "does not hold"
    noisy = _fig2_rows([0.04, -0.04, 0.03, -0.03, 0.0], [0.0] * 5)
    v = {x.id: x.verdict for x in fig2.judge_rows(noisy, n_test=100_000, margin=0.02, rescale=10)}
    assert v["full.large_close"] == "cannot resolve" and v["mini.large_close"] == "holds"
    # K=inf "clearly worse" needs more than the margin: 1 point short (resolved) does not hold
    near = _rows({"full K=1": [0.80, 0.81, 0.79, 0.80, 0.805], "full K=inf": [0.79, 0.80, 0.78, 0.79, 0.795]},
                 **{"full K=1": {"sweep": "full", "K": 1.0, "control": False},
                    "full K=inf": {"sweep": "full", "K": math.inf, "control": False}})
    v = {x.id: x.verdict for x in fig2.judge_rows(near, n_test=100_000, margin=0.02, rescale=10)}
    assert v["full.inf_short"] == "does not hold"


def test_fig2_a_diverged_large_K_run_keeps_close_from_holding():
    rows = _fig2_rows([0.001] * 5, [0.0] * 5, status={("full K=100", 3): "diverged"})
    v = {x.id: x for x in fig2.judge_rows(rows, n_test=100_000, margin=0.02, rescale=10)}
    assert v["full.large_close"].verdict == "cannot resolve" and v["full.large_close"].dropped == 1
    assert v["full.large_not_worse"].verdict == "cannot resolve" and v["full.large_not_worse"].dropped == 1
    assert v["full.large_close"].gap.n == 4 and "1 seed(s) left out" in render.measured(v["full.large_close"])
    # a claim the left-out run does not touch is judged on all five seeds
    assert v["mini.large_close"].verdict == "holds" and v["mini.large_close"].dropped == 0


def _fig8_rows(sgd, adam, solved, K=600):
    opt = {"SGD K=1": {"optimizer": "sgd"}, "Adam K=1": {"optimizer": "adam"},
           f"Adam solved K={K}": {"optimizer": "adam"}}
    return _rows({"SGD K=1": sgd, "Adam K=1": adam, f"Adam solved K={K}": solved}, **opt)


@pytest.mark.parametrize("adam, solved, expected", [
    ([0.805, 0.81, 0.80, 0.80, 0.805], [0.70, 0.71, 0.70, 0.69, 0.70], ["holds", "holds", "holds"]),
    # solving does not hurt, and plain Adam ends 5 points below SGD: every gap claim fails
    ([0.75, 0.76, 0.74, 0.75, 0.75], [0.85, 0.86, 0.84, 0.85, 0.85], ["does not hold"] * 3),
    # seeds too spread to say anything
    ([0.80, 0.70, 0.90, 0.75, 0.85], [0.80, 0.70, 0.90, 0.72, 0.88], ["cannot resolve"] * 3),
])
def test_fig8_claims_on_synthetic_rows_hold_fail_and_stay_unresolved(adam, solved, expected):
    rows = _fig8_rows([0.80, 0.81, 0.79, 0.80, 0.80], adam, solved)
    phases = {s: [{"complete": True, "solved": True, "train_lin": 1.0}] * 4 for s in range(5)}
    v = fig8.judge_rows(rows, phases, n_test=100_000, margin=0.02, solved_accuracy=0.99, K=600)
    assert v[0].id == "phases.solved" and v[0].verdict == "holds"
    assert [x.verdict for x in v[1:]] == expected


def test_fig8_premise_fails_on_one_unsolved_phase_and_ignores_the_incomplete_last_one():
    rows = _fig8_rows([0.80] * 5, [0.80] * 5, [0.70] * 5)
    solved = [{"complete": True, "solved": True, "train_lin": 1.0}] * 3
    partial = {"complete": False, "solved": False, "train_lin": 0.5}  # a last phase cut short by the step budget
    v = fig8.judge_rows(rows, {s: solved + [partial] for s in range(5)}, n_test=100_000, margin=0.02,
                        solved_accuracy=0.99, K=600)
    assert v[0].verdict == "holds" and "15 of 15 complete phases" in v[0].measured
    one = {**{s: solved for s in range(5)}, 3: [{"complete": True, "solved": False, "train_lin": 0.96}] + solved[1:]}
    v = fig8.judge_rows(rows, one, n_test=100_000, margin=0.02, solved_accuracy=0.99, K=600)
    assert v[0].verdict == "does not hold" and "lowest 96.0%" in v[0].measured


def test_fig8_phases_read_the_last_evaluation_before_each_relinearisation():
    from itlin import History

    h = History()
    for step, acc in [(0, 0.1), (50, 0.8), (100, 0.2), (150, 0.995), (200, 0.3), (250, 0.9)]:
        h.add_eval({"step": step, "train/accuracy_lin": acc, "test/accuracy_lin": acc})
    h.relin_steps = [100, 200]
    ph = fig8.phases_of(h, 100, 0.99)
    assert [(p["start"], p["end"], p["eval_step"]) for p in ph] == [(0, 100, 50), (100, 200, 150), (200, 250, 250)]
    assert [p["solved"] for p in ph] == [False, True, False] and [p["complete"] for p in ph] == [True, True, False]


def test_records_kept_one_seed_each_pool_into_one():
    recs = runner.open_records("fig3_augmentation-fashion-h100-5seeds")
    gpu = R.pool_seeds(recs)
    assert gpu.meta["resolved"]["seeds"] == 5 and len(gpu.runs) == 15
    assert {r["seed"] for r in R.rows_of(gpu)} == {0, 1, 2, 3, 4}
    assert gpu.history("K=1e4 seed=2").relin_steps == [10_000, 20_000, 30_000, 40_000]
    v = render.judge(gpu)
    assert v["large.fits"].verdict == "does not hold" and v["inf.short"].verdict == "holds"
    assert v["large.close"].verdict == "cannot resolve" and v["large.close"].detail.startswith(R.PREMISE_UNMET)
    r = gpu.meta["resolved"]
    measured = {x.id: x for x in fig3.judge_rows(R.rows_of(gpu), n_test=S.n_test_judged(r), margin=r["close_margin"],
                                                  premise=False)}
    assert measured["large.close"].gap.n == 5 and measured["large.close"].verdict == "does not hold"
    with pytest.raises(ValueError, match="two records hold the run"):
        R.pool_seeds([recs[0], recs[0]])


# ------------------------------------------------------------------------------ datasets and models
def test_dataset_switching_picks_the_2d_lenet_and_image_augmentation():
    import jax

    assert S.model_for("mnist1d", 4).name == "lenet1d"
    for name in ("fashion_mnist", "cifar10"):
        model = S.model_for(name, 4)
        assert model.name == "lenet" and model.meta["channels"] == (4, 4)
    key = jax.random.PRNGKey(0)
    img = np.arange(2 * 8 * 8 * 1, dtype=np.float32).reshape(2, 8, 8, 1)
    out = S.augmenter("fashion_mnist", pad=2, flip=True)(key, img)
    assert out.shape == img.shape
    sig = np.arange(3 * 40 * 1, dtype=np.float32).reshape(3, 40, 1)
    shifted = np.asarray(S.augmenter("mnist1d", max_shift=4)(key, sig))
    # circular shifts: every signal keeps its values
    assert all(sorted(shifted[i, :, 0]) == sorted(sig[i, :, 0]) for i in range(3))


@pytest.mark.slow
def test_fashion_mnist_runs_with_the_2d_lenet(tmp_path, monkeypatch):
    # small files in the original IDX format, so the 2-D path runs wherever the tests run
    from itlin import data

    rng = np.random.default_rng(0)
    folder = tmp_path / "fashion"
    folder.mkdir()
    for split, n in (("train", 300), ("t10k", 120)):
        data.write_idx(folder / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        data.write_idx(folder / f"{split}-labels-idx1-ubyte.gz", np.arange(n, dtype=np.uint8) % 10)
    monkeypatch.setenv("ITLIN_DATA", str(folder))
    monkeypatch.setenv("ITLIN_CACHE", str(tmp_path / "cache"))
    rec = runner.run("fig3_augmentation", {"scale": "tiny", "dataset": "fashion-mnist", "Ks": [1, 5], "steps": 10,
                                           "n_train": 256, "n_test": 100, "n_eval_train": 100},
                     results_dir=tmp_path / "results", progress=False, verbose=False)
    assert rec.completed and rec.params["dataset"] == "fashion_mnist"
    assert rec.meta["model"] == "lenet" and rec.meta["input_shape"] == [28, 28, 1]
    assert "random crops" in fig3.augmentation(rec.meta["resolved"])
    assert "| augmentation | random crops (zero padding 4) and random horizontal flips |" in render.settings(rec)
    assert rec.runs["K=5 seed=0"]["feature_updates"] == 1


def test_load_data_keeps_whole_splits_for_large_sizes():
    ds = S.load_data("mnist1d", 10 ** 9, 10 ** 9, 0)
    assert (ds.n_train, ds.n_test) == (4000, 1000)
    sub = S.load_data("mnist1d", 300, 200, 0)
    assert (sub.n_train, sub.n_test) == (300, 200)
    assert np.bincount(sub.y_train).min() == 30  # class-balanced


# ------------------------------------------------------------------------------ paper scale
def test_paper_scale_parameters_resolve_without_running():
    p2 = fig2.Fig2Params.paper_resolved()
    assert p2["dataset"] == "cifar10" and p2["channels"] == 50 and p2["momentum"] == 0.0
    assert p2["learning_rate"] == 1e-3 and p2["learning_rate"] / p2["rescale"] == 1e-4
    assert p2["Ks"][0] == 1 and math.isinf(p2["Ks"][-1]) and p2["steps"] >= 10 * max(p2["Ks"][1:-1])
    assert p2["n_train"] >= 50_000 and p2["batch_size"] == 256
    p3 = fig3.Fig3Params.paper_resolved()
    assert p3["learning_rate"] == 1e-5 and 5_000_000 in p3["Ks"] and p3["steps"] == 50_000_000
    assert p3["dataset"] == "cifar10"
    p8 = fig8.Fig8Params.paper_resolved()
    assert p8["K"] == 200_000 and p8["reset_optimizer"] is True and p8["steps"] >= 2 * p8["K"]
    for name in MODULES:
        plan = runner.plan(name, {"scale": "paper", "dataset": "cifar10"})
        assert plan.params["scale"] == "paper" and not plan.complete


def test_paper_scale_starts_with_the_papers_schedules():
    """The pieces a paper-scale run builds first: its schedules (period and horizon in the
    periodic schedule's state, no relinearisation at or after the last step) and its optimiser."""
    from itlin.core.schedules import StepInfo

    p3 = fig3.Fig3Params.paper_resolved()
    assert S.schedule(1) == Every(1)

    def fires(K, steps):
        sched = S.schedule(K)
        state = sched.set(sched.init(None, None), period=K, horizon=steps)
        out = []
        for step in range(1, steps + 1):
            relin, state = sched.update(state, StepInfo(step, step, 0.0, 0.0, None, None))
            out += [step] if bool(relin) else []
        return out

    assert fires(150, 600) == [150, 300, 450] and fires(150, 700) == [150, 300, 450, 600]
    assert fires(math.inf, 50) == [] and S.updates_of(150, 700) == 4
    assert S.updates_of(p3["Ks"][1], p3["steps"]) == p3["steps"] // p3["Ks"][1] - 1  # Fig. 3: 9 feature updates
    opt = S.sgd(p3["learning_rate"], p3["momentum"])
    assert hasattr(opt, "update")


@pytest.mark.slow
def test_paper_scale_trainers_take_their_first_steps():
    """What a paper-scale run builds, at the paper's sizes (50 channels, batch 256, its learning
    rates, K and schedules), takes two steps. The data are a small MNIST-1D subset: CIFAR-10
    cannot be downloaded here, and the first steps do not depend on the data's size."""
    import jax.numpy as jnp
    import optax

    from itlin import iterative_linearisation, run

    ds = S.load_data("mnist1d", 512, 100, 0)
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    p2, p3, p8 = (m.paper_resolved() for m in (fig2.Fig2Params, fig3.Fig3Params, fig8.Fig8Params))
    model = S.model_for("mnist1d", p3["channels"])
    params, model_state = S.init_params(model, x, 0)
    trainers = [
        (iterative_linearisation(model, S.sgd(p2["learning_rate"] / p2["rescale"], p2["momentum"]),
                                 S.schedule(p2["Ks"][1] * p2["rescale"])),
         p2["batch_size"]),
        (iterative_linearisation(model, S.sgd(p3["learning_rate"], p3["momentum"]),
                                 S.schedule(p3["Ks"][1]), augment=S.augmenter("mnist1d")),
         p3["batch_size"]),
        (iterative_linearisation(model, optax.adam(p8["adam_learning_rate"]), S.schedule(p8["K"]),
                                 reset_optimizer=p8["reset_optimizer"]), p8["batch_size"]),
    ]
    for trainer, batch_size in trainers:
        state, log = run(trainer, S.init_state(trainer, params, model_state, 10 ** 6, 10 ** 7), x, y, 2,
                         batch_size=batch_size)
        assert int(state.step) == 2 and np.all(np.isfinite(log.loss)) and state.feature_updates == 0


# ------------------------------------------------------------------------------ bad parameters
@pytest.mark.parametrize("name, params, message", [
    ("fig2_k_sweep", {"dataset": "quintic"}, "'mnist1d', 'fashion_mnist', 'cifar10'"),
    ("fig2_k_sweep", {"dataset": "cifar100"}, "dataset"),
    ("fig2_k_sweep", {"Ks": [10, "inf"]}, "must include K=1"),
    ("fig2_k_sweep", {"Ks": [1, 0]}, "Ks[1] must be >= 1"),
    ("fig2_k_sweep", {"Ks": [1, 10, 10]}, "repeated"),
    ("fig2_k_sweep", {"mini_Ks": [1, 1]}, "mini_Ks has repeated values"),
    ("fig2_k_sweep", {"learning_rate": -1e-3}, "learning_rate"),
    ("fig2_k_sweep", {"momentum": 1.0}, "momentum"),
    ("fig2_k_sweep", {"steps": 5, "eval_every": 10}, "eval_every=10 is more than steps=5"),
    ("fig2_k_sweep", {"step": 10}, "did you mean 'steps'"),
    ("fig3_augmentation", {"Ks": [100]}, "must include K=1"),
    ("fig3_augmentation", {"scale": "huge"}, "scale"),
    ("fig3_augmentation", {"max_shift": -1}, "max_shift"),
    ("fig8_adam", {"K": "inf"}, "finite period"),
    ("fig8_adam", {"K": 1}, "finite period >= 2"),
    ("fig8_adam", {"K": 100, "eval_every": 200}, "must be at most K=100"),
    ("fig8_adam", {"K": 100, "steps": 50}, "less than K=100"),
    ("fig8_adam", {"solved_accuracy": 1.5}, "solved_accuracy"),
    ("fig2_k_sweep", {"mini_Ks": [1, 40]}, "mini_Ks must be among Ks"),
    ("fig3_augmentation", {"seeds": 0}, "seeds must be >= 1"),
    ("fig2_k_sweep", {"seeds": 2 ** 64}, "seeds must be <= 100000"),
    ("fig8_adam", {"K": 1.5}, "K"),
    ("fig3_augmentation", {"blowup": 1.0}, "blowup must be > 1"),
])
def test_bad_parameters_fail_before_any_compute(name, params, message, tmp_path):
    with pytest.raises(ParameterError) as info:
        runner.run(name, params, results_dir=tmp_path)
    assert message in str(info.value)
    assert not any(tmp_path.iterdir())  # nothing was written


@pytest.mark.parametrize("name", ["fig2_k_sweep", "fig3_augmentation", "fig8_adam"])
def test_batch_larger_than_the_training_set_fails_before_training(name, tmp_path):
    # the parameters' own check refuses it before anything runs or is written (fig2's full-batch
    # runs would otherwise train before its mini-batch runs found out)
    with pytest.raises(ValueError, match="batch_size=512 is more than n_train=100 training examples"):
        runner.run(name, {"scale": "tiny", "n_train": 100, "batch_size": 512}, results_dir=tmp_path)


def test_formatting_helpers():
    from itlin.book.labels import fmt_K, fmt_value

    assert fmt_K(5_000_000) == "5e6" and fmt_K(15000) == "15000" and fmt_K(math.inf) == "inf"
    assert fmt_value(10 ** 9) == "all" and fmt_value([1, 50_000, "inf"]) == "1, 50,000, ∞" and fmt_value(10 ** 6) == "1e6"
    assert S.seed_list(S.SparseParams.rebuild({"seed": 3, "seeds": 2})) == [3, 4] and S.seed_tag("K=1", 4) == "K=1 seed=4"


def test_late_gain_ignores_the_sawtooth_of_relinearisations():
    from itlin import History

    h = History()
    for step, acc in [(0, 0.1), (20, 0.5), (40, 0.3), (60, 0.55), (80, 0.4), (100, 0.6)]:
        h.add_eval({"step": step, "test/accuracy_lin": acc})
    assert R.late_gain(h) == pytest.approx(0.6 - 0.55)  # best before step 80 was 0.55
    assert R.late_gain(h, fraction=0.5) == pytest.approx(0.6 - 0.5)


def test_scale_defaults_are_part_of_the_version():
    from itlin.book.experiments import scales_digest

    table = {"default": {"steps": 600, "Ks": [1, 40, math.inf]}}
    v = scales_digest(table)
    assert v == scales_digest({"default": {"Ks": [1, 40, math.inf], "steps": 600}})
    assert v != scales_digest({"default": {"steps": 601, "Ks": [1, 40, math.inf]}})
    assert fig2.EXPERIMENT.version == "3." + scales_digest(fig2.SCALES)


# ------------------------------------------------------------------------------ issue 15: resolvable claims
@pytest.mark.parametrize("name", list(MODULES))
def test_default_scale_test_set_can_resolve_the_close_margin(name):
    """At the default scale the final accuracies are measured on a test set large enough that its
    noise alone stays well inside close_margin (at 1,000 test examples it was twice the margin)."""
    from itlin.book import verdicts as V

    mod = MODULES[name]
    r = mod.EXPERIMENT.params.from_dict({}).resolved()
    n = S.n_test_judged(r)
    assert n >= 10_000
    margin = 0.02
    assert V.accuracy_noise(0.6, n) < 0.6 * margin and V.accuracy_noise(0.6, 1000) > margin


def test_prepare_measures_final_accuracies_on_the_large_test_set():
    r = {"dataset": "mnist1d", "n_train": 200, "n_test": 100, "n_eval_train": 100, "channels": 2, "seed": 0,
         "n_test_final": 3000}
    setup = S.prepare(S.SparseParams.rebuild(r))
    assert setup.final[0].shape[0] == 3000 and setup.ds.n_test == 100       # curves on 100, verdicts on 3000
    assert np.bincount(np.asarray(setup.final[1])).min() == 300              # class-balanced
    assert S.n_test_judged(r) == 3000 and S.n_test_judged({**r, "n_test_final": None}) == 100
    import optax
    from itlin import iterative_linearisation

    tr = iterative_linearisation(setup.model, optax.sgd(0.01), "inf")
    m = S.final_metrics(tr, tr.init(setup.params, setup.model_state), setup.final)
    assert m["n_test_final"] == 3000 and 0.0 <= m["final_test"] <= 1.0 and 0.0 <= m["final_test_net"] <= 1.0
    # the standard split is unchanged for every experiment that does not ask for more
    assert S.load_data("mnist1d", 10 ** 9, 10 ** 9, 0).n_test == 1000


# ------------------------------------------------------------------------------ issue 15: the quintic demo
def test_quintic_demo_counts_a_blown_up_run_as_diverged():
    from itlin.book.experiments.main import quintic_demo as Q

    run = Q.train_setting(1, 5.0, 60, evals=6)            # far past the stability limit: the loss explodes
    assert run.history.status.startswith("diverged") and run.diverged
    run = Q.train_setting(1, 0.001, 30, evals=3)
    assert run.status == "completed"
    with pytest.raises(ValueError, match="blowup"):
        Q.train_setting(1, 0.001, 10, evals=2, blowup=1.0)


def test_quintic_maths_checks():
    from itlin import metrics
    from itlin.book.experiments.main import quintic_demo as Q

    kc = Q.k_conv_check(lr=0.02)
    # after N / (lr lambda_min) steps of the frozen linearisation on the mean loss the slowest mode is at ~1/e
    assert kc["measured"] == pytest.approx(kc["predicted"], abs=1e-3)
    assert abs(kc["predicted"] - math.exp(-1)) < 0.01 and kc["predicted_sum"] < 1e-6
    fit = metrics.two_line_fit([-3.0, -1.0, 0.5, 2.0], [1.0, 2.0, 3.0, 0.0])
    assert fit["rmse"] == pytest.approx(0.0, abs=1e-12) and fit["jump"] == pytest.approx(4.0 - 2.5)
    g = Q.phase_gaps([0, 5, 10, 15], [1.0, 0.9, 1.0, 0.8], [1.0, 1.0, 1.0, 1.0], [10])
    assert (g["grew"], g["phases"]) == (0, 2)
    # the chapter's statements on constructed checks: hold, fail, and cannot resolve when not run
    c = {"kconv": {"measured": 0.3679, "predicted": 0.3678, "steps": 2548.0}, "lr_lo": 0.001, "lr_hi": 0.01, "N": 20,
         "inf_resid": 1e-7, "inf_jump": 2.0, "inf_bound": 0.63, "k1_best": 1e-4, "k10_ratio": 1.01,
         "part": {"grew": 4, "phases": 5}, "gd_completed": True, "gd_limit": 0.004, "sharpen": 10.0,
         "div_hi": [10, 100, 1000], "finite_large": [10, 100, 1000], "inf_hi": True}
    v = {x.id: x.verdict for x in Q.judge_checks(c)}
    assert set(v.values()) == {"holds"} and len(v) == 8
    # K=inf's two-line bound is fixed by the zero-bias initialisation: a stated check labelled so, its
    # paper column not claiming a finding about feature learning
    fit = {x.id: x for x in Q.judge_checks(c)}["inf.cannot_fit"]
    assert not fit.tested and "initialisation" in fit.claim and "not a finding" in fit.detail
    assert "not tested here" in fit.paper
    bad = dict(c, kconv={"measured": 0.5, "predicted": 0.3678, "steps": 100.0}, inf_resid=0.1, inf_bound=1e-4,
               k10_ratio=1.2, part={"grew": 1, "phases": 5}, gd_limit=0.05, div_hi=[10], inf_hi=False)
    assert set(x.verdict for x in Q.judge_checks(bad)) == {"does not hold"}
    none = {k: c[k] for k in ("kconv", "lr_lo", "lr_hi", "N")} | {"div_hi": [], "finite_large": [], "inf_hi": None}
    v = {x.id: x.verdict for x in Q.judge_checks(none)}
    assert v.pop("kconv.agrees") == "holds" and set(v.values()) == {"cannot resolve"}


def test_fig2_demo_draws_every_seed_of_the_record_on_the_full_batch_step_axis():
    """The k_sweeps chapter's demo, on the record the chapter judges on: per (K, batch) it draws each
    seed's test accuracy of the model being trained (mini-batch steps divided by the rescaling), the
    chapter's summary rows of what it draws, and says where the record lacks a setting."""
    import matplotlib.pyplot as plt

    from itlin.book.plotting import MIN_TEXT_PX, smallest_text

    rec = runner.open_record("fig2_k_sweep-mnist1d-10seeds")
    rows, f = fig2.rows(rec), int(rec.meta["resolved"]["rescale"])
    summary = dict(zip(fig2.settings_of(rows), fig2.summary(rec)))
    demo = figures.fig2_demo(rec)
    K_knob, batch_knob = demo.knobs
    assert batch_knob.values == ("full", "mini") and 1 in K_knob.values and math.inf in K_knob.values
    checked = 0
    for K in K_knob.values:
        for batch in batch_knob.values:
            K_run = K if batch == "full" or K in (1, math.inf) else K * f
            view = demo.compute(K=K, batch=batch)
            (ax,) = view.figure.axes
            group = R.select(rows, sweep=batch, K=K_run, control=False)
            if not group:
                assert "not in this record" in ax.get_title()
                plt.close(view.figure)
                continue
            lines = [(np.asarray(line.get_xdata()), np.asarray(line.get_ydata())) for line in ax.lines]
            for r in group:  # every seed of the setting, as the record holds it
                h = rec.history(r["tag"])
                x, y = h.eval_array("step") / (f if batch == "mini" else 1), h.eval_array("test/accuracy_lin")
                assert any(lx.shape == x.shape and np.array_equal(lx, x) and np.array_equal(ly, y) for lx, ly in lines)
            assert view.table[0] == summary[(batch, float(K_run), False)]
            if K != 1:
                assert view.table[1] == summary[(batch, 1.0, False)]  # K=1 of the same sweep beside it
            assert smallest_text(view.figure)[0] >= MIN_TEXT_PX
            plt.close(view.figure)
            checked += 1
    assert checked >= 4
