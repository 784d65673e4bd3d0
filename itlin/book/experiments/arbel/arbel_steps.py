"""Arbel et al. Figures 1 (right), 2 and 6: GN and GD against the step size, and along the trajectory.

The teacher-student task of their Section 5 (:mod:`~itlin.book.experiments.arbel._arbel`): one GN
and one GD run per step size (the paper's units) and seed from the student at ``tau0``, every
metric recorded at log-spaced checkpoints: the final values (Fig. 1 right; Fig. 6 with SiLU) and
the trajectories (Fig. 2). Results (``L`` steps, ``S`` seeds, ``T`` checkpoints), ``m`` in ``gn``,
``gd``: ``m/lr``, ``m/lr_ours`` (L,); ``m/ends`` (T,); ``m/<metric>`` (L, S, T) of
:data:`~._arbel.METRICS`; ``m/steps``, ``m/converged``, ``m/diverged`` (L, S); ``rf_test`` (S,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import Derived, Experiment, param, register
from . import _arbel as A

NAME = "arbel_steps"

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 12, "n_test": 200, "gn_lrs": (1e-2, 1.0, 100.0),
             "gd_lrs": (1e-2, 1.0, 100.0), "gn_steps": 12, "gd_steps": 40, "checkpoints": 5},
    "default": {"seeds": 2, "width": 250, "n_train": 50, "n_test": 2000, "gn_lrs": A.PAPER_LRS,
                "gd_lrs": A.PAPER_LRS, "gn_steps": 400, "gd_steps": 4000, "checkpoints": 20},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "gn_lrs": A.PAPER_LRS,
              "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GD_STEPS, "checkpoints": 40},
}


@dataclass(frozen=True)
class StepsParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (Derived("full GN steps covered at the small step", lambda r: r["small_lr"] * r["gn_steps"] / A.REF_N,
                       "λ × steps / 500", after="gn_steps"),)

    small_lr: float = param(1e-2, "the small step of the claims (in both grids)", gt=0,
                            label="the claims' small step", source="Fig. 2 (GN's best)")
    large_lr: float = param(100.0, "the large step of the claims (in both grids)", gt=0,
                            label="the claims' large step", source="Fig. 2 (GD's best)")
    large_effect: float = param(0.3, "decades by which 'much lower' must exceed", gt=0,
                                label="margin of 'much lower' (decades)", source="ours: ×2")

    def check(self):
        super().check()
        r = self.resolved()
        for what in ("small_lr", "large_lr"):  # and in GD's (ArbelParams.check: GN's)
            if not any(math.isclose(r[what], v, rel_tol=1e-9) for v in r["gd_lrs"]):
                raise ValueError(f"{what} = {r[what]:g} is not among gd_lrs {r['gd_lrs']}")


def run(r: dict, ctx) -> dict:
    return A.lr_sweep(ctx, r, *A.prepare(r))


def budget_step(lrs, steps: int, small_lr: float):
    """The smallest GD step at which ``steps`` cover the ``lr x steps`` of the paper's GD at ``small_lr``."""
    ok = [v for v in np.asarray(lrs, np.float64) if v * steps >= small_lr * A.PAPER_GD_STEPS * (1 - 1e-9)]
    return min(ok) if ok else None


def small_steps_check(s, below: float = 1.0, method: str = "gn") -> dict:
    """Why the ``tau0`` sweep leaves out GN's steps below ``below``: ``converged`` of ``runs`` at those
    steps, the step chosen on validation ``best_lr``, and ``consistent`` (none converged, none chosen)."""
    lr = s["lr"][method]
    small = lr < below * (1 - 1e-9)
    conv, best = s["converged"][method][small], float(lr[s["best"][method]])
    return {"converged": int(conv.sum()), "runs": int(conv.size), "best_lr": best,
            "consistent": bool(small.any() and conv.sum() == 0 and best >= below * (1 - 1e-9))}


def judge_arrays(s) -> list:
    """The step-size claims on :func:`~._arbel.lr_arrays` of a run: log10 gaps paired by seed that
    must exceed ``effect`` (``large_effect`` for "much"). GD's small step is :func:`budget_step`
    when the grid has one below the large step (GD at the small step itself does not move in a
    short budget). Both activations: ``gn.step_lrfit`` (GN's Test-LRfit lower at the small step
    than at the large; headline), ``gd.step_lrfit`` (GD's lower at the large step). ReLU:
    ``gn.step_wcd``, ``gd.step_wcd``; ``hidden.gn`` (GN at the small step: Test-LRfit below RF's
    at the last checkpoint with the training loss still within ``effect`` of its initial value,
    :func:`~._arbel.hidden_gain`; headline); ``hidden.gn_vs_gd`` (that gain larger than GD's at the
    large step); ``gn_vs_gd.small`` (GN's Test-LRfit much lower than GD's at its small step). SiLU
    (Fig. 6): ``best``, GN's test loss at its validation-chosen step below GD's for ``beta > 1``,
    GD's below GN's otherwise. Ids carry the activation when it is not ReLU."""
    r, F, div = s["r"], s["final"], s["diverged"]
    pre, word = A.variant(r)
    e, fs, fl = r["effect"], A.fmt_lr(r["small_lr"]), A.fmt_lr(r["large_lr"])
    ns, nl = A.at(s["lr"]["gn"], r["small_lr"]), A.at(s["lr"]["gn"], r["large_lr"])
    lr_b = budget_step(s["lr"]["gd"], r["gd_steps"], r["small_lr"])
    lr_b = lr_b if lr_b is not None and lr_b < r["large_lr"] else None
    ds, dl = A.at(s["lr"]["gd"], lr_b or r["small_lr"]), A.at(s["lr"]["gd"], r["large_lr"])
    fb = A.fmt_lr(lr_b or r["small_lr"])
    budget = f"; GD at {fb} covers the λ × steps of the paper's GD at {fs}" if lr_b else ""

    def pair(id, claim, paper, m, key, hi, lo, margin=e, **kw):  # key at step hi minus at step lo, log10
        return A.decades(id, claim, paper, F[m][key][hi], F[m][key][lo], margin, diverged=div[m][hi] | div[m][lo], **kw)

    out = [pair(pre + "gn.step_lrfit", f"{word}GN: Test-LRfit lower at step {fs} than at {fl}", "smaller GN steps "
                "learn features that generalise better (Fig. 1 right, Fig. 6)", "gn", "lrfit", nl, ns,
                measured="log10 at the large step minus at the small", headline=not pre),
           pair(pre + "gd.step_lrfit", f"{word}GD: Test-LRfit lower at step {fl} than at {fb}", "GD's features "
                "improve with the step (Fig. 1 right, Fig. 6)", "gd", "lrfit", ds, dl,
                measured="log10 at the small step minus at the large" + budget)]
    if r["activation"] != "relu":
        i, j = s["best"]["gn"], s["best"]["gd"]
        (w, a), (l, b) = (("GN", F["gn"]["test"][i]), ("GD", F["gd"]["test"][j]))[::1 if r["beta"] > 1 else -1]
        return out + [A.decades(pre + "best", f"{word}{w}'s best test loss below {l}'s", "GN outperforms GD at "
                                "β = 1e6, GD outperforms GN at β = 1 (Fig. 6)", b, a, e,
                                diverged=div["gn"][i] | div["gd"][j], measured=f"steps chosen on validation: GN "
                                f"{A.fmt_lr(s['lr']['gn'][i])}, GD {A.fmt_lr(s['lr']['gd'][j])}")]
    T = s["trace"]
    gain = {m: A.hidden_gain(T[m]["train"][i], T[m]["lrfit"][i], s["rf"], e) for m, i in (("gn", ns), ("gd", dl))}
    out += [pair("gn.step_wcd", f"GN: WCD lower at step {fs} than at {fl}", "WCD grows with the GN step (Fig. 1 right)",
                 "gn", "wcd", nl, ns, measured="Eq. 9, log10 at the large step minus at the small"),
            pair("gd.step_wcd", f"GD: WCD lower at step {fl} than at {fb}", "WCD falls with the GD step (Fig. 1 right)",
                 "gd", "wcd", ds, dl, measured="Eq. 9, log10 at the small step minus at the large" + budget),
            A.decades("hidden.gn", f"GN at step {fs}: features beat RF's before the readout fits", "hidden learning: "
                      "the training loss barely moves while Test-LRfit falls (Fig. 2)", gain["gn"], 0 * gain["gn"], e,
                      log=False, diverged=div["gn"][ns], headline=True, measured="log10 RF minus Test-LRfit at the "
                      "last checkpoint with the training loss within the margin of its initial value"),
            A.decades("hidden.gn_vs_gd", f"features learned before the readout fits: GN ({fs}) more than GD ({fl})",
                      "GD's test losses before and after re-fitting stay close (Fig. 2)", gain["gn"], gain["gd"], e,
                      log=False, diverged=div["gn"][ns] | div["gd"][dl], measured="the same gain, GN minus GD")]
    if lr_b is not None:
        out.append(A.decades("gn_vs_gd.small", f"GN at step {fs}: Test-LRfit much lower than GD's at step {fb}",
                             "after re-fitting, much lower for GN than for GD at small steps (Section 5.3)",
                             F["gd"]["lrfit"][ds], F["gn"]["lrfit"][ns], r["large_effect"],
                             diverged=div["gn"][ns] | div["gd"][ds], measured="log10, GD minus GN" + budget))
    return out


def claims(rec) -> list:
    return judge_arrays(A.lr_arrays(rec))


def summary(rec) -> list:
    return A.lr_rows(A.lr_arrays(rec))


EXPERIMENT = register(Experiment(NAME, StepsParams, run, version="2", summary=summary, claims=claims))

__all__ = ["EXPERIMENT", "NAME", "SCALES", "StepsParams", "budget_step", "claims", "judge_arrays", "run",
           "small_steps_check", "summary"]
