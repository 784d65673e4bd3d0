"""One story (issue 58, item 8): every sentence of the book that reads a verdict reads for every
verdict value, and the chapters tell the story the Findings page tells.

The sentences are found in the code, not listed by hand: a chapter's verdict reaches its text
either through a glue (``glue("name", ...)``, or a name of a dict a chapter module returns for
``glue_all``) that its prose reads as ``{glue:md}`name```, or through a formatted value of an
f-string. Each must put the verdict through :func:`itlin.book.verdicts.says`, which turns it into
a predicate ("holds", "does not hold", "cannot be resolved (...)", "reproduces the direction,
smaller than ..."); each sentence is then rendered with every value and read for "is does not hold"."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from itlin.book import verdicts as V

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "itlin" / "book" / "chapters"

#: what a sentence must never read: a verb before a verdict that is itself a verb phrase
BAD = re.compile(r"\b(is|are|was|were|be|been|being|reads|read as|remains|stays|judged|found)\s+[*_]*"
                 r"(holds?|does not hold|cannot (be )?resolved?|reproduces|direction reproduced)\b", re.I)

#: every verdict phrase a sentence can receive, one per value of V.WORDS (with a reason and a threshold)
PHRASES = [V.says(V.HOLDS), V.says(V.FAILS), V.says(V.UNRESOLVED, why="interval too wide"),
           V.says(V.DIRECTION, smaller_than="2.0 points")]


# ------------------------------------------------------------------------------ finding the sentences
def _cells(md: Path) -> tuple:
    """``(code, prose)`` of a MyST notebook: its code cells' source and its text outside them."""
    code, prose, inside = [], [], False
    for line in md.read_text().splitlines():
        if line.startswith("```{code-cell}"):
            inside, cell = True, []
            continue
        if inside and line.startswith("```"):
            inside = False
            code.append("\n".join(l for l in cell if not l.startswith((":tags:", "%", "!"))))
            continue
        (cell if inside else prose).append(line)
    return code, "\n".join(prose)


def _sources():
    """``(origin, syntax tree)`` of every chapter module and every code cell of the book's pages."""
    for path in sorted(CHAPTERS.glob("*.py")):
        yield path.name, ast.parse(path.read_text())
    for md in sorted((ROOT / "book").glob("*.md")):
        for i, src in enumerate(_cells(md)[0]):
            try:
                yield f"{md.name} cell {i}", ast.parse(src)
            except SyntaxError:  # a cell of shell commands shown, not run
                continue


def _calls(node, name) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == name or getattr(n.func, "id", None) == name)
               for n in ast.walk(node))


def _raw_verdict(expr) -> bool:
    """Whether ``expr`` evaluates to a verdict's bare word (``v.verdict``, ``Markdown(v.verdict)``,
    a conditional between such, or an f-string built on one) rather than a phrase from ``says``."""
    if isinstance(expr, ast.Attribute):
        return expr.attr == "verdict"
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", None) in ("Markdown", "str") and expr.args:
        return _raw_verdict(expr.args[0])
    if isinstance(expr, ast.IfExp):
        return _raw_verdict(expr.body) or _raw_verdict(expr.orelse)
    if isinstance(expr, ast.BinOp):
        return _raw_verdict(expr.left) or _raw_verdict(expr.right)
    if isinstance(expr, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) and _raw_verdict(v.value) for v in expr.values)
    return False


def _pattern(key) -> str | None:
    """A glue name (a string or an f-string) as a regular expression; ``None`` for anything else."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return re.escape(key.value)
    if isinstance(key, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[A-Za-z0-9_]+" for v in key.values)
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):  # "long_" + key.replace(".", "_")
        left, right = (_pattern(s) or r"[A-Za-z0-9_]+" for s in (key.left, key.right))
        return None if left == right == r"[A-Za-z0-9_]+" else left + right
    return None


def _glued(tree):
    """``(name pattern, value)`` for every value a chapter glues: ``glue(name, value)``, a dict's
    ``name: value`` and ``out[name] = value``."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "glue" and len(n.args) >= 2:
            yield _pattern(n.args[0]), n.args[1]
        elif isinstance(n, ast.Dict):
            yield from ((_pattern(k), v) for k, v in zip(n.keys, n.values) if k is not None)
        elif isinstance(n, ast.DictComp):
            yield _pattern(n.key), n.value
        elif isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript):
            yield _pattern(n.targets[0].slice), n.value


def _render(joined: ast.JoinedStr, phrase: str) -> str:
    """An f-string with each verdict it reads replaced by ``phrase`` and any other value by ``X``."""
    return "".join(v.value if isinstance(v, ast.Constant) else
                   phrase if _calls(v.value, "says") or _raw_verdict(v.value) else "X" for v in joined.values)


@functools.lru_cache(maxsize=None)
def _scan():
    """``(raw, glue patterns, f-string sentences)``: where a bare verdict word reaches text, the
    glue names (patterns) whose value is a verdict phrase, as ``{pattern: True}``, beside those
    whose value is anything else (``False``), and the f-strings that read a verdict."""
    raw, names, sentences = [], {}, []
    for origin, tree in _sources():
        for name, value in _glued(tree):
            if _raw_verdict(value):
                raw.append(f"{origin}: glue {name or '?'} (line {value.lineno})")
            elif name is not None:
                names[name] = names.get(name, False) or _calls(value, "says")
        for n in ast.walk(tree):
            if isinstance(n, ast.JoinedStr) and any(
                    isinstance(v, ast.FormattedValue) and (_calls(v.value, "says") or _raw_verdict(v.value))
                    for v in n.values):
                if any(isinstance(v, ast.FormattedValue) and _raw_verdict(v.value) for v in n.values):
                    raw.append(f"{origin}: line {n.lineno}")
                sentences.append((f"{origin}: line {n.lineno}", n))
    return raw, names, sentences


def _is_verdict(name: str, names: dict) -> bool:
    """Whether the glue ``name`` holds a verdict phrase: of the patterns it matches, the most
    specific (the most literal characters; a name glued as written beats any pattern) says."""
    if name in _SPECIFIC:
        return _SPECIFIC[name]
    wild = r"[A-Za-z0-9_]+"
    matching = [(len(p.replace(wild, "")) + (1000 if wild not in p else 0), says)
                for p, says in names.items() if _compiled(p).fullmatch(name)]
    _SPECIFIC[name] = bool(matching) and max(matching)[1]
    return _SPECIFIC[name]


_SPECIFIC: dict = {}
_compiled = functools.lru_cache(maxsize=None)(re.compile)


def _prose_sentences(names):
    """``(page, sentence)`` for every sentence of the book's prose that reads a verdict glue
    (:func:`_is_verdict`), each such glue marked ``\x00`` and any other ``X``."""
    ref = re.compile(r"\{glue(?::md|:text)?\}`([A-Za-z0-9_]+)(?::[^`]*)?`")
    for md in sorted((ROOT / "book").glob("*.md")):
        prose = " ".join(_cells(md)[1].split())
        for sentence in re.split(r"(?<=[.;:!?])\s+(?=[A-Z*({])", prose):
            if any(_is_verdict(m.group(1), names) for m in ref.finditer(sentence)):
                yield md.name, ref.sub(lambda m: "\x00" if _is_verdict(m.group(1), names) else "X", sentence)


# ------------------------------------------------------------------------------ the tests
def test_no_chapter_sentence_reads_a_bare_verdict_word():
    """A verdict reaches a chapter's text only through verdicts.says (a bare "does not hold" after
    "is" reads "is does not hold")."""
    raw, _, _ = _scan()
    assert not raw, "a bare verdict word reaches text; put it through verdicts.says:\n" + "\n".join(raw)


def test_the_scan_finds_the_sentences_it_is_meant_to_find():
    raw, names, sentences = _scan()
    assert sum(names.values()) >= 20 and len(sentences) >= 5, (sum(names.values()), len(sentences))
    assert len(list(_prose_sentences(names))) >= 20
    # it would catch the sentence the issue quotes
    tree = ast.parse('glue("x_fits", Markdown(verdicts["large.fits"].verdict))')
    assert [_raw_verdict(v) for _, v in _glued(tree)] == [True]


@pytest.mark.parametrize("phrase", PHRASES)
def test_every_sentence_that_reads_a_verdict_reads_for_every_value(phrase):
    _, names, sentences = _scan()
    bad = []
    for page, sentence in _prose_sentences(names):
        text = sentence.replace("\x00", phrase)
        if BAD.search(text.replace("*", "")):
            bad.append(f"{page}: {text}")
    for origin, joined in sentences:
        text = _render(joined, phrase)
        if BAD.search(text.replace("*", "")):
            bad.append(f"{origin}: {text}")
    assert not bad, f"with the verdict {phrase!r}:\n" + "\n".join(bad)


def test_says_gives_a_predicate_for_every_verdict_value():
    assert [V.says(w) for w in V.WORDS] == ["holds", "reproduces the direction", "does not hold", "cannot be resolved"]
    g = V.Gap(0.012, 0.004, 8, 0.004, 0.0)
    assert V.says(V.judge("c", "", "", g, "exceeds", 0.02)) == "reproduces the direction, smaller than 2.0 points"
    assert V.says(V.judge("c", "", "", g, "exceeds", 0.0)) == "holds"
    assert V.says(V.judge("c", "", "", V.Gap(0.01, 0.05, 8, 0.05, 0.0), "exceeds")) == "cannot be resolved (interval too wide)"
    left = V.judge("c", "", "", V.Gap(0.05, 0.01, 8, 0.01, 0.0), "exceeds", dropped=1)
    assert V.says(left) == "cannot be resolved (1 seed left out)"
    assert V.says(V.stated("s", "", "", "3 of 5", V.UNRESOLVED), why="premise unmet") == "cannot be resolved (premise unmet)"
    with pytest.raises(ValueError, match="a verdict is"):
        V.says("is does not hold")
    for phrase in PHRASES:
        assert not BAD.search(f"the claim {phrase}") and BAD.search(f"the claim is {phrase}")


# ------------------------------------------------------------------------------ no progress log on a page
@pytest.mark.slow
def test_a_chapter_that_runs_experiments_shows_no_progress_log(tmp_path):
    """``damping`` at ``scale="tiny"`` runs two sweeps of 16 runs (before issue 58 its page showed a
    36-line log of them). Executed as a user runs it, with progress on (``ITLIN_QUIET`` and ``CI``
    unset) and a fresh results folder, none of its cells' outputs holds a line of the runner's."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("ITLIN_QUIET", "CI")}
    env.update(ITLIN_RESULTS=str(tmp_path / "results"), PYTHONPATH=str(ROOT))
    out = tmp_path / "damping.ipynb"
    subprocess.run([sys.executable, "-m", "itlin.book.run", "book/damping.md", str(out), "-p", "scale", "tiny"],
                   cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=900)
    cells = json.loads(out.read_text())["cells"]
    streams = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
               if o.get("output_type") == "stream"]
    text = "".join("".join(o["text"]) if isinstance(o["text"], list) else o["text"] for o in streams)
    assert "runs per initialisation here" in text  # the chapter's own lines are there
    log = [line for line in text.splitlines() if line.startswith("[itlin]") or re.search(r": \d+/\d+$", line)]
    assert not log, f"progress lines on the page: {log[:5]}"


# ------------------------------------------------------------------------------ the chapters and the Findings
def _section(chapter: str, label: str) -> str:
    """A chapter's text from its label ``(label)=`` to the next heading of the same or a higher level
    (a ``#`` inside a code cell is a comment, not a heading)."""
    lines = (ROOT / "book" / f"{chapter}.md").read_text().splitlines()
    start = lines.index(f"({label})=") + 1
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    out, fence = [], False
    for line in lines[start:]:
        fence ^= line.startswith("```")
        if out and not fence and re.match(rf"#{{1,{level}}} ", line):
            break
        out.append(line)
    return "\n".join(out)


def _sections(chapter: str) -> list:
    """``(heading, text)`` of every section of a chapter (split at each heading, code cells kept whole)."""
    out, head, lines, fence = [], "", [], False
    for line in (ROOT / "book" / f"{chapter}.md").read_text().splitlines():
        fence ^= line.startswith("```")
        if not fence and re.match(r"#+ ", line):
            out.append((head, "\n".join(lines)))
            head, lines = line, []
        lines.append(line)
    return out + [(head, "\n".join(lines))]


FINDINGS_LINK = "<findings-table>`"


def _open(name: str):
    """A record kept with the book as the chapters open it: one record, or its parts pooled by the
    chapters' own functions (seeds for the main paper's, step-size sweeps for Arbel et al.'s)."""
    from itlin.book import chapters as C
    from itlin.book import runner

    parts = runner.open_records(name)
    if len(parts) == 1:
        return parts[0]
    return C.pool_lr_sweeps(parts) if parts[0].experiment.startswith("arbel") else C.pool_seeds(parts)


def _chapter_verdicts(chapter: str, name: str, opened: dict):
    """The verdicts ``chapter`` shows for the record ``name``, through the chapter's own code: the
    records of its default settings judged together where it judges them so (``JOINT``), the
    record of fresh seeds of Arbel et al. as its plan fixed it, the fresh seeds of Ortiz-Jiménez et
    al. with their planned claim alone at 95%, and any other record judged as its own family.
    ``None`` where the chapter does not show that record."""
    from test_findings import JOINT

    from itlin.book import render
    from itlin.book.chapters import ntk_eigenfunctions as CN
    from itlin.book.experiments.arbel import arbel_steps as ES

    get = lambda n: opened.setdefault(n, _open(n))  # noqa: E731
    if chapter in JOINT:
        if name in JOINT[chapter]:
            return render.judge(*(get(n) for n in JOINT[chapter]))
        if name == "arbel_steps-relu-gn2fullsteps-fresh-277seeds" and chapter == "arbel_setting":
            planned, added = ES.judge_as_planned(get(name))
            return planned + added
        # a part shown by another chapter (Arbel's SiLU records, in arbel_ablations)
        there = [c for c, names in JOINT.items() if name in names]
        return _chapter_verdicts(there[0], name, opened) if there else None
    if chapter == "ntk_eigenfunctions" and name == CN.FRESH:
        before, fresh = CN.fresh_records()
        _, every, v = CN.fresh_verdicts(before, fresh)
        return V.Verdicts(v if w.id == v.id else w for w in every)
    return render.judge(get(name))


@pytest.mark.slow
def test_each_chapter_shows_what_its_findings_row_shows():
    """For every Findings row, the chapter's own verdict on the same record and claim (its parts
    too), computed through the chapter's code: the same gap, half-width, level and verdict; or the
    row says what its chapter shows instead (:attr:`Headline.shown`: a larger family, a plan),
    the verdicts still agree, and the section that decides the claim links to the Findings."""
    from itlin.book import findings as F

    opened, checked = {}, 0
    for f in F.findings(cached=True):
        h = f.headline
        section = _section(h.chapter, h.section)
        for name, claim, fv in [(h.record, h.claim, f.verdict), *f.parts]:
            shown = _chapter_verdicts(h.chapter, name, opened)
            if shown is None:
                assert h.shown, f"{h.key}: {h.chapter} does not show {name}, and the row does not say so"
                continue
            cv = shown[claim]
            assert V.word(cv, paper_margin=h.tolerance is not None) == F.word_of(fv, h.tolerance), (h.key, claim)
            if h.shown:
                continue
            assert cv.tested == fv.tested, (h.key, claim)
            if fv.tested:
                assert cv.gap.mean == pytest.approx(fv.gap.mean, rel=1e-12, abs=1e-15), (h.key, claim)
                assert (cv.level, cv.half) == pytest.approx((fv.level, fv.half), rel=1e-12), (h.key, claim)
                assert cv.gap_text() == fv.gap_text(), (h.key, claim)  # the same digits on both pages
            checked += 1
        if h.shown:
            assert FINDINGS_LINK in section, f"{h.key}: section ({h.section}) of {h.chapter} shows other numbers " \
                                             "and does not link to the Findings"
    assert checked >= 20


def test_a_section_that_shows_another_record_of_a_row_links_to_the_findings():
    """Where a chapter opens by name a record that the Findings show beside a row (another budget,
    another machine, a record made before the one that decides), that section says it is
    another record by linking to the Findings, where the deciding one is."""
    from itlin.book import findings as F

    missing = []
    for h in F.HEADLINES:
        names = {n for n, _ in h.other_claims} - {h.record}
        for head, text in _sections(h.chapter):
            opened = [n for n in names if f'"{n}"' in text]
            if opened and FINDINGS_LINK not in text:
                missing.append(f"{h.chapter}, {head or 'top'}: opens {', '.join(opened)} ({h.key})")
    assert not missing, "\n".join(sorted(set(missing)))
