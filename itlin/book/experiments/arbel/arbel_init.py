"""Arbel et al. Figure 1 (left), Figure 3 (left) and Figure 4 (right): the scale of the initialisation.

The teacher-student task of their Section 5 (:mod:`~itlin.book.experiments.arbel._arbel`) for
every ``tau0`` of a grid (the std of the student's hidden layer at initialisation), every step
size of each method's grid and every seed; each method is reported at the step with the lowest
mean log *validation* loss per ``tau0`` (the paper picks by test loss), beside RF. The same runs
record the smallest eigenvalue of ``J J^T`` along GN training (their Fig. 4 right). Results
(``L`` steps, ``G`` values of ``tau0``, ``S`` seeds, ``T`` checkpoints), ``m`` in ``gn``, ``gd``:
``tau0`` (G,); ``m/lr``, ``m/lr_ours`` (L,); ``m/ends`` (T,); ``m/<metric>`` (L, G, S, T);
``m/steps``, ``m/converged``, ``m/diverged`` (L, G, S); ``rf_test`` (G, S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .. import Experiment, param, register
from . import _arbel as A

NAME = "arbel_init"
PAPER_TAU0 = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 12, "n_test": 200, "tau0s": (1e-3, 1.0, 100.0),
             "gn_lrs": (10.0, 100.0), "gd_lrs": (1e-2, 100.0), "gn_steps": 12, "gd_steps": 40, "checkpoints": 5},
    "default": {"seeds": 2, "width": 250, "n_train": 50, "n_test": 2000, "tau0s": PAPER_TAU0,
                "gn_lrs": (1.0, 10.0, 100.0), "gd_lrs": (0.1, 1.0, 10.0, 100.0, 1000.0), "gn_steps": 400,
                "gd_steps": 4000, "checkpoints": 12},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "tau0s": PAPER_TAU0,
              "gn_lrs": A.PAPER_LRS, "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS,
              "gd_steps": A.PAPER_GD_STEPS, "checkpoints": 40},
}


@dataclass(frozen=True)
class InitParams(A.SweepParams):
    SCALES = SCALES

    tau0: float = param(1e-3, "unused here: see tau0s", gt=0)
    tau0s: Optional[tuple[float, ...]] = param(None, "initial stds of the hidden layer, increasing", gt=0,
                                               label="τ0 grid", source="Fig. 1 left")


def run(params: InitParams, ctx) -> dict:
    data, z, common = A.prepare(params)
    out = {"tau0": np.asarray(params.tau0s, np.float64)}
    for m in ("gn", "gd"):
        out[m] = A.lr_grid(ctx, m, params, data, z, common, tau0s=params.tau0s,
                           ends=A.checkpoints(params.max_steps(m), params.checkpoints))
    out["rf_test"] = out["gn"]["lrfit"][0, :, :, 0]
    return out


def arrays(rec) -> dict:
    """``tau0`` (G,), ``rf`` (G, S), ``lr[m]``, ``ends[m]``; ``best[m]`` (G,): the step with the
    lowest mean log validation loss per ``tau0``; ``best_trace[m][metric]`` (G, S, T),
    ``best_final[m][metric]`` and ``best_diverged[m]`` (G, S) there; ``r``: the settings (``rec.settings``)."""
    out = {"tau0": np.asarray(rec["tau0"], np.float64), "rf": np.asarray(rec["rf_test"], np.float64),
           "r": rec.settings, **{k: {} for k in ("lr", "ends", "best", "best_trace", "best_final", "best_diverged")}}
    for m in ("gn", "gd"):
        div = np.asarray(rec[f"{m}/diverged"], bool)
        best = A.best_index(np.moveaxis(np.asarray(rec[f"{m}/val"])[..., -1], 0, 1), np.moveaxis(div, 0, 1))
        g = np.arange(len(best))
        out["lr"][m], out["ends"][m], out["best"][m] = np.asarray(rec[f"{m}/lr"]), np.asarray(rec[f"{m}/ends"]), best
        out["best_trace"][m] = {k: np.asarray(rec[f"{m}/{k}"], np.float64)[best, g] for k in A.METRICS}
        out["best_final"][m] = {k: v[..., -1] for k, v in out["best_trace"][m].items()}
        out["best_diverged"][m] = div[best, g]
    return out


def claims(rec) -> list:
    return judge_arrays(arrays(rec))


def judge_arrays(s) -> list:
    """Their Section 5.3 and App. C.1 claims at the ends of the ``tau0`` grid, each method at its
    step chosen on validation, paired with RF by seed (decades, margin ``effect``):
    ``init.small_<m>_beats_rf`` (learned features beat RF at the smallest ``tau0``),
    ``init.large_<m>_matches_rf`` (both match RF at the largest: the lazy regime), and for GN
    ``init.sigma_grows`` / ``init.sigma_stays``: ``sigma_min(J J^T)`` *relative to the mean
    eigenvalue* rises at the smallest ``tau0`` and stays at the largest (sigma_min itself rises
    from any readout that starts at zero, whatever the features do)."""
    e, t, F = s["r"].effect, s["tau0"], s["best_final"]
    tl, th = A.fmt_lr(t[0]), A.fmt_lr(t[-1])
    step = lambda m, g: A.fmt_lr(s["lr"][m][s["best"][m][g]])  # noqa: E731
    out = [A.decades(f"init.small_{m}_beats_rf", f"τ0 = {tl}: {A.LABELS[m]} beats RF", "features are learned at small "
                     "τ0: \"both GN and GD obtained a better test error than RF\" (§5.3, Fig. 1 left)", s["rf"][0],
                     F[m]["test"][0], e, diverged=s["best_diverged"][m][0],
                     measured=f"decades of test loss, log10 RF's minus {A.LABELS[m]}'s at step {step(m, 0)}")
           for m in ("gn", "gd")]
    out += [A.decades(f"init.large_{m}_matches_rf", f"τ0 = {th}: {A.LABELS[m]} matches RF", "the lazy (kernel) "
                      "regime at large τ0 (Fig. 1 left)", F[m]["test"][-1], s["rf"][-1], e, rule="close",
                      diverged=s["best_diverged"][m][-1],
                      measured=f"decades of test loss, log10 {A.LABELS[m]}'s at step {step(m, -1)} minus RF's")
            for m in ("gn", "gd")]
    sig, div, what = s["best_trace"]["gn"]["sigma_rel"], s["best_diverged"]["gn"], "σ_min(JJᵀ) relative to its mean"
    out += [A.decades("init.sigma_grows", f"τ0 = {tl}: {what} grows during GN training", "σ_min \"systematically "
                      "increases during training, especially in the feature learning regime\" (App. C.1, Fig. 4 right)",
                      sig[0, :, -1], sig[0, :, 0], e, diverged=div[0],
                      measured="decades of σ_min over the mean eigenvalue, log10 final minus initial"),
            A.decades("init.sigma_stays", f"τ0 = {th}: {what} stays during GN training", "nearly constant at large τ0 "
                      "(Fig. 4 right)", sig[-1, :, -1], sig[-1, :, 0], e, rule="close", diverged=div[-1],
                      measured="decades of σ_min over the mean eigenvalue, log10 final minus initial")]
    return out


def summary(rec) -> list:
    """Per ``tau0``: each method's step (chosen on validation) and test loss, RF's, and GN's relative sigma_min."""
    s = arrays(rec)
    sig = s["best_trace"]["gn"]["sigma_rel"]
    return [{"τ0": A.fmt_lr(t), **A.step_cells(s, g, {m: s["best_final"][m]["test"] for m in ("gn", "gd")}),
             "RF test loss": A.geo(s["rf"][g]), "GN σ_min/mean, final / initial": A.geo(sig[g, :, -1] / sig[g, :, 0])}
            for g, t in enumerate(s["tau0"])]


EXPERIMENT = register(Experiment(NAME, InitParams, run, version="2", summary=summary, claims=claims,
                                 axes=(("tau0", ("init_scale",)),) + A.lr_axes(inner=("init_scale",))))

__all__ = ["EXPERIMENT", "InitParams", "NAME", "PAPER_TAU0", "SCALES", "arrays", "claims", "judge_arrays", "run",
           "summary"]
