"""The Findings page (itlin.book.findings): every headline row is judged on a record kept with the
book, the confirmatory plans are what the history shows, and the summaries count what they say."""

import subprocess
from pathlib import Path

import pytest
import yaml

from itlin.book import findings as F
from itlin.book import plans
from itlin.book import render
from itlin.book import runner
from itlin.book import verdicts as V

ROOT = Path(__file__).resolve().parents[1]


def _finding(key, paper, gap, rule="not_worse", margin=0.02, tolerance=None):
    h = F.Headline(key, paper, "Fig. X", "words", "k_sweeps", "rec", "c", tolerance=tolerance, short=key)
    v = V.judge("c", "claim", "paper", gap, rule, margin)
    margins = [tolerance] if tolerance is not None else [0.5 * margin, 2 * margin]
    return F.Finding(h, v, (), tuple(V.margin_sensitivity(v, margins)), "", "setting")


def test_the_registry_covers_the_three_papers_and_the_figures_the_issue_names():
    keys = [h.key for h in F.HEADLINES]
    assert len(keys) == len(set(keys)) >= 18
    assert {h.paper for h in F.HEADLINES} == set(F.PAPERS)
    figures = " ".join(h.figure for h in F.HEADLINES if h.paper == F.MAIN)
    for fig in ("Fig. 2", "Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6", "Fig. 7", "Fig. 8", "Fig. 9", "2-3", "8-12"):
        assert fig in figures, fig
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = {c["file"] for part in toc["parts"] for c in part["chapters"]}
    assert "book/findings" in pages and all(f"book/{h.chapter}" in pages for h in F.HEADLINES)
    for h in F.HEADLINES:
        for name in (h.record, *(name for name, _ in h.other_claims)):
            assert (runner.recorded_dir() / name).is_dir(), f"{h.key}: no recorded run {name!r}"


@pytest.mark.slow
def test_every_headline_is_judged_on_its_record_with_a_verdict_and_a_sensitivity_entry():
    found = F.findings()
    assert len(found) == len(F.HEADLINES)
    for f in found:
        assert f.verdict.id == f.headline.claim and f.verdict.verdict in (V.HOLDS, V.FAILS, V.UNRESOLVED)
        row = F.row(f)
        assert row["at other margins"] and row["chapter"].startswith("{doc}`")
        if f.verdict.tested and (f.verdict.margin or 0) > 0:
            assert len(f.sensitivity) == (1 if f.headline.tolerance is not None else 2)
        if f.headline.plan is not None:  # a confirmatory test is judged alone, at 95%
            assert f.verdict.level == V.LEVEL
    assert F.table(found).count("\n") == F.context_table(found).count("\n") == len(found) + 1
    # the sufficiency headlines are one-sided
    one_sided = {f.headline.key: f.verdict.rule for f in found}
    for key in ("main.fig2.full", "main.fig2.mini", "main.fig3", "main.2-3", "main.8-12"):
        assert one_sided[key] == "not_worse", key
    fig3 = next(f for f in found if f.headline.key == "main.fig3")
    assert fig3.verdict.margin == 0.01 and fig3.premise in (V.HOLDS, V.FAILS)  # the paper's "under 1%"
    c = F.counts(found)
    assert sum(c.values()) == len(found)
    # the README's line at a glance says what the records say
    import re

    glance = re.search(r"of (\d+) headline claims, (\d+) hold, (\d+) do not hold and (\d+) cannot\s+resolve",
                       (ROOT / "README.md").read_text())
    assert glance, "README.md lost its 'at a glance' line"
    assert tuple(map(int, glance.groups())) == (len(found), c[V.HOLDS], c[V.FAILS], c[V.UNRESOLVED]), (
        "README.md's counts at a glance differ from the records: update them from python -m itlin.book.findings")
    assert f"{len(found)} headline claims" in subprocess.run(
        ["python", "-m", "itlin.book.findings"], capture_output=True, text=True, cwd=ROOT, check=True).stdout


# the chapters that judge the records of their default settings as one family (their notes name
# these records), and those records: the Findings page judges each record alone
JOINT = {
    "resnet_and_data": ("fig4_resnet-mnist1d-30seeds", "fig5_data_scaling-mnist1d-120seeds"),
    "damping": ("fig9_damping-quintic-128seeds", "fig9_damping-quintic-torch-128seeds"),
    "arbel_setting": ("arbel_steps-relu-150seeds", "arbel_init-48seeds"),
    "arbel_ablations": ("arbel_samples-relu-100seeds", "arbel_width-100seeds", "arbel_steps-silu-beta1-100seeds",
                        "arbel_steps-silu-beta1e6-100seeds", "arbel_mnist-digits-48seeds", "arbel_damping-400seeds"),
}


def test_the_chapters_that_judge_several_records_together_are_the_four_the_docs_name():
    import re

    joint = set()
    for path in [*(ROOT / "book").glob("*.md"), *(ROOT / "itlin" / "book" / "chapters").glob("*.py")]:
        for args in re.findall(r"render\.judge\(([^()]*)\)", path.read_text()):
            if "," in args or args.lstrip().startswith("*"):
                joint.add(path.stem)
    assert joint == set(JOINT), "update JOINT here, and the four chapters named in methods.md and findings.md"
    methods = " ".join((ROOT / "book" / "methods.md").read_text().split())
    assert "Four chapters judge the records of their default settings together" in methods


@pytest.mark.slow
def test_no_headline_verdict_differs_between_the_findings_and_a_chapter_that_judges_records_together():
    cache, checked = {}, set()
    for chapter, names in JOINT.items():
        together = render.judge(*(F._opened(n, cache)[0] for n in names))
        for h in F.HEADLINES:
            if h.chapter != chapter or h.record not in names or h.plan is not None:
                continue
            alone, joint = F.judge_headline(h, cache).verdict, together[h.claim]
            if alone.tested:  # a larger family: a stricter level, a wider interval
                assert joint.family > alone.family and joint.level >= alone.level and joint.half >= alone.half
            assert joint.verdict == alone.verdict, (h.key, joint.verdict, alone.verdict)
            checked.add(chapter)
    assert checked == set(JOINT)


def test_counts_and_synthesis_on_constructed_findings():
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    found = [_finding("a", F.MAIN, g(0.05, 0.01)), _finding("b", F.MAIN, g(-0.05, 0.01)),
             _finding("c", F.MAIN, g(-0.02, 0.005)), _finding("d", F.ARBEL, g(0.15, 0.1), "exceeds", 0.1)]
    assert [f.verdict.verdict for f in found] == [V.HOLDS, V.FAILS, V.UNRESOLVED, V.UNRESOLVED]
    assert F.counts(found) == {V.HOLDS: 1, V.FAILS: 1, V.UNRESOLVED: 2}
    assert F.counts(found, F.MAIN) == {V.HOLDS: 1, V.FAILS: 1, V.UNRESOLVED: 1}
    text = F.synthesis(found, F.MAIN)
    assert text.startswith("Of the 3 headline claims of Goldwaser & Ge judged here, 1 hold, 1 do not hold and 1 ")
    assert "Not holding: Fig. X, b (" in text and "Not resolved: Fig. X, c (" in text
    with pytest.raises(ValueError, match="no finding"):
        F.synthesis(found, F.ORTIZ)
    # the sensitivity column: half and twice the margin, or the paper's own tolerance
    assert F.sensitivity_text(found[2]) == "does not hold at 0.5x (1.0); holds at 2x (4.0)"
    tol = _finding("t", F.MAIN, g(-0.015, 0.003), tolerance=0.01)
    assert F.sensitivity_text(tol) == "does not hold at the paper's 1 point"
    assert "exploratory" == plans.kind_of_test("rec", "c")


def test_the_json_rows_give_the_gap_its_half_width_and_the_verdict_at_each_margin():
    import json
    import math

    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)  # noqa: E731
    found = [_finding("a", F.MAIN, g(-0.015, 0.01)), _finding("t", F.MAIN, g(-0.015, 0.003), tolerance=0.01),
             _finding("one", F.MAIN, V.Gap(0.01, math.inf, 1, math.inf, 0.0))]
    rows = json.loads(json.dumps(F.as_json(found), allow_nan=False))
    assert [r["id"] for r in rows] == ["a", "t", "one"]
    a = rows[0]
    assert a["verdict"] == found[0].verdict.verdict == V.UNRESOLVED and a["rule"] == "not_worse"
    assert (a["gap"], a["half_width"], a["level"], a["margin"]) == (-0.015, 0.01, V.LEVEL, 0.02)
    assert a["at_margins"] == {"0.0": V.FAILS, "0.01": V.UNRESOLVED, "0.02": V.UNRESOLVED, "0.04": V.HOLDS}
    assert rows[1]["at_margins"] == {"0.0": V.FAILS, "0.01": V.FAILS, "0.02": V.HOLDS}  # and the paper's tolerance
    assert rows[2]["gap"] == 0.01 and rows[2]["half_width"] is None  # one seed: no finite interval
    stated = F.Finding(found[0].headline, V.stated("c", "claim", "paper", "3 of 3", V.HOLDS), (), (), "", "s")
    r = F.as_json([stated])[0]
    assert (r["verdict"], r["gap"], r["half_width"], r["at_margins"]) == (V.HOLDS, None, None, {})


def test_findings_are_kept_under_a_digest_of_what_they_are_computed_from(tmp_path, monkeypatch):
    """python -m itlin.book.findings reads them back while no code, record or setting changes."""
    import shutil

    from itlin.book import opendata

    monkeypatch.setenv("ITLIN_RESULTS", str(tmp_path / "results"))
    h = next(h for h in F.HEADLINES if h.key == "main.fig9")._replace(others=())
    first = F.findings([h], cached=True)
    assert len(list((tmp_path / "results" / "findings").iterdir())) == 1
    real = F.judge_headline
    monkeypatch.setattr(F, "judge_headline", lambda *a, **k: pytest.fail("judged again"))
    assert F.as_json(F.findings([h], cached=True)) == F.as_json(first)
    monkeypatch.setattr(F, "judge_headline", real)
    key = F._cache_key([h], (0.5, 2.0))
    assert key != F._cache_key([h], (0.5, 3.0)) and key != F._cache_key([h._replace(claim="x")], (0.5, 2.0))
    copy = tmp_path / "recorded"
    shutil.copytree(runner.recorded_dir() / h.record, copy / h.record)
    monkeypatch.setattr(runner, "recorded_dir", lambda: copy)
    assert F._cache_key([h], (0.5, 2.0)) == key  # the same bytes elsewhere
    opendata.set_attributes(copy / h.record / "record.nc", {"note": "changed"})
    assert F._cache_key([h], (0.5, 2.0)) != key


def test_bad_margin_factors_are_refused_before_any_record_is_opened():
    with pytest.raises(ValueError, match="margin_factors"):
        F.judge_headline(F.HEADLINES[0], margin_factors=(-1.0,))
    with pytest.raises(ValueError, match="margin_factors"):
        F.findings(margin_factors=())


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_confirmatory_plans_are_what_the_history_shows():
    """A plan is verifiable when its commit precedes the first commit that brought the record's
    runs; not verifiable when the record arrived in the plan's own commit."""
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("needs a git checkout with its whole history")
    for name, plan in plans.CONFIRMATORY.items():
        assert (runner.recorded_dir() / name).is_dir(), name
        if _git("cat-file", "-e", plan.commit + "^{commit}").returncode:
            pytest.skip(f"commit {plan.commit} is not in this checkout's history")
        added = _git("log", "--diff-filter=A", "--format=%H", "--", f"book/recorded/{name}").stdout.split()
        first = added[-1]  # the oldest commit that added files of the record
        same = _git("rev-parse", plan.commit).stdout.strip() == first
        before = _git("merge-base", "--is-ancestor", plan.commit, first).returncode == 0 and not same
        assert plan.verifiable == before, (name, plan)
        assert plan.verifiable or same, f"{name}: neither before its runs nor in their commit"


def test_a_confirmatory_record_in_parts_is_not_read_until_every_planned_seed_is_in(monkeypatch):
    """Beside a headline, a planned record that is still being made shows how far it has come and
    nothing else: no part of it is pooled or judged (that would be a look at the data that judges)."""
    name = "feature_updates-fashion-pool-u2-fresh-512seeds"
    parts = runner.open_records(name)
    made = sum(int(p.meta["resolved"]["seeds"]) for p in parts)
    plan = plans.CONFIRMATORY[name]
    # one planned seed more than the parts hold: the record is incomplete whatever has been made
    wider = plan._replace(seeds=range(plan.seeds.start, plan.seeds.start + made + 1))
    monkeypatch.setitem(plans.CONFIRMATORY, name, wider)
    assert F._in_progress(name) == f"in progress, not read yet ({made:,} of {made + 1:,} planned seeds)"
    h = F.Headline("k", F.MAIN, "Fig. X", "words", "feature_updates", "rec", "full.suffices_u2",
                   others=(name, (name, "mini.suffices_u2")))
    judged = V.Verdicts([V.judge("full.suffices_u2", "c", "p", V.paired_gap([0.5, 0.6, 0.7], [0.5, 0.6, 0.7]),
                                 "not_worse", 0.02)])

    def opened(n, cache):
        assert n == "rec", f"{n} was opened"
        return parts[0], judged

    monkeypatch.setattr(F, "_opened", opened)
    monkeypatch.setattr(F, "setting", lambda rec: "setting")
    f = F.judge_headline(h)
    assert f.others == ((name, "full.suffices_u2", F._in_progress(name)), (name, "mini.suffices_u2", F._in_progress(name)))
    assert F.row(f)["other records"].count("in progress, not read yet") == 2
    assert f"`{name}` (`mini.suffices_u2`): in progress" in F.row(f)["other records"]
    # a record that is not planned in parts is never in progress
    assert F._in_progress("fig2_k_sweep-mnist1d-10seeds") == ""


def test_another_claim_beside_a_headline_is_judged_as_that_claim(monkeypatch):
    """An ``others`` entry ``(record, claim)`` shows that claim of the record, named in the row;
    where it is the record's planned claim it is judged alone at 95% and marked confirmatory,
    and the record's other claims stay exploratory."""
    gaps = {"full.suffices_u2": ([0.50, 0.61, 0.70, 0.64], [0.52, 0.60, 0.69, 0.66]),
            "mini.suffices_u2": ([0.60, 0.61, 0.70, 0.66], [0.52, 0.60, 0.69, 0.62]),  # the smallest p: Holm's strictest
            "x": ([0.40, 0.61, 0.70, 0.64], [0.52, 0.60, 0.69, 0.66])}
    family = V.holm([V.judge(c, "c", "p", V.paired_gap(*ab), "not_worse", 0.02) for c, ab in gaps.items()])
    assert family["mini.suffices_u2"].level > V.LEVEL  # so that "judged alone" is seen in the level
    monkeypatch.setitem(plans.CONFIRMATORY, "other", plans.Plan("78ce98f", "mini.suffices_u2", True))
    monkeypatch.setattr(F, "_in_progress", lambda name: "")
    monkeypatch.setattr(F, "_opened", lambda n, cache: (None, family))
    monkeypatch.setattr(F, "setting", lambda rec: "setting")
    h = F.Headline("k", F.MAIN, "Fig. X", "words", "feature_updates", "rec", "full.suffices_u2",
                   others=("other", ("other", "mini.suffices_u2"), ("other", "absent")))
    assert h.other_claims == (("other", "full.suffices_u2"), ("other", "mini.suffices_u2"), ("other", "absent"))
    f = F.judge_headline(h)
    (n0, c0, full), (n1, c1, mini), (_, c2, absent) = f.others
    assert (n0, c0, n1, c1, c2) == ("other", "full.suffices_u2", "other", "mini.suffices_u2", "absent")
    assert full.id == "full.suffices_u2" and full.level == family["full.suffices_u2"].level
    assert mini.id == "mini.suffices_u2" and mini.level == V.LEVEL and absent is None
    text = F.row(f)["other records"]
    assert "`other`: " in text and "`other` (`mini.suffices_u2`): " in text and "`other` (`absent`): not judged" in text
    assert "[confirmatory (fixed in 78ce98f, before its runs)]" in text
    assert "[exploratory (the record is confirmatory for `mini.suffices_u2`)]" in text
