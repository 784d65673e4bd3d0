"""Main paper Fig. 9: damped Gauss-Newton on the quintic for several damping values.

Setup (main paper Section 4.3, Fig. 9 caption and Appendix C; workshop version Appendix D):
the quintic ``y = x^5/32 - x^3/2 + 2x - 1`` (:func:`itlin.data.quintic`: 20 evenly spaced
training points and 1000 test points on [-3.5, 3.5]), the 5-layer MLP of width 50 with ReLU
(:func:`itlin.models.mlp`), the squared loss ``0.5 ||f - Y||^2`` and full-batch damped
Gauss-Newton (main paper Eq. 6)::

    theta <- theta - eta (J^T J + lambda I)^{-1} J^T (f(X) - Y)

for every damping ``lambda`` in ``dampings`` and every initialisation ``s = 0 .. seeds-1``
(parameters drawn with ``jax.random.fold_in(PRNGKey(seed), s)``, so a run with more seeds
contains the runs of one with fewer). A run stops after ``gn_steps`` steps, when its train RMSE
falls below ``train_tol``, or when a step is not finite (it *diverged*; its parameters are
those before the bad step). Everything runs in float64: with a damping of 1e-6 against NTK
eigenvalues of order 1e2 the kernel system is far too ill-conditioned for float32.

The sweep is one compiled program, :func:`itlin.gauss_newton_fit` with the MLP's
closed-form kernel, run over the initialisations by :func:`itlin.sweep` (vmapped, and sharded over
every visible device, across hosts after :func:`itlin.init_distributed`), with the damping a traced
argument; it is called once per damping value, each call a
:meth:`~itlin.book.runner.RunContext.stage`, so that an interrupted run resumes at the damping it
had reached.

Results (``D`` dampings, ``S`` seeds, ``M`` samples, ``G`` = 1000 test points, ``T`` logged steps):

* ``dampings`` (D,); ``seed_index`` (S,); ``ntk_eigs_init`` (S, N): eigenvalues of the NTK
  ``J J^T`` on the training inputs at each initialisation, ascending
* ``train_rmse``, ``test_rmse`` (D, S): of the final parameters; ``steps`` (D, S): GN steps
  taken; ``diverged`` (D, S); ``reached_tol`` (D, S): stopped because train RMSE < train_tol;
  ``still_descending`` (D, S): ran the whole budget and its training loss still fell by more than
  1% over the last tenth of it (so more steps would have trained it further)
* ``trace_steps`` (T,) and ``train_rmse_trace`` (D, S, T): the train RMSE after
  ``trace_steps[j]`` steps (about 150 log-spaced steps, first and last included; NaN after a run
  stopped)
* ``functions`` (D, M, G): the learnt functions of seeds ``0 .. M-1`` on the test inputs;
  ``sample_dampings`` (4,): the dampings the figure draws them for
* ``x_test``, ``y_test`` (G,), ``x_train``, ``y_train`` (N,): the data, for plotting

``meta["resolved"]`` holds the sizes actually used (``scale`` fills in what was left ``None``).
:func:`run_table`, :func:`filter_by_damping`, :func:`summarize` and :func:`claim_check` turn a
record into the numbers the chapter reports.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np

from dataclasses import dataclass
from typing import Literal, Optional

from .. import Experiment, Params, param, register

NAME = "fig9_damping"

#: Sizes that ``scale`` chooses when the parameter is left ``None``.
SCALES = {
    # seconds: for tests and CI
    "tiny": {"seeds": 4, "dampings": [1e-4, 1e-2, 1.0, 100.0], "gn_steps": 30, "samples": 3},
    # the book on a 2-core CPU: 10 x 32 runs of at most 2000 GN steps (about 2-3 minutes)
    "default": {"seeds": 32, "dampings": [10.0 ** k for k in range(-6, 4)], "gn_steps": 2000, "samples": 10},
    # a GPU: half-decades, 200 seeds, ten times the default budget (the recorded run shows that
    # it is still not enough for the largest dampings: many runs there are still descending)
    "paper": {"seeds": 200, "dampings": [round(10.0 ** (k / 2), 12) for k in range(-12, 7)], "gn_steps": 20000,
              "samples": 10},
}
SIZE_PARAMS = ("seeds", "dampings", "gn_steps", "samples")
N_SAMPLE_DAMPINGS = 4
TRACE_POINTS = 150
#: a run "still descends" if its training loss fell by more than this fraction over the last
#: tenth of its step budget
DESCENT_RTOL = 0.01
#: the blow-up multiple of the headline experiments (:class:`itlin.book.experiments.main._sparse.SparseParams`),
#: the one :func:`blowup_evidence` tests against the recorded sweep
BLOWUP = 100.0
BLOWUP_NOTE = """Damped Gauss-Newton with a small damping overshoots: its first steps solve a linearisation
that is poor far from the anchor, and the loss rises by orders of magnitude before it falls. Such
runs recover (blowup_evidence counts them in a record), so the default rule here is the
non-finite one; pass blowup= to stop runs at a multiple of their initial loss instead."""
#: bootstrap resamples for the per-damping intervals of the median, trimmed mean and std
BOOTSTRAP = 2000


def _check_list(name, values):
    if values is None:
        return
    for i, a in enumerate(values):
        if a is None:
            raise ValueError(f"{name}[{i}] is None; give numbers > 0 (or None for the whole list)")
        for b in values[:i]:
            if math.isclose(a, b, rel_tol=1e-9):
                raise ValueError(f"{name} must be distinct values, {a!r} appears twice")


def resolve_sizes(p: dict) -> dict:
    """The sizes a run uses: each of ``seeds``, ``dampings``, ``gn_steps``, ``samples`` and
    ``sample_dampings`` as given, or, where ``None``, from ``p["scale"]`` (``samples`` is then
    at most ``seeds``; ``sample_dampings`` are four of the dampings spread over the list: the
    smallest, the largest and two between). Raises ValueError for a combination that does not fit."""
    base = SCALES[p["scale"]]
    out = {k: (list(base[k]) if k == "dampings" else base[k]) if p.get(k) is None else p[k] for k in SIZE_PARAMS}
    out["dampings"] = [float(v) for v in out["dampings"]]
    if p.get("samples") is None:
        out["samples"] = min(out["samples"], out["seeds"])
    elif out["samples"] > out["seeds"]:
        raise ValueError(f"samples = {out['samples']} learnt functions are drawn per damping, but there are only "
                         f"seeds = {out['seeds']} runs per damping; lower samples or raise seeds")
    lams = out["dampings"]
    if p.get("sample_dampings") is None:
        order = sorted(range(len(lams)), key=lambda i: lams[i])
        n = min(N_SAMPLE_DAMPINGS, len(lams))
        picks = sorted({order[round(j * (len(lams) - 1) / max(n - 1, 1))] for j in range(n)})
        out["sample_dampings"] = [lams[i] for i in sorted(picks, key=lambda i: lams[i])]
    else:
        sample = [float(v) for v in p["sample_dampings"]]
        missing = [v for v in sample if not any(math.isclose(v, lam, rel_tol=1e-9) for lam in lams)]
        if missing:
            raise ValueError(f"sample_dampings {missing} are not among the dampings {lams}; the learnt functions "
                             "are drawn from the sweep's runs, so pick sample_dampings from dampings")
        out["sample_dampings"] = sample
    return out


@dataclass(frozen=True)
class Fig9Params(Params):
    seeds: Optional[int] = param(None, "initialisations per damping value (None: from scale)", min=1, max=100_000)
    dampings: Optional[tuple[float, ...]] = param(None, "damping values lambda > 0, distinct (None: from scale); "
                                                        "the plots use a log axis", gt=0)
    gn_steps: Optional[int] = param(None, "most Gauss-Newton steps per run (None: from scale)", min=1)
    lr: float = param(1.0, "step size eta of Eq. 6 (1 in the paper)", gt=0)
    train_tol: float = param(1e-5, "a run stops once its train RMSE is below this (0: never)", min=0)
    rmse_threshold: float = param(2.5, "runs with train RMSE above this are dropped from the test-RMSE "
                                       "statistics (2.5 in the paper)", gt=0)
    sample_dampings: Optional[tuple[float, ...]] = param(None, "dampings whose learnt functions are drawn; must be "
                                                               "among dampings (None: four spread over them)", gt=0)
    samples: Optional[int] = param(None, "learnt functions drawn per damping, seeds 0..samples-1 (None: from "
                                         "scale)", min=1)
    init: Literal["flax", "torch"] = param("flax", "initialisation: flax (LeCun-normal weights, zero biases) or "
                                                   "torch (PyTorch's default: uniform weights and biases); the paper "
                                                   "states none")
    blowup: Optional[float] = param(None, "a run has diverged once its training loss exceeds this multiple of its "
                                          "initial loss; None (default): only a non-finite loss, since damped GN's "
                                          "transient rises recover (see BLOWUP_NOTE)", gt=1)

    def check(self):
        p = self.as_dict()
        _check_list("dampings", p.get("dampings"))
        _check_list("sample_dampings", p.get("sample_dampings"))
        resolve_sizes(p)


def trace_steps(gn_steps: int, points: int = TRACE_POINTS) -> np.ndarray:
    """About ``points`` log-spaced step counts in ``[0, gn_steps - 1]`` (both included)."""
    idx = np.unique(np.round(np.geomspace(1, gn_steps, points)).astype(np.int64) - 1)
    return idx


def init_params(model, x, seeds: int, seed: int):
    """The ``seeds`` initial parameters (float64, stacked on a leading axis); seed ``s`` uses
    ``fold_in(PRNGKey(seed), s)``. Call inside ``jax.enable_x64(True)``."""
    import jax
    import jax.numpy as jnp

    base = jax.random.PRNGKey(seed)
    keys = jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.arange(seeds))
    params = jax.vmap(lambda k: model.init(k, x[:2])[0])(keys)
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)


def make_sweep(model, x, y, x_test, y_test, *, gn_steps: int, lr: float, train_tol: float, samples: int,
               blowup: Optional[float] = None):
    """``sweep(params, damping) -> dict`` of numpy arrays: every initialisation in ``params``
    (leading axis) trained by damped Gauss-Newton with one damping, as one jitted program.

    A single run is ``sweep`` on parameters with a leading axis of one. Call inside
    ``jax.enable_x64(True)`` with float64 arrays.
    """
    import jax
    import jax.numpy as jnp

    from ....core.gauss_newton import gauss_newton_fit

    apply = model.bind()
    n = x.shape[0]
    tol = 0.5 * n * float(train_tol) ** 2  # the loss is 0.5 ||f - Y||^2: train RMSE < train_tol
    idx = jnp.asarray(trace_steps(gn_steps))
    tail = gn_steps - max(1, gn_steps // 10)

    def rmse(p, a, b):
        return jnp.sqrt(jnp.mean((apply(p, a) - b) ** 2))

    def one(p0, lam):
        p, trace = gauss_newton_fit(apply, p0, x, y, gn_steps, damping=lam, learning_rate=lr, tol=tol, ntk_fn=model.ntk_fn,
                                    reduction="sum", solve="cholesky", blowup=blowup)
        final_loss = 0.5 * jnp.sum((apply(p, x) - y) ** 2)
        reached = ~trace.diverged & (final_loss < tol)
        full = trace.steps >= gn_steps
        descending = full & ~trace.diverged & ~reached & (final_loss < (1.0 - DESCENT_RTOL) * trace.loss[tail])
        return {
            "train_rmse": rmse(p, x, y),
            "test_rmse": rmse(p, x_test, y_test),
            "steps": trace.steps,
            "diverged": trace.diverged,
            "reached_tol": reached,
            "still_descending": descending,
            "train_rmse_trace": jnp.sqrt(2.0 * trace.loss[idx] / n),
            "outputs": apply(p, x_test)[:, 0],
        }

    from ....core.sweep import sweep as sharded_sweep

    def point(g):
        return one(g["params"], g["damping"])

    def sweep(params, damping):
        # one grid point per initialisation, all with this damping: itlin.sweep runs them as one
        # vmapped program sharded over every visible device (one compile for every damping)
        seeds = jax.tree_util.tree_leaves(params)[0].shape[0]
        grid = {"params": params, "damping": jnp.full((seeds,), damping, jnp.float64)}
        out = {k: np.asarray(v) for k, v in sharded_sweep(point, grid).items()}
        out["functions"] = out.pop("outputs")[:samples]
        return out

    return sweep


def run(p: dict, ctx) -> dict:
    import jax
    import jax.numpy as jnp

    from .... import data, models

    sizes = resolve_sizes(p)
    seeds, lams, gn_steps, samples = sizes["seeds"], sizes["dampings"], sizes["gn_steps"], sizes["samples"]
    ds = data.load("quintic")
    model = models.mlp(num_outputs=1, width=50, depth=5, activation="relu", init=p.get("init", "flax"))
    with jax.enable_x64(True):
        x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
        xt, yt = jnp.asarray(ds.x_test, jnp.float64), jnp.asarray(ds.y_test, jnp.float64)
        params = init_params(model, x, seeds, p["seed"])
        ntk_eigs = np.asarray(jax.jit(jax.vmap(lambda q: jnp.linalg.eigvalsh(model.ntk_fn(q, x))))(params))
        sweep = make_sweep(model, x, y, xt, yt, gn_steps=gn_steps, lr=p["lr"], train_tol=p["train_tol"],
                           samples=samples, blowup=None if p.get("blowup") is None else float(p["blowup"]))
        per = []
        ctx.say(f"{len(lams)} dampings x {seeds} seeds, at most {gn_steps} GN steps each (float64)")
        for lam in ctx.progress(lams, desc="dampings"):
            t0 = time.perf_counter()
            per.append(ctx.stage(f"damping={lam:.12g}", lambda lam=lam: sweep(params, lam)))
            ctx.say(f"damping {lam:g}: {time.perf_counter() - t0:.1f} s")
    keys = ("train_rmse", "test_rmse", "steps", "diverged", "reached_tol", "still_descending",
            "train_rmse_trace", "functions")
    out = {k: np.stack([np.asarray(r[k]) for r in per]) for k in keys}
    out["diverged"] = out["diverged"].astype(bool)
    out["reached_tol"] = out["reached_tol"].astype(bool)
    out["still_descending"] = out["still_descending"].astype(bool)
    out.update(
        dampings=np.asarray(lams, np.float64),
        seed_index=np.arange(seeds),
        ntk_eigs_init=ntk_eigs,
        trace_steps=trace_steps(gn_steps),
        sample_dampings=np.asarray(sizes["sample_dampings"], np.float64),
        x_test=np.asarray(ds.x_test[:, 0], np.float64), y_test=np.asarray(ds.y_test[:, 0], np.float64),
        x_train=np.asarray(ds.x_train[:, 0], np.float64), y_train=np.asarray(ds.y_train[:, 0], np.float64),
    )
    n_runs = out["diverged"].size
    out["meta"] = {
        "resolved": sizes,
        "dtype": "float64",
        "loss": "squared, 0.5 * sum (f - y)^2 (Gauss-Newton matrix J^T J)",
        "model": model.meta,
        "init": ({"flax": "flax default (LeCun-normal weights, zero biases)",
                  "torch": "PyTorch default (weights and biases uniform on +-1/sqrt(fan_in))"}[p.get("init", "flax")]
                 + "; seed s: fold_in(PRNGKey(seed), s)"),
        "data": {k: v for k, v in ds.meta.items()},
        "stop": "after gn_steps, at train RMSE < train_tol, or on divergence (a non-finite loss"
                + ("" if p.get("blowup") is None else f", or one above {float(p['blowup']):g} x the initial loss") + ")",
        "still_descending": f"ran all gn_steps and the loss fell by more than {DESCENT_RTOL:.0%} over the last tenth",
        "runs": n_runs,
        "diverged_runs": int(out["diverged"].sum()),
    }
    return out


register(Experiment(
    NAME, Fig9Params, run, version="2",
    doc="Damped Gauss-Newton on the quintic, many seeds per damping value (main paper Fig. 9)."))


# ------------------------------------------------------------------------------ analysis
def run_table(rec) -> dict:
    """``{damping: {label: run}}`` with one dict per run, in the form
    :func:`itlin.book.plotting.filter_runs` reads: ``status`` (``"completed"`` or ``"diverged at step
    s"``), ``train/rmse``, ``test/rmse``, ``seed``, ``steps``."""
    lams = np.asarray(rec["dampings"])
    div = diverged(rec)
    out = {}
    for d, lam in enumerate(lams):
        runs = {}
        for s in range(rec["train_rmse"].shape[1]):
            steps = int(rec["steps"][d, s])
            status = f"diverged at step {steps}" if bool(div[d, s]) else "completed"
            runs[f"seed={s}"] = {"status": status, "train/rmse": float(rec["train_rmse"][d, s]),
                                 "test/rmse": float(rec["test_rmse"][d, s]), "seed": s, "steps": steps}
        out[float(lam)] = runs
    return out


def blown_up(trace, blowup: float = BLOWUP) -> np.ndarray:
    """Over the last axis of train RMSE traces (first entry: the initial RMSE), whether the
    training loss (proportional to RMSE squared) ever exceeded ``blowup`` times its initial value
    or was not finite at a logged step.

    >>> blown_up(np.array([[1.0, 5.0, 0.1], [1.0, 11.0, 0.1], [1.0, np.inf, np.nan]]))
    array([False,  True,  True])
    """
    t = np.asarray(trace, float)
    first = t[..., :1] ** 2
    seen = ~np.isnan(t)  # NaN: after the run stopped
    bad = seen & (~np.isfinite(t) | (t ** 2 > float(blowup) * np.maximum(first, np.finfo(float).tiny)))
    return bad.any(axis=-1)


_RECORD = object()


def diverged(rec, blowup=_RECORD) -> np.ndarray:
    """(D, S) boolean: the runs that diverged, one rule for live and recorded runs alike: the run
    stopped on a non-finite (or blown-up) loss, or, with a ``blowup`` multiple (default: the
    record's parameter; ``None``: non-finite only), its logged train RMSE trace shows the loss
    above ``blowup`` times its initial value (a record logs ~150 steps of each run, so a blow-up
    between two logged steps goes unseen in the trace)."""
    b = rec.params.get("blowup") if blowup is _RECORD else blowup
    out = np.asarray(rec["diverged"], bool)
    return out if b is None else out | blown_up(rec["train_rmse_trace"], float(b))


def blowup_evidence(rec, multiples=(BLOWUP,), threshold: Optional[float] = None) -> list:
    """For each multiple ``m``: how many runs that did not diverge (non-finite) had their logged
    loss rise above ``m`` times its initial value (``rose``), and how many of those ended with a
    train RMSE under the dropping ``threshold`` (``recovered``; default the record's)."""
    thr = rec.params["rmse_threshold"] if threshold is None else threshold
    base = np.asarray(rec["diverged"], bool)
    tr = np.asarray(rec["train_rmse"], float)
    out = []
    for m in multiples:
        rose = blown_up(rec["train_rmse_trace"], float(m)) & ~base
        out.append({"multiple": float(m), "rose": int(rose.sum()), "recovered": int((rose & (tr < thr)).sum()),
                    "runs": int(base.size)})
    return out


def filter_by_damping(rec, threshold: Optional[float] = None) -> dict:
    """``{damping: FilteredRuns}``: the paper's rule per damping value, diverged runs and runs
    with train RMSE over ``threshold`` (default: the record's ``rmse_threshold``) dropped."""
    from ...plotting import filter_runs

    thr = rec.params["rmse_threshold"] if threshold is None else threshold
    return {lam: filter_runs(runs, metric="train/rmse", threshold=thr, drop_diverged=True)
            for lam, runs in run_table(rec).items()}


def train_traces(rec) -> np.ndarray:
    """(D, S, T) train RMSE traces for plotting: a run that stopped at ``train_tol`` keeps its
    final train RMSE for the remaining steps; a diverged run stays NaN after it stopped."""
    tr = np.array(rec["train_rmse_trace"], dtype=float)
    steps = np.asarray(rec["trace_steps"])
    after = steps[None, None, :] >= np.asarray(rec["steps"])[:, :, None]
    fill = (np.asarray(rec["reached_tol"])[:, :, None] & after)
    tr[fill] = np.broadcast_to(np.asarray(rec["train_rmse"], float)[:, :, None], tr.shape)[fill]
    return tr


def kept_mask(rec, threshold: Optional[float] = None) -> np.ndarray:
    """(D, S) boolean: the runs :func:`filter_by_damping` keeps."""
    filt = filter_by_damping(rec, threshold)
    mask = np.zeros(rec["train_rmse"].shape, bool)
    for d, f in enumerate(filt.values()):
        for label in f.kept:
            mask[d, int(label.split("=")[1])] = True
    return mask


#: fraction cut from each end of the kept runs' test RMSE for the trimmed mean
TRIM = 0.1


def _trimmed_mean(values, cut: float = TRIM) -> float:
    """The mean of the values left after cutting ``cut`` of them from each end (sorted)."""
    v = np.sort(np.asarray(values, float))
    k = int(math.floor(cut * v.size))
    v = v[k:v.size - k] if v.size > 2 * k else v
    return float(v.mean()) if v.size else math.nan


def intervals(values, *, level: float = 0.95, resamples: int = BOOTSTRAP, seed: int = 0) -> dict:
    """Intervals over the runs (seeds) of one damping: ``mean_lo``/``mean_hi`` (Student's t),
    and percentile-bootstrap intervals ``median_lo``/``_hi``, ``trimmed_lo``/``_hi``,
    ``std_lo``/``_hi`` (``resamples`` resamples, a fixed ``seed``: reproducible). NaN where fewer
    than two values.

    >>> iv = intervals([1.0, 2.0, 3.0, 4.0])
    >>> round(iv["mean_lo"], 3), round(iv["mean_hi"], 3)
    (0.446, 4.554)
    """
    from ... import verdicts as V

    v = np.asarray(values, float)
    keys = ("mean", "median", "trimmed", "std")
    if v.size < 2:
        return {f"{k}_{e}": math.nan for k in keys for e in ("lo", "hi")}
    m, h = V.seed_interval(v, level)
    out = {"mean_lo": m - h, "mean_hi": m + h}
    rng = np.random.default_rng([int(seed), v.size])
    res = v[rng.integers(0, v.size, (int(resamples), v.size))]
    srt = np.sort(res, axis=1)
    k = int(math.floor(TRIM * v.size))
    trimmed = srt[:, k:v.size - k].mean(axis=1) if v.size > 2 * k else srt.mean(axis=1)
    q = [(1 - level) / 2, (1 + level) / 2]
    for key, stat in (("median", np.median(res, axis=1)), ("trimmed", trimmed), ("std", res.std(axis=1, ddof=1))):
        lo, hi = np.quantile(stat, q)
        out[f"{key}_lo"], out[f"{key}_hi"] = float(lo), float(hi)
    return out


def fmt_lam(lam) -> str:
    """A damping value to three significant digits: ``0.316``, ``1e-06``, ``100``."""
    return f"{float(lam):.3g}"


def summarize(rec, threshold: Optional[float] = None) -> list:
    """One dict per damping value: run counts (``runs``, ``kept``, ``dropped_threshold``,
    ``diverged``), statistics of the test RMSE over the kept runs (``mean``, ``median``, ``std``
    (sample standard deviation), ``sem`` (standard error of the mean), ``iqr``, ``min``, ``max``), the median train RMSE over all finite runs (``train_median``) and
    over kept runs (``train_median_kept``), ``reached_tol`` / ``still_descending`` / ``stalled``
    counts (stalled: ran the budget without reaching train_tol and without descending), the
    median number of GN steps of all runs (``steps_median``) and of the runs that reached
    train_tol (``steps_to_tol_median``, NaN if none did); the intervals of :func:`intervals` over
    the kept runs. Divergence is :func:`diverged`'s rule."""
    kept = kept_mask(rec, threshold)
    filt = filter_by_damping(rec, threshold)
    rows = []
    for d, (lam, f) in enumerate(filt.items()):
        te = rec["test_rmse"][d][kept[d]]
        tr = rec["train_rmse"][d]
        q = np.quantile(te, [0.25, 0.5, 0.75]) if te.size else np.full(3, np.nan)
        div = diverged(rec)[d]
        reached, desc = rec["reached_tol"][d] & ~div, rec["still_descending"][d] & ~div
        iv = intervals(te, seed=d)
        rows.append({
            "damping": lam,
            "trimmed": float(_trimmed_mean(te)),
            "runs": f.total,
            "kept": len(f.kept),
            "dropped_threshold": f.counts["threshold"],
            "diverged": f.counts["diverged"],
            "mean": float(te.mean()) if te.size else math.nan,
            "median": float(q[1]),
            "std": float(te.std(ddof=1)) if te.size > 1 else math.nan,
            "sem": float(te.std(ddof=1) / math.sqrt(te.size)) if te.size > 1 else math.nan,
            "iqr": float(q[2] - q[0]),
            "min": float(te.min()) if te.size else math.nan,
            "max": float(te.max()) if te.size else math.nan,
            "train_median": float(np.median(tr[np.isfinite(tr)])) if np.isfinite(tr).any() else math.nan,
            "train_median_kept": float(np.median(tr[kept[d]])) if kept[d].any() else math.nan,
            "reached_tol": int(reached.sum()),
            "still_descending": int(desc.sum()),
            "stalled": int((~reached & ~desc & ~div).sum()),
            "steps_median": float(np.median(rec["steps"][d])),
            "steps_to_tol_median": float(np.median(rec["steps"][d][reached])) if reached.any() else math.nan,
            **iv,
        })
    return rows


def claim_check(rows: list) -> dict:
    """The paper's claim in numbers: does the mean test RMSE fall, and the spread narrow, as
    the damping grows?

    Over the damping values with at least two kept runs: Spearman rank correlations of damping
    with the mean, median, standard deviation and IQR of the test RMSE (``rho_*``, ``p_*``), the
    first (smallest) and last (largest) damping's mean and std, the damping with the lowest mean,
    and two verdicts: ``mean_falls`` (rho < 0 and last mean < first mean) and ``spread_narrows``
    (rho < 0 and last std < first std). ``monotone_mean`` / ``monotone_std`` say whether every
    step up in damping lowered them; ``mean_rises`` lists the dampings whose mean is above the
    previous (next smaller) damping's by more than two standard errors of the difference (rises
    beyond run-to-run noise), ``mean_rises_within_noise`` the other rises.
    """
    from scipy.stats import spearmanr

    rows = sorted((r for r in rows if r["kept"] >= 2), key=lambda r: r["damping"])
    out = {"dampings": [r["damping"] for r in rows]}
    if len(rows) < 3:
        out.update(enough=False)
        return out
    lam = np.log10([r["damping"] for r in rows])
    for key in ("mean", "median", "trimmed", "std", "iqr"):
        res = spearmanr(lam, [r[key] for r in rows])
        out[f"rho_{key}"], out[f"p_{key}"] = float(res.statistic), float(res.pvalue)
    first, last = rows[0], rows[-1]
    best = min(rows, key=lambda r: r["mean"])
    means = np.array([r["mean"] for r in rows])
    stds = np.array([r["std"] for r in rows])
    out.update(
        enough=True,
        first_damping=first["damping"], last_damping=last["damping"],
        first_mean=first["mean"], last_mean=last["mean"], first_std=first["std"], last_std=last["std"],
        first_median=first["median"], last_median=last["median"], first_trimmed=first["trimmed"],
        last_trimmed=last["trimmed"],
        first_min=first["min"], last_min=last["min"],
        best_damping=best["damping"], best_mean=best["mean"],
        mean_falls=bool(out["rho_mean"] < 0 and last["mean"] < first["mean"]),
        spread_narrows=bool(out["rho_std"] < 0 and last["std"] < first["std"]),
        monotone_mean=bool(np.all(np.diff(means) < 0)),
        monotone_std=bool(np.all(np.diff(stds) < 0)),
        mean_rises_after_best=[r["damping"] for r in rows if r["damping"] > best["damping"]
                               and r["mean"] > best["mean"]],
        mean_rises=[b["damping"] for a, b in zip(rows, rows[1:])
                    if b["mean"] - a["mean"] > 2 * math.hypot(a["sem"], b["sem"])],
        mean_rises_within_noise=[b["damping"] for a, b in zip(rows, rows[1:])
                                 if 0 < b["mean"] - a["mean"] <= 2 * math.hypot(a["sem"], b["sem"])],
    )
    return out


def exceptions(rows: list, *, stall_rmse: float = 0.1, descending_share: float = 0.25) -> dict:
    """What qualifies a column of the sweep, the same rule for every record (live or recorded):
    ``undertrained``: dampings where more than ``descending_share`` of the runs were still
    descending when the budget ran out (their test RMSE measures unfinished fits); ``stalled``:
    dampings where most runs stalled (stopped improving) at a median train RMSE above
    ``stall_rmse`` (consistent because they under-fit alike, not because they generalise);
    ``outliers``: dampings whose worst kept run is over ten times their median (the mean follows
    the tail)."""
    return {
        "undertrained": [r["damping"] for r in rows if r["still_descending"] > descending_share * r["runs"]],
        "stalled": [r["damping"] for r in rows if r["stalled"] > r["runs"] / 2 and r["train_median"] > stall_rmse],
        "outliers": [r["damping"] for r in rows if r["kept"] and r["max"] > 10 * r["median"]],
    }


def trained(rows: list) -> list:
    """The rows of the dampings whose runs fitted the training data as far as they could: neither
    :func:`exceptions`' undertrained nor its stalled columns."""
    ex = exceptions(rows)
    out = set(ex["undertrained"]) | set(ex["stalled"])
    return [r for r in rows if r["damping"] not in out]


def _half(r: dict, key: str) -> float:
    """Half the width of a damping's interval of statistic ``key``."""
    return 0.5 * (r[f"{key}_hi"] - r[f"{key}_lo"])


def resolution(rows: list, key: str) -> dict:
    """How finely the seed spread resolves changes of statistic ``key`` (``mean``, ``median``,
    ``trimmed``, ``std``) between adjacent dampings of ``rows`` (two or more kept runs each): for
    each adjacent pair the smallest change it resolves, ``hypot`` of the two interval
    half-widths; ``typical`` (their median), ``smallest``; ``resolved``/``pairs``: how many
    adjacent changes exceed it; ``ends``: the smallest change resolvable between the smallest and
    the largest damping, and ``ends_change`` (largest minus smallest damping's value).

    >>> rows = [{"damping": d, "kept": 5, "mean": m, "mean_lo": m - 0.1, "mean_hi": m + 0.1}
    ...         for d, m in ((1, 1.0), (10, 0.5), (100, 0.45))]
    >>> r = resolution(rows, "mean")
    >>> round(r["typical"], 3), r["resolved"], r["pairs"], round(r["ends_change"], 2)
    (0.141, 1, 2, -0.55)
    """
    rows = sorted((r for r in rows if r["kept"] >= 2), key=lambda r: r["damping"])
    if len(rows) < 2:
        return {"typical": math.nan, "smallest": math.nan, "resolved": 0, "pairs": 0, "ends": math.nan,
                "ends_change": math.nan}
    halves = [math.hypot(_half(a, key), _half(b, key)) for a, b in zip(rows, rows[1:])]
    changes = [b[key] - a[key] for a, b in zip(rows, rows[1:])]
    return {"typical": float(np.median(halves)), "smallest": float(np.min(halves)),
            "resolved": int(sum(abs(c) > h for c, h in zip(changes, halves))), "pairs": len(halves),
            "ends": math.hypot(_half(rows[0], key), _half(rows[-1], key)),
            "ends_change": rows[-1][key] - rows[0][key]}


def _falls(c: dict, key: str, alpha: float, res: dict) -> str:
    """Holds: a negative rank correlation with p < alpha and a fall from the smallest to the largest
    damping larger than the seed spread resolves there; does not hold: no negative correlation,
    or the largest damping's value is above the smallest's by more than the resolvable change;
    otherwise cannot resolve."""
    from ... import verdicts as V

    rho, p = c[f"rho_{key}"], c[f"p_{key}"]
    change, ends = res["ends_change"], res["ends"]
    if not (math.isfinite(change) and math.isfinite(ends)):
        return V.UNRESOLVED
    if rho < 0 and p < alpha and change < -ends:
        return V.HOLDS
    if rho >= 0 or change > ends:
        return V.FAILS
    return V.UNRESOLVED


def _resolution_text(res: dict) -> str:
    return (f"seed spread resolves adjacent-damping changes of {res['typical']:.3g} (median over {res['pairs']} "
            f"pairs; smallest {res['smallest']:.3g}), {res['resolved']} of {res['pairs']} resolved; ends: "
            f"change {res['ends_change']:+.3g} against {res['ends']:.3g} resolvable")


def _with_interval(r: dict, key: str) -> str:
    return f"{r[key]:.3g} [{r[f'{key}_lo']:.3g}, {r[f'{key}_hi']:.3g}]"


def verdicts(rows: list, *, alpha: float = 0.05, min_ratio: float = 1.5) -> list:
    """The paper's Fig. 9 claims as verdicts over the dampings of ``rows`` (:func:`summarize`):
    the mean, the median and the trimmed mean (``TRIM`` cut from each end) of the kept runs' test
    RMSE fall as the damping grows, the spread (standard deviation) narrows, and the best runs of
    the smallest and the largest damping are similar (within a factor ``min_ratio``).

    A trend **holds** when Spearman's rank correlation with the damping is negative with a
    p-value below ``alpha`` and the largest damping's value is below the smallest's by more than
    the seed spread resolves (the two 95% intervals' half-widths in quadrature: t over seeds for
    the mean, bootstrap for the others); it **does not hold** when the correlation is not
    negative or the largest damping's value is above the smallest's by more than that; otherwise
    it **cannot** be resolved (the p-value is a rough guide: every damping starts from the same
    initialisations). Each trend's row states the interval at both ends and the smallest change
    between adjacent dampings the seed spread resolves (:func:`resolution`), which is also its
    ``resolvable``."""
    from ... import verdicts as V

    c = claim_check(rows)
    if not c.get("enough"):
        return [V.verdict("the sweep has enough dampings", "", "fewer than three dampings with two kept runs",
                          V.UNRESOLVED)]
    srt = sorted((r for r in rows if r["kept"] >= 2), key=lambda r: r["damping"])
    first, last = srt[0], srt[-1]
    ends = f"λ = {fmt_lam(c['first_damping'])} to {fmt_lam(c['last_damping'])}"
    out = []
    for key, name in (("mean", "mean"), ("median", "median"), ("trimmed", f"{TRIM:.0%}-trimmed mean"),
                      ("std", "spread (std)")):
        res = resolution(rows, key)
        claim = "the spread narrows as damping grows" if key == "std" else f"the {name} test RMSE falls as damping grows"
        paper = "the runs become more consistent (Fig. 9)" if key == "std" else "the mean test RMSE falls (Fig. 9)"
        out.append(V.verdict(
            claim, paper,
            f"{name}: ρ = {c[f'rho_{key}']:+.2f} (p = {c[f'p_{key}']:.2g}); {_with_interval(first, key)} to "
            f"{_with_interval(last, key)} over {ends}", _falls(c, key, alpha, res), res["typical"],
            _resolution_text(res)))
    ratio = c["first_min"] / c["last_min"] if c["last_min"] > 0 else math.inf
    out.append(V.verdict(
        "the best runs are similar at low and high damping", "low damping's best runs are as good as high damping's",
        f"best test RMSE {c['first_min']:.3f} at λ = {fmt_lam(c['first_damping'])}, {c['last_min']:.3f} at "
        f"λ = {fmt_lam(c['last_damping'])} (ratio {ratio:.2f}; similar within {min_ratio:g}x)",
        V.HOLDS if 1 / min_ratio <= ratio <= min_ratio else V.FAILS))
    return out


def verdicts_markdown(rows: list, **kw) -> str:
    """:func:`verdicts` as a Markdown table, resolvable changes in RMSE."""
    from ... import verdicts as V

    return V.verdicts_markdown(verdicts(rows, **kw), resolvable_unit="RMSE", scale=1.0, digits=3)


__all__ = ["NAME", "SCALES", "BLOWUP", "blown_up", "blowup_evidence", "diverged", "fmt_lam", "intervals", "resolution", "verdicts_markdown",
           "claim_check", "exceptions", "trained", "verdicts", "filter_by_damping", "init_params", "kept_mask", "make_sweep",
           "resolve_sizes", "run", "run_table", "summarize", "trace_steps", "train_traces"]
