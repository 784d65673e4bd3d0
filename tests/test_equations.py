"""Equations labelled and linked, and the API page complete (issue 25, items 4 and 5).

* Every display equation of the derivation chapters carries a MyST label, so that it is numbered
  and can be linked; none keeps a hand-written ``\\tag{}`` (Sphinx numbers them).
* No chapter refers to an equation of the book by a plain "Eq. N": a reference to one of the
  book's equations is an ``{eq}`` link. "Eq. N" stays text only where it is a paper's number, and
  then the sentence names the paper ("the paper's Eq. 5", "their Eq. 9", "Appendix B (Eq. 9-19)").
* Every ``{eq}`` link has a target, and no label is used twice.
* The API page (book/api.md) documents every name of ``itlin.__all__`` and of the research
  modules' ``__all__``, through the ``{api}`` directive of book/book_api.py.
"""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

import itlin

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
DERIVATIONS = ("iterative_linearisation.md", "gradient_flow.md", "gauss_newton.md")
RESEARCH = ("itlin.data", "itlin.models", "itlin.metrics", "itlin.augment")


def _blank(m):
    return "\n" * m.group(0).count("\n")


FENCE = re.compile(r"^(`{3,}|:{3,})[ \t]*(\S*)")


def without_code(text: str) -> str:
    """The page without front matter and fenced code (code cells, literal blocks), line numbers
    kept. The content of other directives (admonitions, ``{math}``) is kept: it is the page's."""
    lines = re.sub(r"\A---\n.*?\n---\n", _blank, text, flags=re.S).split("\n")
    out, stack = [], []  # open fences: (marker, is_code)
    for line in lines:
        bare = line.strip()
        if stack and bare and set(bare) == {stack[-1][0][0]} and len(bare) >= len(stack[-1][0]):
            stack.pop()  # a closing fence
            out.append("")
            continue
        m = FENCE.match(line)
        if m and not (stack and stack[-1][1]):
            code = not m.group(2).startswith("{") or m.group(2) == "{code-cell}"
            stack.append((m.group(1), code))
            out.append("" if code else line)
            continue
        out.append("" if any(code for _, code in stack) else line)
    return "\n".join(out)


# ------------------------------------------------------------------------------ display maths

DISPLAY = re.compile(r"^\$\$(?P<body>.*?)\$\$(?P<after>[^\n]*)$", re.S | re.M)
MATH_DIRECTIVE = re.compile(r"^```\{math\}[^\n]*\n(?P<opts>(?::[^\n]*\n)*)", re.M)
ENVIRONMENT = re.compile(r"^\\begin\{(?:equation|align|gather|multline)\*?\}", re.M)
LABEL_AFTER = re.compile(r"^ \((?P<label>[\w-]+)\)\s*$")


def display_equations(text: str):
    """(line, label or None) of every display equation outside code: ``$$ ... $$ (label)``,
    ``{math}`` directives (``:label:``) and top-level amsmath environments (never labelled here)."""
    prose = without_code(text)
    for m in DISPLAY.finditer(prose):
        label = LABEL_AFTER.match(m.group("after"))
        yield prose.count("\n", 0, m.start()) + 1, label.group("label") if label else None
    for m in MATH_DIRECTIVE.finditer(text):
        label = re.search(r"^:label:\s*([\w-]+)", m.group("opts"), re.M)
        yield text.count("\n", 0, m.start()) + 1, label.group(1) if label else None
    outside_dollars = DISPLAY.sub(_blank, prose)
    for m in ENVIRONMENT.finditer(outside_dollars):
        yield outside_dollars.count("\n", 0, m.start()) + 1, None


def labels_of(text: str) -> list[str]:
    return [label for _, label in display_equations(text) if label]


def test_display_equation_scanner_finds_labelled_and_unlabelled_equations():
    page = ("---\njupytext: 1\n---\nText\n\n$$\na = b\n$$ (eq-a)\n\n$$\nc = d\n$$\n\n$$ e = f $$ (eq-e)\n\n"
            "```{math}\n:label: eq-g\ng = h\n```\n\n```{code-cell} ipython3\nx = '$$\\ny\\n$$'\n```\n\n"
            "\\begin{align}\ni &= j\n\\end{align}\n")
    assert list(display_equations(page)) == [(6, "eq-a"), (10, None), (14, "eq-e"), (16, "eq-g"), (25, None)]


@pytest.mark.parametrize("chapter", DERIVATIONS)
def test_every_display_equation_of_a_derivation_chapter_has_a_label(chapter):
    text = (BOOK / chapter).read_text(encoding="utf-8")
    equations = list(display_equations(text))
    assert len(equations) >= 6, f"{chapter}: found only {len(equations)} display equations"
    unlabelled = [line for line, label in equations if label is None]
    assert not unlabelled, f"{chapter}: display equations without a label at lines {unlabelled}"
    tags = [i for i, line in enumerate(without_code(text).splitlines(), 1) if "\\tag{" in line]
    assert not tags, f"{chapter}: \\tag{{}} at lines {tags}; Sphinx numbers labelled equations itself"


# ------------------------------------------------------------------------------- references

EQ_REF = re.compile(r"\b(?:Eqs?\.|Equations?)\s*\(?[0-9A-Z]")
# a sentence that names where the number comes from: a paper, its appendix, its authors
PAPER = re.compile(r"\b(?:paper|papers|paper's|their|appendix|arbel|ortiz|goldwaser|workshop)\b", re.I)
ABBREVIATIONS = re.compile(r"\b(?:Eqs?|Figs?|Secs?|e\.g|i\.e|et al|cf|vs)\.|\d\.\d")


def sentences(text: str):
    """(line, sentence) of the prose outside code, display maths and inline code: paragraphs
    split at full stops (not those of "Eq.", "e.g.", "et al." or decimals)."""
    prose = DISPLAY.sub(_blank, without_code(text))
    prose = re.sub(r"`[^`\n]*`", lambda m: "x" * len(m.group(0)), prose)  # inline code, role targets
    for para in re.finditer(r"(?:[^\n]+\n?)+", prose):
        masked = ABBREVIATIONS.sub(lambda m: "x" * len(m.group(0)), para.group(0))
        start = 0
        for end in [m.end() for m in re.finditer(r"[.!?](?=\s|$)", masked)] + [len(masked)]:
            if end > start:
                yield (prose.count("\n", 0, para.start() + start) + 1,
                       " ".join(para.group(0)[start:end].split()))
            start = end


def plain_equation_references(text: str):
    """(line, sentence) of every "Eq. N" in a sentence that names no paper."""
    for line, sentence in sentences(text):
        if EQ_REF.search(sentence) and not PAPER.search(sentence):
            yield line, sentence


def test_reference_scanner_tells_the_papers_numbers_from_the_books():
    page = ("---\njupytext: 1\n---\nThis is Eq. 5 again. Their Eq. 9 is\nquoted, e.g. Eq. 2 of the paper.\n\n"
            "As in Eq. 3-4, with 0.5 of it. See {eq}`gf-flow`.\n\n```{code-cell} ipython3\n# Eq. 7\n```\n\n"
            "## Step 1 (Eq. 6)\n\n$$\nx \\quad \\text{Eq. 8}\n$$ (x)\n\nIn the appendix's Eq. 11-12.\n")
    assert [(line, s) for line, s in plain_equation_references(page)] == [
        (4, "This is Eq. 5 again."), (7, "As in Eq. 3-4, with 0.5 of it."), (13, "## Step 1 (Eq. 6)")]


def test_no_chapter_refers_to_an_equation_of_the_book_by_a_plain_number():
    problems = [f"{path.name}:{line}: {sentence[:120]}"
                for path in sorted(BOOK.glob("*.md"))
                for line, sentence in plain_equation_references(path.read_text(encoding="utf-8"))]
    assert not problems, ("'Eq. N' without a paper named in the sentence: link the book's equation with "
                          "{eq}`label`, or say whose number it is (\"the paper's Eq. N\"):\n" + "\n".join(problems))


EQ_ROLE = re.compile(r"\{eq\}`([^`]+)`")


def test_every_eq_link_has_a_target_and_every_label_is_unique():
    labels, refs = {}, []
    for path in sorted(BOOK.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for label in labels_of(text):
            assert label not in labels, f"equation label {label!r} in both {labels[label]} and {path.name}"
            labels[label] = path.name
        refs += [(path.name, r) for r in EQ_ROLE.findall(text)]
    assert len(refs) >= 40, f"only {len(refs)} {{eq}} links in the book"
    dangling = [f"{name}: {{eq}}`{r}`" for name, r in refs if r not in labels]
    assert not dangling, "{eq} links without a labelled equation:\n" + "\n".join(dangling)


def test_the_derivations_link_the_equations_they_discuss():
    """Each derivation chapter links most of its own equations from its text (a labelled equation
    nobody refers to is fine; a chapter that links none of them has lost its links)."""
    for chapter in DERIVATIONS:
        text = (BOOK / chapter).read_text(encoding="utf-8")
        own = set(labels_of(text))
        linked = own & set(EQ_ROLE.findall(text))
        assert len(linked) >= len(own) // 3, f"{chapter}: links only {sorted(linked)} of {sorted(own)}"


# ---------------------------------------------------------------------------------- API page

def book_api():
    spec = importlib.util.spec_from_file_location("book_api", BOOK / "book_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API_DIRECTIVE = re.compile(r"^```\{api\}\s+(?P<ns>[\w.]+)\n(?P<opts>(?::[^\n]*\n)*)```", re.M)


def api_sections(text: str):
    """(namespace, from_modules, first) of every ``{api}`` directive of a page."""
    for m in API_DIRECTIVE.finditer(text):
        opts = dict(re.findall(r"^:([\w-]+):[ \t]*([^\n]*)$", m.group("opts"), re.M))
        yield m.group("ns"), tuple(opts.get("from", "").split()), tuple(opts.get("first", "").split())


def documented_names(text: str, api) -> dict[str, set]:
    out: dict[str, set] = {}
    for namespace, from_modules, first in api_sections(text):
        names = api.select(namespace, from_modules, first)
        assert names, f"{{api}} {namespace} :from: {from_modules} selects nothing"
        out.setdefault(namespace, set()).update(names)
    return out


def test_api_page_documents_every_name_of_every_all():
    api = book_api()
    text = (BOOK / "api.md").read_text(encoding="utf-8")
    shown = documented_names(text, api)
    missing = sorted(set(itlin.__all__) - shown.get("itlin", set()))
    assert not missing, (f"names of itlin.__all__ on no section of book/api.md: {missing}; add a section "
                         f"'{{api}} itlin' with ':from:' their module")
    core = {id(getattr(itlin, n)) for n in itlin.__all__}
    for name in RESEARCH:
        module = importlib.import_module(name)
        expected = {n for n in module.__all__ if id(getattr(module, n)) not in core}
        assert expected and expected <= shown.get(name, set()), f"{name}: {sorted(expected - shown.get(name, set()))}"
    toc = (ROOT / "_toc.yml").read_text()
    assert "file: book/api" in toc


def test_api_page_check_catches_a_name_from_a_module_without_a_section(monkeypatch):
    """A new public name defined in a module the page has no section for is reported, not
    silently left out; one defined in a module the page covers appears by itself."""
    api = book_api()
    text = (BOOK / "api.md").read_text(encoding="utf-8")

    def new_function():
        """A new public function."""

    names = [*itlin.__all__, "new_function"]
    monkeypatch.setattr(itlin, "new_function", new_function, raising=False)
    monkeypatch.setattr(itlin, "__all__", names)
    for module, covered in (("itlin.core.eigen", False), ("itlin.core.linearise", True)):
        new_function.__module__ = module
        assert ("new_function" in documented_names(text, api)["itlin"]) is covered, module


def test_api_summary_ends_the_first_sentence_outside_literals():
    api = book_api()
    assert api.summary("Indices for steps ``start .. start+n-1`` (sorted). More.") == \
        "Indices for steps ``start .. start+n-1`` (sorted)."
    assert api.summary("Like e.g. the NTK of Arbel et al. Eq. 2 (their App. C) here.\n\nDetails.") == \
        "Like e.g. the NTK of Arbel et al. Eq. 2 (their App. C) here."
    assert api.summary("No full stop at all") == "No full stop at all"
