"""The quintic demo of the chapter on iterative linearisation: the main paper's quintic MLP trained
with iterative linearisation for a grid of K and learning rates; the chapter's maths are stated
checks on the record (:func:`judge_checks`). The figures and demos are in :mod:`itlin.book.figures.main`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np

from ....metrics import two_line_fit
from ... import verdicts as V
from ...checkpoints import FitJob
from ...labels import K_label, fmt_value
from .. import Experiment, Params, Period, param, register
from . import _setup as S

NAME = "quintic_demo"

SCALES = {
    "tiny": {"Ks": [1, 100, math.inf], "learning_rates": [0.003, 0.01], "steps": 300, "evals": 30},
    "default": {"Ks": [1, 10, 100, 1000, math.inf], "learning_rates": [0.001, 0.003, 0.01], "steps": 20_000,
                "evals": 200},
    "paper": {"Ks": [1, 10, 100, 1000, 10_000, math.inf], "learning_rates": [0.001, 0.002, 0.005, 0.01],
              "steps": 100_000, "evals": 500},
}
GRID_POINTS = 400  # inputs at which the fitted functions are kept
BLOWUP = 100.0  # diverged above this multiple of the first loss


@dataclass(frozen=True)
class QuinticParams(Params):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "relinearisation periods (None: the scale's)", label="periods K",
                                             source="our choice (the paper has no such figure)", distinct=True)
    learning_rates: Optional[tuple[float, ...]] = param(None, "SGD learning rates (None: the scale's)", gt=0,
                                                        label="learning rates", source="our choice")
    steps: Optional[int] = param(None, "steps per setting (None: the scale's)", min=1, label="steps per setting",
                                 source="our choice")
    width: int = param(50, "hidden width of the MLP", min=1, label="hidden width", source="Appendix C")
    depth: int = param(5, "hidden layers of the MLP", min=1, label="hidden layers", source="Appendix C")
    evals: Optional[int] = param(None, "evaluations of the losses per run (None: the scale's)", min=2)
    blowup: float = param(BLOWUP, "diverged once the training loss exceeds this multiple of its first (or is not "
                                  "finite)", gt=1, label="diverged above the first loss times",
                          source="the headline experiments' rule")
    kconv_lr: float = param(0.01, "learning rate of the K_conv check", gt=0, label="learning rate of the K_conv check",
                            source="our choice")

    def check(self):
        p = self.resolved()
        if p["evals"] > p["steps"]:
            raise ValueError(f"evals ({p['evals']}) must not exceed steps ({p['steps']}).")


def setting_tag(K, lr) -> str:
    """The name of one setting's training run in the record, e.g. ``"K=100,lr=0.003"``."""
    return f"K={'inf' if math.isinf(float(K)) else int(K)},lr={float(lr):g}"


class DemoRun(SimpleNamespace):
    """One trained setting: ``K``, ``lr``, ``steps``, the data (``x_train``, ``y_train``, ``x_grid``,
    ``y_grid``), the network at the end, its linearisation at the last anchor and at initialisation
    on ``x_grid`` (``f_net``, ``f_lin``, ``f_init``), ``history``, ``feature_updates``, ``status``,
    and the largest NTK eigenvalue at the start and the end (``ntk_max_init``, ``ntk_max_end``)."""

    diverged = property(lambda self: self.history.diverged)

    def final(self, key: str) -> float:
        """The last recorded value of an evaluated metric (e.g. ``"test/rmse"``)."""
        v = self.history.eval_array(key)
        return float(v[-1]) if v.size else math.nan


@functools.lru_cache(maxsize=8)
def _mlp(width: int, depth: int):
    """The MLP, one object per shape: its trainers' compiled steps then serve every setting."""
    from .... import models

    return models.mlp(num_outputs=1, width=width, depth=depth)


def _problem(width, depth, seed):
    import jax

    from .... import data

    ds = data.load("quintic")
    net = _mlp(int(width), int(depth))
    params, _ = net.init(jax.random.PRNGKey(int(seed)), ds.x_train)
    lo, hi = ds.meta["interval"]
    return ds, net, params, np.linspace(lo, hi, GRID_POINTS, dtype=np.float32)[:, None]


def train_setting(K, lr, steps: int, *, seed: int = 0, width: int = 50, depth: int = 5, evals: int = 200,
                  ctx=None, blowup: Optional[float] = BLOWUP) -> DemoRun:
    """Train one setting (full batch, SGD at ``lr``, period ``K``; diverged above ``blowup`` times the
    first loss): by :func:`itlin.fit`, or with ``ctx`` (a run's context) as its training run
    :func:`setting_tag` (:class:`~itlin.book.checkpoints.FitJob`, checkpointed)."""
    from ....core._tree import tree_all_finite
    from ....core.linearise import linearised_apply, ntk as empirical_ntk
    from ....core.loop import fit
    from ....core.schedules import parse_period
    from ....data import quintic_function

    ds, net, params, x_grid = _problem(width, depth, seed)
    K = parse_period(K)
    trainer = S.trainer(net, K == 1, loss="squared")  # compiled once for every K and lr of a grid
    job = FitJob(setting_tag(K, lr), trainer, S.start(trainer, params, None, K, None, lr), ds.x_train, ds.y_train,
                 int(steps), eval_sets={"train": (ds.x_train, ds.y_train), "test": (ds.x_test, ds.y_test)},
                 eval_every=max(1, int(steps) // max(1, int(evals))), blowup=blowup)
    res = fit(job.trainer, job.state, job.x, job.y, job.steps, **job.options()) if ctx is None else ctx.run(job)
    st, apply = res.state, net.bind(res.state.model_state)

    def ntk_max(p):
        k = np.asarray(empirical_ntk(apply, p, ds.x_train), np.float64) if bool(tree_all_finite(p)) else np.nan
        return float(np.linalg.eigvalsh(k)[-1]) if np.isfinite(k).all() else math.nan

    return DemoRun(K=float(K), lr=float(lr), steps=int(steps), x_train=ds.x_train[:, 0], y_train=ds.y_train[:, 0],
                   x_grid=x_grid[:, 0], y_grid=quintic_function(x_grid[:, 0]),
                   f_net=np.asarray(net.apply(st.params, x_grid))[:, 0],
                   f_lin=np.asarray(linearised_apply(apply, st.anchor, st.params, x_grid))[:, 0],
                   f_init=np.asarray(net.apply(params, x_grid))[:, 0], history=res.history,
                   feature_updates=int(st.feature_updates), status=res.history.describe(), ntk_max_init=ntk_max(params),
                   ntk_max_end=ntk_max(st.params))


def k_conv_check(*, seed: int = 0, lr: float = 0.01, width: int = 50, depth: int = 5, rel_cut: float = 1e-5) -> dict:
    """``K_conv = N / (eta lambda_min)``: the slowest mode's residual after ``K_conv`` steps of ``K = inf``
    (``measured``) against ``(1 - eta lambda_min / N)^K_conv`` (``predicted``)."""
    from ....core.linearise import linearised_apply, ntk as empirical_ntk
    from ....core.loop import fit

    ds, net, params, _ = _problem(width, depth, seed)
    apply = net.bind()
    x, y = ds.x_train, np.asarray(ds.y_train, np.float64).reshape(-1)
    n = x.shape[0]
    e, vecs = np.linalg.eigh(np.asarray(empirical_ntk(apply, params, x), np.float64))
    idx = int(np.flatnonzero(e > rel_cut * e[-1])[0])
    lam, v = float(e[idx]), vecs[:, idx]
    k_conv = n / (float(lr) * lam)
    steps = int(round(k_conv))
    trainer = S.trainer(net, False, loss="squared")
    st = fit(trainer, S.start(trainer, params, None, math.inf, None, lr), x, ds.y_train, steps).state
    r0 = np.asarray(apply(params, x), np.float64).reshape(-1) - y
    rk = np.asarray(linearised_apply(apply, st.anchor, st.params, x), np.float64).reshape(-1) - y
    return {"N": n, "lr": float(lr), "lambda_min": lam, "K_conv": k_conv, "K_conv_sum": 1.0 / (float(lr) * lam),
            "steps": steps, "measured": float(v @ rk) / float(v @ r0),
            "predicted": (1.0 - float(lr) * lam / n) ** steps, "predicted_sum": (1.0 - float(lr) * lam) ** steps}


def run(params: QuinticParams, ctx):
    out = {"settings": {}}
    for lr in params.learning_rates:
        for K in params.Ks:
            res = train_setting(K, lr, params.steps, seed=params.seed, width=params.width, depth=params.depth,
                                evals=params.evals, ctx=ctx, blowup=params.blowup)
            out["settings"][setting_tag(K, lr)] = {"f_net": res.f_net, "f_lin": res.f_lin, "ntk_max_init": res.ntk_max_init,
                                                     "feature_updates": res.feature_updates, "ntk_max_end": res.ntk_max_end}
            out.setdefault("x_grid", res.x_grid)
            out.update(y_grid=res.y_grid, f_init=res.f_init, x_train=res.x_train, y_train=res.y_train)
    out["k_conv"] = ctx.stage("k_conv", lambda: k_conv_check(seed=params.seed, lr=params.kconv_lr, width=params.width,
                                                             depth=params.depth))
    return out


def grid(record) -> tuple:
    """``(Ks, learning_rates)`` of a ``quintic_demo`` record, as numbers (``math.inf`` for inf)."""
    r = record.settings
    return [math.inf if math.isinf(float(k)) else int(k) for k in r.Ks], [float(v) for v in r.learning_rates]


def runs_of(record) -> dict:
    """``{(K, lr): DemoRun}`` for every setting of a ``quintic_demo`` record."""
    out, (Ks, lrs) = {}, grid(record)
    for K, lr in ((K, lr) for lr in lrs for K in Ks):
        tag = setting_tag(K, lr)
        s, h = {k: np.asarray(v) for k, v in record["settings"][tag].items()}, record.history(tag)
        out[(K, lr)] = DemoRun(K=float(K), lr=float(lr), steps=int(record.runs[tag]["target_steps"]), history=h,
                               status=h.describe(), feature_updates=int(s["feature_updates"]), f_net=s["f_net"],
                               f_lin=s["f_lin"], ntk_max_init=float(s["ntk_max_init"]),
                               ntk_max_end=float(s["ntk_max_end"]),
                               **{k: record[k] for k in ("x_train", "y_train", "x_grid", "y_grid", "f_init")})
    return out


# ------------------------------------------------------------------------------ the chapter's maths, checked
def phase_gaps(steps, rmse_net, rmse_lin, relin_steps) -> dict:
    """The phases (two or more evaluations) where ``rmse_net - rmse_lin`` grew (``grew``) of ``phases``.

    >>> g = phase_gaps([0, 5, 10, 15, 20], [1.0, 1.2, 1.0, 1.3, 1.1], [1.0, 0.9, 1.0, 0.8, 0.7], [10])
    >>> g["grew"], g["phases"]
    (2, 2)
    """
    steps, gap = np.asarray(steps, float), np.asarray(rmse_net, float) - np.asarray(rmse_lin, float)
    bounds, growth = [0.0] + [float(s) for s in relin_steps] + [math.inf], []
    for a, b in zip(bounds, bounds[1:]):
        g = gap[(steps >= a) & (steps < b)]  # the evaluation at a relinearisation opens the next phase
        g = g[np.isfinite(g)]
        if g.size >= 2:
            growth.append(g[-1] - g[0])
    return {"grew": int(sum(d > 0 for d in growth)), "phases": len(growth)}


def checks(rec) -> dict:
    """The numbers behind the chapter's statements (a key is missing when its settings were not run)."""
    runs, (Ks, lrs) = runs_of(rec), grid(rec)
    kc = {k: float(np.asarray(v)) for k, v in rec["k_conv"].items()}
    c = {"kconv": kc, "lr_lo": min(lrs), "lr_hi": max(lrs), "N": len(rec["x_train"])}
    rmse = lambda K, lr, key="train/rmse": runs[(K, lr)].final(key)
    ok_inf = [lr for lr in lrs if math.inf in Ks and not runs[(math.inf, lr)].diverged]
    if ok_inf and 1 in Ks:
        inf = runs[(math.inf, max(ok_inf))]
        shape = two_line_fit(inf.x_grid, inf.f_lin)
        c.update(inf_lr=max(ok_inf), inf_resid=shape["max_residual"] / float(np.ptp(inf.f_lin)), inf_jump=shape["jump"],
                 inf_bound=two_line_fit(rec["x_train"], rec["y_train"])["rmse"], inf_reached=rmse(math.inf, max(ok_inf),
                 "train/rmse_lin"), k1_best=min(rmse(1, lr) for lr in lrs if not runs[(1, lr)].diverged))
    if 10 in Ks and 1 in Ks:
        c["k10_ratio"] = rmse(10, c["lr_lo"]) / rmse(1, c["lr_lo"])
    if 1000 in Ks and not runs[(1000, c["lr_lo"])].diverged:
        h = runs[(1000, c["lr_lo"])].history
        c["part"] = phase_gaps(h.eval_array("step"), h.eval_array("train/rmse"), h.eval_array("train/rmse_lin"),
                               h.relin_steps)
    if 1 in Ks:
        gd = runs[(1, c["lr_hi"])]
        c.update(sharpen=gd.ntk_max_end / gd.ntk_max_init, gd_completed=gd.status == "completed",
                 gd_limit=2 * c["N"] / gd.ntk_max_end)
    c["div_hi"] = [K for K in Ks if runs[(K, c["lr_hi"])].diverged]
    c["finite_large"] = [K for K in Ks if 1 < K < math.inf]
    c["inf_hi"] = None if math.inf not in Ks else math.inf not in c["div_hi"]
    return c


def judge_checks(c: dict) -> list:
    """The chapter's statements on :func:`checks`: one deterministic run each, against the tolerance in its detail."""
    kc, part, r, hi = c["kconv"], c.get("part") or {}, c.get("k10_ratio"), f"learning rate {c['lr_hi']:g}"
    has, big = "inf_resid" in c, c["finite_large"]
    beyond = c.get("gd_completed") and math.isfinite(c.get("gd_limit", math.nan)) and c["lr_hi"] > c["gd_limit"]
    rows = [  # id, claim, paper, holds (None: not run), measured, detail
        ("kconv.agrees", "K_conv = N/(η λ_min): the slowest mode is at (1 - η λ_min/N)^K_conv after K_conv steps",
         "Section 3.1: a linearisation converges in about K_conv steps", abs(kc["measured"] - kc["predicted"]) < 1e-3,
         f"measured {kc['measured']:.5f}, predicted {kc['predicted']:.5f} after {kc['steps']:,.0f} steps",
         "agrees within 1e-3"),
        ("inf.two_lines", "K=∞'s linearised model is one line on each side of 0", "K=∞: no feature learning",
         c["inf_resid"] < 1e-3 if has else None, f"largest deviation {c.get('inf_resid', 0):.1e} of its range, jump "
         f"{c.get('inf_jump', 0):+.3g} at 0", "within 1e-3 of its range"),
        # fixed by construction: with zero biases every K=∞ model is one line on each side of 0, so the
        # bound is the training data's best two-line fit whatever the run; a check of the set-up, not a finding
        ("inf.cannot_fit", "no K=∞ model fits the training data as K=1 does (follows from the zero-bias "
         "initialisation)", "not tested here: \"some feature learning is required for good generalisation\" (§5) "
         "is the paper's reading of Figs. 2 and 5; this follows from the initialisation", c["inf_bound"] > 5 * c["k1_best"] if has else None,
         f"best two-line train RMSE {c.get('inf_bound', 0):.3f} against K=1's {c.get('k1_best', 0):.3g}",
         "a stated check of the set-up, fixed by the zero biases (every K=∞ model is two lines), not a finding "
         "about feature learning; cannot fit: over five times K=1's train RMSE"),
        ("small_k.like_gd", "small K ends where gradient descent does (K=10 against K=1, smallest learning rate)",
         "small K performs like (S)GD", None if r is None else abs(r - 1) < 0.05, f"train RMSE ratio {r or 0:.3f}",
         "within 5%"),
        ("large_k.phases_part", "with K=1000 the network parts from its linearisation within most phases",
         "parameters move away from the anchor in a phase", part["grew"] > part["phases"] / 2 if part.get("phases")
         else None, f"{part.get('grew', 0)} of {part.get('phases', 0)} phases", "the gap grows in more than half"),
        ("gd.beyond_limit", f"K=1 completes at {hi}, beyond its frozen-linearisation limit",
         "gradient descent runs at the edge of stability", bool(beyond) if "gd_limit" in c else None,
         f"2N/λ_max at its end {c.get('gd_limit', math.nan):.4g}, "
         f"{'completed' if c.get('gd_completed') else 'diverged'}", ""),
        ("large_k.diverges", f"every finite K > 1 diverges at {hi}", "the paper trains large K at small learning rates",
         all(K in c["div_hi"] for K in big) if big else None,
         "diverged: " + (", ".join(K_label(K) for K in c["div_hi"]) or "none"), ""),
        ("inf.stable", f"K=∞ completes at {hi}", "the kernel at initialisation is gentle", c["inf_hi"],
         "completed" if c["inf_hi"] else "diverged", "")]
    return [V.stated(id, claim, paper, "not run at these settings" if ok is None else measured,
                     V.UNRESOLVED if ok is None else (V.HOLDS if ok else V.FAILS), detail=detail)
            for id, claim, paper, ok, measured, detail in rows]


def claims(rec) -> list:
    return judge_checks(checks(rec))


def summary(rec) -> list:
    """One row per setting: K, learning rate, feature updates, final train RMSE of the network
    and of the linearised model, test RMSE, status."""
    show = lambda v: f"{v:.3f}" if math.isfinite(v) else "—"
    return [{"K": fmt_value(K), "learning rate": f"{lr:g}", "feature updates": r.feature_updates,
             "train RMSE": show(r.final("train/rmse")), "(linearised)": show(r.final("train/rmse_lin")),
             "test RMSE": show(r.final("test/rmse")), "status": r.status}
            for (K, lr), r in sorted(runs_of(rec).items(), key=lambda kv: (kv[0][1], kv[0][0]))]


EXPERIMENT = register(Experiment(NAME, QuinticParams, run, version="4", summary=summary, claims=claims))

__all__ = ["BLOWUP", "DemoRun", "EXPERIMENT", "GRID_POINTS", "NAME", "QuinticParams", "SCALES", "checks", "claims",
           "grid", "judge_checks", "k_conv_check", "phase_gaps", "run", "runs_of", "setting_tag", "summary",
           "train_setting"]
