"""Figures of the main paper's experiments (Goldwaser & Ge): one function per figure.

Here: Figs. 2-8 (K sweeps, augmentation, ResNet and batch norm, data scaling, probes, filters,
the kernel's movement, Adam-solved linearisations) and the adaptive schedules' figures. Fig. 9
and the quintic demo are in :mod:`itlin.book.figures.quintic`, re-exported here, so a chapter
reaches every figure of the main paper through this module.

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
from ..intervals import fmt_gap
from ..labels import K_label, legend_label
from ..plotting import COLUMN_WIDTH, colours, relin_marks, seed_band, shared_legend, update_axis
from ..verdicts import seed_interval
from .quintic import (FIG9_DEMO_COLUMNS, LIVE_KS, LIVE_LEARNING_RATES, fig9, fig9_compare, fig9_demo, fig9_functions,
                      fig9_training, quintic_caption, quintic_demo, quintic_loss_limits, quintic_setting)


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


def fig2_demo(rec):
    """Fig. 2 as a demo (:class:`~itlin.book.widgets.Demo`), drawn from the record alone: knobs
    ``K`` (in full-batch steps; the mini-batch run of ``K`` is the record's ``K x rescale``, as the
    caption rescales) and ``batch`` (``"full"`` or ``"mini"``).

    Each frame shows the test accuracy of the model being trained for that setting: every seed as
    a thin line, their mean and the band from the lowest to the highest seed, its relinearisations
    as ticks along the bottom; beside it ``K=1`` of the same sweep (and at ``K=inf`` full batch the
    control at the larger learning rate, dotted). Steps are full-batch steps (a mini-batch run's
    divided by the rescaling factor), so the two sweeps share one axis. A setting the record lacks
    says so. The table holds the chapter's summary rows (``fig2_k_sweep.summary``) of what is drawn.
    """
    from ..widgets import Demo, Knob, View

    rows = _fig2.rows(rec)
    f = int(rec.meta["resolved"]["rescale"])
    mult = rec.meta["resolved"]["inf_lr_multiplier"]
    settings = _fig2.settings_of(rows)
    table = dict(zip(settings, _fig2.summary(rec)))
    to_full = lambda sweep, K: K if (sweep == "full" or K in (1.0, math.inf)) else K / f
    to_sweep = lambda sweep, K: K if (sweep == "full" or K in (1.0, math.inf)) else K * f
    Ks = sorted({to_full(sw, K) for sw, K, control in settings if not control})
    col = colours(Ks)
    runs = {key: [rec.history(r["tag"]) for r in R.select(rows, sweep=key[0], K=key[1], control=key[2])]
            for key in settings}
    scaled = {key: [type(h).from_arrays({**h.arrays(), "eval/step": h.eval_array("step") / (f if key[0] == "mini" else 1)},
                                        h.meta()) for h in hs] for key, hs in runs.items()}
    acc = np.concatenate([h.eval_array("test/accuracy_lin") for hs in runs.values() for h in hs])
    acc = acc[np.isfinite(acc)]
    ylim = (max(0.0, acc.min() - 0.03), min(1.0, acc.max() + 0.03)) if acc.size else (0.0, 1.0)
    x_end = max(float(h.eval_array("step")[-1]) for hs in scaled.values() for h in hs if h.eval_array("step").size)
    words = {"full": "full batch", "mini": "mini-batch"}

    def band(ax, key, colour, label, *, seeds=True, ls="-", alpha=0.18, lw=2.2):
        hs = scaled[key]
        if seeds:  # every seed of the record, thin
            for h in hs:
                ax.plot(h.eval_array("step"), h.eval_array("test/accuracy_lin"), color=colour, lw=0.7, alpha=0.4,
                        ls=ls)
        seed_band(ax, hs, "test/accuracy_lin", color=colour, label=label, lw=lw, linestyle=ls, alpha=alpha)

    def compute(K, batch):
        key = (batch, to_sweep(batch, float(K)), False)
        ref, control = (batch, 1.0, False), ("full", math.inf, True)
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 4.8), layout="constrained")
        shown = []
        if key in runs:
            g = R.select(rows, sweep=key[0], K=key[1], control=False)
            band(ax, key, col.get(float(K), "C0"), legend_label(key[1], R.updates(g)) + " (thin: each seed)")
            relin_marks(ax, runs[key][0], x_scale=f if batch == "mini" else 1, color=col.get(float(K), "C0"))
            shown.append(key)
            title = (f"{words[batch]}, {K_label(key[1])}" + (f" ({K_label(K)} x {f})" if key[1] != K else "") +
                     f", learning rate {g[0]['learning_rate']:g}: {len(g)} seeds")
        else:
            ax.text(0.5, 0.5, f"this record has no {words[batch]} run at {K_label(key[1])}", transform=ax.transAxes,
                    ha="center", va="center", fontsize=11, color="#b00020")
            title = f"{words[batch]}, {K_label(key[1])}: not in this record"
        if key != ref and ref in runs:
            g1 = R.select(rows, sweep=batch, K=1.0, control=False)
            band(ax, ref, col[1.0], legend_label(1, R.updates(g1)) + " (reference)", seeds=False, alpha=0.1, lw=1.4)
            shown.append(ref)
        if key == ("full", math.inf, False) and control in runs:
            band(ax, control, "#2a8f84", legend_label(math.inf, 0, f", lr x{mult:g}") + " (control)", seeds=False,
                 ls=":", alpha=0.12, lw=1.8)
            shown.append(control)
        ax.set(ylim=ylim, xlim=(0, x_end), ylabel="test accuracy (model being trained)",
               xlabel="full-batch step" + (f" (mini-batch step / {f})" if batch == "mini" else ""))
        ax.set_title(title, fontsize=11)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=9.5, title="mean over seeds, band: lowest to highest",
                      title_fontsize=9.5)
        return View(fig, table=[table[k] for k in shown])

    finite = [K for K in Ks if 1 < K < math.inf]
    return Demo([Knob("K", Ks, default=finite[-1] if finite else Ks[0]),
                 Knob("batch", ["full", "mini"], labels=["full batch", "mini-batch"])], compute,
                title="Sweeps over K: test accuracy of the model being trained, every seed of the record")


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


# --- adaptive schedules (issue 17)
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


# ------------------------------------------------------------------------------ the adaptive-schedules demo
#: the drift thresholds of the demo besides the record's: part of the paper scale's grids, within a
#: factor of about three of the default scale's one tolerance each
DEMO_LOSS_RTOLS = (0.01, 0.03, 0.1)
DEMO_KERNEL_THRESHOLDS = (0.1, 0.3, 0.6)


def adaptive_setting(rows, family: str, value: float, *, n_test: int, verdicts=None, xlim=None, ylim=None):
    """One frame of :func:`adaptive_demo`: feature updates against final test accuracy (the model
    being trained) for the drift schedule ``family`` at threshold ``value``: its runs, one dot per
    seed, with their mean, beside the fixed periods' curve (black, labelled by K) and the other drift
    settings' means (faint), all over the seeds of the chosen setting (so that they compare paired);
    95% intervals on both axes from three seeds up. The text gives its feature updates, its accuracy and its paired gap
    to the fixed-K curve at the same number of updates (:func:`~itlin.book.experiments.main.
    adaptive_schedules.matched`), and the chapter's verdict when ``verdicts`` judge this setting."""
    from ..experiments.main import adaptive_schedules as ad
    from ..intervals import fmt_mean, paired_gap
    from ..widgets import View

    def mean_half(values):
        m, h = seed_interval(values)
        return m, (h if math.isfinite(h) else 0.0)

    all_runs = R.select(rows, group="frontier", family=family, value=value)
    shown = {r["seed"] for r in all_runs}  # every curve and mean over the seeds of this setting: paired

    def points(fam, val):
        return [r for r in R.select(rows, group="frontier", family=fam, value=val)
                if r["status"] == "completed" and r["seed"] in shown]

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 4.9))
    fixed = [(K, points("fixed", K)) for fam, K in ad.settings_of(rows) if fam == "fixed"]
    fx = [(K, mean_half([1 + r["updates"] for r in g]), mean_half([r["test"] for r in g])) for K, g in fixed if g]
    bars = len(shown) >= 3  # Student's t over one or two seeds spans the axes: the text gives the intervals
    ax.errorbar([p[1][0] for p in fx], [100 * p[2][0] for p in fx], xerr=[p[1][1] for p in fx] if bars else None,
                yerr=[100 * p[2][1] for p in fx] if bars else None, color="black", marker="o", ms=4, capsize=2,
                lw=1.2, label="fixed K, mean over the same seeds")
    for K, (mx, _), (my, _) in fx:
        ax.annotate(K_label(K), (mx, 100 * my), textcoords="offset points", xytext=(4, -12), fontsize=9)
    for fam, val in ad.settings_of(rows):
        g = points(fam, val)
        if fam == "fixed" or (fam, val) == (family, value) or {r["seed"] for r in g} != shown:
            continue  # a setting run on other seeds (trained for the demo on fewer) is not compared here
        colour, marker, _ = _FAMILY_STYLE[fam]
        ax.plot(np.mean([1 + r["updates"] for r in g]), 100 * np.mean([r["test"] for r in g]), marker, ms=6,
                mfc="none", mec=colour, alpha=0.5)
    colour, marker, name = _FAMILY_STYLE[family]
    g = points(family, value)
    here = bool(all_runs) and all(r.get("trained_here") for r in all_runs)
    if g:
        jitter = np.exp(np.random.default_rng(len(g)).uniform(-0.04, 0.04, len(g)))
        ax.scatter([(1 + r["updates"]) * j for r, j in zip(g, jitter)], [100 * r["test"] for r in g], s=16,
                   color=colour, alpha=0.45, lw=0, zorder=3, label=f"{name}, one seed")
        (mx, hx), (my, hy) = mean_half([1 + r["updates"] for r in g]), mean_half([r["test"] for r in g])
        ax.errorbar([mx], [100 * my], xerr=[hx] if bars else None, yerr=[100 * hy] if bars else None, fmt=marker,
                    ms=8, color=colour, mec="k", capsize=3, lw=1.6, zorder=4,
                    label=f"{ad.value_label(family, value)}, mean" + (" and 95% intervals" if bars else ""))
    ax.plot([], [], "o", mfc="none", mec="0.5", label="other thresholds, mean over the same seeds")
    ax.set(xscale="log", xlabel="1 + feature updates (log scale)", ylabel="test accuracy (%)")
    if xlim is not None:
        ax.set_xlim(*xlim)
    if ylim is not None:
        ax.set_ylim(*ylim)
    which = f"seed {all_runs[0]['seed']}" if len(all_runs) == 1 else f"{len(all_runs)} seeds"
    ax.set_title(f"{name}, threshold {value:g}: " + (f"trained for this demo ({which})" if here else
                                                     f"the record's {which}"), fontsize=10.5, loc="left")
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=9, frameon=False)

    seeds, a, b, outside, dropped, ea, eb = ad.matched(rows, family, value, axis="updates")
    gap = paired_gap(a, b, n_test=n_test, examples=None if ea is None else (ea, eb))
    parts = [f"{ad.value_label(family, value)}: " + ("trained for this demo with the record's settings, not part of it"
                                                      if here else "the record's runs"),
             f"feature updates {fmt_mean([r['updates'] for r in g], 1, '', 1)}" if g else "no run completed",
             f"test accuracy {fmt_mean([r['test'] for r in g])}" if g else "",
             f"minus the fixed-K curve at the same number of updates: {fmt_gap(gap)}" if seeds else
             "no seed within the fixed-K range of updates"]
    if dropped or outside:
        parts.append(f"{dropped} seed(s) diverged, {outside} outside the fixed-K range")
    vid = f"frontier.{family}{value:g}.updates"
    if verdicts is not None and vid in verdicts.ids and not here:
        parts.append(f"the chapter's claim, within the margin of the fixed-K curve: {verdicts[vid].verdict}")
    return View(fig, text="; ".join(p for p in parts if p) + ".")


def adaptive_demo(rec, rows, *, seeds: int = 1, verdicts=None, loss_rtols=DEMO_LOSS_RTOLS,
                  kernel_thresholds=DEMO_KERNEL_THRESHOLDS):
    """The adaptive-schedules chapter's demo: one knob, the drift schedule's threshold (loss drift's
    ``rtol``, then kernel drift's threshold), over ``loss_rtols`` and ``kernel_thresholds`` and the
    record's own. A threshold the record ``rec`` (with ``rows``, :func:`~itlin.book.experiments.main.
    adaptive_schedules.rows`) holds is drawn from all its seeds; one it lacks is trained when the demo
    is built, on the record's first ``seeds`` seeds, with the record's settings
    (:class:`~itlin.book.experiments.main.adaptive_schedules.FrontierRuns`), and drawn against the
    record's fixed-K runs of the same seeds. ``verdicts``: the chapter's, whose frontier claims the
    record's frames quote. Training costs one compilation and then a run per seed and threshold,
    which the book's build pays for every frame: one seed (the default) keeps it short."""
    from ..experiments.main import _setup as S
    from ..experiments.main import adaptive_schedules as ad
    from ..widgets import Demo, Knob

    have = [(f, v) for f, v in ad.settings_of(rows) if f != "fixed"]
    grid = set(have) | {("loss", float(v)) for v in loss_rtols} | {("kernel", float(v)) for v in kernel_thresholds}
    grid = sorted(grid, key=lambda k: (ad.FAMILIES.index(k[0]), k[1]))
    missing = [k for k in grid if k not in have]
    first = sorted({int(r["seed"]) for r in rows if r["group"] == "frontier"})[:int(seeds)]
    if missing and not first:
        raise ValueError("the record has no frontier seeds to train the missing thresholds on.")
    trained = ad.FrontierRuns(rec)
    new = [row for fam, val in missing for row in trained.rows(fam, val, first)]  # trained once, here
    all_rows = list(rows) + new
    n_test = S.n_test_judged(rec.meta["resolved"])
    done = [r for r in all_rows if r["group"] == "frontier" and r["status"] == "completed"]
    ups, accs = [1 + r["updates"] for r in done], [100 * r["test"] for r in done]
    xlim, ylim = (min(ups) / 1.3, max(ups) * 1.3), (min(accs) - 2, max(accs) + 2)

    def compute(threshold):
        family, value = threshold
        return adaptive_setting(all_rows, family, value, n_test=n_test, verdicts=verdicts, xlim=xlim, ylim=ylim)

    labels = [ad.value_label(f, v) for f, v in grid]
    return Demo(Knob("threshold", grid, default=have[0] if have else grid[0], label="drift threshold", labels=labels),
                compute, title="Adaptive schedules: feature updates used against accuracy, threshold by threshold")


__all__ = ["DEMO_KERNEL_THRESHOLDS", "DEMO_LOSS_RTOLS", "FIG9_DEMO_COLUMNS", "LIVE_KS", "LIVE_LEARNING_RATES", "adaptive_demo", "adaptive_frontier", "adaptive_setting", "adaptive_stability", "adaptive_timing", "fig2", "fig2_demo", "fig3", "fig4", "fig5", "fig6", "fig7", "fig7_distances", "fig8", "fig9", "fig9_compare", "fig9_demo", "fig9_functions", "fig9_training", "kernel_movement", "quintic_caption", "quintic_demo", "quintic_loss_limits", "quintic_setting"]
