"""The 'Adding an experiment' page (book/adding_an_experiment.md) runs as written: its module
registers an experiment that runs at the tiny scale, its figure draws, its test passes and its
chapter code executes."""

import re
from pathlib import Path

import pytest

from itlin.book import experiments, render, runner
from itlin.book import verdicts as V

PAGE = Path(__file__).resolve().parents[1] / "book" / "adding_an_experiment.md"


def blocks() -> dict:
    """``{kind: source}`` of the page's Python blocks whose first line is ``# guide: <kind> ...``."""
    out = {}
    for body in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S):
        first = body.splitlines()[0]
        m = re.match(r"# guide: (\w+(?: parameters)?)", first)
        if m:
            out[m.group(1)] = body
    return out


def test_the_page_has_every_block_the_test_runs():
    assert set(blocks()) == {"module", "figure", "test", "chapter parameters", "chapter"}


@pytest.mark.slow
def test_the_guide_runs_as_written(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path))
    b = blocks()
    ns = {"__name__": "itlin_guide_toy_quintic_k"}
    try:
        exec(compile(b["module"], "guide-module", "exec"), ns)
        rec = runner.run("toy_quintic_k", {"scale": "tiny"}, results_dir=tmp_path, progress=False, verbose=False)
        assert rec.completed and rec["K1"].shape == (3,) and rec["inf"].shape == (3,)
        v = render.judge(rec)["k1_beats_inf"]
        assert v.verdict in (V.HOLDS, V.FAILS, V.UNRESOLVED) and v.gap.n == 3 and v.headline
        exec(compile(b["figure"], "guide-figure", "exec"), ns)
        fig = ns["toy_quintic_k"](rec)
        assert len(fig.axes) == 1 and fig.axes[0].lines
        plt.close(fig)
        exec(compile(b["test"], "guide-test", "exec"), ns)
        ns["test_the_claim_can_hold_fail_and_stay_unresolved"]()
        chapter = dict(ns)
        exec(compile(b["chapter parameters"], "guide-parameters", "exec"), chapter)
        chapter["scale"] = "tiny"  # what the book's tests inject
        exec(compile(b["chapter"], "guide-chapter", "exec"), chapter)
        assert chapter["rec"].path == rec.path  # the chapter loads the cached run
        assert chapter["verdicts"]["k1_beats_inf"].verdict == v.verdict
        plt.close("all")
    finally:
        experiments.unregister("toy_quintic_k")
