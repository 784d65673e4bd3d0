"""Arbel et al. Figure 3 (right) and Figure 5 (Appendix C.2): test loss against the number of training points.

The teacher-student task of their Section 5 (:mod:`~itlin.book.experiments.arbel._arbel`) for
every training-set size ``N`` of a grid, ``tau0`` in ``tau0s`` and every seed: GN and GD at each
step of a small grid (the one with the lowest mean log validation loss per ``N`` and ``tau0`` is
reported) and RF. Training sets of one seed are nested (teacher, test set and initial hidden
layer do not change with ``N``); GN steps are in the paper's units at ``N = 500``. Results (``K``
sizes, ``L`` steps, ``G`` values of ``tau0``, ``S`` seeds), ``m`` in ``gn``, ``gd``: ``n_train``
(K,), ``tau0`` (G,), ``m/lr`` (L,), ``m/<metric>``, ``m/steps``, ``m/converged``, ``m/diverged``
(K, L, G, S) final values; ``rf_test`` (K, G, S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .. import Experiment, param, register
from ....metrics import log_slopes
from . import _arbel as A

NAME = "arbel_samples"

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_trains": (8, 12, 16), "n_test": 200, "gn_lrs": (100.0,),
             "gd_lrs": (100.0,), "gn_steps": 10, "gd_steps": 30},
    "default": {"seeds": 2, "width": 256, "n_trains": (16, 32, 64, 128), "n_test": 2000, "gn_lrs": (10.0, 100.0),
                "gd_lrs": (1000.0,), "gn_steps": 200, "gd_steps": 3000},
    "paper": {"seeds": 5, "width": 5000, "n_trains": (100, 200, 500, 1000, 1500), "n_test": 10000,
              "gn_lrs": A.PAPER_LRS, "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GD_STEPS},
}


@dataclass(frozen=True)
class SamplesParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (A.slope_margin_row("n_trains", "N"),)

    n_train: Optional[int] = param(None, "unused here: see n_trains", min=1)
    tau0: float = param(1e-3, "unused here: see tau0s", gt=0)
    n_trains: Optional[tuple[int, ...]] = param(None, "training-set sizes, increasing", min=1,
                                                label="training points N", source="App. C.2")
    tau0s: tuple[float, ...] = param((1e-3, 1.0), "initial stds of the hidden layer (feature learning, kernel)", gt=0,
                                     label="τ0", source="Fig. 5")


def run(params: SamplesParams, ctx) -> dict:
    S, M, tau0s = params.seeds, params.width, np.asarray(params.tau0s, np.float64)
    ti, si = (a.ravel() for a in np.meshgrid(np.arange(len(tau0s)), np.arange(S), indexing="ij"))
    per = {"gn": [], "gd": []}
    for n in params.n_trains:
        data, z, common = A.prepare(params, n_train=n)
        for m in ("gn", "gd"):
            row = []
            for lr in params.lrs(m):
                lr_o = A.gn_lr(lr, n_train=n) if m == "gn" else A.gd_lr(lr, width=M)
                res = ctx.stage(f"{m} N={n} lr={lr:.12g}", lambda m=m, data=data, z=z, common=common, lr_o=lr_o:
                                A.sweep(m, data, z, si, tau0s[ti], lr_o, ends=(0, params.max_steps(m)),
                                        dtype=params.precision(m), **common))
                row.append({k: v.reshape((len(tau0s), S) + v.shape[1:]) for k, v in res.items()})
            per[m].append({k: np.stack([q[k] for q in row]) for k in row[0]})
    return {**A.finals(per, params), "n_train": np.asarray(params.n_trains), "tau0": tau0s}


def arrays(rec) -> dict:
    """``n`` (K,), ``tau0`` (G,), ``rf`` (K, G, S), ``best[m]`` (K, G) step indices (lowest mean
    log validation loss, diverged excluded), ``test[m]``, ``diverged[m]`` (K, G, S) there,
    ``lr[m]`` and ``r``."""
    return {"n": np.asarray(rec["n_train"], np.float64), "tau0": np.asarray(rec["tau0"], np.float64),
            "rf": np.asarray(rec["rf_test"], np.float64), "r": rec.settings, **A.chosen(rec, 1)}


def bend(n, values) -> np.ndarray:
    """How far log10 ``values`` bends away from a straight line in log10 ``n``, per seed: the
    least-squares quadratic ``a + b x + c x^2`` (``x`` = log10 ``n``, at least three sizes) departs
    from the chord through its ends by ``c R^2 / 4`` decades at the middle of the range ``R``.
    ``values`` (K, ..., S) -> (..., S)."""
    x = np.log10(np.asarray(n, np.float64))
    if x.size < 3:
        raise ValueError(f"a bend needs at least three sizes, got {x.size}")
    y = A.log10(values)
    xc = x - x.mean()
    coef = np.linalg.pinv(np.stack([np.ones_like(xc), xc, xc * xc], axis=1)) @ y.reshape(len(x), -1)
    return (coef[2] * (x.max() - x.min()) ** 2 / 4).reshape(y.shape[1:])


def judge_arrays(s) -> list:
    """Appendix C.2 on :func:`arrays`, per seed; slopes (decades of test loss per decade of ``N``)
    against :func:`~._arbel.slope_margin`: ``lead.<m>.tau<tau0>`` the lead over RF grows with ``N``
    (RF's slope minus the method's); ``regime.<m>`` the slope is steeper in the feature-learning
    regime (at the largest ``tau0`` minus at the smallest); ``affine``: the :func:`bend`, averaged
    per seed over methods and ``tau0``, within ``effect`` decades. Seeds with a diverged run are
    left out; ids carry the activation when it is not ReLU."""
    r = s["r"]
    pre, word = A.variant(r)
    sm, n, lab = A.slope_margin(r.effect, r.n_trains), s["n"], A.LABELS
    div = {m: s["diverged"][m].any(axis=0) for m in ("gn", "gd")}    # (G, S)
    out = []
    for g, tau in enumerate(s["tau0"]):
        rf = log_slopes(n, s["rf"][:, g])
        for m in ("gn", "gd"):
            out.append(A.decades(f"{pre}lead.{m}.tau{A.fmt_lr(tau)}",
                                 f"{word}τ0 = {A.fmt_lr(tau)}: {lab[m]}'s lead over RF grows with N",
                                 "the RF gap keeps increasing with the sample size (Fig. 5)", rf,
                                 log_slopes(n, s["test"][m][:, g]), sm, log=False, diverged=div[m][g],
                                 unit="per decade of N", measured=f"RF's slope minus {lab[m]}'s"))
    lo, hi = A.fmt_lr(s["tau0"][0]), A.fmt_lr(s["tau0"][-1])
    for m in ("gn", "gd"):
        out.append(A.decades(f"{pre}regime.{m}", f"{word}{lab[m]}'s slope steeper at τ0 = {lo} than at {hi}",
                             "strong dependence of the slope on the regime (C.2)", log_slopes(n, s["test"][m][:, -1]),
                             log_slopes(n, s["test"][m][:, 0]), sm, log=False, diverged=div[m][0] | div[m][-1],
                             unit="per decade of N", measured=f"slope at τ0 = {hi} minus at {lo}"))
    if len(n) >= 3:
        b = np.mean([bend(n, s["test"][m]) for m in ("gn", "gd")], axis=(0, 1))
        out.append(A.decades(f"{pre}affine", f"{word}log test loss affine in log N",
                             "almost affine relation in logarithmic scale (C.2)", b, np.zeros_like(b), r.effect,
                             rule="close", log=False, diverged=div["gn"].any(0) | div["gd"].any(0),
                             measured=f"departure from a line at mid-range, N = {n[0]:g} to {n[-1]:g}, mean of "
                                      "GN and GD at every τ0"))
    return out


def claims(rec) -> list:
    return judge_arrays(arrays(rec))


def summary(rec) -> list:
    """Per ``tau0`` and method (RF too): the slope of log test loss in log N over seeds and the chosen steps."""
    from ...verdicts import seed_interval

    s = arrays(rec)
    out = []
    for g, tau in enumerate(s["tau0"]):
        for m in ("gn", "gd", "rf"):
            mean, half = seed_interval(log_slopes(s["n"], s["rf"][:, g] if m == "rf" else s["test"][m][:, g]))
            out.append({"τ0": A.fmt_lr(tau), "method": A.LABELS[m], "slope": f"{mean:+.2f} ± {half:.2f}",
                        "steps chosen (per N)": "—" if m == "rf" else
                        ", ".join(A.fmt_lr(s["lr"][m][b]) for b in s["best"][m][:, g])})
    return out


EXPERIMENT = register(Experiment(NAME, SamplesParams, run, version="2", summary=summary, claims=claims, axes=(
    ("n_train", ("train_size",)), ("tau0", ("init_scale",)),
    *A.lr_axes(outer=("train_size",), inner=("init_scale",), checkpoints=False))))

__all__ = ["EXPERIMENT", "NAME", "SCALES", "SamplesParams", "arrays", "bend", "claims", "judge_arrays", "run",
           "summary"]
