"""Arbel et al. Figure 8 (Appendix C.4): the step-size comparison on images labelled by a teacher.

Their construction (:func:`itlin.data.teacher_images`): a one-hidden-layer ReLU teacher (50
units) trained with cross-entropy on images, whose softmax outputs (10 per image) become the
regression targets of the mean-field student (Eq. 2 with a hidden bias), trained with the
squared loss averaged over examples and outputs, at ``tau0`` = 1e-3, by GN and GD over a grid of
step sizes. The paper uses MNIST (3000 training images, 784 pixels). ``base="digits"`` (the
default scale) uses the 8x8 digits bundled with scikit-learn; ``base="fashion_mnist"`` uses
Fashion-MNIST's 784-pixel images, standardised as MNIST would be, so that the squared norms of
the inputs (which set the curvature GD's step meets) match theirs. One teacher
(``teacher_seed``); per seed a class-balanced subset of its training images, and of its test
images split into test and validation images.

The Gauss-Newton system is ``(N C) x (N C)`` (``C`` = 10 outputs), as in their code. Step sizes
are in the paper's units for ``N_ref = 3000`` images and ``M = 5000`` units with the loss averaged
over the 10 outputs: ``lr N / (3000 x 10)`` for GN, ``lr M / (5000 x 10)`` for GD; ``eps0``
scales like ``N / M``. Results as :mod:`~itlin.book.experiments.arbel.arbel_steps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .. import Derived, Experiment, param, register
from ... import verdicts as V
from . import _arbel as A

NAME = "arbel_mnist"
REF_N_MNIST, OUTPUTS = 3000, 10

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 10, "n_test": 100, "gn_lrs": (1e-2, 100.0), "gd_lrs": (1.0, 100.0),
             "gn_steps": 8, "gd_steps": 30, "checkpoints": 4},
    "default": {"seeds": 8, "width": 200, "n_train": 20, "n_test": 200, "gn_lrs": (1e-2, 100.0),
                "gd_lrs": (1.0, 10.0, 100.0, 1000.0), "gn_steps": 200, "gd_steps": 2000, "checkpoints": 10},
    "paper": {"seeds": 1, "width": 5000, "n_train": 1497, "n_test": 200, "gn_lrs": A.PAPER_LRS,
              "gd_lrs": A.PAPER_LRS, "gn_steps": A.PAPER_GN_STEPS, "gd_steps": A.PAPER_GN_STEPS, "checkpoints": 40},
}


def eps0_mnist(r) -> float:
    return r["eps0"] * (r["n_train"] / REF_N_MNIST) * (A.REF_WIDTH / r["width"])


@dataclass(frozen=True)
class MnistParams(A.SweepParams):
    SCALES = SCALES
    DERIVED = (Derived("full GN steps covered at the small step",
                       lambda r: r["small_lr"] * r["gn_steps"] / REF_N_MNIST, "λ × steps / 3000", after="gn_steps"),)

    base: Literal["digits", "fashion_mnist"] = param("digits", "images the teacher labels", label="images",
                                                     paper="MNIST (784 pixels)", source="App. C.4")
    teacher_seed: int = param(0, "seed of the teacher and its training", min=0)
    n_val: int = param(100, "validation images (from the test pool; digits has 300)", min=1,
                       label="validation images", paper="none", source="ours")
    small_lr: float = param(1e-2, "the small GN step of the claims", gt=0, label="the claims' small GN step",
                            source="Fig. 8")
    large_lr: float = param(100.0, "the large GN step of the claims", gt=0, label="the claims' large GN step",
                            source="Fig. 8")
    gd_limit: float = param(10.0, "the largest GD step that does not diverge in the paper", gt=0,
                            label="GD's largest stable step", source="Fig. 8 caption")

    def check(self):
        super().check()
        r = self.resolved()
        for what in ("small_lr", "large_lr"):
            if not any(math.isclose(r[what], v, rel_tol=1e-9) for v in r["gn_lrs"]):
                raise ValueError(f"{what} = {r[what]:g} is not among gn_lrs {r['gn_lrs']}")


def load_data(r: dict) -> dict:
    """Stacked float64 arrays of the engine (``x`` with a bias column, ``y`` (S, N, 10), ``xv``,
    ``xt``, ...), the teacher's hidden weights as ``ustar`` (50, pixels) and its accuracy."""
    from .... import data

    full = data.teacher_images(base=r["base"], seed=r["teacher_seed"])
    parts = {k: [] for k in ("x", "y", "xt", "yt", "xv", "yv")}
    for s in range(r["seeds"]):
        d = full.subset(r["n_train"], r["n_test"] + r["n_val"], seed=r["seed"] + s)
        p = np.random.default_rng([r["seed"] + s, 11]).permutation(r["n_test"] + r["n_val"])
        t, v = p[:r["n_test"]], p[r["n_test"]:]
        for k, x, y in (("", d.x_train, d.y_train), ("t", d.x_test[t], d.y_test[t]), ("v", d.x_test[v], d.y_test[v])):
            parts["x" + k].append(A.with_bias(x))
            parts["y" + k].append(np.asarray(y, np.float64))
    return {**{k: np.stack(v) for k, v in parts.items()},
            "ustar": np.stack([np.asarray(full.meta["teacher"]["w1"], np.float64).T] * r["seeds"]),
            "teacher_accuracy": float(full.meta["teacher"]["accuracy_on_its_training_set"])}


def run(p: dict, ctx) -> dict:
    r = A.from_dict(MnistParams, p)
    S, M, N = r["seeds"], r["width"], r["n_train"]
    data = load_data(r)
    dim = data["x"].shape[-1] - 1
    z = A.hidden_directions(S, r["seed"], M, dim + 1)
    common = dict(width=M, dim=dim, outputs=OUTPUTS, alpha=r["alpha"], eps0=eps0_mnist(r), stop_rtol=r["stop_rtol"])
    out = {}
    for m in ("gn", "gd"):
        ours = [A.gn_lr(v, n_train=N, outputs=OUTPUTS, ref_n=REF_N_MNIST) if m == "gn"
                else A.gd_lr(v, width=M, outputs=OUTPUTS) for v in r[f"{m}_lrs"]]
        ctx.say(f"{m.upper()}: {len(ours)} step sizes x {S} seeds ({N} images, {OUTPUTS} outputs, M={M})")
        res = A.lr_grid(ctx, m, r, data, z, common, tau0s=[r["tau0"]], ours=ours,
                        ends=A.checkpoints(r[f"{m}_steps"], r["checkpoints"]))
        out[m] = {k: (v if k in ("lr", "lr_ours", "ends") else v[:, 0]) for k, v in res.items()}
    out["rf_test"] = out["gn"]["lrfit"][0, :, 0]
    x = data["x"][..., :-1]
    return {**out, "meta": {"resolved": {"pixels": dim}, "teacher_accuracy": data["teacher_accuracy"],
                            "input_sqnorm": float(np.mean(np.sum(x * x, axis=-1))),
                            "label_max": float(np.mean(data["y"].max(axis=-1)))}}


def gd_onset(lr, diverged):
    """Where divergence sets in on a grid of step sizes: ``(lo, hi)`` with ``lo`` the largest step
    at and below which no run diverged and ``hi`` the smallest step at and above which every run
    diverged (``None`` where there is no such step). ``lr`` (L,) increasing, ``diverged`` (L, S)."""
    lr = np.asarray(lr, np.float64)
    div = np.asarray(diverged, bool).reshape(len(lr), -1)
    none, every = ~div.any(axis=1), div.all(axis=1)
    lo = next((float(lr[i]) for i in range(len(lr) - 1, -1, -1) if none[: i + 1].all()), None)
    hi = next((float(lr[i]) for i in range(len(lr)) if every[i:].all()), None)
    return lo, hi


def judge_arrays(s) -> list:
    """Fig. 8 on :func:`~._arbel.lr_arrays` plus ``gd_limit``: ``mnist.gn_step_lrfit`` GN's
    Test-LRfit lower at the small step than at the large one (decades, margin ``effect``;
    headline); ``mnist.hidden.gn`` GN at the small step learns features that beat RF's before
    its readout fits (as :func:`~.arbel_steps.judge_arrays`' ``hidden.gn``); and
    ``mnist.gd_diverges`` (a count, not a test) GD diverges at every step above ``gd_limit`` and
    at none up to it, with the onset bracket of :func:`gd_onset`."""
    r, F, div = s["r"], s["final"], s["diverged"]
    i, j = A.at(s["lr"]["gn"], r["small_lr"]), A.at(s["lr"]["gn"], r["large_lr"])
    fs = A.fmt_lr(r["small_lr"])
    gain = A.hidden_gain(s["trace"]["gn"]["train"][i], s["trace"]["gn"]["lrfit"][i], s["rf"], r["effect"])
    out = [A.decades("mnist.gn_step_lrfit", f"images: GN's Test-LRfit lower at step {fs} than at "
                     f"{A.fmt_lr(r['large_lr'])}", "smaller GN steps learn better features on MNIST too (Fig. 8)",
                     F["gn"]["lrfit"][j], F["gn"]["lrfit"][i], r["effect"], diverged=div["gn"][i] | div["gn"][j],
                     measured="log10 at the large step minus at the small", headline=True),
           A.decades("mnist.hidden.gn", f"images: GN at step {fs} beats RF's features before the readout fits",
                     "hidden learning occurs for GN with small steps (Fig. 8)", gain, np.zeros_like(gain), r["effect"],
                     log=False, diverged=div["gn"][i], measured="log10 RF minus Test-LRfit while the training loss "
                                                                "is within the margin of its initial value")]
    lr, d = s["lr"]["gd"], s["diverged"]["gd"]
    above = lr > r["gd_limit"] * (1 + 1e-9)
    if above.any() and (~above).any():
        n_a, n_b, t_a, t_b = int(d[above].sum()), int(d[~above].sum()), int(d[above].size), int(d[~above].size)
        res = V.HOLDS if n_a == t_a and n_b == 0 else (V.FAILS if n_a == 0 or n_b > 0 else V.UNRESOLVED)
        lo, hi = gd_onset(lr, d)
        onset = (f"onset in ({A.fmt_lr(lo)}, {A.fmt_lr(hi)}]" if lo is not None and hi is not None else
                 f"no run diverged up to λ = {A.fmt_lr(lo)}" if hi is None and lo == float(lr.max()) else
                 f"every run diverged from λ = {A.fmt_lr(hi)}" if lo is None and hi == float(lr.min()) else
                 "no clean onset on this grid (some steps diverge for some seeds only)")
        gap = V.proportion_gap(n_a, t_a, n_b, t_b)
        out.append(V.stated("mnist.gd_diverges", f"images: GD diverges above step {A.fmt_lr(r['gd_limit'])} and "
                            "not below", f"GD diverges beyond λ = {A.fmt_lr(r['gd_limit'])} (Fig. 8 caption)",
                            f"diverged: {n_a} of {t_a} runs above, {n_b} of {t_b} at or below (share gap "
                            f"{100 * gap.mean:+.0f} ± {100 * gap.half:.0f} points, Newcombe 95%); {onset}", res,
                            detail=f"the grid places the onset within λ = {A.fmt_lr(lr[~above].max())} to "
                                   f"{A.fmt_lr(lr[above].min())}"))
    return out


def arrays(rec) -> dict:
    return A.lr_arrays(rec)


def claims(rec) -> list:
    return judge_arrays(arrays(rec))


def summary(rec) -> list:
    return A.lr_rows(arrays(rec))


EXPERIMENT = register(Experiment(NAME, MnistParams, run, version="2", summary=summary, claims=claims,
                                 doc="Arbel et al. Fig. 8: GN and GD against the step size on teacher-labelled images."))

__all__ = ["EXPERIMENT", "MnistParams", "NAME", "OUTPUTS", "REF_N_MNIST", "SCALES", "arrays", "claims", "eps0_mnist",
           "gd_onset", "judge_arrays", "load_data", "run", "summary"]
