"""Main paper Fig. 9: damped Gauss-Newton on the quintic for several damping values.

Setup (main paper Section 4.3, Fig. 9 caption, Appendix C; workshop version Appendix D): the
quintic ``y = x^5/32 - x^3/2 + 2x - 1`` (:func:`itlin.data.quintic`: 20 training and 1000 test
points on [-3.5, 3.5]), the 5-layer ReLU MLP of width 50 (:func:`itlin.models.mlp`), the squared
loss ``0.5 ||f - Y||^2`` and full-batch damped Gauss-Newton (Eq. 6),
``theta <- theta - eta (J^T J + lambda I)^{-1} J^T (f(X) - Y)``, for every damping ``lambda``
and initialisation ``s = 0 .. seeds-1`` (``fold_in(PRNGKey(seed), s)``: every damping starts
from the same networks, so the runs of two dampings are paired by seed). A run stops after
``gn_steps`` steps, below ``train_tol`` train RMSE, or on a non-finite step (diverged). Float64
throughout: a damping of 1e-6 against NTK eigenvalues of order 1e2 is below float32's resolution.

One compiled program per sweep: :func:`itlin.gauss_newton_fit` with the MLP's closed-form kernel,
vmapped over the initialisations by :func:`itlin.sweep`, the damping a traced argument; each
damping is a :meth:`~itlin.book.runner.RunContext.stage`, so an interrupted run resumes.

Results (``D`` dampings, ``S`` seeds, ``M`` samples, ``T`` logged steps): ``dampings`` (D,);
``ntk_eigs_init`` (S, N); ``train_rmse``, ``test_rmse``, ``steps``, ``diverged``, ``reached_tol``,
``still_descending`` (D, S); ``trace_steps`` (T,) and ``train_rmse_trace`` (D, S, T);
``functions`` (D, M, 1000) on ``x_test``; ``sample_dampings``; the data.

The claims (:func:`judge_columns`) compare the smallest and the largest damping seed by seed with
a paired bootstrap over the initialisations (the same resampled seeds in every column, so equal
run counts); the grid ends where the step budget still covers a gradient-flow time
``gn_steps / lambda`` of 20 (a damping ``lambda`` is a gradient step of about ``1 / lambda``).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from ... import verdicts as V
from .. import Derived, Experiment, Params, param, register

NAME = "fig9_damping"

SCALES = {
    "tiny": {"seeds": 4, "dampings": [1e-4, 1e-2, 1.0, 100.0], "gn_steps": 30, "samples": 3},
    # a 2-core CPU, two initialisations in the chapter: 9 x 32 runs of at most 2000 GN steps each
    # (about 70 s a sweep); one damping per decade up to 100, where 2000 steps are a gradient-flow
    # time of 20, the paper scale's 20,000 steps at 1000
    "default": {"seeds": 32, "dampings": [10.0 ** k for k in range(-6, 3)], "gn_steps": 2000, "samples": 10},
    "paper": {"seeds": 200, "dampings": [round(10.0 ** (k / 2), 12) for k in range(-12, 7)], "gn_steps": 20000,
              "samples": 10},
}
N_SAMPLE_DAMPINGS = 4
TRACE_POINTS = 150
#: still descending: the loss fell by more than this fraction over the last tenth of the budget
DESCENT_RTOL = 0.01
#: the headline experiments' blow-up multiple, tested by :func:`blowup_evidence` on the records
BLOWUP = 100.0
BOOTSTRAP = 2000
#: cut from each end for the trimmed mean
TRIM = 0.1
INITS = {"flax": "flax default (LeCun-normal weights, zero biases)",
         "torch": "PyTorch default (weights and biases uniform on +-1/sqrt(fan_in))"}


@dataclass(frozen=True)
class Fig9Params(Params):
    SCALES = SCALES
    DERIVED = (Derived("gradient-flow time at the largest damping (steps / λ)",
                       lambda r: r["gn_steps"] / max(r["dampings"]), "our rule: 20 at every scale", after="gn_steps"),)

    dampings: Optional[tuple[float, ...]] = param(None, "damping values lambda > 0, distinct (None: from scale)", gt=0,
                                                  label="dampings λ", source="our choice: not stated")
    seeds: Optional[int] = param(None, "initialisations per damping (None: from scale)", min=1, max=100_000,
                                 label="initialisations per damping", source="our choice: not stated")
    gn_steps: Optional[int] = param(None, "most Gauss-Newton steps per run (None: from scale)", min=1,
                                    label="most Gauss-Newton steps", source="our choice: not stated")
    learning_rate: float = param(1.0, "step size eta of Eq. 6", gt=0, label="step size η", paper=1.0,
                                 source="Eq. 6 (no step size: η = 1)")
    train_tol: float = param(1e-5, "a run stops once its train RMSE is below this (0: never)", min=0,
                             label="stop below train RMSE", source="our choice")
    rmse_threshold: float = param(2.5, "runs with train RMSE above this are dropped from the test RMSE", gt=0,
                                  label="dropped above train RMSE", source="Fig. 9 caption")
    init: Literal["flax", "torch"] = param("flax", "initialisation: flax (LeCun-normal weights, zero biases) or "
                                                   "torch (PyTorch's default, uniform weights and biases)",
                                           label="initialisation", source="not stated")
    high_rmse: float = param(1.0, "a kept run above this test RMSE is a 'high RMSE point' (the tail claim)", gt=0,
                             label="a high test RMSE (tail claim)", source="our reading of 'high RMSE points'")
    best_quantile: float = param(0.1, "the best runs of a damping: this quantile of its test RMSE (dropped runs "
                                      "count as infinite)", gt=0, lt=0.5, label="the best runs (quantile)",
                                 source="our reading of 'the minimums'")
    similar_factor: float = param(1.5, "the best runs are similar within this factor", gt=1,
                                  label="similar within a factor", source="our reading of 'similar'")
    sample_dampings: Optional[tuple[float, ...]] = param(None, "dampings whose learnt functions are drawn; among "
                                                               "dampings (None: four spread over them)", gt=0)
    samples: Optional[int] = param(None, "learnt functions kept per damping (None: from scale)", min=1)
    blowup: Optional[float] = param(None, "diverged once the training loss exceeds this multiple of the initial "
                                          "one; None: only a non-finite loss (damped GN's transient rises recover)",
                                    gt=1)

    def check(self):
        r = self.resolved()
        for name in ("dampings", "sample_dampings"):
            vals = r.get(name) or []
            if any(math.isclose(a, b, rel_tol=1e-9) for i, a in enumerate(vals) for b in vals[:i]):
                raise ValueError(f"{name} must be distinct values: {vals}")
        resolve_sizes(r, given=self.samples is not None)


def resolve_sizes(p: dict, given: bool = False) -> dict:
    """``samples`` (at most ``seeds`` when it comes from the scale; more, ``given``, is an error)
    and ``sample_dampings`` (given, or four of the dampings: the smallest, the largest and two
    spread between) of resolved parameters ``p``."""
    lams, seeds, samples = [float(v) for v in p["dampings"]], int(p["seeds"]), int(p["samples"])
    if samples > seeds:
        if given:
            raise ValueError(f"samples = {samples} learnt functions are kept per damping, but there are only "
                             f"seeds = {seeds} runs per damping; lower samples or raise seeds")
        samples = seeds
    if p.get("sample_dampings") is None:
        order = sorted(range(len(lams)), key=lambda i: lams[i])
        n = min(N_SAMPLE_DAMPINGS, len(lams))
        picks = {order[round(j * (len(lams) - 1) / max(n - 1, 1))] for j in range(n)}
        sample = sorted(lams[i] for i in picks)
    else:
        sample = [float(v) for v in p["sample_dampings"]]
        missing = [v for v in sample if not any(math.isclose(v, lam, rel_tol=1e-9) for lam in lams)]
        if missing:
            raise ValueError(f"sample_dampings {missing} are not among the dampings {lams}")
    return {"samples": samples, "sample_dampings": sample}


def trace_steps(gn_steps: int, points: int = TRACE_POINTS) -> np.ndarray:
    """About ``points`` log-spaced step counts in ``[0, gn_steps - 1]`` (both included)."""
    return np.unique(np.round(np.geomspace(1, gn_steps, points)).astype(np.int64) - 1)


def init_params(model, x, seeds: int, seed: int):
    """The ``seeds`` initial parameters (float64, stacked on a leading axis); seed ``s`` uses
    ``fold_in(PRNGKey(seed), s)``. Call inside ``jax.enable_x64(True)``."""
    import jax
    import jax.numpy as jnp

    base = jax.random.PRNGKey(seed)
    keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.arange(seeds))
    params = jax.vmap(lambda k: model.init(k, x[:2])[0])(keys)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)


def make_sweep(model, x, y, x_test, y_test, *, gn_steps: int, learning_rate: float, train_tol: float, samples: int,
               blowup: Optional[float] = None):
    """``sweep(params, damping) -> dict`` of numpy arrays: every initialisation in ``params``
    (leading axis) trained by damped Gauss-Newton with one damping, as one jitted program (a
    single run: a leading axis of one). Call inside ``jax.enable_x64(True)`` with float64 arrays."""
    import jax
    import jax.numpy as jnp

    from ....core.gauss_newton import gauss_newton_fit
    from ....core.sweep import sweep as sharded_sweep

    apply = model.bind()
    n = x.shape[0]
    tol = 0.5 * n * float(train_tol) ** 2  # the loss is 0.5 ||f - Y||^2: train RMSE < train_tol
    idx = jnp.asarray(trace_steps(gn_steps))
    tail = gn_steps - max(1, gn_steps // 10)
    rmse = lambda p, a, b: jnp.sqrt(jnp.mean((apply(p, a) - b) ** 2))

    def one(g):
        p, trace = gauss_newton_fit(apply, g["params"], x, y, gn_steps, damping=g["damping"], tol=tol,
                                    learning_rate=learning_rate, ntk_fn=model.ntk_fn, reduction="sum",
                                    solve="cholesky", blowup=blowup)
        final_loss = 0.5 * jnp.sum((apply(p, x) - y) ** 2)
        reached = ~trace.diverged & (final_loss < tol)
        full = trace.steps >= gn_steps
        return {"train_rmse": rmse(p, x, y), "test_rmse": rmse(p, x_test, y_test), "steps": trace.steps,
                "diverged": trace.diverged, "reached_tol": reached,
                "still_descending": full & ~trace.diverged & ~reached
                & (final_loss < (1.0 - DESCENT_RTOL) * trace.loss[tail]),
                "train_rmse_trace": jnp.sqrt(2.0 * trace.loss[idx] / n), "outputs": apply(p, x_test)[:, 0]}

    def sweep(params, damping):
        seeds = jax.tree_util.tree_leaves(params)[0].shape[0]
        grid = {"params": params, "damping": jnp.full((seeds,), damping, jnp.float64)}
        out = {k: np.asarray(v) for k, v in sharded_sweep(one, grid).items()}
        out["functions"] = out.pop("outputs")[:samples]
        return out

    return sweep


def run(p: dict, ctx) -> dict:
    import jax
    import jax.numpy as jnp

    from .... import data, models

    r = Fig9Params.from_dict(p).resolved()
    sizes = resolve_sizes(r, given=p.get("samples") is not None)
    seeds, lams, gn_steps = int(r["seeds"]), [float(v) for v in r["dampings"]], int(r["gn_steps"])
    ds = data.load("quintic")
    model = models.mlp(num_outputs=1, width=50, depth=5, activation="relu", init=r["init"])
    with jax.enable_x64(True):
        x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
        xt, yt = jnp.asarray(ds.x_test, jnp.float64), jnp.asarray(ds.y_test, jnp.float64)
        params = init_params(model, x, seeds, r["seed"])
        ntk_eigs = np.asarray(jax.jit(jax.vmap(lambda q: jnp.linalg.eigvalsh(model.ntk_fn(q, x))))(params))
        sweep = make_sweep(model, x, y, xt, yt, gn_steps=gn_steps, learning_rate=r["learning_rate"],
                           train_tol=r["train_tol"], samples=sizes["samples"], blowup=r["blowup"])
        per = []
        for lam in ctx.progress(lams, desc="dampings"):
            t0 = time.perf_counter()
            per.append(ctx.stage(f"damping={lam:.12g}", lambda lam=lam: sweep(params, lam)))
            ctx.say(f"damping {lam:g}: {time.perf_counter() - t0:.1f} s")
    out = {k: np.stack([np.asarray(q[k]) for q in per]) for k in per[0]}
    for k in ("diverged", "reached_tol", "still_descending"):
        out[k] = out[k].astype(bool)
    out.update(dampings=np.asarray(lams, np.float64), seed_index=np.arange(seeds), ntk_eigs_init=ntk_eigs,
               trace_steps=trace_steps(gn_steps), sample_dampings=np.asarray(sizes["sample_dampings"], np.float64),
               x_test=np.asarray(ds.x_test[:, 0], np.float64), y_test=np.asarray(ds.y_test[:, 0], np.float64),
               x_train=np.asarray(ds.x_train[:, 0], np.float64), y_train=np.asarray(ds.y_train[:, 0], np.float64))
    out["meta"] = {"resolved": sizes, "dtype": "float64", "model": model.meta,
                   "init": INITS[r["init"]] + "; seed s: fold_in(PRNGKey(seed), s)",
                   "loss": "squared, 0.5 * sum (f - y)^2 (Gauss-Newton matrix J^T J)"}
    return out


# ------------------------------------------------------------------------------ the runs, per damping
def resolved(rec) -> dict:
    """A record's parameters with this version's defaults for what older records lack."""
    return {**Fig9Params().as_dict(), **rec.params, **rec.meta.get("resolved", {})}


def blown_up(trace, blowup: float = BLOWUP) -> np.ndarray:
    """Over the last axis of train RMSE traces (first entry: the initial RMSE), whether the
    training loss (RMSE squared) ever exceeded ``blowup`` times its initial value or was not
    finite at a logged step (NaN: after the run stopped).

    >>> blown_up(np.array([[1.0, 5.0, 0.1], [1.0, 11.0, 0.1], [1.0, np.inf, np.nan]]))
    array([False,  True,  True])
    """
    t = np.asarray(trace, float)
    first = t[..., :1] ** 2
    bad = ~np.isnan(t) & (~np.isfinite(t) | (t ** 2 > float(blowup) * np.maximum(first, np.finfo(float).tiny)))
    return bad.any(axis=-1)


_RECORD = object()


def diverged(rec, blowup=_RECORD) -> np.ndarray:
    """(D, S): the runs that diverged, one rule for live and recorded runs: the run stopped on a
    non-finite (or blown-up) loss, or, with a ``blowup`` multiple (default the record's; ``None``:
    non-finite only), its logged train RMSE trace shows the loss above ``blowup`` times its start."""
    b = resolved(rec).get("blowup") if blowup is _RECORD else blowup
    out = np.asarray(rec["diverged"], bool)
    return out if b is None else out | blown_up(rec["train_rmse_trace"], float(b))


def blowup_evidence(rec, multiples=(BLOWUP,), threshold: Optional[float] = None) -> list:
    """For each multiple ``m``: how many runs that did not diverge (non-finite) had their logged
    loss rise above ``m`` times its start (``rose``), and how many of those ended below the
    dropping ``threshold`` (``recovered``; default the record's)."""
    thr = resolved(rec)["rmse_threshold"] if threshold is None else threshold
    base, tr = np.asarray(rec["diverged"], bool), np.asarray(rec["train_rmse"], float)
    out = []
    for m in multiples:
        rose = blown_up(rec["train_rmse_trace"], float(m)) & ~base
        out.append({"multiple": float(m), "rose": int(rose.sum()), "recovered": int((rose & (tr < thr)).sum()),
                    "runs": int(base.size)})
    return out


def masks(rec, threshold: Optional[float] = None) -> tuple:
    """``(kept, dropped, diverged)``, (D, S) each: the paper's rule (runs over the train RMSE
    ``threshold``, default the record's, are dropped; diverged and non-finite runs too)."""
    thr = resolved(rec)["rmse_threshold"] if threshold is None else threshold
    tr, te = np.asarray(rec["train_rmse"], float), np.asarray(rec["test_rmse"], float)
    div = diverged(rec) | ~np.isfinite(tr) | ~np.isfinite(te)
    dropped = ~div & (tr > thr)
    return ~div & ~dropped, dropped, div


def kept_mask(rec, threshold: Optional[float] = None) -> np.ndarray:
    return masks(rec, threshold)[0]


def train_traces(rec) -> np.ndarray:
    """(D, S, T) train RMSE traces for plotting: a run stopped at ``train_tol`` keeps its final
    value; a diverged run stays NaN after it stopped."""
    tr = np.array(rec["train_rmse_trace"], dtype=float)
    after = np.asarray(rec["trace_steps"])[None, None, :] >= np.asarray(rec["steps"])[:, :, None]
    fill = np.asarray(rec["reached_tol"])[:, :, None] & after
    tr[fill] = np.broadcast_to(np.asarray(rec["train_rmse"], float)[:, :, None], tr.shape)[fill]
    return tr


def fmt_lam(lam) -> str:
    """A damping value to three significant digits: ``0.316``, ``1e-06``, ``100``."""
    return f"{float(lam):.3g}"


# ------------------------------------------------------------------------------ statistics over seeds
STATS = ("mean", "median", "trimmed", "std", "best", "tail")


def stats(v, *, high_rmse: float = 1.0, best_quantile: float = 0.1) -> dict:
    """Statistics over the last axis of test RMSE ``v`` (NaN for a dropped run): ``mean``,
    ``median``, ``trimmed`` (``TRIM`` cut from each end), ``std``, ``best`` (the
    ``best_quantile`` quantile, dropped runs counted as infinite: the same number of runs at
    every damping) and ``tail`` (the share of kept runs above ``high_rmse``).

    >>> s = stats(np.array([0.1, 0.2, 0.3, 5.0, np.nan]), best_quantile=0.25)
    >>> round(float(s["mean"]), 3), float(s["median"]), float(s["best"]), float(s["tail"])
    (1.4, 0.25, 0.2, 0.25)
    """
    v = np.asarray(v, float)
    n = np.sum(~np.isnan(v), -1)
    srt = np.sort(v, -1)
    k = np.floor(TRIM * n).astype(int)
    pos = np.arange(v.shape[-1])
    inside = (pos >= k[..., None]) & (pos < (n - k)[..., None])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {"mean": np.nanmean(v, -1), "median": np.nanmedian(v, -1),
                "trimmed": np.sum(np.where(inside, srt, 0.0), -1) / np.sum(inside, -1),
                "std": np.nanstd(v, -1, ddof=1),
                "best": np.quantile(np.where(np.isnan(v), np.inf, v), best_quantile, axis=-1, method="lower"),
                "tail": np.sum(v > high_rmse, -1) / n}


def bootstrap(v, *, resamples: int = BOOTSTRAP, seed: int = 0, **kw) -> dict:
    """:func:`stats` of ``resamples`` resamples of the seeds (the last axis of ``v``, (D, S)): the
    same resampled seeds in every damping (the runs are paired by initialisation). (D, B) each."""
    v = np.asarray(v, float)
    idx = np.random.default_rng([int(seed), v.shape[-1]]).integers(0, v.shape[-1], (int(resamples), v.shape[-1]))
    return stats(v[:, idx], **kw)


def _t(level: float, n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, max(n - 1, 1)))


def _gap(obs, reps, a: int, b: int, n: int, log: bool = False) -> V.Gap:
    """The gap ``stat[a] - stat[b]`` (of log10 with ``log``) over ``n`` seeds: its bootstrap
    standard error (replicates ``reps``, (D, B)) times Student's t quantile for ``n`` seeds (the
    bootstrap alone is too narrow for a few seeds)."""
    f = np.log10 if log else (lambda z: z)
    with np.errstate(all="ignore"):
        d, boot = float(f(obs[a]) - f(obs[b])), f(reps[a]) - f(reps[b])
    boot = boot[np.isfinite(boot)]
    if not math.isfinite(d) or boot.size < 2 or n < 2:
        return V.Gap(math.nan, math.nan, n, math.nan, 0.0)
    half = _t(V.LEVEL, n) * float(np.std(boot, ddof=1))
    return V.Gap(d, half, n, half, 0.0)


def _steady(obs, reps, n: int) -> V.Gap:
    """The fall of ``stat`` at its worst step up in damping: minus the largest rise between
    adjacent dampings, with the simultaneous interval of the Bonferroni-widened per-step
    intervals (``[-U, -L]`` for ``L``, ``U`` the largest lower and upper ends of the rises)."""
    gaps = [_gap(obs, reps, i + 1, i, n, log=True) for i in range(len(obs) - 1)]
    if not gaps or any(not math.isfinite(g.half) for g in gaps):
        return V.Gap(math.nan, math.nan, n, math.nan, 0.0)
    w = _t(1 - (1 - V.LEVEL) / len(gaps), n) / _t(V.LEVEL, n)
    lo, hi = max(g.mean - w * g.half for g in gaps), max(g.mean + w * g.half for g in gaps)
    return V.Gap(-(lo + hi) / 2, (hi - lo) / 2, n, (hi - lo) / 2, 0.0)


CLAIMS = {  # id: (statistic, the claim, the paper)
    "mean.falls": ("mean", "the mean test RMSE is lower at the largest damping than at the smallest",
                   "a reduction in the mean test RMSE as damping increases"),
    "median.falls": ("median", "the median test RMSE is lower at the largest damping than at the smallest",
                     "the mean falls (ours: the mean without its tail)"),
    "trimmed.falls": ("trimmed", "the 10%-trimmed mean test RMSE is lower at the largest damping",
                      "the mean falls (ours: the mean without its tail)"),
    "spread.narrows": ("std", "the spread (std) of the test RMSE is smaller at the largest damping",
                       "an increase in consistency"),
    "tail.shrinks": ("tail", "fewer runs with a high test RMSE at the largest damping than at the smallest",
                     "the number of high RMSE points with low damping"),
}


#: every claim's id (after the initialisation's prefix), in the order :func:`judge_columns` gives them
CLAIM_IDS = (*CLAIMS, "mean.steady", "best.similar")


def judge_columns(dampings, v, *, prefix: str = "", high_rmse: float = 1.0, best_quantile: float = 0.1,
                  similar_factor: float = 1.5, resamples: int = BOOTSTRAP, seed: int = 0) -> list:
    """The paper's Fig. 9 claims on test RMSE ``v`` (D dampings x S seeds, NaN for a dropped
    run), each the smallest damping against the largest with a paired bootstrap over the seeds:
    :data:`CLAIMS` (``exceeds`` 0: the smallest damping's statistic minus the largest's, the
    tail as a share of the runs); ``mean.steady`` (the mean falls at every step up in damping:
    the worst step's fall, simultaneous over the steps, ``exceeds`` 0); ``best.similar`` (the
    best runs, the ``best_quantile`` quantile with dropped runs counted as infinite, agree
    within ``similar_factor``: ``close`` on log10). Ids are prefixed with ``prefix``."""
    order = np.argsort(np.asarray(dampings, float))
    lams, v = np.asarray(dampings, float)[order], np.asarray(v, float)[order]
    n, kw = v.shape[-1], {"high_rmse": high_rmse, "best_quantile": best_quantile}
    obs, reps = stats(v, **kw), bootstrap(v, resamples=resamples, seed=seed, **kw)
    ends = f"λ = {fmt_lam(lams[0])} against λ = {fmt_lam(lams[-1])}"
    out = []
    for cid, (key, claim, paper) in CLAIMS.items():
        tail = key == "tail"
        g = _gap(obs[key], reps[key], 0, -1, n, log=not tail)
        measured = (f"{ends}: {100 * obs[key][0]:.0f}% and {100 * obs[key][-1]:.0f}% of the runs above "
                    f"{high_rmse:g}" if tail else f"{ends}: {obs[key][0]:.3g} and {obs[key][-1]:.3g} (log10 ratio)")
        out.append(V.judge(prefix + cid, claim, paper, g, "exceeds", 0.0, measured=measured,
                           headline=cid in ("mean.falls", "spread.narrows"), unit="points" if tail else "decades",
                           scale=100.0 if tail else 1.0, digits=0 if tail else 2))
    with np.errstate(all="ignore"):
        rises = np.diff(np.log10(obs["mean"]))
    worst = int(np.nanargmax(rises)) if np.isfinite(rises).any() else 0
    out.append(V.judge(prefix + "mean.steady", "the mean test RMSE falls at every step up in damping",
                       "the mean falls as damping increases (read as a steady fall)", _steady(obs["mean"], reps["mean"], n),
                       "exceeds", 0.0, measured=f"largest step {rises[worst]:+.2f} decades, λ = {fmt_lam(lams[worst])} to "
                       f"{fmt_lam(lams[worst + 1])} (gap: minus the largest rise, simultaneous over the steps)",
                       unit="decades", scale=1.0, digits=2))
    out.append(V.judge(prefix + "best.similar", f"the best runs ({best_quantile:.0%} quantile) are similar at the "
                       f"smallest and the largest damping (within a factor {similar_factor:g})",
                       "the minimums are similar", _gap(obs["best"], reps["best"], 0, -1, n, log=True), "close",
                       math.log10(similar_factor), measured=f"{ends}: {obs['best'][0]:.3g} and {obs['best'][-1]:.3g} "
                       "(log10 ratio; dropped runs count as infinite)", unit="decades", scale=1.0, digits=2))
    return out


def columns(rec) -> np.ndarray:
    """(D, S) test RMSE of a record with NaN for the runs the paper's rule drops."""
    return np.where(kept_mask(rec), np.asarray(rec["test_rmse"], float), np.nan)


def claims(rec) -> list:
    """:func:`judge_columns` on a record, ids prefixed with its initialisation (``flax.``, ``torch.``)."""
    r = resolved(rec)
    return judge_columns(rec["dampings"], columns(rec), prefix=f"{r['init']}.", high_rmse=r["high_rmse"],
                         best_quantile=r["best_quantile"], similar_factor=r["similar_factor"])


def flags(row: dict) -> list:
    """What qualifies a column (one rule for every record): ``still descending`` (more than a
    quarter of its runs were still improving when the budget ran out), ``stalled`` (most runs
    stopped improving above a train RMSE of 0.1: consistent because they under-fit alike),
    ``outlier-driven`` (its worst kept run over ten times its median)."""
    out = []
    if row["still_descending"] > row["runs"] / 4:
        out.append("still descending")
    if row["stalled"] > row["runs"] / 2 and row["train_median"] > 0.1:
        out.append("stalled")
    if row["worst"] > 10 * row["median"]:
        out.append("outlier-driven")
    return out


def summary(rec) -> list:
    """One row per damping: runs kept / dropped / diverged, the statistics of the kept runs'
    test RMSE with percentile-bootstrap intervals over the seeds, the worst kept run, the median
    train RMSE of all runs, how the runs ended, the median GN steps of those reaching the
    tolerance, and :func:`flags`."""
    r = resolved(rec)
    kept, dropped, div = masks(rec)
    v, kw = columns(rec), {"high_rmse": r["high_rmse"], "best_quantile": r["best_quantile"]}
    obs, reps = stats(v, **kw), bootstrap(v, **kw)
    lo, hi = {k: np.nanquantile(reps[k], (1 - V.LEVEL) / 2, axis=1) for k in STATS}, \
        {k: np.nanquantile(reps[k], (1 + V.LEVEL) / 2, axis=1) for k in STATS}
    tr, steps = np.asarray(rec["train_rmse"], float), np.asarray(rec["steps"])
    out = []
    for d, lam in enumerate(rec["dampings"]):
        reached, desc = rec["reached_tol"][d] & ~div[d], rec["still_descending"][d] & ~div[d]
        ci = lambda k: f"{obs[k][d]:.3g} [{lo[k][d]:.3g}, {hi[k][d]:.3g}]"
        row = {"λ": fmt_lam(lam), "kept / dropped / diverged": f"{kept[d].sum()} / {dropped[d].sum()} / {div[d].sum()}",
               "mean [95% CI]": ci("mean"), "median [95% CI]": ci("median"), "trimmed mean [95% CI]": ci("trimmed"),
               "std [95% CI]": ci("std"), f"best ({r['best_quantile']:g} quantile)": f"{obs['best'][d]:.3g}",
               "worst kept": f"{np.nanmax(v[d]):.3g}" if kept[d].any() else "n/a",
               "train RMSE (median)": f"{np.nanmedian(tr[d]):.2g}",
               "reached tol / stalled / descending": f"{reached.sum()} / {(~reached & ~desc & ~div[d]).sum()} / "
                                                     f"{desc.sum()}",
               "GN steps to tol (median)": f"{np.median(steps[d][reached]):.0f}" if reached.any() else "—"}
        row["flags"] = ", ".join(flags({"runs": v.shape[1], "still_descending": desc.sum(), "train_median":
                                        np.nanmedian(tr[d]), "stalled": (~reached & ~desc & ~div[d]).sum(),
                                        "worst": np.nanmax(v[d]) if kept[d].any() else 0.0,
                                        "median": obs["median"][d]})) or "—"
        out.append(row)
    return out


EXPERIMENT = register(Experiment(
    NAME, Fig9Params, run, version="3", summary=summary, claims=claims,
    doc="Damped Gauss-Newton on the quintic, many initialisations per damping value (main paper Fig. 9)."))

__all__ = ["BLOWUP", "CLAIMS", "CLAIM_IDS", "EXPERIMENT", "Fig9Params", "NAME", "SCALES", "STATS", "blowup_evidence", "blown_up",
           "bootstrap", "claims", "columns", "diverged", "flags", "fmt_lam", "init_params", "judge_columns",
           "kept_mask", "make_sweep", "masks", "resolve_sizes", "resolved", "run", "stats", "summary", "trace_steps",
           "train_traces"]
