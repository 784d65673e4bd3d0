"""Judging a live run on a recorded run with more seeds: which record matches, and whether the
seeds the live run repeats agree with the record's (runner.matching_record, runner.compare_seeds,
render.evidence)."""

import dataclasses
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from itlin.book import render, runner
from itlin.book import verdicts as V
from itlin.book.experiments import Experiment, Params, param, register


def run_seeds(p, ctx):
    seeds = range(p.seed, p.seed + p.seeds)
    draws = np.stack([np.random.default_rng(s).normal(p.shift, 1.0, size=3) for s in seeds])
    return {"draws": draws, "constant": np.arange(4.0), "seconds": np.random.default_rng().random(2)}


def claims(rec):
    d = np.asarray(rec["draws"])
    return [V.judge("shifted", "the draws exceed zero", "—", V.paired_gap(d[:, 0], np.zeros(len(d))), "exceeds")]


@dataclass(frozen=True)
class SeedsParams(Params):
    seeds: int = param(2, "seeds", min=1)
    shift: float = param(1.0, "the draws' mean")


register(Experiment("test_seeds", SeedsParams, run_seeds, version="1", claims=claims,
                    doc="Test only: normal draws per seed."))


def _keep(rec, folder, name):
    """Copy a finished run into a folder of recorded runs, as book/recorded keeps them."""
    shutil.copytree(rec.path, folder / name)
    return folder / name


@pytest.fixture
def kept(tmp_path):
    results, recorded = tmp_path / "results", tmp_path / "recorded"
    recorded.mkdir()
    for name, params in (("six", {"seeds": 6}), ("twelve", {"seeds": 12}), ("other-shift", {"seeds": 20, "shift": 2}),
                         ("fewer", {"seeds": 1}), ("later-seeds", {"seeds": 20, "seed": 5})):
        _keep(runner.run("test_seeds", params, results_dir=results, verbose=False), recorded, name)
    return results, recorded


def test_the_record_with_the_most_seeds_of_the_same_settings_matches(kept):
    results, recorded = kept
    live = runner.run("test_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    match = runner.matching_record(live, recorded)
    assert match is not None and match.path.name == "twelve"   # not other-shift (settings), later-seeds (0, 1 missing)
    assert runner.matching_record(runner.run("test_seeds", {"seeds": 2, "shift": 3.0}, results_dir=results,
                                             verbose=False), recorded) is None
    # seeds 0-11: "twelve" has no more of them, "later-seeds" (5-24) lacks 0-4
    assert runner.matching_record(runner.run("test_seeds", {"seeds": 12}, results_dir=results, verbose=False),
                                  recorded) is None


def test_a_parameter_added_after_the_record_matches_it_only_while_left_at_none(kept, monkeypatch):
    """A record made before a parameter existed lacks it; a live run that leaves it at ``None``
    (the parameter's "as before") is still repeated by the record, one that sets it is not."""
    results, recorded = kept
    live = runner.run("test_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    monkeypatch.setitem(live.meta["resolved"], "added_later", None)
    assert runner.matching_record(live, recorded).path.name == "twelve"
    monkeypatch.setitem(live.meta["resolved"], "added_later", 7)
    assert runner.matching_record(live, recorded) is None


def test_a_record_of_another_version_does_not_match(kept, monkeypatch):
    results, recorded = kept
    live = runner.run("test_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    monkeypatch.setitem(live.info, "version", "2.abc")
    assert runner.matching_record(live, recorded) is None
    monkeypatch.setitem(live.info, "version", "1.different-scale-digest")   # only the experiment's version counts
    assert runner.matching_record(live, recorded) is not None


def test_seeds_compare_identical_and_a_changed_value_is_found(kept):
    results, recorded = kept
    live = runner.run("test_seeds", {"seeds": 2, "seed": 6}, results_dir=results, verbose=False)
    other = runner.open_record(recorded / "later-seeds")            # seeds 5-24 hold live's 6-7 at rows 1-2
    assert runner.matching_record(live, recorded).path.name == "later-seeds"
    same = runner.compare_seeds(live, other)
    assert same.identical and same.arrays == 2 and same.max_abs == 0.0   # draws and constant; seconds left out
    assert same.max_spread == 0.0 and same.spread_key == "draws"      # constant has no seed axis: no spread
    arrays = dict(live.arrays)
    arrays["draws"] = arrays["draws"].copy()
    arrays["draws"][1, 2] += 0.25
    changed = runner.compare_seeds(dataclasses.replace(live, arrays=arrays), other)
    assert not changed.identical and changed.max_abs == pytest.approx(0.25)
    # in units of the spread of draws[:, 2] over the record's 20 seeds
    assert changed.max_spread == pytest.approx(0.25 / np.std(other["draws"][:, 2], ddof=1))
    # a non-finite entry where the record has a number is no infinite difference: it is counted where it sits
    arrays["draws"][1, 2] = np.nan
    nan = runner.compare_seeds(dataclasses.replace(live, arrays=arrays), other)
    assert not nan.identical and nan.nonfinite == (("draws", 1),) and nan.max_abs == 0.0 and nan.max_rel == 0.0


def test_evidence_judges_the_record_and_says_so(kept, monkeypatch):
    results, recorded = kept
    monkeypatch.setattr(runner, "matching_record", lambda rec, folder=None: runner.open_record(recorded / "twelve"))
    live = runner.run("test_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    judged, note = render.evidence(live)
    assert judged.path.name == "twelve" and render.judge(judged)["shifted"].gap.n == 12
    assert "`twelve`" in note and "12 seeds (seeds 0-11)" in note
    assert "**1 of 1 verdict unchanged** when this page's seeds replace the record's" in note
    assert "Its arrays are bit-identical to the record's (2 compared)" in note and "\n" not in note
    assert "python benchmarks/record.py test_seeds '{\"seeds\": 12}'" in note
    mine, note = render.evidence(live, use_record=False)
    assert mine is live and "use_record=False" in note and render.judge(mine)["shifted"].gap.n == 2


def test_evidence_says_whether_the_re_run_seeds_reproduce_the_record_s_findings(kept, monkeypatch):
    results, recorded = kept
    twelve = runner.open_record(recorded / "twelve")
    monkeypatch.setattr(runner, "matching_record", lambda rec, folder=None: twelve)
    live = runner.run("test_seeds", {"seeds": 2}, results_dir=results, verbose=False)
    arrays = dict(live.arrays)
    arrays["draws"] = live.arrays["draws"] + 0.25
    _, note = render.evidence(dataclasses.replace(live, arrays=arrays))
    assert "**1 of 1 verdict unchanged**" in note and "not bit-identical" in note and "relative" not in note
    assert "standard deviations between seeds (`shifted`)" in note and "standard deviations between seeds (`draws`)" in note
    # seeds far below zero turn "holds" into "cannot resolve", and the note lists the change
    arrays["draws"] = live.arrays["draws"] - 40.0
    _, note = render.evidence(dataclasses.replace(live, arrays=arrays))
    assert "**0 of 1 verdict unchanged** when this page's seeds replace the record's (`shifted`: holds → " in note
    # the note names what differs between the machines, of what both name
    assert live.info["processor"] == runner.processor() and live.info["cores"] == runner.cores()
    for theirs, words in (({}, "the record names nothing of its machine but its device"),
                          ({"processor": "Other CPU (family 1)", "cores": 16},
                           f"processor Other CPU (family 1), here {runner.processor()}; cores 16, here {runner.cores()}"),
                          ({"processor": runner.processor(), "xla_flags": "--xla_cpu_fast_math"},
                           f"XLA flags --xla_cpu_fast_math, here {live.info['xla_flags'] or 'none'}"),
                          ({"processor": runner.processor()}, "of what both name of their machines, processor, nothing differs")):
        info = {k: v for k, v in twelve.info.items() if k not in ("processor", "cores", "xla_flags", "jaxlib")} | theirs
        monkeypatch.setattr(runner, "matching_record", lambda rec, folder=None: dataclasses.replace(twelve, info=info))
        _, note = render.evidence(dataclasses.replace(live, arrays=arrays))
        assert words in note, note
    assert render.machine(dataclasses.replace(twelve, info=info).info).endswith(f", processor {runner.processor()}")
    assert render.machine({"device": "cpu (cpu)"}) == "cpu (cpu)"
    old = {k: v for k, v in live.info.items() if k not in ("processor", "cores", "xla_flags", "jaxlib")}
    _, note = render.evidence(dataclasses.replace(live, arrays=arrays, info=old))
    assert "this page's run, loaded from results made before runs named their machine, names only its device" in note


def test_compiled_programs_are_shared_through_jax_s_own_cache(tmp_path, monkeypatch):
    import jax

    from itlin.book import share_compiled_programs

    before = jax.config.jax_compilation_cache_dir
    try:
        monkeypatch.setenv("ITLIN_COMPILE_CACHE", str(tmp_path / "xla"))
        share_compiled_programs()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")
        monkeypatch.setenv("ITLIN_COMPILE_CACHE", "off")
        jax.config.update("jax_compilation_cache_dir", "unchanged")
        share_compiled_programs()
        assert jax.config.jax_compilation_cache_dir == "unchanged"
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_what_it_would_take_tables_the_unresolved_tests_and_says_when_none_is_left():
    from itlin.book import render
    from itlin.book import verdicts as V

    resolved = V.judge("a", "A beats B", "p", V.paired_gap([0.90, 0.91, 0.92], [0.50, 0.52, 0.51]), "exceeds")
    unresolved = V.judge("c", "C beats D", "p", V.paired_gap([0.83, 0.80, 0.84, 0.79, 0.82], [0.80] * 5), "exceeds")
    assert resolved.resolved and not unresolved.resolved
    table = render.what_it_would_take([resolved, unresolved], seconds_per_seed=3600.0)
    assert "C beats D" in table and "A beats B" not in table
    assert "| 5 | 9 | 9 |" in table.replace("  ", " ")  # seeds now, seeds needed (seeds_needed's doctest), hours
    assert render.what_it_would_take([resolved]).startswith("Every claim tested here resolves")
    assert render.what_it_would_take([V.stated("s", "a statement", "p", "measured", V.HOLDS)]).startswith("No claim")


def test_a_seed_is_priced_only_from_a_clock_that_covers_the_whole_record():
    """render.seconds_per_seed: wall_seconds over seeds for a record made in one sitting or with
    its sittings counted; None for one resumed before the runner counted them (its wall_seconds
    is its last sitting's), which render.cost describes in words instead of a number."""
    from types import SimpleNamespace

    rec = lambda **info: SimpleNamespace(info={"wall_seconds": 600.0, **info}, meta={"resolved": {"seeds": 12}})
    one = rec(started_at="a", first_started_at="a")
    counted = rec(started_at="b", first_started_at="a", sittings=3)
    old = rec(started_at="b", first_started_at="a")
    assert render.seconds_per_seed(one) == render.seconds_per_seed(counted) == 50.0
    assert render.seconds_per_seed(old) is None
    assert render.cost(counted.info) == "in 10 minutes over 3 sittings"
    assert render.cost(old.info).startswith("over several sittings")


@settings(max_examples=200, deadline=None, database=None)
@given(cuts=st.lists(st.integers(1, 59), unique=True, max_size=12), keep=st.lists(st.booleans(), min_size=13,
                                                                                      max_size=13),
       start=st.integers(0, 5000))
def test_seed_progress_counts_what_the_parts_cover_and_lists_the_rest(cuts, keep, start):
    """A planned range cut into parts of consecutive seeds, some of them made: the progress counts
    exactly the made parts' seeds, the missing runs are the rest (disjoint, in order, not
    adjacent), and it is complete exactly when every part is made."""
    planned = range(start, start + 60)
    edges = [0, *sorted(cuts), 60]
    parts = [range(start + a, start + b) for a, b in zip(edges, edges[1:])]
    made = [p for p, k in zip(parts, keep) if k]
    prog = runner.seed_progress([{"seed": p.start, "seeds": len(p)} for p in made], planned)
    covered = {s for p in made for s in p}
    assert prog.made == len(covered) and prog.parts == len(made)
    missing = [s for r in prog.missing for s in r]
    assert missing == sorted(set(planned) - covered)
    assert all(a.stop < b.start for a, b in zip(prog.missing, prog.missing[1:]))
    assert prog.complete == (len(made) == len(parts))
    assert prog.text().startswith(f"{len(covered)} of the 60 planned seeds ({start}-{start + 59})")
    assert ("still to make" in prog.text()) == (not prog.complete)


def test_seed_progress_refuses_parts_that_overlap_or_fall_outside_the_plan():
    planned = range(1100, 1604)
    with pytest.raises(ValueError, match="parts 0 and 1 both have seeds 1102-1103"):
        runner.seed_progress([{"seed": 1100, "seeds": 4}, {"seed": 1102, "seeds": 2}], planned)
    with pytest.raises(ValueError, match="part 0 has seeds 1604-1607, outside the planned 1100-1603"):
        runner.seed_progress([{"seed": 1600, "seeds": 8}], planned)
    with pytest.raises(ValueError, match="does not say its seeds"):
        runner.seed_progress([{"seed": 1100}], planned)
    with pytest.raises(ValueError, match="non-empty range"):
        runner.seed_progress([], range(5, 5))
    assert runner.seed_progress([{"seed": 1100, "seeds": 504}], planned).text() == \
        "504 of the 504 planned seeds (1100-1603) are made, in 1 part"


def test_pooling_refuses_parts_made_with_other_settings_or_sharing_a_seed(kept):
    results, recorded = kept
    after = runner.run("test_seeds", {"seeds": 3, "seed": 6}, results_dir=results, verbose=False)
    parts = [runner.open_record(recorded / "six"), runner.open_record(after.path)]
    pooled = runner.pooled_record(parts, {}, [])
    assert pooled.meta["resolved"]["seeds"] == 9 and pooled.completed
    with pytest.raises(ValueError, match="both have seed 5; pool records of different seeds"):
        runner.pooled_record([parts[0], runner.open_record(recorded / "later-seeds")], {}, [])
    with pytest.raises(ValueError, match=r"made with shift=2\.0, .* with shift=1\.0; pool records that differ only"):
        runner.pooled_record([parts[0], runner.open_record(recorded / "other-shift")], {}, [])
    with pytest.raises(ValueError, match="no records"):
        runner.pooled_record([], {}, [])


def test_a_pool_of_parts_from_several_machines_names_each_and_prices_none(kept):
    results, recorded = kept
    after = runner.run("test_seeds", {"seeds": 3, "seed": 6}, results_dir=results, verbose=False)
    six = runner.open_record(recorded / "six")
    same = dataclasses.replace(runner.open_record(after.path), info={**after.info, "device": six.info.get("device"),
                                                                    "processor": six.info.get("processor")})
    one = runner.pooled_record([six, same], {}, [])
    assert one.info["device"] == six.info.get("device") and "machines" not in one.info
    assert render.seconds_per_seed(one) == pytest.approx((six.info["wall_seconds"] + same.info["wall_seconds"]) / 9)
    gpu = dataclasses.replace(same, info={**same.info, "device": "gpu (Lent H200)", "processor": "Xeon, flags 1"})
    two = runner.pooled_record([six, gpu], {}, [])
    assert two.info["machines"] == 2 and two.info["processor"] is None
    assert two.info["device"].startswith(f"several machines (6 seeds on {six.info.get('device', '?')}")
    assert two.info["device"].endswith("; 3 seeds on gpu (Lent H200), processor Xeon, flags 1)")
    assert render.seconds_per_seed(two) is None
    unresolved = V.judge("c", "C beats D", "p", V.paired_gap([0.83, 0.80, 0.84, 0.79, 0.82], [0.80] * 5), "exceeds")
    assert "hours on" not in render.what_it_would_take([unresolved], render.seconds_per_seed(two))
