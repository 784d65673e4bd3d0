"""Re-run a chapter of the book with other parameters (papermill over a MyST-markdown notebook).

    python -m itlin.book.run book/damping.md out.ipynb -p scale paper -p seeds 100

Chapters are MyST-markdown notebooks (jupytext) with exactly one cell tagged ``parameters``.
Papermill cannot read ``.md`` files, so this reads the chapter with jupytext, checks that every
``-p NAME VALUE`` names a variable of that cell (a typo would otherwise be injected and silently
ignored), and executes it with papermill into ``out.ipynb``. Values are Python literals
(``100``, ``1e-3``, ``"inf"``, ``[1, 10, 100]``, ``True``); anything else is taken as a string.
A value the experiment rejects (its validation runs before any compute) ends the run with a
one-line error, exit status 2 and no output notebook; a cell that fails for another reason
leaves the executed notebook, traceback included, and exits with status 1.
The notebook runs with the chapter's folder as working directory; experiment results are cached
under ``$ITLIN_RESULTS`` (see :mod:`itlin.book.runner`), so a re-run with the same parameters loads
them instead of recomputing.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Optional


def _read(source):
    import jupytext

    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"chapter {str(source)!r} does not exist; chapters live in book/ (e.g. book/intro.md).")
    return jupytext.read(source)


def parameters_cell(nb):
    """The notebook's single ``parameters`` cell; a clear error if there is none or several."""
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"a chapter must have exactly one cell tagged 'parameters', found {len(cells)}.")
    return cells[0]


def chapter_parameters(source) -> dict:
    """The names and default values assigned in a chapter's ``parameters`` cell."""
    cell = parameters_cell(_read(source))
    out = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    try:
                        out[t.id] = ast.literal_eval(node.value)
                    except ValueError:
                        out[t.id] = ast.unparse(node.value)
    return out


def parse_value(text: str):
    """A command-line value as a Python literal when it is one, else as a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def execute_chapter(source, output, parameters: Optional[dict] = None, *, kernel_name: Optional[str] = None,
                    timeout: Optional[int] = None, progress: bool = False, cwd=None):
    """Execute the chapter ``source`` (``.md``) with ``parameters`` into the notebook ``output``.

    Raises ``ValueError`` for a parameter the chapter does not have (listing those it has), and
    papermill's ``PapermillExecutionError`` if a cell fails. Returns the output path.
    """
    import papermill

    source, output = Path(source), Path(output)
    nb = _read(source)
    known = chapter_parameters(source)
    parameters = dict(parameters or {})
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ValueError(f"{source.name} has no parameter(s) {', '.join(map(repr, unknown))}; "
                         f"its parameters are: {', '.join(sorted(known))}.")
    kernel = kernel_name or nb.metadata.get("kernelspec", {}).get("name", "python3")
    output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(nb, str(output), parameters=parameters, kernel_name=kernel,
                               cwd=str(cwd or source.parent.resolve()), progress_bar=progress,
                               execution_timeout=timeout, log_output=False)
    return output


# Exceptions that mean "a parameter value is wrong" when a chapter's first experiment call raises them.
_PARAMETER_ERRORS = ("ParameterError", "UnknownExperimentError")


def main(argv=None):
    """Command-line entry point (``python -m itlin.book.run``); returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m itlin.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapter", help="the chapter's MyST markdown file, e.g. book/damping.md")
    ap.add_argument("output", nargs="?", help="where to write the executed notebook (.ipynb)")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="set a parameter of the chapter (repeatable)")
    ap.add_argument("--parameters-json", help="parameters as a JSON object (merged before -p)")
    ap.add_argument("--kernel", help="Jupyter kernel name (default: the chapter's kernelspec)")
    ap.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    ap.add_argument("--list", action="store_true", help="list the chapter's parameters and defaults, then exit")
    args = ap.parse_args(argv)
    try:
        if args.list:
            for k, v in chapter_parameters(args.chapter).items():
                print(f"{k} = {v!r}")
            return 0
        if not args.output:
            ap.error("the output notebook path is required (e.g. out.ipynb)")
        params = json.loads(args.parameters_json) if args.parameters_json else {}
        params.update({k: parse_value(v) for k, v in args.parameter})
        out = execute_chapter(args.chapter, args.output, params, kernel_name=args.kernel, timeout=args.timeout,
                              progress=sys.stderr.isatty())
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # papermill.PapermillExecutionError: a cell raised
        ename, evalue = getattr(err, "ename", None), getattr(err, "evalue", None)
        if ename is None:
            raise
        if ename in _PARAMETER_ERRORS:
            # A bad value is caught by the experiment's validation before any compute: say so in
            # one line and leave no half-executed notebook behind.
            Path(args.output).unlink(missing_ok=True)
            print(f"error: {evalue}", file=sys.stderr)
            return 2
        print(f"error: {args.chapter} failed in cell {getattr(err, 'exec_count', '?')} with {ename}: {evalue} "
              f"(the executed notebook, with the traceback, is in {args.output})", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
