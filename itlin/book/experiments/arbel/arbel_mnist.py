"""Arbel et al. Figure 8 (Appendix C.4): the step-size comparison on images labelled by a teacher.

Their construction (:func:`itlin.data.teacher_images`): a one-hidden-layer ReLU teacher (50
units) trained with cross-entropy on images, whose softmax outputs (10 per image) become the
regression targets of the mean-field student (Eq. 2 with a hidden bias) trained with the squared
loss averaged over examples and outputs, at ``tau0`` = 1e-3, by GN and GD over a grid of step
sizes. The paper uses MNIST (3000 training images); we use the 8x8 digits bundled with
scikit-learn (``base="digits"``, 64 pixels), one teacher (``teacher_seed``) and, per seed, a
class-balanced subset of its training and test images.

The Gauss-Newton system is ``(N C) x (N C)`` (``C`` = 10 outputs), as in their code. Step sizes
are in the paper's units for ``N_ref = 3000`` images and ``M = 5000`` units, with their loss
averaged over the 10 outputs: ``lr_ours = lr * N / (3000 * 10)`` for GN and
``lr * M / (5000 * 10)`` for GD; ``eps0`` scales like ``N / M``.

Results (``L`` step sizes, ``S`` seeds, ``T`` checkpoints), for ``m`` in ``gn``, ``gd``: ``m/lr``,
``m/lr_ours`` (L,), ``m/ends`` (T,), ``m/<metric>`` (L, S, T) as in
:mod:`~itlin.book.experiments.arbel.arbel_steps` (WCD against the teacher's hidden weights),
``m/steps``, ``m/converged``, ``m/diverged`` (L, S); ``rf_test`` (S,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Params, param, register
from . import _arbel as A

NAME = "arbel_mnist"
REF_N_MNIST = 3000
OUTPUTS = 10

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 10, "n_test": 100, "gn_lrs": (1e-2, 100.0), "gd_lrs": (1.0, 100.0),
             "gn_steps": 8, "gd_steps": 30, "checkpoints": 4},
    "default": {"seeds": 5, "width": 200, "n_train": 20, "n_test": 300, "gn_lrs": (1e-2, 100.0, 1000.0),
                "gd_lrs": (1.0, 10.0, 100.0, 1000.0), "gn_steps": 200, "gd_steps": 2000, "checkpoints": 12},
    "paper": {"seeds": 1, "width": 5000, "n_train": 1497, "n_test": 300,
              "gn_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
              "gd_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), "gn_steps": 100_000, "gd_steps": 100_000,
              "checkpoints": 40},
}


@dataclass(frozen=True)
class MnistParams(Params):
    SCALES = SCALES

    base: Literal["digits", "fashion_mnist"] = param("digits", "images the teacher labels (paper: MNIST)")
    teacher_seed: int = param(0, "seed of the teacher and its training", min=0)
    seeds: Optional[int] = param(None, "student runs, each on its own balanced subset", min=1)
    width: Optional[int] = param(None, "hidden units M (5000 in the paper)", min=1)
    n_train: Optional[int] = param(None, "training images (3000 MNIST images in the paper)", min=1)
    n_test: Optional[int] = param(None, "test images", min=1)
    tau0: float = param(1e-3, "std of the hidden layer at initialisation", gt=0)
    gn_lrs: Optional[tuple[float, ...]] = param(None, "GN step sizes, the paper's units", gt=0)
    gd_lrs: Optional[tuple[float, ...]] = param(None, "GD step sizes, the paper's units", gt=0)
    gn_steps: Optional[int] = param(None, "most GN steps per run (1e5 in the paper)", min=1)
    gd_steps: Optional[int] = param(None, "most GD steps per run (1e5 in the paper)", min=1)
    checkpoints: Optional[int] = param(None, "log-spaced checkpoints", min=2)
    eps0: float = param(1e-7, "damping floor, the paper's units", min=0)
    stop_rtol: float = param(1e-8, "stop when the training loss is below this times its initial value", min=0, lt=1)
    small_lr: float = param(1e-2, "the small GN step of the claims", gt=0)
    large_lr: float = param(100.0, "the large GN step of the claims", gt=0)
    gd_limit: float = param(10.0, "the largest GD step that does not diverge in the paper", gt=0)

    def check(self):
        r = self.resolved()
        if r["width"] < r["n_train"]:
            raise ValueError(f"width = {r['width']} < n_train = {r['n_train']}: RF and Test-LRfit need at least as "
                             "many hidden units as training images")
        for lr, what in ((r["small_lr"], "small_lr"), (r["large_lr"], "large_lr")):
            if not any(math.isclose(lr, v, rel_tol=1e-9) for v in r["gn_lrs"]):
                raise ValueError(f"{what} = {lr:g} is not among gn_lrs {r['gn_lrs']}")


def load_data(r: dict) -> dict:
    """Stacked float64 arrays of the engine (``x`` with a bias column, ``y`` (S, N, 10), ...) and the
    teacher's hidden weights as ``ustar`` (50, pixels)."""
    from .... import data

    full = data.teacher_images(base=r["base"], seed=r["teacher_seed"])
    sets = [full.subset(r["n_train"], r["n_test"], seed=r["seed"] + s) for s in range(r["seeds"])]
    ustar = np.asarray(full.meta["teacher"]["w1"], np.float64).T
    return {
        "x": np.stack([A.with_bias(d.x_train) for d in sets]),
        "y": np.stack([np.asarray(d.y_train, np.float64) for d in sets]),
        "xt": np.stack([A.with_bias(d.x_test) for d in sets]),
        "yt": np.stack([np.asarray(d.y_test, np.float64) for d in sets]),
        "ustar": np.stack([ustar] * len(sets)),
        "teacher_accuracy": float(full.meta["teacher"]["accuracy_on_its_training_set"]),
    }


def run(p: dict, ctx) -> dict:
    r = MnistParams(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}).resolved()
    S, M, N = r["seeds"], r["width"], r["n_train"]
    data = load_data(r)
    dim = data["x"].shape[-1] - 1
    z = A.hidden_directions(S, r["seed"], M, dim + 1)
    eps0 = r["eps0"] * (N / REF_N_MNIST) * (A.REF_WIDTH / M)
    common = dict(width=M, dim=dim, outputs=OUTPUTS, eps0=eps0, stop_rtol=r["stop_rtol"])
    out = {}
    for method in ("gn", "gd"):
        lrs = [float(v) for v in r[f"{method}_lrs"]]
        ends = A.checkpoints(r[f"{method}_steps"], r["checkpoints"])
        ours = [A.gn_lr(v, n_train=N, outputs=OUTPUTS, ref_n=REF_N_MNIST) if method == "gn"
                else A.gd_lr(v, width=M, outputs=OUTPUTS) for v in lrs]
        ctx.say(f"{method.upper()}: {len(lrs)} step sizes x {S} seeds ({N} images, {OUTPUTS} outputs, M={M})")
        per = [ctx.stage(f"{method} lr={lr:.12g}", lambda lr_o=lr_o: A.sweep(
            method, data, z, np.arange(S), np.full(S, r["tau0"]), np.full(S, lr_o), ends=ends,
            dtype="float64" if method == "gn" else "float32", **common)) for lr, lr_o in zip(lrs, ours)]
        res = {k: np.stack([np.asarray(q[k]) for q in per]) for k in per[0]}
        res["converged"] = res["converged"].astype(bool)
        res["diverged"] = res["diverged"].astype(bool)
        res.update(lr=np.asarray(lrs), lr_ours=np.asarray(ours), ends=ends)
        out[method] = res
    out["rf_test"] = out["gn"]["lrfit"][0, :, 0]
    out["meta"] = {"resolved": r, "teacher_accuracy": data["teacher_accuracy"], "dim": dim, "eps0_ours": eps0,
                   "units": {"gn_lr": f"ours = paper x N/({REF_N_MNIST} x {OUTPUTS})",
                             "gd_lr": f"ours = paper x M/({A.REF_WIDTH} x {OUTPUTS})"}}
    return out


register(Experiment(NAME, MnistParams, run, version="1",
                    doc="Arbel et al. Fig. 8: GN and GD against the step size on teacher-labelled images."))


def summary(rec) -> dict:
    """As :func:`itlin.book.experiments.arbel.arbel_steps.summary`, plus ``gd_limit``."""
    from .arbel_steps import summary as steps_summary

    s = steps_summary(rec)
    s["gd_limit"] = float(rec.params.get("gd_limit", 10.0))
    return s


def gd_onset(lr, diverged):
    """Where divergence sets in on a grid of step sizes: ``(lo, hi)`` with ``lo`` the largest step
    at and below which no run diverged and ``hi`` the smallest step at and above which every run
    diverged (``None`` where there is no such step). ``lr`` (L,) increasing, ``diverged`` (L, S).
    The onset lies in ``(lo, hi]`` when ``hi`` is the next step after ``lo``."""
    lr = np.asarray(lr, np.float64)
    div = np.asarray(diverged, bool).reshape(len(lr), -1)
    none, every = ~div.any(axis=1), div.all(axis=1)
    lo = hi = None
    for i in range(len(lr)):
        if none[: i + 1].all():
            lo = float(lr[i])
        if every[i:].all() and hi is None:
            hi = float(lr[i])
    return lo, hi


def claims(s) -> list:
    """Fig. 8: GN's Test-LRfit lower at the small step than at the large one (paired over
    seeds); GD diverges at every step above ``gd_limit`` and at none up to it (their units).
    The divergence row reports the share of diverged runs above and at or below the limit with
    Newcombe's interval of their gap, the onset bracket of :func:`gd_onset`, and as its
    resolution the width of the grid interval that contains ``gd_limit`` (decades of λ): the
    grid cannot place the onset more finely than that."""
    from ...verdicts import FAILS, HOLDS, UNRESOLVED, exceeds, proportion_gap, verdict
    from .arbel_steps import _at

    rows = []
    i, j = _at(s, "gn", s["small_lr"]), _at(s, "gn", s["large_lr"])
    ok = not (s["diverged"]["gn"][i].any() or s["diverged"]["gn"][j].any())
    gap = A.log_gap(s["final"]["gn"]["lrfit"][j], s["final"]["gn"]["lrfit"][i])
    rows.append(verdict(f"GN: Test-LRfit lower at step {A.fmt_lr(s['small_lr'])} than at {A.fmt_lr(s['large_lr'])}",
                        "smaller GN steps learn better features on MNIST too (Fig. 8)", A.fmt_decades(gap),
                        exceeds(gap, 0.0) if ok else UNRESOLVED, gap.half, "log10, large step minus small"))
    lr, div = s["lr"]["gd"], s["diverged"]["gd"]
    above, below = lr > s["gd_limit"] * (1 + 1e-9), lr <= s["gd_limit"] * (1 + 1e-9)
    if above.any() and below.any():
        n_above, n_below = int(div[above].sum()), int(div[below].sum())
        tot_a, tot_b = int(div[above].size), int(div[below].size)
        res = HOLDS if n_above == tot_a and n_below == 0 else (FAILS if n_above == 0 or n_below > 0 else UNRESOLVED)
        lo_step, hi_step = float(lr[below].max()), float(lr[above].min())
        gap = proportion_gap(n_above, tot_a, n_below, tot_b)
        lo, hi = gd_onset(lr, div)
        if lo is not None and hi is not None:
            onset = f"onset in ({A.fmt_lr(lo)}, {A.fmt_lr(hi)}]"
        elif hi is None and lo == float(lr.max()):
            onset = f"no run diverged up to λ = {A.fmt_lr(lo)}"
        elif lo is None and hi == float(lr.min()):
            onset = f"every run diverged from λ = {A.fmt_lr(hi)}"
        else:
            onset = "no clean onset on this grid (some steps diverge for some seeds only)"
        rows.append(verdict(f"GD diverges above step {A.fmt_lr(s['gd_limit'])} and not below",
                            f"GD diverges beyond λ = {A.fmt_lr(s['gd_limit'])} (Fig. 8 caption)",
                            f"diverged: {n_above} of {tot_a} runs above, {n_below} of {tot_b} at or below "
                            f"(share gap {100 * gap.mean:+.0f} ± {100 * gap.half:.0f} points, Newcombe 95%); {onset}",
                            res, math.log10(hi_step / lo_step),
                            f"resolution: the grid step around the limit, λ = {A.fmt_lr(lo_step)} to "
                            f"{A.fmt_lr(hi_step)}, in decades of λ"))
    return rows


__all__ = ["NAME", "SCALES", "MnistParams", "claims", "gd_onset", "load_data", "run", "summary"]
