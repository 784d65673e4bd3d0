"""Plot curves so that diverged runs stand out, and drop runs the way the paper does.

* :func:`plot_curve` draws one curve; a diverged run is dashed, ends in a cross at its last
  finite point and says "diverged at step s" in its legend entry.
* :func:`plot_history` / :func:`plot_runs` draw a metric of one :class:`itlin.History` or
  of every training run of a :class:`itlin.book.runner.Record`.
* :func:`filter_runs` drops diverged runs and runs whose metric is over a threshold (main paper
  Fig. 9 drops runs with train RMSE over 2.5) and says how many were dropped and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from ..core.history import Status


#: the book's text column in inches at 100 dpi (sphinx-book-theme's main column is ~750 CSS px)
COLUMN_WIDTH = 7.5

#: the house style: every chapter's figures (:func:`use_house_style`)
HOUSE_STYLE = {
    "figure.figsize": (COLUMN_WIDTH, 4.2),
    "figure.dpi": 100,            # 1 inch = 100 CSS px, so a figure as wide as the column is not shrunk
    "savefig.dpi": 200,
    "font.size": 11,
    "axes.titlesize": 11.5,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "figure.titlesize": 12.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "lines.linewidth": 1.8,
}


#: the page column in CSS px that :data:`COLUMN_WIDTH` stands for, and the smallest text size on
#: it that counts as legible (:func:`smallest_text`)
COLUMN_PX = 750
MIN_TEXT_PX = 9.0


def smallest_text(fig, *, column_px: float = COLUMN_PX) -> tuple:
    """``(px, text)``: the smallest visible text of ``fig`` in CSS px as the book shows it.

    Inline figures are shown at their own size (``figure.dpi`` = 100, so one inch is 100 CSS px)
    and scaled down to ``column_px`` when wider; a ``fontsize`` of ``s`` points is then
    ``s / 72 * 100 * scale`` px tall. Returns ``(inf, "")`` for a figure without text.

    >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots(figsize=(15, 3)); _ = ax.set_title("t", fontsize=10)
    >>> round(smallest_text(fig)[0], 1)  # 15 in shown in 750 px: half size
    6.9
    >>> smallest_text(fig)[1]  # the tick labels (10 pt in the house style, 6.9 pt here by default)
    '0.0'

    >>> plt.close(fig)
    """
    from matplotlib.text import Text

    fig.draw_without_rendering()  # fills in tick labels, legends and layout
    width_in = float(fig.get_figwidth())
    scale = min(1.0, column_px / (width_in * 100.0))
    best = (math.inf, "")
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip() or t.get_alpha() == 0:
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        px = float(t.get_fontsize()) / 72.0 * 100.0 * scale
        if px < best[0]:
            best = (px, t.get_text().strip()[:40])
    return best


def _record_legibility(path):
    """Inside IPython, note the smallest text of every figure shown inline (as a JSON line in
    ``path``): the book's test fails a chapter whose figures have text under MIN_TEXT_PX."""
    import json

    from IPython import get_ipython
    from matplotlib.figure import Figure

    formatter = get_ipython().display_formatter.formatters["image/png"]
    previous = formatter.lookup_by_type(Figure)

    def png(fig, **kwargs):
        px, text = smallest_text(fig)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"px": px if math.isfinite(px) else None, "text": text,
                                 "figsize": [fig.get_figwidth(), fig.get_figheight()]}) + "\n")
        return previous(fig, **kwargs)

    formatter.for_type(Figure, png)


def use_house_style() -> None:
    """Apply :data:`HOUSE_STYLE` to matplotlib and, inside IPython, render inline figures at
    twice the pixel density (sharp on HiDPI screens, same size on the page).

    With ``$ITLIN_FIGURE_CHECK`` set to a file, every inline figure's smallest text size
    (:func:`smallest_text`) is appended to it, for the book's legibility test.
    """
    import os

    import matplotlib as mpl

    mpl.rcParams.update(HOUSE_STYLE)
    try:
        from IPython import get_ipython

        if get_ipython() is not None:
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            set_matplotlib_formats("retina")
            if os.environ.get("ITLIN_FIGURE_CHECK"):
                _record_legibility(os.environ["ITLIN_FIGURE_CHECK"])
    except ImportError:  # not in IPython, or no inline backend: nothing to do
        pass


def diverged_step(status) -> Optional[int]:
    """``s`` from a run status ``"diverged at step s"`` (:meth:`itlin.Status.read`), else ``None``.

    >>> diverged_step("diverged at step 12"), diverged_step("completed"), diverged_step("diverged")
    (12, None, None)
    """
    return _read_status(status)[1]


def _read_status(status) -> tuple:
    """``(Status, diverged_at)`` of a run status or its words; a record's summary sentence of several
    runs (not one run's status) reads as running."""
    try:
        return Status.read(status)
    except ValueError:
        return Status.RUNNING, None


def plot_curve(ax, x, y, *, status: str = "completed", label: Optional[str] = None, diverged_at=None, **kwargs):
    """Plot ``y`` against ``x``; a diverged run is dashed with a cross at its last finite point.

    ``status`` is a run status (``"diverged"``, or an old record's ``"diverged at step s"``, marks
    the run diverged); ``diverged_at`` gives the step in the legend. Returns the line.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    read, at = _read_status(status)
    step = diverged_at if diverged_at is not None else at
    diverged = step is not None or read is Status.DIVERGED
    if diverged:
        kwargs.setdefault("linestyle", "--")
        note = "diverged" if step is None else f"diverged at step {step}"
        label = f"{label} ({note})" if label else note
    (line,) = ax.plot(x, y, label=label, **kwargs)
    if diverged:
        finite = np.flatnonzero(np.isfinite(y))
        if finite.size:
            i = finite[-1]
            ax.plot([x[i]], [y[i]], marker="x", markersize=9, markeredgewidth=2, color=line.get_color(),
                    linestyle="none", zorder=line.get_zorder() + 1)
    return line


def plot_history(ax, history, metric: str = "test/accuracy", *, x: str = "step", label: Optional[str] = None,
                 **kwargs):
    """Plot an evaluated metric of a :class:`itlin.History` (``"loss"`` plots the training
    loss per ``loss_every`` steps)."""
    if metric == "loss":
        ys = np.asarray(history.loss, dtype=float)
        xs = (np.arange(ys.size) + 1) * history.loss_every
    else:
        if metric not in history.evals:
            raise KeyError(f"metric {metric!r} was not recorded; recorded: {', '.join(sorted(history.evals))}.")
        ys = history.eval_array(metric)
        xs = history.eval_array(x)
    return plot_curve(ax, xs, ys, status=history.status, label=label, diverged_at=history.diverged_at, **kwargs)


def plot_runs(ax, record, metric: str = "test/accuracy", *, tags=None, label: Optional[Callable[[str], str]] = None,
              **kwargs) -> dict:
    """Plot ``metric`` of every training run of a :class:`itlin.book.runner.Record` (or of ``tags``).

    Returns ``{tag: line}``.
    """
    tags = list(record.runs) if tags is None else list(tags)
    return {tag: plot_history(ax, record.history(tag), metric, label=label(tag) if label else tag, **kwargs)
            for tag in tags}


# ------------------------------------------------------------------------------ filtering
@dataclass
class FilteredRuns:
    """The runs kept and dropped by :func:`filter_runs`.

    ``kept``: ``{label: run}``; ``dropped``: ``{label: reason}``; ``summary``: one sentence for a
    figure caption, e.g. ``"dropped 3 of 12 runs: 2 diverged, 1 with train/rmse > 2.5"``.
    """

    kept: dict
    dropped: dict
    total: int
    summary: str = ""
    counts: dict = field(default_factory=dict)

    def __str__(self):
        return self.summary

    @property
    def n_dropped(self) -> int:
        return len(self.dropped)


def _status_of(run) -> str:
    """A run's status in words (``"diverged at step s"`` where the step is known)."""
    if isinstance(run, str):
        return run
    if isinstance(run, Mapping):
        status, step = str(run.get("status", "completed")), run.get("diverged_at")
    else:
        history = getattr(run, "history", run)
        status, step = str(getattr(run, "status", "completed")), getattr(history, "diverged_at", None)
    if status == "diverged" and step is not None:
        return f"diverged at step {step}"
    return status


def _value_of(run, metric) -> Optional[float]:
    if metric is None:
        return None
    if callable(metric):
        v = metric(run)
    elif isinstance(run, Mapping):
        if metric in run:
            v = run[metric]
        elif isinstance(run.get("final"), Mapping) and metric in run["final"]:
            v = run["final"][metric]
        else:
            raise KeyError(f"run has no {metric!r} (keys: {', '.join(map(str, run))}).")
    elif hasattr(run, "evals"):  # a History
        v = run.eval_array(metric)
    else:
        history = getattr(run, "history", None)
        if history is None:
            raise TypeError(f"cannot read {metric!r} from {type(run).__name__}.")
        v = history.eval_array(metric)
    arr = np.asarray(v, dtype=float).ravel()
    if arr.size == 0:
        return math.nan
    return float(arr[-1])


def filter_runs(runs: Mapping[str, Any], *, metric: Union[str, Callable, None] = None, threshold: Optional[float] = None,
                drop_diverged: bool = True, keep_above: bool = False) -> FilteredRuns:
    """Drop diverged runs and runs whose ``metric`` is over ``threshold``.

    Args:
      runs: ``{label: run}``; a run is a dict with ``"status"`` and metrics (directly or under
        ``"final"``, as in :attr:`itlin.book.runner.Record.runs`), a :class:`~itlin.History`,
        a :class:`~itlin.FitResult`, or just a status string.
      metric: key (or ``run -> value`` function) of the value compared with ``threshold``; for
        a curve, its last value. A non-finite value counts as diverged.
      threshold: drop runs with ``value > threshold`` (``keep_above=True``: ``value < threshold``).
      drop_diverged: drop runs whose status says they diverged.

    Example (main paper Fig. 9): ``filter_runs(rec.runs, metric="train/rmse", threshold=2.5)``.
    """
    if threshold is not None and metric is None:
        raise ValueError("a threshold needs a metric to compare it with.")
    kept, dropped = {}, {}
    counts = {"diverged": 0, "threshold": 0}
    for label, r in runs.items():
        status = _status_of(r)
        if drop_diverged and (_read_status(status)[0] is Status.DIVERGED):
            dropped[label] = status
            counts["diverged"] += 1
            continue
        if threshold is not None:
            v = _value_of(r, metric)
            name = metric if isinstance(metric, str) else "value"
            if v is None or not math.isfinite(v):
                if drop_diverged:
                    dropped[label] = f"{name} is not finite"
                    counts["diverged"] += 1
                    continue
            elif (v < threshold) if keep_above else (v > threshold):
                dropped[label] = f"{name} = {v:.4g} {'<' if keep_above else '>'} {threshold:g}"
                counts["threshold"] += 1
                continue
        kept[label] = r
    total = len(runs)
    if dropped:
        parts = []
        if counts["diverged"]:
            parts.append(f"{counts['diverged']} diverged")
        if counts["threshold"]:
            name = metric if isinstance(metric, str) else "value"
            parts.append(f"{counts['threshold']} with {name} {'<' if keep_above else '>'} {threshold:g}")
        summary = f"dropped {len(dropped)} of {total} runs: {', '.join(parts)}"
    else:
        summary = f"kept all {total} runs"
    return FilteredRuns(kept, dropped, total, summary, counts)



# ------------------------------------------------------------------------------ runs over K and seeds
def colours(Ks) -> dict:
    """One colour per period, the same scheme in every chapter: ``K=1`` black, ``K=inf`` grey,
    the finite large periods from the plasma colour map (purple for the smallest, orange for
    the largest)."""
    import matplotlib.pyplot as plt

    Ks = sorted(set(float(K) for K in Ks))
    finite = [K for K in Ks if math.isfinite(K) and K != 1]
    out = {1.0: "black", math.inf: "0.55"}
    out.update(zip(finite, plt.cm.plasma(np.linspace(0.15, 0.75, len(finite))) if finite else []))
    return out


def relin_marks(ax, history, *, x_scale: float = 1.0, color=None, max_marks: int = 200, y: float = 0.0,
                size: float = 7.0):
    """Short ticks along the bottom of ``ax`` at the steps after which the run relinearised
    (its feature updates), drawn in the run's colour; nothing for runs that relinearise
    more than ``max_marks`` times (``K = 1``: every step)."""
    steps = np.asarray(history.relin_steps, dtype=float)
    if steps.size == 0 or steps.size > max_marks or (steps.size > 1 and np.all(np.diff(steps) == 1)):
        return None
    trans = ax.get_xaxis_transform()
    return ax.plot(steps / x_scale, np.full(steps.shape, y), linestyle="none", marker="|", markersize=size,
                   markeredgewidth=1.6, color=color, transform=trans, clip_on=False)[0]


def update_axis(ax, relin_steps, *, x_scale: float = 1.0, label: str = "feature updates", max_ticks: int = 12):
    """A secondary x axis on top of ``ax`` counting the feature updates of one run: tick ``n``
    sits at the step of its ``n``-th relinearisation."""
    steps = np.asarray(relin_steps, dtype=float) / x_scale
    top = ax.secondary_xaxis("top")
    if steps.size == 0:
        top.set_xticks([])
    else:
        idx = np.arange(steps.size)
        stride = max(1, int(math.ceil(steps.size / max_ticks)))
        keep = idx[(idx + 1) % stride == 0] if stride > 1 else idx
        top.set_xticks(steps[keep])
        top.set_xticklabels([str(i + 1) for i in keep])
    top.set_xlabel(label)
    return top


def seed_band(ax, histories: Sequence, metric: str, *, color=None, label: Optional[str] = None, lw: float = 1.8,
              linestyle: str = "-", alpha: float = 0.18):
    """The mean over seeds of an evaluated metric against steps, with a band from the lowest to
    the highest seed; a run that diverged ends where it did (the mean covers the steps every
    seed reached)."""
    curves = [(h.eval_array("step"), h.eval_array(metric)) for h in histories]
    curves = [(x, y) for x, y in curves if x.size]
    if not curves:
        return None
    n = min(x.size for x, _ in curves)
    x = curves[0][0][:n]
    ys = np.stack([y[:n] for _, y in curves])
    line = ax.plot(x, np.nanmean(ys, axis=0), color=color, lw=lw, linestyle=linestyle, label=label)[0]
    if len(curves) > 1:
        ax.fill_between(x, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=line.get_color(), alpha=alpha, lw=0)
    return line


def interval_rows(ax, rows: Sequence, *, xlabel: str, scale: float = 100.0, band: Optional[float] = None,
                  line: Optional[float] = None):
    """One claim's gap in several records, a row each (top to bottom in ``rows`` order): the
    mean with its interval at each verdict's level. ``rows`` holds ``(label, verdict,
    highlight)``; the highlighted rows (the record under test) are drawn in colour, the others
    in grey. ``band`` shades the margin of an equivalence (-band to band), ``line`` marks the
    threshold of a one-sided claim; both in the plotted unit (the gap times ``scale``)."""
    for y, (_, v, highlight) in enumerate(rows):
        ax.errorbar([scale * v.mean], [y], xerr=[scale * v.half], fmt="o" if highlight else "s", capsize=4,
                    color="C3" if highlight else "0.35", lw=1.6)
    if band is not None:
        ax.axvspan(-band, band, color="0.85", lw=0, zorder=0)
    if line is not None:
        ax.axvline(line, color="0.3", lw=1.0, ls="--")
    ax.axvline(0, color="0.5", lw=0.8)
    ax.set_yticks(range(len(rows)), [label for label, *_ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(xlabel)


def shared_legend(fig, ax, ncol: int = 2):
    """One legend for all panels (they draw the same runs), under them, clear of the curves."""
    handles, labels = ax.get_legend_handles_labels()
    rows = max(1, math.ceil(len(labels) / ncol))
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)

__all__ = ["COLUMN_WIDTH", "FilteredRuns", "colours", "diverged_step", "filter_runs", "interval_rows", "plot_curve", "plot_history",
           "plot_runs", "relin_marks", "seed_band", "shared_legend", "update_axis", "use_house_style"]
