"""Arbel et al. Figures 1 (right), 2 and 6: GN and GD against the step size, and along the trajectory.

The teacher-student task of their Section 5 (:mod:`~itlin.book.experiments.arbel._arbel`): for
every step size of a grid (the paper's units) and every seed, one GN run and one GD run from the
student at ``tau0``, until the training loss falls to ``stop_rtol`` times its initial value or
the step budget ends, every metric recorded at log-spaced checkpoints. The same runs give the
final values (Fig. 1 right; Fig. 6 with ``activation="silu"``) and the trajectories (Fig. 2).

Results (``L`` step sizes, ``S`` seeds, ``T`` checkpoints), for ``m`` in ``gn``, ``gd``:
``m/lr``, ``m/lr_ours`` (L,); ``m/ends`` (T,); ``m/<metric>`` (L, S, T) for every metric of
:data:`~itlin.book.experiments.arbel._arbel.METRICS`; ``m/steps``, ``m/converged``,
``m/diverged`` (L, S); ``rf_test`` (S,), the random-features baseline.
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
    "default": {"seeds": 10, "width": 250, "n_train": 50, "n_test": 2000, "gn_lrs": A.PAPER_LRS,
                "gd_lrs": A.PAPER_LRS, "gn_steps": 400, "gd_steps": 4000, "checkpoints": 20},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "gn_lrs": A.PAPER_LRS,
              "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GD_STEPS, "checkpoints": 40},
}


@dataclass(frozen=True)
class StepsParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (
        Derived("full GN steps covered at the small step", lambda r: r["small_lr"] * r["gn_steps"] / A.REF_N,
                "λ × steps / 500; theirs: 2", after="gn_steps"),
        Derived("damping floor as run", lambda r: f"{A.eps0_ours(r['eps0'], width=r['width'], n_train=r['n_train']):.3g}",
                "ε0 (N/500)(5000/M)", after="eps0"),
    )

    small_lr: float = param(1e-2, "the small step of the claims (in both grids)", gt=0,
                            label="the claims' small step", source="Fig. 2 (GN's best)")
    large_lr: float = param(100.0, "the large step of the claims (in both grids)", gt=0,
                            label="the claims' large step", source="Fig. 2 (GD's best)")
    large_effect: float = param(0.3, "decades by which 'much lower' must exceed", gt=0,
                                label="margin of 'much lower' (decades)", source="ours: ×2")

    def check(self):
        super().check()
        r = self.resolved()
        for name in ("gn_lrs", "gd_lrs"):
            for what in ("small_lr", "large_lr"):
                if not any(math.isclose(r[what], v, rel_tol=1e-9) for v in r[name]):
                    raise ValueError(f"{what} = {r[what]:g} is not among {name} {r[name]}; the claims compare two "
                                     "step sizes of both grids")
        if not r["small_lr"] < r["large_lr"]:
            raise ValueError(f"small_lr = {r['small_lr']:g} must be smaller than large_lr = {r['large_lr']:g}")


def run(p: dict, ctx) -> dict:
    r = A.from_dict(StepsParams, p)
    data, z, common = A.prepare(r)
    N, M = r["n_train"], r["width"]
    out = {}
    for m in ("gn", "gd"):
        ours = [A.gn_lr(v, n_train=N) if m == "gn" else A.gd_lr(v, width=M) for v in r[f"{m}_lrs"]]
        ctx.say(f"{m.upper()}: {len(ours)} step sizes x {r['seeds']} seeds, at most {r[f'{m}_steps']} steps")
        res = A.lr_grid(ctx, m, r, data, z, common, tau0s=[r["tau0"]], ours=ours,
                        ends=A.checkpoints(r[f"{m}_steps"], r["checkpoints"]))
        out[m] = {k: (v if k in ("lr", "lr_ours", "ends") else v[:, 0]) for k, v in res.items()}
    out["rf_test"] = out["gn"]["lrfit"][0, :, 0]
    return out


def budget_step(lrs, steps: int, small_lr: float):
    """The smallest GD step ``lr`` of the grid at which our ``steps`` cover at least the
    ``lr x steps`` of the paper's GD at ``small_lr`` (its budget, 1e6 steps); None if none does."""
    ok = [v for v in np.asarray(lrs, np.float64) if v * steps >= small_lr * A.PAPER_GD_STEPS * (1 - 1e-9)]
    return min(ok) if ok else None


def small_steps_check(s, below: float = 1.0, method: str = "gn") -> dict:
    """Why the ``tau0`` sweep leaves out ``method``'s steps below ``below``: how many runs at those
    steps reached the stopping loss (``converged`` of ``runs``), the step chosen on validation
    (``best_lr``) and ``consistent``: none of them converged and the chosen step is not below."""
    lr = s["lr"][method]
    small = lr < below * (1 - 1e-9)
    conv = s["converged"][method][small]
    best = float(lr[s["best"][method]])
    return {"converged": int(conv.sum()), "runs": int(conv.size), "best_lr": best,
            "consistent": bool(small.any() and conv.sum() == 0 and best >= below * (1 - 1e-9))}


def judge_arrays(s) -> list:
    """The paper's step-size claims on :func:`~._arbel.lr_arrays` of a run, paired by seed, as
    log10 gaps (decades) that must exceed the margin ``effect`` (``large_effect`` for "much").

    Both activations: ``gn.step_lrfit`` (GN's Test-LRfit lower at the small step than at the
    large one; headline) and ``gd.step_lrfit`` (GD's lower at the large step). ReLU (Figs. 1-2):
    ``gn.step_wcd``, ``gd.step_wcd``. GD's small step is :func:`budget_step` (where our GD budget
    covers the ``lr x steps`` of the paper's at the small step; GD at the small step itself never
    moves in a short budget) when the grid has one below the large step. ReLU also: ``hidden.gn`` (GN at the small step: Test-LRfit below RF's
    at the last checkpoint at which the training loss is still within ``effect`` of its initial
    value, i.e. features learned before the readout fits; headline); ``hidden.gn_vs_gd`` (that
    gain larger for GN than for GD at the large step); ``gn_vs_gd.small`` (GN at the small step
    re-fits much lower than GD at its small step, :func:`budget_step`). SiLU (Fig. 6): ``best``, GN's best test loss (step chosen on
    validation) below GD's for ``beta > 1``, GD's below GN's otherwise. Ids carry the
    activation (:func:`~._arbel.variant`) when it is not ReLU."""
    r, F, div = s["r"], s["final"], s["diverged"]
    pre, word = A.variant(r)
    e, fs, fl = r["effect"], A.fmt_lr(r["small_lr"]), A.fmt_lr(r["large_lr"])
    ns, nl = A.at(s["lr"]["gn"], r["small_lr"]), A.at(s["lr"]["gn"], r["large_lr"])
    lr_b = budget_step(s["lr"]["gd"], r["gd_steps"], r["small_lr"])
    lr_b = lr_b if lr_b is not None and lr_b < r["large_lr"] else None
    ds, dl = A.at(s["lr"]["gd"], lr_b or r["small_lr"]), A.at(s["lr"]["gd"], r["large_lr"])
    fb = A.fmt_lr(lr_b or r["small_lr"])
    budget = f"; GD at {fb} covers the λ × steps of the paper's GD at {fs}" if lr_b else ""
    paper_gn, paper_gd = "smaller GN steps learn features that generalise better", "GD's features improve with the step"
    out = [A.decades(pre + "gn.step_lrfit", f"{word}GN: Test-LRfit lower at step {fs} than at {fl}",
                     paper_gn + " (Fig. 1 right, Fig. 6)", F["gn"]["lrfit"][nl], F["gn"]["lrfit"][ns], e,
                     diverged=div["gn"][ns] | div["gn"][nl], measured="log10 at the large step minus at the small",
                     headline=not pre),
           A.decades(pre + "gd.step_lrfit", f"{word}GD: Test-LRfit lower at step {fl} than at {fb}",
                     paper_gd + " (Fig. 1 right, Fig. 6)", F["gd"]["lrfit"][ds], F["gd"]["lrfit"][dl], e,
                     diverged=div["gd"][ds] | div["gd"][dl],
                     measured="log10 at the small step minus at the large" + budget)]
    if r["activation"] != "relu":
        i, j = s["best"]["gn"], s["best"]["gd"]
        gn_wins = r["beta"] > 1
        a, b = (F["gd"]["test"][j], F["gn"]["test"][i]) if gn_wins else (F["gn"]["test"][i], F["gd"]["test"][j])
        w, l = ("GN", "GD") if gn_wins else ("GD", "GN")
        out.append(A.decades(pre + "best", f"{word}{w}'s best test loss below {l}'s",
                             "GN outperforms GD at β = 1e6, GD outperforms GN at β = 1 (Fig. 6)", a, b, e,
                             diverged=div["gn"][i] | div["gd"][j],
                             measured=f"steps chosen on validation: GN {A.fmt_lr(s['lr']['gn'][i])}, "
                                      f"GD {A.fmt_lr(s['lr']['gd'][j])}"))
        return out
    out += [A.decades("gn.step_wcd", f"GN: WCD lower at step {fs} than at {fl}", "WCD grows with the GN step (Fig. 1 "
                      "right)", F["gn"]["wcd"][nl], F["gn"]["wcd"][ns], e, diverged=div["gn"][ns] | div["gn"][nl],
                      measured="Eq. 9, log10 at the large step minus at the small"),
            A.decades("gd.step_wcd", f"GD: WCD lower at step {fl} than at {fb}", "WCD falls with the GD step "
                      "(Fig. 1 right)", F["gd"]["wcd"][ds], F["gd"]["wcd"][dl], e,
                      diverged=div["gd"][ds] | div["gd"][dl], measured="Eq. 9, log10 at the small step minus at the "
                                                                       "large" + budget)]
    T = s["trace"]
    gain = {m: A.hidden_gain(T[m]["train"][i], T[m]["lrfit"][i], s["rf"], e) for m, i in (("gn", ns), ("gd", dl))}
    out += [A.decades("hidden.gn", f"GN at step {fs}: features beat RF's before the readout fits",
                      "hidden learning: the training loss barely moves while Test-LRfit falls (Fig. 2)",
                      gain["gn"], np.zeros_like(gain["gn"]), e, log=False, diverged=div["gn"][ns], headline=True,
                      measured="log10 RF minus Test-LRfit at the last checkpoint with the training loss within the "
                               "margin of its initial value"),
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


EXPERIMENT = register(Experiment(
    NAME, StepsParams, run, version="2", summary=summary, claims=claims,
    doc="Arbel et al. Fig. 1 (right), Fig. 2 and Fig. 6: GN and GD against the step size from a small tau0."))

__all__ = ["EXPERIMENT", "NAME", "SCALES", "StepsParams", "budget_step", "claims", "judge_arrays", "run",
           "small_steps_check", "summary"]
