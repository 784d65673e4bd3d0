"""Arbel et al. chapters (book/arbel_setting.md, book/arbel_ablations.md): the experiments
arbel_steps, arbel_init, arbel_samples, arbel_mnist, arbel_damping, their engine (_arbel) and the
appended itlin.data.arbel_teacher_student / itlin.metrics.min_cosine_distance."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from itlin import data, metrics, models
from itlin.book import runner, verdicts
from itlin.book.experiments import ParameterError
from itlin.book.experiments.arbel import _arbel as A
from itlin.book.experiments.arbel import arbel_damping as ED
from itlin.book.experiments.arbel import arbel_init as EI
from itlin.book.experiments.arbel import arbel_mnist as EM
from itlin.book.experiments.arbel import arbel_samples as EN
from itlin.book.experiments.arbel import arbel_steps as ES
from itlin.book.experiments.arbel import arbel_width as EW

HOLDS, FAILS, UNRESOLVED = verdicts.HOLDS, verdicts.FAILS, verdicts.UNRESOLVED


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("arbel-results")


def _run(name, params, results):
    return runner.run(name, params, results_dir=results, progress=False, verbose=False)


# ------------------------------------------------------------------------------ data and metrics
def test_teacher_student_with_bias_matches_its_formula_and_nests():
    ds = data.arbel_teacher_student(n_train=40, n_test=30, seed=3)
    t = ds.meta["teacher"]
    assert t["u"].shape == (5, 10) and t["b"].shape == (5,) and t["v"].shape == (5,) and t["scale"] == 0.2
    x = ds.x_train.astype(np.float64)
    want = 0.2 * np.maximum(x @ t["u"].T + t["b"], 0.0) @ t["v"]
    np.testing.assert_allclose(ds.y_train[:, 0], want, rtol=1e-6, atol=1e-6)
    big = data.arbel_teacher_student(n_train=60, n_test=30, seed=3)
    np.testing.assert_array_equal(big.x_train[:40], ds.x_train)   # nested training sets
    np.testing.assert_array_equal(big.x_test, ds.x_test)          # same test set and teacher
    other = data.arbel_teacher_student(n_train=40, n_test=30, seed=4)
    assert not np.allclose(other.meta["teacher"]["u"], t["u"])
    silu = data.arbel_teacher_student(n_train=5, n_test=5, seed=3, activation="silu", beta=2.0)
    xs = silu.x_train.astype(np.float64)
    z = xs @ t["u"].T + t["b"]
    np.testing.assert_allclose(silu.y_train[:, 0], 0.2 * (z / (1 + np.exp(-2 * z))) @ t["v"], rtol=1e-5, atol=1e-6)


def test_min_cosine_distance_by_hand():
    u_star = np.array([[1.0, 0.0], [0.0, 1.0]])
    u = np.array([[2.0, 0.0], [0.0, 0.0], [1.0, 1.0]])  # aligned, zero (weight 0), at 45 degrees
    p = np.array([4.0, 0.0, 2.0]) / 6.0
    d45 = math.sqrt(2 * (1 - math.cos(math.pi / 4)))
    assert metrics.min_cosine_distance(u, u_star) == pytest.approx(p[2] * d45, rel=1e-12)
    with pytest.raises(ValueError):
        metrics.min_cosine_distance(np.zeros((3, 2)), u_star)


def test_jax_metrics_equal_the_numpy_oracles():
    rng = np.random.default_rng(0)
    u, u_star = rng.normal(size=(30, 6)), rng.normal(size=(4, 6))
    u[3] = 0.0
    with jax.enable_x64(True):
        assert float(A.wcd_eq9(jnp.asarray(u), jnp.asarray(u_star))) == pytest.approx(
            metrics.weighted_cosine_distance(u, u_star), rel=1e-12)
        assert float(A.wcd_code(jnp.asarray(u), jnp.asarray(u_star))) == pytest.approx(
            metrics.min_cosine_distance(u, u_star), rel=1e-12)
        # Test-LRfit: eigenvalues of Phi Phi^T below 1e-10 of the largest dropped is lstsq with rcond 1e-5
        x, xt = rng.normal(size=(12, 5)), rng.normal(size=(40, 5))
        y, yt = rng.normal(size=(12, 1)), rng.normal(size=(40, 1))
        w = rng.normal(size=(50, 5))
        act, _ = models.get_activation("relu")
        got = float(A.refit_test_loss(act, jnp.asarray(w), jnp.asarray(x), jnp.asarray(y), jnp.asarray(xt),
                                      jnp.asarray(yt)))
    feats = lambda a: np.maximum(a @ w.T, 0.0)  # noqa: E731
    want = metrics.linear_refit(feats(x), y, feats(xt), yt, rcond=1e-5)["test_loss"]
    assert got == pytest.approx(want, rel=1e-8)


def test_units_are_the_identity_at_the_papers_sizes_and_scale_as_documented():
    assert A.gn_lr(3.0, n_train=500) == 3.0 and A.gd_lr(3.0, width=5000) == 3.0
    assert A.eps0_ours(1e-7, width=5000, n_train=500) == pytest.approx(1e-7)
    assert A.gn_lr(100.0, n_train=50) == pytest.approx(10.0)                 # same fraction of a full step
    assert A.gd_lr(100.0, width=250) == pytest.approx(5.0)                   # same move per unit
    assert A.eps0_ours(1e-7, width=250, n_train=50) == pytest.approx(1e-7 * 0.1 * 20)
    assert A.gn_lr(1.0, n_train=3000, outputs=10, ref_n=3000) == pytest.approx(0.1)
    c = A.checkpoints(400, 20)
    assert c[0] == 0 and c[-1] == 400 and np.all(np.diff(c) > 0)


def test_one_gn_and_one_gd_step_equal_arbels_update_in_float64():
    """The engine's first step, checked against J^T (J J^T + eps I)^{-1} (f - y)/N and the
    gradient of 0.5 mean (f - y)^2, formed from an explicit Jacobian in float64."""
    width, n = 16, 7
    rng = np.random.default_rng(1)
    dat = {"x": A.with_bias(rng.normal(size=(1, n, 10)).reshape(n, 10))[None],
           "y": rng.normal(size=(1, n, 1)), "xt": A.with_bias(rng.normal(size=(20, 10)))[None],
           "yt": rng.normal(size=(1, 20, 1)), "ustar": rng.normal(size=(1, 5, 10))}
    z = rng.normal(size=(1, width, 11))
    tau0, lr, eps0 = 0.5, 0.3, 1e-3
    model = models.mean_field(width=width)
    f = model.bind()
    with jax.enable_x64(True):
        x, y = jnp.asarray(dat["x"][0]), jnp.asarray(dat["y"][0])
        # a readout of zero makes the hidden Jacobian vanish; one GN step first, then compare the second
        p0 = {"u": jnp.asarray(tau0 * z[0]), "v": jnp.zeros((width, 1))}
        flat, unravel = jax.flatten_util.ravel_pytree(p0)

        def gn_step(flat_p):
            jac = jax.jacobian(lambda q: f(unravel(q), x)[:, 0])(flat_p)
            a = jac @ jac.T
            eps = max(float(np.linalg.eigvalsh(np.asarray(a))[0]), eps0)
            r = (f(unravel(flat_p), x) - y)[:, 0] / n
            return flat_p - lr * jac.T @ jnp.linalg.solve(a + eps * jnp.eye(n), r)

        p2 = gn_step(gn_step(flat))
        want_gn = float(0.5 * jnp.mean((f(unravel(p2), x) - y) ** 2))
        grad = jax.grad(lambda q: 0.5 * jnp.mean((f(unravel(q), x) - y) ** 2))
        p2 = flat - lr * grad(flat)
        p2 = p2 - lr * grad(p2)
        want_gd = float(0.5 * jnp.mean((f(unravel(p2), x) - y) ** 2))
    common = dict(width=width, dim=10, eps0=eps0, stop_rtol=0.0, ends=(0, 1, 2), dtype="float64")
    got_gn = A.sweep("gn", dat, z, [0], [tau0], [lr], **common)
    got_gd = A.sweep("gd", dat, z, [0], [tau0], [lr], **common)
    assert got_gn["train"][0, 2] == pytest.approx(want_gn, rel=1e-9)
    assert got_gd["train"][0, 2] == pytest.approx(want_gd, rel=1e-9)
    assert int(got_gn["steps"][0]) == 2 and not got_gn["diverged"][0]


def test_divergence_keeps_the_parameters_before_the_bad_step_and_convergence_stops():
    dat = A.teacher_data(1, 0, n_train=10, n_test=50)
    z = A.hidden_directions(1, 0, 30, 11)
    common = dict(width=30, dim=10, ends=(0, 50), dtype="float64")
    gd = A.sweep("gd", dat, z, [0], [100.0], [A.gd_lr(1e6, width=30)], **common)
    assert gd["diverged"][0] and int(gd["steps"][0]) < 50
    assert np.isfinite(gd["train"][0, -1]) and gd["train"][0, -1] <= 1e3 * gd["train"][0, 0]
    gn = A.sweep("gn", dat, z, [0], [1.0], [A.gn_lr(250.0, n_train=10)], eps0=1e-6, stop_rtol=1e-8, **common)
    assert gn["converged"][0] and not gn["diverged"][0] and int(gn["steps"][0]) < 50
    assert gn["train"][0, -1] <= 1e-8 * gn["train"][0, 0]


# ------------------------------------------------------------------------------ experiments at tiny scale
def test_steps_and_init_at_tiny_scale_return_what_the_chapter_needs(results):
    rec = _run(ES.NAME, {"scale": "tiny"}, results)
    sz = ES.SCALES["tiny"]
    L, S, T = len(sz["gn_lrs"]), sz["seeds"], len(A.checkpoints(sz["gn_steps"], sz["checkpoints"]))
    assert rec.completed
    for k in A.METRICS:
        assert rec[f"gn/{k}"].shape == (L, S, T), k
        assert np.all(np.isfinite(rec[f"gn/{k}"]))
    assert rec["rf_test"].shape == (S,)
    np.testing.assert_allclose(rec["gn/lrfit"][:, :, 0], rec["gd/lrfit"][:, :, 0], rtol=1e-4)  # same initial features
    s = ES.summary(rec)
    rows = ES.claims(s)
    assert len(rows) == 8 and all(r["verdict"] in (HOLDS, FAILS, UNRESOLVED) for r in rows)
    assert "| setting |" in ES.settings_markdown(rec)
    ES.figure_final(s)
    ES.figure_trajectories(s, lrs=sz["gn_lrs"])

    rec_i = _run(EI.NAME, {"scale": "tiny"}, results)
    si = EI.summary(rec_i)
    G = len(EI.SCALES["tiny"]["tau0s"])
    assert si["rf"].shape == (G, S) and si["best"]["gn"].shape == (G,)
    # ReLU is positively homogeneous: RF's test loss does not depend on tau0 (same directions z)
    np.testing.assert_allclose(si["rf"], np.broadcast_to(si["rf"][:1], si["rf"].shape), rtol=1e-6)
    assert len(EI.claims(si)) == 6
    EI.figure(si)
    EI.figure_sigma(si)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_samples_mnist_and_damping_at_tiny_scale(results):
    rec = _run(EN.NAME, {"scale": "tiny"}, results)
    s = EN.summary(rec)
    K, G, S = len(EN.SCALES["tiny"]["n_trains"]), 2, EN.SCALES["tiny"]["seeds"]
    assert s["rf"].shape == (K, G, S) and s["test"]["gn"].shape == (K, G, S)
    assert len(EN.claims(s)) == 6 and len(EN.slope_table(s)) == 3 * G
    rec_m = _run(EM.NAME, {"scale": "tiny"}, results)
    sm = EM.summary(rec_m)
    assert sm["final"]["gn"]["lrfit"].shape == (2, EM.SCALES["tiny"]["seeds"])
    assert rec_m.meta["dim"] == 64 and len(EM.claims(sm)) == 2
    rec_d = _run(ED.NAME, {"scale": "tiny"}, results)
    assert rec_d["test"].shape == (2, ED.SCALES["tiny"]["seeds"]) and len(ED.claims(rec_d)) == 2
    assert np.all(rec_d["sigma_min_init"] == rec_d["sigma_min_init"][:1])


# ------------------------------------------------------------------------------ parameters
# The paper's sizes, budgets and seeds: Section 5 (M = 5000, N = 500, at most 1e5 GN and 1e6 GD
# steps), C.1 (5 seeds; Fig. 4 left at N = 2000), C.2 (N = 100 .. 1500), C.4 (one run, at most
# 100000 steps of either method, on the 1497 training images digits leave beside a 300-image test set).
PAPER = {
    ES: {"width": 5000, "n_train": 500, "gn_steps": 100_000, "gd_steps": 1_000_000, "seeds": 5},
    EI: {"width": 5000, "n_train": 500, "gn_steps": 100_000, "gd_steps": 1_000_000, "seeds": 5},
    EN: {"width": 5000, "n_trains": (100, 200, 500, 1000, 1500), "gn_steps": 100_000, "gd_steps": 1_000_000,
         "seeds": 5},
    EM: {"width": 5000, "n_train": 1497, "gn_steps": 100_000, "gd_steps": 100_000, "seeds": 1},
    ED: {"width": 5000, "n_train": 500, "steps": 100_000, "seeds": 5},
    EW: {"n_train": 2000, "gn_steps": 100_000, "gd_steps": 1_000_000, "seeds": 5, "tau0": 1.0, "activation": "silu"},
}


@pytest.mark.parametrize("module", list(PAPER))
def test_paper_scale_resolves_to_the_papers_sizes_budgets_and_seeds(module):
    exp = runner._experiments.get(module.NAME)
    p = exp.params.from_dict({"scale": "paper"}, experiment=module.NAME).resolved()
    for key, want in PAPER[module].items():
        got = tuple(p[key]) if isinstance(p[key], (list, tuple)) else p[key]
        assert got == want, (module.NAME, key)
    if module is EW:
        assert p["widths"][0] >= p["n_train"] and len(p["widths"]) >= 3


@pytest.mark.parametrize("name, params, words", [
    (ES.NAME, {"width": 10, "n_train": 20}, "width"),
    (ES.NAME, {"small_lr": 0.5}, "small_lr"),
    (ES.NAME, {"small_lr": 100.0, "large_lr": 1e-2}, "smaller"),
    (ES.NAME, {"gn_lrs": [1.0, 1.0, 10.0]}, "repeated"),
    (EI.NAME, {"tau0s": [1.0, 0.1]}, "increasing"),
    (EN.NAME, {"n_trains": [50, 20]}, "increasing"),
    (EN.NAME, {"width": 30, "n_trains": [20, 40]}, "width"),
    (EM.NAME, {"large_lr": 7.0}, "large_lr"),
    (ED.NAME, {"eps0s": [1e-3, 1e-5]}, "increasing"),
    (EW.NAME, {"widths": [80, 40]}, "increasing"),
    (EW.NAME, {"widths": [20, 80], "n_train": 40}, "n_train"),
    (ES.NAME, {"tau0": -1.0}, "tau0"),
    (ES.NAME, {"activation": "gelu"}, "activation"),
])
def test_bad_parameters_fail_before_any_compute(tmp_path, name, params, words):
    with pytest.raises(ParameterError, match=words) as err:
        _run(name, params, tmp_path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / name).exists() or not any((tmp_path / name).rglob("*"))


# ------------------------------------------------------------------------------ claims on synthetic results
def _steps_summary(gn_small=0.01, gn_large=0.03, gd_small=0.05, gd_large=0.02, noise=0.05, seeds=5, test_gn=0.3,
                   diverged=None):
    """A synthetic arbel_steps summary: Test-LRfit and WCD per step size and seed."""
    rng = np.random.default_rng(0)
    lrs = np.array([1e-2, 1.0, 100.0])
    T = 4

    def arr(a, b):
        mid = math.sqrt(a * b)
        base = np.array([a, mid, b])[:, None] * 10 ** (noise * rng.standard_normal((3, seeds)))
        return base

    out = {"lr": {"gn": lrs, "gd": lrs}, "final": {}, "trace": {}, "ends": {"gn": np.arange(T), "gd": np.arange(T)},
           "diverged": {}, "converged": {}, "steps": {}, "rf": np.full(seeds, 0.06), "small_lr": 1e-2,
           "large_lr": 100.0, "hidden_margin": 0.3}
    for m, (a, b) in (("gn", (gn_small, gn_large)), ("gd", (gd_small, gd_large))):
        lrfit = arr(a, b)
        test = np.full((3, seeds), test_gn) if m == "gn" else lrfit * 1.1
        fin = {"lrfit": lrfit, "wcd": lrfit * 10, "test": test, "train": test, "wcd_code": lrfit * 10,
               "sigma_min": np.ones((3, seeds))}
        out["final"][m] = fin
        out["trace"][m] = {k: np.repeat(v[..., None], T, axis=-1) for k, v in fin.items()}
        out["diverged"][m] = np.zeros((3, seeds), bool) if diverged is None or m != "gn" else diverged
        out["converged"][m] = np.zeros((3, seeds), bool)
        out["steps"][m] = np.full((3, seeds), 10)
    return out


def test_step_claims_hold_fail_and_cannot_resolve():
    rows = ES.claims(_steps_summary())
    assert [r["verdict"] for r in rows] == [HOLDS] * 8
    flipped = ES.claims(_steps_summary(gn_small=0.03, gn_large=0.01, gd_small=0.02, gd_large=0.05, test_gn=0.01))
    assert [r["verdict"] for r in flipped[:5]] == [FAILS] * 5
    assert ES.claims(_steps_summary(gn_small=0.2, gn_large=0.3))[7]["verdict"] == FAILS  # features worse than RF
    noisy = ES.claims(_steps_summary(gn_small=0.02, gn_large=0.021, noise=0.5))
    assert noisy[0]["verdict"] == UNRESOLVED
    div = np.zeros((3, 5), bool)
    div[2, 0] = True
    assert ES.claims(_steps_summary(diverged=div))[0]["verdict"] == UNRESOLVED


def test_silu_claims_compare_the_best_step_sizes():
    s_relu_like = _steps_summary(gn_small=0.01, gn_large=0.02, test_gn=0.01)   # GN's best test 0.01 < GD's
    s_smooth = _steps_summary(gn_small=0.01, gn_large=0.02, test_gn=0.2)      # GN's best test 0.2 > GD's
    rows = ES.silu_claims({1.0: s_smooth, 1e6: s_relu_like})
    verdict = {r["claim"]: r["verdict"] for r in rows}
    assert verdict["SiLU β = 1e6: GN's best test loss below GD's"] == HOLDS
    assert verdict["SiLU β = 1: GD's best test loss below GN's"] == HOLDS
    rows = ES.silu_claims({1.0: s_relu_like, 1e6: s_smooth})
    assert {r["verdict"] for r in rows[:2]} == {FAILS}


def _init_summary(gap_small=0.5, gap_large=0.0, noise=0.02, seeds=5):
    rng = np.random.default_rng(1)
    tau = np.array([1e-3, 1.0, 100.0])
    rf = np.full((3, seeds), 0.06) * 10 ** (noise * rng.standard_normal((3, seeds)))
    best = {}
    for m in ("gn", "gd"):
        test = rf * 10 ** (-np.array([gap_small, 0.2, gap_large])[:, None] + noise * rng.standard_normal((3, seeds)))
        sig = np.ones((3, seeds, 4))
        sig[0, :, -1] = 1e4
        best[m] = {"test": test, "sigma_min": sig[..., -1]}
    trace = {m: {"sigma_min": sig} for m in ("gn", "gd")}
    return {"tau0": tau, "rf": rf, "lr": {"gn": np.array([10.0]), "gd": np.array([10.0])},
            "best": {"gn": np.zeros(3, int), "gd": np.zeros(3, int)}, "best_final": best, "best_trace": trace,
            "match_margin": 0.1}


def test_init_claims_hold_fail_and_cannot_resolve():
    assert [r["verdict"] for r in EI.claims(_init_summary())] == [HOLDS] * 6
    worse = [r["verdict"] for r in EI.claims(_init_summary(gap_small=-0.5, gap_large=0.5))]
    assert worse[:4] == [FAILS] * 4
    noisy = [r["verdict"] for r in EI.claims(_init_summary(gap_small=0.1, gap_large=0.08, noise=0.4))]
    assert noisy[0] == UNRESOLVED and noisy[2] == UNRESOLVED


def _samples_summary(learned_slope=-1.5, rf_slope=-0.5, noise=0.02, seeds=5, regime_gap=0.5):
    rng = np.random.default_rng(2)
    n = np.array([20.0, 40.0, 80.0])
    ln = np.log10(n)[:, None, None]

    def curve(slope):
        return 10 ** (slope * ln + noise * rng.standard_normal((3, 2, seeds)))

    test = curve(learned_slope)
    test[:, 1] = 10 ** ((learned_slope + regime_gap) * ln[:, 0] + noise * rng.standard_normal((3, seeds)))
    return {"n": n, "tau0": np.array([1e-3, 1.0]), "rf": curve(rf_slope), "test": {"gn": test, "gd": test.copy()},
            "lrfit": {"gn": test, "gd": test}, "best": {"gn": np.zeros((3, 2), int), "gd": np.zeros((3, 2), int)},
            "lr": {"gn": np.array([10.0]), "gd": np.array([10.0])}, "slope_margin": 0.1}


def test_samples_claims_and_slopes():
    s = _samples_summary()
    np.testing.assert_allclose(EN.slopes(s["n"], s["rf"]).mean(), -0.5, atol=0.05)
    assert [r["verdict"] for r in EN.claims(s)] == [HOLDS] * 6
    same = [r["verdict"] for r in EN.claims(_samples_summary(learned_slope=-0.2, regime_gap=0.0, noise=0.005))]
    assert same[:4] == [FAILS] * 4 and same[4:] == [FAILS] * 2
    noisy = [r["verdict"] for r in EN.claims(_samples_summary(learned_slope=-0.55, noise=0.5))]
    assert noisy[0] == UNRESOLVED
    assert np.all(EN.r_squared(s["n"], s["rf"]) > 0.99)


def test_mnist_and_damping_claims():
    s = _steps_summary()
    s["gd_limit"] = 10.0
    s["lr"]["gd"] = np.array([1.0, 10.0, 100.0])
    s["diverged"]["gd"] = np.array([[False] * 5, [False] * 5, [True] * 5])
    assert [r["verdict"] for r in EM.claims(s)] == [HOLDS, HOLDS]
    s["diverged"]["gd"] = np.zeros((3, 5), bool)
    assert EM.claims(s)[1]["verdict"] == FAILS
    rec = {"eps0": np.array([1e-9, 1e-3]), "diverged": np.zeros((2, 5), bool),
           "test": np.array([[0.1] * 5, [0.05] * 5]) * 10 ** (0.01 * np.arange(5)),
           "lrfit": np.array([[0.05] * 5, [0.1] * 5]) * 10 ** (0.01 * np.arange(5))}
    assert [r["verdict"] for r in ED.claims(rec)] == [HOLDS, FAILS]
    q = {"dampings": np.array([1e-6, 1.0, 1e3]), "test_rmse": np.array([[1.0] * 6, [0.5] * 6, [0.4] * 6]) *
         10 ** (0.01 * np.arange(6)), "train_rmse": np.full((3, 6), 0.1), "diverged": np.zeros((3, 6), bool),
         "reached_tol": np.array([[True] * 6, [True] * 6, [False] * 6])}
    row = ED.main_paper_claim(q)
    assert row["verdict"] == HOLDS and "damping 1 than 1e-6" in row["claim"]


def test_affine_claims_hold_on_a_power_law_fail_on_a_bend_and_cannot_resolve_noise():
    # through three sizes a bend is (y1 - 2 y2 + y3) / (2 h^2) with h = log10 2: noise of 0.001 decades
    # makes changes of slope of about 0.016 per seed
    s = _samples_summary(noise=0.001)
    rows = EN.affine_claims(s)
    assert len(rows) == 4 and [r["verdict"] for r in rows] == [HOLDS] * 4
    np.testing.assert_allclose(EN.slope_change(s["n"], s["rf"]), 0.0, atol=0.06)
    bent = _samples_summary(noise=0.001)
    x = np.log10(bent["n"])
    bend = 10 ** (1.5 * (x - x.mean()) ** 2)[:, None, None]   # slope changes by 2 * 1.5 * log10(4) = 1.8
    bent["test"] = {m: v * bend for m, v in bent["test"].items()}
    np.testing.assert_allclose(EN.slope_change(bent["n"], bent["test"]["gn"]), 3 * np.log10(4), atol=0.05)
    assert {r["verdict"] for r in EN.affine_claims(bent)} == {FAILS}
    noisy = EN.affine_claims(_samples_summary(noise=0.3))
    assert all(r["verdict"] == UNRESOLVED for r in noisy)
    two = _samples_summary()
    two["n"], two["test"] = two["n"][:2], {m: v[:2] for m, v in two["test"].items()}
    assert EN.affine_claims(two) == []


def _width_summary(gn_slope=0.0, gd_slope=0.02, rf_slope=-0.4, noise=0.01, seeds=5):
    rng = np.random.default_rng(3)
    w = np.array([40.0, 80.0, 160.0, 320.0])
    lw = np.log10(w / 40)[:, None]

    def curve(slope, level):
        return level * 10 ** (slope * lw + noise * rng.standard_normal((len(w), seeds)))

    return {"width": w, "rf": curve(rf_slope, 0.1), "test": {"gn": curve(gn_slope, 0.02), "gd": curve(gd_slope, 0.03)},
            "lrfit": {}, "converged": {}, "best": {}, "lr": {}, "flat_margin": 0.1}


def test_width_claims_hold_fail_and_cannot_resolve():
    assert [r["verdict"] for r in EW.claims(_width_summary())] == [HOLDS] * 3
    steep = [r["verdict"] for r in EW.claims(_width_summary(gn_slope=-0.5, gd_slope=0.5, rf_slope=0.3))]
    assert steep == [FAILS] * 3
    noisy = [r["verdict"] for r in EW.claims(_width_summary(gn_slope=0.1, rf_slope=-0.02, noise=0.3))]
    assert noisy[0] == UNRESOLVED and noisy[2] == UNRESOLVED


def test_width_at_tiny_scale(results):
    rec = _run(EW.NAME, {"scale": "tiny"}, results)
    sz = EW.SCALES["tiny"]
    W, S = len(sz["widths"]), sz["seeds"]
    assert rec["gn/test"].shape == (W, len(sz["gn_lrs"]), S) and rec["rf_test"].shape == (W, S)
    assert np.all(np.isfinite(rec["gn/test"])) and np.all(np.isfinite(rec["rf_test"]))
    s = EW.summary(rec)
    assert s["test"]["gd"].shape == (W, S) and len(EW.claims(s)) == 3
    EW.figure(s)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_small_steps_check_reads_convergence_and_the_best_step():
    s = _steps_summary()                                    # GN: lr 1e-2, 1, 100; nothing converged
    s["final"]["gn"]["test"] = np.array([[0.3] * 5, [0.2] * 5, [0.1] * 5])
    got = ES.small_steps_check(s, below=1.0)
    assert got == {"converged": 0, "runs": 5, "best_lr": 100.0, "consistent": True}
    s["converged"]["gn"][0, 2] = True
    assert not ES.small_steps_check(s, below=1.0)["consistent"]
    s["converged"]["gn"][:] = False
    s["final"]["gn"]["test"] = np.array([[0.05] * 5, [0.2] * 5, [0.1] * 5])
    got = ES.small_steps_check(s, below=1.0)
    assert got["best_lr"] == 0.01 and not got["consistent"]


def test_gd_onset_and_the_divergence_row_state_their_resolution():
    lr = np.array([1.0, 10.0, 100.0, 1000.0])
    div = np.array([[False] * 5, [False] * 5, [True] * 5, [True] * 5])
    assert EM.gd_onset(lr, div) == (10.0, 100.0)
    mixed = div.copy()
    mixed[2, 0] = False
    assert EM.gd_onset(lr, mixed) == (10.0, 1000.0)
    assert EM.gd_onset(lr, np.ones((4, 5), bool)) == (None, 1.0)
    assert EM.gd_onset(lr, np.zeros((4, 5), bool)) == (1000.0, None)
    s = _steps_summary()
    s["gd_limit"], s["lr"]["gd"], s["diverged"]["gd"] = 10.0, lr, div
    row = EM.claims(s)[1]
    assert row["verdict"] == HOLDS and row["resolvable"] == pytest.approx(1.0)
    assert "onset in (10, 100]" in row["measured"] and "Newcombe" in row["measured"]
    s["diverged"]["gd"] = mixed
    assert EM.claims(s)[1]["verdict"] == UNRESOLVED
    s["diverged"]["gd"] = np.zeros((4, 5), bool)
    row = EM.claims(s)[1]
    assert row["verdict"] == FAILS and "no run diverged up to λ = 1e3" in row["measured"]
    s["diverged"]["gd"] = mixed
    early = div.copy()
    early[1, 3] = True
    assert EM.claims({**s, "diverged": {**s["diverged"], "gd": early}})[1]["verdict"] == FAILS


def test_tie_in_agrees_only_when_both_claims_hold():
    row = lambda claim, v: verdicts.verdict(claim, "", "", v)  # noqa: E731
    step = row("GN: Test-LRfit lower at step 1e-2 than at 100", HOLDS)
    damp = [row("GN: test loss lower with damping floor", FAILS), row("GN: Test-LRfit lower with damping floor", HOLDS)]
    quintic = row("quintic", HOLDS)
    assert [r["verdict"] for r in ED.tie_in(step, damp, quintic)] == [HOLDS, HOLDS]
    damp[1] = row("GN: Test-LRfit lower with damping floor", FAILS)
    assert [r["verdict"] for r in ED.tie_in(step, damp, quintic)] == [FAILS, FAILS]
    damp[1] = row("GN: Test-LRfit lower with damping floor", UNRESOLVED)
    assert [r["verdict"] for r in ED.tie_in(step, damp, quintic)] == [UNRESOLVED, UNRESOLVED]
    assert ED.tie_in(row("x", FAILS), [row("Test-LRfit", HOLDS)], quintic)[0]["verdict"] == FAILS
    with pytest.raises(ValueError):
        ED.tie_in(step, damp[:1], quintic)
