"""Re-check the book's recorded runs on this machine: ``python -m itlin.book.verify [chapter ...]``.

For each chapter (default: every chapter of ``_toc.yml`` that judges on a recorded run, i.e. one
of whose code cells calls :func:`itlin.book.render.evidence`, found by parsing the cells, not by a
search of the text) it runs the chapter's live runs at the chapter's own
defaults, as the built book does (its parameters cell, then its runs cell up to the statement
that calls ``render.evidence``; a run stored in the results folder, e.g. by a built book, is
loaded, not recomputed), finds the recorded run each repeats
(:func:`itlin.book.runner.matching_record`) and re-judges it with this machine's seeds in place
of its own (:func:`itlin.book.recheck.recheck`). One line per record on standard output::

    feature_updates-mnist1d-16seeds: cpu (cpu) vs cpu (cpu), processor ...; not bit-identical; largest per-seed change 0.17 seed-spreads (full.u30); 9 of 9 verdicts unchanged

then a summary line. Progress goes to standard error. Exit status 0 when every verdict is
unchanged, 1 when one changes or a chapter cannot be checked, 2 (with a one-line error, before
any work) for an unknown chapter or a path that is not a chapter file of this checkout, 130 (one
line) when interrupted. A damaged or missing record is one line that names its file and how to
restore it (``git checkout -- <path>``): one a chapter needs leaves that chapter unchecked, one
it does not need is reported and left out, and the others go on.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Iterable, Optional, Sequence

from . import recheck as _recheck
from . import render, runner, store

TOC = "_toc.yml"


def _root() -> Path:
    root = store.source_checkout()
    if root is None:
        raise FileNotFoundError("itlin.book.verify needs a source checkout of itlin (the chapters and book/recorded).")
    return root


def chapters_of_toc(root: Optional[Path] = None) -> list:
    """The chapters listed in ``_toc.yml`` (names such as ``"feature_updates"``), in order."""
    import yaml

    root = _root() if root is None else root
    toc = yaml.safe_load((root / TOC).read_text())
    out = [Path(toc["root"]).stem] if isinstance(toc, dict) and isinstance(toc.get("root"), str) else []

    def walk(node):
        if isinstance(node, dict):
            f = node.get("file")
            if isinstance(f, str):
                out.append(Path(f).stem)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc)
    return out


def _calls_evidence(node) -> bool:
    """Whether the syntax tree ``node`` calls ``render.evidence(...)`` (or ``evidence(...)``)."""
    return any(isinstance(n, ast.Call) and (isinstance(n.func, ast.Attribute) and n.func.attr == "evidence"
                                            and isinstance(n.func.value, ast.Name) and n.func.value.id == "render"
                                            or isinstance(n.func, ast.Name) and n.func.id == "evidence")
               for n in ast.walk(node))


def _code(cell) -> Optional[ast.Module]:
    """A Python code cell's syntax tree (IPython's ``%`` and ``!`` lines left out); ``None`` for any
    other cell, and for a cell run by a cell magic (``%%bash``)."""
    if cell.cell_type != "code" or cell.source.lstrip().startswith("%%"):
        return None
    lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def _evidence_cell(nb):
    """The first code cell of a notebook that calls ``render.evidence``, with its syntax tree, or
    ``None`` (always for a page that is not executed, having no kernel: its code blocks are shown only)."""
    if not nb.metadata.get("kernelspec"):
        return None
    for cell in nb.cells:
        tree = _code(cell)
        if tree is not None and _calls_evidence(tree):
            return cell, tree
    return None


def judging_chapters(root: Optional[Path] = None) -> list:
    """The chapters of ``_toc.yml`` that judge on a recorded run: one of their code cells calls
    ``render.evidence`` (text and code shown in markdown that merely name it do not count)."""
    from .run import _read

    root = _root() if root is None else root
    return [c for c in chapters_of_toc(root) if _evidence_cell(_read(root / "book" / f"{c}.md")) is not None]


def _runs_source(path: Path) -> tuple:
    """``(parameters cell, the statements of the chapter's runs cell before it calls
    render.evidence)``: the code that makes a chapter's live runs."""
    from .run import _read, parameters_cell

    nb = _read(path)
    found = _evidence_cell(nb)
    if found is None:
        raise ValueError(f"{path.name} does not call render.evidence: it judges on no recorded run.")
    params = parameters_cell(nb).source
    body = []
    for node in found[1].body:
        if _calls_evidence(node):
            break
        body.append(node)
    return params, ast.unparse(ast.Module(body=body, type_ignores=[]))


def live_runs(chapter: str, root: Optional[Path] = None, say=None) -> list:
    """The live runs a chapter makes at its defaults, in order (each :func:`itlin.book.runner.run`
    call of its runs cell; ``say(text)`` is told before each)."""
    root = _root() if root is None else root
    params, code = _runs_source(root / "book" / f"{chapter}.md")
    made, real = [], runner.run

    def run(experiment, params=None, **kw):
        if say is not None:
            p = runner.plan(experiment, params)
            seeds = runner.seed_range(p.experiment.params.from_dict(p.params, experiment=p.experiment.name).resolved())
            say(f"{chapter}: {getattr(experiment, 'name', experiment)}"
                + ("" if not seeds else f" (seed {seeds.start})" if len(seeds) == 1
                     else f" (seeds {seeds.start}-{seeds.stop - 1})"))
        rec = real(experiment, params, **kw)
        if all(rec.path != r.path for r in made):
            made.append(rec)
        return rec

    namespace: dict = {"__name__": f"itlin_verify_{chapter}"}
    os.environ.setdefault("MPLBACKEND", "Agg")
    runner.run = run
    try:
        with contextlib.redirect_stdout(sys.stderr):
            exec(compile(params, f"{chapter}.md:parameters", "exec"), namespace)
            exec(compile(code, f"{chapter}.md:runs", "exec"), namespace)
    finally:
        runner.run = real
    return made


def line(check: _recheck.Recheck, live: runner.Record) -> str:
    """The line :func:`check` prints for one record."""
    cmp = check.comparison
    bits = "bit-identical" if cmp.identical else "not bit-identical"
    text = (f"{check.record.path.name}: {render.machine(check.record.info)} vs {render.machine(live.info)}; {bits}; "
            f"largest per-seed change {check.per_seed_text()}; {check.agreement()}")
    for c in check.changed:
        text += f"\n    {c.id}: {c.before} -> {c.after} ({c.claim})"
    return text


def check(pairs: Iterable[tuple], out=None) -> int:
    """Print a line per ``(live run, record)`` pair (:func:`line`) and a summary; 1 when a verdict
    changes or a record cannot be re-checked (a damaged file: one line that says how to restore
    it), else 0."""
    out = sys.stdout if out is None else out
    t0 = time.perf_counter()
    n = same = total = identical = failed = 0
    for live, other in pairs:
        try:
            r = _recheck.recheck(live, other)
        except (OSError, ValueError) as err:
            print(f"{other.path.name}: not re-checked: {_one_line(err)}", file=out, flush=True)
            failed += 1
            continue
        print(line(r, live), file=out, flush=True)
        n += 1
        same += r.unchanged
        total += r.verdicts
        identical += bool(r.comparison.identical)
    print(f"verify: {n} record{'s' if n != 1 else ''} re-checked, {identical} bit-identical; "
          f"{same} of {total} verdicts unchanged" + (f"; {failed} not re-checked" if failed else "")
          + f" ({time.perf_counter() - t0:.0f} s)", file=out, flush=True)
    return 0 if same == total and not failed else 1


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m itlin.book.verify [chapter ...]``; returns the exit status (130 when interrupted:
    one line, the runs in progress having saved a checkpoint that the same command resumes from)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("itlin.book.verify: interrupted; a run in progress saved a checkpoint, and the same command resumes "
              "from it.", file=sys.stderr, flush=True)
        return 130


def _main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    root = _root()
    known, judging = chapters_of_toc(root), judging_chapters(root)
    names = [Path(a).stem for a in argv]
    for a, n in zip(argv, names):
        if (Path(a).suffix or len(Path(a).parts) > 1) and not (
                Path(a).is_file() and Path(a).resolve() == (root / "book" / f"{n}.md").resolve()):
            print(f"itlin.book.verify: {a!r} is not a chapter file of this checkout ({root / 'book'}/<chapter>.md); "
                  f"give a chapter's name or its file, e.g. {judging[0] if judging else 'damping'}.", file=sys.stderr)
            return 2
        if n not in judging:
            what = "judges on no recorded run" if n in known else "is not a chapter of _toc.yml"
            print(f"itlin.book.verify: {a!r} {what}; chapters that do: {', '.join(judging)}.", file=sys.stderr)
            return 2
    chapters = names or judging
    say = lambda text: print(f"[verify] {text}", file=sys.stderr, flush=True)

    failed, damaged = [], set()

    def pairs():  # a chapter or record that cannot be checked (a damaged file) is one line; the rest go on
        for chapter in chapters:
            try:
                for live in live_runs(chapter, root, say):
                    with warnings.catch_warnings(record=True) as seen:
                        warnings.simplefilter("always", RuntimeWarning)
                        other = runner.matching_record(live)
                    for w in seen:  # a damaged record this run does not need: said once, then left out
                        if issubclass(w.category, RuntimeWarning) and str(w.message) not in damaged:
                            damaged.add(str(w.message))
                            print(str(w.message), flush=True)
                    if other is None:
                        say(f"{chapter}: {live.experiment} ({live.path.name}): no recorded run repeats it; nothing to "
                            "check")
                        continue
                    yield live, other
            except (OSError, ValueError) as err:
                failed.append(chapter)
                print(f"{chapter}: not checked: {_one_line(err)}", flush=True)

    status = check(pairs())
    if failed:
        print(f"verify: {len(failed)} chapter{'s' if len(failed) != 1 else ''} not checked ({', '.join(failed)})",
              flush=True)
    return 1 if failed else status


if __name__ == "__main__":
    sys.exit(main())
