"""Figures of Arbel et al.'s experiments: one function per figure.

Each takes the arrays an experiment's ``arrays`` returns (:func:`itlin.book.experiments.arbel.
_arbel.lr_arrays` for the step-size sweeps) and draws the geometric mean over seeds with its 95%
interval (a band), GN in red, GD in blue, random features (RF) in grey. :func:`init_step_demo` is
the chapter's demo over the initial scale and GN's step size (one frame: :func:`init_step_setting`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection

from ...metrics import log_slopes
from ..experiments.arbel import _arbel as A
from ..plotting import COLUMN_WIDTH
from ..verdicts import seed_interval

COLOURS = {"gn": "#b2182b", "gd": "#2166ac", "rf": "0.35"}
METRIC_LABELS = {"wcd": "WCD (Eq. 9)", "wcd_code": "WCD (their code)", "train": "training loss",
                 "val": "validation loss", "test": "test loss", "lrfit": "Test-LRfit", "sigma_min": r"$\sigma_{\min}(JJ^\top)$",
                 "sigma_rel": r"$\sigma_{\min}(JJ^\top)$ / mean eigenvalue"}


def log_band(values, axis=-1):
    """``(centre, lo, hi)`` of ``values`` over ``axis`` (seeds): the mean of log10 with its 95%
    t-interval, as values (a geometric mean and its interval); NaN where not finite or positive."""
    lv = np.moveaxis(A.log10(values), axis, -1)
    flat = lv.reshape(-1, lv.shape[-1])
    out = np.full((3, flat.shape[0]), np.nan)
    for i, row in enumerate(flat):
        m, h = seed_interval(row)
        if math.isfinite(m):
            h = h if math.isfinite(h) else 0.0
            out[:, i] = (10 ** m, 10 ** (m - h), 10 ** (m + h))
    return tuple(o.reshape(lv.shape[:-1]) for o in out)


def _band(ax, x, values, key, label, axis=-1, **kw):
    c, lo, hi = log_band(values, axis=axis)
    ax.plot(x, c, color=COLOURS[key], label=label, **kw)
    ax.fill_between(x, lo, hi, color=COLOURS[key], alpha=0.15, lw=0)


def _loglog(ax, title=None):
    ax.set_xscale("log")
    ax.set_yscale("log")
    if title:
        ax.set_title(title, fontsize=10.5)


def steps_final(s, metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 1 (right): final metrics against the step size for GN and GD; RF's test loss as a
    grey band; step sizes at which a seed diverged are crossed out and not drawn."""
    fig, axes = plt.subplots(2, 2, figsize=(COLUMN_WIDTH, 5.6), sharex=True)
    rf = log_band(s["rf"][None])
    for ax, key in zip(axes.flat, metrics):
        for m in ("gn", "gd"):
            vals, div = s["final"][m][key].copy(), s["diverged"][m].any(axis=1)
            vals[div] = np.nan
            _band(ax, s["lr"][m], vals, m, A.LABELS[m], marker="o", ms=4)
            if div.any():
                top = np.nanmax(log_band(vals)[0]) if np.isfinite(log_band(vals)[0]).any() else 1.0
                ax.plot(s["lr"][m][div], np.full(div.sum(), top), "x", color=COLOURS[m], ms=7, mew=2)
        if key in ("test", "lrfit"):
            ax.axhspan(rf[1][0], rf[2][0], color=COLOURS["rf"], alpha=0.15, lw=0)
            ax.axhline(rf[0][0], color=COLOURS["rf"], lw=1.2, ls="--", label="RF")
        _loglog(ax, METRIC_LABELS[key])
    for ax in axes[1]:
        ax.set_xlabel("step size λ (their units)")
    axes[0, 1].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def steps_trajectories(s, lrs=(1e-2, 1.0, 100.0), metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 2: the metrics along training for GN (top) and GD (bottom) at the step sizes ``lrs``
    (lighter: smaller), geometric mean over seeds; RF's test loss dotted."""
    fig, axes = plt.subplots(2, len(metrics), figsize=(COLUMN_WIDTH, 4.8), sharey="col")
    rf = log_band(s["rf"][None])[0][0]
    for row, m in enumerate(("gn", "gd")):
        picks = [v for v in lrs if np.isclose(s["lr"][m], v, rtol=1e-9).any()]
        for j, v in enumerate(picks):
            i = A.at(s["lr"][m], v)
            shade = np.linspace(0.35, 1.0, max(len(picks), 1))[j]
            colour = tuple(1 - shade * (1 - ch) for ch in plt.matplotlib.colors.to_rgb(COLOURS[m]))
            for ax, key in zip(axes[row], metrics):
                ax.plot(s["ends"][m] + 1, log_band(s["trace"][m][key][i], axis=0)[0],
                        "--" if s["diverged"][m][i].any() else "-", color=colour, lw=1.6, label=f"λ = {A.fmt_lr(v)}")
        for ax, key in zip(axes[row], metrics):
            _loglog(ax, METRIC_LABELS[key] if row == 0 else None)
            if key in ("test", "lrfit"):
                ax.axhline(rf, color=COLOURS["rf"], lw=1.0, ls=":")
            if row == 1:
                ax.set_xlabel("steps + 1", fontsize=9.5)
            ax.tick_params(labelsize=8.5)
            ax.yaxis.set_minor_formatter(plt.NullFormatter())
        axes[row, 0].set_ylabel(A.LABELS[m], fontsize=11, color=COLOURS[m])
        axes[row, min(1, len(metrics) - 1)].legend(frameon=False, fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def init_final(s, metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 1 (left): final metrics at each method's step chosen on validation against ``tau0``, with RF."""
    fig, axes = plt.subplots(2, 2, figsize=(COLUMN_WIDTH, 5.6), sharex=True)
    for ax, key in zip(axes.flat, metrics):
        for m in ("gn", "gd"):
            _band(ax, s["tau0"], s["best_final"][m][key], m, A.LABELS[m] + " (chosen step)", marker="o", ms=4)
        if key in ("test", "lrfit"):
            _band(ax, s["tau0"], s["rf"], "rf", "RF", marker="s", ms=3.5, ls="--", lw=1.2)
        _loglog(ax, METRIC_LABELS[key])
    for ax in axes[1]:
        ax.set_xlabel(r"$\tau_0$ (std of the hidden layer at init)")
    axes[1, 0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def init_sigma(s):
    """Fig. 4 (right): ``sigma_min(J J^T)`` along GN training at the chosen step, one line per
    ``tau0`` (darker: larger): absolute (left) and relative to the mean eigenvalue (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.3))
    cmap, t, x = plt.get_cmap("Reds"), s["tau0"], s["ends"]["gn"] + 1
    for g, tau in enumerate(t):
        colour = cmap(0.35 + 0.65 * g / max(len(t) - 1, 1))
        for ax, key in zip(axes, ("sigma_min", "sigma_rel")):
            c, lo, hi = log_band(s["best_trace"]["gn"][key][g], axis=0)
            ax.plot(x, c, color=colour, label=f"τ0 = {A.fmt_lr(tau)}")
            ax.fill_between(x, lo, hi, color=colour, alpha=0.15, lw=0)
    for ax, key in zip(axes, ("sigma_min", "sigma_rel")):
        _loglog(ax, METRIC_LABELS[key])
        ax.set_xlabel("GN steps + 1")
    axes[0].legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def samples(s, title=""):
    """Test loss against N (log-log) for GN, GD and RF, one panel per ``tau0``, with the
    least-squares line through the means and the mean slope per seed in the legend."""
    fig, axes = plt.subplots(1, len(s["tau0"]), figsize=(COLUMN_WIDTH, 3.4), sharey=True, squeeze=False)
    n = s["n"]
    for g, ax in enumerate(axes[0]):
        for m in ("gn", "gd", "rf"):
            vals = s["rf"][:, g] if m == "rf" else s["test"][m][:, g]
            _band(ax, n, vals, m, f"{A.LABELS[m]} (slope {np.mean(log_slopes(n, vals)):.2f})", axis=-1,
                  marker="s" if m == "rf" else "o", ms=4, lw=0)
            b = np.polyfit(np.log10(n), np.nanmean(A.log10(vals), axis=-1), 1)
            ax.plot(n, 10 ** np.polyval(b, np.log10(n)), "--" if m == "rf" else "-", color=COLOURS[m], lw=1.2)
        _loglog(ax, f"{title}τ0 = {A.fmt_lr(s['tau0'][g])}")
        ax.set_xticks(n, [f"{v:g}" for v in n])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xlabel("training points N")
        ax.legend(frameon=False, fontsize=8.5, loc="lower left")
    axes[0, 0].set_ylabel("test loss")
    fig.tight_layout()
    return fig


def width(s):
    """Test loss against ``M`` (log-log) for GN, GD and RF, with the mean slope per seed."""
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH * 0.6, 3.2))
    w = s["width"]
    for m in ("gn", "gd", "rf"):
        vals = s["rf"] if m == "rf" else s["test"][m]
        _band(ax, w, vals, m, f"{A.LABELS[m]} (slope {np.mean(log_slopes(w, vals)):+.2f})",
              marker="s" if m == "rf" else "o", ls="--" if m == "rf" else "-", ms=4, lw=1.2)
    _loglog(ax)
    ax.set_xticks(w, [f"{v:g}" for v in w])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel="hidden units M", ylabel="test loss")
    ax.legend(frameon=False, fontsize=8.5)
    fig.tight_layout()
    return fig


def damping(rec):
    """GN's final test loss and Test-LRfit against the damping floor, with RF's test loss."""
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.2))
    eps, rf = np.asarray(rec["eps0"]), log_band(np.asarray(rec["rf_test"])[None])
    for ax, key in zip(axes, ("test", "lrfit")):
        _band(ax, eps, np.asarray(rec[key]), "gn", "GN", marker="o", ms=4)
        ax.axhline(rf[0][0], color=COLOURS["rf"], ls="--", lw=1.2, label="RF")
        _loglog(ax, METRIC_LABELS[key])
        ax.set_xlabel(r"damping floor $\varepsilon_0$ (their units)")
    axes[0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ the demo
def _limits(values, pad: float = 0.15) -> tuple:
    """Log-axis limits around every finite positive value, padded by ``pad`` decades."""
    lv = A.log10(values)
    lv = lv[np.isfinite(lv)]
    return 10 ** (lv.min() - pad), 10 ** (lv.max() + pad)


def init_step_setting(rec, tau0: float, lr: float, *, chosen=None, ylims=None):
    """One frame of :func:`init_step_demo`: GN at initial scale ``tau0`` and step ``lr`` (their
    units) along training, from every seed of an ``arbel_init`` record ``rec`` (or a dict of its
    arrays by name). Left: the test loss
    of each seed (thin) and its geometric mean (bold), Test-LRfit's geometric mean with its 95%
    interval (dashed), RF's test loss (grey, with its interval). Right: the weighted cosine distance
    to the teacher (Eq. 9) of each seed and its geometric mean. A diverged seed is drawn dotted.
    ``ylims``: ``{"loss": (lo, hi), "wcd": (lo, hi)}`` shared by the frames; ``chosen``: GN's step
    chosen on validation at this ``tau0``, named in the text. Returns a
    :class:`~itlin.book.widgets.View` with the final values as its text."""
    from ..widgets import View

    lrs, taus = np.asarray(rec["gn/lr"], float), np.asarray(rec["tau0"], float)
    i, g = A.at(lrs, lr), A.at(taus, tau0)
    x = np.asarray(rec["gn/ends"]) + 1
    tr = {k: np.asarray(rec[f"gn/{k}"], np.float64)[i, g] for k in ("test", "lrfit", "wcd")}  # (S, T)
    div = np.asarray(rec["gn/diverged"], bool)[i, g]
    rf = log_band(np.asarray(rec["rf_test"], np.float64)[g][None])
    c = COLOURS["gn"]
    light = tuple(1 - 0.3 * (1 - ch) for ch in plt.matplotlib.colors.to_rgb(c))  # opaque: frames stay small PNGs
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 4.2))
    for a, key in ((ax, "test"), (bx, "wcd")):
        for which, ls in ((~div, "-"), (div, ":")):  # every seed a thin line (one artist per style)
            if which.any():
                seg = [np.column_stack([x, row]) for row in tr[key][which]]
                a.add_collection(LineCollection(seg, colors=[light], linewidths=0.6, linestyles=ls,
                                                label="one seed" if key == "test" and ls == "-" else None))
        a.plot(x, log_band(tr[key], axis=0)[0], color=c, lw=2.2,
               label="GN, geometric mean over seeds" if key == "test" else None)
    lf = log_band(tr["lrfit"], axis=0)
    ax.plot(x, lf[0], color="#67001f", lw=1.8, ls="--", label="GN Test-LRfit (features alone)")
    ax.fill_between(x, lf[1], lf[2], color="#67001f", alpha=0.15, lw=0)
    ax.axhspan(rf[1][0], rf[2][0], color=COLOURS["rf"], alpha=0.2, lw=0)
    ax.axhline(rf[0][0], color=COLOURS["rf"], lw=1.3, ls="-.", label="RF test loss (initial features)")
    _loglog(ax, "test loss")
    bx.set_xscale("log")
    plain = plt.FuncFormatter(lambda v, _: f"{v:g}")  # 0.01 rather than 10^-2: no mathtext to lay out per frame
    for axis in (ax.xaxis, ax.yaxis, bx.xaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plt.NullFormatter())
    bx.set_title("alignment with the teacher: WCD (Eq. 9)", fontsize=10.5)
    for a, key in ((ax, "loss"), (bx, "wcd")):
        a.set_xlabel("GN steps + 1")
        if ylims is not None:
            a.set_ylim(*ylims[key])
    bx.set_ylabel("WCD (0: aligned)")
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)

    n, conv = tr["test"].shape[0], int(np.asarray(rec["gn/converged"], bool)[i, g].sum())
    fin = lambda key: A.geo(tr[key][:, -1])
    text = (f"τ0 = {A.fmt_lr(tau0)}, GN step λ = {A.fmt_lr(lr)} (their units"
            + (f"; at this τ0 the step chosen on validation is λ = {A.fmt_lr(chosen)}" if chosen is not None else "")
            + f"). At the end, geometric mean over {n} seeds: test loss {fin('test')}, "
            f"Test-LRfit {fin('lrfit')}, RF {A.geo(np.asarray(rec['rf_test'], np.float64)[g])}; WCD {fin('wcd')} "
            f"(at initialisation {A.geo(tr['wcd'][:, 0])}). {conv} of {n} seeds reached the stopping loss"
            + (f"; {int(div.sum())} diverged." if div.any() else "."))
    return View(fig, text=text)


def init_step_demo(rec):
    """The chapter's demo: knobs ``tau0`` (the initial scale) and ``lr`` (GN's step size, their
    units), over the grid of an ``arbel_init`` record ``rec``; each frame is
    :func:`init_step_setting` on that record's seeds, with the axes shared between frames."""
    from ..experiments.arbel import arbel_init as EI
    from ..widgets import Demo, Knob

    taus = [float(t) for t in np.asarray(rec["tau0"], float)]
    lrs = [float(v) for v in np.asarray(rec["gn/lr"], float)]
    tests = [np.asarray(rec[f"gn/{k}"], np.float64) for k in ("test", "lrfit")] + [np.asarray(rec["rf_test"])]
    wcd = np.asarray(rec["gn/wcd"], np.float64)
    ylims = {"loss": _limits(np.concatenate([t.ravel() for t in tests])),
             "wcd": (0.0, 1.05 * float(np.nanmax(np.where(np.isfinite(wcd), wcd, np.nan))))}
    best = EI.arrays(rec)["best"]["gn"]  # per tau0, the step chosen on validation
    # the arrays a frame reads, read from the record once
    keys = ("tau0", "rf_test", *(f"gn/{k}" for k in ("lr", "ends", "test", "lrfit", "wcd", "diverged", "converged")))
    rec = {k: np.asarray(rec[k]) for k in keys}


    def compute(tau0, lr):
        return init_step_setting(rec, tau0, lr, chosen=lrs[best[A.at(taus, tau0)]], ylims=ylims)

    return Demo([Knob("tau0", taus, default=taus[0], label="initial scale τ0", labels=[A.fmt_lr(t) for t in taus]),
                 Knob("lr", lrs, default=lrs[len(lrs) // 2], label="GN step λ", labels=[A.fmt_lr(v) for v in lrs])],
                compute, title="GN from each initial scale and step size: test loss and alignment with the teacher")


__all__ = ["COLOURS", "METRIC_LABELS", "damping", "init_final", "init_sigma", "init_step_demo", "init_step_setting",
           "log_band", "samples", "steps_final", "steps_trajectories", "width"]
