"""Open a chapter of the book live, in JupyterLab: ``python -m itlin.book.live CHAPTER``.

The chapter (a MyST-markdown notebook of ``_toc.yml``, named as ``damping`` or
``book/damping.md``) is converted by jupytext into ``live/<chapter>.ipynb`` at the repository's
root, a folder git ignores, and JupyterLab opens it. Run its cells: each demo
(:class:`itlin.book.widgets.Demo`) shows as ``ipywidgets`` sliders that recompute on release,
where the built book shows pre-rendered frames. Edits stay in the copy; the chapter's ``.md`` is
not touched (an existing copy is replaced only with ``--force``).

Needs JupyterLab: ``pip install -e ".[live]"``. ``--dry-run`` writes the notebook and prints the
command instead of starting JupyterLab. With no chapter it lists the chapters that have a demo.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


def chapters_with_demos(root: Path) -> list:
    """The chapters of ``_toc.yml`` whose code shows a demo (a cell that builds a ``Demo``)."""
    from .verify import chapters_of_toc

    out = []
    for name in chapters_of_toc(root):
        text = (root / "book" / f"{name}.md").read_text(encoding="utf-8")
        code = "\n".join(re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S))
        if re.search(r"\bdemo\(|_demo\(|\.demo\b|Demo\(", code):
            out.append(name)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m itlin.book.live", description=__doc__.strip().splitlines()[0])
    p.add_argument("chapter", nargs="?", help="a chapter of the book, e.g. damping or book/damping.md")
    p.add_argument("--dry-run", action="store_true", help="write the notebook and print the command; start nothing")
    p.add_argument("--force", action="store_true", help="replace an existing live/<chapter>.ipynb")
    a = p.parse_args(argv)
    root = _root()
    from .verify import chapters_of_toc

    known = chapters_of_toc(root)
    if a.chapter is None:
        print("chapters with a demo: " + ", ".join(chapters_with_demos(root)))
        print("open one with: python -m itlin.book.live CHAPTER")
        return 0
    name = Path(a.chapter).stem
    source = root / "book" / f"{name}.md"
    if name not in known or not source.is_file():
        print(f"itlin.book.live: {a.chapter!r} is not a chapter of _toc.yml; chapters: {', '.join(known)}.", file=sys.stderr)
        return 2
    if not a.dry_run and importlib.util.find_spec("jupyterlab") is None:
        print('itlin.book.live: JupyterLab is not installed; install it with: pip install -e ".[live]"', file=sys.stderr)
        return 2
    target = root / "live" / f"{name}.ipynb"
    if target.exists() and not a.force:
        print(f"itlin.book.live: opening the existing {target.relative_to(root)} (with your edits, if any); "
              "--force replaces it with a fresh copy of the chapter.")
    else:
        import jupytext

        target.parent.mkdir(exist_ok=True)
        jupytext.write(jupytext.read(source), target)
    command = [sys.executable, "-m", "jupyterlab", str(target.relative_to(root))]
    if a.dry_run:
        print(" ".join(command))
        return 0
    env = {**os.environ, "ITLIN_DEMOS": "live"}  # the kernels JupyterLab starts show live demos
    try:
        return subprocess.call(command, cwd=root, env=env)
    except KeyboardInterrupt:
        print("itlin.book.live: stopped.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
