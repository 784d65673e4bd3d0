"""Arbel et al. Figure 4 (left) (Appendix C.1): test loss against the number of hidden units.

The teacher-student task of their Section 5 (:mod:`~itlin.book.experiments.arbel._arbel`) at one
``N`` and ``tau0`` (their Fig. 4 left: ``N = 2000``, ``tau0 = 1``, SiLU, 5 seeds) for every width
``M`` of a grid: GN and GD at the step of a small grid with the lowest mean log validation loss
per ``M``, and RF. Hidden directions are nested in ``M``; the data of a seed do not change. The
grid starts at ``MIN_RATIO`` times ``N``, away from ``M = N``, where the minimum-norm RF fit
interpolates with a badly conditioned feature matrix and its test loss peaks (RF falls just after
it whatever happens further out). Results (``W`` widths, ``L`` steps, ``S`` seeds), ``m`` in
``gn``, ``gd``: ``width`` (W,), ``m/lr`` (L,), ``m/<metric>``, ``m/steps``, ``m/converged``,
``m/diverged`` (W, L, S) final values; ``rf_test`` (W, S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, param, register
from ....metrics import log_slopes
from . import _arbel as A

NAME = "arbel_width"

SCALES = {
    "tiny": {"seeds": 2, "widths": (24, 48), "n_train": 6, "n_test": 200, "gn_lrs": (100.0,), "gd_lrs": (1000.0,),
             "gn_steps": 10, "gd_steps": 30},
    "default": {"seeds": 2, "widths": (80, 160, 320, 640), "n_train": 20, "n_test": 2000, "gn_lrs": (10.0, 100.0),
                "gd_lrs": (1000.0,), "gn_steps": 300, "gd_steps": 3000},
    # The paper's text gives N = 2000 but not its widths: a factor-of-two grid from 4 N.
    "paper": {"seeds": 5, "widths": (8000, 16000, 32000), "n_train": 2000, "n_test": 10000, "gn_lrs": A.PAPER_LRS,
              "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GD_STEPS},
}

#: the smallest width of the grid, in multiples of N (away from the interpolation peak at M = N)
MIN_RATIO = 4


@dataclass(frozen=True)
class WidthParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (A.slope_margin_row("widths", "M"),)

    width: Optional[int] = param(None, "unused here: see widths", min=1)
    widths: Optional[tuple[int, ...]] = param(None, f"hidden units M, increasing, from {MIN_RATIO} n_train", min=1,
                                              label="student widths M", source="Fig. 4 left (not listed)")
    tau0: float = param(1.0, "std of the hidden layer at initialisation", gt=0, label="τ0", source="Fig. 4 left")
    activation: Literal["relu", "silu"] = param("silu", "the teacher's and the student's non-linearity",
                                                label="non-linearity", source="App. C.1")

    def check(self):
        super().check()
        r = self.resolved()
        if r["widths"][0] < MIN_RATIO * r["n_train"]:
            raise ValueError(f"widths must start at {MIN_RATIO} n_train = {MIN_RATIO * r['n_train']} or more (got "
                             f"{r['widths'][0]}): near M = n_train RF's minimum-norm fit peaks")


def run(params: WidthParams, ctx) -> dict:
    S, N = params.seeds, params.n_train
    data, z, common = A.prepare(params, width=max(params.widths))
    per = {"gn": [], "gd": []}
    for m in ("gn", "gd"):
        lrs = params.lrs(m)
        li, si = (a.ravel() for a in np.meshgrid(np.arange(len(lrs)), np.arange(S), indexing="ij"))
        ctx.say(f"{m.upper()}: M in {params.widths}, {len(lrs)} step sizes x {S} seeds (N={N}, tau0={params.tau0:g})")
        for M in params.widths:
            lr_o = np.asarray([A.gn_lr(lrs[i], n_train=N) if m == "gn" else A.gd_lr(lrs[i], width=M) for i in li])
            kw = {**common, "width": M, "eps0": A.eps0_ours(params.eps0, width=M, n_train=N)}
            res = ctx.stage(f"{m} M={M}", lambda m=m, lr_o=lr_o, kw=kw: A.sweep(
                m, data, z, si, np.full(len(si), params.tau0), lr_o, ends=(0, params.max_steps(m)),
                dtype=params.precision(m), **kw))
            per[m].append({k: v.reshape((len(lrs), S) + v.shape[1:]) for k, v in res.items()})
    return {**A.finals(per, params), "width": np.asarray(params.widths)}


def arrays(rec) -> dict:
    """``width`` (W,), ``rf`` (W, S), ``best[m]`` (W,) step indices (lowest mean log validation
    loss, diverged excluded), ``test[m]``, ``converged[m]``, ``diverged[m]`` (W, S) there,
    ``lr[m]`` and ``r``."""
    return {"width": np.asarray(rec["width"], np.float64), "rf": np.asarray(rec["rf_test"], np.float64),
            "r": rec.settings, **A.chosen(rec, 1)}


def claims(rec) -> list:
    return judge_arrays(arrays(rec))


def judge_arrays(s) -> list:
    """Appendix C.1 (Fig. 4 left), slopes of log10 test loss per decade of ``M`` per seed against
    :func:`~._arbel.slope_margin`: ``width.<m>_stable`` (within it; a diverged run counts against
    it) and ``width.rf_falls`` (RF's slope below minus the margin)."""
    w, sm = s["width"], A.slope_margin(s["r"].effect, s["r"].widths)
    rng = f"M = {w[0]:g} to {w[-1]:g}"
    out = []
    for m in ("gn", "gd"):
        sl = log_slopes(w, s["test"][m])
        out.append(A.decades(f"width.{m}_stable", f"{A.LABELS[m]}'s test loss stable in M ({rng})",
                             "the generalisation error stays stable as over-parameterisation grows (Fig. 4 left)",
                             sl, np.zeros_like(sl), sm, rule="close", log=False, diverged=s["diverged"][m].any(0),
                             unit="per decade of M", measured="slope of log10 test loss"))
    sl = log_slopes(w, s["rf"])
    out.append(A.decades("width.rf_falls", f"RF's test loss falls with M ({rng})", "RF improves with "
                         "over-parameterisation (Fig. 4 left)", np.zeros_like(sl), sl, sm, log=False,
                         unit="per decade of M", measured="minus the slope of log10 test loss"))
    return out


def summary(rec) -> list:
    """Per width: each method's step (chosen on validation), test loss and converged runs; RF's test loss."""
    s = arrays(rec)
    return [{"M": int(M), **A.step_cells(s, i, s["test"]), "RF test loss": A.geo(s["rf"][i]),
             **{f"{A.LABELS[m]} converged": f"{s['converged'][m][i].sum()} of {s['converged'][m][i].size}"
                for m in ("gn", "gd")}} for i, M in enumerate(s["width"])]


EXPERIMENT = register(Experiment(NAME, WidthParams, run, version="2", summary=summary, claims=claims, axes=(
    ("width", ("hidden_width",)), *A.lr_axes(outer=("hidden_width",), checkpoints=False))))

__all__ = ["EXPERIMENT", "MIN_RATIO", "NAME", "SCALES", "WidthParams", "arrays", "claims", "judge_arrays", "run",
           "summary"]
