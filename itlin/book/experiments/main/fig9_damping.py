"""Main paper Fig. 9: damped Gauss-Newton on the quintic for several damping values, many
initialisations each (the same networks at every damping, so dampings are compared run by run),
float64, one compiled program per damping (:func:`itlin.gauss_newton_fit` vmapped over the seeds
by :func:`itlin.sweep`). The claims (:func:`judge_columns`) compare the smallest and the largest
damping with a paired bootstrap over the seeds; the grid ends where ``gn_steps / lambda``, the
gradient-flow time the budget covers (a large damping is a gradient step of about ``1/lambda``), is 20.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from ... import verdicts as V
from ...labels import fmt_lam
from ....metrics import blown_up
from .. import Derived, Experiment, Params, param, register

NAME = "fig9_damping"

SCALES = {
    "tiny": {"seeds": 4, "dampings": [1e-4, 1e-2, 1.0, 100.0], "gn_steps": 30, "samples": 3},
    # two sweeps (initialisations) in a 3-minute chapter on 2 cores; up to 100: 2000 steps / 100 = 20
    "default": {"seeds": 4, "dampings": [10.0 ** k for k in range(-6, 3)], "gn_steps": 2000, "samples": 10},
    "paper": {"seeds": 200, "dampings": [round(10.0 ** (k / 2), 12) for k in range(-12, 7)], "gn_steps": 20000,
              "samples": 10},
}
TRACE_POINTS, BOOTSTRAP = 150, 2000
#: initialisations per compiled piece of a sweep, so that a seed's numbers do not depend on how many run
#: beside it (another batch size rounds differently, and small damping amplifies it); no slower on the CPU
SEED_CHUNK = 4
DESCENT_RTOL = 0.01  # still descending: the loss fell by more than this over the last tenth of the budget
BLOWUP = 100.0  # the headline experiments' blow-up multiple
TRIM = 0.1  # cut from each end for the trimmed mean
#: our readings of the caption: a "high RMSE point" (test RMSE above this), "the minimums" (the best
#: tenth, dropped runs counted as infinite), "similar" (within this factor)
HIGH_RMSE, BEST_QUANTILE, SIMILAR = 1.0, 0.1, 1.5
NOT_STATED = "our choice: not stated"


@dataclass(frozen=True)
class Fig9Params(Params):
    SCALES = SCALES
    TASK = "quintic"
    DERIVED = (Derived("gradient-flow time at the largest damping (steps / λ)",
                       lambda r: r["gn_steps"] / max(r["dampings"]), "our rule: 20 at every scale", after="gn_steps"),)

    dampings: Optional[tuple[float, ...]] = param(None, "damping values > 0, distinct (None: from scale)", gt=0,
                                                  label="dampings λ", source=NOT_STATED)
    seeds: Optional[int] = param(None, "initialisations per damping (None: from scale)", min=1, max=100_000,
                                 label="initialisations per damping", source=NOT_STATED)
    gn_steps: Optional[int] = param(None, "most Gauss-Newton steps per run (None: from scale)", min=1,
                                    label="most Gauss-Newton steps", source=NOT_STATED)
    learning_rate: float = param(1.0, "step size eta of Eq. 6", gt=0, label="step size η", source="Eq. 6 (η = 1)")
    train_tol: float = param(1e-5, "a run stops below this train RMSE (0: never)", min=0, label="stop below train RMSE",
                             source="our choice")
    rmse_threshold: float = param(2.5, "runs above this train RMSE are dropped", gt=0, label="dropped above train RMSE",
                                  source="Fig. 9 caption")
    init: Literal["flax", "torch"] = param("flax", "flax (LeCun-normal weights, zero biases) or torch (PyTorch's "
                                                   "default, uniform weights and biases)", label="initialisation",
                                           source="not stated")
    samples: Optional[int] = param(None, "learnt functions kept per damping, at most seeds (None: from scale)", min=1)
    blowup: Optional[float] = param(None, "diverged above this multiple of the initial loss; None: non-finite only "
                                          "(damped GN's transient rises recover)", gt=1)

    def check(self):
        lams = self.resolved()["dampings"]
        if any(math.isclose(a, b, rel_tol=1e-9) for i, a in enumerate(lams) for b in lams[:i]):
            raise ValueError(f"dampings must be distinct values: {lams}")


def trace_steps(gn_steps: int, points: int = TRACE_POINTS) -> np.ndarray:
    """About ``points`` log-spaced step counts in ``[0, gn_steps - 1]`` (both included)."""
    return np.unique(np.round(np.geomspace(1, gn_steps, points)).astype(np.int64) - 1)


def init_params(model, x, seeds: int, seed: int):
    """The ``seeds`` initial parameters, float64, stacked (call inside ``jax.enable_x64(True)``)."""
    import jax
    import jax.numpy as jnp

    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.PRNGKey(seed), s))(jnp.arange(seeds))
    params = jax.vmap(lambda k: model.init(k, x[:2])[0])(keys)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)


def make_sweep(model, x, y, x_test, y_test, *, gn_steps: int, learning_rate: float, train_tol: float, samples: int,
               blowup: Optional[float] = None):
    """``sweep(params, damping) -> dict``: every initialisation (leading axis) trained with one damping,
    one jitted program (call inside ``jax.enable_x64(True)``)."""
    import jax
    import jax.numpy as jnp

    from ....core.gauss_newton import gauss_newton_fit
    from ....core.sweep import sweep as sharded_sweep

    apply, n = model.bind(), x.shape[0]
    tol = 0.5 * n * float(train_tol) ** 2  # the loss is 0.5 ||f - Y||^2: train RMSE < train_tol
    idx, tail = jnp.asarray(trace_steps(gn_steps)), gn_steps - max(1, gn_steps // 10)
    rmse = lambda p, a, b: jnp.sqrt(jnp.mean((apply(p, a) - b) ** 2))

    def one(g):
        p, trace = gauss_newton_fit(apply, g["params"], x, y, gn_steps, damping=g["damping"], tol=tol,
                                    learning_rate=learning_rate, ntk_fn=model.ntk_fn, reduction="sum",
                                    solve="cholesky", blowup=blowup)
        final_loss = 0.5 * jnp.sum((apply(p, x) - y) ** 2)
        reached = ~trace.diverged & (final_loss < tol)
        return {"train_rmse": rmse(p, x, y), "test_rmse": rmse(p, x_test, y_test), "steps": trace.steps,
                "diverged": trace.diverged, "reached_tol": reached,
                "still_descending": (trace.steps >= gn_steps) & ~trace.diverged & ~reached
                & (final_loss < (1.0 - DESCENT_RTOL) * trace.loss[tail]),
                "train_rmse_trace": jnp.sqrt(2.0 * trace.loss[idx] / n), "outputs": apply(p, x_test)[:, 0]}

    def sweep(params, damping):
        grid = {"params": params, "damping": jnp.full(jax.tree_util.tree_leaves(params)[0].shape[:1], damping)}
        out = {k: np.asarray(v) for k, v in sharded_sweep(one, grid, chunk=SEED_CHUNK).items()}
        out["functions"] = out.pop("outputs")[:samples]
        return out

    return sweep


def run(params: Fig9Params, ctx) -> dict:
    import jax
    import jax.numpy as jnp

    from .... import data, models

    seeds, lams, gn_steps = params.seeds, [float(v) for v in params.dampings], params.gn_steps
    samples, ds = min(params.samples, seeds), data.load("quintic")
    model = models.mlp(num_outputs=1, width=50, depth=5, activation="relu", init=params.init)
    as64 = lambda a: jnp.asarray(a, jnp.float64)
    with jax.enable_x64(True):
        x, y, xt, yt = as64(ds.x_train), as64(ds.y_train), as64(ds.x_test), as64(ds.y_test)
        weights = init_params(model, x, seeds, params.seed)
        ntk_eigs = np.asarray(jax.jit(jax.vmap(lambda q: jnp.linalg.eigvalsh(model.ntk_fn(q, x))))(weights))
        sweep = make_sweep(model, x, y, xt, yt, gn_steps=gn_steps, learning_rate=params.learning_rate,
                           train_tol=params.train_tol, samples=samples, blowup=params.blowup)
        per = []
        for lam in ctx.progress(lams, desc="dampings"):
            t0 = time.perf_counter()
            per.append(ctx.stage(f"damping={lam:.12g}", lambda lam=lam: sweep(weights, lam)))
            ctx.say(f"damping {lam:g}: {time.perf_counter() - t0:.1f} s")
    out = {k: np.stack([np.asarray(q[k]) for q in per]) for k in per[0]}
    out.update({k: out[k].astype(bool) for k in ("diverged", "reached_tol", "still_descending")})
    out.update(dampings=np.asarray(lams, np.float64), seed_index=np.arange(seeds), ntk_eigs_init=ntk_eigs,
               trace_steps=trace_steps(gn_steps), meta={"dtype": "float64"},
               **{k: np.asarray(getattr(ds, k)[:, 0], np.float64) for k in ("x_test", "y_test", "x_train", "y_train")})
    return out


def resolved(rec) -> dict:
    """A record's parameters with this version's defaults for what older records lack."""
    return {**Fig9Params().as_dict(), **rec.params, **rec.meta.get("resolved", {})}


def diverged(rec, blowup="record") -> np.ndarray:
    """(D, S): stopped on a bad step, or a logged loss above ``blowup`` (default the record's) x its start."""
    b = resolved(rec).get("blowup") if isinstance(blowup, str) else blowup
    out = np.asarray(rec["diverged"], bool)
    return out if b is None else out | blown_up(rec["train_rmse_trace"], float(b))


def masks(rec, threshold: Optional[float] = None) -> tuple:
    """``(kept, dropped, diverged)``, (D, S): runs over the train RMSE ``threshold`` and diverged ones dropped."""
    thr = resolved(rec)["rmse_threshold"] if threshold is None else threshold
    tr, te = np.asarray(rec["train_rmse"], float), np.asarray(rec["test_rmse"], float)
    div = diverged(rec) | ~np.isfinite(tr) | ~np.isfinite(te)
    return ~div & ~(tr > thr), ~div & (tr > thr), div


def columns(rec) -> np.ndarray:
    """(D, S) test RMSE of a record with NaN for the runs the paper's rule drops."""
    return np.where(masks(rec)[0], np.asarray(rec["test_rmse"], float), np.nan)


# ------------------------------------------------------------------------------ statistics over seeds
STATS = ("mean", "median", "trimmed", "std", "best", "tail")


def stats(v, *, high_rmse: float = HIGH_RMSE, best_quantile: float = BEST_QUANTILE) -> dict:
    """Over the last axis of test RMSE ``v`` (NaN: dropped): mean, median, ``trimmed``, std, ``best`` (the
    ``best_quantile`` quantile, dropped runs infinite) and ``tail`` (the share above ``high_rmse``).

    >>> s = stats(np.array([0.1, 0.2, 0.3, 5.0, np.nan]), best_quantile=0.25)
    >>> round(float(s["mean"]), 3), float(s["median"]), float(s["best"]), float(s["tail"])
    (1.4, 0.25, 0.2, 0.25)
    """
    v = np.asarray(v, float)
    n, pos = np.sum(~np.isnan(v), -1), np.arange(v.shape[-1])
    k = np.floor(TRIM * n).astype(int)
    inside = (pos >= k[..., None]) & (pos < (n - k)[..., None])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"mean": np.nanmean(v, -1), "median": np.nanmedian(v, -1),
                "trimmed": np.sum(np.where(inside, np.sort(v, -1), 0.0), -1) / np.sum(inside, -1),
                "std": np.nanstd(v, -1, ddof=1), "tail": np.sum(v > high_rmse, -1) / n,
                "best": np.quantile(np.where(np.isnan(v), np.inf, v), best_quantile, axis=-1, method="lower")}


def bootstrap(v, *, resamples: int = BOOTSTRAP, seed: int = 0, **kw) -> dict:
    """:func:`stats` of resamples of the seeds, the same at every damping (paired): (D, B) each."""
    v = np.asarray(v, float)
    idx = np.random.default_rng([int(seed), v.shape[-1]]).integers(0, v.shape[-1], (int(resamples), v.shape[-1]))
    return stats(v[:, idx], **kw)


CLAIMS = {  # id: (statistic, the claim, the paper); each the smallest damping's minus the largest's
    "mean.falls": ("mean", "the mean test RMSE is lower at the largest damping than at the smallest",
                   "\"a reduction in the mean test RMSE\" as damping increases (Fig. 9 caption)"),
    "spread.narrows": ("std", "the spread (std) of the test RMSE is smaller at the largest damping",
                       "\"an increase in consistency\" (Fig. 9 caption)"),
    "tail.shrinks": ("tail", "fewer runs with a high test RMSE at the largest damping than at the smallest",
                     "\"the number of high RMSE points with low damping factor\" (Fig. 9 caption)"),
}
#: every claim's id (after the initialisation's prefix), in the order :func:`judge_columns` gives them
CLAIM_IDS = (*CLAIMS, "mean.steady", "best.similar")
#: the mean's fall read with statistics a few outliers cannot drive: robustness rows of the one claim
#: ``mean.falls`` (the paper states the mean), shown in its detail and by :func:`robustness`, never
#: verdicts of their own (three readings of one effect are one claim, not three)
ROBUSTNESS = {"median": "median", "trimmed": f"{TRIM:.0%}-trimmed mean"}


def _fall(obs, reps, key: str, n: int) -> V.Gap:
    """The paired bootstrap gap of statistic ``key``, log10 at the smallest minus at the largest damping."""
    return V.bootstrap_gap(obs[key], reps[key], 0, -1, n, log=True)


def robustness_columns(dampings, v, *, resamples: int = BOOTSTRAP, seed: int = 0) -> list:
    """The mean's fall (``mean.falls``) read with the statistics of :data:`ROBUSTNESS` too, on test
    RMSE ``v`` (D x S, NaN: dropped), smallest against largest damping, the same paired bootstrap
    as :func:`judge_columns`: one row per statistic (the mean first), with its two ends, the gap
    in decades and its interval. Robustness rows of one claim, not verdicts: the table shows
    whether the mean's fall is carried by a few outliers.

    >>> v = np.array([[1.0, 1.2, 0.9, 1.1, 1.0, 0.8, 1.3, 1.0, 0.9, 50.0], np.linspace(0.5, 0.6, 10)])
    >>> [(r["statistic"], r["at the smallest"], r["at the largest"]) for r in robustness_columns([1e-3, 1.0], v)]
    [('mean (the claim)', '5.92', '0.55'), ('median', '1', '0.55'), ('10%-trimmed mean', '1.05', '0.55')]
    """
    order = np.argsort(np.asarray(dampings, float))
    v = np.asarray(v, float)[order]
    n = v.shape[-1]
    obs, reps = stats(v), bootstrap(v, resamples=resamples, seed=seed)
    out = []
    for key, name in (("mean", "mean (the claim)"), *ROBUSTNESS.items()):
        g = _fall(obs, reps, key, n)
        out.append({"statistic": name, "at the smallest": f"{obs[key][0]:.3g}", "at the largest": f"{obs[key][-1]:.3g}",
                    "fall, log10 ratio (95%, uncorrected)": V.fmt_gap(g, 1.0, " decades", 2), "interval lies":
                    "above zero" if g.lo > 0 else ("below zero" if g.hi < 0 else "across zero")})
    return out


def robustness(rec) -> list:
    """:func:`robustness_columns` on a record."""
    return robustness_columns(rec["dampings"], columns(rec))


def judge_columns(dampings, v, *, prefix: str = "", high_rmse: float = HIGH_RMSE, best_quantile: float = BEST_QUANTILE,
                  similar_factor: float = SIMILAR, resamples: int = BOOTSTRAP, seed: int = 0) -> list:
    """The claims on test RMSE ``v`` (D x S, NaN: dropped), smallest against largest damping, paired
    bootstrap: :data:`CLAIMS` (log10 but the tail; ``mean.falls`` carries the median's and the
    trimmed mean's falls in its detail, :data:`ROBUSTNESS`, not as verdicts), ``mean.steady``
    (every step falls, simultaneous) and ``best.similar`` (``close`` within ``similar_factor``);
    ids prefixed with ``prefix``."""
    order = np.argsort(np.asarray(dampings, float))
    lams, v = np.asarray(dampings, float)[order], np.asarray(v, float)[order]
    n, kw = v.shape[-1], {"high_rmse": high_rmse, "best_quantile": best_quantile}
    obs, reps = stats(v, **kw), bootstrap(v, resamples=resamples, seed=seed, **kw)
    ends, out = f"λ = {fmt_lam(lams[0])} against λ = {fmt_lam(lams[-1])}", []
    # the statistics of the kept runs at each end, over the seeds the bootstrap resamples (the gap's seeds)
    kept = np.sum(~np.isnan(v), -1)
    of_kept = f" over {kept[0]} and {kept[-1]} kept runs of {n} initialisations"
    robust = "robustness, not verdicts: " + "; ".join(
        f"{name} {obs[key][0]:.3g} and {obs[key][-1]:.3g}, {V.fmt_gap(_fall(obs, reps, key, n), 1.0, ' decades', 2)}"
        for key, name in ROBUSTNESS.items())
    for cid, (key, claim, paper) in CLAIMS.items():
        t = key == "tail"
        measured = f"{ends}: " + (f"{100 * obs[key][0]:.0f}% and {100 * obs[key][-1]:.0f}% of the runs above "
                                  f"{high_rmse:g}" if t else
                                  f"{obs[key][0]:.3g} and {obs[key][-1]:.3g} (decades of test RMSE: log10 ratio)") + of_kept
        out.append(V.judge(prefix + cid, claim, paper, V.bootstrap_gap(obs[key], reps[key], 0, -1, n, log=not t), "exceeds",
                           measured=measured, headline=cid in ("mean.falls", "spread.narrows"),
                           detail=robust if cid == "mean.falls" else "",
                           unit="points" if t else "decades", scale=100.0 if t else 1.0, digits=0 if t else 2))
    with np.errstate(all="ignore"):
        rises = np.diff(np.log10(obs["mean"]))
    w = int(np.nanargmax(rises)) if np.isfinite(rises).any() else 0
    out.append(V.judge(prefix + "mean.steady", "the mean test RMSE falls at every step up in damping",
                       "the mean falls as damping increases (read as a steady fall)",
                       V.largest_rise(obs["mean"], reps["mean"], n), "exceeds", unit="decades", scale=1.0, digits=2,
                       measured=f"largest step {rises[w]:+.2f} decades of mean test RMSE, λ = {fmt_lam(lams[w])} to "
                                f"{fmt_lam(lams[w + 1])} (gap: minus the largest rise, simultaneous over the steps)"))
    out.append(V.judge(prefix + "best.similar", f"the best runs ({best_quantile:.0%} quantile) are similar at the "
                       f"smallest and the largest damping (within a factor {similar_factor:g})",
                       "\"despite the minimums being similar\" (Fig. 9 caption)",
                       V.bootstrap_gap(obs["best"], reps["best"], 0, -1, n, log=True), "close",
                       math.log10(similar_factor), unit="decades", scale=1.0, digits=2,
                       measured=f"{ends}: {obs['best'][0]:.3g} and {obs['best'][-1]:.3g} (decades of test RMSE: log10 ratio; "
                                "dropped runs count as infinite)"))
    return out


def claims(rec) -> list:
    """:func:`judge_columns` on a record, ids prefixed with its initialisation (``flax.``, ``torch.``)."""
    return judge_columns(rec["dampings"], columns(rec), prefix=f"{resolved(rec)['init']}.")


def flags(row: dict) -> list:
    """Flags: over a quarter still descending, most stalled above train RMSE 0.1, worst kept > 10 x median."""
    return [name for name, yes in (("still descending", row["still_descending"] > row["runs"] / 4),
                                   ("stalled", row["stalled"] > row["runs"] / 2 and row["train_median"] > 0.1),
                                   ("outlier-driven", row["worst"] > 10 * row["median"])) if yes]


#: the summary's column of run counts: kept, and the two ways the paper's rule drops a run (the
#: figure's red count above a column is their sum)
RUN_COUNTS = "kept / dropped: over train RMSE / diverged"


def summary(rec) -> list:
    """One row per damping: run counts (:data:`RUN_COUNTS`), test RMSE statistics (bootstrap
    intervals), training, flags."""
    (kept, dropped, div), v = masks(rec), columns(rec)
    obs, reps = stats(v), bootstrap(v)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        q = {k: np.nanquantile(reps[k], [(1 - V.LEVEL) / 2, (1 + V.LEVEL) / 2], axis=1) for k in STATS}
        worst, train = np.nanmax(v, axis=1), np.nanmedian(np.asarray(rec["train_rmse"], float), axis=1)
    out = []
    for d, lam in enumerate(rec["dampings"]):
        reached, desc = rec["reached_tol"][d] & ~div[d], rec["still_descending"][d] & ~div[d]
        stalled = ~reached & ~desc & ~div[d]
        ci = lambda k: f"{obs[k][d]:.3g} [{q[k][0, d]:.3g}, {q[k][1, d]:.3g}]"
        row = {"λ": fmt_lam(lam), RUN_COUNTS: f"{kept[d].sum()} / {dropped[d].sum()} / {sum(div[d])}",
               "mean [95% CI]": ci("mean"), "median [95% CI]": ci("median"), "trimmed mean [95% CI]": ci("trimmed"),
               "std [95% CI]": ci("std"), "best tenth": f"{obs['best'][d]:.3g}",
               "worst kept": f"{worst[d]:.3g}", "train RMSE (median)": f"{train[d]:.2g}",
               "reached tol / stalled / descending": f"{reached.sum()} / {stalled.sum()} / {desc.sum()}",
               "GN steps to tol (median)": f"{np.median(rec['steps'][d][reached]):.0f}" if reached.any() else "—"}
        row["flags"] = ", ".join(flags(dict(runs=v.shape[1], still_descending=desc.sum(), stalled=stalled.sum(),
                                            train_median=train[d], worst=worst[d], median=obs["median"][d]))) or "—"
        out.append(row)
    return out


# 4.1: gauss_newton_fit rolls diverged runs back (issue 47): only outputs that every claim drops change
EXPERIMENT = register(Experiment(NAME, Fig9Params, run, version="4.1", summary=summary, claims=claims, axes=(
    ("train_rmse_trace", ("damping", "seed", "trace_point")), ("functions", ("damping", "sample_seed", "x_test_point")),
    ("dampings", ("damping",)), ("seed_index", ("seed",)), ("ntk_eigs_init", ("seed", "ntk_eigenvalue")),
    ("trace_steps", ("trace_point",)), ("sample_dampings", ("sample_damping",)),
    *((f"{v}_{k}", (f"x_{k}_point",)) for k in ("test", "train") for v in "xy"),
    *((k, ("damping", "seed")) for k in ("train_rmse", "test_rmse", "steps", "diverged", "reached_tol", "still_descending")))))

__all__ = ["BEST_QUANTILE", "BLOWUP", "CLAIMS", "CLAIM_IDS", "EXPERIMENT", "Fig9Params", "HIGH_RMSE", "NAME",
           "ROBUSTNESS", "RUN_COUNTS", "SCALES", "SIMILAR", "STATS", "blown_up", "bootstrap", "claims", "columns", "diverged",
           "flags", "fmt_lam", "init_params", "judge_columns", "make_sweep", "masks", "resolved", "robustness",
           "robustness_columns", "run", "stats", "summary", "trace_steps"]
