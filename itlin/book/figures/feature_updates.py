"""Figures of the chapter "How many feature updates reach K=1?" (``book/feature_updates.md``):
the gap to K=1 against the number of feature updates, the gap of two updates in the records
that run the same settings, and the demo over the number of updates and the dataset
(:func:`updates_demo`, one frame drawn by :func:`updates_setting`).

Each function draws one figure in the house style and returns it; the chapter shows it with
``plt.show()`` beside its caption.
"""

from __future__ import annotations

import math
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..experiments.main._rows import select
from ..experiments.main.feature_updates import curve
from ..plotting import COLUMN_WIDTH, interval_rows, seed_band

__all__ = ["gap_and_curves", "gaps", "intervals", "ladder", "seed_gaps", "updates_demo", "updates_setting"]

#: the main paper's scale on the ladder's two axes: CIFAR-10's 50,000 training images, and the
#: CNN's 50 channels
PAPER_SCALE = {"data": 50_000, "width": 50}


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


# ------------------------------------------------------------------------------ the demo
def seed_gaps(rows_, u: int, sweep: str = "full") -> dict:
    """``{seed: gap}``: the final test accuracy of the run with ``u`` feature updates minus that of
    K=1 of the same seed, over the seeds where both completed (the pairs the claims are judged on;
    their mean is the verdict's gap)."""
    done = lambda rs: {int(r["seed"]): r["test"] for r in rs if r["status"] == "completed" and np.isfinite(r["test"])}
    big = {u_: g for u_, _, g in curve(rows_, sweep)}
    if u not in big:
        raise KeyError(f"no run with {u} feature updates in the {sweep} sweep; it has {sorted(big)}.")
    a, b = done(big[u]), done(select(rows_, sweep=sweep, K=1))
    return {s: float(a[s] - b[s]) for s in sorted(set(a) & set(b))}


def _dataset_limits(rows_, sweep: str) -> tuple:
    """The gap axis's limits, shared by one record's frames (so that moving ``u`` leaves it in place):
    around every seed's gap at every ``u``, in points, and zero."""
    gaps = [100 * g for u, _, _ in curve(rows_, sweep) for g in seed_gaps(rows_, u, sweep).values()]
    lo, hi = min(gaps + [0.0]), max(gaps + [0.0])
    pad = 0.08 * (hi - lo or 1.0)
    return lo - pad, hi + pad


def updates_setting(rec, rows_, verdicts, u: int, *, name: str, sweep: str = "full", gap_ylim=None, acc_ylim=None):
    """One frame of :func:`updates_demo`: the run with ``u`` feature updates against K=1 in one record.

    Left: every seed's gap (test accuracy with ``u`` updates minus K=1 of the same seed, in points,
    dots spread sideways) at ``u``, with the mean and its interval at the level the claim
    ``<sweep>.u<u>`` is judged at; the other numbers of updates in grey; the margin of "close" as a
    grey band. Right: the test accuracy of the model being trained during training (completed runs,
    mean with a band from the lowest to the highest seed), ``u`` updates against K=1, the
    relinearisations as dotted lines. Returns a :class:`~itlin.book.widgets.View` whose text says
    the gap, the verdict and the seeds left out, and whose table gives the claims at ``u``."""
    from ..labels import K_label
    from ..widgets import View

    pts = {u_: (K, g) for u_, K, g in curve(rows_, sweep)}
    K, group = pts[u]
    margin = float(rec.meta["resolved"]["close_margin"])
    v = verdicts[f"{sweep}.u{u}"]
    colour = "C3"
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 4.4), gridspec_kw={"width_ratios": [1, 1.25]})
    ax.axhspan(-100 * margin, 100 * margin, color="0.88", lw=0, zorder=0, label=f"margin ±{100 * margin:g} points")
    ax.axhline(0, color="0.4", lw=0.8)
    others = [(u_, verdicts[f"{sweep}.u{u_}"]) for u_ in pts if u_ != u]
    others = [(u_, w) for u_, w in others if w.gap is not None]
    if others:
        ax.errorbar([u_ for u_, _ in others], [100 * w.mean for _, w in others],
                    yerr=[100 * w.half for _, w in others], fmt="s", ms=4, color="0.6", capsize=2, lw=1.0, ls="none",
                    label="other u: mean, interval")
    g = seed_gaps(rows_, u, sweep)
    jitter = 2 ** np.random.default_rng(u).uniform(-0.18, 0.18, len(g))
    ax.scatter(u * jitter, [100 * x for x in g.values()], s=16, color=colour, alpha=0.45, lw=0, zorder=3,
               label="one seed")
    ax.errorbar([u], [100 * v.mean], yerr=[100 * v.half], fmt="D", ms=6, color="k", capsize=4, lw=1.6, zorder=4,
                label=f"mean, {100 * v.level:.3g}% interval")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(pts), [str(x) for x in pts])
    ax.minorticks_off()
    ax.set_xlim(min(pts) / 1.6, max(pts) * 1.6)
    if gap_ylim is not None:
        ax.set_ylim(*gap_ylim)
    ax.set(xlabel="feature updates u", ylabel="test acc. minus K=1 (points)")
    ax.set_title(f"gap to K=1 at u = {u}", fontsize=11)

    done = lambda rs: [rec.history(r["tag"]) for r in rs if r["status"] == "completed"]
    hs = done(group)
    relin = np.asarray(hs[0].relin_steps if hs else [], float)
    for i, step in enumerate(relin):
        bx.axvline(step, color=colour, lw=0.8, ls=":", alpha=0.8, label="relinearisation" if i == 0 else None)
    scaled = lambda hists: [_Percent(h) for h in hists]
    seed_band(bx, scaled(done(select(rows_, sweep=sweep, K=1))), "test/accuracy_lin", color="k", label="K=1", lw=1.6)
    seed_band(bx, scaled(hs), "test/accuracy_lin", color=colour, label=f"u = {u} ({K_label(K)})", lw=1.6)
    if acc_ylim is not None:
        bx.set_ylim(*acc_ylim)
    bx.set(xlabel="step", ylabel="test accuracy (%)")
    bx.set_title("during training, band: lowest to highest seed", fontsize=11)
    handles = [h for a in (ax, bx) for h in a.get_legend_handles_labels()[0]]
    labels = [lab for a in (ax, bx) for lab in a.get_legend_handles_labels()[1]]
    fig.tight_layout(rect=(0, 0.15, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)

    left = len({int(r["seed"]) for r in group}) - len(g)
    text = (f"{name}, {u} feature update{'s' if u != 1 else ''} ({K_label(K)}): test accuracy minus K=1 "
            f"{v.gap_text()} ({100 * v.level:.3g}% interval: the claim's level after the correction for several "
            f"claims); within ±{100 * margin:g} points of K=1: {v.verdict}"
            + (f"; {left} seed{'s' if left != 1 else ''} left out (a run diverged)" if left else ""))
    table = [{"claim": w.claim, "gap": w.gap_text(), "verdict": w.verdict}
             for w in verdicts if w.id in (f"{sweep}.u{u}", f"{sweep}.suffices_u{u}")]
    return View(fig, table=table, text=text)


class _Percent:
    """A history whose evaluated accuracies read in percent (for :func:`seed_band`)."""

    def __init__(self, history):
        self._h = history

    def eval_array(self, key):
        v = self._h.eval_array(key)
        return v if key == "step" else 100 * v


def updates_demo(records, *, sweep: str = "full", default_u: int = 2):
    """The demo of the chapter: knobs ``u`` (the number of feature updates) and ``dataset``;
    ``records`` maps each dataset's name to ``(record, rows, verdicts)`` (the records the chapter
    judges on), each frame drawn from that record's seeds by :func:`updates_setting` (axes shared
    between the frames of one record). A number of updates that a record lacks shows a line saying so."""
    from ..widgets import Demo, Knob, View

    records = dict(records)
    us = sorted({u for _, rows_, _ in records.values() for u, _, _ in curve(rows_, sweep)})
    if not us:
        raise ValueError(f"none of the records has large-K runs in the {sweep} sweep.")
    limits = {}
    for name, (rec, rows_, _) in records.items():
        accs = np.concatenate([100 * rec.history(r["tag"]).eval_array("test/accuracy_lin")
                               for r in select(rows_, sweep=sweep) if r["status"] == "completed"])
        lo, hi = np.nanmin(accs), np.nanmax(accs)
        pad = 0.05 * (hi - lo)
        limits[name] = (_dataset_limits(rows_, sweep), (max(0.0, lo - pad), min(100.0, hi + pad)))

    def compute(u, dataset):
        rec, rows_, verdicts = records[dataset]
        if u not in {u_ for u_, _, _ in curve(rows_, sweep)}:
            return View(text=f"{dataset}: this record has no run with {u} feature updates.")
        gap_ylim, acc_ylim = limits[dataset]
        return updates_setting(rec, rows_, verdicts, u, name=dataset, sweep=sweep, gap_ylim=gap_ylim,
                               acc_ylim=acc_ylim)

    names = list(records)
    return Demo([Knob("u", us, default=default_u if default_u in us else us[0], label="feature updates u"),
                 Knob("dataset", names, default=names[0])], compute,
                title="Each seed's gap to K=1, and the test accuracy during training")


def ladder(verdicts, rungs: Sequence, *, updates: Sequence[int], margin: float):
    """The scale ladder (:mod:`~itlin.book.experiments.main.ladder`): per axis (training-set
    size, width), the gap of ``u`` feature updates to K=1 at each rung (mean over seeds with its
    95% interval), the trend's weighted line through them, continued (dashed) to four times the
    largest rung with the line's own 95% band there, the margin of "close" as a grey band, and
    the paper's scale as a vertical line. ``verdicts``: the ladder's claims (by id)."""
    from ..experiments.main import ladder as L

    by_id = {v.id: v for v in verdicts}
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.6), sharey=True)
    for ax, (axis, along) in zip(axes, L.axes_of(list(rungs)).items()):
        size = (lambda g: g.n_train) if axis == "data" else (lambda g: g.channels)
        for u, marker in zip(updates, "osD^v"):
            pts = [(g, by_id.get(f"{g.name}.suffices_u{u}")) for g in along]
            pts = [(g, v) for g, v in pts if v is not None and v.tested]
            if not pts:
                continue
            xs = np.array([size(g) for g, _ in pts], float)
            line = ax.errorbar(xs, [100 * v.mean for _, v in pts], yerr=[100 * v.gap.half for _, v in pts],
                               marker=marker, capsize=3, lw=0, elinewidth=1.2, label=f"u={u}")
            if len(pts) >= 2:
                t = L.trend([math.log2(x / xs[0]) for x in xs], [v.gap.mean for _, v in pts],
                            [v.gap.half / L.Z for _, v in pts])
                far = np.geomspace(xs[0], 4 * xs[-1], 40)
                fit = np.array([t.at(math.log2(x / xs[0])) for x in far])
                inside = far <= xs[-1]
                colour = line[0].get_color()
                ax.plot(far[inside], 100 * fit[inside, 0], color=colour, lw=1)
                ax.plot(far[~inside], 100 * fit[~inside, 0], color=colour, lw=1, ls="--")
                ax.fill_between(far, 100 * (fit[:, 0] - L.Z * fit[:, 1]), 100 * (fit[:, 0] + L.Z * fit[:, 1]),
                                color=colour, alpha=0.12, lw=0)
        ax.axhspan(-100 * margin, 100 * margin, color="0.85", lw=0, label=f"±{100 * margin:g} points")
        ax.axhline(0, color="0.4", lw=0.8)
        ax.axvline(PAPER_SCALE[axis], color="0.3", ls=":", lw=1.2, label="the paper's scale")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training examples (16 channels)" if axis == "data" else "channels (1,000 examples)")
        ax.set_title("training-set size" if axis == "data" else "width")
    axes[0].set_ylabel("test accuracy minus K=1 (points)")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
