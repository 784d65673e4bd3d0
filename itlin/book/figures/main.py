"""Figures of the main paper's experiments (Goldwaser & Ge): one function per figure.

Curves are the mean over seeds with a band from the lowest to the highest seed; legends count
each run's feature updates; ticks along the bottom of an axis mark a run's relinearisations.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from ..experiments.main import _rows as R
from ..experiments.main import fig2_k_sweep as _fig2
from ..experiments.main import fig8_adam as _fig8
from ..labels import K_label, legend_label
from ..plotting import COLUMN_WIDTH, colours, relin_marks, seed_band, shared_legend, update_axis


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
                      label=legend_label(K, g[0]["updates"], extra), lw=1.6)
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
                f" / {K_label(K_mb)} mini: {g[0]['updates']:,} / {mb[0]['updates']:,} feature updates" if mb else
                f": {g[0]['updates']:,} feature updates")
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
                          label=legend_label(1, g[0]["updates"], f" network, {len(hs)} seeds"))
                continue
            seed_band(ax, hs, f"{split}/accuracy_lin", color=col[K], label=legend_label(K, g[0]["updates"],
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
    Adam-solved run's linearised model (solid) and network (dashed); dotted verticals and the top
    axis mark the Adam-solved run's feature updates."""
    rows = _fig8.rows(rec)
    solved = _fig8.solved_tag(rec.meta["resolved"]["K"])
    hist = lambda t: [rec.history(r["tag"]) for r in R.select(rows, setting=t)]
    updates = lambda t: R.select(rows, setting=t)[0]["updates"]
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.9), sharey=True)
    for ax, split in zip(axes, ("test", "train")):
        seed_band(ax, hist("SGD K=1"), f"{split}/accuracy", color="black",
                  label=f"SGD {legend_label(1, updates('SGD K=1'))}")
        seed_band(ax, hist("Adam K=1"), f"{split}/accuracy", color="tab:blue",
                  label=f"Adam {legend_label(1, updates('Adam K=1'))}")
        seed_band(ax, hist(solved), f"{split}/accuracy_lin", color="tab:red",
                  label=f"Adam solved, linearised ({legend_label(rec.meta['resolved']['K'], updates(solved))})")
        seed_band(ax, hist(solved), f"{split}/accuracy", color="tab:red", lw=1.1, linestyle="--", alpha=0.0,
                  label="Adam solved, network")
        relin = hist(solved)[0].relin_steps
        for s in relin:
            ax.axvline(s, color="tab:red", lw=0.6, linestyle=":", alpha=0.6)
        update_axis(ax, relin, label="feature updates, Adam-solved", max_ticks=6)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{split} accuracy")
    shared_legend(fig, axes[0])
    return fig


__all__ = ["fig2", "fig3", "fig8"]
