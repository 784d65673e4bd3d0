"""Figures of the main paper's experiments (Goldwaser & Ge): one function per figure.

Curves are the mean over seeds with a band from the lowest to the highest seed; legends count
each run's feature updates; ticks along the bottom of an axis mark a run's relinearisations.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from ..experiments.main import _rows as R
from ..experiments.main import feature_learning as _fl
from ..experiments.main import fig2_k_sweep as _fig2
from ..experiments.main import fig4_resnet as _fig4
from ..experiments.main import fig5_data_scaling as _fig5
from ..experiments.main import fig8_adam as _fig8
from ..labels import K_label, legend_label
from ..plotting import COLUMN_WIDTH, colours, relin_marks, seed_band, shared_legend, update_axis
from ..verdicts import seed_interval


def fig2(rec):
    """Main paper Fig. 2: full batch and mini-batch (top), and the two overlaid on the
    full-batch step axis (mini-batch steps / rescale; bottom), test accuracy of the model being
    trained."""
    rows = _fig2.rows(rec)
    f = int(rec.meta["resolved"]["rescale"])
    mult = rec.meta["resolved"]["inf_lr_multiplier"]
    fig = plt.figure(figsize=(COLUMN_WIDTH, 7.4))
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])]
    axes[1].sharey(axes[0])
    col = colours(r["K"] for r in rows if r["sweep"] == "full" and not r["control"])
    hist = lambda g: [rec.history(r["tag"]) for r in g]
    settings = _fig2.settings_of(rows)
    for ax, sweep, title in ((axes[0], "full", "full batch"), (axes[1], "mini", "mini-batch")):
        for sw, K, control in settings:
            if sw != sweep:
                continue
            g = R.select(rows, sweep=sw, K=K, control=control)
            K_fb = K if (sweep == "full" or K == 1) else K / f
            colour = "0.25" if control else col.get(K_fb)
            extra = f", lr x{mult:g}" if control else ""
            seed_band(ax, hist(g), "test/accuracy_lin", color=colour, linestyle=":" if control else "-",
                      label=legend_label(K, R.updates(g), extra), lw=1.6)
            relin_marks(ax, hist(g)[0], color=colour)
        g0 = R.select(rows, sweep=sweep)
        if g0:
            ax.set_title(f"{title} (learning rate {g0[0]['learning_rate']:g})")
        ax.set_xlabel("step")
        ax.legend(loc="lower right")
    ax = axes[2]
    for sw, K, control in settings:
        if control:
            continue
        g = R.select(rows, sweep=sw, K=K, control=False)
        K_fb = K if (sw == "full" or K == 1) else K / f
        scale = 1.0 if sw == "full" else float(f)
        label = None
        if sw == "full":
            K_mb = K_fb if K_fb == 1 else K_fb * f
            mb = R.select(rows, sweep="mini", K=K_mb, control=False)
            label = f"{K_label(K_fb)} full" + (
                f" / {K_label(K_mb)} mini: {R.updates(g):,} / {R.updates(mb):,} feature updates" if mb else
                f": {R.updates(g):,} feature updates")
        scaled = [type(h).from_arrays({**h.arrays(), "eval/step": h.eval_array("step") / scale}, h.meta())
                  for h in hist(g)]
        seed_band(ax, scaled, "test/accuracy_lin", color=col.get(K_fb), lw=1.4 if sw == "full" else 2.6,
                  alpha=0.12, label=label)
    ax.plot([], [], color="0.3", lw=1.4, label="thin: full batch")
    ax.plot([], [], color="0.3", lw=2.6, label=f"wide: mini-batch, steps / {f}")
    ax.set_title("full vs mini-batch, aligned")
    ax.set_xlabel(f"full-batch step = mini-batch step / {f}")
    ax.legend(loc="lower right")
    axes[0].set_ylabel("test accuracy (model being trained)")
    axes[2].set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


# --- Figs 3 and 8 (main paper Fig. 3: augmentation; Fig. 8: Adam-solved linearisations)


def fig3(rec):
    """Main paper Fig. 3. Left: test accuracy, right: train accuracy (un-augmented examples): K=1
    (the network, black) and for every other K the model being trained (solid) and the network
    at its weights (dashed). The top axis counts the largest finite K's feature updates."""
    rows = R.rows_of(rec)
    Ks = sorted({r["K"] for r in rows})
    col = colours(Ks)
    finite = [K for K in Ks if math.isfinite(K) and K != 1.0]
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.9))
    for ax, split in zip(axes, ("test", "train")):
        for K in Ks:
            g = R.select(rows, K=K)
            hs = [rec.history(r["tag"]) for r in g]
            if K == 1.0:
                seed_band(ax, hs, f"{split}/accuracy", color="black",
                          label=legend_label(1, R.updates(g), f" network, {len(hs)} seeds"))
                continue
            seed_band(ax, hs, f"{split}/accuracy_lin", color=col[K], label=legend_label(K, R.updates(g),
                                                                                          " trained model"))
            if math.isfinite(K):
                seed_band(ax, hs, f"{split}/accuracy", color=col[K], lw=1.1, linestyle="--", alpha=0.0,
                          label=f"{K_label(K)} network")
                relin_marks(ax, hs[0], color=col[K])
        if finite:
            relin = rec.history(R.select(rows, K=finite[-1])[0]["tag"]).relin_steps
            update_axis(ax, relin, label=f"feature updates, {K_label(finite[-1])}", max_ticks=6)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{split} accuracy" + (" (un-augmented)" if split == "train" else ""))
    shared_legend(fig, axes[0])
    return fig


def fig8(rec):
    """Main paper Fig. 8. Test (left) and train (right) accuracy of K=1 SGD, K=1 Adam, and of the
    Adam-solved run's linearised model (solid) and network (dashed), each the mean over the seeds
    that completed with a band from the lowest to the highest; the legend counts diverged runs and
    a cross marks the step where each stopped. Dotted verticals and the top axis mark the
    Adam-solved run's feature updates."""
    rows = _fig8.rows(rec)
    solved = _fig8.solved_tag(rec.meta["resolved"]["K"])

    def runs(t):
        g = R.select(rows, setting=t)
        done = [r for r in g if r["status"] == "completed"]
        return g, done, [rec.history(r["tag"]) for r in done]

    def label(t, text):
        g, done, _ = runs(t)
        return text + (f"; {len(g) - len(done)} of {len(g)} diverged" if len(done) < len(g) else "")

    def crosses(ax, t, color):
        for r in runs(t)[0]:
            if r["status"] != "completed" and r.get("diverged_at"):
                ax.plot([r["diverged_at"]], [0.02], marker="x", ms=7, mew=1.8, color=color, linestyle="none",
                        transform=ax.get_xaxis_transform(), clip_on=False)

    updates = lambda t: R.updates(runs(t)[1] or runs(t)[0])
    K = rec.meta["resolved"]["K"]
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.9), sharey=True)
    for ax, split in zip(axes, ("test", "train")):
        for t, name, color in (("SGD K=1", "SGD", "black"), ("Adam K=1", "Adam", "tab:blue")):
            seed_band(ax, runs(t)[2], f"{split}/accuracy", color=color, label=label(t, f"{name} {legend_label(1, updates(t))}"))
            crosses(ax, t, color)
        seed_band(ax, runs(solved)[2], f"{split}/accuracy_lin", color="tab:red",
                  label=label(solved, f"Adam solved, linearised ({legend_label(K, updates(solved))})"))
        seed_band(ax, runs(solved)[2], f"{split}/accuracy", color="tab:red", lw=1.1, linestyle="--", alpha=0.0,
                  label="Adam solved, network")
        crosses(ax, solved, "tab:red")
        done = runs(solved)[2]
        relin = done[0].relin_steps if done else []
        for s in relin:
            ax.axvline(s, color="tab:red", lw=0.6, linestyle=":", alpha=0.6)
        update_axis(ax, relin, label="feature updates, Adam-solved", max_ticks=6)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{split} accuracy")
    shared_legend(fig, axes[0])
    return fig


# --- Figs 4-7 (main paper Figs. 4-7: ResNet-18 and batch norm, data scaling, probes, filters, the kernel)


def fig4(rec):
    """Main paper Fig. 4: test accuracy against steps, one panel per configuration (no batch norm,
    then each batch-norm mode): ``K = 1`` (the network, black) and each larger K (the model being
    trained), mean over the seeds that completed with a band from the lowest to the highest; the
    legend counts diverged runs, and a cross marks the step where each diverged run stopped."""
    rows = _fig4.rows(rec)
    panels = [c for c in _fig4.configs_of(rows) if c != "BN"]
    nrow = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(nrow, 2, figsize=(COLUMN_WIDTH, 2.7 * nrow + 0.9), sharex=True, sharey=True,
                             squeeze=False)
    Ks = sorted({r["K"] for r in rows})
    col = colours(Ks)
    for ax, c in zip(axes.flat, panels):
        for K in Ks:
            g = R.select(rows, config="BN" if (c != _fig4.NO_BN and K == 1) else c, K=K)
            if not g:
                continue
            done = [r for r in g if not _fig4.diverged(r)]
            label = K_label(K) + (f", {len(g) - len(done)} of {len(g)} diverged" if len(done) < len(g) else "")
            metric = "test/accuracy" if K == 1 else "test/accuracy_lin"
            if seed_band(ax, [rec.history(r["tag"]) for r in done], metric, color=col[float(K)], label=label) is None:
                ax.plot([], [], color=col[float(K)], label=label)
            for r in g:
                if _fig4.diverged(r) and r["diverged_at"]:
                    ax.plot([r["diverged_at"]], [0.02], marker="x", ms=7, mew=1.8, color=col[float(K)],
                            linestyle="none", transform=ax.get_xaxis_transform(), clip_on=False)
        ax.set_title(_fig4.CONFIG_LABELS[c])
        ax.legend(loc="best", fontsize=9, frameon=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


def fig5(rec):
    """Main paper Fig. 5. Left: test accuracy (at the evaluation the record's metric chose)
    against training-set size on a log axis, one line per setting (mean over seeds, band from the
    lowest to the highest); right: each seed's slope per tenfold data (dots) and the mean with its
    95% seed interval, per setting."""
    rows = _fig5.rows(rec)
    r = rec.meta["resolved"]
    labels, sizes = _fig5.labels_of(rows), sorted({int(x["n"]) for x in rows})
    palette = colours([1, float(r["K"]), math.inf])
    style = dict(zip(labels, [(palette[1.0], "-", "o"), (palette[float(r["K"])], "-", "s"),
                              (palette[1.0], "--", "^"), (palette[math.inf], "--", "D")]))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.9), gridspec_kw={"width_ratios": [1.5, 1]})
    sl = _fig5.slopes(rows)
    seeds = sorted({int(x["seed"]) for x in rows})
    for i, label in enumerate(labels):
        c, ls, mk = style[label]
        ys = np.array([[next((x["test"] for x in rows if x["setting"] == label and int(x["n"]) == n
                              and int(x["seed"]) == s and x["status"] == "completed"), np.nan) for n in sizes]
                       for s in seeds])
        ax.plot(sizes, np.nanmean(ys, 0), color=c, linestyle=ls, marker=mk, label=label)
        if ys.shape[0] > 1:
            ax.fill_between(sizes, np.nanmin(ys, 0), np.nanmax(ys, 0), color=c, alpha=0.15, lw=0)
        vals = list(sl.get(label, {}).values())
        if vals:
            bx.plot(100 * np.asarray(vals), np.full(len(vals), i) + np.linspace(-0.12, 0.12, len(vals)),
                    linestyle="none", marker=mk, color=c, alpha=0.6)
            m, h = seed_interval(vals)
            bx.errorbar([100 * m], [i], xerr=[[100 * h]] if math.isfinite(h) else None, color=c, marker="|",
                        ms=14, mew=2.2, capsize=4, lw=2)
    ax.set_xscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("training examples")
    ax.set_ylabel("test accuracy (" + ("best on validation" if r["metric"] == "best" else "final") + ")")
    ax.legend(fontsize=9, frameon=False, loc="lower right")
    bx.set_yticks(range(len(labels)))
    bx.set_yticklabels([lab.replace(", ", "\n") for lab in labels])
    bx.invert_yaxis()
    bx.set_xlabel("slope (points per tenfold data)")
    fig.tight_layout()
    return fig


def _by_K(rows):
    return {K: [r for r in R.select(rows, K=K) if r["status"] == "completed"] for K in sorted({r["K"] for r in rows})}


def fig6(rec):
    """Main paper Fig. 6: linear-probe test accuracy on the first (left) and second (right)
    layer's features against steps, mean over seeds with a band from the lowest to the highest."""
    groups = _by_K(_fl.rows(rec))
    col = colours(groups)
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.6), sharey=True)
    for ax, layer in zip(axes, _fl.LAYERS):
        for K, g in groups.items():
            if g:
                x = g[0]["snap_step"]
                ys = np.stack([r[f"probe_{layer}"][:len(x)] for r in g])
                ax.plot(x, ys.mean(0), color=col[K], lw=1.8, label=legend_label(K, R.updates(g)))
                if len(g) > 1:
                    ax.fill_between(x, ys.min(0), ys.max(0), color=col[K], alpha=0.18, lw=0)
        ax.set_title(f"probe on {layer} features")
        ax.set_xlabel("step")
    axes[0].set_ylabel("probe test accuracy")
    shared_legend(fig, axes[0], ncol=3)
    return fig


def fig7(rec, seed=None, n_filters: int = 3):
    """Main paper Fig. 7: the first ``n_filters`` first-layer filters' change from initialisation
    at every snapshot, for K=1 and the large K (one seed), on one colour range shared by every
    panel. A 1-D filter is drawn as a column of taps per snapshot (time runs left to right); a
    2-D filter as an image (the mean over input channels) at eight snapshots."""
    rows = _fl.rows(rec)
    Kb = _fl.large_K(rows)
    a, b, _ = _fl.pairs(R.select(rows, K=1), R.select(rows, K=Kb))
    ra, rb = next((x, y) for x, y in zip(a, b) if seed is None or x["seed"] == seed)
    steps = ra["snap_step"]
    n = len(steps)
    cols = np.unique(np.linspace(0, n - 1, min(8, n)).round().astype(int))
    deltas = {lab: r["filters"] - r["filters"][:1] for lab, r in (("K=1", ra), (K_label(Kb), rb))}
    vmax = max(float(np.abs(d[:, :n_filters]).max()) for d in deltas.values()) or 1.0
    one_d = ra["filters"].ndim == 4  # (snapshots, filters, taps, in); 2-D: (snapshots, filters, h, w, in)
    fig, axes = plt.subplots(2 * n_filters, 1 if one_d else len(cols), figsize=(COLUMN_WIDTH, 1.5 * n_filters + 1.2),
                             squeeze=False)
    for i in range(n_filters):
        for j, (lab, d) in enumerate(deltas.items()):
            row = axes[2 * i + j]
            kw = dict(cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
            if one_d:
                img = d[:, i].reshape(n, -1).T  # taps x snapshots
                im = row[0].imshow(img, aspect="auto", extent=(0, steps[-1], img.shape[0] - 0.5, -0.5), **kw)
            else:
                for ax, t in zip(row, cols):
                    im = ax.imshow(d[t, i].mean(-1), **kw)
                    ax.set_xlabel(f"{steps[t]:,}" if 2 * i + j == 2 * n_filters - 1 else "", fontsize=9)
            for ax in row:
                ax.set_yticks([])
                ax.grid(False)
                if not one_d or 2 * i + j < 2 * n_filters - 1:
                    ax.set_xticks([]) if not one_d else ax.set_xticklabels([])
            row[0].set_ylabel(f"filter {i + 1}\n{lab}", rotation=0, ha="right", va="center", fontsize=9)
    if one_d:
        axes[-1, 0].set_xlabel("step")
    fig.tight_layout(rect=(0, 0, 0.84, 1))
    fig.colorbar(im, cax=fig.add_axes((0.86, 0.15, 0.02, 0.7))).set_label("change from initialisation", fontsize=9)
    return fig


def fig7_distances(rec):
    """Fig. 7 as numbers: left, the first-layer filters' distance from initialisation against steps
    for every K; right, the distance of K=1's filters at each snapshot to the large K's final
    filters (a thin line per seed with its closest point, their mean in black), the paper's 10%
    dotted."""
    rows = _fl.rows(rec)
    groups, Kb = _by_K(rows), _fl.large_K(rows)
    col = colours(groups)
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.4))
    for K, g in groups.items():
        if g:
            x = g[0]["snap_step"]
            ys = np.stack([np.linalg.norm((r["filters"] - r["filters"][:1]).reshape(len(x), -1), axis=1) for r in g])
            axes[0].plot(x, ys.mean(0), color=col[K], lw=1.8, label=legend_label(K, R.updates(g)))
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("||W(t) − W(0)||, first layer")
    a, b, _ = _fl.pairs(R.select(rows, K=1), R.select(rows, K=Kb))
    curves = []
    for i, (ra, rb) in enumerate(zip(a, b)):  # one thin line per seed, its closest point marked
        x = ra["snap_step"] / ra["snap_step"][-1]
        d = np.linalg.norm((ra["filters"] - rb["filters"][-1:]).reshape(len(x), -1), axis=1)
        curves.append((x, d))
        axes[1].plot(x, d, lw=0.8, color="0.6", alpha=0.7, label="each seed" if i == 0 else None)
        axes[1].plot(x[np.argmin(d)], d.min(), "o", ms=3, color="0.35", label="its closest point" if i == 0 else None)
    if len(curves) > 1 and all(np.array_equal(x, curves[0][0]) for x, _ in curves):
        axes[1].plot(curves[0][0], np.mean([d for _, d in curves], axis=0), lw=2.0, color="black",
                     label="mean over seeds")
    axes[1].axvline(_fl.PAPER_FRACTION, color="tab:red", ls=":", lw=1.4, label="paper: about 10%")
    axes[1].set_xlabel("fraction of K=1's run")
    axes[1].set_ylabel(f"distance to {K_label(Kb)}'s final")
    axes[1].legend(fontsize=9, frameon=False)
    shared_legend(fig, axes[0], ncol=3)
    return fig


def kernel_movement(rec):
    """The NTK's movement against feature updates, one point per seed and K: left, its relative
    change from initialisation (model being trained: filled; network at its final weights:
    open); middle, its rotation (1 − cosine); right, the centred kernel-target alignment of the
    model being trained, the value at initialisation dashed. K=inf (no update) sits at the left
    edge of the symlog axes; a grey line joins the means."""
    rows = _fl.rows(rec)
    groups = _by_K(rows)
    col = colours(groups)
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_WIDTH, 3.4))
    panels = (("movement", "relative NTK change"), ("rotation", "NTK rotation (1 − cos)"),
              ("alignment", "kernel-target alignment"))
    for K, g in groups.items():
        u = np.array([r["updates"] for r in g], float)
        for ax, (key, _) in zip(axes, panels):
            ax.plot(u, [r[f"{key}_anchor"] for r in g], "o", color=col[K], ms=5,
                    label=legend_label(K, R.updates(g)) if key == "movement" and g else None)
            if key != "alignment":
                ax.plot(u, [r[f"{key}_net"] for r in g], "o", mfc="none", color=col[K], ms=7)
    tab = _fl.kernel_table(rows)
    for ax, (key, label) in zip(axes, panels):
        ax.plot([t["updates"] for t in tab], [t[f"{key}_anchor"] for t in tab], color="0.4", lw=1, zorder=0)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.4, 2.5 * max([t["updates"] for t in tab] or [1]))
        ax.set_xlabel("feature updates")
        ax.set_ylabel(label)
    if tab:
        axes[2].axhline(np.mean([t["alignment_init"] for t in tab]), color="0.5", ls="--", lw=1,
                        label="at initialisation")
        axes[2].legend(fontsize=9, frameon=False)
    axes[0].set_yscale("symlog", linthresh=1)
    axes[0].set_ylim(bottom=-0.2)
    shared_legend(fig, axes[0], ncol=3)
    return fig


# --- Fig 9, quintic demo, adaptive schedules


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
                       Line2D([], [], ls="", marker="$n$", ms=7, color="firebrick", label="runs dropped (top)")],
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


def quintic_frames(record, *, dpi: float = 200) -> tuple:
    """Every setting of a ``quintic_demo`` record drawn for :func:`itlin.book.widgets.static_demo`:
    ``(frames, captions, runs)``, ``{(K, lr): png bytes}``, ``{(K, lr): caption}`` and
    ``{(K, lr): DemoRun}``; the frames share the loss axis. Column-wide figures: ``dpi=200`` goes
    with ``static_demo(..., pixel_ratio=2)``."""
    from ..experiments.main import quintic_demo as Q
    from ..widgets import figure_to_png

    runs = Q.runs_of(record)
    ylim = quintic_loss_limits(runs.values())
    frames = {key: figure_to_png(quintic_setting(run, loss_ylim=ylim), dpi=dpi) for key, run in runs.items()}
    return frames, {key: quintic_caption(run) for key, run in runs.items()}, runs


def quintic_live_demo(*, steps: int = 5000, seed: int = 0, Ks=None, learning_rates=None, initial=(100, 0.003)):
    """The ipywidgets version (local Jupyter): sliders for K and the learning rate; every change
    trains the setting with :func:`~itlin.book.experiments.main.quintic_demo.train_setting`
    (``steps`` steps) and redraws."""
    from ..experiments.main import quintic_demo as Q
    from ..labels import fmt_value
    from ..widgets import Slider, live_demo

    Ks, lrs = list(LIVE_KS if Ks is None else Ks), list(LIVE_LEARNING_RATES if learning_rates is None else learning_rates)
    sliders = [Slider("K", Ks, [fmt_value(k) for k in Ks], initial=initial[0] if initial[0] in Ks else Ks[0]),
               Slider("lr", lrs, [f"{v:g}" for v in lrs], initial=initial[1] if initial[1] in lrs else lrs[0])]
    return live_demo(lambda K, lr: Q.train_setting(K, lr, steps, seed=seed, evals=100), quintic_setting, sliders,
                     description=f"Each change trains the 5x50 ReLU MLP for {steps:,} full-batch steps (seed {seed}).")


# adaptive schedules (issue 17)
_FAMILY_STYLE = {"fixed": ("black", "o", "fixed K"), "loss": ("tab:blue", "s", "loss drift"),
                 "kernel": ("tab:red", "D", "kernel drift")}


def adaptive_frontier(rec):
    """Final test accuracy (model being trained) against feature updates (top) and against compute,
    checks included, relative to the training steps alone (bottom): one point per setting, the
    mean over seeds with 95% intervals on both axes."""
    from ..experiments.main import _rows as R
    from ..experiments.main import adaptive_schedules as ad
    from ..verdicts import seed_interval

    rows, step = ad.rows(rec), float(rec["flops"]["step"])

    def mean_half(values):
        m, h = seed_interval(values)
        return m, (h if math.isfinite(h) else 0.0)

    fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 6.4))
    for ax, axis in zip(axes, ("updates", "compute")):
        for family in ad.FAMILIES:
            colour, marker, label = _FAMILY_STYLE[family]
            pts = []
            for fam, value in ad.settings_of(rows):
                done = [r for r in R.select(rows, group="frontier", family=fam, value=value) if r["status"] == "completed"]
                if fam != family or not done:
                    continue
                xs = [1 + r["updates"] if axis == "updates" else r["cost"]["total"] / (r["steps"] * step) for r in done]
                pts.append((value, mean_half(xs), mean_half([r["test"] for r in done])))
            if not pts:
                continue
            ax.errorbar([p[1][0] for p in pts], [100 * p[2][0] for p in pts], xerr=[p[1][1] for p in pts],
                        yerr=[100 * p[2][1] for p in pts], color=colour, marker=marker, capsize=2, lw=1.2, ms=5,
                        linestyle="-" if family == "fixed" else "none", label=label)
            for value, (mx, _), (my, _) in pts:
                ax.annotate(K_label(value) if family == "fixed" else f"{value:g}", (mx, 100 * my),
                            textcoords="offset points", xytext=(4, 4), fontsize=9, color=colour)
        if axis == "updates":
            ax.set(xscale="log", xlabel="1 + feature updates (log scale)")
        else:
            ax.set_xlabel("compute relative to the training steps alone (checks and relinearisations included)")
        ax.set_ylabel("test accuracy (%)")
    axes[0].legend(loc="lower right")
    axes[0].set_title("the frontier: accuracy against feature updates")
    axes[1].set_title("the same runs against compute")
    fig.tight_layout()
    return fig


def adaptive_timing(rec):
    """Every frontier run's relinearisation steps, one row per seed, grouped by setting (fixed K
    black, loss drift blue, kernel drift red)."""
    from ..experiments.main import _rows as R
    from ..experiments.main import adaptive_schedules as ad

    rows, steps = ad.rows(rec), int(rec.meta["resolved"]["steps"])
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 4.2))
    y, ticks, labels = 0, [], []
    for family, value in ad.settings_of(rows):
        top = y
        for r in sorted(R.select(rows, group="frontier", family=family, value=value), key=lambda r: r["seed"]):
            st = np.asarray(r["relin_steps"], float)
            ax.plot(st, np.full(st.shape, y), "|", color=_FAMILY_STYLE[family][0], ms=5, mew=1.2)
            y += 1
        ticks.append((top + y - 1) / 2)
        labels.append(ad.value_label(family, value))
        y += 1
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set(xlim=(0, steps), xlabel="step", title="when each run relinearised (one row per seed)")
    fig.tight_layout()
    return fig


def adaptive_stability(rec):
    """Training loss of the model being trained against steps in the stability group (plain
    gradient descent at the searched learning rate), one line per seed; a cross marks a run that
    diverged, at its last good step."""
    from ..experiments.main import adaptive_schedules as ad

    g = [r for r in ad.rows(rec) if r["group"] == "stable"]
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
    for family in ad.FAMILIES:
        colour, _, name = _FAMILY_STYLE[family]
        for i, r in enumerate(sorted((r for r in g if r["family"] == family), key=lambda r: r["seed"])):
            h = rec.history(r["tag"])
            loss = np.asarray(h.loss, float)
            if loss.size:
                st = np.arange(1, loss.size + 1) * h.loss_every
                ax.plot(st, loss, color=colour, lw=1.0, alpha=0.8,
                        label=None if i else f"{ad.value_label(family, r['value'])} ({name})")
                if r["status"] != "completed":
                    ax.plot(st[-1], loss[-1], "x", color=colour, ms=8, mew=2)
    ax.set(yscale="log", xlabel="step", ylabel="training loss (model being trained)")
    if g:
        ax.set_title(f"plain gradient descent at learning rate {g[0]['learning_rate']:g} (crosses: diverged)")
        ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["LIVE_KS", "LIVE_LEARNING_RATES", "adaptive_frontier", "adaptive_stability", "adaptive_timing", "fig2", "fig3", "fig4", "fig5", "fig6", "fig7", "fig7_distances", "fig8", "fig9", "fig9_compare", "fig9_functions", "fig9_training", "kernel_movement", "quintic_caption", "quintic_frames", "quintic_live_demo", "quintic_loss_limits", "quintic_setting"]
