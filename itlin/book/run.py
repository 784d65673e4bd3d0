"""Re-run a chapter of the book with other parameters (papermill over a MyST-markdown notebook).

    python -m itlin.book.run book/damping.md out.ipynb -p scale paper -p seeds 100

Chapters are MyST-markdown notebooks (jupytext) with exactly one cell tagged ``parameters``.
Papermill cannot read ``.md`` files, so this reads the chapter with jupytext, checks that every
``-p NAME VALUE`` names a variable of that cell (a typo would otherwise be injected and silently
ignored), and executes it with papermill into ``out.ipynb``. Values are Python literals
(``100``, ``1e-3``, ``"inf"``, ``[1, 10, 100]``, ``True``); anything else is taken as a string.
A value the experiment rejects (its validation runs before any compute) ends the run with a
one-line error, exit status 2 and no output notebook; a cell that fails for another reason
leaves the executed notebook, traceback included, and exits with status 1, as does a cell that
runs past ``--timeout`` (seconds, > 0; it is interrupted, and a run in progress saves a
checkpoint) or a kernel that dies (one line naming the cell it was running). Ctrl-C prints one
line and exits with status 130, the notebook so far written.
The notebook runs with the chapter's folder as working directory; experiment results are cached
under ``$ITLIN_RESULTS`` (see :mod:`itlin.book.runner`), so a re-run with the same parameters loads
them instead of recomputing.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import logging
import os
import re
import sys
import typing
from pathlib import Path
from typing import Optional


def _read(source):
    import jupytext

    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"chapter {str(source)!r} does not exist; chapters live in book/ (e.g. book/intro.md).")
    if not source.is_file():
        raise ValueError(f"chapter {str(source)!r} is not a file; give a chapter's .md file (e.g. book/intro.md).")
    try:
        return jupytext.read(source)
    except Exception as err:  # noqa: BLE001 - any reader failure is one line naming the chapter
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"chapter {str(source)!r} cannot be read as a notebook ({first}).") from None


def _check_output(output) -> Path:
    """The output notebook's path, if a notebook can be written there (checked before any work)."""
    output = Path(output)
    if output.suffix != ".ipynb":
        raise ValueError(f"the output {str(output)!r} must be a notebook path ending in .ipynb.")
    if output.is_dir():
        raise ValueError(f"the output {str(output)!r} is a folder; give a notebook path such as out.ipynb.")
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"the output {str(output)!r} cannot be written: {str(parent)!r} is a file, not a "
                                 "folder; choose another path.")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ValueError(f"the output {str(output)!r} cannot be written: {str(parent)!r} is not writable; "
                                 "choose another path.")
            break
    return output


def _check_results_folder():
    """The results and data folders the chapter's experiments write, checked writable before the
    kernel starts (a failure there would otherwise come after a notebook was written)."""
    from .. import _io
    from .runner import results_dir

    try:
        _io.ensure_writable(results_dir(), "set ITLIN_RESULTS to a writable folder")
    except OSError as err:
        raise ValueError(str(err)) from None


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

    Raises ``ValueError`` for a parameter the chapter does not have (listing those it has) or a
    ``timeout`` that is not a positive number of seconds, and papermill's
    ``PapermillExecutionError`` if a cell fails. A cell that runs past ``timeout`` is interrupted
    (as Ctrl-C in a notebook would: a run in progress saves a checkpoint) and fails with
    ``KeyboardInterrupt``; a kernel that dies raises nbclient's ``DeadKernelError``. Returns the
    output path.
    """
    import papermill

    _check_timeout(timeout)
    source, output = Path(source), Path(output)
    nb = _read(source)
    known = chapter_parameters(source)
    parameters = dict(parameters or {})
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ValueError(f"{source.name} has no parameter(s) {', '.join(map(repr, unknown))}; "
                         f"its parameters are: {', '.join(sorted(known))}.")
    kernel = kernel_name or nb.metadata.get("kernelspec", {}).get("name", "python3")
    output = _check_output(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # the kernel logs nothing but critical errors (KERNEL_ARGUMENTS)
    papermill.execute_notebook(nb, str(output), parameters=parameters, kernel_name=kernel,
                               cwd=str(cwd or source.parent.resolve()), progress_bar=progress,
                               execution_timeout=timeout, log_output=False, extra_arguments=KERNEL_ARGUMENTS,
                               interrupt_on_timeout=True)
    return output


def _check_timeout(timeout) -> None:
    """A cell's time-out: ``None`` (none) or a positive number of seconds."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ValueError(f"the time-out must be a positive number of seconds per cell, got {timeout!r}; leave it out "
                         "for no time-out.")


def _started_cell(output) -> str:
    """``"code cell 4 (rec = runner.run(...))"``: the last cell the executed notebook ``output``
    started (papermill notes each cell's start in its metadata), e.g. the one a dead kernel was
    running."""
    import nbformat

    try:
        cells = [c for c in nbformat.read(str(output), as_version=4).cells if c.cell_type == "code"]
    except Exception:  # noqa: BLE001 - no notebook written: no cell to name
        return "a cell"
    started = [i for i, c in enumerate(cells) if (c.get("metadata", {}).get("papermill") or {}).get("start_time")]
    if not started:
        return "a cell"
    code = next((line.strip() for line in cells[started[-1]].source.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")), "")
    return f"code cell {started[-1] + 1}" + (f" ({code[:60]}{'...' if len(code) > 60 else ''})" if code else "")


#: command-line arguments of the kernel papermill starts: its own log at critical level only. Its
#: warning "Kernel is running over TCP without encryption" (it listens on localhost only) would
#: otherwise open every run's output, and a kernel shut down in the middle of a cell (Ctrl-C)
#: logs its closed sockets' traceback; what a cell prints or raises is in the notebook either way
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


# Exceptions that mean "a parameter value is wrong" when a chapter's first experiment call raises them.
_PARAMETER_ERRORS = ("ParameterError", "UnknownExperimentError")


class _UsageError(Exception):
    """A command-line mistake: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other failure of this command
        raise _UsageError(f"{message} (usage: {self.prog} CHAPTER.md OUT.ipynb [-p NAME VALUE ...]; --help for more)")


def main(argv=None):
    """Command-line entry point (``python -m itlin.book.run``); returns the exit status."""
    ap = _Parser(prog="python -m itlin.book.run", description=__doc__,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapter", help="the chapter's MyST markdown file, e.g. book/damping.md")
    ap.add_argument("output", nargs="?", help="where to write the executed notebook (.ipynb)")
    ap.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="set a parameter of the chapter (repeatable)")
    ap.add_argument("--parameters-json", help="parameters as a JSON object (merged before -p)")
    ap.add_argument("--kernel", help="Jupyter kernel name (default: the chapter's kernelspec)")
    ap.add_argument("--timeout", type=int, default=None, help="seconds per cell, > 0 (default: none); a cell that "
                                                              "runs longer is interrupted and the run fails")
    ap.add_argument("--list", action="store_true", help="list the chapter's parameters and defaults, then exit")
    existed, args = None, None
    try:
        args = ap.parse_args(argv)
        if args.timeout is not None and args.timeout <= 0:
            raise _UsageError(f"--timeout must be a positive number of seconds per cell, got {args.timeout}; leave it "
                              "out for no time-out")
        if args.list:
            for k, v in chapter_parameters(args.chapter).items():
                print(f"{k} = {v!r}")
            return 0
        if not args.output:
            ap.error("the output notebook path is required (e.g. out.ipynb)")
        params = _parameters(args)
        _read(args.chapter)
        _check_output(args.output)
        _check_parameters(args.chapter, params)
        _check_kernel(args.chapter, args.kernel)
        _check_results_folder()
        existed = Path(args.output).exists()
        logging.getLogger("papermill").setLevel(logging.CRITICAL)  # each failure is the one line below
        out = execute_chapter(args.chapter, args.output, params, kernel_name=args.kernel, timeout=args.timeout,
                              progress=sys.stderr.isatty())
    except KeyboardInterrupt:
        where = f"; the notebook so far is in {args.output}" if existed is not None and Path(args.output).exists() else ""
        print(f"interrupted{where}; the experiments keep their checkpoints, and the same command resumes from them.",
              file=sys.stderr)
        return 130
    except _UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # papermill.PapermillExecutionError: a cell raised
        ename, evalue = getattr(err, "ename", None), getattr(err, "evalue", None)
        if type(err).__name__ == "DeadKernelError":
            print(f"error: the kernel died while running {_started_cell(args.output)} of {args.chapter} (out of memory, "
                  f"or a crash in compiled code); the notebook so far is in {args.output}", file=sys.stderr)
            return 1
        if ename is None:
            raise
        if ename == "KeyboardInterrupt" and args.timeout is not None:
            print(f"error: {args.chapter}: cell {getattr(err, 'exec_count', '?')} ran past --timeout {args.timeout} s "
                  f"and was interrupted (a run in progress saved a checkpoint); the notebook is in {args.output}",
                  file=sys.stderr)
            return 1
        if ename in _PARAMETER_ERRORS:
            # A bad value is caught by the experiment's validation before any compute: say so in
            # one line and leave no half-executed notebook behind.
            if not existed:
                Path(args.output).unlink(missing_ok=True)
            print(f"error: {_one_line(evalue)}", file=sys.stderr)
            return 2
        print(f"error: {args.chapter} failed in cell {getattr(err, 'exec_count', '?')} with {ename}: {evalue} "
              f"(the executed notebook, with the traceback, is in {args.output})", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


def _one_line(err) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _parameters(args) -> dict:
    """``--parameters-json`` (a JSON object) merged with the ``-p NAME VALUE`` pairs."""
    params = {}
    if args.parameters_json:
        try:
            params = json.loads(args.parameters_json)
        except ValueError as err:
            raise ValueError(f"--parameters-json is not JSON ({err}); give an object such as '{{\"scale\": "
                             "\"tiny\"}'.") from None
        if not isinstance(params, dict):
            raise ValueError(f"--parameters-json must be a JSON object of parameter values such as "
                             f"'{{\"scale\": \"tiny\"}}', got {type(params).__name__} {args.parameters_json!r}.")
    seen = {}
    for k, v in args.parameter:
        if k in seen:
            raise _UsageError(f"parameter {k!r} is given twice (-p {k} {seen[k]} and -p {k} {v}); give it once.")
        seen[k] = v
    params.update({k: parse_value(v) for k, v in args.parameter})
    return params


def _check_kernel(chapter, kernel_name: Optional[str]) -> str:
    """The Jupyter kernel the chapter will run on (``--kernel`` or its kernelspec), if installed."""
    from jupyter_client.kernelspec import KernelSpecManager

    name = kernel_name or _read(chapter).metadata.get("kernelspec", {}).get("name", "python3")
    installed = sorted(KernelSpecManager().find_kernel_specs())
    if name not in installed:
        where = "--kernel" if kernel_name else f"the kernelspec of {chapter}"
        raise ValueError(f"no Jupyter kernel named {name!r} ({where}); installed: {', '.join(installed) or 'none'}; "
                         "pass --kernel with one of them.")
    return name


def _check_parameters(chapter, params: dict) -> None:
    """Every value checked by the experiments that take it, before the kernel starts.

    A chapter's parameter that is also a parameter of an experiment the chapter names is
    validated by that experiment's parser (a ``ParameterError``, a ``ValueError``, names it and what to fix),
    so a value the run would reject (``inf`` where a finite number is needed, say) leaves no
    notebook, record or lock behind."""
    from . import experiments as E

    known = chapter_parameters(chapter)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{Path(chapter).name} has no parameter(s) {', '.join(map(repr, unknown))}; "
                         f"its parameters are: {', '.join(sorted(known))}.")
    text = Path(chapter).read_text(encoding="utf-8")
    used = [n for n in E.names() if re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", text)]
    for name, value in params.items():
        fields = []
        for exp_name in used:
            cls = E.get(exp_name).params
            hints = typing.get_type_hints(cls)
            fields += [(exp_name, f, hints[f.name]) for f in dataclasses.fields(cls) if f.name == name]
        errors = []
        for exp_name, f, tp in fields:
            try:
                E.coerce(name, tp, value, f.metadata)
            except E.ParameterError as err:
                errors.append(str(err))
            else:
                errors = []
                break
        if fields and errors:
            raise E.ParameterError(errors[0])


if __name__ == "__main__":
    sys.exit(main())
