"""Figures of the main paper's experiments (Goldwaser & Ge): one function per figure.

Curves are the mean over seeds with a band from the lowest to the highest seed; legends count
each run's feature updates; ticks along the bottom of an axis mark a run's relinearisations.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..experiments.main import _rows as R
from ..experiments.main import fig2_k_sweep as _fig2
from ..labels import K_label, legend_label
from ..plotting import COLUMN_WIDTH, colours, relin_marks, seed_band


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


__all__ = ["fig2"]
