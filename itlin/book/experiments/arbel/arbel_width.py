"""Arbel et al. Figure 4 (left) (Appendix C.1): test loss against the number of hidden units.

The teacher-student task of their Section 5 (:mod:`itlin.book.experiments.arbel._arbel`) at one
training-set size and ``tau0`` (their Fig. 4 left: ``N = 2000``, ``tau0 = 1``, SiLU, 5 seeds) for
every width ``M`` of a grid: GN and GD at each step size of a small grid (the best by mean log
test loss is reported, as the paper selects) and the random-features baseline (RF). The
student's hidden directions are nested in ``M`` (a wider student keeps the units of a narrower
one and adds new ones); the teacher and the data of a seed do not change with ``M``.

The paper's claim (C.1, "Effect of over-parameterization"): the test error of GN and GD stays
stable as ``M`` grows, once the network can fit the data; RF's improves with ``M``.

Results (``W`` widths, ``L`` step sizes, ``S`` seeds), for ``m`` in ``gn``, ``gd``: ``width`` (W,),
``m/lr`` (L,), ``m/<metric>`` (W, L, S) final values of ``train``, ``test``, ``lrfit``, ``wcd``,
``wcd_code``, ``sigma_min``; ``m/steps``, ``m/converged``, ``m/diverged`` (W, L, S); ``rf_test``
(W, S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Params, param, register
from . import _arbel as A

NAME = "arbel_width"

SCALES = {
    "tiny": {"seeds": 2, "widths": (12, 24), "n_train": 10, "n_test": 200, "gn_lrs": (100.0,), "gd_lrs": (1000.0,),
             "gn_steps": 10, "gd_steps": 30},
    "default": {"seeds": 10, "widths": (40, 80, 160, 320), "n_train": 40, "n_test": 2000, "gn_lrs": (10.0, 100.0),
                "gd_lrs": (1000.0,), "gn_steps": 400, "gd_steps": 4000},
    # The paper's text gives N = 2000 but not its grid of widths: a factor-of-two grid up to 8 times N.
    "paper": {"seeds": 5, "widths": (2000, 4000, 8000, 16000), "n_train": 2000, "n_test": 10000,
              "gn_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
              "gd_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), "gn_steps": 100_000, "gd_steps": 1_000_000},
}


@dataclass(frozen=True)
class WidthParams(Params):
    SCALES = SCALES

    seeds: Optional[int] = param(None, "independent runs (teacher, data and student all change)", min=1)
    widths: Optional[tuple[int, ...]] = param(None, "hidden units M, increasing, each at least n_train", min=1)
    n_train: Optional[int] = param(None, "training points N (2000 in the paper's Fig. 4 left)", min=1)
    n_test: Optional[int] = param(None, "test points (10,000 in the paper)", min=1)
    tau0: float = param(1.0, "std of the hidden layer at initialisation (1 in the paper's Fig. 4 left)", gt=0)
    gn_lrs: Optional[tuple[float, ...]] = param(None, "GN step sizes, the paper's units at N = 500", gt=0)
    gd_lrs: Optional[tuple[float, ...]] = param(None, "GD step sizes, the paper's units", gt=0)
    gn_steps: Optional[int] = param(None, "most GN steps per run (1e5 in the paper)", min=1)
    gd_steps: Optional[int] = param(None, "most GD steps per run (1e6 in the paper)", min=1)
    activation: Literal["relu", "silu"] = param("silu", "the teacher's and the student's non-linearity (C.1: SiLU)")
    beta: float = param(1.0, "SiLU temperature: x * sigmoid(beta x)", gt=0)
    eps0: float = param(1e-7, "damping floor, the paper's units", min=0)
    stop_rtol: float = param(1e-8, "stop when the training loss is below this times its initial value", min=0, lt=1)
    flat_margin: float = param(0.1, "slopes of log test loss in log M within ± this are 'stable'", gt=0)

    def check(self):
        r = self.resolved()
        ws = list(r["widths"])
        if len(ws) < 2 or any(b <= a for a, b in zip(ws, ws[1:])):
            raise ValueError(f"widths must be at least two increasing sizes, got {ws}")
        if ws[0] < r["n_train"]:
            raise ValueError(f"width {ws[0]} is below n_train = {r['n_train']}: RF and Test-LRfit need at least as "
                             "many hidden units as training points")


def run(p: dict, ctx) -> dict:
    r = WidthParams(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}).resolved()
    S, N = r["seeds"], r["n_train"]
    ws = [int(w) for w in r["widths"]]
    data = A.teacher_data(S, r["seed"], n_train=N, n_test=r["n_test"], activation=r["activation"], beta=r["beta"])
    z_all = A.hidden_directions(S, r["seed"], ws[-1], A.DIM + 1)  # nested: width M uses the first M units
    out = {"width": np.asarray(ws)}
    for method in ("gn", "gd"):
        lrs = [float(v) for v in r[f"{method}_lrs"]]
        li, si = A.grid(len(lrs), S)
        ctx.say(f"{method.upper()}: M in {ws}, {len(lrs)} step sizes x {S} seeds (N={N}, tau0={r['tau0']:g})")
        per_w = []
        for M in ws:
            z = np.ascontiguousarray(z_all[:, :M])
            lr_o = np.asarray([A.gn_lr(lrs[i], n_train=N) if method == "gn" else A.gd_lr(lrs[i], width=M) for i in li])
            common = dict(width=M, dim=A.DIM, activation=r["activation"], beta=r["beta"],
                          eps0=A.eps0_ours(r["eps0"], width=M, n_train=N), stop_rtol=r["stop_rtol"],
                          ends=(0, r[f"{method}_steps"]), dtype="float64" if method == "gn" else "float32")
            res = ctx.stage(f"{method} M={M}", lambda z=z, lr_o=lr_o, common=common: A.sweep(
                method, data, z, si, np.full(len(si), r["tau0"]), lr_o, **common))
            per_w.append({k: np.asarray(v).reshape((len(lrs), S) + np.asarray(v).shape[1:]) for k, v in res.items()})
        res = {k: np.stack([q[k] for q in per_w]) for k in per_w[0]}
        out[method] = A.final_results(res, lrs)
    return A.with_rf_and_units(out, r)


register(Experiment(NAME, WidthParams, run, version="1",
                    doc="Arbel et al. Fig. 4 (left): test loss against the number of hidden units."))


# ------------------------------------------------------------------------------ analysis
def summary(rec) -> dict:
    """``width`` (W,), ``rf`` (W, S), ``best[m]`` (W,) step-size indices (lowest mean log test loss,
    diverged excluded), ``test[m]``, ``lrfit[m]``, ``converged[m]`` (W, S) at the best step,
    ``lr[m]`` and ``flat_margin``."""
    par = rec.params if hasattr(rec, "params") else rec["params"]
    out = {"width": np.asarray(rec["width"], np.float64), "rf": np.asarray(rec["rf_test"], np.float64),
           "best": {}, "test": {}, "lrfit": {}, "converged": {}, "lr": {},
           "flat_margin": float(par.get("flat_margin", 0.1))}
    for m in ("gn", "gd"):
        test = np.asarray(rec[f"{m}/test"], np.float64)  # (W, L, S)
        div = np.asarray(rec[f"{m}/diverged"], bool)
        best = A.best_index(test, div)  # (W,)
        w = np.arange(test.shape[0])
        out["best"][m] = best
        out["test"][m] = test[w, best]
        out["lrfit"][m] = np.asarray(rec[f"{m}/lrfit"], np.float64)[w, best]
        out["converged"][m] = np.asarray(rec[f"{m}/converged"], bool)[w, best]
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
    return out


def claims(s) -> list:
    """Appendix C.1 (Fig. 4 left): GN's and GD's test losses are stable in ``M`` (the per-seed slope
    of log10 test loss against log10 ``M`` lies within ``±flat_margin``: holds when its 95% interval
    does, does not hold when the interval lies outside); RF's test loss falls with ``M`` (its
    slope's interval lies below 0)."""
    from ...verdicts import close, exceeds, paired_gap, verdict
    from .arbel_samples import _fmt_slope, slopes

    w, margin = s["width"], s["flat_margin"]
    rng = f"M = {w[0]:g} to {w[-1]:g}"
    rows = []
    for m in ("gn", "gd"):
        sl = slopes(w, s["test"][m])
        gap = paired_gap(sl, np.zeros_like(sl))
        rows.append(verdict(f"{A.LABELS[m]}'s test loss stable in M ({rng})",
                            "the generalisation error stays stable as over-parameterisation grows (Fig. 4 left)",
                            _fmt_slope(gap), close(gap, margin), gap.half,
                            f"slope of log10 test loss per decade of M; stable: within ±{margin:g}"))
    sl = slopes(w, s["rf"])
    gap = paired_gap(np.zeros_like(sl), sl)
    rows.append(verdict(f"RF's test loss falls with M ({rng})", "RF improves with over-parameterisation (Fig. 4 left)",
                        _fmt_slope(paired_gap(sl, np.zeros_like(sl))), exceeds(gap, 0.0), gap.half,
                        "slope of log10 test loss per decade of M; holds if its interval lies below 0"))
    return rows


def figure(s):
    """Test loss against ``M`` (log-log) for GN, GD and RF: geometric mean over seeds with its 95% interval."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH
    from .arbel_samples import slopes

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH * 0.6, 3.2))
    w = s["width"]
    for m in ("gn", "gd", "rf"):
        vals = s["rf"] if m == "rf" else s["test"][m]
        c, lo, hi = A.log_band(vals)
        sl = float(np.mean(slopes(w, vals)))
        ax.plot(w, c, ("s--" if m == "rf" else "o-"), color=A.COLOURS[m], ms=4, lw=1.2,
                label=f"{A.LABELS[m]} (slope {sl:+.2f})")
        ax.fill_between(w, lo, hi, color=A.COLOURS[m], alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(w, [f"{v:g}" for v in w])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("hidden units M")
    ax.set_ylabel("test loss")
    ax.legend(frameon=False, fontsize=8.5)
    fig.tight_layout()
    return fig


__all__ = ["NAME", "SCALES", "WidthParams", "claims", "figure", "run", "summary"]
