"""Arbel et al. Figure 8 (Appendix C.4): the step-size comparison on images labelled by a teacher.

Their construction (:func:`itlin.data.teacher_images`): a ReLU teacher with 50 hidden units
trained with cross-entropy on images labels each with its 10 softmax outputs, the student's
targets (squared loss averaged over examples and outputs, ``tau0`` = 1e-3, GN and GD over a grid
of steps). The paper uses MNIST (784 pixels, 3000 training images); ``base="digits"`` uses
scikit-learn's 8x8 digits, ``base="fashion_mnist"`` Fashion-MNIST's 784-pixel images standardised
as MNIST would be, so that the input norms (which set the curvature GD's step meets) match. Per
seed a class-balanced subset of the teacher's training images, and of its test images split into
test and validation images. The GN system is ``(N C) x (N C)``; steps are in the paper's units
for ``N = 3000`` images, ``M = 5000`` and 10 averaged outputs. Results as in :mod:`~.arbel_steps`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Derived, Experiment, param, register
from ... import verdicts as V
from . import _arbel as A

NAME = "arbel_mnist"
REF_N_MNIST, OUTPUTS = 3000, 10

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 10, "n_test": 100, "gn_lrs": (1e-2, 100.0), "gd_lrs": (1.0, 100.0),
             "gn_steps": 8, "gd_steps": 30, "checkpoints": 4},
    "default": {"seeds": 2, "width": 200, "n_train": 20, "n_test": 200, "gn_lrs": (1e-2, 100.0),
                "gd_lrs": (1.0, 10.0, 100.0, 1000.0), "gn_steps": 200, "gd_steps": 2000, "checkpoints": 10},
    "paper": {"seeds": 1, "width": 5000, "n_train": 1497, "n_test": 200, "gn_lrs": A.PAPER_LRS,
              "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GN_STEPS, "checkpoints": 40},
}


@dataclass(frozen=True)
class MnistParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (Derived("full GN steps covered at the small step",
                       lambda r: r["small_lr"] * r["gn_steps"] / REF_N_MNIST, "λ × steps / 3000", after="gn_steps"),)

    base: Literal["digits", "fashion_mnist"] = param("digits", "images the teacher labels", label="images",
                                                     paper="MNIST (784 pixels)", source="App. C.4")
    teacher_seed: int = param(0, "seed of the teacher and its training", min=0)
    n_train: Optional[int] = param(None, "training images", min=1, label="training images", paper=3000,
                                   source="App. C.4")
    n_val: int = param(100, "validation images (from the test pool; digits has 300)", min=1,
                       label="validation images", paper="none", source="ours")
    small_lr: float = param(1e-2, "the small GN step of the claims", gt=0, label="the claims' small GN step",
                            source="Fig. 8")
    large_lr: float = param(100.0, "the large GN step of the claims", gt=0, label="the claims' large GN step",
                            source="Fig. 8")
    gd_limit: float = param(10.0, "the largest GD step that does not diverge in the paper", gt=0,
                            label="GD's largest stable step", source="Fig. 8 caption")


def load_data(params: MnistParams) -> dict:
    """The engine's arrays (``x`` with a bias column, ``y`` (S, N, 10), ``xv``, ``xt``, ...), the
    teacher's hidden weights as ``ustar`` (50, pixels) and its accuracy."""
    from .... import data

    full = data.teacher_images(base=params.base, seed=params.teacher_seed)
    parts = {k: [] for k in ("x", "y", "xt", "yt", "xv", "yv")}
    for s in range(params.seeds):
        d = full.subset(params.n_train, params.n_test + params.n_val, seed=params.seed + s)
        p = np.random.default_rng([params.seed + s, 11]).permutation(params.n_test + params.n_val)
        t, v = p[:params.n_test], p[params.n_test:]
        for k, x, y in (("", d.x_train, d.y_train), ("t", d.x_test[t], d.y_test[t]), ("v", d.x_test[v], d.y_test[v])):
            parts["x" + k].append(A.with_bias(x))
            parts["y" + k].append(np.asarray(y, np.float64))
    return {**{k: np.stack(v) for k, v in parts.items()},
            "ustar": np.stack([np.asarray(full.meta["teacher"]["w1"], np.float64).T] * params.seeds),
            "teacher_accuracy": float(full.meta["teacher"]["accuracy_on_its_training_set"])}


def run(params: MnistParams, ctx) -> dict:
    S, M, N = params.seeds, params.width, params.n_train
    data = load_data(params)
    dim = data["x"].shape[-1] - 1
    z = A.hidden_directions(S, params.seed, M, dim + 1)
    common = dict(width=M, dim=dim, outputs=OUTPUTS, alpha=params.alpha, stop_rtol=params.stop_rtol,
                  eps0=A.eps0_ours(params.eps0, width=M, n_train=N, ref_n=REF_N_MNIST))
    x = data["x"][..., :-1]
    return {**A.lr_sweep(ctx, params, data, z, common, ref_n=REF_N_MNIST),
            "meta": {"resolved": {"pixels": dim}, "teacher_accuracy": data["teacher_accuracy"],
                            "input_sqnorm": float(np.mean(np.sum(x * x, axis=-1))),
                            "label_max": float(np.mean(data["y"].max(axis=-1)))}}


def gd_onset(lr, diverged) -> str:
    """Where divergence sets in on a grid of steps ``lr`` (increasing; ``diverged`` (L, S)), in words:
    between the largest step at and below which no run diverged and the smallest at and above
    which every run did."""
    lr, div = np.asarray(lr, np.float64), np.asarray(diverged, bool).reshape(len(lr), -1)
    lo = next((lr[i] for i in range(len(lr) - 1, -1, -1) if not div[: i + 1].any()), None)
    hi = next((lr[i] for i in range(len(lr)) if div[i:].all()), None)
    if lo is not None and hi is not None:
        return f"onset in ({A.fmt_lr(lo)}, {A.fmt_lr(hi)}]"
    if hi is None and lo == lr.max():
        return f"no run diverged up to λ = {A.fmt_lr(lo)}"
    if lo is None and hi == lr.min():
        return f"every run diverged from λ = {A.fmt_lr(hi)}"
    return "no clean onset on this grid (some steps diverge for some seeds only)"


def judge_arrays(s) -> list:
    """Fig. 8 on :func:`~._arbel.lr_arrays` plus ``gd_limit``: ``mnist.gn_step_lrfit`` GN's
    Test-LRfit lower at the small step than at the large one (decades, margin ``effect``;
    headline); ``mnist.hidden.gn`` GN at the small step beats RF's features before its readout
    fits (:func:`~._arbel.hidden_gain`); ``mnist.gd_diverges`` (a count, not a test) GD diverges
    at every step above ``gd_limit`` and at none up to it."""
    r, F, div = s["r"], s["final"], s["diverged"]
    i, j, fs = A.at(s["lr"]["gn"], r.small_lr), A.at(s["lr"]["gn"], r.large_lr), A.fmt_lr(r.small_lr)
    gain = A.hidden_gain(s["trace"]["gn"]["train"][i], s["trace"]["gn"]["lrfit"][i], s["rf"], r.effect)
    out = [A.decades("mnist.gn_step_lrfit", f"images: GN's Test-LRfit lower at step {fs} than at "
                     f"{A.fmt_lr(r.large_lr)}", "on MNIST \"a degraded generalization error as the step size "
                     "increases\" (App. C.4, Fig. 8)",
                     F["gn"]["lrfit"][j], F["gn"]["lrfit"][i], r.effect, diverged=div["gn"][i] | div["gn"][j],
                     measured="decades of Test-LRfit (the test loss after re-fitting the readout), log10 at the large "
                              "step minus at the small", headline=True),
           A.decades("mnist.hidden.gn", f"images: GN at step {fs} beats RF's features before the readout fits",
                     "\"hidden learning occurring for GN when using small step sizes\" (App. C.4, Fig. 8)", gain, 0 * gain,
                     r.effect, log=False, diverged=div["gn"][i],
                     measured="decades of test loss, log10 RF's minus Test-LRfit while the training loss is within the "
                              "margin of its initial value")]
    lr, d = s["lr"]["gd"], div["gd"]
    up = lr > r.gd_limit * (1 + 1e-9)
    if up.any() and (~up).any():
        n_a, n_b, t_a, t_b = int(d[up].sum()), int(d[~up].sum()), int(d[up].size), int(d[~up].size)
        res = V.HOLDS if n_a == t_a and n_b == 0 else (V.FAILS if n_a == 0 or n_b > 0 else V.UNRESOLVED)
        out.append(V.stated("mnist.gd_diverges", f"images: GD diverges above step {A.fmt_lr(r.gd_limit)} and not "
                            f"below", f"GD diverges beyond λ = {A.fmt_lr(r.gd_limit)} (Fig. 8 caption)",
                            f"diverged: {n_a} of {t_a} runs above, {n_b} of {t_b} at or below; {gd_onset(lr, d)}",
                            res, detail=f"the grid places the onset within λ = {A.fmt_lr(lr[~up].max())} to "
                                        f"{A.fmt_lr(lr[up].min())}"))
    return out


arrays = A.lr_arrays


def claims(rec) -> list:
    return judge_arrays(arrays(rec))


def summary(rec) -> list:
    return A.lr_rows(arrays(rec))


EXPERIMENT = register(Experiment(NAME, MnistParams, run, version="2", summary=summary, claims=claims,
                                 axes=A.lr_axes(), pool=A.pool_lr_sweeps))

__all__ = ["EXPERIMENT", "MnistParams", "NAME", "OUTPUTS", "REF_N_MNIST", "SCALES", "arrays", "claims", 
           "gd_onset", "judge_arrays", "load_data", "run", "summary"]
