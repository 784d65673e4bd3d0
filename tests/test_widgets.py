"""The book's demo machinery (itlin.widgets, the quintic_demo experiment), the derivation checks
(itlin.derivations) and the K-spectrum schematic (itlin.diagrams)."""

import base64
import io
import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from itlin import models  # noqa: E402
from itlin.book import derivations, diagrams, runner, widgets  # noqa: E402
from itlin.book.experiments.main import quintic_demo  # noqa: E402
from itlin.book.figures import main as figures  # noqa: E402


# ------------------------------------------------------------------------------ the demo layer
def _fig(color="C0", title=""):
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1], color=color)
    ax.set_title(title)
    return fig


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.scripts = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def _parse(text):
    p = _Tags()
    p.feed(text)
    return p


def _grid_demo(calls=None, **kw):
    """A demo over K in {1, 10, inf} and lr in {0.001, 0.01}: a figure, a table and a text per setting."""
    def compute(K, lr):
        if calls is not None:
            calls.append((K, lr))
        return widgets.View(_fig(f"C{int(lr * 1000) % 10}", f"{K}/{lr}"),
                            table=[{"K": widgets.format_value(K), "value": f"<{lr}>"}], text=f"setting {K} / {lr}")

    knobs = [widgets.Knob("K", [1, 10, math.inf], default=10), widgets.Knob("lr", [0.001, 0.01], label="learning rate")]
    return widgets.Demo(knobs, compute, dpi=30, **kw)


def test_static_demo_has_a_slider_per_knob_and_one_frame_per_setting():
    text = _grid_demo(title="demo").static(html_only=True)
    p = _parse(text)
    wrappers = [a for t, a in p.tags if t == "div" and a.get("class") == "itlin-static-demo"]
    assert len(wrappers) == 1 and wrappers[0]["id"].startswith("itlin-demo-")
    ranges = [a for t, a in p.tags if t == "input"]
    assert [r["max"] for r in ranges] == ["2", "1"] and [r["aria-label"] for r in ranges] == ["K", "learning rate"]
    assert ranges[0]["value"] == "1" and ranges[1]["value"] == "0"  # default K = 10 is the second value
    frames = [a for t, a in p.tags if t == "div" and a.get("class") == "itlin-demo-frame"]
    assert sorted(f["data-key"] for f in frames) == sorted(f"{a}-{b}" for a in range(3) for b in range(2))
    assert [f["data-key"] for f in frames if "block" in f["style"]] == ["1-0"]  # visible without JavaScript
    imgs = [a for t, a in p.tags if t == "img"]
    assert len(imgs) == 6 and all(i["src"].startswith("data:image/png;base64,") for i in imgs)
    assert "setting 10 / 0.001" in text and "∞" in text
    assert text.count('<table class="itlin-demo-table">') == 6 and "&lt;0.01&gt;" in text and "<0.01>" not in text


def test_static_demo_frames_are_shown_at_their_css_width_and_ids_are_unique():
    demo = widgets.Demo(widgets.Knob("K", [1]), lambda K: _fig(), dpi=200)
    a, b = demo.static(html_only=True), demo.static(html_only=True)
    (img,) = [t for tag, t in _parse(a).tags if tag == "img"]
    drawn = base64.b64decode(img["src"].split(",", 1)[1])
    css = float(re.search(r"width:(\d+)px", img["style"]).group(1))
    assert abs(css - int.from_bytes(drawn[16:20], "big") / 2) <= 0.5  # dpi 200 shown at 100 px per inch
    ida, idb = (re.findall(r'id="(itlin-demo-[0-9a-f]+)"', t) for t in (a, b))
    assert len(ida) == len(idb) == 1 and ida != idb
    assert json.dumps(ida[0]) in a and json.dumps(idb[0]) not in a  # each script looks up only its own root
    assert 'class="itlin-static-demo"' in demo.static().data  # an IPython HTML object by default


def test_demo_and_knob_refuse_bad_declarations_in_one_line():
    f = lambda K: _fig()
    with pytest.raises(ValueError, match="repeated values"):
        widgets.Knob("K", [1, 1.0])
    with pytest.raises(ValueError, match="default 3 is not one of"):
        widgets.Knob("K", [1, 2], default=3)
    with pytest.raises(ValueError, match="live values .* lack the default"):
        widgets.Knob("K", [1, 2], live=[2, 3])
    with pytest.raises(ValueError, match="identifier"):
        widgets.Knob("learning rate", [1])
    with pytest.raises(ValueError, match="labels for"):
        widgets.Knob("K", [1, 2], labels=["one"])
    with pytest.raises(ValueError, match="max_frames"):
        widgets.Demo([widgets.Knob("a", range(10)), widgets.Knob("b", range(10))], lambda a, b: None)
    with pytest.raises(ValueError, match="share a name"):
        widgets.Demo([widgets.Knob("K", [1]), widgets.Knob("K", [2])], f)
    with pytest.raises(TypeError, match="no knob named lr"):
        widgets.Demo(widgets.Knob("K", [1]), f).view(lr=1)
    with pytest.raises(ValueError, match="matplotlib figure or PNG"):
        widgets.Demo(widgets.Knob("K", [1]), lambda K: b"GIF89a").view()
    assert widgets.Knob("K", [1, "inf"], default=math.inf).default == math.inf  # inf spelled as text


def test_demo_computes_each_setting_once_and_draws_data_through_draw():
    calls = []
    demo = widgets.Demo(widgets.Knob("n", [1, 2, 3]), lambda n: calls.append(n) or list(range(n)),
                        draw=lambda data: widgets.View(text=f"{len(data)} points"))
    assert demo.view(n=2).text == "2 points" and demo.view().text == "1 points"
    demo.static(html_only=True)
    assert sorted(calls) == [1, 2, 3]  # the static grid reuses what was computed
    assert [g["n"] for g in demo.grid()] == [1, 2, 3]


def test_figure_to_png_is_a_png_and_the_palette_makes_it_smaller():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.imshow(np.linspace(0, 1, 400).reshape(20, 20))
    full = widgets.figure_to_png(fig, dpi=60, close=False, palette=False)
    small = widgets.figure_to_png(fig, dpi=60, palette=True)
    assert full.startswith(b"\x89PNG") and small.startswith(b"\x89PNG")
    assert len(small) <= len(full)


_DOM_SHIM = r"""
// A minimal DOM: enough for the demo's script (no browser needed).
const spec = JSON.parse(process.argv[2]);
function el(attrs) {
  return {attrs, style: {display: attrs.style && attrs.style.includes("block") ? "block" : "none"},
          textContent: "", value: attrs.value, listeners: {},
          getAttribute(k) { return this.attrs[k]; },
          addEventListener(t, f) { this.listeners[t] = f; }};
}
const inputs = spec.inputs.map(el), outputs = spec.outputs.map(el), frames = spec.frames.map(el);
const root = {querySelectorAll(sel) {
                if (sel.startsWith("input")) return inputs;
                if (sel.startsWith("output")) return outputs;
                if (sel.startsWith("div")) return frames;
                return []; }};
global.document = {getElementById(id) { return id === spec.id ? root : null; }};
eval(spec.script);
const shown = () => frames.filter(i => i.style.display === "block").map(i => i.attrs["data-key"]);
const states = [[shown(), outputs.map(o => o.textContent)]];
inputs[0].value = "2"; inputs[0].listeners["input"]();
inputs[1].value = "1"; inputs[1].listeners["input"]();
states.push([shown(), outputs.map(o => o.textContent)]);
console.log(JSON.stringify(states));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_static_demo_script_swaps_frames_and_labels(tmp_path):
    p = _parse(_grid_demo().static(html_only=True))
    spec = {"id": [a for t, a in p.tags if t == "div" and a.get("class") == "itlin-static-demo"][0]["id"],
            "inputs": [a for t, a in p.tags if t == "input"], "outputs": [a for t, a in p.tags if t == "output"],
            "frames": [a for t, a in p.tags if t == "div" and a.get("class") == "itlin-demo-frame"],
            "script": p.scripts[0]}
    shim = tmp_path / "shim.js"
    shim.write_text(_DOM_SHIM)
    out = subprocess.run(["node", str(shim), json.dumps(spec)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (first, lab1), (second, lab2) = json.loads(out.stdout)
    assert first == ["1-0"] and lab1 == ["10", "0.001"]
    assert second == ["2-1"] and lab2 == ["∞", "0.01"]


def test_live_demo_has_a_slider_per_knob_computes_on_change_caches_and_says_so():
    import ipywidgets as W

    calls = []
    box = _grid_demo(calls).live()
    assert isinstance(box, W.VBox) and set(box.controls) == {"K", "lr"}
    assert all(isinstance(c, W.SelectionSlider) and not c.continuous_update for c in box.controls.values())
    assert calls == [(10, 0.001)]  # the default setting is drawn once
    first = bytes(box.image.value)
    assert first.startswith(b"\x89PNG") and "&lt;0.001&gt;" in box.table.value
    box.controls["K"].value = math.inf
    assert calls[-1] == (math.inf, 0.001) and bytes(box.image.value) != first
    assert "K = ∞" in box.status.value and "computing" not in box.status.value
    box.controls["K"].value = 10
    assert len(calls) == 2 and bytes(box.image.value) == first  # cached


def test_live_demo_shows_the_busy_state_while_it_computes_and_survives_an_error():
    seen = []

    def compute(n):
        seen.append(box.status.value if n > 1 else "")
        if n == 3:
            raise RuntimeError("no such run")
        return _fig()

    box = None
    demo = widgets.Demo(widgets.Knob("n", [1, 2, 3]), compute)
    box = demo.live()
    box.controls["n"].value = 2
    assert "computing n = 2" in seen[-1]
    box.controls["n"].value = 3
    assert "RuntimeError: no such run" in box.status.value


def test_live_mode_follows_the_environment_and_an_attached_widget_frontend(monkeypatch):
    from ipywidgets import Widget

    monkeypatch.delenv(widgets.DEMOS_ENV, raising=False)
    monkeypatch.setattr(Widget, "_control_comm", None)
    assert not widgets.live_mode()  # papermill, nbclient, plain Python: no frontend
    monkeypatch.setattr(Widget, "_control_comm", object())  # JupyterLab opened the control channel
    assert widgets.live_mode()
    monkeypatch.setenv(widgets.DEMOS_ENV, "static")
    assert not widgets.live_mode()
    monkeypatch.setenv(widgets.DEMOS_ENV, "live")
    monkeypatch.setattr(Widget, "_control_comm", None)
    assert widgets.live_mode()
    monkeypatch.setenv(widgets.DEMOS_ENV, "sometimes")
    with pytest.raises(ValueError, match="'live' or 'static'"):
        widgets.live_mode()


# ------------------------------------------------------------------------------ quintic demo experiment
@pytest.fixture()
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ITLIN_QUIET", "1")
    return tmp_path / "results"


def test_quintic_demo_experiment_runs_caches_and_renders_one_frame_per_setting(results_dir):
    params = {"scale": "tiny", "Ks": [1, "inf"], "learning_rates": [0.01], "steps": 40, "evals": 4, "kconv_lr": 0.05}
    rec = runner.run("quintic_demo", params, verbose=False)
    assert rec.completed and set(rec.runs) == {"K=1,lr=0.01", "K=inf,lr=0.01"}
    again = runner.run("quintic_demo", params, verbose=False)
    assert again.loaded
    Ks, lrs = quintic_demo.grid(rec)
    assert Ks == [1, math.inf] and lrs == [0.01]
    runs = quintic_demo.runs_of(rec)
    assert set(runs) == {(1, 0.01), (math.inf, 0.01)}
    gd, lin = runs[(1, 0.01)], runs[(math.inf, 0.01)]
    assert gd.feature_updates == 40 and lin.feature_updates == 0
    assert gd.history.relin_steps == list(range(1, 41)) and lin.history.relin_steps == []
    # K = 1: the linearised model is the network; K = inf: they differ after training
    np.testing.assert_allclose(gd.f_lin, gd.f_net, atol=1e-5)
    assert np.max(np.abs(lin.f_lin - lin.f_net)) > 1e-4
    assert gd.x_grid.shape == gd.f_net.shape == (quintic_demo.GRID_POINTS,)
    assert gd.ntk_max_init == pytest.approx(lin.ntk_max_init) and gd.ntk_max_init > 0
    assert math.isfinite(gd.ntk_max_end) and gd.ntk_max_end != pytest.approx(gd.ntk_max_init)
    for key in ("train/loss", "train/loss_lin", "test/rmse", "step", "feature_updates"):
        assert len(gd.history.evals[key]) == 5  # step 0 and 4 evaluations
    demo = figures.quintic_demo(rec, live_steps=10)
    assert "40 feature updates" in demo.view(K=1, lr=0.01).text and "K = ∞" in demo.view(K=math.inf).text
    html = demo.static(html_only=True)
    assert html.count('class="itlin-demo-frame"') == 2 and html.count("<img ") == 2
    # the summary has a row per setting; the claims that need settings not run cannot resolve
    assert [r["K"] for r in quintic_demo.summary(rec)] == ["1", "∞"]
    v = {c.id: c.verdict for c in quintic_demo.claims(rec)}
    assert v["small_k.like_gd"] == v["large_k.phases_part"] == v["large_k.diverges"] == "cannot resolve"
    assert v["kconv.agrees"] == v["inf.two_lines"] == v["inf.stable"] == "holds"


def test_quintic_demo_parameters_follow_the_scale_and_are_validated():
    from itlin.book.experiments import ParameterError, get

    exp = get("quintic_demo")
    p = quintic_demo.QuinticParams.from_dict({"scale": "tiny"}).resolved()
    assert p["Ks"] == quintic_demo.SCALES["tiny"]["Ks"] and p["steps"] == 300
    p = quintic_demo.QuinticParams.from_dict({"Ks": "[1, 10, inf]"}).resolved()
    assert p["Ks"] == [1, 10, math.inf] and p["learning_rates"] == quintic_demo.SCALES["default"]["learning_rates"]
    with pytest.raises(ParameterError):
        exp.resolve({"Ks": [0]})
    with pytest.raises(ParameterError, match="evals"):
        exp.resolve({"steps": 10, "evals": 20})
    assert quintic_demo.setting_tag(math.inf, 0.003) == "K=inf,lr=0.003"


def test_quintic_demo_live_version_trains_what_the_record_lacks_through_itlin(results_dir):
    params = {"scale": "tiny", "Ks": [1], "learning_rates": [0.01], "steps": 20, "evals": 2, "kconv_lr": 0.05}
    rec = runner.run("quintic_demo", params, verbose=False)
    demo = figures.quintic_demo(rec, live_steps=10)
    knob_K, knob_lr = demo.knobs
    assert knob_K.values == (1,) and math.inf in knob_K.live and 0.003 in knob_lr.live
    box = demo.live()
    before = bytes(box.image.value)
    box.controls["K"].value = math.inf  # not in the record: trained on release
    assert "10 steps" in demo.view(K=math.inf).text and bytes(box.image.value) != before
    run = quintic_demo.train_setting(math.inf, 0.01, 10, evals=2)
    assert run.steps == 10 and run.feature_updates == 0
    fig = figures.quintic_setting(run)
    assert len(fig.axes) == 2
    # the static demo's frames are this figure: legible at the column width like every other
    from itlin.book.plotting import MIN_TEXT_PX, smallest_text

    assert smallest_text(fig)[0] >= MIN_TEXT_PX, smallest_text(fig)
    plt.close(fig)


# ------------------------------------------------------------------------------ derivations
@pytest.fixture()
def small_problem():
    with jax.enable_x64(True):
        x = jnp.linspace(-2.0, 2.0, 6, dtype=jnp.float64)[:, None]
        y = jnp.sin(2 * x)
        net = models.mlp(width=8, depth=2)
        params = derivations.to_float64(net.init(jax.random.PRNGKey(0), x)[0])
        params = jax.tree_util.tree_map(lambda a: a + 0.1 * jnp.cos(jnp.arange(a.size).reshape(a.shape)), params)
        yield net, params, x, y


def test_to_float64_needs_x64():
    with jax.enable_x64(False):
        with pytest.raises(RuntimeError, match="jax_enable_x64"):
            derivations.to_float64({"w": jnp.ones(2)})


def test_linearised_gd_matches_the_closed_form_flow_to_first_order(small_problem):
    net, params, x, y = small_problem
    with jax.enable_x64(True):
        from itlin import ntk

        lam_max = float(jnp.linalg.eigvalsh(ntk(net.bind(), params, x))[-1])
        cmp = derivations.gradient_flow_comparison(net, params, x, y, 0.01 / lam_max, [0, 10, 100])
        assert cmp["path"].steps.tolist() == [0, 10, 100]
        assert cmp["output_error"][0] < 1e-12 and cmp["param_error"][0] == 0.0
        assert np.all(cmp["output_error"][1:] < 1e-2) and np.all(cmp["param_error"][1:] < 1e-2)
        assert cmp["path"].loss[-1] < cmp["path"].loss[0]
        study = derivations.step_size_study(net, params, x, y, 20.0 / lam_max, [100, 200, 400])
        assert abs(study["output_order"] - 1) < 0.05 and abs(study["param_order"] - 1) < 0.05
        assert np.all(np.diff(study["output_error"]) < 0)


def test_linearised_gd_reports_divergence(small_problem):
    net, params, x, y = small_problem
    with jax.enable_x64(True):
        with pytest.raises(FloatingPointError, match="diverged"):
            derivations.linearised_gd_path(net, params, x, y, 1e3, [2000])


def test_linearised_gd_converges_to_the_gauss_newton_step_and_damping_solves_the_ridge_problem(small_problem):
    net, params, x, y = small_problem
    with jax.enable_x64(True):
        from itlin import gauss_newton_direction, ntk

        lam = np.linalg.eigvalsh(np.asarray(ntk(net.bind(), params, x)))
        lam = lam[lam > lam[-1] * 1e-10]
        eta = 0.5 / lam[-1]
        n = int(30 / (eta * lam[0]))
        res = derivations.gd_to_gauss_newton(net, params, x, y, eta, [0, n // 3, n])
        assert res["distance"][0] == pytest.approx(1.0)
        assert res["distance"][-1] < 1e-8 and res["distance"][1] < 1e-2
        np.testing.assert_allclose(res["distance"][1:], res["flow_distance"][1:], rtol=0.5, atol=1e-10)
        d, _ = gauss_newton_direction(net.bind(), params, x, y, damping=0.1, reduction="sum")
        assert derivations.ridge_gradient_norm(net.bind(), params, d, x, y, 0.1) < 1e-10
        assert derivations.ridge_gradient_norm(net.bind(), params, d, x, y, 1.0) > 1e-3


def test_eigen_residuals_are_gradient_descent_and_the_flow_along_each_eigenvector():
    """The gradient_flow chapter's demo: the residual under k steps of the output-space map
    (I - lr Theta) equals a plain loop of those steps, its components along the eigenvectors are
    (1 - lr lambda_i)^k, and the flow's residual is expm(-tau Theta) z0 (scipy, no eigenvectors)."""
    from scipy.linalg import expm

    from itlin.book.chapters import gradient_flow as GF

    rng = np.random.default_rng(3)
    A = rng.normal(size=(7, 4))
    theta = A @ np.diag([9.0, 3.0, 0.5, 0.05]) @ A.T  # rank 4 of 7: three zero eigenvalues
    z0 = rng.normal(size=7)
    lam_max = np.linalg.eigvalsh(theta)[-1]
    steps = [0, 1, 5, 40, 300]
    for lr in (0.3 / lam_max, 1.9 / lam_max, 2.05 / lam_max):
        out = GF.eigen_residuals(theta, z0, lr, steps)
        z, loop = z0.copy(), []
        for k in range(steps[-1] + 1):
            if k in steps:
                loop.append(z.copy())
            z = z - lr * theta @ z
        scale = np.max(np.abs(loop), axis=1, keepdims=True)
        np.testing.assert_allclose(out["gd_z"] / scale, np.stack(loop) / scale, rtol=0, atol=1e-12)
        nz = out["nonzero"]
        assert nz.sum() == 4
        factor = (1 - lr * out["lam"][nz]) ** np.asarray(steps)[:, None]
        np.testing.assert_allclose(out["gd"][:, nz], factor, rtol=1e-9, atol=1e-12 * np.abs(factor).max())
        for tau, zf in zip(out["tau"], out["flow_z"]):
            np.testing.assert_allclose(zf, expm(-tau * theta) @ z0, rtol=0, atol=1e-10)
        np.testing.assert_allclose(out["flow"][:, nz], np.exp(-np.outer(out["tau"], out["lam"][nz])), rtol=1e-12)
        np.testing.assert_allclose(out["gd"][:, ~nz], 1.0, atol=1e-9)  # a zero eigenvalue's component never moves
    with pytest.raises(ValueError, match="increasing"):
        GF.eigen_residuals(theta, z0, 0.1, [5, 1])


def test_damped_steps_agree_in_both_forms_with_the_svd_and_reach_both_limits():
    """The gauss_newton chapter's demo: the kernel (Woodbury) and primal forms of the damped step
    equal the SVD's closed form -V diag(s / (s^2 + lam)) U^T z0; a large damping gives the gradient
    step -J^T z0 / lam and a small one the minimum-norm step -J^+ z0, also for a rank-deficient J."""
    from itlin.book.chapters import gauss_newton as C

    rng = np.random.default_rng(5)
    full = rng.normal(size=(6, 15))
    deficient = rng.normal(size=(6, 3)) @ rng.normal(size=(3, 15))  # rank 3
    for J in (full, deficient):
        z0 = rng.normal(size=6)
        U, sv, Vt = np.linalg.svd(J, full_matrices=False)
        keep = sv > sv[0] * 1e-10
        small, large = 1e-8 * sv[keep][-1] ** 2, 1e8 * sv[0] ** 2  # far into each limit
        lams = [small, 1e-3, 1.0, 30.0, large]
        out = C.damped_steps(J, z0, lams)
        for i, lam in enumerate(lams[1:-1], 1):  # well conditioned: both forms to rounding
            exact = -Vt.T @ (sv / (sv ** 2 + lam) * (U.T @ z0))
            for form in ("kernel", "primal"):
                assert np.linalg.norm(out[form][i] - exact) <= 1e-10 * np.linalg.norm(exact), (form, lam)
        np.testing.assert_allclose(out["min_norm"], -Vt.T[:, keep] @ ((U.T @ z0)[keep] / sv[keep]), rtol=1e-9)
        np.testing.assert_allclose(out["gradient"], J.T @ z0, rtol=1e-12)
        assert out["cos_min_norm"][0] == pytest.approx(1.0, abs=1e-6)
        assert out["ratio_min_norm"][0] == pytest.approx(1.0, abs=1e-6)
        assert out["cos_gradient"][-1] == pytest.approx(1.0, abs=1e-6)
        assert out["ratio_gradient"][-1] == pytest.approx(1.0, abs=1e-6)
        assert out["cos_gradient"][0] < 0.999 and out["cos_min_norm"][-1] < 0.999  # the two limits differ here
        assert np.all(np.diff(out["residual"]) >= -1e-12)  # more damping fits less
    with pytest.raises(ValueError, match="positive"):
        C.damped_steps(full, z0, [0.0])


def test_loglog_slope_and_time_call():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    assert derivations.loglog_slope(x, 3 * x ** 2) == pytest.approx(2.0)
    assert math.isnan(derivations.loglog_slope([1.0], [1.0]))
    f = jax.jit(lambda a: a @ a)
    t = derivations.time_call(f, jnp.ones((8, 8)), repeats=4)
    assert len(t.times) == 4 and t.best <= t.median and t.first > 0
    with pytest.raises(ValueError):
        derivations.time_call(f, jnp.ones((2, 2)), repeats=0)


def test_gauss_newton_cost_times_both_forms_and_they_agree():
    with jax.enable_x64(True):
        x = jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float64)[:, None]
        y = x ** 3
        cost = derivations.gauss_newton_cost(x, y, [2, 6], depth=2, max_primal_params=40, repeats=1, min_seconds=0.0)
    assert cost["params"].tolist() == [13, 61]
    assert np.all(cost["kernel"] > 0) and np.all(cost["kernel_closed_form"] > 0)
    assert cost["primal"][0] > 0 and math.isnan(cost["primal"][1])
    assert cost["max_difference"][0] < 1e-9 and math.isnan(cost["max_difference"][1])


# ------------------------------------------------------------------------------ diagrams
def test_k_spectrum_schematic_draws_two_panels_with_the_infinity_tick():
    fig = diagrams.k_spectrum(steps=1000, k_converge=50)
    ax_top, ax_bottom = fig.axes
    labels = [t.get_text() for t in ax_bottom.get_xticklabels()]
    assert labels[0] == "1" and labels[-1] == r"$\infty$"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    assert buf.getvalue().startswith(b"\x89PNG")
    plt.close(fig)
