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
from itlin.book.experiments import _sparse as S  # noqa: E402
from itlin.book.experiments import fig2_k_sweep as fig2  # noqa: E402
from itlin.book.experiments import fig3_augmentation as fig3  # noqa: E402
from itlin.book.experiments import fig8_adam as fig8  # noqa: E402
from itlin import AtSteps, Every  # noqa: E402

MODULES = {"fig2_k_sweep": fig2, "fig3_augmentation": fig3, "fig8_adam": fig8}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The three experiments at scale="tiny", run once for this module."""
    root = tmp_path_factory.mktemp("results")
    return {name: runner.run(name, {"scale": "tiny"}, results_dir=root, progress=False, verbose=False)
            for name in MODULES}


# ------------------------------------------------------------------------------ tiny runs
@pytest.mark.slow
def test_fig2_tiny_run_has_both_sweeps_the_control_and_the_rescaling(tiny):
    rec = tiny["fig2_k_sweep"]
    assert rec.completed
    r = fig2.resolved(rec)
    assert r["scale"] == "tiny" and r["rescale"] == 10 and r["Ks"] == [1, 10, "inf"]
    assert r["minibatch_Ks"] == [1, 100, "inf"] and r["minibatch_steps"] == 10 * r["steps"]
    assert math.isclose(r["minibatch_learning_rate"], r["learning_rate"] / 10)
    assert set(rec.runs) == {"full K=1", "full K=10", "full K=inf", "full K=inf lr x10",
                             "mini K=1", "mini K=100", "mini K=inf"}
    rows = {s["tag"]: s for s in fig2.summary(rec)}
    # no relinearisation after the last step: ceil(steps / K) - 1 feature updates
    assert rows["full K=10"]["updates"] == math.ceil(r["steps"] / 10) - 1
    assert rows["mini K=100"]["updates"] == math.ceil(10 * r["steps"] / 100) - 1
    assert rows["full K=1"]["updates"] == r["steps"] and rows["full K=inf"]["updates"] == 0
    assert rec.history("mini K=100").relin_steps == list(range(100, 10 * r["steps"], 100))
    for s in rows.values():
        assert 0.0 <= s["test"] <= 1.0 and 0.0 <= s["test_net"] <= 1.0 and 0.0 <= s["train"] <= 1.0
    # K=1 trains the network itself: both models coincide
    assert rows["full K=1"]["test"] == rows["full K=1"]["test_net"]
    h = rec.history("full K=10")
    for key in ("step", "feature_updates", "test/accuracy", "test/accuracy_lin", "train/accuracy_lin"):
        assert h.eval_array(key).size == r["steps"] // r["eval_every"] + 1
    claims = fig2.claims(rec)
    names = [c["claim"] for c in claims]
    assert any("catches up" in n for n in names) and any("falls short" in n for n in names)
    assert any("mini-batch (lr /10" in n for n in names)
    assert all(c["holds"] in (True, False, None) for c in claims)
    md = fig2.claims_markdown(rec)
    assert md.startswith("| claim |") and "At these settings" in md
    assert "| full | K=∞, lr x10 |" in fig2.summary_markdown(rec)
    assert "Fig. 2 caption" in fig2.settings_markdown(rec)
    fig = fig2.figure(rec)
    assert len(fig.axes) == 3
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_fig3_tiny_run_records_network_and_linearised_accuracy(tiny):
    rec = tiny["fig3_augmentation"]
    assert rec.completed
    r = fig3.resolved(rec)
    assert "augment_1d" in r["augmentation"] and r["max_shift"] == 4
    assert set(rec.runs) == {"K=1", "K=20", "K=inf"}
    rows = {s["tag"]: s for s in fig3.summary(rec)}
    assert rows["K=20"]["updates"] == math.ceil(r["steps"] / 20) - 1
    h = rec.history("K=inf")
    assert "test/accuracy" in h.evals and "test/accuracy_lin" in h.evals
    # K=inf: the network at the trained weights is not the linearised model being trained
    assert not np.allclose(h.eval_array("test/accuracy"), h.eval_array("test/accuracy_lin"))
    claims = fig3.claims(rec)
    assert [c["claim"] for c in claims] == ["with augmentation, a very large K ends close to K=1",
                                           "K=∞ (no feature learning) falls short"]
    assert "82.3%" in claims[0]["paper"] and "81.4%" in claims[0]["paper"]
    fig = fig3.figure(rec)
    assert len(fig.axes) >= 2
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_fig8_tiny_run_has_three_runs_phases_and_claims(tiny):
    rec = tiny["fig8_adam"]
    assert rec.completed
    r = fig8.resolved(rec)
    assert r["reset_optimizer"] is True and r["K"] == 20
    assert set(rec.runs) == {"SGD K=1", "Adam K=1", "Adam solved K=20"}
    assert rec.meta["runs"]["Adam solved K=20"]["optimizer"] == "adam"
    phases = fig8.phases(rec)
    assert [(p["start"], p["end"]) for p in phases] == [(0, 20), (20, 40), (40, 60), (60, 80)]
    # the evaluation read for a phase lies inside it, before its relinearisation
    assert [p["eval_step"] for p in phases] == [15, 35, 55, 80]
    names = [c["claim"] for c in fig8.claims(rec)]
    assert names[0] == "each linearisation is solved before relinearising" and len(names) == 4
    assert "61.3%" in fig8.claims_markdown(rec) and "69.4%" in fig8.claims_markdown(rec)
    fig = fig8.figure(rec)
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_tiny_results_are_loaded_not_recomputed(tiny, tmp_path):
    rec = tiny["fig8_adam"]
    again = runner.run("fig8_adam", {"scale": "tiny"}, results_dir=rec.path.parent.parent, progress=False,
                       verbose=False)
    assert again.loaded and again.hash == rec.hash


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
    assert "random crops" in rec.meta["resolved"]["augmentation"]
    assert rec.runs["K=5"]["feature_updates"] == 1


def test_load_data_keeps_whole_splits_for_large_sizes():
    ds = S.load_data("mnist1d", 10 ** 9, 10 ** 9, 0)
    assert (ds.n_train, ds.n_test) == (4000, 1000)
    sub = S.load_data("mnist1d", 300, 200, 0)
    assert (sub.n_train, sub.n_test) == (300, 200)
    assert np.bincount(sub.y_train).min() == 30  # class-balanced


# ------------------------------------------------------------------------------ paper scale
def test_paper_scale_parameters_resolve_without_running():
    p2 = fig2.paper_settings()
    assert p2["dataset"] == "cifar10" and p2["channels"] == 50 and p2["momentum"] == 0.0
    assert p2["learning_rate"] == 1e-3 and p2["learning_rate"] / p2["rescale"] == 1e-4
    assert p2["Ks"][0] == 1 and math.isinf(p2["Ks"][-1]) and p2["steps"] >= 10 * max(p2["Ks"][1:-1])
    assert p2["n_train"] >= 50_000 and p2["batch_size"] == 256
    p3 = fig3.paper_settings()
    assert p3["learning_rate"] == 1e-5 and 5_000_000 in p3["Ks"] and p3["steps"] == 50_000_000
    p8 = fig8.paper_settings()
    assert p8["K"] == 200_000 and p8["reset_optimizer"] is True and p8["steps"] >= 2 * p8["K"]
    for name in MODULES:
        plan = runner.plan(name, {"scale": "paper", "dataset": "cifar10"})
        assert plan.params["scale"] == "paper" and not plan.complete


def test_paper_scale_starts_with_the_papers_schedules():
    """The pieces a paper-scale run builds first: its schedules and its optimiser."""
    p3 = fig3.paper_settings()
    sched = S.schedule(p3["Ks"][1], p3["steps"])
    assert isinstance(sched, AtSteps) and len(sched.steps) == p3["steps"] // p3["Ks"][1] - 1
    assert S.schedule(1, 10) == Every(1)
    assert math.isinf(S.schedule(math.inf, 10).K)
    assert list(S.schedule(150, 600).steps) == [150, 300, 450]
    assert list(S.schedule(150, 700).steps) == [150, 300, 450, 600]
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
    p2, p3, p8 = fig2.paper_settings(), fig3.paper_settings(), fig8.paper_settings()
    model = S.model_for("mnist1d", p3["channels"])
    params, model_state = S.init_params(model, x, 0)
    trainers = [
        (iterative_linearisation(model, S.sgd(p2["learning_rate"] / p2["rescale"], p2["momentum"]),
                                 S.schedule(p2["Ks"][1] * p2["rescale"], p2["steps"] * p2["rescale"])),
         p2["batch_size"]),
        (iterative_linearisation(model, S.sgd(p3["learning_rate"], p3["momentum"]),
                                 S.schedule(p3["Ks"][1], p3["steps"]), augment=S.augmenter("mnist1d")),
         p3["batch_size"]),
        (iterative_linearisation(model, optax.adam(p8["adam_learning_rate"]), S.schedule(p8["K"], p8["steps"]),
                                 reset_optimizer=p8["reset_optimizer"]), p8["batch_size"]),
    ]
    for trainer, batch_size in trainers:
        state, log = run(trainer, trainer.init(params, model_state), x, y, 2, batch_size=batch_size)
        assert int(state.step) == 2 and np.all(np.isfinite(log.loss)) and state.feature_updates == 0


# ------------------------------------------------------------------------------ bad parameters
@pytest.mark.parametrize("name, params, message", [
    ("fig2_k_sweep", {"dataset": "quintic"}, "'mnist1d', 'fashion_mnist', 'cifar10'"),
    ("fig2_k_sweep", {"dataset": "cifar100"}, "dataset"),
    ("fig2_k_sweep", {"Ks": [10, "inf"]}, "must include K=1"),
    ("fig2_k_sweep", {"Ks": [1, 0]}, "Ks[1] must be >= 1"),
    ("fig2_k_sweep", {"Ks": [1, 10, 10]}, "repeated"),
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
])
def test_bad_parameters_fail_before_any_compute(name, params, message, tmp_path):
    with pytest.raises(ParameterError) as info:
        runner.run(name, params, results_dir=tmp_path)
    assert message in str(info.value)
    assert not any(tmp_path.iterdir())  # nothing was written


@pytest.mark.parametrize("name", ["fig2_k_sweep", "fig3_augmentation", "fig8_adam"])
def test_batch_larger_than_the_training_set_fails_before_training(name, tmp_path):
    # the shared set-up checks it once the data is loaded, before the first run trains (fig2's
    # full-batch runs would otherwise train before its mini-batch runs found out)
    with pytest.raises(ValueError, match="batch_size=512 is more than the 100 training examples"):
        runner.run(name, {"scale": "tiny", "n_train": 100, "batch_size": 512}, results_dir=tmp_path)


def test_claim_helpers():
    assert S.tolerance(0.5, 1000) == pytest.approx(2 * math.sqrt(2 * 0.25 / 1000))
    assert S.tolerance(1.0, 1000) == 0.0
    assert S.fmt_K(5_000_000) == "5e6" and S.fmt_K(15000) == "15000" and S.fmt_K(math.inf) == "inf"
    assert S.fmt_value(10 ** 9) == "all" and S.fmt_value([1, 50_000, "inf"]) == "1, 5e4, ∞"
    claims = [S.claim("a", "p", "m", True), S.claim("b", "p", "m", False), S.claim("c", "p", "m", None)]
    line = S.bottom_line(claims)
    assert line.startswith("At these settings 1 of 3 claims hold") and "*b*" in line and "*c*" in line
    assert "**does not hold**" in S.claims_markdown(claims)


def test_late_gain_ignores_the_sawtooth_of_relinearisations():
    from itlin import History

    h = History()
    for step, acc in [(0, 0.1), (20, 0.5), (40, 0.3), (60, 0.55), (80, 0.4), (100, 0.6)]:
        h.add_eval({"step": step, "test/accuracy_lin": acc})
    assert S.late_gain(h) == pytest.approx(0.6 - 0.55)  # best before step 80 was 0.55
    assert S.late_gain(h, fraction=0.5) == pytest.approx(0.6 - 0.5)


def test_scale_defaults_are_part_of_the_version():
    from itlin.book.experiments import scales_digest

    table = {"default": {"steps": 600, "Ks": [1, 40, math.inf]}}
    v = scales_digest(table)
    assert v == scales_digest({"default": {"Ks": [1, 40, math.inf], "steps": 600}})
    assert v != scales_digest({"default": {"steps": 601, "Ks": [1, 40, math.inf]}})
    assert fig2.EXPERIMENT.version == "1." + scales_digest(fig2.SCALES)
