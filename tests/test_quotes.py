"""Every phrase the book puts in double quotes as a paper's words is in that paper's text.

The phrases: those of the Findings rows (``itlin.book.findings.HEADLINES``: the claim's words,
figure, departure, note and short label) and those in the string constants of the experiments
(the ``paper`` field of their claims and the sources of their parameters; docstrings are left
out). A phrase of a Goldwaser & Ge row, or of a module under ``experiments/main``, is looked up
in both versions of the main paper; one found only in the workshop version must say so
("workshop" in the same text). Arbel et al.'s are looked up in theirs, Ortiz-Jiménez et al.'s in
their appendix.

The papers' text is not part of the product: it lives beside the repository, in
``shared/papers`` (with a README naming each file). Where it is absent these tests skip.
Paraphrases must not be in double quotes; a word the book reads as a threshold (e.g. "clear")
is quoted as the paper spells it.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import pytest

from itlin.book import findings as F

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
CANDIDATES = (HERE.parents[2] / "shared" / "papers", ROOT.parent / "shared" / "papers")
#: how the papers' README describes each file, -> the key used here
KINDS = (("journal version", "journal"), ("workshop version", "workshop"), ("Arbel", "arbel"),
         ("Ortiz", "ortiz"))
#: the texts a row of each paper, or an experiment in each folder, quotes
SOURCES = {F.MAIN: ("journal", "workshop"), F.ARBEL: ("arbel",), F.ORTIZ: ("ortiz",),
           "main": ("journal", "workshop"), "arbel": ("arbel",), "ortiz": ("ortiz",)}


def _papers_dir():
    for d in CANDIDATES:
        if (d / "README.md").is_file():
            return d
    return None


def _texts(d: Path) -> dict:
    """``{kind: text}`` from the papers' README table (``| `file` | description | ...``)."""
    out = {}
    for line in (d / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*`([^`]+\.txt)`\s*\|([^|]*)\|", line)
        if not m:
            continue
        for marker, kind in KINDS:
            if marker in m.group(2) and kind not in out and (d / m.group(1)).is_file():
                out[kind] = (d / m.group(1)).read_text()
                break
    return out


_MATH = re.compile(r"[\U0001D400-\U0001D7FF]")
_DROP = re.compile(r"[=\\$^_{}]")


def normalise(text: str) -> str:
    """Text reduced to what a quotation keeps: hyphenation across line breaks joined, markup
    (``*emphasis*``, ``<sup>``) and curly quotes made plain, a token printed three times over (as
    text, as mathematical letters, as LaTeX: ``K𝐾K``) read as printed, every token that carries
    mathematics (an ``=``, a LaTeX remnant: ``K=1𝐾1K=1``, ``$K = 1$``) dropped on both sides,
    punctuation but ``%`` and the hyphens between digits dropped, case folded, whitespace collapsed.

    >>> normalise("the filters for K=1𝐾1K=1 is much  faster") == normalise("the filters for $K = 1$ is much faster")
    True
    >>> normalise("Large K𝐾K iterative")
    'large k iterative'
    >>> normalise("level-\\nling off"), normalise("a clear *linear advantage*"), normalise("“it”—said")
    ('levelling off', 'a clear linear advantage', 'it said')
    """
    t = re.sub(r"(\w)-\s*\n\s*(\w)", r"\1\2", text)
    t = re.sub(r"</?(?:sup|sub|br|em|strong|span|b|i)\b[^<>\n]*>", " ", t)  # HTML markup, not "<" in maths
    t = re.sub(r"\s*=\s*", "=", t)
    t = re.sub(r"\$\$[^\n]*?\$\$", " ", t)  # display mathematics on one line
    t = re.sub(r"\$([^$\n]*)\$", lambda m: m.group(1).replace(" ", ""), t)  # inline, within a line
    t = t.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    t = re.sub(r"[—–]", " ", t)
    tokens = [_MATH.split(w)[0] for w in t.split()]  # "K𝐾K": the text as printed, then MathML, then LaTeX
    tokens = [w for w in tokens if w and not _DROP.search(w)]
    t = unicodedata.normalize("NFKC", " ".join(tokens)).casefold()
    t = re.sub(r"[^\w%\s-]|(?<!\d)-|-(?!\d)", " ", t)
    return " ".join(t.split())


def quoted(text: str) -> list:
    """The phrases in double quotes (straight or curly) in ``text``."""
    return [a or b for a, b in re.findall(r'"([^"]+)"|“([^”]+)”', text)]


def _headline_phrases():
    fields = ("words", "figure", "departure", "note", "short")
    for h in F.HEADLINES:
        row = " ".join(getattr(h, f) for f in fields)  # a row says once which version it quotes
        for field in fields:
            for q in quoted(getattr(h, field)):
                yield f"{h.key}.{field}", h.paper, q, row


def _experiment_phrases():
    folder = ROOT / "itlin" / "book" / "experiments"
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        paper = path.parent.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for q in quoted(node.value):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", paper, q, node.value


def _check(phrases, texts):
    norm = {k: normalise(v) for k, v in texts.items()}
    bad, seen = [], 0
    for where, paper, q, context in phrases:
        sources = [k for k in SOURCES.get(paper, ()) if k in norm]
        if not sources:
            continue
        n = normalise(q)
        if len(n) < 4 and " " not in n:  # a quoted symbol, not a phrase (e.g. "K")
            continue
        seen += 1
        found = [k for k in sources if n in norm[k]]
        if not found:
            bad.append(f"{where}: {q!r} is not in the {'/'.join(sources)} text")
        elif found == ["workshop"] and "workshop" not in context.lower():
            bad.append(f"{where}: {q!r} is in the workshop version only; say so beside it")
    return bad, seen


@pytest.fixture(scope="module")
def texts():
    d = _papers_dir()
    if d is None:
        pytest.skip(f"the papers' text is not beside the repository (looked in {', '.join(map(str, CANDIDATES))})")
    t = _texts(d)
    if set(t) != {"journal", "workshop", "arbel", "ortiz"}:
        pytest.skip(f"{d}/README.md does not name the four papers' files (found {sorted(t)})")
    return t


def test_every_quote_in_a_findings_row_is_in_its_paper(texts):
    bad, seen = _check(_headline_phrases(), texts)
    assert seen >= len(F.HEADLINES)  # most rows quote their paper
    assert not bad, "\n".join(bad)


def test_every_quote_in_the_experiments_is_in_its_paper(texts):
    bad, seen = _check(_experiment_phrases(), texts)
    assert seen >= 10
    assert not bad, "\n".join(bad)


def test_a_misquote_and_a_workshop_only_quote_are_caught(texts):
    """The check can fail: the referee's misquote of Fig. 6, and a workshop-only phrase not said to be."""
    bad, _ = _check([("x", F.MAIN, "levels off at a lower point", "")], texts)
    assert bad and "not in the journal/workshop text" in bad[0]
    assert _check([("x", F.MAIN, "levelling off at a lower point", "(Fig. 6 caption)")], texts) == ([], 1)
    bad, _ = _check([("x", F.MAIN, "after 2-3 feature updates", "(§4)")], texts)
    assert bad and "workshop version only" in bad[0]
    assert _check([("x", F.MAIN, "after 2-3 feature updates", "(workshop version, §4)")], texts) == ([], 1)
    assert _check([("x", F.ARBEL, "do not generalise well", "")], texts)[0]  # their spelling is "generalize"
    assert _check([("x", F.ORTIZ, "clearly ahead", "")], texts)[0]


def test_quoted_finds_straight_and_curly_quotes():
    assert quoted('a "b c" d “e” f') == ["b c", "e"]
    assert quoted("no quotes") == []
