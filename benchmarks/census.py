"""Count the verdict cells of a built book: how many of the book's verdicts resolve.

Reads the executed notebooks of a build (``_build/jupyter_execute/book/*.ipynb``), finds every
Markdown table with a ``verdict`` column in the cells' outputs, and counts its verdicts per
chapter: holds, does not hold, cannot resolve. A claim shown in two tables counts twice, as a
reader meets it twice.

    python benchmarks/census.py                    # the build under _build/
    python benchmarks/census.py path/to/_build --claims   # and every unresolved claim, by chapter
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

WORDS = {"holds": "holds", "does not hold": "does not hold", "cannot resolve": "cannot resolve"}


def _headline(cell: str) -> bool:
    return cell.strip().startswith("**")  # render.claims sets headline claims in bold


def _plain(cell: str) -> str:
    return re.sub(r"[*_`]", "", cell).strip().lower()


def verdict_cells(markdown: str):
    """``(claim, verdict, headline)`` for every row of every table in ``markdown`` with a verdict
    column."""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1].strip()):
            head = [_plain(c) for c in line.strip("|").split("|")]
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", lines[j].strip().strip("|"))])
                j += 1
            if "verdict" in head:
                col = head.index("verdict")
                for r in rows:
                    if col < len(r):
                        v = _plain(r[col])
                        if v in WORDS:
                            yield (_plain(r[0]), WORDS[v], _headline(r[0]))
            i = j
        else:
            i += 1


def notebook_cells(path: Path):
    nb = json.loads(path.read_text())
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            text = data.get("text/markdown")
            if text:
                yield from verdict_cells("".join(text) if isinstance(text, list) else text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="_build")
    ap.add_argument("--claims", action="store_true", help="list the unresolved claims of each chapter")
    args = ap.parse_args(argv)
    folder = Path(args.build) / "jupyter_execute" / "book"
    books = sorted(folder.glob("*.ipynb"))
    if not books:
        print(f"no executed notebooks under {folder}", file=sys.stderr)
        return 2
    total = Counter()
    print(f"{'chapter':<26}{'cells':>6}{'holds':>7}{'fails':>7}{'unres.':>7}{'resolve':>9}")
    for nb in books:
        cells = list(notebook_cells(nb))
        if not cells:
            continue
        c = Counter(v for _, v, _ in cells)
        heads = [(claim, v) for claim, v, h in cells if h]
        open_heads = sorted({claim for claim, v in heads if v == "cannot resolve"})
        total.update(c)
        n = len(cells)
        print(f"{nb.stem:<26}{n:>6}{c['holds']:>7}{c['does not hold']:>7}{c['cannot resolve']:>7}"
              f"{100 * (n - c['cannot resolve']) / n:>8.0f}%")
        total["headline"] += len(heads)
        total["headline open"] += sum(v == "cannot resolve" for _, v in heads)
        for claim in open_heads:
            print(f"    headline that does not resolve: {claim}")
        if args.claims:
            for claim, v, _ in cells:
                if v == "cannot resolve":
                    print(f"    - {claim}")
    n = sum(total[w] for w in WORDS.values())
    print(f"{'total':<26}{n:>6}{total['holds']:>7}{total['does not hold']:>7}{total['cannot resolve']:>7}"
          f"{100 * (n - total['cannot resolve']) / max(n, 1):>8.0f}%")
    print(f"headline cells: {total['headline']}, of which cannot resolve: {total['headline open']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
