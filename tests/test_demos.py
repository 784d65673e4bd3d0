"""Every chapter's demo, live, as a reader moves it: each knob set from code changes what is shown,
each update within 5 seconds at the test's scale.

A demo is built the way its chapter builds it (:data:`DEMOS`: a function returning the chapter's
:class:`itlin.book.widgets.Demo`, from a recorded run kept with the book where the chapter judges
on one, else from a tiny run). The browser's side (the static frames in a built book) is tested in
``tests/test_browser.py``.
"""

import time

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from itlin.book import runner, widgets  # noqa: E402

UPDATE_SECONDS = 5.0


@pytest.fixture()
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("ITLIN_QUIET", "1")
    return tmp_path / "results"


def _quintic():
    from itlin.book.figures import main as figures

    rec = runner.run("quintic_demo", {"scale": "tiny", "Ks": [1, 100], "learning_rates": [0.003, 0.01], "steps": 40,
                                      "evals": 4, "kconv_lr": 0.05}, verbose=False)
    return figures.quintic_demo(rec, live_steps=20)


def _gradient_flow():
    import jax
    import numpy as np

    import itlin
    from itlin import data, models
    from itlin.book import derivations
    from itlin.book.chapters import gradient_flow

    ds = data.load("quintic")
    net = models.mlp()
    with jax.enable_x64(True):  # the chapter runs in float64; the demo itself is NumPy
        params = derivations.to_float64(net.init(jax.random.PRNGKey(0), ds.x_train)[0])
        x = np.asarray(ds.x_train, np.float64)
        kernel = np.asarray(itlin.ntk(net.bind(), params, x))
        f0 = np.asarray(net.bind()(params, x))
    return gradient_flow.gradient_flow_demo(kernel, f0, ds.y_train, x)


def _gauss_newton():
    import jax

    from itlin.book.chapters import gauss_newton

    with jax.enable_x64(True):  # the chapter runs in float64; a slider change is NumPy only
        x, y = gauss_newton.quintic()
        return gauss_newton.damped_step_demo(x, y, 0)


def _damping():
    from itlin.book.figures import main as figures

    return figures.fig9_demo(runner.open_record("fig9_damping-quintic-128seeds"))  # the record the chapter judges on


def _k_sweeps():
    from itlin.book.figures import main as figures

    return figures.fig2_demo(runner.open_record("fig2_k_sweep-mnist1d-10seeds"))  # the record the chapter judges on


def _feature_updates():
    from itlin.book import render
    from itlin.book.chapters import feature_updates as C
    from itlin.book.figures import feature_updates as figures

    records = {}
    for name, folder in (("MNIST-1D", "feature_updates-mnist1d-16seeds"),
                         ("Fashion-MNIST", "feature_updates-fashion-256-lr3e-3-10seeds")):
        rec = runner.open_record(folder)
        records[name] = (rec, C.rows(rec), render.judge(rec))
    return figures.updates_demo(records)


def _arbel_setting():
    from itlin.book.figures import arbel as figures

    return figures.init_step_demo(runner.open_record("arbel_init-48seeds"))


def _ntk_eigenfunctions():
    from itlin.book.figures import ortiz as figures

    return figures.eigenfunction_demo(runner.open_record("ortiz_eigenfunctions-mnist1d-28seeds"))


def _adaptive_schedules():
    from itlin.book import render
    from itlin.book.experiments.main import adaptive_schedules as ad
    from itlin.book.figures import main as figures

    rec = runner.open_record("adaptive_schedules-mnist1d-36seeds")
    rows = ad.rows(rec)
    return figures.adaptive_demo(rec, rows, verdicts=render.judge(rec))  # trains the others on its first seed


def _findings():
    from itlin.book import findings as F

    return F.margin_demo(F.findings(F.HEADLINES[:6]))  # six rows of the page, from their records


#: chapter -> a function that builds its demo at the test's scale
DEMOS = {
    "findings": _findings,
    "damping": _damping,
    "gauss_newton": _gauss_newton,
    "gradient_flow": _gradient_flow,
    "iterative_linearisation": _quintic,
    "k_sweeps": _k_sweeps,
    "feature_updates": _feature_updates,
    "arbel_setting": _arbel_setting,
    "ntk_eigenfunctions": _ntk_eigenfunctions,
    "adaptive_schedules": _adaptive_schedules,
}


@pytest.mark.parametrize("chapter", sorted(DEMOS))
def test_each_knob_of_each_live_demo_changes_what_is_shown_within_seconds(chapter, results_dir):
    demo = DEMOS[chapter]()
    assert isinstance(demo, widgets.Demo)
    box = demo.live()
    for knob in demo.knobs:
        control = box.controls[knob.name]
        before = (bytes(box.image.value), box.table.value)
        choices = knob.values if len(knob.values) > 1 else knob.live  # a setting of the book's grid if it has two
        other = next(v for v in choices if widgets._key_part(v) != widgets._key_part(control.value))
        start = time.perf_counter()
        control.value = other
        took = time.perf_counter() - start
        assert "Error" not in box.status.value, box.status.value
        assert (bytes(box.image.value), box.table.value) != before, f"{chapter}: moving {knob.name} changed nothing"
        assert took < UPDATE_SECONDS, f"{chapter}: moving {knob.name} took {took:.1f} s"


def test_every_chapter_with_a_demo_is_moved_here():
    from pathlib import Path

    from itlin.book.live import chapters_with_demos

    root = Path(__file__).resolve().parents[1]
    assert set(chapters_with_demos(root)) == set(DEMOS)
    readme = (root / "README.md").read_text()
    demos = readme[readme.index("**Demos you can move.**"):].split("\n\n")[0]
    assert all(f"`{c}`" in demos for c in DEMOS), "README's list of demos differs from the chapters'"
