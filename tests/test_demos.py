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


#: chapter -> a function that builds its demo at the test's scale
DEMOS = {
    "iterative_linearisation": _quintic,
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
