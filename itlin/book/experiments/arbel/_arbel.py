"""Shared machinery of the Arbel et al. chapters (``book/arbel_setting.md``, ``book/arbel_ablations.md``).

Arbel, Menegaux & Wolinski (NeurIPS 2023), Section 5 and Appendix C, as their code runs it
(``/work/shared/papers/README.md`` lists its conventions):

* **Student** (their Eq. 2 with a hidden bias): ``f(x) = (1/M) sum_i v_i gamma(u_i^T x + b_i)``;
  hidden weights and biases ``N(0, tau0^2)``, readout ``v = 0``. We append a constant 1 to every
  input, so ``(u_i, b_i)`` is one row of :func:`itlin.models.mean_field`'s ``u`` and its
  closed-form NTK :func:`itlin.models.mean_field_ntk` covers the bias.
* **Loss** ``0.5 mean_n (f(x_n) - y_n)^2`` (``itlin``'s ``"squared"`` loss with the mean over
  examples; for ``C`` outputs their code also averages over outputs, so reported losses are
  divided by ``C``).
* **GN**: ``theta <- theta - lr J^T (J J^T + eps I)^{-1} (f - y)/N`` with
  ``eps = max(alpha * sigma_min(J J^T), eps0)``: :func:`itlin.gauss_newton_direction` with
  ``hessian="identity"``, the mean loss and :class:`itlin.ArbelDamping`, in float64.
* **GD**: ``theta <- theta - lr grad L``, float32 by default (their networks are float32).
* **Stop** when the training loss is at most ``stop_rtol`` (1e-8) times its initial value (their
  code's rule), when a step is not finite or the loss exceeds ``blowup`` times its initial value
  (diverged: the parameters before that step are kept), or at the step budget.
* **RF**: the readout fitted by minimum-norm least squares on the features at initialisation;
  **Test-LRfit**: the same fit on the features of the trained hidden layer (their Eq. 8), with
  their code's cut-off (eigenvalues of ``Phi Phi^T`` below ``1e-10`` of the largest dropped).
* **WCD** of the hidden weights (bias column excluded, as their code) to the teacher's: the
  paper's Eq. 9 (``wcd``) and the variant their code logs (``wcd_code``, see
  :func:`itlin.metrics.min_cosine_distance`).

**Units.** Step sizes and ``eps0`` are given in the paper's units, i.e. for their sizes
``M_ref = 5000``, ``N_ref = 500``, and converted so that a smaller run takes the same step:

* GN moves the training outputs by ``lr/N`` of a full (undamped) Gauss-Newton step, whatever
  ``M``: ``lr_ours = lr * N / N_ref`` (and ``/ C`` for ``C`` outputs, whose loss they average);
* GD moves each hidden unit by ``lr/M`` times an ``O(1)`` amount in the mean-field scaling,
  whatever ``N``: ``lr_ours = lr * M / M_ref`` (``/ C`` likewise);
* ``J J^T`` scales like ``N / M`` along its leading directions, so ``eps0_ours = eps0 * (N / N_ref)
  * (M_ref / M)`` keeps the floor in the same place relative to the spectrum.

At the paper's sizes the three conversions are the identity.

A sweep is one compiled program per method: every configuration (seed, ``tau0``, step size)
is a row of a ``jax.vmap``; the run is a ``lax.scan`` over log-spaced checkpoints with a
``lax.while_loop`` of steps between them, and every metric is computed at every checkpoint.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

REF_WIDTH = 5000
REF_N = 500
TEACHER_WIDTH = 5
DIM = 10
#: eigenvalues of Phi Phi^T below this fraction of the largest are dropped in the re-fit (their code)
REFIT_CUTOFF = 1e-10
METRICS = ("train", "test", "lrfit", "wcd", "wcd_code", "sigma_min")


# ------------------------------------------------------------------------------ units
def gn_lr(lr, *, n_train: int, outputs: int = 1, ref_n: int = REF_N) -> float:
    """A GN step size in the paper's units (for ``N_ref`` training points) as ours."""
    return float(lr) * n_train / ref_n / outputs


def gd_lr(lr, *, width: int, outputs: int = 1, ref_width: int = REF_WIDTH) -> float:
    """A GD step size in the paper's units (for ``M_ref`` hidden units) as ours."""
    return float(lr) * width / ref_width / outputs


def eps0_ours(eps0, *, width: int, n_train: int, ref_width: int = REF_WIDTH, ref_n: int = REF_N) -> float:
    """The damping floor in the paper's units as ours (``J J^T`` scales like ``N / M``)."""
    return float(eps0) * (n_train / ref_n) * (ref_width / width)


def checkpoints(steps: int, points: int) -> np.ndarray:
    """``0`` and about ``points`` log-spaced step counts up to ``steps`` (both ends included)."""
    ends = np.unique(np.round(np.geomspace(1, steps, max(points, 2))).astype(np.int64))
    return np.concatenate([[0], ends])


def with_bias(x) -> np.ndarray:
    """Inputs with a constant 1 appended (the hidden bias becomes a weight), float64."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


# ------------------------------------------------------------------------------ data
def teacher_data(seeds: int, seed: int, *, n_train: int, n_test: int, activation: str = "relu",
                 beta: float = 1.0) -> dict:
    """Seed ``s = 0 .. seeds-1`` uses data seed ``seed + s`` (teacher, test and training inputs).

    Returns stacked float64 arrays: ``x`` ``(S, N, d+1)`` (bias column appended), ``y``
    ``(S, N, 1)``, ``xt``, ``yt`` (test), ``ustar`` ``(S, M*, d)`` (teacher weights, no bias).
    """
    from .... import data

    sets = [data.arbel_teacher_student(n_train=n_train, n_test=n_test, seed=seed + s, activation=activation,
                                       beta=beta) for s in range(seeds)]
    return {
        "x": np.stack([with_bias(d.x_train) for d in sets]),
        "y": np.stack([np.asarray(d.y_train, np.float64) for d in sets]),
        "xt": np.stack([with_bias(d.x_test) for d in sets]),
        "yt": np.stack([np.asarray(d.y_test, np.float64) for d in sets]),
        "ustar": np.stack([np.asarray(d.meta["teacher"]["u"], np.float64) for d in sets]),
    }


def hidden_directions(seeds: int, seed: int, width: int, dim: int) -> np.ndarray:
    """``z`` ``(S, M, dim)`` standard normal, one draw per seed; the student's hidden layer at
    initialisation is ``tau0 * z`` (so every ``tau0`` of one seed shares the directions)."""
    import jax

    with jax.enable_x64(True):
        base = jax.random.PRNGKey(seed)
        return np.stack([np.asarray(jax.random.normal(jax.random.fold_in(base, s), (width, dim), jax.numpy.float64))
                         for s in range(seeds)])


# ------------------------------------------------------------------------------ metrics (JAX)
def refit_test_loss(act, u, x, y, xt, yt, cutoff: float = REFIT_CUTOFF):
    """Test-LRfit (their Eq. 8): the readout re-fitted by minimum-norm least squares on the
    frozen features ``Phi = act(x u^T)``, eigenvalues of ``Phi Phi^T`` below ``cutoff`` times
    the largest dropped; returns ``0.5 mean (pred - yt)^2`` over test examples and outputs."""
    import jax.numpy as jnp

    phi = act(x @ u.T)
    s, vec = jnp.linalg.eigh(phi @ phi.T)
    keep = s > cutoff * s[-1]
    inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    w = phi.T @ (vec @ (inv[:, None] * (vec.T @ y)))
    r = act(xt @ u.T) @ w - yt
    return 0.5 * jnp.mean(r * r)


def _cosines(u, ustar):
    import jax.numpy as jnp

    sq = jnp.sum(u * u, axis=1)
    norm = jnp.sqrt(sq)
    safe = jnp.where(norm > 0, norm, 1.0)
    cos = (u @ ustar.T) / (safe[:, None] * jnp.linalg.norm(ustar, axis=1)[None, :])
    p = sq / jnp.sum(sq)
    return p, cos, norm > 0


def wcd_eq9(u, ustar):
    """The paper's Eq. 9, ``2 sum_i p_i (1 - max_j cos(u_i, u*_j))`` (as
    :func:`itlin.metrics.weighted_cosine_distance`), in JAX."""
    import jax.numpy as jnp

    p, cos, nz = _cosines(u, ustar)
    return 2.0 * jnp.sum(p * jnp.where(nz, 1.0 - cos.max(axis=1), 0.0))


def wcd_code(u, ustar):
    """The distance their code logs (:func:`itlin.metrics.min_cosine_distance`), in JAX."""
    import jax.numpy as jnp

    p, cos, nz = _cosines(u, ustar)
    d = jnp.sqrt(jnp.clip(2.0 * (1.0 - cos), 0.0, None)).min(axis=1)
    return jnp.sum(p * jnp.where(nz, d, 0.0))


# ------------------------------------------------------------------------------ the sweep
def make_runner(method: str, *, width: int, dim: int, outputs: int = 1, activation: str = "relu",
                beta: float = 1.0, alpha: float = 1.0, eps0: float = 1e-7, stop_rtol: float = 1e-8,
                blowup: float = 1e3, ends: Sequence[int], dtype: str = "float64"):
    """A jitted ``run(z, x, y, xt, yt, ustar, tau0, lr) -> dict`` over a leading batch axis.

    ``method``: ``"gn"`` or ``"gd"``; ``eps0`` and ``lr`` are in *our* units (convert with
    :func:`eps0_ours`, :func:`gn_lr`, :func:`gd_lr`); ``ends``: the checkpoints (steps, first 0).
    Returns per configuration: ``steps`` (taken), ``converged``, ``diverged`` and ``(T,)``
    traces of :data:`METRICS` at the checkpoints (losses in their convention, averaged over
    outputs). Call inside ``jax.enable_x64(True)``.
    """
    import jax
    import jax.numpy as jnp

    from .... import models
    from ....core._tree import tree_all_finite, tree_select
    from ....core.gauss_newton import ArbelDamping, gauss_newton_direction
    from ....core.losses import get_loss

    if method not in ("gn", "gd"):
        raise ValueError(f"method must be 'gn' or 'gd', got {method!r}.")
    model = models.mean_field(width=width, num_outputs=outputs, activation=activation, beta=beta)
    f = model.bind()
    act, _ = models.get_activation(activation, beta)
    loss = get_loss("squared", "mean")
    damping = ArbelDamping(alpha, eps0)
    dt = jnp.float64 if (method == "gn" or dtype == "float64") else jnp.float32
    ends = jnp.asarray(np.asarray(ends, np.int64), jnp.int32)

    def metrics(p, x, y, xt, yt, ustar):
        p = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), p)
        u = p["u"]
        kernel = model.ntk_fn(p, x)
        return {
            "train": loss(f(p, x), y) / outputs,
            "test": loss(f(p, xt), yt) / outputs,
            "lrfit": refit_test_loss(act, u, x, y, xt, yt),
            "wcd": wcd_eq9(u[:, :dim], ustar),
            "wcd_code": wcd_code(u[:, :dim], ustar),
            "sigma_min": jnp.linalg.eigvalsh(0.5 * (kernel + kernel.T))[0],
        }

    def one(z, x, y, xt, yt, ustar, tau0, lr):
        xl, yl = x.astype(dt), y.astype(dt)
        p0 = {"u": (tau0 * z).astype(dt), "v": jnp.zeros((width, outputs), dt)}
        loss0 = loss(f(p0, xl), yl)
        lr = lr.astype(dt)

        def step(p):
            if method == "gn":
                d, info = gauss_newton_direction(f, p, xl, yl, loss="squared", reduction="mean", damping=damping,
                                                 hessian="identity", solve="eigh", ntk_fn=model.ntk_fn)
                return info.loss, d
            return jax.value_and_grad(lambda q: loss(f(q, xl), yl))(p)

        def body(c):
            # ``value`` is the loss at ``p``. A bad value (not finite, or blown up) means the step
            # that made ``p`` diverged: go back to ``prev``, the parameters before it.
            p, prev, k, conv, div, end = c
            value, d = step(p)
            bad = ~jnp.isfinite(value) | (value > blowup * loss0)
            reached = (value <= stop_rtol * loss0) & ~bad
            new = jax.tree_util.tree_map(lambda a, b: a - lr * b, p, d)
            bad_step = ~tree_all_finite(new) & ~bad & ~reached  # the step itself is not finite
            halt = bad | reached | bad_step
            p_out = tree_select(bad, prev, tree_select(halt, p, new))
            k_out = k + jnp.where(halt, jnp.where(bad, -1, 0), 1)
            return (p_out, tree_select(halt, prev, p), k_out, conv | reached, div | bad | bad_step, end)

        def cond(c):
            _, _, k, conv, div, end = c
            return (k < end) & ~conv & ~div

        def segment(carry, end):
            p, prev, k, conv, div = carry
            p, prev, k, conv, div, _ = jax.lax.while_loop(cond, body, (p, prev, k, conv, div, end))
            return (p, prev, k, conv, div), metrics(p, x, y, xt, yt, ustar)

        init = (p0, p0, jnp.zeros((), jnp.int32), jnp.asarray(False), jnp.asarray(False))
        (p, _, k, conv, div), trace = jax.lax.scan(segment, init, ends)
        return {"steps": k, "converged": conv, "diverged": div, **trace}

    def mapped(*args):
        # lax.map, not vmap: a vmapped (batched) LAPACK eigh inside this loop deadlocks the XLA CPU
        # thread pool on small machines (jaxlib 0.10.2: its ParallelBatchMap waits for tasks on the pool
        # it runs on). One configuration at a time keeps every eigh unbatched.
        return jax.lax.map(lambda a: one(*a), args)

    return jax.jit(mapped)


@lru_cache(maxsize=16)
def _cached_runner(method, width, dim, outputs, activation, beta, alpha, eps0, stop_rtol, blowup, ends, dtype):
    return make_runner(method, width=width, dim=dim, outputs=outputs, activation=activation, beta=beta, alpha=alpha,
                       eps0=eps0, stop_rtol=stop_rtol, blowup=blowup, ends=ends, dtype=dtype)


def runner(method: str, *, width: int, dim: int, outputs: int = 1, activation: str = "relu", beta: float = 1.0,
           alpha: float = 1.0, eps0: float = 1e-7, stop_rtol: float = 1e-8, blowup: float = 1e3, ends=(0, 1),
           dtype: str = "float64"):
    """:func:`make_runner`, memoised on its arguments (one compilation per shape and setting)."""
    return _cached_runner(method, int(width), int(dim), int(outputs), activation, float(beta), float(alpha),
                          float(eps0), float(stop_rtol), float(blowup), tuple(int(e) for e in ends), dtype)


def sweep(method: str, data: dict, z: np.ndarray, seed_index, tau0, lr, **runner_kwargs) -> dict:
    """Run the configurations ``(seed_index[i], tau0[i], lr[i])`` (lr in our units) of one
    method as one batch; returns numpy arrays with a leading configuration axis. The batch
    stops when its last configuration does: group configurations that stop together (for
    instance one step size per call) to save time."""
    import jax
    import jax.numpy as jnp

    idx = np.asarray(seed_index, np.int64)
    with jax.enable_x64(True):
        run = runner(method, **runner_kwargs)
        out = run(jnp.asarray(z[idx]), jnp.asarray(data["x"][idx]), jnp.asarray(data["y"][idx]),
                  jnp.asarray(data["xt"][idx]), jnp.asarray(data["yt"][idx]), jnp.asarray(data["ustar"][idx]),
                  jnp.asarray(np.asarray(tau0, np.float64)), jnp.asarray(np.asarray(lr, np.float64)))
        return {k: np.asarray(v) for k, v in out.items()}


def grid(*axes) -> list:
    """Flattened index grids: ``grid(3, 2)`` -> two arrays of length 6 (row-major)."""
    mesh = np.meshgrid(*[np.arange(a) for a in axes], indexing="ij")
    return [m.ravel() for m in mesh]


# ------------------------------------------------------------------------------ analysis helpers
def final(trace: np.ndarray) -> np.ndarray:
    """The last checkpoint of ``(..., T)`` traces (runs that stopped keep their final value)."""
    return np.asarray(trace)[..., -1]


def log10(a):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.asarray(a, np.float64))


def best_index(test: np.ndarray, diverged: np.ndarray) -> np.ndarray:
    """Index of the step size with the lowest seed-mean log10 final test loss, over ``(..., L, S)``
    arrays; step sizes with a diverged seed are excluded (all diverged: index 0)."""
    score = np.where(np.asarray(diverged).any(axis=-1), np.inf, np.nanmean(log10(test), axis=-1))
    score = np.where(np.isnan(score), np.inf, score)
    return np.argmin(score, axis=-1)


def fmt_lr(v: float) -> str:
    """``1e-3``, ``0.1``, ``1``, ``100``, ``1e3`` style labels."""
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    e = math.log10(abs(v))
    if abs(e - round(e)) < 1e-9 and (e <= -2 or e >= 3):
        return f"1e{int(round(e))}"
    return f"{v:g}"


__all__ = ["DIM", "METRICS", "REFIT_CUTOFF", "REF_N", "REF_WIDTH", "best_index", "checkpoints", "eps0_ours",
           "final", "fmt_lr", "gd_lr", "gn_lr", "grid", "hidden_directions", "log10", "make_runner",
           "refit_test_loss", "runner", "sweep", "teacher_data", "wcd_code", "wcd_eq9", "with_bias"]


# ------------------------------------------------------------------------------ shared by the experiments
COLOURS = {"gn": "#b2182b", "gd": "#2166ac", "rf": "0.35"}
LABELS = {"gn": "GN", "gd": "GD", "rf": "RF"}
METRIC_LABELS = {"wcd": "WCD (Eq. 9)", "wcd_code": "WCD (their code)", "train": "training loss",
                 "test": "test loss", "lrfit": "Test-LRfit", "sigma_min": r"$\sigma_{\min}(JJ^\top)$"}


def log_band(values, axis=-1):
    """``(centre, lo, hi)`` of ``values`` over ``axis`` (seeds): the mean of log10 with its 95%
    t-interval, returned as values (a geometric mean and its interval). NaN where a value is not
    finite or not positive."""
    from ...verdicts import seed_interval

    lv = np.moveaxis(log10(values), axis, -1)
    shape = lv.shape[:-1]
    flat = lv.reshape(-1, lv.shape[-1])
    out = np.full((3, flat.shape[0]), np.nan)
    for i, row in enumerate(flat):
        m, h = seed_interval(row)
        if math.isfinite(m):
            h = h if math.isfinite(h) else 0.0
            out[:, i] = (10 ** m, 10 ** (m - h), 10 ** (m + h))
    return tuple(o.reshape(shape) for o in out)


def log_gap(a, b):
    """:func:`itlin.book.verdicts.paired_gap` of ``log10 a - log10 b`` seed by seed (decades)."""
    from ...verdicts import paired_gap

    return paired_gap(log10(a), log10(b))


def fmt_decades(gap) -> str:
    """``"+0.42 ± 0.10 decades (5 seeds), x2.6"``: a gap of log10 values and the ratio it means."""
    from ...verdicts import fmt_gap

    if not math.isfinite(gap.mean):
        return "n/a"
    return fmt_gap(gap, scale=1.0, unit=" decades", digits=2) + f", ×{10 ** gap.mean:.2g}"


def settings_rows(p: dict, paper: dict) -> str:
    """A Markdown table: setting, the paper's value, ours (with a note)."""
    lines = ["| setting | Arbel et al. | this run |", "| --- | --- | --- |"]
    for name, (theirs, ours) in paper.items():
        lines.append(f"| {name} | {theirs} | {ours} |")
    return "\n".join(lines)


def final_results(res, lrs) -> dict:
    """One method's results of a step-size sweep kept at their last checkpoint (``METRICS``), with
    the RF baseline (``"rf"``: Test-LRfit at initialisation), steps, convergence, divergence and
    the step sizes ``lrs`` (the paper's units)."""
    return {**{k: res[k][..., -1] for k in METRICS}, "rf": res["lrfit"][..., 0], "steps": res["steps"],
            "converged": res["converged"].astype(bool), "diverged": res["diverged"].astype(bool),
            "lr": np.asarray(lrs)}


def with_rf_and_units(out, r) -> dict:
    """``out`` with ``rf_test`` (the RF test loss, the same for every seed row of GN and GD: GN's
    copy kept) and ``meta`` (the resolved parameters and how step sizes and eps0 convert)."""
    out["rf_test"] = out["gn"].pop("rf")[:, 0]
    out["gd"].pop("rf")
    out["meta"] = {"resolved": r, "units": {"gn_lr": "ours = paper x N/500", "gd_lr": f"ours = paper x M/{REF_WIDTH}",
                                            "eps0": "ours = paper x (N/500) x (5000/M)"}}
    return out
