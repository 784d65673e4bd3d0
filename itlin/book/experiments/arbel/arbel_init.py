"""Arbel et al. Figure 1 (left), Figure 3 (left) and Figure 4 (right): the scale of the initialisation.

The teacher-student task of their Section 5 (:mod:`itlin.book.experiments.arbel._arbel`) for every
``tau0`` of a grid (the std of the student's hidden weights and biases at initialisation),
every step size of each method's grid (the paper's units) and every seed. For each ``tau0``
and method the chapter reports the step size with the lowest mean log test loss over seeds
(the paper's selection by test loss), next to the random-features baseline (RF: the readout
fitted on the features at initialisation). The same runs record the smallest eigenvalue of
``J J^T`` along GN training (their Figure 4, right).

Results (``L`` step sizes, ``G`` values of ``tau0``, ``S`` seeds, ``T`` checkpoints), for ``m`` in
``gn``, ``gd``:

* ``tau0`` (G,); ``m/lr`` (L,) the paper's units and ``m/lr_ours`` (L,); ``m/ends`` (T,);
* ``m/<metric>`` (L, G, S, T): ``train``, ``test``, ``lrfit``, ``wcd``, ``wcd_code``, ``sigma_min``;
* ``m/steps``, ``m/converged``, ``m/diverged`` (L, G, S);
* ``rf_test`` (G, S): the RF baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Params, param, register
from . import _arbel as A

NAME = "arbel_init"
PAPER_LRS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
PAPER_TAU0 = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 12, "n_test": 200, "tau0s": (1e-3, 1.0, 100.0),
             "gn_lrs": (10.0, 100.0), "gd_lrs": (1e-2, 100.0), "gn_steps": 12, "gd_steps": 40, "checkpoints": 5},
    "default": {"seeds": 5, "width": 250, "n_train": 50, "n_test": 2000, "tau0s": PAPER_TAU0,
                "gn_lrs": (1.0, 10.0, 100.0, 1000.0), "gd_lrs": PAPER_LRS, "gn_steps": 400, "gd_steps": 4000,
                "checkpoints": 12},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "tau0s": PAPER_TAU0, "gn_lrs": PAPER_LRS,
              "gd_lrs": PAPER_LRS, "gn_steps": 100_000, "gd_steps": 1_000_000, "checkpoints": 40},
}


@dataclass(frozen=True)
class InitParams(Params):
    SCALES = SCALES

    seeds: Optional[int] = param(None, "independent runs (teacher, data and student all change)", min=1)
    width: Optional[int] = param(None, "hidden units M of the student (5000 in the paper)", min=1)
    n_train: Optional[int] = param(None, "training points N (500 in the paper)", min=1)
    n_test: Optional[int] = param(None, "test points (10,000 in the paper)", min=1)
    tau0s: Optional[tuple[float, ...]] = param(None, "initial stds of the hidden layer, increasing", gt=0)
    gn_lrs: Optional[tuple[float, ...]] = param(None, "GN step sizes, the paper's units", gt=0)
    gd_lrs: Optional[tuple[float, ...]] = param(None, "GD step sizes, the paper's units", gt=0)
    gn_steps: Optional[int] = param(None, "most GN steps per run (1e5 in the paper)", min=1)
    gd_steps: Optional[int] = param(None, "most GD steps per run (1e6 in the paper)", min=1)
    checkpoints: Optional[int] = param(None, "log-spaced checkpoints where every metric is recorded", min=2)
    activation: Literal["relu", "silu"] = param("relu", "the teacher's and the student's non-linearity")
    beta: float = param(1.0, "SiLU temperature: x * sigmoid(beta x)", gt=0)
    alpha: float = param(1.0, "damping factor: eps = max(alpha sigma_min(J J^T), eps0)", min=0)
    eps0: float = param(1e-7, "damping floor, the paper's units", min=0)
    stop_rtol: float = param(1e-8, "stop when the training loss is below this times its initial value", min=0, lt=1)
    gd_dtype: Literal["float32", "float64"] = param("float32", "GD's precision (GN is always float64)")
    match_margin: float = param(0.1, "decades within which a test loss 'matches' RF's (0.1: 26%)", gt=0)

    def check(self):
        r = self.resolved()
        if r["width"] < r["n_train"]:
            raise ValueError(f"width = {r['width']} < n_train = {r['n_train']}: the random-features baseline and "
                             "Test-LRfit need at least as many hidden units as training points (over-parameterised)")
        t = list(r["tau0s"])
        if len(t) < 2 or any(b <= a for a, b in zip(t, t[1:])):
            raise ValueError(f"tau0s must be at least two increasing values, got {t}")
        for name in ("gn_lrs", "gd_lrs"):
            if len(set(r[name])) != len(r[name]):
                raise ValueError(f"{name} has repeated values: {r[name]}")


def run(p: dict, ctx) -> dict:
    r = InitParams(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}).resolved()
    S, M, N = r["seeds"], r["width"], r["n_train"]
    tau0s = np.asarray(r["tau0s"], np.float64)
    G = len(tau0s)
    data = A.teacher_data(S, r["seed"], n_train=N, n_test=r["n_test"], activation=r["activation"], beta=r["beta"])
    z = A.hidden_directions(S, r["seed"], M, A.DIM + 1)
    common = dict(width=M, dim=A.DIM, activation=r["activation"], beta=r["beta"], alpha=r["alpha"],
                  eps0=A.eps0_ours(r["eps0"], width=M, n_train=N), stop_rtol=r["stop_rtol"])
    ti, si = A.grid(G, S)
    out = {"tau0": tau0s}
    for method in ("gn", "gd"):
        lrs = [float(v) for v in r[f"{method}_lrs"]]
        steps = r[f"{method}_steps"]
        ends = A.checkpoints(steps, r["checkpoints"])
        ours = [A.gn_lr(v, n_train=N) if method == "gn" else A.gd_lr(v, width=M) for v in lrs]
        ctx.say(f"{method.upper()}: {len(lrs)} step sizes x {G} tau0 x {S} seeds, at most {steps} steps")
        per = []
        for lr, lr_o in zip(lrs, ours):
            # one call per (step size, tau0): a batch ends when its slowest run does
            per.append([ctx.stage(f"{method} lr={lr:.12g} tau0={t:.12g}", lambda g=g, lr_o=lr_o: A.sweep(
                method, data, z, np.arange(S), np.full(S, tau0s[g]), np.full(S, lr_o), ends=ends,
                dtype="float64" if method == "gn" else r["gd_dtype"], **common)) for g, t in enumerate(tau0s)])
        res = {k: np.stack([np.stack([np.asarray(q[k]) for q in row]) for row in per]) for k in per[0][0]}
        res["converged"] = res["converged"].astype(bool)
        res["diverged"] = res["diverged"].astype(bool)
        res.update(lr=np.asarray(lrs), lr_ours=np.asarray(ours), ends=ends)
        out[method] = res
    out["rf_test"] = out["gn"]["lrfit"][0, :, :, 0]
    out["meta"] = {
        "resolved": r,
        "units": {"gn_lr": f"ours = paper x N/{A.REF_N}", "gd_lr": f"ours = paper x M/{A.REF_WIDTH}",
                  "eps0_ours": common["eps0"]},
        "dtype": {"gn": "float64", "gd": r["gd_dtype"], "metrics": "float64"},
        "data": "itlin.data.arbel_teacher_student, data seed = seed + s; student hidden layer tau0 * z_s",
    }
    return out


register(Experiment(NAME, InitParams, run, version="1",
                    doc="Arbel et al. Fig. 1 (left) and Fig. 4 (right): GN, GD and RF against tau0."))


# ------------------------------------------------------------------------------ analysis
def summary(rec) -> dict:
    """Plain arrays: ``tau0`` (G,), ``lr[m]``, ``trace[m][metric]`` (L, G, S, T), ``final[m][metric]``
    (L, G, S), ``diverged[m]``, ``converged[m]``, ``steps[m]`` (L, G, S), ``ends[m]``, ``rf``
    (G, S), ``best[m]`` (G,): the step size index with the lowest mean log test loss, and
    ``best_final[m][metric]`` (G, S) at that step size; ``match_margin``."""
    par = rec.params if hasattr(rec, "params") else rec["params"]
    out = {"tau0": np.asarray(rec["tau0"], np.float64), "rf": np.asarray(rec["rf_test"], np.float64),
           "lr": {}, "trace": {}, "final": {}, "diverged": {}, "converged": {}, "steps": {}, "ends": {},
           "best": {}, "best_final": {}, "best_trace": {}, "match_margin": float(par.get("match_margin", 0.1))}
    for m in ("gn", "gd"):
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
        out["trace"][m] = {k: np.asarray(rec[f"{m}/{k}"], np.float64) for k in A.METRICS}
        out["final"][m] = {k: A.final(v) for k, v in out["trace"][m].items()}
        out["diverged"][m] = np.asarray(rec[f"{m}/diverged"], bool)
        out["converged"][m] = np.asarray(rec[f"{m}/converged"], bool)
        out["steps"][m] = np.asarray(rec[f"{m}/steps"])
        out["ends"][m] = np.asarray(rec[f"{m}/ends"])
        test = np.moveaxis(out["final"][m]["test"], 0, 1)  # (G, L, S)
        div = np.moveaxis(out["diverged"][m], 0, 1)
        best = A.best_index(test, div)
        out["best"][m] = best
        g = np.arange(len(best))
        out["best_final"][m] = {k: v[best, g] for k, v in out["final"][m].items()}
        out["best_trace"][m] = {k: v[best, g] for k, v in out["trace"][m].items()}
    return out


def claims(s) -> list:
    """Their Section 5.3 claims on the initialisation, at the ends of the ``tau0`` grid (each
    method at its best step size, paired with RF by seed): learned features beat RF at the
    smallest ``tau0``; both match RF (within ``match_margin`` decades) at the largest; and the
    smallest eigenvalue of ``J J^T`` grows during GN training at the smallest ``tau0`` but stays
    (within the margin) where it started at the largest."""
    from ...verdicts import close, exceeds, paired_gap, verdict

    lo, hi = 0, len(s["tau0"]) - 1
    tl, th = A.fmt_lr(s["tau0"][lo]), A.fmt_lr(s["tau0"][hi])
    mm = s["match_margin"]
    rows = []
    for m in ("gn", "gd"):
        lr = A.fmt_lr(s["lr"][m][s["best"][m][lo]])
        gap = A.log_gap(s["rf"][lo], s["best_final"][m]["test"][lo])
        rows.append(verdict(f"τ0 = {tl}: {A.LABELS[m]} beats RF", "features are learned at small τ0 (Fig. 1 left)",
                            A.fmt_decades(gap), exceeds(gap, 0.0), gap.half,
                            f"log10 test loss of RF minus {A.LABELS[m]} at its best step {lr}"))
    for m in ("gn", "gd"):
        lr = A.fmt_lr(s["lr"][m][s["best"][m][hi]])
        gap = A.log_gap(s["best_final"][m]["test"][hi], s["rf"][hi])
        rows.append(verdict(f"τ0 = {th}: {A.LABELS[m]} matches RF", "the lazy (kernel) regime at large τ0",
                            A.fmt_decades(gap), close(gap, mm), gap.half,
                            f"within ±{mm:g} decades; best step {lr}"))
    sig = s["best_trace"]["gn"]["sigma_min"]  # (G, S, T)
    gap = paired_gap(A.log10(sig[lo, :, -1]), A.log10(sig[lo, :, 0]))
    rows.append(verdict(f"τ0 = {tl}: σ_min(JJᵀ) grows during GN training", "it increases, most at small τ0 "
                        "(Fig. 4 right)", A.fmt_decades(gap), exceeds(gap, 0.0), gap.half,
                        "log10 final minus initial, GN at its best step"))
    gap = paired_gap(A.log10(sig[hi, :, -1]), A.log10(sig[hi, :, 0]))
    rows.append(verdict(f"τ0 = {th}: σ_min(JJᵀ) stays put during GN training", "nearly constant at large τ0",
                        A.fmt_decades(gap), close(gap, mm), gap.half, f"within ±{mm:g} decades"))
    return rows


def settings_markdown(rec) -> str:
    r = rec.meta["resolved"]
    rows = {
        "τ0": ("1e-3 … 1e2", ", ".join(A.fmt_lr(v) for v in r["tau0s"])),
        "training / test points": ("500 / 10,000", f"{r['n_train']} / {r['n_test']:,}"),
        "student width M": ("5,000", f"{r['width']:,}"),
        "step sizes (their units)": ("1e-3 … 1e3 for both, best by test loss",
                                     "GN " + ", ".join(A.fmt_lr(v) for v in r["gn_lrs"]) + "; GD "
                                     + ", ".join(A.fmt_lr(v) for v in r["gd_lrs"]) + "; best by mean log test loss"),
        "step budget": ("1e5 GN / 1e6 GD", f"{r['gn_steps']:,} GN / {r['gd_steps']:,} GD"),
        "seeds": ("1 (Fig. 1), 5 (Fig. 3, SiLU)", f"{r['seeds']}"),
        "non-linearity": ("ReLU (Fig. 1), SiLU (Fig. 3)", r["activation"] + (f", β = {r['beta']:g}"
                                                                             if r["activation"] == "silu" else "")),
    }
    return A.settings_rows(r, rows)


def figure(s, metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 1 (left): final metrics at each method's best step size against ``tau0``, with RF
    (geometric mean over seeds and its 95% interval)."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, axes = plt.subplots(2, 2, figsize=(COLUMN_WIDTH, 5.6), sharex=True)
    t = s["tau0"]
    for ax, key in zip(axes.flat, metrics):
        for m in ("gn", "gd"):
            c, lo, hi = A.log_band(s["best_final"][m][key])
            ax.plot(t, c, "o-", color=A.COLOURS[m], ms=4, label=A.LABELS[m] + " (best step)")
            ax.fill_between(t, lo, hi, color=A.COLOURS[m], alpha=0.18, lw=0)
        if key in ("test", "lrfit"):
            c, lo, hi = A.log_band(s["rf"])
            ax.plot(t, c, "s--", color=A.COLOURS["rf"], ms=3.5, lw=1.2, label="RF")
            ax.fill_between(t, lo, hi, color=A.COLOURS["rf"], alpha=0.15, lw=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(A.METRIC_LABELS[key], fontsize=10.5)
    for ax in axes[1]:
        ax.set_xlabel(r"$\tau_0$ (std of the hidden layer at init)")
    axes[1, 0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def figure_sigma(s):
    """Fig. 4 (right): the smallest eigenvalue of ``J J^T`` along GN training at the best step,
    one line per ``tau0`` (darker: larger), relative to its initial value."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.3))
    cmap = plt.get_cmap("Reds")
    t = s["tau0"]
    x = s["ends"]["gn"] + 1
    for g, tau in enumerate(t):
        sig = s["best_trace"]["gn"]["sigma_min"][g]  # (S, T)
        colour = cmap(0.35 + 0.65 * g / max(len(t) - 1, 1))
        c, lo, hi = A.log_band(sig, axis=0)
        ax.plot(x, c, color=colour, label=f"τ0 = {A.fmt_lr(tau)}")
        rel = A.log_band(sig / sig[:, :1], axis=0)
        bx.plot(x, rel[0], color=colour)
        bx.fill_between(x, rel[1], rel[2], color=colour, alpha=0.15, lw=0)
    for a in (ax, bx):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("GN steps + 1")
    ax.set_title(r"$\sigma_{\min}(JJ^\top)$", fontsize=10.5)
    bx.set_title("relative to its initial value", fontsize=10.5)
    ax.legend(frameon=False, fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


__all__ = ["NAME", "SCALES", "InitParams", "claims", "figure", "figure_sigma", "run", "settings_markdown", "summary"]
