"""What the book's chapters compute and glue, one module per chapter (issue 47: chapters read as prose).

A chapter sets its parameters, runs its experiments through :mod:`itlin.book.runner`, and then
calls the functions of its module here for the numbers and the short texts that its fixed prose
reads with MyST ``{glue}``; figures are in :mod:`itlin.book.figures`. Each function returns what
it computes (a dict of glue names and values where a section glues several), so that a chapter's
code cells stay a few lines long and every name they use is public.

This module holds what several chapters share: :func:`glue_all`, :func:`print_lines`, the one-line provenance of a
run (:func:`ran_here`, :func:`made`), and what a planned record still being made shows (:func:`not_judged_yet`). It also re-exports what chapters read from the helpers the
experiments share (private modules of :mod:`itlin.book.experiments`), so that a chapter imports
only public names: rows and pooled seeds of the main paper's records (``pool_seeds``,
``rows_of``, ``select``, ``updates``), the test-set size a verdict is judged on
(``n_test_judged``), the paper's reported numbers (``PAPER``), and Arbel et al.'s units and step
grids (``REF_N``, ``gn_lr``, ``gd_lr``, ``eps0_ours``, ``fmt_lr``, ``at``, ``lr_arrays``,
``pool_lr_sweeps``).
"""

from __future__ import annotations

from typing import Mapping

from ..experiments.arbel._arbel import REF_N, at, eps0_ours, fmt_lr, gd_lr, gn_lr, lr_arrays, pool_lr_sweeps
from ..experiments.main._rows import pool_seeds, rows_of, select, updates
from ..experiments.main._setup import PAPER, n_test_judged

__all__ = ["PAPER", "REF_N", "at", "eps0_ours", "fmt_lr", "gd_lr", "gn_lr", "glue_all", "lr_arrays", "made",
           "n_test_judged", "not_judged_yet", "pool_lr_sweeps", "pool_seeds", "print_lines", "ran_here", "rows_of", "select", "updates"]


def not_judged_yet(made: str):
    """What a confirmatory record made in parts shows while planned seeds are missing: ``made``
    (how far it has come, e.g. :meth:`~itlin.book.records.SeedProgress.text`) and that nothing else
    of it is read, as Markdown."""
    from IPython.display import Markdown

    return Markdown(f"**Not judged yet**: {made}. Nothing of the record is read until every planned seed is in, so "
                    "no number from it appears here.")


def glue_all(values: Mapping) -> None:
    """Glue every ``name: value`` of ``values`` for the chapter's prose (``myst_nb.glue`` with
    ``display=False``), in order."""
    from myst_nb import glue

    for name, value in values.items():
        glue(name, value, display=False)


def print_lines(lines) -> None:
    """Print each of ``lines`` (a table a chapter shows as text).

    >>> print_lines(["a", "  b"])
    a
      b
    """
    for line in lines:
        print(line)


def ran_here(live) -> str:
    """The line a chapter prints under its first cell: how many training runs this page made, their
    status, and the time and device of the run (for results loaded from the store, of the run that
    made them).

    >>> from types import SimpleNamespace as NS
    >>> ran_here(NS(runs={"a": 0, "b": 0}, status_text="completed", info={"wall_seconds": 12.4, "device": "cpu"}))
    '2 training runs here, status: completed; 12 s on cpu'
    """
    return (f"{len(live.runs)} training runs here, status: {live.status_text}; "
            f"{live.info['wall_seconds']:.0f} s on {live.info['device']}")


def made(rec) -> str:
    """Where, with which JAX and at which commit a record was made, and its minutes.

    >>> from types import SimpleNamespace as NS
    >>> made(NS(info={"device": "cpu", "jax_version": "0.4.30", "git_commit": "abcdef123", "wall_seconds": 600}))
    'recorded on cpu with JAX 0.4.30 at commit abcdef1; 10 minutes'
    """
    info = rec.info
    return (f"recorded on {info['device']} with JAX {info.get('jax_version', '?')} at commit "
            f"{(info.get('git_commit') or '?')[:7]}; {info['wall_seconds'] / 60:.0f} minutes")

