"""Schematic figures for the book (drawn with matplotlib; no data).

:func:`k_spectrum` draws the spectrum of the relinearisation period ``K`` (main paper Figure 1):
``K = 1`` is gradient descent, growing ``K`` updates the features less and less often, past the
number of steps a linearisation needs to converge every phase is a Gauss-Newton step (Section
3.1), and ``K = inf`` is the linearised network at initialisation.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["k_spectrum"]

_GD, _IL, _GN, _LIN = "#1f5fa8", "#6a9f3a", "#c9731b", "#8c2d4f"


def k_spectrum(*, steps: int = 100_000, k_converge: float = 3e3, figsize=(9.0, 5.8)):
    """The K spectrum as a figure.

    Args:
      steps: the run length ``T`` used for the lower panel (feature updates ``floor(T / K)``).
      k_converge: where the schematic places ``K_conv``, the number of steps after which the
        linearised model has converged (about ``1 / (eta * smallest non-zero NTK eigenvalue)``
        for the squared loss); only its position on the drawing.

    Returns the matplotlib figure (two panels sharing the K axis: the regimes above, the number
    of feature updates of Definition 1 below).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    kmax_exp = math.ceil(math.log10(steps)) + 1  # last finite decade drawn
    x_inf = kmax_exp + 1.1  # where K = inf sits, after a break in the axis
    x_conv = math.log10(k_converge)

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=figsize, sharex=True, layout="constrained",
                                  gridspec_kw={"height_ratios": [2.0, 1.0]})

    # ---------------------------------------------------------------- upper panel: regimes
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    bands = [(-0.35, 0.45, _GD), (0.45, x_conv, _IL), (x_conv, kmax_exp + 0.35, _GN), (x_inf - 0.35, x_inf + 0.35, _LIN)]
    for a, b, c in bands:
        ax.add_patch(FancyBboxPatch((a, 0.05), b - a, 0.09, boxstyle="round,pad=0,rounding_size=0.04",
                                    facecolor=c, edgecolor="none", alpha=0.85, mutation_aspect=0.25))
    # fade from iterative linearisation into Gauss-Newton around K_conv
    xs = np.linspace(x_conv - 0.6, x_conv, 30)
    for i, xv in enumerate(xs[:-1]):
        ax.add_patch(plt.Rectangle((xv, 0.05), xs[1] - xs[0], 0.09, facecolor=_GN, edgecolor="none",
                                   alpha=0.85 * (i + 1) / len(xs)))
    ax.axvline(x_conv, ymin=0.02, ymax=0.93, color=_GN, ls="--", lw=1.2)
    ax.text(x_conv + 0.05, 0.95, r"$K_{\mathrm{conv}} \approx 1/(\eta\,\lambda_{\min}(\Theta))$", color=_GN,
            fontsize=9, va="top")

    def box(xc, yc, title, body, color, width=None):
        ax.text(xc, yc, f"$\\bf{{{title}}}$\n{body}", ha="center", va="top", fontsize=8.6, color="0.1",
                linespacing=1.35,
                bbox=dict(boxstyle="round,pad=0.45", facecolor="white", edgecolor=color, lw=1.6))

    box(0.0, 0.86, r"K=1:\ GD",
        "features $\\phi_t$\nupdated after\nevery step\n(Eq. 3 = GD)", _GD)
    box((0.45 + x_conv) / 2 + 0.05, 0.86, r"iterative\ linearisation",
        "train the linearised\nnetwork for K steps\n(Eq. 3), then update\nthe features (Eq. 4):\nT/K updates", _IL)
    box((x_conv + kmax_exp) / 2 + 0.1, 0.86, r"Gauss{-}Newton",
        "each linearisation solved:\na Gauss-Newton step (Eq. 5);\nall larger K train alike.\n"
        "Damping $\\lambda$ (Eq. 6) $\\approx$\nstopping a phase early,\n$\\lambda \\sim 1/(\\eta K)$", _GN)
    box(x_inf, 0.86, r"K=\infty",
        "only the initial\nlinearisation\nis trained: no\nfeature learning.\nSolved, it is one\n"
        "Gauss-Newton\nstep (Eq. 19)", _LIN)
    ax.annotate("", xy=(kmax_exp + 0.3, 0.26), xytext=(0.1, 0.26),
                arrowprops=dict(arrowstyle="-|>", color="0.35", lw=1.3))
    ax.text((kmax_exp + 0.3) / 2, 0.285, "fewer feature updates, each linearisation trained further",
            ha="center", va="bottom", fontsize=8.5, color="0.35")

    # ---------------------------------------------------------------- lower panel: feature updates
    ks = np.logspace(0, math.log10(steps), 200)
    updates = np.floor(steps / ks)
    ax2.step(np.log10(ks), updates, where="post", color="0.25", lw=1.6)
    ax2.text(math.log10(steps) + 0.1, 0.6, "K > T: none", fontsize=8.5, color="0.4", va="center")
    ax2.text(x_conv + 0.1, 30, "each phase is one\nGauss-Newton step:\nT/K of them", fontsize=8.5, color=_GN,
             va="bottom")
    ax2.set_yscale("log")
    ax2.set_ylim(0.3, steps * 4)
    ax2.plot([x_inf], [0.5], "o", color=_LIN, ms=7)
    ax2.text(x_inf, 1.2, "0", ha="center", color=_LIN, fontsize=9)
    ax2.axvline(math.log10(steps), color="0.6", lw=0.8, ls=":")
    ax2.text(math.log10(steps) + 0.05, steps, "K = T: one update", fontsize=8.5, color="0.4", va="top")
    ax2.set_ylabel(f"feature updates\nin T = {steps:,} steps", fontsize=9)
    ax2.axvline(x_conv, color=_GN, ls="--", lw=1.2)
    yt = [1, 10, 100, 1000, 10_000, 100_000]
    ax2.set_yticks([v for v in yt if v <= steps * 4])
    ax2.set_yticklabels([f"{v:,}" for v in yt if v <= steps * 4], fontsize=8.5)

    ticks = list(range(0, kmax_exp + 1)) + [x_inf]
    labels = ["1" if e == 0 else f"$10^{{{e}}}$" for e in range(0, kmax_exp + 1)] + [r"$\infty$"]
    ax2.set_xticks(ticks)
    ax2.set_xticklabels(labels)
    ax2.set_xlim(-0.45, x_inf + 0.75)
    ax2.set_xlabel("relinearisation period K (steps between feature updates; log scale)")
    for a in (ax, ax2):  # break marks between the last decade and infinity
        xb = (kmax_exp + x_inf) / 2 - 0.05
        for dx in (-0.06, 0.06):
            a.plot([xb + dx - 0.05, xb + dx + 0.05], [-0.04, 0.04] if a is ax else [0.25, 0.5],
                   transform=a.get_xaxis_transform() if a is ax else a.transData, color="0.3", lw=1.2,
                   clip_on=False)
    ax2.spines["top"].set_visible(False)
    ax2.spines["right"].set_visible(False)
    return fig
