"""The Findings page (itlin.book.findings): every headline row is judged on a record kept with the
book, the confirmatory plans are what the history shows, and the summaries count what they say."""

import subprocess
from pathlib import Path

import pytest
import yaml

from itlin.book import experiments
from itlin.book import findings as F
from itlin.book import plans
from itlin.book import render
from itlin.book import runner
from itlin.book import verdicts as V

ROOT = Path(__file__).resolve().parents[1]


def _finding(key, paper, gap, rule="not_worse", margin=0.02, tolerance=None, dropped=0, premise="", parts=()):
    h = F.Headline(key, paper, "Fig. X", "words", "k_sweeps", "rec", "c", tolerance=tolerance, short=key,
                   premise="p" if premise else "", parts=tuple((f"rec{i}", f"c{i}") for i in range(len(parts))))
    v = V.judge("c", "claim", "paper", gap, rule, margin, dropped=dropped)
    margins = [tolerance] if tolerance is not None else [0.5 * margin, 2 * margin]
    return F.Finding(h, v, (), tuple(V.margin_sensitivity(v, margins)), premise, "setting",
                     tuple((f"rec{i}", f"c{i}", pv) for i, pv in enumerate(parts)), "0 of 5 seeds" if premise else "")


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
        assert f.verdict.id == f.headline.claim and F.result(f) in F.WORDS
        # every record beside a row, and every part, is judged on a claim it has (not "not judged":
        # a record whose claim ids carry a prefix, such as fig9's torch. and flax., is named with its id)
        assert all(o is not None for _, _, o in f.others), (f.headline.key, [(n, c) for n, c, o in f.others if o is None])
        assert [(n, c) for n, c, _ in f.parts] == list(f.headline.parts)
        assert all(pv.id == c for _, c, pv in f.parts)
        row = F.row(f)
        assert row["at other margins"] and f"{{ref}}`{f.headline.section}`" in row["chapter"]
        if f.verdict.tested and (f.verdict.margin or 0) > 0:
            assert len(f.sensitivity) == (1 if f.headline.tolerance is not None else 2)
            assert "at margin 0" in row["at other margins"]  # the direction alone, for every row with a margin
        if f.verdict.tested:  # each row states the level of its interval
            assert f" at {F.level_text(f.verdict)} (" in row["gap vs margin"]
        if F.result(f) == V.UNRESOLVED:  # and names why it cannot resolve
            assert F.why_unresolved(f).split(":")[0].split(" (")[0] in (F.INTERVAL, F.PREMISE, F.LEFT_OUT)
        if f.headline.plan is not None:  # a confirmatory test is judged alone, at 95%
            assert f.verdict.level == V.LEVEL
    assert F.table(found).count("\n") == F.context_table(found).count("\n") == len(found) + 1
    # the sufficiency headlines are one-sided
    one_sided = {f.headline.key: f.verdict.rule for f in found if f.verdict.tested}
    for key in ("main.fig2.full", "main.fig2.mini", "main.2-3", "main.8-12"):
        assert one_sided[key] == "not_worse", key
    fig3 = next(f for f in found if f.headline.key == "main.fig3")
    assert fig3.headline.tolerance == 0.01 and fig3.premise in (V.HOLDS, V.FAILS)  # the paper's "under 1%"
    if fig3.premise != V.HOLDS:  # an unmet premise stops the verdict, as Fig. 4's does
        assert F.result(fig3) == V.UNRESOLVED and F.why_unresolved(fig3).startswith(F.PREMISE)
    c = F.counts(found)
    assert sum(c.values()) == len(found)
    # the README's line at a glance says what the records say
    import re

    glance = re.search(r"of (\d+) headline claims, (\d+) hold, (\d+) reproduce only the direction, (\d+) do not "
                       r"hold and (\d+) cannot\s+resolve", " ".join((ROOT / "README.md").read_text().split()))
    assert glance, "README.md lost its 'at a glance' line"
    assert tuple(map(int, glance.groups())) == (len(found), c[V.HOLDS], c[F.DIRECTION], c[V.FAILS], c[V.UNRESOLVED]), (
        "README.md's counts at a glance differ from the records: update them from python -m itlin.book.findings")
    assert f"{len(found)} headline claims" in subprocess.run(
        ["python", "-m", "itlin.book.findings"], capture_output=True, text=True, cwd=ROOT, check=True).stdout


def _labels(page: str) -> list:
    """The MyST labels (``(label)=``) of a book page, in order."""
    import re

    return re.findall(r"^\(([^)\s]+)\)=\s*$", (ROOT / "book" / f"{page}.md").read_text(), flags=re.M)


def test_every_findings_link_lands_on_a_section_of_its_chapter():
    """Each row's chapter link is a {ref} to a label of that chapter's page, placed on a heading (the
    section that decides the claim), and no label is used twice in the book (Sphinx's labels are global)."""
    import re

    everywhere = [lab for page in (ROOT / "book").glob("*.md") for lab in _labels(page.stem)]
    assert len(everywhere) == len(set(everywhere)), sorted({x for x in everywhere if everywhere.count(x) > 1})
    for h in F.HEADLINES:
        assert h.section, f"{h.key}: no section named"
        text = (ROOT / "book" / f"{h.chapter}.md").read_text()
        assert h.section in _labels(h.chapter), f"{h.key}: no label ({h.section})= in book/{h.chapter}.md"
        after = text.split(f"({h.section})=\n", 1)[1]
        assert re.match(r"#+ ", after), f"{h.key}: the label ({h.section})= is not right above a heading"
        assert F.chapter_link(h) == f"`{h.chapter}`: {{ref}}`{h.section}` (`{h.claim}`)"
    assert "findings-table" in _labels("findings")  # where the chapters' links to a Findings row land


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
    assert [F.result(f) for f in found] == [V.HOLDS, V.FAILS, V.UNRESOLVED, V.UNRESOLVED]
    assert F.counts(found) == {V.HOLDS: 1, F.DIRECTION: 0, V.FAILS: 1, V.UNRESOLVED: 2}
    assert F.counts(found, F.MAIN) == {V.HOLDS: 1, F.DIRECTION: 0, V.FAILS: 1, V.UNRESOLVED: 1}
    text = F.synthesis(found, F.MAIN)
    assert text.startswith("Of the 3 headline claims of Goldwaser & Ge judged here, 1 hold, 0 reproduce the direction")
    assert "Not holding: Fig. X, b (" in text and "Not resolved: Fig. X, c (interval too wide" in text
    with pytest.raises(ValueError, match="no finding"):
        F.synthesis(found, F.ORTIZ)
    # the sensitivity column: margin 0, half and twice the margin, or the paper's own tolerance, with units
    assert F.sensitivity_text(found[2]) == ("does not hold at margin 0; does not hold at 0.5x (1.0 points); "
                                            "holds at 2x (4.0 points)")
    tol = _finding("t", F.MAIN, g(-0.015, 0.003), tolerance=0.01)
    assert F.sensitivity_text(tol) == "does not hold at the paper's 1 point; does not hold at margin 0"
    assert "exploratory" == plans.kind_of_test("rec", "c")


def test_a_superiority_that_holds_at_margin_0_only_reads_direction_reproduced_and_is_counted_apart():
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    short = _finding("s", F.MAIN, g(0.012, 0.004), "exceeds", 0.02)       # +1.2 +- 0.4 against 2 points
    assert short.verdict.verdict == V.FAILS and F.result(short) == F.DIRECTION
    assert F.verdict_text(short) == "direction reproduced, smaller than 2.0 points"
    assert F.at_margins(short, (0.0, 0.25, 0.5, 1.0)) == {0.0: V.HOLDS, 0.25: V.HOLDS, 0.5: V.UNRESOLVED, 1.0: F.DIRECTION}
    wrong_way = _finding("w", F.MAIN, g(-0.012, 0.004), "exceeds", 0.02)  # the opposite direction
    assert F.result(wrong_way) == V.FAILS and F.at_margins(wrong_way, (0.0,)) == {0.0: V.FAILS}
    # a one-sided sufficiency claim never reads "direction": at margin 0 it asks more, not less
    suff = _finding("n", F.MAIN, g(-0.05, 0.01))
    assert F.result(suff) == V.FAILS
    assert F.counts([short, wrong_way, suff])[F.DIRECTION] == 1
    assert "Direction only: Fig. X, s (" in F.synthesis([short, wrong_way, suff], F.MAIN)


def test_cannot_resolve_names_its_reason_interval_premise_or_seeds_left_out():
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    wide = _finding("i", F.MAIN, g(-0.02, 0.01))
    assert F.why_unresolved(wide).startswith("interval too wide: -3.0 points to -1.0 points straddles")
    left = _finding("l", F.ARBEL, g(0.14, 0.003), "exceeds", 0.01, dropped=3)  # clear of its margin, but 3 seeds out
    assert F.result(left) == V.UNRESOLVED and F.why_unresolved(left) == "seeds left out: 3 of 11 (a run diverged)"
    unmet = _finding("p", F.MAIN, g(0.1, 0.01), premise=V.FAILS)
    unmet = unmet._replace(verdict=V.stated("c", "claim", "paper", "gap measured, not judged", V.UNRESOLVED))
    assert F.why_unresolved(unmet) == "premise unmet (0 of 5 seeds)"
    assert F.verdict_text(unmet) == "cannot resolve: premise unmet (0 of 5 seeds)"
    assert F.reasons_line([wide, left, unmet]) == "1 with an unmet premise, 1 with seeds left out, 1 with too wide an interval"
    assert F.why_unresolved(_finding("h", F.MAIN, g(0.05, 0.01))) == ""


def test_a_claim_made_for_several_settings_holds_only_where_every_setting_holds():
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    part = lambda mean: V.judge("x", "", "", g(mean, 0.004), "exceeds", 0.02)
    both = _finding("b", F.ORTIZ, g(0.05, 0.004), "exceeds", 0.02, parts=(part(0.05),))
    one_fails = _finding("f", F.ORTIZ, g(0.05, 0.004), "exceeds", 0.02, parts=(part(-0.05),))
    one_short = _finding("s", F.ORTIZ, g(0.05, 0.004), "exceeds", 0.02, parts=(part(0.012),))
    assert [F.result(f) for f in (both, one_fails, one_short)] == [V.HOLDS, V.FAILS, F.DIRECTION]
    assert F.at_margins(one_short, (0.0, 1.0)) == {0.0: V.HOLDS, 1.0: F.DIRECTION}
    assert "`c0`: +1.2 ± 0.4 points at 95% (8 seeds) vs margin 2.0 points" in F.row(one_short)["gap vs margin"]
    assert [p["claim"] for p in F.as_json([one_short])[0]["parts"]] == ["c0"]
    # the JSON's verdict is the row's (its parts in conjunction), the deciding claim's beside it
    js = F.as_json([both, one_fails, one_short])
    assert [r["verdict"] for r in js] == [V.HOLDS, V.FAILS, F.DIRECTION]
    assert [r["claim_verdict"] for r in js] == [V.HOLDS] * 3


@pytest.mark.parametrize("word", F.WORDS)
def test_every_sentence_that_reads_a_verdict_renders_for_every_verdict_value(word):
    """No "is does not hold": each verdict word reads in the table, the syntheses and the margin demo."""
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    f = {V.HOLDS: _finding("h", F.MAIN, g(0.05, 0.01)), V.FAILS: _finding("f", F.MAIN, g(-0.05, 0.01)),
         V.UNRESOLVED: _finding("u", F.MAIN, g(-0.02, 0.01)),
         F.DIRECTION: _finding("d", F.MAIN, g(0.012, 0.004), "exceeds", 0.02)}[word]
    assert F.result(f) == word
    text = F.verdict_text(f)
    assert text.startswith(word) and "is " + word not in text
    assert F.synthesis([f], F.MAIN).count(".") >= 1
    assert word in F.plain_table([f])
    view = F.margin_demo([f]).view(factor=1.0)
    assert view.table[0]["verdict"] == word and view.text.startswith("At 1x the book's margins: ")


def test_the_margin_demo_shows_what_at_margins_computes_for_every_factor():
    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)
    found = [_finding("s", F.MAIN, g(0.012, 0.004), "exceeds", 0.02), _finding("n", F.MAIN, g(-0.01, 0.004)),
             _finding("t", F.MAIN, g(-0.015, 0.003), tolerance=0.01)]
    demo = F.margin_demo(found)
    assert [k.name for k in demo.knobs] == ["factor"] and demo.knobs[0].values[0] == 0 and max(demo.knobs[0].values) >= 3
    for factor in demo.knobs[0].values:
        view = demo.view(factor=factor)
        assert [r["verdict"] for r in view.table] == [F.at_margins(f, (factor,))[factor] for f in found]
    assert demo.view(factor=0.0).table[0]["margin"] == "0.0 points (direction only)"
    assert demo.view(factor=3.0).table[2]["margin"] == "1.0 points (the paper's)"  # the paper's number stays
    js = F.as_json(found)
    assert js[0]["at_margins"]["0"] == V.HOLDS and js[0]["at_margins"]["1"] == F.DIRECTION
    assert set(js[0]) >= {"id", "verdict", "gap", "half_width", "level", "margin", "at_margins", "why_unresolved"}


def test_the_json_rows_give_the_gap_its_half_width_and_the_verdict_at_each_margin():
    import json
    import math

    g = lambda mean, half: V.Gap(mean, half, 8, half, 0.0)  # noqa: E731
    found = [_finding("a", F.MAIN, g(-0.015, 0.01)), _finding("t", F.MAIN, g(-0.015, 0.003), margin=0.01, tolerance=0.01),
             _finding("one", F.MAIN, V.Gap(0.01, math.inf, 1, math.inf, 0.0))]
    rows = json.loads(json.dumps(F.as_json(found), allow_nan=False))
    assert [r["id"] for r in rows] == ["a", "t", "one"]
    a = rows[0]
    assert a["verdict"] == found[0].verdict.verdict == V.UNRESOLVED and a["rule"] == "not_worse"
    assert (a["gap"], a["half_width"], a["level"], a["margin"]) == (-0.015, 0.01, V.LEVEL, 0.02)
    # keyed by the factor on the book's margin: 0 (no worse at all), half, the margin, twice
    assert {k: a["at_margins"][k] for k in ("0", "0.5", "1", "2")} == {
        "0": V.FAILS, "0.5": V.UNRESOLVED, "1": V.UNRESOLVED, "2": V.HOLDS}
    assert set(rows[1]["at_margins"].values()) == {V.FAILS}  # the paper's own tolerance does not move
    assert rows[2]["gap"] == 0.01 and rows[2]["half_width"] is None  # one seed: no finite interval
    stated = F.Finding(found[0].headline, V.stated("c", "claim", "paper", "3 of 3", V.HOLDS), (), (), "", "s")
    r = F.as_json([stated])[0]
    assert (r["verdict"], r["gap"], r["half_width"]) == (V.HOLDS, None, None)
    assert set(r["at_margins"].values()) == {V.HOLDS}  # not a test: no margin moves it


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
    runs (or none has yet); not verifiable when the record's runs arrived in the plan's own commit."""
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("needs a git checkout with its whole history")
    for name, plan in plans.CONFIRMATORY.items():
        assert (runner.recorded_dir() / name).is_dir(), name
        if _git("cat-file", "-e", plan.commit + "^{commit}").returncode:
            pytest.skip(f"commit {plan.commit} is not in this checkout's history")
        # the commits that added the record's run files (its NOTES.md may be the plan itself)
        added = _git("log", "--diff-filter=A", "--format=%H", "--", *(f":(glob)book/recorded/{name}/**/{f}"
                                                                     for f in ("record.nc", "record.json"))).stdout.split()
        if not added:  # planned, none of its runs made yet
            assert plan.verifiable, f"{name}: no run yet, so its plan came first"
            continue
        first = added[-1]  # the oldest commit that added a run of the record
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
    monkeypatch.setitem(experiments.get("feature_updates").plans, name, wider)  # what the view reads
    assert plans.CONFIRMATORY[name] == wider
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


def test_another_claim_beside_a_headline_is_judged_as_that_claim(monkeypatch, request):
    """An ``others`` entry ``(record, claim)`` shows that claim of the record, named in the row;
    where it is the record's planned claim it is judged alone at 95% and marked confirmatory,
    and the record's other claims stay exploratory."""
    gaps = {"full.suffices_u2": ([0.50, 0.61, 0.70, 0.64], [0.52, 0.60, 0.69, 0.66]),
            "mini.suffices_u2": ([0.60, 0.61, 0.70, 0.66], [0.52, 0.60, 0.69, 0.62]),  # the smallest p: Holm's strictest
            "x": ([0.40, 0.61, 0.70, 0.64], [0.52, 0.60, 0.69, 0.66])}
    family = V.holm([V.judge(c, "c", "p", V.paired_gap(*ab), "not_worse", 0.02) for c, ab in gaps.items()])
    assert family["mini.suffices_u2"].level > V.LEVEL  # so that "judged alone" is seen in the level
    other = "toy_plans-other"  # a record of an experiment whose plan names it
    request.addfinalizer(lambda: experiments.unregister("toy_plans"))
    experiments.register(experiments.Experiment("toy_plans", experiments.Params, lambda p, ctx: {},
                                                plans={other: plans.Plan("78ce98f", "mini.suffices_u2", True)}))
    monkeypatch.setattr(F, "_in_progress", lambda name: "")
    monkeypatch.setattr(F, "_opened", lambda n, cache: (None, family))
    monkeypatch.setattr(F, "setting", lambda rec: "setting")
    h = F.Headline("k", F.MAIN, "Fig. X", "words", "feature_updates", "rec", "full.suffices_u2",
                   others=(other, (other, "mini.suffices_u2"), (other, "absent")))
    assert h.other_claims == ((other, "full.suffices_u2"), (other, "mini.suffices_u2"), (other, "absent"))
    f = F.judge_headline(h)
    (n0, c0, full), (n1, c1, mini), (_, c2, absent) = f.others
    assert (n0, c0, n1, c1, c2) == (other, "full.suffices_u2", other, "mini.suffices_u2", "absent")
    assert full.id == "full.suffices_u2" and full.level == family["full.suffices_u2"].level
    assert mini.id == "mini.suffices_u2" and mini.level == V.LEVEL and absent is None
    text = F.row(f)["other records"]
    assert f"`{other}`: " in text and f"`{other}` (`mini.suffices_u2`): " in text and f"`{other}` (`absent`): not judged" in text
    assert "[confirmatory (fixed in 78ce98f, before its runs)]" in text
    assert "[exploratory (the record is confirmatory for `mini.suffices_u2`)]" in text


def test_a_part_or_a_deciding_claim_the_record_lacks_is_refused_by_name(monkeypatch):
    """A row judged on a claim id its record does not have (fig9's torch record names its claims
    ``torch.*``, not ``flax.*``) stops with the ids the record has, rather than showing nothing."""
    judged = V.Verdicts([V.judge("torch.mean.falls", "c", "p", V.paired_gap([0.5, 0.6, 0.7], [0.4, 0.5, 0.6]),
                                 "exceeds", 0.0, unit="decades", scale=1.0)])
    monkeypatch.setattr(F, "_opened", lambda n, cache: (None, judged))
    monkeypatch.setattr(F, "setting", lambda rec: "setting")
    monkeypatch.setattr(F, "_in_progress", lambda name: "")
    h = F.Headline("k", F.MAIN, "Fig. X", "words", "damping", "rec", "torch.mean.falls")
    assert F.judge_headline(h).verdict.id == "torch.mean.falls"
    with pytest.raises(KeyError, match="part record 'rec' has no claim 'flax.mean.falls'; its claims: torch.mean.falls"):
        F.judge_headline(h._replace(parts=(("rec", "flax.mean.falls"),)))
    with pytest.raises(KeyError, match="has no claim 'flax.mean.falls'"):
        F.judge_headline(h._replace(claim="flax.mean.falls"))
    # beside a row, a record without the claim shows "not judged" (the slow test keeps HEADLINES free of it)
    f = F.judge_headline(h._replace(others=(("rec", "flax.mean.falls"),)))
    assert f.others[0][2] is None and "not judged" in F.row(f)["other records"]
