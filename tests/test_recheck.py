"""Re-checking a record on this machine: the page's seeds in place of the record's, the record's
verdicts re-judged (itlin.book.recheck), arrays compared honestly (runner.compare_seeds: packed
bits as flips, divergence by step) and the verify command (itlin.book.verify)."""

import dataclasses
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from itlin.book import recheck, render, runner, verify
from itlin.book import verdicts as V
from itlin.book.experiments import Experiment, Params, param, register

N_EXAMPLES = 16


def claims(rec):
    score = np.asarray(rec["score"])
    n = score.shape[0]
    acc = np.array([rec.arrays[f"_fits/a seed={s}/acc"][-1] for s in range(n)])
    return [V.judge("shifted", "the scores exceed zero", "—", V.paired_gap(score[:, 0], np.zeros(n)), "exceeds"),
            V.judge("fits", "accuracy above one half", "—", V.paired_gap(acc, np.full(n, 0.5)), "exceeds")]


@dataclass(frozen=True)
class RecheckParams(Params):
    seeds: int = param(2, "seeds", min=1)


register(Experiment("test_recheck", RecheckParams, lambda p, ctx: {}, version="1", claims=claims,
                    doc="Test only: records built by hand."))


def record(seeds: range, name: str = "made") -> runner.Record:
    """A record of ``seeds`` built by hand: a stacked score (seeds, 3), packed per-example bits
    (seeds, 2 bytes), one training run per seed (``_fits/a seed=N/...``) with its meta's
    ``final_correct`` text."""
    rows = [np.random.default_rng(s) for s in seeds]
    arrays = {"score": np.stack([g.normal(1.0, 0.3, size=3) for g in rows]),
              "correct": np.stack([np.packbits(np.random.default_rng(100 + s).random(N_EXAMPLES) < 0.7)
                                   for s in seeds])}
    runs, meta_runs = {}, {}
    for s in seeds:
        g = np.random.default_rng(1000 + s)
        arrays[f"_fits/a seed={s}/acc"] = 0.8 + 0.05 * g.random(5)
        arrays[f"_fits/a seed={s}/loss"] = 1.0 + 0.1 * g.random(5)
        runs[f"a seed={s}"] = {"status": "completed", "diverged_at": None, "final": {}}
        meta_runs[f"a seed={s}"] = {"final_correct": V.pack_correct(g.random(N_EXAMPLES) < 0.5),
                                    "n_test_final": str(N_EXAMPLES)}
    resolved = {"seed": seeds.start, "seeds": len(seeds)}
    info = {"experiment": "test_recheck", "version": "1", "runs": runs, "device": "cpu (cpu)",
            "meta": {"resolved": resolved, "runs": meta_runs, "n_test": N_EXAMPLES}}
    return runner.Record("test_recheck", {"seeds": len(seeds)}, "completed", Path("/nowhere") / name, arrays,
                         [tuple(k.split("/")) for k in arrays], info, loaded=True)


def with_arrays(rec, **changes):
    arrays = dict(rec.arrays)
    arrays.update({k.replace("__", "/"): v for k, v in changes.items()})
    return dataclasses.replace(rec, arrays=arrays)


@pytest.fixture
def pair():
    other = record(range(0, 10), "ten-seeds")
    return record(range(0, 2)), other


def test_the_record_s_own_seeds_re_run_leave_every_verdict_and_bit_unchanged(pair):
    live, other = pair
    r = recheck.recheck(live, other)
    assert r.comparison.identical and r.comparison.max_flip == 0.0 and r.comparison.packed == 3   # the stacked bits, two runs' texts
    assert r.verdicts == 2 and not r.changed and r.per_seed == 0.0 and r.agreement() == "2 of 2 verdicts unchanged"
    assert render.judge(other).ids == ("shifted", "fits") and all(v.verdict == V.HOLDS for v in render.judge(other))
    out = io.StringIO()
    assert verify.check([(live, other)], out) == 0
    first, summary = out.getvalue().splitlines()
    assert first.startswith("ten-seeds: cpu (cpu) vs cpu (cpu); bit-identical; largest per-seed change 0 seed-spreads")
    assert first.endswith("2 of 2 verdicts unchanged")
    assert summary.startswith("verify: 1 record re-checked, 1 bit-identical; 2 of 2 verdicts unchanged")


def test_the_hybrid_holds_the_live_seeds_in_place_of_the_record_s(pair):
    live, other = pair
    score = live["score"] + 0.5
    live = with_arrays(live, score=score, **{"_fits__a seed=1__acc": np.full(5, 0.1)})
    live.info["runs"]["a seed=1"] = {"status": "completed", "diverged_at": None, "final": {"x": 1.0}}
    h = recheck.hybrid(live, other)
    assert h.path == other.path and h["score"].shape == (10, 3)
    assert np.array_equal(h["score"][:2], score) and np.array_equal(h["score"][2:], other["score"][2:])
    assert np.array_equal(h.arrays["_fits/a seed=1/acc"], np.full(5, 0.1))
    assert np.array_equal(h.arrays["_fits/a seed=5/acc"], other.arrays["_fits/a seed=5/acc"])
    assert h.runs["a seed=1"]["final"] == {"x": 1.0} and other.runs["a seed=1"]["final"] == {}   # other untouched
    # two seeds moved by 0.5 in score[:, 0]: the gap's mean moves by 2 * 0.5 / 10, 0.5 per seed, in
    # units of score[:, 0]'s standard deviation over the record's ten seeds
    before, after = render.judge(other)["shifted"], render.judge(h)["shifted"]
    sd = float(np.std(other["score"][:, 0], ddof=1))
    assert recheck.per_seed_change(before, after, 2) == pytest.approx(0.5 / sd)
    r = recheck.recheck(live, other)
    assert r.per_seed == pytest.approx(max(recheck.per_seed_change(v, render.judge(h)[v.id], 2)
                                           for v in render.judge(other)))


def test_a_changed_seed_that_flips_a_verdict_is_reported_and_verify_exits_1(pair):
    live, other = pair
    score = live["score"].copy()
    score[0, 0] = -60.0    # one seed far below: the mean over ten falls below zero
    live = with_arrays(live, score=score)
    r = recheck.recheck(live, other)
    assert [(c.id, c.before, c.after) for c in r.changed] == [("shifted", V.HOLDS, V.UNRESOLVED)]
    assert r.agreement() == "1 of 2 verdicts unchanged" and r.per_seed_claim == "shifted" and r.per_seed > 10
    out = io.StringIO()
    assert verify.check([(live, other)], out) == 1
    text = out.getvalue()
    assert "1 of 2 verdicts unchanged\n    shifted: holds -> cannot resolve (the scores exceed zero)" in text


def test_packed_bits_compare_as_the_fraction_of_examples_that_flip(pair):
    live, other = pair
    correct = live["correct"].copy()
    correct[1, 0] ^= 0b11110000                                   # 4 of seed 1's 16 examples flip
    live = with_arrays(live, correct=correct)
    live.info["meta"]["runs"]["a seed=0"] = dict(live.meta["runs"]["a seed=0"])
    bits = V.unpack_correct(live.meta["runs"]["a seed=0"]["final_correct"], N_EXAMPLES).astype(bool)
    bits[:2] = ~bits[:2]                                          # 2 of 16 in a run's meta text
    live.info["meta"]["runs"]["a seed=0"]["final_correct"] = V.pack_correct(bits)
    cmp = runner.compare_seeds(live, other)
    assert not cmp.identical and cmp.max_flip == pytest.approx(4 / 16) and cmp.flip_key == "correct"
    assert cmp.max_abs == 0.0 and cmp.max_rel == 0.0              # bytes are not numbers to subtract
    live.info["meta"]["runs"]["a seed=0"]["final_correct"] = V.pack_correct(~bits)   # 14 of 16 flip
    cmp = runner.compare_seeds(live, other)
    assert cmp.max_flip == pytest.approx(14 / 16) and cmp.flip_key == "a seed=0/final_correct"


def test_a_diverged_run_is_reported_by_its_step_never_as_an_infinite_difference(pair):
    live, other = pair
    loss = live.arrays["_fits/a seed=1/loss"].copy()
    loss[3:] = np.nan
    live = with_arrays(live, **{"_fits__a seed=1__loss": loss})
    live.info["runs"]["a seed=1"] = {"status": "diverged", "diverged_at": 3, "final": {}}
    score = live["score"].copy()
    score[1, 2] = np.inf
    live = with_arrays(live, score=score)
    cmp = runner.compare_seeds(live, other)
    assert cmp.diverged == (("a seed=1", None, 3),) and cmp.nonfinite == (("score", 1),)
    assert not cmp.identical and all(np.isfinite([cmp.max_abs, cmp.max_rel, cmp.max_spread]))
    r = recheck.recheck(live, other)
    assert r.comparison.diverged and np.isfinite(r.per_seed)


def test_verify_refuses_an_unknown_chapter_before_any_work():
    out = subprocess.run([sys.executable, "-m", "itlin.book.verify", "feature_updates", "no_such_chapter"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().startswith("itlin.book.verify: 'no_such_chapter' is not a chapter of _toc.yml;")
    assert len(out.stderr.strip().splitlines()) == 1
    assert "damping" in verify.judging_chapters() and "intro" not in verify.judging_chapters()


def test_verify_finds_the_judging_chapters_by_their_code_not_their_text():
    """With no argument, verify runs the chapters of the real _toc.yml whose code cells call
    render.evidence: pages that only name it in prose or in a shown code block (methods,
    adding_an_experiment) are not among them, and every one found has the parameters cell and
    the runs that verify executes (parsed here, not run)."""
    root = verify._root()
    found = verify.judging_chapters()
    mentioned = [c for c in verify.chapters_of_toc(root) if "render.evidence(" in (root / "book" / f"{c}.md").read_text()]
    assert {"methods", "adding_an_experiment"} <= set(mentioned) - set(found)
    assert found and set(found) < set(mentioned)
    for chapter in found:
        params, runs = verify._runs_source(root / "book" / f"{chapter}.md")
        assert "use_record" in params, chapter  # the parameters cell that evidence(live, use_record) reads
        assert "runner.run(" in runs and "evidence" not in runs, chapter
    with pytest.raises(ValueError, match="judges on no recorded run"):
        verify._runs_source(root / "book" / "methods.md")


@pytest.mark.slow
def test_verify_re_checks_a_chapter_s_records_on_this_machine():
    """The damping chapter's two live runs (about 10 s each), against its two records."""
    out = subprocess.run([sys.executable, "-m", "itlin.book.verify", "damping"], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "MPLBACKEND": "Agg"})
    lines = out.stdout.strip().splitlines()
    records = [line for line in lines if not line.startswith(("verify:", "    "))]
    assert [line.split(":")[0] for line in records] == ["fig9_damping-quintic-128seeds",
                                                       "fig9_damping-quintic-torch-128seeds"], out.stdout
    assert all("verdicts unchanged" in line and "seed-spreads" in line for line in records)
    assert lines[-1].startswith("verify: 2 records re-checked")
    assert "[verify] damping: fig9_damping (seeds 0-" in out.stderr
    assert out.returncode == (0 if lines[-1].split("; ")[1].split(" of ")[0] == lines[-1].split(" of ")[1].split()[0]
                              else 1)
