"""What Arbel et al.'s experiments share: their parameters, data, engine and verdict helpers.

Their Section 5 as their code runs it (``/work/shared/papers/README.md``): the student ``f(x) =
(1/M) sum_i v_i gamma(u_i^T x + b_i)`` (inputs get a constant 1 appended, so ``(u_i, b_i)`` is a
row of :func:`itlin.models.mean_field`'s ``u``), hidden layer ``N(0, tau0^2)``, readout 0; loss
``0.5 mean (f - y)^2``; GN ``theta <- theta - lr J^T (J J^T + eps I)^{-1} (f - y)/N``, ``eps =
max(alpha sigma_min, eps0)``, float64 (:func:`itlin.gauss_newton_direction`,
:class:`itlin.ArbelDamping`); GD in float32; stop at ``stop_rtol`` of the initial training loss,
at a non-finite or blown-up loss (diverged: the parameters before the bad step are kept), or at
the budget. RF and Test-LRfit (Eq. 8) fit the readout by minimum-norm least squares on the
initial and on the trained features; WCD is Eq. 9 or their code's variant. Step sizes are chosen
on ``n_val`` further points of the same teacher and judged on the test set. Step sizes and
``eps0`` are in the paper's units (``M = 5000``, ``N = 500``), converted so that a smaller run
takes the same step: GN ``lr N / 500`` (the same fraction of a full GN step), GD ``lr M / 5000``
(the same move per unit), ``eps0 (N / 500)(5000 / M)``; ``/ C`` for ``C`` averaged outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Optional

import numpy as np

from .. import Derived, Params, param
from ... import verdicts as V
from ...labels import fmt_lr  # noqa: F401 (A.fmt_lr in chapters and figures)

REF_WIDTH, REF_N, DIM = 5000, 500, 10
#: eigenvalues of Phi Phi^T below this fraction of the largest are dropped in the re-fit (their code)
REFIT_CUTOFF = 1e-10
PAPER_LRS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
#: the paper's step budgets (Section 5.2)
PAPER_GN_STEPS, PAPER_GD_STEPS = 100_000, 1_000_000
METRICS = ("train", "val", "test", "lrfit", "wcd", "wcd_code", "sigma_min", "sigma_rel")
LABELS = {"gn": "GN", "gd": "GD", "rf": "RF"}


# ------------------------------------------------------------------------------ parameters
def _p(default, doc, label=None, source="", **kw):  # a parameter, its settings-table label and source
    return param(default, doc, label=label, source=source, **kw)


@dataclass(frozen=True)
class ArbelParams(Params):
    """What every Arbel experiment takes: sizes, seeds, the student, GN's damping, the stopping
    rule and the margin of the claims."""

    TASK = "teacher-student"

    seeds: Optional[int] = _p(None, "independent runs (teacher, data and student change); None: from scale", "seeds",
                              "one in their Figs. 1-2, five in App. C.1", min=1)
    width: Optional[int] = _p(None, "hidden units M of the student", "student width M", "Section 5.1", min=1)
    n_train: Optional[int] = _p(None, "training points N", "training points N", "Section 5.1", min=1)
    n_test: Optional[int] = _p(None, "test points (the verdicts)", "test points", "Section 5.1", min=1)
    n_val: int = _p(1000, "validation points of the same teacher: step sizes are chosen on them",
                    "validation points (step-size choice)", "ours: the paper chooses by test loss", paper="none", min=1)
    tau0: float = _p(1e-3, "std of the student's hidden weights and biases at initialisation",
                     "τ0 (std of the hidden layer at init)", "Fig. 1 right", gt=0)
    activation: Literal["relu", "silu"] = _p("relu", "the teacher's and the student's non-linearity", "non-linearity",
                                             "Section 5.1")
    beta: float = _p(1.0, "SiLU temperature: x * sigmoid(beta x)", gt=0)
    alpha: float = _p(1.0, "damping factor: eps = max(alpha sigma_min(J J^T), eps0)", min=0)
    eps0: float = _p(1e-7, "damping floor, the paper's units", "damping floor ε0 (their units)", "Section 5.2", min=0)
    stop_rtol: float = _p(1e-8, "stop when the training loss is below this times its initial value",
                          "stop at this fraction of the initial training loss", "their code (the paper: absolute 1e-7)",
                          min=0, lt=1)
    checkpoints: Optional[int] = _p(None, "log-spaced checkpoints where every metric is recorded", min=2)
    effect: float = _p(0.1, "decades: two losses within this 'match', a claimed difference must exceed it",
                       "margin of the claims (decades of loss)", "ours: ×1.26", gt=0)

    def check(self):
        r = self.resolved()
        n = max(r.get("n_trains") or [r["n_train"]])
        if min(r.get("widths") or [r["width"]]) < n:
            raise ValueError(f"width below n_train = {n}: RF and Test-LRfit need at least as many hidden units as "
                             "training points (over-parameterised)")
        for name in ("tau0s", "n_trains", "widths", "eps0s"):
            v = r.get(name)
            if v is not None and (len(v) < 2 or any(b <= a for a, b in zip(v, v[1:]))):
                raise ValueError(f"{name} must be at least two increasing values, got {v}")
        for what in ("small_lr", "large_lr"):  # the claims' two steps must be in GN's grid
            if what in r and not any(math.isclose(r[what], v, rel_tol=1e-9) for v in r["gn_lrs"]):
                raise ValueError(f"{what} = {r[what]:g} is not among gn_lrs {r['gn_lrs']}")
        if r.get("small_lr", 0) >= r.get("large_lr", math.inf):
            raise ValueError(f"small_lr = {r['small_lr']:g} must be smaller than large_lr = {r['large_lr']:g}")


@dataclass(frozen=True)
class SweepParams(ArbelParams):
    """:class:`ArbelParams` with a grid of step sizes and a step budget per method."""

    gn_lrs: Optional[tuple[float, ...]] = _p(None, "GN step sizes, the paper's units", "GN step sizes (their units)",
                                             "Fig. 1", gt=0, distinct=True)
    gd_lrs: Optional[tuple[float, ...]] = _p(None, "GD step sizes, the paper's units", "GD step sizes (their units)",
                                             "Fig. 1", gt=0, distinct=True)
    gn_steps: Optional[int] = _p(None, "most GN steps per run", "GN step budget", "Section 5.2", min=1)
    gd_steps: Optional[int] = _p(None, "most GD steps per run", "GD step budget", "Section 5.2", min=1)
    gd_dtype: Literal["float32", "float64"] = _p("float32", "GD's precision (GN is always float64)")

    def lrs(self, method: str) -> tuple:
        """``method``'s (``"gn"`` or ``"gd"``) grid of step sizes, the paper's units."""
        return {"gn": self.gn_lrs, "gd": self.gd_lrs}[method]

    def max_steps(self, method: str) -> int:
        """``method``'s step budget per run."""
        return {"gn": self.gn_steps, "gd": self.gd_steps}[method]

    def precision(self, method: str) -> str:
        """The dtype ``method`` trains in: GN always float64, GD ``gd_dtype``."""
        return {"gn": "float64", "gd": self.gd_dtype}[method]


def slope_margin_row(grid: str, symbol: str) -> Derived:
    """The settings table's row of the slope claims' margin, :func:`slope_margin` of ``effect``
    over the grid ``grid`` (``n_trains``, ``widths``), per decade of ``symbol`` (``N``, ``M``)."""
    return Derived(f"margin of the slope claims (per decade of {symbol})",
                   lambda r: f"{slope_margin(r['effect'], r[grid]):.3g}", f"ours: margin over {symbol}'s range")


def variant(r: ArbelParams, default: str = "relu") -> tuple:
    """``(id prefix, claim prefix)`` of a run whose activation is not the default, e.g.
    ``("silu_b1e6.", "SiLU β = 1e6: ")``, so that two runs' claims can share a chapter. ``r``: an
    :class:`ArbelParams` (a record's ``settings``)."""
    if r.activation == default:
        return "", ""
    if r.activation == "silu":
        return f"silu_b{fmt_lr(r.beta)}.", f"SiLU β = {fmt_lr(r.beta)}: "
    return f"{r.activation}.", f"{r.activation.replace('relu', 'ReLU')}: "


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
    return np.concatenate([[0], np.unique(np.round(np.geomspace(1, steps, max(points, 2))).astype(np.int64))])


def with_bias(x) -> np.ndarray:
    """Inputs with a constant 1 appended (the hidden bias becomes a weight), float64."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


# ------------------------------------------------------------------------------ data
def teacher_data(seeds: int, seed: int, *, n_train: int, n_test: int, n_val: int, activation: str = "relu",
                 beta: float = 1.0) -> dict:
    """Stacked float64 arrays, seed ``s`` from data seed ``seed + s``: ``x`` ``(S, N, d+1)`` (bias
    column appended), ``y`` ``(S, N, 1)``; ``xt``, ``yt`` the first ``n_test`` test points; ``xv``,
    ``yv`` the ``n_val`` after them (the test set does not depend on ``n_val``); ``ustar``
    ``(S, M*, d)`` the teacher's hidden weights."""
    from .... import data

    sets = [data.arbel_teacher_student(n_train=n_train, n_test=n_test + n_val, seed=seed + s, activation=activation,
                                       beta=beta) for s in range(seeds)]
    xt, yt = np.stack([with_bias(d.x_test) for d in sets]), np.stack([np.asarray(d.y_test, np.float64) for d in sets])
    return {"x": np.stack([with_bias(d.x_train) for d in sets]),
            "y": np.stack([np.asarray(d.y_train, np.float64) for d in sets]),
            "xt": xt[:, :n_test], "yt": yt[:, :n_test], "xv": xt[:, n_test:], "yv": yt[:, n_test:],
            "ustar": np.stack([np.asarray(d.meta["teacher"]["u"], np.float64) for d in sets])}


def hidden_directions(seeds: int, seed: int, width: int, dim: int) -> np.ndarray:
    """``z`` ``(S, M, dim)`` standard normal per seed: the hidden layer at init is ``tau0 * z``."""
    import jax

    with jax.enable_x64(True):
        return np.stack([np.asarray(jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), s), (width, dim),
                                                      jax.numpy.float64)) for s in range(seeds)])


def prepare(params: ArbelParams, *, n_train: Optional[int] = None, width: Optional[int] = None) -> tuple:
    """``(data, z, common)``: :func:`teacher_data`, the hidden directions and the engine's settings,
    for ``n_train`` points and ``width`` units (default: ``params``')."""
    N, M = n_train or params.n_train, width or params.width
    data = teacher_data(params.seeds, params.seed, n_train=N, n_test=params.n_test, n_val=params.n_val,
                        activation=params.activation, beta=params.beta)
    common = dict(width=M, dim=DIM, activation=params.activation, beta=params.beta, alpha=params.alpha,
                  eps0=eps0_ours(params.eps0, width=M, n_train=N), stop_rtol=params.stop_rtol)
    return data, hidden_directions(params.seeds, params.seed, M, DIM + 1), common


# ------------------------------------------------------------------------------ the engine
@lru_cache(maxsize=16)
def make_runner(method: str, *, width: int, dim: int, outputs: int = 1, activation: str = "relu",
                beta: float = 1.0, alpha: float = 1.0, stop_rtol: float = 1e-8, blowup: float = 1e3, ends=(0, 1),
                dtype: str = "float64"):
    """A jitted, memoised ``run(z, x, y, xv, yv, xt, yt, ustar, tau0, lr, eps0) -> dict`` over a leading
    batch axis (one compilation for every ``tau0``, step and floor, our units; checkpoints ``ends``):
    ``steps`` taken, ``converged``, ``diverged`` and ``(T,)`` traces of :data:`METRICS` (``sigma_rel``:
    ``sigma_min`` over the mean eigenvalue of ``J J^T``). Call inside ``jax.enable_x64(True)``."""
    import jax
    import jax.numpy as jnp

    from .... import models
    from ....core.gauss_newton import ArbelDamping, Descent, GaussNewtonDirection, GNResult, GradientDirection, Stop
    from ....core.losses import get_loss
    from ....metrics import cosine_distance_jax, refit_test_loss_jax

    if method not in ("gn", "gd"):
        raise ValueError(f"method must be 'gn' or 'gd', got {method!r}.")
    model = models.mean_field(width=width, num_outputs=outputs, activation=activation, beta=beta)
    f = model.bind()
    act, _ = models.get_activation(activation, beta)
    loss = get_loss("squared", "mean")
    dt = jnp.float64 if (method == "gn" or dtype == "float64") else jnp.float32
    ends = jnp.asarray(np.asarray(ends, np.int64), jnp.int32)

    def metrics(p, x, y, xv, yv, xt, yt, ustar):
        p = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), p)
        u, kernel = p["u"], model.ntk_fn(p, x)
        eig = jnp.linalg.eigvalsh(0.5 * (kernel + kernel.T))
        return {"train": loss(f(p, x), y) / outputs, "val": loss(f(p, xv), yv) / outputs,
                "test": loss(f(p, xt), yt) / outputs,
                "lrfit": refit_test_loss_jax(act, u, x, y, xt, yt, REFIT_CUTOFF),
                "wcd": cosine_distance_jax(u[:, :dim], ustar),
                "wcd_code": cosine_distance_jax(u[:, :dim], ustar, code=True),
                "sigma_min": eig[0], "sigma_rel": eig[0] / jnp.mean(eig)}

    def one(z, x, y, xv, yv, xt, yt, ustar, tau0, lr, eps0):
        xl, yl = x.astype(dt), y.astype(dt)
        p0 = {"u": (tau0 * z).astype(dt), "v": jnp.zeros((width, outputs), dt)}
        if method == "gn":
            direction = GaussNewtonDirection(f, xl, yl, loss="squared", reduction="mean",
                                             damping=ArbelDamping(alpha, eps0), hessian="identity", solve="eigh",
                                             ntk_fn=model.ntk_fn)
        else:
            direction = GradientDirection(lambda q: loss(f(q, xl), yl))
        # the library's one loop: a loss that is not finite or above ``blowup`` times the first
        # undoes the step that made it (diverged), one at or below ``stop_rtol`` times the first stops
        loop = Descent(direction, lr.astype(dt), Stop(rtol=stop_rtol, blowup=blowup))

        def segment(state, end):  # run to the checkpoint ``end``, then record every metric there
            state = loop.run(state, end)
            return state, metrics(state.params, x, y, xv, yv, xt, yt, ustar)

        state, trace = jax.lax.scan(segment, loop.init(p0, loss(f(p0, xl), yl)), ends)
        return {"steps": state.step, "converged": state.result == int(GNResult.converged),
                "diverged": state.result == int(GNResult.diverged), **trace}

    # lax.map, not vmap: a batched LAPACK eigh in this loop deadlocks XLA's CPU pool (jaxlib 0.10.2)
    return jax.jit(lambda *args: jax.lax.map(lambda a: one(*a), args))


def sweep(method: str, data: dict, z: np.ndarray, seed_index, tau0, lr, *, width: int, dim: int, outputs: int = 1,
          activation: str = "relu", beta: float = 1.0, alpha: float = 1.0, eps0: float = 1e-7,
          stop_rtol: float = 1e-8, blowup: float = 1e3, ends=(0, 1), dtype: str = "float64") -> dict:
    """Run the configurations ``(seed_index[i], tau0[i], lr[i], eps0[i])`` (numbers broadcast; our
    units) of one method (:func:`make_runner`); numpy arrays with a leading configuration axis.
    ``z`` is cut to ``width`` units (nested widths)."""
    import jax
    import jax.numpy as jnp

    idx = np.asarray(seed_index, np.int64)
    with jax.enable_x64(True):
        run = make_runner(method, width=int(width), dim=int(dim), outputs=int(outputs), activation=activation,
                          beta=float(beta), alpha=float(alpha), stop_rtol=float(stop_rtol), blowup=float(blowup),
                          ends=tuple(int(e) for e in ends), dtype=dtype)
        arrays = [np.ascontiguousarray(z[idx, :width])] + [data[k][idx] for k in ("x", "y", "xv", "yv", "xt", "yt",
                                                                                   "ustar")]
        per = [np.broadcast_to(np.asarray(v, np.float64), idx.shape) for v in (tau0, lr, eps0)]
        out = run(*map(jnp.asarray, arrays + per))
        return {k: np.asarray(v) for k, v in out.items()}


#: seeds per staged call of :func:`lr_grid`: a run of more seeds keeps its work every this many
#: seeds of a (step, ``tau0``), so a long record pauses and resumes between chunks
SEED_CHUNK = 32


def lr_grid(ctx, method: str, params: SweepParams, data: dict, z, common: dict, *, tau0s, ends,
            ref_n: int = REF_N) -> dict:
    """Method ``method`` at every step of ``params.lrs(method)`` (the paper's units for ``ref_n`` points)
    and every ``tau0`` of ``tau0s``, all seeds: arrays ``(L, G, S, ...)``, one staged call per (step,
    ``tau0``) and chunk of :data:`SEED_CHUNK` seeds (each seed's run is the same whatever its chunk:
    ``lax.map`` runs one configuration at a time)."""
    S, N, C = len(z), data["x"].shape[1], common.get("outputs", 1)
    ours = [gn_lr(v, n_train=N, outputs=C, ref_n=ref_n) if method == "gn" else
            gd_lr(v, width=common["width"], outputs=C) for v in params.lrs(method)]
    ctx.say(f"{method.upper()}: {len(ours)} step sizes x {len(tau0s)} tau0 x {S} seeds, at most "
            f"{params.max_steps(method)}")
    chunks = [np.arange(a, min(a + SEED_CHUNK, S)) for a in range(0, S, SEED_CHUNK)]

    def staged(lr, t, o):
        parts = [ctx.stage(f"{method} lr={lr:.12g} tau0={t:.12g}" + (f" seeds={c[0]}-{c[-1]}" if len(chunks) > 1 else ""),
                           lambda c=c: sweep(method, data, z, c, np.full(len(c), t), np.full(len(c), o), ends=ends,
                                             dtype=params.precision(method), **common)) for c in chunks]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    per = [[staged(lr, t, o) for t in tau0s] for lr, o in zip(params.lrs(method), ours)]
    res = {k: np.stack([np.stack([q[k] for q in row]) for row in per]) for k in per[0][0]}
    res["converged"], res["diverged"] = res["converged"].astype(bool), res["diverged"].astype(bool)
    res.update(lr=np.asarray(params.lrs(method), np.float64), lr_ours=np.asarray(ours), ends=np.asarray(ends))
    return res


def lr_sweep(ctx, params: SweepParams, data: dict, z, common: dict, ref_n: int = REF_N) -> dict:
    """Both methods at every step of their grids from ``params.tau0`` (:func:`lr_grid`): arrays
    ``m/<key>`` (L, S, ...) and ``rf_test`` (S,), RF's test loss."""
    out = {}
    for m in ("gn", "gd"):
        res = lr_grid(ctx, m, params, data, z, common, tau0s=[params.tau0], ref_n=ref_n,
                      ends=checkpoints(params.max_steps(m), params.checkpoints))
        out[m] = {k: (v if k in ("lr", "lr_ours", "ends") else v[:, 0]) for k, v in res.items()}
    return {**out, "rf_test": out["gn"]["lrfit"][0, :, 0]}


def lr_axes(outer: tuple = (), inner: tuple = (), checkpoints: bool = True) -> tuple:
    """The ``axes`` declaration of a sweep's arrays: for GN and GD, each run's arrays over ``outer``
    (an ablation's own grid), the method's step sizes, ``inner`` (another grid), the seeds and, with
    ``checkpoints``, the points along training (``<method>/ends`` gives their steps; ``steps``,
    ``converged`` and ``diverged`` have one value per run); the step sizes, and ``rf_test``."""
    out = [(f"{m}/{k}", (f"{m}_{a}",)) for m in ("gn", "gd") for k, a in
           (("lr", "step_size"), ("lr_ours", "step_size"), ("ends", "checkpoint"))[:3 if checkpoints else 1]]
    out.append(("rf_test", (*outer, *inner, "seed")))
    for m in ("gn", "gd"):
        run = (*outer, f"{m}_step_size", *inner, "seed")
        out += [(f"{m}/{k}", run) for k in ("steps", "converged", "diverged")[:3 * checkpoints]]
        out.append((f"{m}/*", run + (f"{m}_checkpoint",) * checkpoints))
    return tuple(out)


def finals(per: dict, params: SweepParams) -> dict:
    """``per[m]``: one dict of sweep arrays ``(L, ..., T)`` per size; as arrays ``(K, L, ...)`` at their
    last checkpoint, with ``m/lr`` and ``rf_test`` ``(K, ...)``: RF's test loss (GN's Test-LRfit at init)."""
    out = {}
    for m, sizes in per.items():
        res = {k: np.stack([q[k] for q in sizes]) for k in sizes[0]}
        out[m] = {**{k: res[k][..., -1] for k in METRICS}, "steps": res["steps"], "lr": np.asarray(params.lrs(m)),
                  "converged": res["converged"].astype(bool), "diverged": res["diverged"].astype(bool)}
    return {**out, "rf_test": np.stack([q["lrfit"][0, ..., 0] for q in per["gn"]])}


# ------------------------------------------------------------------------------ analysis
def log10(a):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(np.asarray(a, np.float64))


def geo(values) -> str:
    """The geometric mean over seeds (last axis), three digits."""
    m = float(np.nanmean(log10(values)))
    return "n/a" if not math.isfinite(m) else f"{10 ** m:.3g}"


def best_index(val: np.ndarray, diverged: np.ndarray) -> np.ndarray:
    """The step (axis -2 of ``(..., L, S)``) with the lowest mean log10 *validation* loss; a step
    with a diverged seed is excluded (all diverged: 0)."""
    score = np.where(np.asarray(diverged).any(axis=-1), np.inf, np.nanmean(log10(val), axis=-1))
    return np.argmin(np.where(np.isnan(score), np.inf, score), axis=-1)


def chosen(rec, axis: int, keys=("test", "converged", "diverged")) -> dict:
    """Per method ``m``: ``best[m]``, the step (axis ``axis`` of its final arrays, seeds last) with the
    lowest mean log validation loss (:func:`best_index`), ``lr[m]``, and ``<key>[m]`` at that step."""
    out = {k: {} for k in ("best", "lr", *keys)}
    for m in ("gn", "gd"):
        move = lambda k: np.moveaxis(np.asarray(rec[f"{m}/{k}"]), axis, -2)  # noqa: E731
        best = out["best"][m] = best_index(move("val").astype(np.float64), move("diverged").astype(bool))
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
        for k in keys:
            out[k][m] = np.take_along_axis(move(k), best[..., None, None], -2)[..., 0, :]
    return out


def slope_margin(effect: float, grid) -> float:
    """The slope (decades per decade) that changes the loss across ``grid`` by ``effect`` decades."""
    return effect / np.log10(max(grid) / min(grid))


def at(lrs, lr) -> int:
    """Index of step size ``lr`` in the grid ``lrs`` (an IndexError if it is not there)."""
    return int(np.flatnonzero(np.isclose(np.asarray(lrs, np.float64), lr, rtol=1e-9))[0])


def hidden_gain(train, lrfit, rf, delta: float) -> np.ndarray:
    """Per seed: how far Test-LRfit has fallen below RF's (decades) at the last checkpoint at
    which the training loss is still within ``delta`` decades of its initial value (the readout
    has not started to fit the data). ``train``, ``lrfit`` (S, T); ``rf`` (S,)."""
    lt = log10(train)
    still = np.cumprod(lt >= lt[:, :1] - delta, axis=1).astype(bool)
    k = still.sum(axis=1) - 1
    return log10(rf) - log10(np.asarray(lrfit)[np.arange(len(k)), k])


def decades(id, claim, paper, a, b, margin, *, rule="exceeds", log=True, diverged=None, measured="", detail="",
            headline=False, unit="decades") -> V.Verdict:
    """``judge`` on the paired gap of ``log10 a - log10 b`` (``log=False``: ``a - b``) over seeds;
    seeds with a diverged run (``diverged``) are left out and counted (``dropped``)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if log:
        a, b = log10(a), log10(b)
    keep = np.ones(a.shape, bool) if diverged is None else ~np.asarray(diverged, bool)
    return V.judge(id, claim, paper, V.paired_gap(a[keep], b[keep]), rule, margin, measured=measured, detail=detail,
                   headline=headline, unit=unit, scale=1.0, digits=2, dropped=int((~keep).sum()))


def lr_rows(s: dict) -> list:
    """Summary rows of :func:`lr_arrays`: per method and step, geometric means over seeds, and how runs ended."""
    return [{"method": LABELS[m], "step (their units)": fmt_lr(lr), **{w: geo(s["final"][m][k][i]) for k, w in (
        ("train", "train loss"), ("test", "test loss"), ("lrfit", "Test-LRfit"), ("wcd", "WCD"))},
        "steps (median)": int(np.median(s["steps"][m][i])), "converged / diverged": f"{s['converged'][m][i].sum()} / "
        f"{s['diverged'][m][i].sum()} of {s['steps'][m][i].size}"} for m in ("gn", "gd")
        for i, lr in enumerate(s["lr"][m])] + [{"method": "RF", "test loss": geo(s["rf"])}]


def step_cells(s: dict, i, test: dict) -> dict:
    """Each method's chosen step (``s["best"]``) and its test loss (geometric mean) at grid point ``i``."""
    return {k: v for m in ("gn", "gd") for k, v in ((f"{LABELS[m]} step", fmt_lr(s["lr"][m][s["best"][m][i]])),
                                                     (f"{LABELS[m]} test loss", geo(test[m][i])))}


def lr_arrays(rec) -> dict:
    """A step-size sweep's record as arrays: ``lr[m]``, ``trace[m][metric]`` (L, S, T), ``final[m][metric]``,
    ``diverged[m]``, ``converged[m]``, ``steps[m]`` (L, S), ``ends[m]``, ``rf`` (S,), ``best[m]`` (chosen on
    validation) and ``r`` (the settings, ``rec.settings``)."""
    out = {k: {} for k in ("lr", "trace", "final", "ends", "diverged", "converged", "steps", "best")}
    out.update(rf=np.asarray(rec["rf_test"], np.float64), r=rec.settings)
    for m in ("gn", "gd"):
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
        out["trace"][m] = {k: np.asarray(rec[f"{m}/{k}"], np.float64) for k in METRICS}
        out["final"][m] = {k: v[..., -1] for k, v in out["trace"][m].items()}
        out["ends"][m] = np.asarray(rec[f"{m}/ends"])
        for k in ("diverged", "converged"):
            out[k][m] = np.asarray(rec[f"{m}/{k}"], bool)
        out["steps"][m] = np.asarray(rec[f"{m}/steps"])
        out["best"][m] = int(best_index(out["final"][m]["val"], out["diverged"][m]))
    return out


def pool_lr_sweeps(records):
    """One record of several step-size sweeps (:func:`lr_sweep`: ``arbel_steps``, ``arbel_mnist``)
    made for consecutive ranges of seeds with otherwise equal settings (e.g. two processes side by
    side, Arbel's runs being single-threaded): the per-seed arrays joined along their seed axis
    (``rf_test`` its first, ``<method>/...`` their second), the step grids and checkpoints kept
    once, ``seeds`` the total and the wall time summed; the first record's provenance otherwise.
    Refuses records of other experiments, versions or settings, and seeds that are not
    consecutive."""
    from ...records import pooled_record

    records = list(records)
    if not records:
        raise ValueError("pool_lr_sweeps: no records to pool.")
    first = records[0]
    settings = lambda rec: vars(rec.settings.replace(seed=0, seeds=0))
    shared = ("/lr", "/lr_ours", "/ends")
    arrays = dict(first.arrays)
    for prev, rec in zip(records, records[1:]):
        if (rec.experiment, rec.info.get("version")) != (first.experiment, first.info.get("version")):
            raise ValueError(f"pool_lr_sweeps: {rec.path} is another experiment or version than {first.path}.")
        if settings(rec) != settings(first):
            raise ValueError(f"pool_lr_sweeps: {rec.path} has other settings than {first.path}; pool records that "
                             "differ only in their seeds.")
        pr, r = prev.settings, rec.settings
        if int(r.seed) != int(pr.seed) + int(pr.seeds):
            raise ValueError(f"pool_lr_sweeps: {rec.path} starts at seed {r.seed}, not at "
                             f"{int(pr.seed) + int(pr.seeds)} where {prev.path} ends; pool consecutive seeds.")
        if set(rec.arrays) != set(first.arrays):
            raise ValueError(f"pool_lr_sweeps: {rec.path} holds other arrays than {first.path}.")
        for k, v in rec.arrays.items():
            if k.endswith(shared):
                if not np.array_equal(v, first.arrays[k]):
                    raise ValueError(f"pool_lr_sweeps: {k} differs between {first.path} and {rec.path}.")
            elif k == "rf_test" or (k.startswith(("gn/", "gd/")) and np.ndim(v) >= 2):
                arrays[k] = np.concatenate([arrays[k], v], axis=0 if k == "rf_test" else 1)
            else:
                raise ValueError(f"pool_lr_sweeps: no seed axis known for array {k!r}.")
    seeds = sum(int(rec.settings.seeds) for rec in records)
    return pooled_record(records, arrays, [list(p) for p in first.paths], params={**first.params, "seeds": seeds})


__all__ = ["ArbelParams", "DIM", "LABELS", "METRICS", "PAPER_GD_STEPS", "PAPER_GN_STEPS", "PAPER_LRS", "REFIT_CUTOFF",
           "REF_N", "REF_WIDTH", "SweepParams", "at", "best_index", "checkpoints", "chosen", "decades", "eps0_ours",
           "finals", "fmt_lr", "gd_lr", "geo", "gn_lr", "hidden_directions", "hidden_gain", "log10",
           "lr_arrays", "lr_axes", "lr_grid", "lr_rows", "lr_sweep", "make_runner", "pool_lr_sweeps", "prepare", "slope_margin",
           "slope_margin_row", "step_cells", "sweep", "teacher_data", "variant", "with_bias"]
