"""Figures on the quintic regression of the main paper (Goldwaser & Ge): Fig. 9, damped
Gauss-Newton against its damping (:func:`fig9`, with the learned functions, the training, a
comparison of implementations, and the demo with a slider for the damping, :func:`fig9_demo`),
and the iterative-linearisation demo on the same task (one setting, :func:`quintic_setting`; the
demo with sliders for ``K`` and the learning rate, :func:`quintic_demo`).

:mod:`itlin.book.figures.main` re-exports every name here, so chapters reach them as
``figures.fig9`` after ``from itlin.book.figures import main as figures``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from ..plotting import COLUMN_WIDTH


# --- Fig 9: damped Gauss-Newton on the quintic
def _fig9_colours(lams):
    """One colour per damping (viridis on a log scale), the same in every Fig. 9 panel."""
    lams = np.asarray(lams, float)
    norm = plt.matplotlib.colors.LogNorm(lams.min(), lams.max() if lams.max() > lams.min() else lams.min() * 10)
    cmap = plt.get_cmap("viridis")
    return {float(v): cmap(norm(v)) for v in lams}, norm, cmap


def fig9(rec, title: str = "Test RMSE of damped Gauss-Newton on the quintic"):
    """Main paper Fig. 9 (top): the test RMSE of every kept run against the damping (spread
    sideways), the mean (diamonds), the 25th-75th percentile (grey bars) and, in red above each
    column, how many runs the paper's rule dropped; log axes."""
    from matplotlib.lines import Line2D

    from ..experiments.main import fig9_damping as f9

    lams, kept = np.asarray(rec["dampings"], float), f9.masks(rec)[0]
    colour = _fig9_colours(lams)[0]
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 4.4))
    for d, lam in enumerate(lams):
        te = np.asarray(rec["test_rmse"][d], float)[kept[d]]
        ax.scatter(lam * 10 ** rng.uniform(-0.13, 0.13, te.size), te, s=14, color=colour[float(lam)], alpha=0.65,
                   linewidths=0, zorder=2)
        if te.size:
            ax.plot([lam, lam], np.quantile(te, [0.25, 0.75]), color="0.45", lw=6, alpha=0.35, solid_capstyle="butt")
            ax.plot(lam, te.mean(), "D", color="k", ms=5, zorder=3)
        if (~kept[d]).sum():
            ax.annotate(f"{(~kept[d]).sum()}", (lam, 1.0), xycoords=("data", "axes fraction"), ha="center",
                        va="bottom", fontsize=9.5, color="firebrick")
    ax.set(xscale="log", yscale="log", xlabel=r"damping $\lambda$", ylabel="test RMSE")
    ax.set_title(title, loc="left", pad=14)
    ax.legend(handles=[Line2D([], [], marker="o", ls="", color="0.5", alpha=0.65, label="one run"),
                       Line2D([], [], marker="D", ls="", color="k", ms=5, label="mean"),
                       Line2D([], [], color="0.45", lw=6, alpha=0.35, label="25th-75th percentile"),
                       Line2D([], [], ls="", marker="$n$", ms=7, color="firebrick", label="runs dropped: over train RMSE or diverged (top)")],
              frameon=False, fontsize=9.5, loc="upper right", bbox_to_anchor=(1, 0.94))
    fig.tight_layout()
    return fig


def fig9_functions(rec, every: bool = False, dampings=None):
    """Main paper Fig. 9 (bottom): the learnt functions of the first initialisations (the same
    networks in every panel) for four ``dampings`` (default: the smallest, the largest and two
    spread between; ``every``: every damping, smaller), with the quintic (black) and the training
    points; a dropped run is dashed."""
    from ..experiments.main import fig9_damping as f9

    lams, kept = np.asarray(rec["dampings"], float), f9.masks(rec)[0]
    colour = _fig9_colours(lams)[0]
    xg, yg = rec["x_test"], rec["y_test"]
    lo, hi = yg.min() - 1.5, yg.max() + 1.5
    spread = sorted({round(j * (len(lams) - 1) / 3) for j in range(4)})
    idx = list(range(len(lams))) if every else spread if dampings is None else \
        [int(np.argmin(np.abs(np.log(lams) - np.log(v)))) for v in dampings]
    ncol = 3 if every else min(len(idx), 2)
    nrow = -(-len(idx) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(COLUMN_WIDTH, (2.1 if every else 3.0) * nrow), sharex=True,
                             sharey=True, squeeze=False)
    for ax in axes.flat[len(idx):]:
        ax.axis("off")
    for ax, d in zip(axes.flat, idx):
        for s, fs in enumerate(rec["functions"][d]):
            ax.plot(xg, np.clip(fs, lo - 1, hi + 1), color=colour[float(lams[d])], lw=0.8 if every else 1.1,
                    alpha=0.8, ls="-" if kept[d, s] else "--")
        ax.plot(xg, yg, color="k", lw=1.2, zorder=3)
        ax.plot(rec["x_train"], rec["y_train"], "o", color="k", ms=3, zorder=4)
        ax.set_ylim(lo, hi)
        ax.set_title(rf"$\lambda$ = {f9.fmt_lam(lams[d])}", fontsize=9.5 if every else 11)
    plt.setp(axes[-1], xlabel="x")
    plt.setp(axes[:, 0], ylabel="f(x)")
    fig.tight_layout()
    return fig


def fig9_training(rec):
    """Top: every run's final train RMSE against the damping, by how it ended (reached the
    tolerance, stalled, still descending, diverged), the median, the dropping threshold and
    ``train_tol``. Bottom: the median train RMSE over the Gauss-Newton steps, one line per damping."""
    from ..experiments.main import fig9_damping as f9

    r, lams = f9.resolved(rec), np.asarray(rec["dampings"], float)
    colour, norm, cmap = _fig9_colours(lams)
    div = f9.diverged(rec)
    outcome = {"reached train_tol": (rec["reached_tol"], "tab:green", "o"),
               "stalled": (~rec["reached_tol"] & ~rec["still_descending"] & ~div, "0.45", "o"),
               "still descending": (rec["still_descending"], "tab:orange", "o"), "diverged": (div, "firebrick", "x")}
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 8.4))
    rng, floor = np.random.default_rng(1), max(r["train_tol"] / 10, 1e-9)
    for name, (mask, col, marker) in outcome.items():
        dd, ss = np.nonzero(mask)
        if dd.size:
            ax.scatter(lams[dd] * 10 ** rng.uniform(-0.13, 0.13, dd.size), np.maximum(rec["train_rmse"][dd, ss], floor),
                       s=14, color=col, marker=marker, alpha=0.7, linewidths=1 if marker == "x" else 0,
                       label=f"{name} ({dd.size})")
    ax.plot(lams, np.nanmedian(rec["train_rmse"], axis=1), "D-", color="k", ms=4, lw=1, label="median")
    ax.axhline(r["rmse_threshold"], color="firebrick", lw=0.8, ls=":")
    ax.text(lams[0], r["rmse_threshold"] * 1.15, "dropping threshold", fontsize=9.5, color="firebrick")
    if r["train_tol"] > 0:
        ax.axhline(r["train_tol"], color="tab:green", lw=0.8, ls=":")
    ax.set(xscale="log", yscale="log", xlabel=r"damping $\lambda$", ylabel="final train RMSE")
    ax.legend(frameon=False, fontsize=9.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    traces = np.array(rec["train_rmse_trace"], dtype=float)  # a run stopped at train_tol keeps its final value
    done = rec["reached_tol"][:, :, None] & (rec["trace_steps"][None, None, :] >= rec["steps"][:, :, None])
    traces[done] = np.broadcast_to(np.asarray(rec["train_rmse"], float)[:, :, None], traces.shape)[done]
    for d, lam in enumerate(lams):
        with np.errstate(all="ignore"):
            bx.plot(rec["trace_steps"] + 1, np.nanmedian(traces[d], axis=0), color=colour[float(lam)], lw=1.6)
    bx.set(xscale="log", yscale="log", xlabel="Gauss-Newton steps + 1", ylabel="train RMSE",
           title="median over the runs")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=bx, label=r"damping $\lambda$", pad=0.02)
    fig.tight_layout()
    return fig


def fig9_compare(records, labels):
    """The mean test RMSE of the kept runs against the damping for several records (a band from
    the 25th to the 75th percentile), one line each."""
    from ..experiments.main import fig9_damping as f9

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 4.0))
    for (rec, label), style in zip(zip(records, labels), ("o-", "s-", "^-", "v-")):
        keep = f9.masks(rec)[0]
        te = [np.asarray(rec["test_rmse"][d], float)[keep[d]] for d in range(len(rec["dampings"]))]
        q = np.array([np.quantile(t, [0.25, 0.75]) if t.size else [np.nan] * 2 for t in te])
        line, = ax.plot(rec["dampings"], [t.mean() if t.size else np.nan for t in te], style, ms=4, lw=1.2,
                        label=f"mean, {label}")
        ax.fill_between(rec["dampings"], q[:, 0], q[:, 1], color=line.get_color(), alpha=0.15)
    ax.set(xscale="log", yscale="log", xlabel=r"damping $\lambda$", ylabel="test RMSE (kept runs)")
    ax.set_title("Mean test RMSE of the kept runs (band: 25th to 75th percentile)", loc="left")
    ax.legend(frameon=False, fontsize=9.5)
    fig.tight_layout()
    return fig


#: the columns of :func:`fig9_demo`'s table (of the chapter's summary, ``fig9_damping.summary``)
FIG9_DEMO_COLUMNS = ("λ", "kept / dropped: over train RMSE / diverged", "mean [95% CI]", "median [95% CI]", "best tenth", "worst kept",
                     "reached tol / stalled / descending")


def fig9_demo(rec):
    """Fig. 9 as a demo (:class:`~itlin.book.widgets.Demo`), one knob: the damping, over the
    record's dampings; drawn from the record alone (nothing is trained).

    Each frame shows, top, the learnt functions of the record's sampled initialisations (the first
    ``samples`` seeds, the same networks in every frame, one colour each; a dropped run dashed) at
    that damping, with the band from their lowest to their highest value among the kept ones, the
    quintic and the training points; bottom, the test RMSE of every run against the damping: the
    mean of the kept runs, a band over their 25th-75th percentile and a lighter one from the lowest
    to the highest, with the chosen damping's runs as dots (the sampled ones in their colours).
    A table gives the chapter's summary row of that damping (:data:`FIG9_DEMO_COLUMNS`)."""
    import warnings

    from ..experiments.main import fig9_damping as f9
    from ..labels import fmt_lam
    from ..widgets import Demo, Knob, View

    lams = np.asarray(rec["dampings"], float)
    kept = f9.masks(rec)[0]
    test = np.asarray(rec["test_rmse"], float)
    cols = f9.columns(rec)
    funcs = np.asarray(rec["functions"], float)
    xg, yg = np.asarray(rec["x_test"], float), np.asarray(rec["y_test"], float)
    lo, hi = yg.min() - 1.5, yg.max() + 1.5
    n_samples, n_seeds = funcs.shape[1], test.shape[1]
    seed_colours = plt.get_cmap("tab10" if n_samples <= 10 else "turbo")(np.linspace(0, 1, n_samples)
                                                                         if n_samples > 10 else np.arange(n_samples))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a damping whose runs were all dropped
        mean = np.nanmean(cols, axis=1)
        q25, q75 = np.nanquantile(cols, [0.25, 0.75], axis=1)
        low, high = np.nanmin(cols, axis=1), np.nanmax(cols, axis=1)
    rows = {row["λ"]: {k: row[k] for k in FIG9_DEMO_COLUMNS} for row in f9.summary(rec)}
    rng = np.random.default_rng(0)
    jitter = 10 ** rng.uniform(-0.12, 0.12, n_seeds)
    shown = test[kept & (test > 0)]  # the kept runs set the axis; a dropped run above it sits on its edge
    ylim = (10 ** np.floor(np.log10(shown.min())), 10 ** np.ceil(np.log10(shown.max()))) if shown.size else (0.1, 10)
    right = {"frameon": False, "fontsize": 9.5, "loc": "center left", "bbox_to_anchor": (1.01, 0.5)}

    def compute(damping):
        d = int(np.argmin(np.abs(np.log(lams) - np.log(float(damping)))))
        fig, (ax, bx) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 8.0), layout="constrained")
        f = np.clip(funcs[d], lo - 1, hi + 1)
        ks = kept[d, :n_samples]
        ax.plot(xg, yg, color="k", lw=1.4, label="the quintic", zorder=3)
        ax.plot(rec["x_train"], rec["y_train"], "o", color="k", ms=3.5, zorder=4, label="training points")
        for s in range(n_samples):
            ax.plot(xg, f[s], color=seed_colours[s], lw=1.1, alpha=0.9, ls="-" if ks[s] else "--")
        ax.plot([], [], color="0.4", lw=1.1, label=f"the first {n_samples}\ninitialisations\n(dashed: dropped)")
        if ks.any():
            with np.errstate(all="ignore"):
                ax.fill_between(xg, np.nanmin(f[ks], axis=0), np.nanmax(f[ks], axis=0), color="0.5", alpha=0.2, lw=0,
                                label=f"band of the kept\nones ({int(ks.sum())} of {n_samples})")
        ax.set(ylim=(lo, hi), xlim=(xg[0], xg[-1]), xlabel="x", ylabel="f(x)")
        ax.set_title(rf"learnt functions at $\lambda$ = {fmt_lam(lams[d])}", fontsize=11)
        ax.legend(**right)
        bx.plot(lams, mean, "D-", color="k", ms=4.5, lw=1.2, label="mean of the\nkept runs")
        bx.fill_between(lams, q25, q75, color="0.35", alpha=0.3, lw=0, label="25th-75th\npercentile")
        bx.fill_between(lams, low, high, color="0.5", alpha=0.13, lw=0, label="lowest to\nhighest kept")
        others = kept[d].copy()
        others[:n_samples] = False
        bx.scatter(lams[d] * jitter[others], test[d, others], s=10, color="0.45", alpha=0.6, lw=0, zorder=3,
                   label="this damping's\nkept runs")
        for s in range(n_samples):
            if np.isfinite(test[d, s]):
                bx.plot(lams[d] * jitter[s], np.clip(test[d, s], *ylim), "o", ms=6, zorder=4, mec=seed_colours[s],
                        mfc=seed_colours[s] if kept[d, s] else "white", mew=1.4, clip_on=False)
        bx.plot([], [], "o", ms=6, mec="0.3", mfc="white", mew=1.4, label="the runs above\n(hollow: dropped)")
        bx.axvline(lams[d], color="0.2", lw=1.0, ls=":")
        bx.set(xscale="log", yscale="log", ylim=ylim, xlim=(lams.min() / 10 ** 0.3, lams.max() * 10 ** 0.3),
               xlabel=r"damping $\lambda$", ylabel="test RMSE")
        bx.set_title(f"test RMSE of all {n_seeds} initialisations against the damping", fontsize=11)
        bx.legend(**right)
        return View(fig, table=[rows[fmt_lam(lams[d])]])

    default = lams[len(lams) // 2]
    return Demo(Knob("damping", [float(v) for v in lams], default=float(default), label="damping λ",
                     labels=[fmt_lam(v) for v in lams]),
                compute, title="Damped Gauss-Newton on the quintic: the learnt functions and the test RMSE by damping")


# the quintic demo: colours, the figure of one setting, the static frames and the live demo
_NET, _LIN, _TRUTH, _RELIN = "#1f5fa8", "#e07b00", "0.15", "#7a3fa0"
#: the live demo's slider values (finer than the static grid: it trains on demand)
LIVE_KS = [1, 3, 10, 30, 100, 300, 1000, 3000, math.inf]
LIVE_LEARNING_RATES = [0.0005, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03]


def quintic_caption(run) -> str:
    """One line for a setting of the quintic demo: K, learning rate, feature updates, final RMSEs, status."""
    from ..labels import fmt_value

    parts = [f"K = {fmt_value(run.K)}", f"learning rate {run.lr:g}",
             f"{run.feature_updates:,} feature updates in {run.steps:,} steps"]
    tr, tr_lin, te = run.final("train/rmse"), run.final("train/rmse_lin"), run.final("test/rmse")
    if run.diverged:
        parts.append(f"{run.status} (curves stop there)")
    if math.isfinite(tr):
        parts.append(f"train RMSE {tr:.3f} (linearised model {tr_lin:.3f}), test RMSE {te:.3f}")
    return " · ".join(parts)


def quintic_loss_limits(runs) -> tuple:
    """Shared y-limits for the loss panels of several settings (so frames do not jump)."""
    vals = [v[np.isfinite(v) & (v > 0)] for r in runs for v in
            (r.history.eval_array("train/loss"), r.history.eval_array("train/loss_lin"))]
    v = np.concatenate(vals) if vals else np.zeros(0)
    lo, hi = (float(np.min(v)), float(np.max(v))) if v.size else (1e-3, 1.0)
    lo = max(lo, hi * 1e-4)  # a run that reaches zero loss leaves through the bottom
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + 0.3)


def quintic_setting(run, fig=None, *, loss_ylim=None, title: bool = True):
    """One setting of the quintic demo. Top: the true quintic, the training points, the network at
    initialisation, the trained network and the linearised model it was training at the end.
    Bottom: the training loss (``0.5 mean squared error``) of the network and of the linearised
    model over steps (log scale), relinearisations marked along the top (a note when there are
    more than 60). A diverged run stops at its last finite evaluation."""
    from ..labels import fmt_value
    from ..plotting import plot_history

    if fig is None:  # the column's width, panels stacked: legible on the page and on a phone
        fig = plt.figure(figsize=(COLUMN_WIDTH, 7.2), layout="constrained")
    ax_f, ax_l = fig.subplots(2, 1)
    ax_f.plot(run.x_grid, run.y_grid, color=_TRUTH, lw=1.2, label="true quintic")
    ax_f.plot(run.x_grid, run.f_init, color="0.6", lw=1.0, ls=":", label="network at initialisation")
    ax_f.plot(run.x_grid, run.f_lin, color=_LIN, lw=2.0, ls="--", label="linearised model at the last anchor")
    ax_f.plot(run.x_grid, run.f_net, color=_NET, lw=1.8, label="network $f_{\\theta_T}$")
    ax_f.plot(run.x_train, run.y_train, "o", ms=4.5, mfc="white", mec=_TRUTH, mew=1.3, label="training points",
              zorder=5)
    ax_f.set_ylim(-4.5, 2.5)
    if run.diverged and (~np.isfinite(run.f_net) | (np.abs(run.f_net) > 1e3)).any():
        ax_f.text(0.03, 0.97, f"{run.status}:\nthe network's outputs\nare no longer finite", transform=ax_f.transAxes,
                  ha="left", va="top", fontsize=10, color="#b00020")
    ax_f.set(xlim=(run.x_grid[0], run.x_grid[-1]), xlabel="input $x$", ylabel="output")
    ax_f.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9.5, frameon=False)
    ax_f.set_title("fitted function after training", fontsize=11)
    h = run.history
    plot_history(ax_l, h, "train/loss", label="network $f_{\\theta_t}$", color=_NET, lw=1.8)
    plot_history(ax_l, h, "train/loss_lin", label="linearised model $f^{\\mathrm{lin}}_{s,t}$", color=_LIN, lw=1.6,
                 linestyle="--" if not run.diverged else ":")
    ax_l.set_yscale("log")
    if loss_ylim is not None:
        ax_l.set_ylim(*loss_ylim)
    ax_l.set(xlim=(0, run.steps), xlabel="step $t$", ylabel="training loss  $\\frac{1}{2}\\,$mean$(f-y)^2$")
    relin = np.asarray(h.relin_steps)
    if 0 < relin.size <= 60:
        ax_l.plot(relin, np.ones_like(relin, dtype=float), transform=ax_l.get_xaxis_transform(), marker="|",
                  ls="none", ms=9, mew=1.4, color=_RELIN, clip_on=False, label="feature update (relinearisation)")
    else:
        every = "after every step" if run.K == 1 else f"every {fmt_value(run.K)} steps"
        note = f"features updated {every} ({relin.size:,} times)" if relin.size else \
            ("no feature update (K = ∞)" if math.isinf(run.K) else "no feature update yet")
        ax_l.text(0.99, 0.97, note, transform=ax_l.transAxes, ha="right", va="top", fontsize=10, color=_RELIN)
    ax_l.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9.5, frameon=False)
    ax_l.set_title("training loss: network vs its linearisation", fontsize=11)
    if title:
        fig.suptitle(f"K = {fmt_value(run.K)},  learning rate {run.lr:g}:  {run.feature_updates:,} feature updates"
                     + (f"  ({run.status})" if run.diverged else ""), fontsize=11)
    return fig


def quintic_demo(record, *, live_steps: int = 5000, seed: int = 0):
    """The iterative-linearisation demo on the quintic, declared once (:class:`~itlin.book.widgets.Demo`):
    knobs ``K`` and ``lr``; each setting drawn by :func:`quintic_setting`. The built book shows the
    settings of a ``quintic_demo`` ``record`` (its runs, drawn with shared loss axes); in Jupyter
    the sliders also offer :data:`LIVE_KS` and :data:`LIVE_LEARNING_RATES`, and a setting the record
    lacks is trained on release for ``live_steps`` full-batch steps (seed ``seed``)."""
    from ..experiments.main import quintic_demo as Q
    from ..labels import fmt_value
    from ..widgets import Demo, Knob, View

    runs = Q.runs_of(record)
    Ks, lrs = Q.grid(record)
    ylim = quintic_loss_limits(runs.values())
    start_K = 100 if 100 in Ks else Ks[len(Ks) // 2]
    live_Ks = sorted(set(Ks) | set(LIVE_KS))
    live_lrs = sorted(set(lrs) | set(LIVE_LEARNING_RATES))

    def compute(K, lr):
        run = runs.get((K, lr))
        if run is None:
            run = Q.train_setting(K, lr, live_steps, seed=seed, evals=100)
        return View(quintic_setting(run, loss_ylim=ylim), text=quintic_caption(run))

    return Demo([Knob("K", Ks, default=start_K, labels=[fmt_value(k) for k in Ks], live=live_Ks),
                 Knob("lr", lrs, default=lrs[len(lrs) // 2], label="learning rate", live=live_lrs)],
                compute, title="Iterative linearisation of the 5x50 ReLU MLP on the quintic")


__all__ = ["FIG9_DEMO_COLUMNS", "LIVE_KS", "LIVE_LEARNING_RATES", "fig9", "fig9_compare", "fig9_demo", "fig9_functions",
           "fig9_training", "quintic_caption", "quintic_demo", "quintic_loss_limits", "quintic_setting"]
