"""The scale ladder (itlin.book.experiments.main.ladder): the trend rule against an oracle, its
premises, and a tiny run through the runner."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from itlin.book import render, runner
from itlin.book import verdicts as V
from itlin.book.experiments.main import ladder as L


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.3, 0.3), st.floats(0.001, 0.05)), min_size=2, max_size=6),
       st.floats(-0.05, 0.05))
def test_the_trend_is_weighted_least_squares_with_known_variances(points, slope):
    """Against numpy's weighted polyfit (weights 1/se) and the closed-form variance of a
    known-variance weighted line."""
    x = np.arange(len(points), dtype=float)
    g = np.array([p[0] for p in points]) + slope * x
    se = np.array([p[1] for p in points])
    t = L.trend(x, g, se)
    b, a = np.polyfit(x, g, 1, w=1 / se)
    assert math.isclose(t.slope, b, rel_tol=1e-7, abs_tol=1e-9) and math.isclose(t.intercept, a, rel_tol=1e-7, abs_tol=1e-9)
    X = np.stack([np.ones_like(x), x], 1)
    cov = np.linalg.inv(X.T @ np.diag(1 / se ** 2) @ X)
    assert np.allclose([t.var_intercept, t.var_slope, t.cov], [cov[0, 0], cov[1, 1], cov[0, 1]], rtol=1e-7, atol=1e-12)
    m, s = t.at(3.5)
    assert math.isclose(m, a + 3.5 * b, rel_tol=1e-7, abs_tol=1e-9)
    assert math.isclose(s, math.sqrt(np.array([1, 3.5]) @ cov @ np.array([1, 3.5])), rel_tol=1e-6)


def test_a_trend_needs_two_rungs_and_rungs_are_parsed_or_refused():
    with pytest.raises(ValueError, match="two rungs"):
        L.trend([1.0], [0.0], [0.01])
    assert L.Rung.parse("1000x16x400") == L.Rung(1000, 16, 400) and L.Rung(1000, 16, 400).name == "n1000c16"
    with pytest.raises(ValueError, match="<n_train>x<channels>x<steps>"):
        L.Rung.parse("1000x16")
    axes = L.axes_of([L.Rung(1000, 16, 400), L.Rung(4000, 16, 800), L.Rung(1000, 64, 400), L.Rung(2000, 16, 400)])
    assert [g.n_train for g in axes["data"]] == [1000, 2000, 4000] and [g.channels for g in axes["width"]] == [16, 64]


def test_bad_ladders_are_refused_before_any_work():
    from itlin.book.experiments import ParameterError, get

    exp = get("ladder")
    with pytest.raises(ParameterError, match="both examples and channels"):
        exp.resolve({"scale": "tiny", "rungs": ["256x4x40", "512x8x40"]})
    with pytest.raises(ParameterError, match="fewer than each rung's steps"):
        exp.resolve({"scale": "tiny", "rungs": ["256x4x40", "512x4x8"]})
    with pytest.raises(ParameterError, match="rung"):
        exp.resolve({"scale": "tiny", "rungs": ["256x4"]})


def _rows(gaps, fits=True, seeds=8):
    """Rows of a two-rung data axis (256 and 512 examples): K=1 at 80% and u=2 at 80% + gap."""
    rng = np.random.default_rng(0)
    out = []
    for g, gap in zip(("n256c4", "n512c4"), gaps):
        steps = 40
        for s in range(seeds):
            noise = rng.normal(0, 0.002)
            base = {"rung": g, "sweep": "full", "seed": s, "status": "completed", "updates": 0, "test_net": 0.0}
            out.append({**base, "K": 1.0, "test": 0.8 + noise, "train": 1.0 if fits else 0.5, "setting": f"{g} K=1"})
            out.append({**base, "K": float(L.period(2, steps)), "test": 0.8 + gap + noise + rng.normal(0, 0.002),
                        "train": 1.0, "setting": f"{g} u2"})
    return out


def test_the_trend_can_hold_fail_or_have_its_premise_unmet():
    rungs = [L.Rung(256, 4, 40), L.Rung(512, 4, 40)]
    judge = lambda rows: {v.id: v for v in L.judge_rows(rows, rungs, updates=[2], n_test=10 ** 6, margin=0.02)}
    up = judge(_rows([-0.10, -0.02]))["data.u2.shrinks"]
    assert up.verdict == V.HOLDS and up.gap.mean == pytest.approx(0.08, abs=0.01)
    down = judge(_rows([-0.02, -0.10]))["data.u2.shrinks"]
    assert down.verdict == V.FAILS
    unfit = judge(_rows([-0.10, -0.02], fits=False))
    assert unfit["n256c4.k1_fits"].verdict == V.FAILS
    assert unfit["data.u2.shrinks"].verdict == V.UNRESOLVED and not unfit["data.u2.shrinks"].tested
    assert "K=1 did not fit" in unfit["data.u2.shrinks"].detail
    none = judge(_rows([0.05, 0.06]))["data.u2.shrinks"]  # no gap at the smallest rung: nothing to shrink
    assert none.verdict == V.UNRESOLVED and "no gap to shrink" in none.detail
    report = L.ladder_report(list(judge(_rows([-0.10, -0.01])).values()), rungs, updates=[2], margin=0.02)
    (row,) = report
    assert row["first_inside"] == "n512c4" and row["extrapolated_to"] == 2048
    assert row["extrapolated"] == pytest.approx(-0.01 + 2 * 0.09, abs=0.02)


@pytest.mark.slow
def test_a_tiny_ladder_runs_through_the_runner_and_judges_every_rung(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    rec = runner.run("ladder", {"scale": "tiny", "rungs": ["256x4x20", "512x4x20"], "updates": [2], "seeds": 2,
                                "eval_every": 5}, verbose=False)
    assert rec.completed
    rows = L.rows(rec)
    assert {r["rung"] for r in rows} == {"n256c4", "n512c4"} and len(rows) == 2 * 2 * 2
    assert {r["n_train"] for r in rows} == {256, 512}
    ids = render.judge(rec).ids
    assert {"n256c4.k1_fits", "n256c4.suffices_u2", "n512c4.suffices_u2", "data.u2.shrinks"} <= set(ids)
    assert rec.meta["rungs"]["n512c4"]["n_train"] == 512


def test_parts_made_for_their_own_rungs_pool_into_the_record_of_one_run_over_all(tmp_path, monkeypatch):
    """The oracle: each rung's runs do not depend on which other rungs ran beside them, so parts
    made one rung each (the recorded ladder's parts) pool into the very rows and verdicts of one
    run over every rung; parts that share a rung and a seed, or differ in anything else, are refused."""
    from itlin.book.records import pooled_record
    from itlin.book.store import pool_problem

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    base = {"scale": "tiny", "updates": [2], "seeds": 2, "eval_every": 5}
    whole = runner.run("ladder", {**base, "rungs": ["256x4x20", "512x4x20"]}, verbose=False)
    parts = [runner.run("ladder", {**base, "rungs": [r]}, verbose=False) for r in ("256x4x20", "512x4x20")]
    pooled = L.pool(parts)
    assert pooled.meta["resolved"]["rungs"] == ["256x4x20", "512x4x20"]
    assert pooled.meta["rungs"] == whole.meta["rungs"]
    key = lambda r: (r["rung"], r["K"], r["seed"])
    assert sorted(L.rows(pooled), key=key) == sorted(L.rows(whole), key=key)
    assert [(v.id, v.verdict, v.gap) for v in L.claims(pooled)] == [(v.id, v.verdict, v.gap) for v in L.claims(whole)]
    # the same rung twice with the same seeds would count them twice; another learning rate is another record
    again = runner.run("ladder", {**base, "rungs": ["256x4x20"], "seed": 1, "seeds": 1}, verbose=False)
    assert "both have seed 1" in pool_problem([(str(p.path), p.info) for p in (parts[0], again)])
    other = runner.run("ladder", {**base, "rungs": ["512x4x20"], "learning_rate": 0.02}, verbose=False)
    with pytest.raises(ValueError, match="learning_rate"):
        pooled_record([parts[0], other], {}, [])


def test_a_ladder_in_parts_converts_to_one_open_file_that_pools_back(tmp_path, monkeypatch):
    """Parts of single rungs join into one netCDF file (its resolved rungs every part's), and the
    file's parts pool back into the rows of the parts as made."""
    from itlin.book import opendata
    from itlin.book.records import open_records

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    base = {"scale": "tiny", "updates": [2], "seeds": 2, "eval_every": 5}
    parts = [runner.run("ladder", {**base, "rungs": [r]}, verbose=False) for r in ("256x4x20", "256x8x20")]
    src = tmp_path / "parts"
    for i, p in enumerate(parts):
        __import__("shutil").copytree(p.path, src / f"part-{i}")
    out = opendata.convert(src, tmp_path / "ladder-file")
    import json, xarray as xr
    with xr.open_dataset(out) as ds:
        assert json.loads(ds.attrs["resolved_params"])["rungs"] == ["256x4x20", "256x8x20"]
    back = L.pool(open_records(out.parent))
    key = lambda r: (r["rung"], r["K"], r["seed"])
    assert sorted(L.rows(back), key=key) == sorted(L.rows(L.pool(parts)), key=key)


def test_a_rungs_parts_joined_in_a_sub_folder_open_with_the_other_parts(tmp_path, monkeypatch):
    """The book's ladder keeps one file per rung (its parts joined there, no padding to other rungs'
    K values): a record folder whose sub-folder holds a file of several parts opens as every part,
    beside a part still kept alone, and pools into the rows of the parts as made."""
    import shutil

    from itlin.book import opendata
    from itlin.book.records import open_records

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    base = {"scale": "tiny", "updates": [2], "seeds": 1, "eval_every": 5}
    made = [runner.run("ladder", {**base, "rungs": [r], "seed": s}, verbose=False)
            for r, s in (("256x4x20", 0), ("256x4x20", 1), ("256x8x20", 0))]
    folder = tmp_path / "ladder-rec"
    for (r, s), p in zip((("256x4x20", 0), ("256x4x20", 1)), made):
        shutil.copytree(p.path, folder / "256x4x20" / f"256x4x20-seeds-{s}")
    opendata.convert(folder / "256x4x20")  # joined in place: one file of two parts
    shutil.copytree(made[2].path, folder / "256x8x20-seeds-0")
    assert len(opendata.read(folder / "256x4x20" / opendata.FILE)) == 2
    back = open_records(folder)
    assert sorted(p.path.name for p in back) == ["256x4x20-seeds-0", "256x4x20-seeds-1", "256x8x20-seeds-0"]
    key = lambda r: (r["rung"], r["K"], r["seed"])
    assert sorted(L.rows(L.pool(back)), key=key) == sorted(L.rows(L.pool(made)), key=key)


def test_the_chapter_reads_the_ladder_only_once_every_planned_part_is_in(tmp_path, monkeypatch):
    """The chapter's ladder section on tiny parts kept as the recorded folder: with one planned seed
    missing it pools nothing and says how far the record has come; complete, it judges the planned
    claim alone, draws the figure and reports each axis."""
    import shutil

    import matplotlib
    matplotlib.use("Agg")
    from itlin.book.chapters import feature_updates as C

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    base = {"scale": "tiny", "updates": [2], "seeds": 2, "eval_every": 5}
    folder = tmp_path / C.LADDER
    for r in ("256x4x20", "512x4x20"):
        shutil.copytree(runner.run("ladder", {**base, "rungs": [r]}, verbose=False).path, folder / f"{r}-seeds-0")
    monkeypatch.chdir(tmp_path)
    real_pool = L.pool

    def no_look(parts):
        raise AssertionError("an incomplete planned record was pooled")

    monkeypatch.setattr(L, "pool", no_look)
    out = C.ladder_section({"256x4x20": range(0, 3), "512x4x20": range(0, 2)})
    assert "4 of the 5 planned runs" in out["fu_ladder_reading"].data
    monkeypatch.setattr(L, "pool", real_pool)
    out = C.ladder_section({"256x4x20": range(0, 2), "512x4x20": range(0, 2)})
    text = out["fu_ladder_reading"].data
    assert text.startswith("The two-update gap per doubling of the training set:") and "data, u=2" in text
    v = L.claims(L.pool(runner.open_records(folder)))
    assert V.says(next(x for x in v if x.id == "data.u2.shrinks").judged_at(V.LEVEL)) in text
