"""The quintic demo of the chapter on iterative linearisation: K and the learning rate, live.

The main paper's quintic network (:func:`itlin.models.mlp`: five hidden ReLU layers of 50) is
trained full batch on the quintic (:func:`itlin.data.quintic`, 20 training points) with
iterative linearisation (Algorithm 1: plain gradient-descent steps on the network linearised at
an anchor that moves every ``K`` steps) and the squared loss ``0.5 * mean((f - y)^2)``. For
each setting we keep the function the network and its current linearisation compute on a fine
grid, and the training loss of both over the run, with the steps where the features were
updated (:attr:`itlin.History.relin_steps`).

* :func:`train_setting` trains one setting (the live ipywidgets demo calls it on every slider
  change); the experiment ``quintic_demo`` runs a grid of settings through the runner, so the
  book's static demo is computed once and cached.
* :func:`setting_from_record` reads one setting back from the record; :func:`plot_setting`
  draws a setting (fitted function, and loss over steps); :func:`frames` renders the grid for
  :func:`itlin.book.widgets.static_demo`; :func:`live_demo` builds the ipywidgets version.

Scales: ``tiny`` (3 x 2 settings, 300 steps: seconds), ``default`` (K in 1, 10, 100, 1000, inf
times three learning rates, 20,000 steps), ``paper`` (the paper has no such figure: a finer
grid and 100,000 steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from typing import Optional

from .. import Experiment, Params, Period, param, register

NAME = "quintic_demo"

SCALES = {
    "tiny": {"Ks": [1, 100, math.inf], "learning_rates": [0.003, 0.01], "steps": 300, "evals": 30},
    "default": {"Ks": [1, 10, 100, 1000, math.inf], "learning_rates": [0.001, 0.003, 0.01], "steps": 20_000,
                "evals": 200},
    "paper": {"Ks": [1, 10, 100, 1000, 10_000, math.inf], "learning_rates": [0.001, 0.002, 0.005, 0.01],
              "steps": 100_000, "evals": 500},
}

# the live demo's slider values (finer than the static grid: it trains on demand)
LIVE_KS = [1, 3, 10, 30, 100, 300, 1000, 3000, math.inf]
LIVE_LEARNING_RATES = [0.0005, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03]

GRID_POINTS = 400  # inputs at which the fitted functions are kept

#: a run has diverged once its training loss is not finite or exceeds this multiple of its first
#: loss (the rule of the headline experiments; ``blowup`` parameter)
BLOWUP = 100.0


def setting_tag(K, lr) -> str:
    """The name of one setting's training run in the record, e.g. ``"K=100,lr=0.003"``."""
    k = "inf" if math.isinf(float(K)) else str(int(K))
    return f"K={k},lr={float(lr):g}"


def resolve(params: dict) -> dict:
    """``params`` with ``Ks``, ``learning_rates``, ``steps`` and ``evals`` filled in from the scale."""
    p = dict(params)
    for key, value in SCALES[p.get("scale", "default")].items():
        if p.get(key) is None:
            p[key] = value
    return p


@dataclass
class DemoRun:
    """One trained setting: what the demo draws.

    ``x_grid``/``y_grid``: inputs and the true quintic; ``f_net``/``f_lin``/``f_init``: the
    network at the end, its linearisation at the last anchor (what iterative linearisation was
    training), and the network at initialisation, all on ``x_grid``; ``history``: the
    :class:`itlin.History` (evaluations of ``train/loss`` and ``train/loss_lin``, the
    relinearisation steps); ``status``: ``"completed"`` or ``"diverged at step s"``.
    """

    K: float
    lr: float
    steps: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_grid: np.ndarray
    y_grid: np.ndarray
    f_net: np.ndarray
    f_lin: np.ndarray
    f_init: np.ndarray
    history: Any
    feature_updates: int
    status: str
    ntk_max_init: float = math.nan
    ntk_max_end: float = math.nan
    meta: dict = field(default_factory=dict)

    @property
    def diverged(self) -> bool:
        return "diverged" in self.status

    def final(self, key: str) -> float:
        """The last recorded value of an evaluated metric (e.g. ``"test/rmse"``)."""
        v = self.history.eval_array(key)
        return float(v[-1]) if v.size else math.nan


def _problem(width, depth, seed):
    import jax

    from .... import data, models

    ds = data.load("quintic")
    net = models.mlp(num_outputs=1, width=int(width), depth=int(depth))
    params, _ = net.init(jax.random.PRNGKey(int(seed)), ds.x_train)
    lo, hi = ds.meta["interval"]
    x_grid = np.linspace(lo, hi, GRID_POINTS, dtype=np.float32)[:, None]
    return ds, net, params, x_grid


def train_setting(K, lr, steps: int, *, seed: int = 0, width: int = 50, depth: int = 5, evals: int = 200,
                  fit_fn: Optional[Callable] = None, tag: Optional[str] = None,
                  blowup: Optional[float] = BLOWUP) -> DemoRun:
    """Train one setting of the demo (full batch, SGD with learning rate ``lr``, period ``K``).

    ``evals`` evaluations of the true network and the linearised model on the training and
    test sets are spread over the run. The largest eigenvalue of the empirical NTK on the
    training inputs is kept at initialisation and at the end (NaN if the parameters are no
    longer finite): gradient descent on a frozen linearisation of the mean squared loss is
    stable only while ``lr < 2 N / lambda_max``. A run has diverged (and stops) once its training
    loss is not finite or exceeds ``blowup`` times its first loss (``None``: only non-finite).
    ``fit_fn`` defaults to :func:`itlin.fit`; the
    experiment passes the runner's ``ctx.fit`` (checkpoints, stored histories) with ``tag``.
    """
    import optax

    from ....core._tree import tree_all_finite
    from ....core.linearise import ntk as empirical_ntk
    from ....core.linearise import linearised_apply
    from ....core.loop import fit
    from ....core.train import iterative_linearisation

    ds, net, params, x_grid = _problem(width, depth, seed)
    trainer = iterative_linearisation(net, optax.sgd(float(lr)), K, loss="squared")
    eval_every = max(1, int(steps) // max(1, int(evals)))
    sets = {"train": (ds.x_train, ds.y_train), "test": (ds.x_test, ds.y_test)}
    if fit_fn is None:
        res = fit(trainer, trainer.init(params), ds.x_train, ds.y_train, int(steps), eval_sets=sets,
                  eval_every=eval_every, blowup=blowup)
    else:
        res = fit_fn(tag or setting_tag(K, lr), trainer, trainer.init(params), ds.x_train, ds.y_train, int(steps),
                     eval_sets=sets, eval_every=eval_every, blowup=blowup)
    st = res.state
    apply = net.bind(st.model_state)
    f_net = np.asarray(net.apply(st.params, x_grid))[:, 0]
    f_lin = np.asarray(linearised_apply(apply, st.anchor, st.params, x_grid))[:, 0]
    f_init = np.asarray(net.apply(params, x_grid))[:, 0]
    from ....data import quintic_function

    def ntk_max(p):
        if not bool(tree_all_finite(p)):
            return math.nan
        k = np.asarray(empirical_ntk(apply, p, ds.x_train), np.float64)
        return float(np.linalg.eigvalsh(k)[-1]) if np.isfinite(k).all() else math.nan

    return DemoRun(K=float(K), lr=float(lr), steps=int(steps), x_train=ds.x_train[:, 0], y_train=ds.y_train[:, 0],
                   x_grid=x_grid[:, 0], y_grid=quintic_function(x_grid[:, 0]), f_net=f_net, f_lin=f_lin,
                   f_init=f_init, history=res.history, feature_updates=int(st.feature_updates), status=res.history.describe(),
                   ntk_max_init=ntk_max(params), ntk_max_end=ntk_max(st.params), meta={"seed": int(seed), "width": int(width), "depth": int(depth)})


def _run(p, ctx):
    p = resolve(p)
    out = {"settings": {}}
    for lr in p["learning_rates"]:
        for K in p["Ks"]:
            tag = setting_tag(K, lr)
            r = train_setting(K, lr, p["steps"], seed=p["seed"], width=p["width"], depth=p["depth"],
                              evals=p["evals"], fit_fn=ctx.fit, tag=tag, blowup=float(p.get("blowup", BLOWUP)))
            out["settings"][tag] = {"f_net": r.f_net, "f_lin": r.f_lin, "feature_updates": r.feature_updates,
                                    "ntk_max_init": r.ntk_max_init, "ntk_max_end": r.ntk_max_end}
            if "x_grid" not in out:
                out.update(x_grid=r.x_grid, y_grid=r.y_grid, f_init=r.f_init, x_train=r.x_train, y_train=r.y_train)
    out["meta"] = {"Ks": ["inf" if math.isinf(k) else int(k) for k in p["Ks"]],
                   "learning_rates": list(p["learning_rates"]), "steps": p["steps"]}
    return out


def setting_from_record(record, K, lr) -> DemoRun:
    """One setting of a ``quintic_demo`` record as a :class:`DemoRun` (for :func:`plot_setting`)."""
    tag = setting_tag(K, lr)
    if tag not in record.runs:
        raise KeyError(f"the record has no setting {tag!r}; it has {', '.join(record.runs)}.")
    s = record["settings"][tag]
    run = record.runs[tag]
    return DemoRun(K=float(K), lr=float(lr), steps=int(run["target_steps"]), x_train=record["x_train"],
                   y_train=record["y_train"], x_grid=record["x_grid"], y_grid=record["y_grid"],
                   f_net=np.asarray(s["f_net"]), f_lin=np.asarray(s["f_lin"]), f_init=record["f_init"],
                   history=record.history(tag), feature_updates=int(np.asarray(s["feature_updates"])),
                   status=record.history(tag).describe(), ntk_max_init=float(np.asarray(s["ntk_max_init"])),
                   ntk_max_end=float(np.asarray(s["ntk_max_end"])))


def grid(record) -> tuple:
    """``(Ks, learning_rates)`` of a ``quintic_demo`` record, as numbers (``math.inf`` for inf)."""
    meta = record.meta
    Ks = [math.inf if k == "inf" else int(k) for k in meta["Ks"]]
    return Ks, [float(v) for v in meta["learning_rates"]]


def k_label(K) -> str:
    return "∞" if math.isinf(float(K)) else f"{int(K):,}"


def caption(run: DemoRun) -> str:
    """One line for a setting: K, learning rate, feature updates, final RMSEs, status."""
    parts = [f"K = {k_label(run.K)}", f"learning rate {run.lr:g}", f"{run.feature_updates:,} feature updates "
             f"in {run.steps:,} steps"]
    tr, tr_lin, te = run.final("train/rmse"), run.final("train/rmse_lin"), run.final("test/rmse")
    if run.diverged:
        parts.append(f"{run.status} (curves stop there)")
    if math.isfinite(tr):
        parts.append(f"train RMSE {tr:.3f} (linearised model {tr_lin:.3f}), test RMSE {te:.3f}")
    return " · ".join(parts)


def loss_limits(runs) -> tuple:
    """Shared y-limits for the loss panels of several settings (so frames do not jump)."""
    vals = []
    for r in runs:
        for key in ("train/loss", "train/loss_lin"):
            v = r.history.eval_array(key)
            vals.append(v[np.isfinite(v) & (v > 0)])
    v = np.concatenate(vals) if vals else np.array([1e-3, 1.0])
    if v.size == 0:
        v = np.array([1e-3, 1.0])
    lo, hi = float(np.min(v)), float(np.max(v))
    lo = max(lo, hi * 1e-4)  # a run that reaches zero loss leaves through the bottom
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + 0.3)


# plotting colours
_NET, _LIN, _TRUTH, _RELIN = "#1f5fa8", "#e07b00", "0.15", "#7a3fa0"


def plot_setting(run: DemoRun, fig=None, *, loss_ylim=None, title: bool = True):
    """Draw one setting: on top the functions, below the training losses over steps.

    Top: the true quintic, the 20 training points, the network at initialisation, the trained
    network and the linearised model it was training at the end (they coincide right after a
    relinearisation). Bottom: the training loss (``0.5 * mean squared error``) of the true
    network and of the linearised model over steps (log scale), with the relinearisations
    marked along the top (as ticks when there are at most 60, as a note otherwise). A diverged
    run is cut at its last finite evaluation and marked with a cross.
    """
    import matplotlib.pyplot as plt

    from ...plotting import plot_history

    from ...plotting import COLUMN_WIDTH

    if fig is None:  # the column's width, panels stacked: legible on the page and on a phone
        fig = plt.figure(figsize=(COLUMN_WIDTH, 7.2), layout="constrained")
    ax_f, ax_l = fig.subplots(2, 1)

    ax_f.plot(run.x_grid, run.y_grid, color=_TRUTH, lw=1.2, label="true quintic")
    ax_f.plot(run.x_grid, run.f_init, color="0.6", lw=1.0, ls=":", label="network at initialisation")
    ax_f.plot(run.x_grid, run.f_lin, color=_LIN, lw=2.0, ls="--", label="linearised model at the last anchor")
    ax_f.plot(run.x_grid, run.f_net, color=_NET, lw=1.8, label="network $f_{\\theta_T}$")
    ax_f.plot(run.x_train, run.y_train, "o", ms=4.5, mfc="white", mec=_TRUTH, mew=1.3, label="training points", zorder=5)
    ax_f.set_ylim(-4.5, 2.5)
    lost = ~np.isfinite(run.f_net) | (np.abs(run.f_net) > 1e3)
    if run.diverged and lost.any():
        ax_f.text(0.03, 0.97, f"{run.status}:\nthe network's outputs\nare no longer finite", transform=ax_f.transAxes,
                  ha="left", va="top", fontsize=10, color="#b00020")
    ax_f.set_xlim(run.x_grid[0], run.x_grid[-1])
    ax_f.set_xlabel("input $x$")
    ax_f.set_ylabel("output")
    ax_f.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9.5, frameon=False)
    ax_f.set_title("fitted function after training", fontsize=11)

    h = run.history
    plot_history(ax_l, h, "train/loss", label="network $f_{\\theta_t}$", color=_NET, lw=1.8)
    plot_history(ax_l, h, "train/loss_lin", label="linearised model $f^{\\mathrm{lin}}_{s,t}$", color=_LIN, lw=1.6,
                 linestyle="--" if not run.diverged else ":")
    ax_l.set_yscale("log")
    if loss_ylim is not None:
        ax_l.set_ylim(*loss_ylim)
    ax_l.set_xlim(0, run.steps)
    ax_l.set_xlabel("step $t$")
    ax_l.set_ylabel("training loss  $\\frac{1}{2}\\,$mean$(f-y)^2$")
    relin = np.asarray(h.relin_steps)
    if 0 < relin.size <= 60:
        ax_l.plot(relin, np.ones_like(relin, dtype=float), transform=ax_l.get_xaxis_transform(), marker="|",
                  ls="none", ms=9, mew=1.4, color=_RELIN, clip_on=False, label="feature update (relinearisation)")
    elif relin.size > 60:
        every = "after every step" if run.K == 1 else f"every {k_label(run.K)} steps"
        ax_l.text(0.99, 0.97, f"features updated {every} ({relin.size:,} times)",
                  transform=ax_l.transAxes, ha="right", va="top", fontsize=10, color=_RELIN)
    else:
        ax_l.text(0.99, 0.97, "no feature update (K = ∞)" if math.isinf(run.K) else "no feature update yet",
                  transform=ax_l.transAxes, ha="right", va="top", fontsize=10, color=_RELIN)
    ax_l.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9.5, frameon=False)
    ax_l.set_title("training loss: network vs its linearisation", fontsize=11)
    if title:
        fig.suptitle(f"K = {k_label(run.K)},  learning rate {run.lr:g}:  {run.feature_updates:,} feature updates"
                     + (f"  ({run.status})" if run.diverged else ""), fontsize=11)
    return fig


def frames(record, *, dpi: float = 200) -> tuple:
    """Render every setting of a ``quintic_demo`` record for :func:`itlin.book.widgets.static_demo`.

    Returns ``(frames, captions, runs)``: ``{(K, lr): png bytes}``, ``{(K, lr): caption}`` and
    ``{(K, lr): DemoRun}``. All frames share the loss axis limits. The figures are as wide as
    the book's column, so ``dpi=200`` frames go with ``static_demo(..., pixel_ratio=2)``.
    """
    from ...widgets import figure_to_png

    Ks, lrs = grid(record)
    runs = {(K, lr): setting_from_record(record, K, lr) for lr in lrs for K in Ks}
    ylim = loss_limits(runs.values())
    out, caps = {}, {}
    for key, run in runs.items():
        out[key] = figure_to_png(plot_setting(run, loss_ylim=ylim), dpi=dpi)
        caps[key] = caption(run)
    return out, caps, runs


# ------------------------------------------------------------------------------ checks of the chapter's maths
def k_conv_check(*, seed: int = 0, lr: float = 0.01, width: int = 50, depth: int = 5, rel_cut: float = 1e-5) -> dict:
    """A numerical check of ``K_conv = N / (eta lambda_min)`` for the mean squared loss.

    Gradient descent on the frozen linearisation (``K = inf``) of ``0.5 mean (f - y)^2`` moves
    the training residual by ``r <- (I - eta Theta / N) r``, so its component along the NTK
    eigenvector of the smallest non-zero eigenvalue ``lambda_min`` (eigenvalues above ``rel_cut``
    times the largest) shrinks by ``(1 - eta lambda_min / N)`` per step: by about ``e^{-1}`` after
    ``K_conv`` steps. This trains the demo's network with itlin's ``K = inf`` trainer for
    ``round(K_conv)`` steps and measures that component: ``measured`` (its ratio to the initial
    one), ``predicted`` (``(1 - eta lambda_min / N)^steps``) and ``predicted_sum``
    (``(1 - eta lambda_min)^steps``: what ``1 / (eta lambda_min)``, the summed loss's ``K_conv``,
    would imply for this loss)."""
    import optax

    from ....core.linearise import linearised_apply
    from ....core.linearise import ntk as empirical_ntk
    from ....core.loop import fit
    from ....core.train import iterative_linearisation

    ds, net, params, _ = _problem(width, depth, seed)
    apply = net.bind()
    x, y = ds.x_train, np.asarray(ds.y_train, np.float64).reshape(-1)
    n = x.shape[0]
    theta = np.asarray(empirical_ntk(apply, params, x), np.float64)
    e, vecs = np.linalg.eigh(theta)
    idx = int(np.flatnonzero(e > rel_cut * e[-1])[0])
    lam, v = float(e[idx]), vecs[:, idx]
    k_conv = n / (float(lr) * lam)
    steps = int(round(k_conv))
    trainer = iterative_linearisation(net, optax.sgd(float(lr)), "inf", loss="squared")
    st = fit(trainer, trainer.init(params), x, ds.y_train, steps).state
    r0 = np.asarray(apply(params, x), np.float64).reshape(-1) - y
    rk = np.asarray(linearised_apply(apply, st.anchor, st.params, x), np.float64).reshape(-1) - y
    return {"N": n, "lr": float(lr), "lambda_min": lam, "K_conv": k_conv, "K_conv_sum": 1.0 / (float(lr) * lam),
            "steps": steps, "measured": float(v @ rk) / float(v @ r0),
            "predicted": (1.0 - float(lr) * lam / n) ** steps, "predicted_sum": (1.0 - float(lr) * lam) ** steps}


def two_line_fit(x, y) -> dict:
    """The least-squares fit of ``y`` by a function linear on each side of 0, ``a_- x + b_-`` for
    ``x < 0`` and ``a_+ x + b_+`` for ``x >= 0`` (the span of a zero-bias ReLU network's Jacobian
    with a scalar input): its ``rmse``, ``a_minus``, ``b_minus``, ``a_plus``, ``b_plus``,
    ``jump`` (``b_+ - b_-``) and ``max_residual``. For a function the linearised network at
    initialisation computes, the residual is rounding; for data it is the lowest train RMSE any
    ``K = inf`` model can reach.

    >>> fit = two_line_fit([-2.0, -1.0, 1.0, 2.0], [-3.0, -1.0, 4.0, 5.0])
    >>> round(fit["rmse"], 6), round(fit["jump"], 6)
    (0.0, 2.0)
    """
    x, y = np.asarray(x, np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
    out, res = {}, np.zeros_like(y)
    for side, m in (("minus", x < 0), ("plus", x >= 0)):
        if m.sum() < 2:
            raise ValueError("two_line_fit needs at least two points on each side of 0.")
        A = np.stack([x[m], np.ones(m.sum())], axis=1)
        coef = np.linalg.lstsq(A, y[m], rcond=None)[0]
        out[f"a_{side}"], out[f"b_{side}"] = float(coef[0]), float(coef[1])
        res[m] = y[m] - A @ coef
    out.update(rmse=float(np.sqrt(np.mean(res ** 2))), jump=out["b_plus"] - out["b_minus"],
               max_residual=float(np.abs(res).max()))
    return out


def phase_gaps(steps, rmse_net, rmse_lin, relin_steps) -> dict:
    """Whether the network and its linearisation part within each phase: for every phase
    (between two relinearisations) with at least two evaluations inside it, the gap
    ``rmse_net - rmse_lin`` at its first and last evaluation. ``grew``: phases where the gap
    grew; ``phases``: phases counted; ``median_growth``: the median last-minus-first gap.

    >>> g = phase_gaps([0, 5, 10, 15, 20], [1.0, 1.2, 1.0, 1.3, 1.1], [1.0, 0.9, 1.0, 0.8, 0.7], [10])
    >>> g["grew"], g["phases"]
    (2, 2)
    """
    steps = np.asarray(steps, float)
    gap = np.asarray(rmse_net, float) - np.asarray(rmse_lin, float)
    bounds = [0.0] + [float(s) for s in relin_steps] + [math.inf]
    growth = []
    for a, b in zip(bounds, bounds[1:]):
        m = (steps >= a) & (steps < b)  # the evaluation at a relinearisation step opens the next phase
        g = gap[m]
        g = g[np.isfinite(g)]
        if g.size >= 2:
            growth.append(g[-1] - g[0])
    return {"grew": int(sum(d > 0 for d in growth)), "phases": len(growth),
            "median_growth": float(np.median(growth)) if growth else math.nan}


def live_demo(*, steps: int = 5000, seed: int = 0, Ks=None, learning_rates=None, initial=(100, 0.003)):
    """The ipywidgets version (local Jupyter): sliders for K and the learning rate; every
    change trains the setting with :func:`train_setting` (``steps`` steps) and redraws."""
    from ...widgets import Slider, live_demo as _live

    Ks = list(LIVE_KS if Ks is None else Ks)
    lrs = list(LIVE_LEARNING_RATES if learning_rates is None else learning_rates)
    k0 = initial[0] if initial[0] in Ks else Ks[0]
    lr0 = initial[1] if initial[1] in lrs else lrs[0]
    sliders = [Slider("K", Ks, [k_label(k) for k in Ks], initial=k0),
               Slider("lr", lrs, [f"{v:g}" for v in lrs], initial=lr0)]

    def run(K, lr):
        return train_setting(K, lr, steps, seed=seed, evals=100)

    def draw(r):
        return plot_setting(r)

    return _live(run, draw, sliders,
                 description=f"Each change trains the 5x50 ReLU MLP for {steps:,} full-batch steps (seed {seed}).")


@dataclass(frozen=True)
class QuinticParams(Params):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "relinearisation periods (None: the scale's)")
    learning_rates: Optional[tuple[float, ...]] = param(None, "SGD learning rates (None: the scale's)", gt=0)
    steps: Optional[int] = param(None, "steps per setting (None: the scale's)", min=1)
    width: int = param(50, "hidden width of the MLP", min=1)
    depth: int = param(5, "hidden layers of the MLP", min=1)
    evals: Optional[int] = param(None, "evaluations of the losses per run (None: the scale's)", min=2)
    blowup: float = param(BLOWUP, "a run has diverged once its training loss exceeds this multiple of its first "
                                  "loss (or is not finite)", gt=1)

    def check(self):
        p = self.resolved()
        if p["evals"] > p["steps"]:
            raise ValueError(f"evals ({p['evals']}) must not exceed steps ({p['steps']}).")


register(Experiment(
    NAME, QuinticParams, _run, version="2",
    doc="Iterative linearisation of the quintic MLP for a grid of K and learning rates (the book's demo)."))
