"""Numbers in the chapters' prose come from results (issue 15).

A sentence that states a measured number must take it from the executed code (MyST ``{glue}``
or Markdown the code generates), so that it cannot go stale when a run is re-made. This test
scans every chapter's prose, outside code cells, maths, inline code, glue roles and front
matter, for literal decimals and percentages. What may stay literal is listed below, each with
its reason: the papers' own numbers (quoted, with their source), and thresholds or settings that
the text defines rather than measures. A new literal number in prose fails the test until it is
either glued from a result or added here with a reason a reviewer can check.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Section, equation, figure and table numbers of the papers are references, not results.
REFERENCE = re.compile(r"\b(?:Sections?|Eqs?\.|Figs?\.|Figures?|Appendix|Tables?|Step|Theorem|Lemma)\s*$")

# chapter -> {literal: reason}
ALLOWED = {
    "methods.md": {
        "95%": "definition: the verdict rules use 95% intervals; a confirmatory claim is judged alone at 95%",
        "5%": "definition: Holm's procedure keeps the family-wise error at 5% (1 - 95%)",
        "0.1": "definition (glossary): 0.1 decades, the smallest log-loss gap Arbel's rows count",
        "1.26": "arithmetic (glossary): 10 ** 0.1",
        "0.69": "arithmetic (glossary): ln 2, Fig. 7's margin on the natural-log ratio",
        "82.3%": "the paper's Fig. 3 number (K=1), quoted as the glossary's example of points",
        "81.4%": "the paper's Fig. 3 number (large K), quoted as the glossary's example of points",
        "0.9": "arithmetic (glossary): 82.3 - 81.4",
        "1%": "the paper's own tolerance for Fig. 3, quoted: \"final results differ by under 1%\"",
    },
    "feature_updates.md": {
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "adam_solved.md": {
        "100%": "the paper's premise, quoted: each linearisation is solved to about 100% train accuracy",
        "61.3%": "the paper's Fig. 8 number (solved linearisations), quoted",
        "69.4%": "the paper's Fig. 8 number (SGD), quoted",
        "70%": "the paper's Fig. 8 number (plain Adam over 70%), quoted",
        "99%": "definition: a linearisation counts as solved at 99% train accuracy (the solved_accuracy parameter)",
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "findings.md": {
        "95%": "definition: the verdict rules use 95% intervals, and a confirmatory claim is judged alone at 95%",
        "5%": "definition: Holm's procedure keeps the family-wise error at 5% (1 - 95%)",
        "1%": "the paper's own tolerance for Fig. 3, quoted: \"final results differ by under 1%\"",
    },
    "augmentation.md": {
        "82.3%": "the paper's Fig. 3 number (K=1), quoted from Section 4.1",
        "81.4%": "the paper's Fig. 3 number (large K), quoted from Section 4.1",
        "1%": "the paper's own tolerance for Fig. 3, quoted: \"final results differ by under 1%\" (Section 4.1)",
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "resnet_and_data.md": {
        "95%": "definition: the verdict rules use 95% intervals",
        "100%": "definition: a run has fitted its training set at 100% train accuracy (the paper's premise, "
                "'converges to 100% train accuracy', Section 4.1)",
    },
    "k_sweeps.md": {
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "adaptive_schedules.md": {
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "feature_learning.md": {
        "10%": "the paper's Fig. 7 number (K=5e6's final filters like K=1's at about 10% of training), quoted",
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "damping.md": {
        "2.5": "the paper's dropping rule (train RMSE over 2.5), quoted from Fig. 9's caption",
        "1%": "definition: 'stalled' / 'still descending' by the loss change over the last tenth",
        "10%": "definition: the 10%-trimmed mean",
        "1.5": "definition: minimums are 'similar' within a factor 1.5 (f9.verdicts)",
        "0.1": "definition: a column 'stalls' above train RMSE 0.1 (f9.exceptions)",
    },
    "gradient_flow.md": {
        "0.05": "definition: ORDER_TOL, the tolerance on the fitted slope (set in the code cell above it)",
    },
    "ntk_eigenfunctions.md": {
        "0.01": "the paper's training-loss threshold of Figs. 4-5 (Appendix E.1.1), quoted; also scale='paper'",
        "0.9": "the paper's SGD momentum (their Appendix A / code), quoted; the momentum parameter",
        "0.05": "the paper's SGD learning rate (their Appendix A / code), quoted; the learning_rate parameter",
        "0.1": "definition: the default scale's loss_threshold (what counts as trained), shown in the settings table",
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "energy_concentration.md": {
        "26.0%": "the paper's Table 1 (MLP, initialisation), quoted",
        "25.8%": "the paper's Table 1 (LeNet, initialisation), quoted",
        "22.7%": "the paper's Table 1 (ResNet-18, initialisation), quoted",
        "63.6%": "the paper's Table 1 (MLP, end of training), quoted",
        "83.0%": "the paper's Table 1 (LeNet, end of training), quoted",
        "96.7%": "the paper's Table 1 (ResNet-18, end of training), quoted",
        "67.6%": "the paper's Table 1 (MLP test accuracy), quoted",
        "75.0%": "the paper's Table 1 (LeNet test accuracy), quoted",
        "81.4%": "the paper's Table 1 (ResNet-18 test accuracy), quoted",
        "64%": "the paper's Table 1 (MLP, end of training, 63.6%), quoted rounded",
        "97%": "the paper's Table 1 (ResNet-18, end of training, 96.7%), quoted rounded",
        "1.4826": "definition: the constant that makes the median absolute deviation a robust standard deviation",
        "0.9": "the paper's SGD momentum (their Appendix A / code), quoted; the momentum parameter",
        "0.05": "the paper's SGD learning rate (their Appendix A / code), quoted; the learning_rate parameter",
        "95%": "definition: the verdict rule uses 95% intervals",
    },
    "iterative_linearisation.md": {
        "5%": "definition: 'ends at the training loss of K = 1' means within 5% (the check in the code)",
    },
}

NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?\s?%|\d+\.\d+)(?![\w])")


def prose_lines(text: str):
    """(line, text) of the prose: no front matter, code cells or fences, display or inline maths,
    inline code, glue roles, directives' option lines or block quotes."""
    text = re.sub(r"\A---\n.*?\n---\n", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)

    def blank(m):
        return "\n" * m.group(0).count("\n")

    text = re.sub(r"^````.*?^````$", blank, text, flags=re.S | re.M)  # a block that shows fenced blocks
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", blank, text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", "", text)
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", "", text)
    text = re.sub(r"`[^`\n]+`", "", text)
    for i, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith(">"):
            yield i, line


def literal_numbers(path: Path):
    for i, line in prose_lines(path.read_text(encoding="utf-8")):
        for m in NUMBER.finditer(line):
            if REFERENCE.search(line[: m.start()]):
                continue
            yield i, m.group(1).replace(" ", ""), line.strip()


def test_scanner_finds_literals_and_skips_references_code_and_maths(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("---\njupytext: 1.5\n---\nSection 4.3 and Eq. 2.1 are references.\n"
                    "We measured 0.83 and 12% here, $0.5 x$ and `0.7` are not prose.\n"
                    "```{code-cell}\nx = 0.25\n```\n{glue:text}`acc:.2f` is glued.\n")
    assert [n for _, n, _ in literal_numbers(page)] == ["0.83", "12%"]


def test_no_literal_result_numbers_in_chapter_prose():
    problems = []
    for path in sorted((ROOT / "book").glob("*.md")):
        allowed = ALLOWED.get(path.name, {})
        for line, number, text in literal_numbers(path):
            if number not in allowed:
                problems.append(f"{path.name}:{line}: {number!r} in: {text[:100]}")
    assert not problems, ("literal numbers in prose; glue them from results, or list them in ALLOWED with "
                          "a reason:\n" + "\n".join(problems))


def test_every_allowed_literal_is_still_used():
    """An allowance for a number the chapter no longer contains is stale: remove it."""
    for name, allowed in ALLOWED.items():
        found = {n for _, n, _ in literal_numbers(ROOT / "book" / name)}
        stale = set(allowed) - found
        assert not stale, f"{name}: allowed literals no longer in the prose: {sorted(stale)}"
