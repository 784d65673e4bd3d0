"""Arbel et al. Figures 1 (right) and 2: GN and GD against the step size, and along the trajectory.

The teacher-student task of their Section 5 (see :mod:`itlin.book.experiments.arbel._arbel` for the
setting, the units and the metrics): for every step size ``lr`` of a grid (the paper's units)
and every seed, one GN run and one GD run from the student at ``tau0`` (1e-3 in the paper),
until the training loss falls to ``stop_rtol`` times its initial value or the step budget ends.
Every metric is recorded at log-spaced checkpoints, so the same runs give the final values
(Figure 1 right; Figures 6-7 with ``activation="silu"`` or another ``tau0``) and the
trajectories (Figure 2).

Results (``L`` step sizes, ``S`` seeds, ``T`` checkpoints), for ``m`` in ``gn``, ``gd``:

* ``m/lr`` (L,) the step sizes in the paper's units, ``m/lr_ours`` (L,) as run;
  ``m/ends`` (T,) the checkpoints (steps; the first is 0, the initialisation);
* ``m/<metric>`` (L, S, T) for every metric of :data:`~itlin.book.experiments.arbel._arbel.METRICS`:
  ``train``, ``test`` (their loss ``0.5 mean (f - y)^2``), ``lrfit`` (Test-LRfit), ``wcd``
  (Eq. 9), ``wcd_code`` (their code's), ``sigma_min`` (smallest eigenvalue of ``J J^T``);
  a run that stopped keeps its final values at later checkpoints;
* ``m/steps``, ``m/converged`` (reached ``stop_rtol``), ``m/diverged`` (L, S);
* ``rf_test`` (S,): the random-features baseline (Test-LRfit at initialisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Params, param, register
from . import _arbel as A

NAME = "arbel_steps"
PAPER_LRS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_train": 12, "n_test": 200, "gn_lrs": (1e-2, 1.0, 100.0),
             "gd_lrs": (1e-2, 1.0, 100.0), "gn_steps": 12, "gd_steps": 40, "checkpoints": 5},
    "default": {"seeds": 10, "width": 250, "n_train": 50, "n_test": 2000, "gn_lrs": PAPER_LRS, "gd_lrs": PAPER_LRS,
                "gn_steps": 400, "gd_steps": 4000, "checkpoints": 20},
    "paper": {"seeds": 5, "width": 5000, "n_train": 500, "n_test": 10000, "gn_lrs": PAPER_LRS, "gd_lrs": PAPER_LRS,
              "gn_steps": 100_000, "gd_steps": 1_000_000, "checkpoints": 40},
}


@dataclass(frozen=True)
class StepsParams(Params):
    SCALES = SCALES

    seeds: Optional[int] = param(None, "independent runs (teacher, data and student all change); None: from scale",
                                 min=1)
    width: Optional[int] = param(None, "hidden units M of the student (5000 in the paper)", min=1)
    n_train: Optional[int] = param(None, "training points N (500 in the paper)", min=1)
    n_test: Optional[int] = param(None, "test points (10,000 in the paper)", min=1)
    tau0: float = param(1e-3, "std of the student's hidden weights and biases at initialisation", gt=0)
    gn_lrs: Optional[tuple[float, ...]] = param(None, "GN step sizes, the paper's units", gt=0)
    gd_lrs: Optional[tuple[float, ...]] = param(None, "GD step sizes, the paper's units", gt=0)
    gn_steps: Optional[int] = param(None, "most GN steps per run (1e5 in the paper)", min=1)
    gd_steps: Optional[int] = param(None, "most GD steps per run (1e6 in the paper)", min=1)
    checkpoints: Optional[int] = param(None, "log-spaced checkpoints where every metric is recorded", min=2)
    activation: Literal["relu", "silu"] = param("relu", "the teacher's and the student's non-linearity")
    beta: float = param(1.0, "SiLU temperature: x * sigmoid(beta x)", gt=0)
    alpha: float = param(1.0, "damping factor: eps = max(alpha sigma_min(J J^T), eps0)", min=0)
    eps0: float = param(1e-7, "damping floor, the paper's units", min=0)
    stop_rtol: float = param(1e-8, "stop when the training loss is below this times its initial value", min=0, lt=1)
    gd_dtype: Literal["float32", "float64"] = param("float32", "GD's precision (GN is always float64)")
    small_lr: float = param(1e-2, "the small step of the claims (in both grids)", gt=0)
    large_lr: float = param(100.0, "the large step of the claims (in both grids)", gt=0)
    hidden_margin: float = param(0.3, "decades by which the test loss must exceed Test-LRfit for hidden "
                                      "learning", min=0)

    def check(self):
        r = self.resolved()
        if r["width"] < r["n_train"]:
            raise ValueError(f"width = {r['width']} < n_train = {r['n_train']}: the random-features baseline and "
                             "Test-LRfit need at least as many hidden units as training points (over-parameterised)")
        for name in ("gn_lrs", "gd_lrs"):
            vals = r[name]
            if len(set(vals)) != len(vals):
                raise ValueError(f"{name} has repeated values: {vals}")
            for lr, what in ((r["small_lr"], "small_lr"), (r["large_lr"], "large_lr")):
                if not any(math.isclose(lr, v, rel_tol=1e-9) for v in vals):
                    raise ValueError(f"{what} = {lr:g} is not among {name} {vals}; the claims compare two step "
                                     "sizes of both grids")
        if not r["small_lr"] < r["large_lr"]:
            raise ValueError(f"small_lr = {r['small_lr']:g} must be smaller than large_lr = {r['large_lr']:g}")


def run(p: dict, ctx) -> dict:
    r = StepsParams(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}).resolved()
    S, M, N = r["seeds"], r["width"], r["n_train"]
    data = A.teacher_data(S, r["seed"], n_train=N, n_test=r["n_test"], activation=r["activation"], beta=r["beta"])
    z = A.hidden_directions(S, r["seed"], M, A.DIM + 1)
    common = dict(width=M, dim=A.DIM, activation=r["activation"], beta=r["beta"], alpha=r["alpha"],
                  eps0=A.eps0_ours(r["eps0"], width=M, n_train=N), stop_rtol=r["stop_rtol"])
    out = {}
    for method in ("gn", "gd"):
        lrs = [float(v) for v in r[f"{method}_lrs"]]
        steps = r[f"{method}_steps"]
        ends = A.checkpoints(steps, r["checkpoints"])
        ours = [A.gn_lr(v, n_train=N) if method == "gn" else A.gd_lr(v, width=M) for v in lrs]
        ctx.say(f"{method.upper()}: {len(lrs)} step sizes x {S} seeds, at most {steps} steps (M={M}, N={N})")
        per = []
        for lr, lr_o in zip(lrs, ours):
            per.append(ctx.stage(f"{method} lr={lr:.12g}", lambda lr_o=lr_o: A.sweep(
                method, data, z, np.arange(S), np.full(S, r["tau0"]), np.full(S, lr_o), ends=ends,
                dtype="float64" if method == "gn" else r["gd_dtype"], **common)))
        res = {k: np.stack([np.asarray(q[k]) for q in per]) for k in per[0]}
        res["converged"] = res["converged"].astype(bool)
        res["diverged"] = res["diverged"].astype(bool)
        res.update(lr=np.asarray(lrs), lr_ours=np.asarray(ours), ends=ends)
        out[method] = res
    out["rf_test"] = out["gn"]["lrfit"][0, :, 0]
    out["meta"] = {
        "resolved": r,
        "units": {"gn_lr": f"ours = paper x N/{A.REF_N}", "gd_lr": f"ours = paper x M/{A.REF_WIDTH}",
                  "eps0": f"ours = paper x (N/{A.REF_N}) x ({A.REF_WIDTH}/M)",
                  "eps0_ours": common["eps0"]},
        "dtype": {"gn": "float64", "gd": r["gd_dtype"], "metrics": "float64"},
        "stop": f"training loss <= {r['stop_rtol']:g} x initial loss, a non-finite or blown-up loss (diverged), "
                "or the step budget",
        "model": "mean-field student with hidden bias (inputs with a constant 1 appended), readout 0",
        "data": "itlin.data.arbel_teacher_student, data seed = seed + s",
    }
    return out


register(Experiment(NAME, StepsParams, run, version="1",
                    doc="Arbel et al. Fig. 1 (right) and Fig. 2: GN and GD against the step size at small tau0."))


# ------------------------------------------------------------------------------ analysis
def summary(rec) -> dict:
    """The arrays the claims and figures use, as plain numpy: ``lr[m]``, ``final[m][metric]``
    (L, S), ``trace[m][metric]`` (L, S, T), ``ends[m]``, ``diverged[m]``, ``converged[m]``,
    ``steps[m]`` (L, S), ``rf`` (S,) and the claim settings from the parameters."""
    par = rec.params if hasattr(rec, "params") else rec["params"]
    out = {"lr": {}, "final": {}, "trace": {}, "ends": {}, "diverged": {}, "converged": {}, "steps": {},
           "rf": np.asarray(rec["rf_test"], np.float64),
           "small_lr": float(par.get("small_lr", 1e-2)), "large_lr": float(par.get("large_lr", 100.0)),
           "hidden_margin": float(par.get("hidden_margin", 0.3))}
    for m in ("gn", "gd"):
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
        out["trace"][m] = {k: np.asarray(rec[f"{m}/{k}"], np.float64) for k in A.METRICS}
        out["final"][m] = {k: A.final(v) for k, v in out["trace"][m].items()}
        out["ends"][m] = np.asarray(rec[f"{m}/ends"])
        out["diverged"][m] = np.asarray(rec[f"{m}/diverged"], bool)
        out["converged"][m] = np.asarray(rec[f"{m}/converged"], bool)
        out["steps"][m] = np.asarray(rec[f"{m}/steps"])
    return out


def small_steps_check(s, below: float = 1.0, method: str = "gn") -> dict:
    """Why the ``tau0`` sweep leaves out ``method``'s steps below ``below``: over the summary of a
    step-size sweep, how many runs at those steps reached the stopping loss (``converged``,
    ``runs``), the best step by mean log10 test loss (diverged excluded) and ``consistent``: none
    of those runs converged and the best step is not below ``below``."""
    lr = np.asarray(s["lr"][method], np.float64)
    small = lr < below * (1 - 1e-9)
    conv = np.asarray(s["converged"][method], bool)[small]
    best = float(lr[A.best_index(np.asarray(s["final"][method]["test"]), np.asarray(s["diverged"][method]))])
    return {"converged": int(conv.sum()), "runs": int(conv.size), "best_lr": best,
            "consistent": bool(small.any() and conv.sum() == 0 and best >= below * (1 - 1e-9))}


def _at(s, m, lr):
    """Index of step size ``lr`` in method ``m``'s grid."""
    i = np.flatnonzero(np.isclose(s["lr"][m], lr, rtol=1e-9))
    if not i.size:
        raise KeyError(f"step size {lr:g} is not in the {m.upper()} grid {s['lr'][m].tolist()}")
    return int(i[0])


def _usable(s, m, i):
    """Seeds of step size ``i`` that did not diverge (a verdict over diverged runs is refused)."""
    return ~s["diverged"][m][i]


def hidden_gap(s, m: str, i: int) -> np.ndarray:
    """Per seed: the mean over checkpoints after the first of ``log10(test) - log10(Test-LRfit)``
    (how far the raw test loss stays above the test loss of the same features re-fitted)."""
    t = s["trace"][m]
    return np.mean(A.log10(t["test"][i, :, 1:]) - A.log10(t["lrfit"][i, :, 1:]), axis=-1)


def claims(s) -> list:
    """The paper's step-size claims (Section 5.3 and Fig. 2) as verdict rows, over seeds: six on
    the final values (Fig. 1 right), then two on hidden learning (Fig. 2).

    Gaps are differences of log10 values (decades), paired by seed: GN and GD of one seed share
    the teacher, the data and the student's initial hidden layer. A claim that involves a
    diverged run cannot be resolved.
    """
    from ...verdicts import HOLDS, UNRESOLVED, close, exceeds, verdict  # noqa: F401

    small, large = s["small_lr"], s["large_lr"]
    fs, fl = A.fmt_lr(small), A.fmt_lr(large)
    rows = []

    def row(claim, paper, a, b, margin=0.0, detail="", m=None, idx=()):
        ok = all(_usable(s, mm, ii).all() for mm, ii in idx)
        gap = A.log_gap(a, b)
        res = exceeds(gap, margin) if ok else UNRESOLVED
        extra = "" if ok else "a run diverged"
        rows.append(verdict(claim, paper, A.fmt_decades(gap), res, gap.half,
                            "; ".join(x for x in (detail, extra) if x)))

    gn_s, gn_l, gd_s, gd_l = _at(s, "gn", small), _at(s, "gn", large), _at(s, "gd", small), _at(s, "gd", large)
    F = s["final"]
    row(f"GN: Test-LRfit lower at step {fs} than at {fl}",
        "smaller GN steps learn features that generalise better (Fig. 1 right)",
        F["gn"]["lrfit"][gn_l], F["gn"]["lrfit"][gn_s], idx=(("gn", gn_s), ("gn", gn_l)),
        detail="log10 Test-LRfit at the large step minus at the small one")
    row(f"GN: WCD lower at step {fs} than at {fl}", "WCD grows with the GN step (Fig. 1 right, top)",
        F["gn"]["wcd"][gn_l], F["gn"]["wcd"][gn_s], idx=(("gn", gn_s), ("gn", gn_l)), detail="Eq. 9, log10")
    row(f"GD: Test-LRfit lower at step {fl} than at {fs}", "GD learns better features with larger steps",
        F["gd"]["lrfit"][gd_s], F["gd"]["lrfit"][gd_l], idx=(("gd", gd_s), ("gd", gd_l)),
        detail="log10 Test-LRfit at the small step minus at the large one")
    row(f"GD: WCD lower at step {fl} than at {fs}", "WCD falls with the GD step",
        F["gd"]["wcd"][gd_s], F["gd"]["wcd"][gd_l], idx=(("gd", gd_s), ("gd", gd_l)), detail="Eq. 9, log10")
    gap = A.log_gap(F["gn"]["test"][gn_s], F["gn"]["lrfit"][gn_s])
    res = exceeds(gap, s["hidden_margin"]) if _usable(s, "gn", gn_s).all() else UNRESOLVED
    rows.append(verdict(f"GN at step {fs}: test loss stays well above Test-LRfit",
                        "hidden learning: good features, under-fitted readout",
                        A.fmt_decades(gap), res, gap.half,
                        f"must exceed {s['hidden_margin']:g} decades"))
    row(f"At step {fs}: GN's Test-LRfit below GD's", "after re-fitting, much lower for GN than for GD",
        F["gd"]["lrfit"][gd_s], F["gn"]["lrfit"][gn_s], idx=(("gn", gn_s), ("gd", gd_s)))
    ok = _usable(s, "gn", gn_s).all() and _usable(s, "gd", gd_l).all()
    g = hidden_gap(s, "gn", gn_s), hidden_gap(s, "gd", gd_l)
    from ...verdicts import paired_gap
    gap = paired_gap(g[0], g[1])
    rows.append(verdict(f"Along training, GN ({fs}) keeps test loss further above Test-LRfit than GD ({fl})",
                        "GN fits features first, the readout last; GD's two losses stay close (Fig. 2)",
                        A.fmt_decades(gap), exceeds(gap, 0.0) if ok else UNRESOLVED, gap.half,
                        "mean over checkpoints of log10 test − log10 Test-LRfit, GN minus GD"))
    # A test loss far above Test-LRfit alone is no evidence of learned features (an untouched
    # readout gives it at initialisation too): the re-fitted features must also beat RF's.
    gap = A.log_gap(s["rf"], F["gn"]["lrfit"][gn_s])
    rows.append(verdict(f"GN at step {fs}: Test-LRfit below RF's", "hidden learning: the features have improved "
                        "on the initial ones while the readout lags (Fig. 2)", A.fmt_decades(gap),
                        exceeds(gap, 0.0) if _usable(s, "gn", gn_s).all() else UNRESOLVED, gap.half,
                        "log10 RF test loss minus GN's final Test-LRfit"))
    return rows


def settings_markdown(rec) -> str:
    """The paper's setting beside this run's."""
    r = rec.meta["resolved"]
    u = rec.meta["units"]
    rows = {
        "data": ("x ~ N(0, I), d = 10; teacher: 5 ReLU units with bias, all parameters N(0, 1), output / 5",
                 f"same ({r['activation']}" + (f", β = {r['beta']:g}" if r["activation"] == "silu" else "") + ")"),
        "training / test points": ("500 / 10,000", f"{r['n_train']} / {r['n_test']:,}"),
        "student width M": ("5,000", f"{r['width']:,}"),
        "init": ("hidden weights and biases N(0, τ0²), readout 0, output / M", f"same, τ0 = {A.fmt_lr(r['tau0'])}"),
        "GN": ("H = I, ε = max(σ_min(JJᵀ), 1e-7), float64 solve",
               f"same, α = {r['alpha']:g}, ε0 = {r['eps0']:g} in their units = {u['eps0_ours']:.3g} here"),
        "step sizes": ("1e-3 … 1e3 (log grid)", "GN " + ", ".join(A.fmt_lr(v) for v in r["gn_lrs"])
                       + "; GD " + ", ".join(A.fmt_lr(v) for v in r["gd_lrs"]) + " (their units)"),
        "step budget": ("1e5 GN / 1e6 GD", f"{r['gn_steps']:,} GN / {r['gd_steps']:,} GD"),
        "stop": ("train loss ≤ 1e-8 × initial (code; paper: 1e-6 / 1e-7 absolute)",
                 f"train loss ≤ {r['stop_rtol']:g} × initial"),
        "seeds": ("1 (5 in App. C.1)", f"{r['seeds']}"),
        "precision": ("float32 network, float64 GN system", f"GN float64, GD {r['gd_dtype']}"),
    }
    return A.settings_rows(r, rows)


def figure_final(s, *, metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 1 (right): final metrics against the step size for GN and GD (geometric mean over
    seeds with its 95% interval); RF's test loss as a grey band; diverged step sizes as crosses."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, axes = plt.subplots(2, 2, figsize=(COLUMN_WIDTH, 5.6), sharex=True)
    rf = A.log_band(s["rf"][None])
    for ax, key in zip(axes.flat, metrics):
        for m in ("gn", "gd"):
            vals = s["final"][m][key].copy()
            div = s["diverged"][m].any(axis=1)
            vals[div] = np.nan
            c, lo, hi = A.log_band(vals)
            lr = s["lr"][m]
            ax.plot(lr, c, "o-", color=A.COLOURS[m], ms=4, label=A.LABELS[m])
            ax.fill_between(lr, lo, hi, color=A.COLOURS[m], alpha=0.18, lw=0)
            if div.any():
                ax.plot(lr[div], np.full(div.sum(), np.nanmax(c) if np.isfinite(c).any() else 1.0), "x",
                        color=A.COLOURS[m], ms=7, mew=2)
        if key in ("test", "lrfit"):
            ax.axhspan(rf[1][0], rf[2][0], color=A.COLOURS["rf"], alpha=0.15, lw=0)
            ax.axhline(rf[0][0], color=A.COLOURS["rf"], lw=1.2, ls="--", label="RF")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(A.METRIC_LABELS[key], fontsize=10.5)
    for ax in axes[1]:
        ax.set_xlabel("step size λ (their units)")
    axes[0, 1].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def figure_trajectories(s, lrs=(1e-2, 1.0, 100.0), metrics=("wcd", "train", "test", "lrfit")):
    """Fig. 2: the metrics along training for GN (top) and GD (bottom) at the step sizes ``lrs``
    (lighter: smaller), geometric mean over seeds; RF's test loss dashed."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, axes = plt.subplots(2, len(metrics), figsize=(COLUMN_WIDTH, 4.8), sharey="col")
    rf = A.log_band(s["rf"][None])[0][0]
    for row, m in enumerate(("gn", "gd")):
        picks = [v for v in lrs if np.isclose(s["lr"][m], v, rtol=1e-9).any()]
        shades = np.linspace(0.35, 1.0, max(len(picks), 1))
        for j, v in enumerate(picks):
            i = _at(s, m, v)
            x = s["ends"][m] + 1
            colour = plt.matplotlib.colors.to_rgba(A.COLOURS[m])
            colour = tuple(1 - shades[j] * (1 - ch) for ch in colour[:3])
            for ax, key in zip(axes[row], metrics):
                c = A.log_band(s["trace"][m][key][i], axis=0)[0]
                style = "--" if s["diverged"][m][i].any() else "-"
                ax.plot(x, c, style, color=colour, lw=1.6, label=f"λ = {A.fmt_lr(v)}")
        for ax, key in zip(axes[row], metrics):
            ax.set_xscale("log")
            ax.set_yscale("log")
            if key in ("test", "lrfit"):
                ax.axhline(rf, color=A.COLOURS["rf"], lw=1.0, ls=":")
            if row == 0:
                ax.set_title(A.METRIC_LABELS[key], fontsize=10)
            else:
                ax.set_xlabel("steps + 1", fontsize=9.5)
            ax.tick_params(labelsize=8.5)
            ax.yaxis.set_minor_formatter(plt.NullFormatter())
        axes[row, 0].set_ylabel(A.LABELS[m], fontsize=11, color=A.COLOURS[m])
        axes[row, min(1, len(metrics) - 1)].legend(frameon=False, fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def best_final(s, m: str, key: str = "test") -> tuple:
    """``(index, values)``: method ``m``'s step size with the lowest mean log final test loss over
    seeds (diverged step sizes excluded) and the final ``key`` of its seeds."""
    i = int(A.best_index(s["final"][m]["test"], s["diverged"][m]))
    return i, s["final"][m][key][i]


def silu_claims(by_beta: dict) -> list:
    """Appendix C.3 on SiLU runs ``{beta: summary}``: at the largest ``beta`` (close to ReLU) GN's
    best test loss is below GD's, at the smallest GD's is below GN's (each at its best step size,
    paired by seed); and at every ``beta`` GN's smaller step gives the lower Test-LRfit."""
    from ...verdicts import exceeds, verdict

    rows = []
    betas = sorted(by_beta)
    for b in betas:
        s = by_beta[b]
        i, gn = best_final(s, "gn")
        j, gd = best_final(s, "gd")
        gap = A.log_gap(gd, gn)
        if b == betas[-1]:
            rows.append(verdict(f"SiLU β = {A.fmt_lr(b)}: GN's best test loss below GD's",
                                "GN outperforms GD at β = 1e6 (Fig. 6 right)", A.fmt_decades(gap),
                                exceeds(gap, 0.0), gap.half,
                                f"log10 GD minus GN; best steps GN {A.fmt_lr(s['lr']['gn'][i])}, "
                                f"GD {A.fmt_lr(s['lr']['gd'][j])}"))
        if b == betas[0] and len(betas) > 1:
            neg = A.log_gap(gn, gd)
            rows.append(verdict(f"SiLU β = {A.fmt_lr(b)}: GD's best test loss below GN's",
                                "GD outperforms GN at β = 1 (Fig. 6 left)", A.fmt_decades(neg),
                                exceeds(neg, 0.0), neg.half,
                                f"log10 GN minus GD; best steps GN {A.fmt_lr(s['lr']['gn'][i])}, "
                                f"GD {A.fmt_lr(s['lr']['gd'][j])}"))
    for b in betas:
        first = claims(by_beta[b])[0]
        first = dict(first, claim=f"SiLU β = {A.fmt_lr(b)}: " + first["claim"],
                     paper="the step-size effect persists with SiLU (App. C.3)")
        rows.append(first)
    return rows


__all__ = ["NAME", "SCALES", "StepsParams", "best_final", "silu_claims", "claims", "figure_final", "figure_trajectories", "hidden_gap", "run",
           "settings_markdown", "small_steps_check", "summary"]
