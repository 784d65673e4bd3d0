"""Ortiz-Jimenez et al. (book/ntk_eigenfunctions.md, book/energy_concentration.md): the two experiments
at tiny scale, their numerics against oracles, the claim functions on synthetic results, and
their parameters."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin
from itlin import data, metrics, models
from itlin.book import runner, verdicts
from itlin.book.experiments import ParameterError
from itlin.book.experiments.ortiz import ortiz_concentration as oc
from itlin.book.experiments.ortiz import ortiz_eigenfunctions as oe


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("ortiz-results")


@pytest.fixture(scope="module")
def eig_tiny(results):
    return runner.run(oe.NAME, {"scale": "tiny"}, results_dir=results, progress=False, verbose=False)


@pytest.fixture(scope="module")
def conc_tiny(results):
    return runner.run(oc.NAME, {"scale": "tiny"}, results_dir=results, progress=False, verbose=False)


# ------------------------------------------------------------------------------ the experiments, tiny
def test_eigenfunctions_tiny_returns_what_the_chapter_needs(eig_tiny):
    sizes = oe.SCALES["tiny"]
    S, J, E = sizes["seeds"], len(sizes["eigen_indices"]), sizes["epochs"]
    assert eig_tiny.completed
    res, r = eig_tiny.tree(), oe.resolved(eig_tiny)
    assert list(res["eigen_indices"]) == list(sizes["eigen_indices"])
    assert set(res["models"]) == set(sizes["models"])
    n = r["n_train"] + r["n_val"]
    for name, m in res["models"].items():
        assert m["eigvals"].shape == (S, n) and np.all(np.diff(m["eigvals"], axis=1) <= 1e-6 * m["eigvals"][:, :1])
        assert oe.present(res, name) == list(sizes["optimizers"])
        for variant in oe.VARIANTS:
            g = m[f"sgd_{variant}"]
            for key in ("val_acc", "train_acc", "l2_distance", "cos_distance", "diverged"):
                assert g[key].shape == (S, J + 1), key
            assert g["epoch_loss"].shape == (S, J + 1, E)
            assert np.all((g["val_acc"] >= 0) & (g["val_acc"] <= 1))
        # the linearised model starts where the network does, and both move
        assert np.all(m["sgd_network"]["l2_distance"] > 0) and np.all(m["sgd_linear"]["l2_distance"] > 0)
    assert r["steps"] == E * r["steps_per_epoch"]
    rows = oe.claims_item1(res, r["eigen_indices"], r["n_val"])
    rows += oe.claims_hardness(res, r["eigen_indices"], r["loss_threshold"], r["steps"], r["steps_per_epoch"])
    assert rows and all(row["verdict"] in (verdicts.HOLDS, verdicts.FAILS, verdicts.UNRESOLVED) for row in rows)
    assert set(eig_tiny.meta["cost"]) == set(sizes["models"])
    assert oe.settings_markdown(oe.settings_rows(eig_tiny)).count("\n") == len(oe.settings_rows(eig_tiny)) + 1
    assert {c["model"] for c in oe.cost_rows(eig_tiny, paper_params={"mlp": 10})} == set(sizes["models"])
    # a model the run did not measure: paper numbers only, its time scaled by P from a measured one
    rows = oe.cost_rows(eig_tiny, paper_n=1000, paper_params={"mlp": 10, "lenet": 30})
    mlp, lenet = rows
    assert lenet["model"] == "lenet" and lenet["n"] is None and lenet["scaled_from"] == "mlp"
    assert lenet["paper_ntk_seconds"] == pytest.approx(3 * mlp["paper_ntk_seconds"])
    assert mlp["paper_gram_bytes"] == lenet["paper_gram_bytes"] == 8.0 * 1000 ** 2
    md = oe.cost_markdown(rows, {"mlp": (2, 5), "lenet": (0, 5)})
    assert md.count("\n") == 3 and "not run" in md and all(line.count("|") == md.splitlines()[0].count("|")
                                                           for line in md.splitlines())


def test_concentration_tiny_returns_what_the_chapter_needs(conc_tiny):
    sizes = oc.SCALES["tiny"]
    S = sizes["seeds"]
    assert conc_tiny.completed
    res, r = conc_tiny.tree(), oc.resolved(conc_tiny)
    nk = r["n_kernel"]
    for name, m in res["models"].items():
        for part in ("init", "end"):
            assert m[part]["ec"].shape == (S,) and np.all((m[part]["ec"] > 0) & (m[part]["ec"] <= 1 + 1e-9))
            assert m[part]["ec_curve"].shape == (S, min(oc.CURVE_K, nk))
            np.testing.assert_allclose(m[part]["ec_curve"][:, r["k"] - 1], m[part]["ec"])
        assert m["test_acc"].shape == (S,) and m["diverged"].shape == (S,)
    a = res["models"]["mlp"]["align"]
    assert a["gain"].shape == (S, len(sizes["align_indices"]), nk)
    link = res["models"][r["link_model"]]["link"]
    assert set(link) == {oc.key_K(K) for K in sizes["Ks"] if K != 1}
    # K = inf keeps the kernel of initialisation: its energy concentration is the initial one
    np.testing.assert_allclose(link["K=inf"]["ec"], res["models"][r["link_model"]]["init"]["ec"])
    assert np.all(link["K=inf"]["updates"] == 0)
    rows = oc.claims_table1(res, r["n_test"]) + oc.claims_spikes(res, r["align_indices"], r["window"], r["spike_z"])
    rows += oc.claims_link(res, r["link_model"], r["Ks"], r["n_test"])
    assert rows and all(row["verdict"] in (verdicts.HOLDS, verdicts.FAILS, verdicts.UNRESOLVED) for row in rows)
    assert "theirs" in oc.table_markdown(res, r["k"], nk)
    # the Gram matrices' cost, per model: the chapter's memory and time table reads it
    for name in sizes["models"]:
        c = conc_tiny.meta["cost"][name]
        assert c["n"] == nk and len(c["ntk_seconds"]) == S and min(c["ntk_seconds"]) > 0
        assert c["grams_per_seed"] == oc.grams_per_seed(r, name)
    assert {c["model"] for c in oe.cost_rows(conc_tiny, paper_n=12_000, paper_params={"mlp": 10})} == {"mlp"}


# ------------------------------------------------------------------------------ numerics against oracles
def test_blockwise_gram_equals_the_ntk_and_the_mlp_closed_form():
    with jax.enable_x64(True):
        x = jax.random.normal(jax.random.PRNGKey(0), (23, 7), jnp.float64)
        model = models.mlp(num_outputs=1, widths=(9, 5))
        params, state = model.init(jax.random.PRNGKey(1), x[:2])
        params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)
        P = itlin.num_params(params)
        mem = 8 * P * 5 / 2 ** 20  # two float32 blocks of 5 inputs: 5 blocks, the last one padded
        assert oe.block_size(P, mem, 23) == 5
        k = oe.gram(model, params, state, x, memory_mb=mem)
        ref = np.asarray(itlin.ntk(model.bind(state), params, x), np.float64)
        closed = np.asarray(models.mlp_ntk(params, x), np.float64)
    np.testing.assert_allclose(k, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(k, closed, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(k, k.T, rtol=1e-12)


def test_gram_of_a_batch_norm_network_uses_the_given_state():
    import flax.linen as nn

    class Tiny(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.Dense(6)(x)
            h = nn.BatchNorm(use_running_average=not train, momentum=0.9)(h)
            return nn.Dense(1)(nn.relu(h))

    model = itlin.Model.from_flax(Tiny(), "tiny_bn")
    x = jax.random.normal(jax.random.PRNGKey(0), (7, 4))
    params, state = model.init(jax.random.PRNGKey(1), x[:2])
    moved = jax.tree_util.tree_map(lambda a: a * 1.7 + 0.2, state)
    mem = 8 * itlin.num_params(params) * 3 / 2 ** 20  # blocks of 3 inputs
    ks = []
    for st in (state, moved):
        k = oe.gram(model, params, st, x, memory_mb=mem)
        np.testing.assert_allclose(k, np.asarray(itlin.ntk(model.bind(st), params, x), np.float64), rtol=1e-5,
                                   atol=1e-6 * np.abs(k).max())
        ks.append(k)
    assert not np.allclose(ks[0], ks[1])  # the batch-norm statistics change the kernel


def test_spectrum_targets_energy_and_alignment_match_the_metrics():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 40))
    k0 = a @ a.T
    b = rng.normal(size=(30, 40))
    kt = k0 + b @ b.T
    y = np.where(rng.normal(size=30) > 0, 1.0, -1.0)
    vals, vecs = oe.spectrum(k0)
    assert np.all(np.diff(vals) <= 0)
    np.testing.assert_allclose(k0 @ vecs[:, 3], vals[3] * vecs[:, 3], atol=1e-8)
    t = oe.sign_targets(vecs, [0, 3])
    assert t.shape == (2, 30) and set(np.unique(t)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(t[1], np.where(vecs[:, 3] >= 0, 1, -1))
    curve = oc.energy_curve(vecs, y, 20)
    for kk in (1, 5, 20):
        assert curve[kk - 1] == pytest.approx(metrics.energy_concentration(k0, y, kk), rel=1e-10)
    summ = oc.kernel_summary(k0, y, 5)
    assert summ["ec"] == pytest.approx(metrics.energy_concentration(k0, y, 5), rel=1e-10)
    assert summ["kta"] == pytest.approx(metrics.kernel_target_alignment(k0, y), rel=1e-12)
    g = oc.alignment_gain(vecs, vals, kt)
    np.testing.assert_allclose(g["a_end"], metrics.eigenvector_alignment(k0, kt, relative=True), rtol=1e-10)
    np.testing.assert_allclose(oc.alignment_gain(vecs, vals, k0)["gain"], 1.0, rtol=1e-8)
    assert oc.random_baseline(50, 12_000) == pytest.approx(math.sqrt(50 / 12_000))


def test_kernel_target_alignment_oracle():
    rng = np.random.default_rng(1)
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    # a kernel whose variable part is y y^T is perfectly aligned once centred, at any scale and offset
    assert metrics.kernel_target_alignment(3.0 * np.outer(y, y) + 5.0, y) == pytest.approx(1.0)
    a = rng.normal(size=(6, 3))
    k = a @ a.T
    h = np.eye(6) - 1.0 / 6
    kc, yc = h @ k @ h, h @ y
    expect = (yc @ kc @ yc) / (np.linalg.norm(kc) * np.linalg.norm(np.outer(yc, yc)))
    assert metrics.kernel_target_alignment(k, y) == pytest.approx(expect, rel=1e-12)
    plain = (y @ k @ y) / (np.linalg.norm(k) * len(y))
    assert metrics.kernel_target_alignment(k, y, centered=False) == pytest.approx(plain, rel=1e-12)
    assert metrics.kernel_target_alignment(7.0 * k, y) == pytest.approx(expect, rel=1e-12)
    with pytest.raises(ValueError, match="does not match"):
        metrics.kernel_target_alignment(k, y[:4])


def test_vectorised_training_equals_the_library_driver():
    x = jax.random.normal(jax.random.PRNGKey(0), (40, 6))
    model = models.mlp(num_outputs=1, widths=(8,))
    inits = oe.init_many(model, 3, 2, x[:2])
    one_by_one = model.init(oe.init_key(3, 1), x[:2])[0]
    for a, b in zip(jax.tree_util.tree_leaves(inits[1][0]), jax.tree_util.tree_leaves(one_by_one)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    targets = np.where(np.random.default_rng(0).normal(size=(2, 2, 40)) > 0, 1.0, -1.0).astype(np.float32)
    for K in ("inf",):  # the linearised path; K = 1 runs the same two drivers through the network's own step
        tr = itlin.iterative_linearisation(model, optax.sgd(optax.linear_schedule(0.05, 0.0, 12), momentum=0.9), K,
                                           loss="bce")
        seeds = [oe.batch_seed(3, s) for s in range(2)]
        vec, lv = oe.train_runs(tr, inits, x, targets, 12, 16, seeds, vectorise=True)
        one, lo = oe.train_runs(tr, inits, x, targets, 12, 16, seeds, vectorise=False)
        np.testing.assert_allclose(lv, lo, rtol=1e-5, atol=1e-6)
        for s in range(2):
            for t in range(2):
                for a, b in zip(jax.tree_util.tree_leaves(vec[s][t].params), jax.tree_util.tree_leaves(one[s][t].params)):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
                out = oe.predict(tr, one[s][t], x)
                assert out.shape == (40,)
        if K == "inf":  # the trained model is the linearisation at initialisation
            st = one[0][0]
            lin = itlin.linearise(model.bind(), inits[0][0])
            np.testing.assert_allclose(oe.predict(tr, st, x), lin(st.params, x).reshape(-1), rtol=1e-5, atol=1e-6)


def test_weight_distances_and_sign_accuracy():
    p0 = {"a": jnp.asarray([1.0, 0.0]), "b": jnp.asarray([0.0])}
    p1 = {"a": jnp.asarray([0.0, 1.0]), "b": jnp.asarray([0.0])}
    l2, cos = oe.weight_distances(p0, p1)
    assert l2 == pytest.approx(math.sqrt(2)) and cos == pytest.approx(1.0)
    assert oe.sign_accuracy(np.array([0.3, -1.0, 2.0]), np.array([1.0, 1.0, 1.0])) == pytest.approx(2 / 3)


# ------------------------------------------------------------------------------ data and models appended
def test_class_groups_binary_task_and_balanced_subsets():
    ds = data.load("digits")
    b = data.class_groups(ds)
    assert b.task == "regression" and b.num_outputs == 1 and b.y_train.shape == (ds.n_train, 1)
    np.testing.assert_array_equal(b.y_train[:, 0], np.where(ds.y_train >= 5, 1.0, -1.0))
    sub = b.subset(100, 50, seed=0)
    assert np.bincount(sub.meta["labels_train"], minlength=10).min() == 10
    assert np.mean(sub.y_train > 0) == pytest.approx(0.5)
    pair = data.class_groups(ds, ((1,), (7,)), target="label")
    assert pair.task == "classification" and set(np.unique(pair.y_train)) == {0, 1}
    assert pair.n_train == int(np.sum(np.isin(ds.y_train, [1, 7])))
    with pytest.raises(ValueError, match="both groups"):
        data.class_groups(ds, ((1, 2), (2, 3)))
    with pytest.raises(ValueError, match="out of range"):
        data.class_groups(ds, ((1,), (12,)))


def test_resnet18_1d_shapes_and_batch_norm_modes():
    # shapes by abstract evaluation and weights filled on the host: compiling the ResNet's init costs ~20 s
    model = models.resnet18_1d(num_outputs=1, width=2)
    x = jax.random.normal(jax.random.PRNGKey(0), (4, 8, 1))
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(1), x)
    rng = np.random.default_rng(0)

    def fill(path, s):
        name = jax.tree_util.keystr(path)
        if "'var'" in name:
            return np.ones(s.shape, s.dtype)
        if "'mean'" in name:
            return np.zeros(s.shape, s.dtype)
        return (0.3 * rng.normal(size=s.shape)).astype(s.dtype)

    params, state = jax.tree_util.tree_map_with_path(fill, shapes)
    assert "batch_stats" in state and state["batch_stats"]["stem_bn"]["mean"].shape == (2,)
    assert params["stage4_block1"]["conv1"]["kernel"].shape == (3, 8, 16)  # kernel 3, width x 8 channels
    assert params["stage2_block1"]["proj"]["kernel"].shape == (1, 2, 4)  # kernel-1 projection where the width doubles
    assert "bias" not in params["stage1_block1"]["conv1"]  # batch norm: convolutions without bias
    out = model.apply(params, x, state)
    assert out.shape == (4, 1) and np.all(np.isfinite(out))
    # inference mode: an example's output does not depend on the rest of the batch
    np.testing.assert_allclose(model.apply(params, x[::-1], state), out[::-1], rtol=1e-5, atol=1e-6)
    _, new_state = model.train_apply(params, state, x)
    assert not np.allclose(new_state["batch_stats"]["stem_bn"]["mean"], state["batch_stats"]["stem_bn"]["mean"])
    # without batch norm: no model state, convolutions with biases, and the same weights otherwise
    nobn = models.resnet18_1d(width=2, batch_norm=False)
    assert nobn.name == "resnet18_1d_nobn"
    p2, s2 = jax.eval_shape(nobn.init, jax.random.PRNGKey(1), x)
    assert not jax.tree_util.tree_leaves(s2) and "bias" in p2["stage1_block1"]["conv1"]
    assert p2["stage4_block1"]["conv1"]["kernel"].shape == (3, 8, 16)
    with pytest.raises(ValueError, match="signals"):
        model.apply(params, jnp.ones((2, 8, 8, 1)), state)


# ------------------------------------------------------------------------------ claims on synthetic results
def _acc_result(net, lin, labels_net=0.7, labels_lin=0.6):
    """A record-like result for one model with SGD: ``net`` and ``lin`` are (S, J) accuracies."""
    S = net.shape[0]
    col = lambda v: np.full((S, 1), v)
    return {"models": {"lenet": {"sgd_network": {"val_acc": np.hstack([net, col(labels_net)])},
                                 "sgd_linear": {"val_acc": np.hstack([lin, col(labels_lin)])}}}}


def _by_claim(rows, text):
    return [row["verdict"] for row in rows if text in row["claim"]]


def test_item1_claims_hold_fail_and_cannot_resolve():
    rng = np.random.default_rng(0)
    js = [1, 4, 16, 64]
    S = 5
    falling = np.linspace(0.95, 0.55, 4)[None] + 0.005 * rng.normal(size=(S, 4))
    # holds: both fall, the linearised model is ahead, the network wins on labels, the curves cross
    crossing = falling + np.array([0.15, 0.15, -0.15, -0.15]) * 0.5
    rows = oe.claims_item1(_acc_result(falling, crossing, 0.9, 0.6), js, n_val=100_000)
    assert _by_claim(rows, "decays") == [verdicts.HOLDS, verdicts.HOLDS]
    assert _by_claim(rows, "cross") == [verdicts.HOLDS]
    assert _by_claim(rows, "own labels") == [verdicts.HOLDS]
    rows = oe.claims_item1(_acc_result(falling, falling + 0.05), js, n_val=100_000)
    assert _by_claim(rows, "linear advantage") == [verdicts.HOLDS]
    assert _by_claim(rows, "cross") == [verdicts.FAILS]  # the linearised model ahead at every j
    # does not hold: rising curves, the network ahead, the linearised model ahead on labels
    rising = falling[:, ::-1]
    rows = oe.claims_item1(_acc_result(rising, rising - 0.05, 0.6, 0.9), js, n_val=100_000)
    assert _by_claim(rows, "decays") == [verdicts.FAILS, verdicts.FAILS]
    assert _by_claim(rows, "linear advantage") == [verdicts.FAILS]
    assert _by_claim(rows, "own labels") == [verdicts.FAILS]
    # cannot resolve: a validation set of 50 inputs cannot tell 0.6 from 0.59, nor one seed anything
    flat = np.full((S, 4), 0.6)
    rows = oe.claims_item1(_acc_result(flat, flat - 0.01, 0.6, 0.6), js, n_val=50)
    assert set(_by_claim(rows, "")) == {verdicts.UNRESOLVED}
    rows = oe.claims_item1(_acc_result(falling[:1], falling[:1] + 0.05), js, n_val=100_000)
    assert set(_by_claim(rows, "")) == {verdicts.UNRESOLVED}
    # a diverged run (NaN) is dropped from the comparison, and the row says so
    nan = falling.copy()
    nan[0, 0] = np.nan
    rows = oe.claims_item1(_acc_result(nan, falling + 0.05), js, n_val=100_000)
    assert "1 diverged run(s) dropped" in rows[0]["measured"] and rows[0]["verdict"] == verdicts.HOLDS


def test_iterations_censoring_and_hardness_claims():
    assert oe.iterations_to(np.array([0.5, 0.05, 0.01]), 0.1, 10) == 20.0
    assert np.isinf(oe.iterations_to(np.array([0.5, 0.4]), 0.1, 10))
    np.testing.assert_array_equal(oe.censored(np.array([20.0, np.inf, np.nan]), 100, 10), [20.0, 110.0, np.nan])
    assert oe.fitted_range(np.array([[10.0, 20.0, np.inf], [10.0, 30.0, 40.0]]), [1, 2, 3]) == 2
    js, S, E, spe = [1, 4, 16], 5, 10, 7
    rng = np.random.default_rng(0)

    def result(reach_epochs, l2):
        loss = np.ones((S, len(js) + 1, E))
        for t, e in enumerate(reach_epochs):
            if e is not None:
                loss[:, t, e:] = 0.001
        return {"models": {"mlp": {"sgd_network": {
            "epoch_loss": loss, "l2_distance": np.asarray(l2)[None] + 0.01 * rng.normal(size=(S, len(js) + 1)),
            "cos_distance": 0.01 * np.asarray(l2)[None] + 1e-4 * rng.normal(size=(S, len(js) + 1))}}}}

    # holds: later fits, and fitted targets sit further away
    rows = oe.claims_hardness(result([1, 3, None, 1], [1.0, 2.0, 3.0, 1.0]), js, 0.01, E * spe, spe)
    assert [r["verdict"] for r in rows] == [verdicts.HOLDS] * 3
    # each verdict states the smallest gap it resolves, in its own units
    assert [r["resolvable_as"][1] for r in rows] == [" iterations", "", ""]
    assert all(math.isfinite(r["resolvable"]) and r["resolvable"] >= 0 for r in rows)
    assert rows[0]["resolvable"] == 0.0  # every seed reaches the loss at the same epoch: no spread
    assert rows[1]["resolvable"] > 0  # the distances have noise
    md = oe.verdicts_table(rows)
    assert "0 iterations" in md and f"{rows[1]['resolvable']:.2f} |" in md
    assert "every seed fitted j <= 4" in rows[1]["detail"]
    # does not hold: the largest j is fitted first, and fitted targets sit closer
    rows = oe.claims_hardness(result([5, 3, 1, 1], [3.0, 2.0, 1.0, 1.0]), js, 0.01, E * spe, spe)
    assert [r["verdict"] for r in rows] == [verdicts.FAILS] * 3
    # cannot resolve: nothing fitted within the budget
    rows = oe.claims_hardness(result([None, None, None, None], [1.0, 2.0, 3.0, 1.0]), js, 0.01, E * spe, spe)
    assert [r["verdict"] for r in rows] == [verdicts.UNRESOLVED] * 3


def _table_result(init, end, acc, S=5, noise=0.005, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for m, (a, b, c) in zip(("mlp", "lenet", "resnet18"), zip(init, end, acc)):
        out[m] = {"init": {"ec": a + noise * rng.normal(size=S)}, "end": {"ec": b + noise * rng.normal(size=S)},
                  "test_acc": c + noise * rng.normal(size=S)}
    return {"models": out}


def test_table1_claims_hold_fail_and_cannot_resolve():
    rows = oc.claims_table1(_table_result((0.3, 0.3, 0.3), (0.5, 0.7, 0.9), (0.6, 0.7, 0.8)), n_test=100_000)
    assert [r["verdict"] for r in rows] == [verdicts.HOLDS] * 7
    rows = oc.claims_table1(_table_result((0.5, 0.5, 0.5), (0.4, 0.3, 0.2), (0.8, 0.7, 0.6)), n_test=100_000)
    assert [r["verdict"] for r in rows] == [verdicts.FAILS] * 7
    rows = oc.claims_table1(_table_result((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), (0.7, 0.7, 0.7), noise=0.05),
                            n_test=100)
    assert [r["verdict"] for r in rows] == [verdicts.UNRESOLVED] * 7
    md = oc.table_markdown(_table_result((0.3,) * 3, (0.5,) * 3, (0.6,) * 3), 50, 500)
    assert "26.0%" in md and "96.7%" in md and "31.6%" in md


def test_spike_rule_and_claims():
    js, n = [4, 16], 60
    rng = np.random.default_rng(0)

    def result(height, noise):
        gain = np.exp(noise * rng.normal(size=(5, len(js), n)))
        for t, j in enumerate(js):
            gain[:, t, j] *= height
        return {"models": {"mlp": {"align": {"gain": gain}}}}

    assert oc.window(16, 2.0, 60).tolist() == list(range(8, 33))
    assert oc.window(64, 2.0, 60)[-1] == 59
    rows = oc.claims_spikes(result(3.0, 0.05), js, 2.0, 3.0)
    assert rows[0]["verdict"] == verdicts.HOLDS and "10 of 10 runs" in rows[0]["measured"]
    assert math.isfinite(rows[0]["resolvable"]) and rows[0]["resolvable_as"][1] == " (robust z)"
    rows = oc.claims_spikes(result(1.0, 0.05), js, 2.0, 3.0)
    assert rows[0]["verdict"] == verdicts.FAILS
    noisy = result(1.0, 0.05)  # spikes of very different heights across seeds: the mean score is uncertain
    for t, j in enumerate(js):
        noisy["models"]["mlp"]["align"]["gain"][:, t, j] *= np.exp(np.array([0.0, 0.5, 0.1, 0.6, 0.05]))
    row = oc.claims_spikes(noisy, js, 2.0, 3.0)[0]
    assert row["verdict"] == verdicts.UNRESOLVED
    # "cannot resolve": the smallest resolvable distance from the threshold exceeds the measured one
    mean_z = float(row["measured"].split("robust z-score ")[1].split(" ")[0])
    assert row["resolvable"] > abs(mean_z - 3.0)


def test_link_claims_hold_fail_and_cannot_resolve():
    S = 5
    rng = np.random.default_rng(0)

    def result(ec1, ecK, acc1, accK, noise=0.005):
        f = lambda v: v + noise * rng.normal(size=S)
        return {"models": {"lenet": {
            "init": {"ec": f(0.5), "kta": f(0.08)}, "end": {"ec": f(ec1), "kta": f(ec1 / 4)}, "test_acc": f(acc1),
            "link": {"K=70": {"ec": f(ecK), "kta": f(ecK / 4), "test_acc": f(accK), "updates": np.full(S, 2)},
                     "K=inf": {"ec": f(0.5), "kta": f(0.08), "test_acc": f(0.6), "updates": np.zeros(S)}}}}}

    Ks = (1, 70, math.inf)
    rows = oc.claims_link(result(0.7, 0.6, 0.75, 0.65), "lenet", Ks, n_test=100_000)
    assert [r["verdict"] for r in rows] == [verdicts.HOLDS] * 4
    assert "2 feature updates" in rows[0]["claim"]
    assert all(math.isfinite(r["resolvable"]) for r in rows)  # the alignment row included
    assert rows[1]["resolvable_as"] == (1.0, " (alignment)", 3) and "(alignment)" in oe.verdicts_table(rows)
    rows = oc.claims_link(result(0.55, 0.7, 0.6, 0.7), "lenet", Ks, n_test=100_000)
    assert [r["verdict"] for r in rows] == [verdicts.FAILS, verdicts.FAILS, verdicts.HOLDS, verdicts.FAILS]
    rows = oc.claims_link(result(0.6, 0.6, 0.7, 0.7, noise=0.05), "lenet", Ks, n_test=100)
    assert [r["verdict"] for r in rows][0] == verdicts.UNRESOLVED and rows[3]["verdict"] == verdicts.UNRESOLVED
    assert math.isfinite(rows[1]["resolvable"]) and rows[1]["resolvable"] > 0
    assert oc.claims_link(result(0.6, 0.6, 0.7, 0.7), "mlp", Ks, n_test=100) == []


# ------------------------------------------------------------------------------ parameters
def test_paper_scale_parameters_resolve_without_running(tmp_path):
    for exp, params in ((oe.NAME, {}), (oc.NAME, {})):
        plan = runner.plan(exp, {"scale": "paper", **params}, results_dir=tmp_path)
        assert not plan.complete and plan.params["scale"] == "paper"
    r = oe.EigenParams.from_dict({"scale": "paper"}).resolved()
    assert r["models"] == ["mlp", "lenet", "resnet18"] and r["epochs"] == 100 and r["resnet_width"] == 64
    assert r["loss_threshold"] == 0.01 and max(r["eigen_indices"]) == 1000
    assert r["dataset"] == "cifar10"  # their CIFAR-10
    r = oc.ConcentrationParams.from_dict({"scale": "paper"}).resolved()
    assert r["n_kernel"] == 12_000 and r["epochs"] == 200 and r["k"] == 50
    assert r["dataset"] == "cifar10"  # CIFAR-2: classes 0-4 against 5-9 of CIFAR-10 (load_binary)
    for cls in (oe.EigenParams, oc.ConcentrationParams):
        assert cls.from_dict({"scale": "default"}).resolved()["dataset"] == "mnist1d"
        assert cls.from_dict({"scale": "paper", "dataset": "fashion_mnist"}).resolved()["dataset"] == "fashion_mnist"
    pp = oe.paper_num_params()
    assert pp["lenet"] == 61_241 and pp["mlp"] == 3072 * 100 + 100 + 100 * 100 + 100 + 101


def test_settings_tables_read_the_paper_dataset_from_scale(eig_tiny, conc_tiny, monkeypatch):
    assert oe.settings_rows(eig_tiny)[0][2].startswith("cifar10:")
    assert oc.settings_rows(conc_tiny)[0][2].startswith("cifar10, classes 0-4 vs 5-9: 12,000 train")
    monkeypatch.setitem(oe.SCALES["paper"], "dataset", "fashion_mnist")
    monkeypatch.setitem(oc.SCALES["paper"], "dataset", "fashion_mnist")
    assert oe.settings_rows(eig_tiny)[0][2].startswith("fashion_mnist:")
    assert oc.settings_rows(conc_tiny)[0][2].startswith("fashion_mnist,")
    assert oe.settings_rows(eig_tiny)[0][1].startswith("mnist1d:")  # this run: the resolved dataset


def test_grams_per_seed_counts_every_gram_matrix():
    r = {"align_models": ["mlp", "lenet"], "align_indices": [4, 16, 64], "link_model": "lenet",
         "Ks": [1, 10, 70, math.inf]}
    assert oc.grams_per_seed(r, "mlp") == 2 + 3
    assert oc.grams_per_seed(r, "lenet") == 2 + 3 + 2
    assert oc.grams_per_seed(r, "resnet18") == 2


def test_spectrum_and_chance_checks_of_the_prose():
    ev = np.stack([np.exp(-np.arange(200) / 10.0), np.exp(-np.arange(200) / 10.0)])
    text = oe.spectrum_text({"models": {"mlp": {"eigvals": ev}}}, [1, 64], top=50)
    assert "top 50 of 200 eigenvalues hold 99.3%" in text and "j=64 is 0.0017 of the largest" in text
    js, S = [1, 4, 16], 5
    rng = np.random.default_rng(0)

    def result(net_last, lin_last):
        acc = lambda last: np.concatenate([np.full((S, len(js) - 1), 0.9), last + 0.01 * rng.normal(size=(S, 1)),
                                           np.full((S, 1), 0.8)], axis=1)
        return {"models": {"lenet": {"sgd_network": {"val_acc": acc(net_last)},
                                     "sgd_linear": {"val_acc": acc(lin_last)}}}}

    rows = oe.chance_rows(result(0.7, 0.3), js, n_val=100_000)
    assert [r["verdict"] for r in rows] == [verdicts.HOLDS, verdicts.FAILS]
    text = oe.chance_text(rows)
    assert "LeNet network, SGD" in text and "above chance" in text and "below chance" in text
    rows = oe.chance_rows(result(0.5, 0.51), js, n_val=100)
    assert [r["verdict"] for r in rows] == [verdicts.UNRESOLVED] * 2
    assert "not distinguishable from chance" in oe.chance_text(rows)
    assert oe.chance_rows(result(0.5, 0.5), js, 100, name="resnet18") == []


def test_verdicts_table_uses_each_rows_units():
    rows = [verdicts.verdict("a", "p", "m", verdicts.HOLDS, 0.012),
            oe.with_units(verdicts.verdict("b", "p", "m", verdicts.FAILS, 41.6), (1.0, " iterations", 0)),
            verdicts.verdict("c", "p", "m", verdicts.UNRESOLVED, None),
            verdicts.verdict("d", "p", "m", verdicts.UNRESOLVED, math.inf)]
    lines = oe.verdicts_table(rows).splitlines()
    assert "| 1.2 points |" in lines[2] and "| 42 iterations |" in lines[3] and "| — |" in lines[4]
    assert "∞ (one seed)" in lines[5]


@pytest.mark.parametrize("exp,params,match", [
    (oe.NAME, {"eigen_indices": [10, 3]}, "increasing"),
    (oe.NAME, {"models": ["mlp", "vgg"]}, "models"),
    (oe.NAME, {"n_train": 100, "batch_size": 128}, "batch_size"),
    (oe.NAME, {"n_train": 100, "n_val": 50, "batch_size": 32, "eigen_indices": [1, 200]}, "eigenvectors"),
    (oe.NAME, {"optimizers": ["sgd", "sgd"]}, "repeated"),
    (oe.NAME, {"momentum": 1.0}, "momentum"),
    (oc.NAME, {"Ks": [10, "inf"]}, "K=1"),
    (oc.NAME, {"link_model": "resnet18", "models": ["mlp", "lenet"]}, "link_model"),
    (oc.NAME, {"n_kernel": 40, "k": 50}, "k=50"),
    (oc.NAME, {"n_kernel": 100, "align_indices": [60]}, "align_indices"),
    (oc.NAME, {"align_models": ["resnet18"], "models": ["mlp", "lenet"]}, "align_models"),
    (oc.NAME, {"dataset": "imagenet"}, "dataset"),
])
def test_bad_parameters_fail_before_any_compute_with_one_line(exp, params, match, tmp_path):
    with pytest.raises(ParameterError, match=match) as err:
        runner.run(exp, params, results_dir=tmp_path, progress=False, verbose=False)
    assert "\n" not in str(err.value)
    assert not any(tmp_path.iterdir())
