"""Figures of the chapter "How many feature updates reach K=1?" (``book/feature_updates.md``):
the gap to K=1 against the number of feature updates, and the gap of two updates in the records
that run the same settings.

Each function draws one figure in the house style and returns it; the chapter shows it with
``plt.show()`` beside its caption.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..experiments.main._rows import select
from ..experiments.main.feature_updates import curve
from ..plotting import COLUMN_WIDTH, interval_rows, seed_band

__all__ = ["gap_and_curves", "gaps", "intervals"]


def _margin_band(ax, margin: float) -> None:
    ax.axhspan(-100 * margin, 100 * margin, color="0.85", lw=0, label=f"±{100 * margin:g} points")
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("feature updates u")
    ax.set_ylabel("test accuracy minus K=1 (points)")


def gap_and_curves(rec, rows_, verdicts):
    """Left: the final test accuracy of the run with ``u`` feature updates minus that of K=1
    (mean over seeds with its 95% interval) against ``u``, per sweep, with the margin of "close"
    as a grey band. Right: the full-batch runs' test accuracy during training, mean over seeds
    with a band from the lowest to the highest seed, K=1 in black."""
    margin = float(rec.meta["resolved"]["close_margin"])
    sweeps = [s for s in ("full", "mini") if curve(rows_, s)]
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.6))
    ax = axes[0]
    for sweep, marker in zip(sweeps, ("o", "s")):
        pts = [(u, verdicts[f"{sweep}.u{u}"]) for u, _, _ in curve(rows_, sweep)]
        us = np.array([u for u, _ in pts], float)
        means = np.array([100 * v.mean for _, v in pts])
        halves = np.array([100 * v.gap.half for _, v in pts])
        ax.errorbar(us, means, yerr=halves, marker=marker, capsize=3, lw=1.4,
                    label="full batch" if sweep == "full" else "mini-batch")
    _margin_band(ax, margin)
    ax.set_title("gap to K=1, mean and 95% interval")
    ax.legend(loc="lower right")
    ax = axes[1]
    col = plt.cm.plasma(np.linspace(0.1, 0.8, len(curve(rows_, "full"))))
    for c, (u, K, g) in zip(col, curve(rows_, "full")):
        seed_band(ax, [rec.history(r["tag"]) for r in g], "test/accuracy_lin", color=c, label=f"u={u}", lw=1.3)
    seed_band(ax, [rec.history(r["tag"]) for r in select(rows_, sweep="full", K=1)], "test/accuracy_lin",
              color="black", label="K=1", lw=1.6)
    ax.set_xlabel("step")
    ax.set_ylabel("test accuracy (model being trained)")
    ax.set_title("full batch, mean over seeds")
    ax.legend(loc="lower right", ncol=2, fontsize=9)
    fig.tight_layout()
    return fig


def gaps(series: Sequence, margin: float):
    """The gap to K=1 against the number of feature updates, one errorbar line per
    ``(sweep, verdicts, rows, marker, label)`` of ``series``, drawn slightly apart so that every
    interval shows; the grey band is the margin of "close" (a fraction, drawn in points)."""
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH * 0.6, 3.4 + 0.3 * len(series)))
    for i, (sweep, vs, rs, marker, label) in enumerate(series):
        pts = [(u, vs[f"{sweep}.u{u}"]) for u, _, _ in curve(rs, sweep)]
        shift = 2 ** (0.08 * (i - (len(series) - 1) / 2))
        ax.errorbar([u * shift for u, _ in pts], [100 * v.mean for _, v in pts],
                    yerr=[100 * v.gap.half for _, v in pts], marker=marker, capsize=3, lw=1.4, label=label)
    _margin_band(ax, margin)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)  # below: the points stay clear
    fig.tight_layout()
    return fig


def intervals(rows: Sequence, *, band: float, height: float):
    """One row per ``(name, verdict, highlighted)`` of ``rows``: the gap of two updates minus K=1
    with its interval (:func:`itlin.book.plotting.interval_rows`), the margin ``band`` in points."""
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, height))
    interval_rows(ax, rows, band=band, xlabel="test accuracy, two updates minus K=1 (points)")
    fig.tight_layout()
    return fig
