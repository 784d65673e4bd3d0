"""The main paper's damping claim in Arbel et al.'s setting: GN with more damping.

Goldwaser & Ge (Section 3.3, Fig. 9; ``book/damping.md``) read damping as a finite ``K``: more
damping fits the data over more feature updates and generalises better. In Arbel et al.'s GN,
``eps = max(alpha sigma_min(J J^T), eps0)``, and from a small initialisation the floor ``eps0``
is what acts. This experiment trains the student of their Section 5 by GN at one step size for
every ``eps0`` of a grid (their units; they use 1e-7) and seed. Results (``E`` floors, ``S``
seeds): ``eps0``, ``eps0_ours`` (E,); per metric of :data:`~._arbel.METRICS` the final
``<metric>`` and initial ``<metric>_init`` (E, S); ``steps``, ``converged``, ``diverged`` (E, S);
``rf_test`` (S,).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .. import Experiment, param, register
from ... import verdicts as V
from . import _arbel as A

NAME = "arbel_damping"

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 12, "n_test": 200, "eps0s": (1e-7, 1e-3), "steps": 12},
    "default": {"seeds": 2, "width": 250, "n_train": 50, "n_test": 2000, "eps0s": (1e-9, 1e-7, 1e-5, 1e-3),
                "steps": 400},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "eps0s": (1e-9, 1e-7, 1e-5, 1e-3, 1e-1),
              "steps": A.PAPER_GN_STEPS},
}


@dataclass(frozen=True)
class DampingParams(A.ArbelParams):
    SCALES = SCALES

    eps0: float = param(1e-7, "unused here: see eps0s", min=0)
    lr: float = param(100.0, "GN step size, the paper's units", gt=0, label="GN step size (their units)",
                      source="ours (their grid)")
    eps0s: Optional[tuple[float, ...]] = param(None, "damping floors, the paper's units, increasing", gt=0,
                                               label="damping floors ε0 (their units)", source="ours; theirs: 1e-7")
    steps: Optional[int] = param(None, "most GN steps per run", min=1, label="GN step budget", source="Section 5.2")


def run(params: DampingParams, ctx) -> dict:
    S, M, N = params.seeds, params.width, params.n_train
    data, z, common = A.prepare(params)
    E, ours = len(params.eps0s), np.asarray([A.eps0_ours(e, width=M, n_train=N) for e in params.eps0s])
    res = ctx.stage("gn", lambda: A.sweep("gn", data, z, np.tile(np.arange(S), E), params.tau0, A.gn_lr(
        params.lr, n_train=N), ends=(0, params.steps), **{**common, "eps0": np.repeat(ours, S)}))
    res = {k: v.reshape((E, S) + v.shape[1:]) for k, v in res.items()}
    return {"eps0": np.asarray(params.eps0s, np.float64), "eps0_ours": ours, "rf_test": res["lrfit"][0, :, 0],
            **{k: res[k][..., -1] for k in A.METRICS}, **{f"{k}_init": res[k][..., 0] for k in A.METRICS},
            **{k: res[k] for k in ("steps", "converged", "diverged")}}


def claims(rec) -> list:
    """More damping generalises better (the main paper): ``damping.test`` and ``damping.lrfit``,
    the test loss and Test-LRfit lower at the largest ``eps0`` than at the smallest (decades,
    margin ``effect``; seeds with a diverged run at either end left out)."""
    eps, div = np.asarray(rec["eps0"]), np.asarray(rec["diverged"], bool)
    return [A.decades(f"damping.{k}", f"GN: {w} lower with damping floor ε0 = {A.fmt_lr(eps[-1])} than "
                      f"{A.fmt_lr(eps[0])}", "main paper: more damping generalises better (Fig. 9); Arbel et al.: "
                      "small ε0 changes little", np.asarray(rec[k])[0], np.asarray(rec[k])[-1],
                      rec.settings.effect, diverged=div[0] | div[-1],
                      measured="log10 at the smallest floor minus at the largest")
            for k, w in (("test", "test loss"), ("lrfit", "Test-LRfit"))]


def summary(rec) -> list:
    """Per floor: as run, the final test loss and Test-LRfit, ``sigma_min`` at init and the steps taken."""
    return [{"ε0 (their units)": A.fmt_lr(e), "as run": f"{eo:.3g}", "test loss": A.geo(rec["test"][i]),
             "Test-LRfit": A.geo(rec["lrfit"][i]), "σ_min(JJᵀ) at init": A.geo(rec["sigma_min_init"][i]),
             "steps (median)": int(np.median(rec["steps"][i])),
             "converged": f"{int(np.sum(rec['converged'][i]))} of {np.size(rec['converged'][i])}"}
            for i, (e, eo) in enumerate(zip(rec["eps0"], rec["eps0_ours"]))]


def conjunction(*verdicts: str) -> str:
    """The verdict on "every part holds": *does not hold* when any part does not hold, *holds*
    when every part holds, *cannot resolve* otherwise.

    >>> conjunction(V.HOLDS, V.HOLDS), conjunction(V.FAILS, V.UNRESOLVED), conjunction(V.HOLDS, V.UNRESOLVED)
    ('holds', 'does not hold', 'cannot resolve')
    """
    if not verdicts:
        raise ValueError("a conjunction needs at least one part.")
    if V.FAILS in verdicts:
        return V.FAILS
    return V.HOLDS if all(v == V.HOLDS for v in verdicts) else V.UNRESOLVED


def tie_in(step: V.Verdict, lrfit: V.Verdict, quintic: V.Verdict) -> list:
    """Whether the two papers' claims agree on our runs (two stated verdicts from judged ones):
    ``tie.one_effect`` holds when Arbel et al.'s step-size claim (``step``) and the damping claim
    in their setting (``lrfit``: ``damping.lrfit``) both hold; ``tie.both_tasks`` when the damping
    claim holds there and on the quintic (``quintic``). A conjunction: it does not hold when
    either part does not hold (whatever the other), holds only when both hold, and cannot
    resolve otherwise (one part cannot, the other holds or cannot)."""
    def both(id, claim, paper, a, b, what):
        res = conjunction(a.verdict, b.verdict)
        return V.stated(id, claim, paper, f"{what[0]} {V.says(a)}; {what[1]} {V.says(b)}", res,
                        detail="a conjunction: holds only if both hold, does not hold if either does not")

    return [both("tie.one_effect", "one effect: smaller GN steps and more damping both give better features "
                 "(Arbel et al.'s setting)", "Arbel et al.: small steps, better features; main paper: more damping, "
                 "better generalisation", step, lrfit, ("step-size claim", "damping claim (Test-LRfit)")),
            both("tie.both_tasks", "the main paper's damping claim holds on both tasks", "more damping generalises "
                 "better (main paper Fig. 9)", lrfit, quintic, ("Arbel et al.'s setting (Test-LRfit)", "quintic"))]


EXPERIMENT = register(Experiment(NAME, DampingParams, run, version="2", summary=summary, claims=claims, axes=(
    ("eps0", ("damping_floor",)), ("eps0_ours", ("damping_floor",)), ("rf_test", ("seed",)),
    ("*", ("damping_floor", "seed")))))

__all__ = ["DampingParams", "EXPERIMENT", "NAME", "SCALES", "claims", "conjunction", "run", "summary", "tie_in"]
