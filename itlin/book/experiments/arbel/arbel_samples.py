"""Arbel et al. Figure 3 (right) and Figure 5 (Appendix C.2): test loss against the number of training points.

The teacher-student task of their Section 5 (:mod:`itlin.book.experiments.arbel._arbel`) for every
training-set size ``N`` of a grid, ``tau0`` in {1e-3, 1} and every seed: GN and GD at each step
size of a small grid (the best by mean log test loss is reported, as in the paper) and the
random-features baseline. Training sets of one seed are nested (the teacher, the test set and
the student's initial hidden layer do not change with ``N``). Step sizes are in the paper's
units *at N = 500* (GN: a fraction ``lr / 500`` of a full Gauss-Newton step at every ``N``).

Results (``K`` sizes, ``L`` step sizes, ``G`` values of ``tau0``, ``S`` seeds), for ``m`` in ``gn``,
``gd``: ``n_train`` (K,), ``tau0`` (G,), ``m/lr`` (L,), ``m/<metric>`` (K, L, G, S) final values of
``train``, ``test``, ``lrfit``, ``wcd``, ``wcd_code``, ``sigma_min``; ``m/steps``,
``m/converged``, ``m/diverged`` (K, L, G, S); ``rf_test`` (K, G, S).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Params, param, register
from . import _arbel as A

NAME = "arbel_samples"

SCALES = {
    "tiny": {"seeds": 2, "width": 40, "n_trains": (8, 16), "n_test": 200, "gn_lrs": (100.0,), "gd_lrs": (100.0,),
             "gn_steps": 10, "gd_steps": 30},
    "default": {"seeds": 5, "width": 240, "n_trains": (20, 40, 80), "n_test": 2000, "gn_lrs": (10.0, 100.0),
                "gd_lrs": (1000.0,), "gn_steps": 400, "gd_steps": 4000},
    "paper": {"seeds": 5, "width": 5000, "n_trains": (100, 200, 500, 1000, 1500), "n_test": 10000,
              "gn_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), "gd_lrs": (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0,
                                                                              1000.0),
              "gn_steps": 100_000, "gd_steps": 1_000_000},
}


@dataclass(frozen=True)
class SamplesParams(Params):
    SCALES = SCALES

    seeds: Optional[int] = param(None, "independent runs (teacher, data and student all change)", min=1)
    width: Optional[int] = param(None, "hidden units M (5000 in the paper); at least the largest n_train", min=1)
    n_trains: Optional[tuple[int, ...]] = param(None, "training-set sizes, increasing", min=1)
    n_test: Optional[int] = param(None, "test points (10,000 in the paper)", min=1)
    tau0s: tuple[float, ...] = param((1e-3, 1.0), "initial stds of the hidden layer", gt=0)
    gn_lrs: Optional[tuple[float, ...]] = param(None, "GN step sizes, the paper's units at N = 500", gt=0)
    gd_lrs: Optional[tuple[float, ...]] = param(None, "GD step sizes, the paper's units", gt=0)
    gn_steps: Optional[int] = param(None, "most GN steps per run", min=1)
    gd_steps: Optional[int] = param(None, "most GD steps per run", min=1)
    activation: Literal["relu", "silu"] = param("relu", "the teacher's and the student's non-linearity")
    beta: float = param(1.0, "SiLU temperature: x * sigmoid(beta x)", gt=0)
    eps0: float = param(1e-7, "damping floor, the paper's units", min=0)
    stop_rtol: float = param(1e-8, "stop when the training loss is below this times its initial value", min=0, lt=1)
    slope_margin: float = param(0.1, "slopes (decades of loss per decade of N) closer than this are 'the same'",
                                gt=0)

    def check(self):
        r = self.resolved()
        ns = list(r["n_trains"])
        if len(ns) < 2 or any(b <= a for a, b in zip(ns, ns[1:])):
            raise ValueError(f"n_trains must be at least two increasing sizes, got {ns}")
        if r["width"] < ns[-1]:
            raise ValueError(f"width = {r['width']} is below the largest n_train = {ns[-1]}: RF and Test-LRfit need "
                             "at least as many hidden units as training points")


def run(p: dict, ctx) -> dict:
    r = SamplesParams(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in p.items()}).resolved()
    S, M = r["seeds"], r["width"]
    ns = [int(n) for n in r["n_trains"]]
    tau0s = np.asarray(r["tau0s"], np.float64)
    G = len(tau0s)
    z = A.hidden_directions(S, r["seed"], M, A.DIM + 1)
    ti, si = A.grid(G, S)
    out = {"n_train": np.asarray(ns), "tau0": tau0s}
    for method in ("gn", "gd"):
        lrs = [float(v) for v in r[f"{method}_lrs"]]
        steps = r[f"{method}_steps"]
        ctx.say(f"{method.upper()}: N in {ns}, {len(lrs)} step sizes x {G} tau0 x {S} seeds")
        per_n = []
        for n in ns:
            data = A.teacher_data(S, r["seed"], n_train=n, n_test=r["n_test"], activation=r["activation"],
                                  beta=r["beta"])
            common = dict(width=M, dim=A.DIM, activation=r["activation"], beta=r["beta"],
                          eps0=A.eps0_ours(r["eps0"], width=M, n_train=n), stop_rtol=r["stop_rtol"],
                          ends=(0, steps), dtype="float64" if method == "gn" else "float32")
            row = []
            for lr in lrs:
                lr_o = A.gn_lr(lr, n_train=n) if method == "gn" else A.gd_lr(lr, width=M)
                res = ctx.stage(f"{method} N={n} lr={lr:.12g}", lambda data=data, common=common, lr_o=lr_o: A.sweep(
                    method, data, z, si, tau0s[ti], np.full(len(si), lr_o), **common))
                row.append({k: np.asarray(v).reshape((G, S) + np.asarray(v).shape[1:]) for k, v in res.items()})
            per_n.append(row)
        res = {k: np.stack([np.stack([q[k] for q in row]) for row in per_n]) for k in per_n[0][0]}
        out[method] = A.final_results(res, lrs)
    return A.with_rf_and_units(out, r)


register(Experiment(NAME, SamplesParams, run, version="1",
                    doc="Arbel et al. Fig. 3 (right) and Fig. 5: test loss against the training-set size."))


# ------------------------------------------------------------------------------ analysis
def summary(rec) -> dict:
    """``n`` (K,), ``tau0`` (G,), ``rf`` (K, G, S), ``best[m]`` (K, G) step-size indices (lowest mean
    log test loss, diverged excluded), ``test[m]``, ``lrfit[m]`` (K, G, S) at the best step, and
    ``slope_margin``."""
    par = rec.params if hasattr(rec, "params") else rec["params"]
    out = {"n": np.asarray(rec["n_train"], np.float64), "tau0": np.asarray(rec["tau0"], np.float64),
           "rf": np.asarray(rec["rf_test"], np.float64), "best": {}, "test": {}, "lrfit": {}, "lr": {},
           "slope_margin": float(par.get("slope_margin", 0.1))}
    for m in ("gn", "gd"):
        test = np.asarray(rec[f"{m}/test"], np.float64)  # (K, L, G, S)
        lrfit = np.asarray(rec[f"{m}/lrfit"], np.float64)
        div = np.asarray(rec[f"{m}/diverged"], bool)
        best = A.best_index(np.moveaxis(test, 1, 2), np.moveaxis(div, 1, 2))  # (K, G)
        k, g = np.meshgrid(np.arange(test.shape[0]), np.arange(test.shape[2]), indexing="ij")
        out["best"][m] = best
        out["test"][m] = test[k, best, g]
        out["lrfit"][m] = lrfit[k, best, g]
        out["lr"][m] = np.asarray(rec[f"{m}/lr"], np.float64)
    return out


def slopes(n, values) -> np.ndarray:
    """Least-squares slope of log10 ``values`` against log10 ``n``, per seed: ``values`` (K, ..., S)
    -> (..., S)."""
    x = np.log10(np.asarray(n, np.float64))
    y = A.log10(values)
    xc = x - x.mean()
    shape = (-1,) + (1,) * (y.ndim - 1)
    return np.sum(xc.reshape(shape) * (y - y.mean(axis=0)), axis=0) / np.sum(xc * xc)


def r_squared(n, values) -> np.ndarray:
    """R² of the straight-line fit of the seed-mean log10 ``values`` (K, ..., S) against log10 ``n``."""
    x = np.log10(np.asarray(n, np.float64))
    y = np.nanmean(A.log10(values), axis=-1)
    xc = x - x.mean()
    shape = (-1,) + (1,) * (y.ndim - 1)
    b = np.sum(xc.reshape(shape) * (y - y.mean(axis=0)), axis=0) / np.sum(xc * xc)
    fit = y.mean(axis=0) + b * xc.reshape(shape)
    ss_res = np.sum((y - fit) ** 2, axis=0)
    ss_tot = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
    return 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0)


def slope_change(n, values) -> np.ndarray:
    """How far log10 ``values`` bends away from a straight line in log10 ``n``, per seed: the change
    of slope across the sampled range implied by the least-squares quadratic ``a + b x + c x^2``
    (``x`` = log10 ``n``), i.e. ``2 c (x_max - x_min)``, in decades of loss per decade of ``n``.
    ``values`` (K, ..., S) with K >= 3 sizes -> (..., S)."""
    x = np.log10(np.asarray(n, np.float64))
    if x.size < 3:
        raise ValueError(f"a bend needs at least three sizes, got {x.size}")
    y = A.log10(values)
    xc = x - x.mean()
    design = np.stack([np.ones_like(xc), xc, xc * xc], axis=1)  # (K, 3)
    coef = np.linalg.pinv(design) @ y.reshape(len(x), -1)        # (3, rest)
    return (2.0 * coef[2] * (x.max() - x.min())).reshape(y.shape[1:])


def affine_claims(s) -> list:
    """Appendix C.2: "the almost affine relation between log test error and log N". Per method and
    ``tau0``, the change of slope across the sampled range (:func:`slope_change`, per seed, with
    its 95% interval over seeds) must lie within ``±slope_margin``, the margin within which the
    regime claim calls two slopes the same: a line whose slope changes less than that is as
    straight as these seeds can tell. Holds when the interval lies within the margin, does not
    hold when it lies outside, cannot resolve otherwise. Needs at least three sizes (none: [])."""
    from ...verdicts import close, paired_gap, verdict

    if len(s["n"]) < 3:
        return []
    margin = s["slope_margin"]
    rows = []
    for g, tau in enumerate(s["tau0"]):
        for m in ("gn", "gd"):
            ch = slope_change(s["n"], s["test"][m][:, g])
            gap = paired_gap(ch, np.zeros_like(ch))
            rows.append(verdict(f"τ0 = {A.fmt_lr(tau)}: {A.LABELS[m]}'s log test loss affine in log N",
                                "almost affine relation in logarithmic scale (C.2)", _fmt_slope(gap),
                                close(gap, margin), gap.half,
                                f"change of slope across N = {s['n'][0]:g} to {s['n'][-1]:g} from a quadratic fit; "
                                f"affine: within ±{margin:g}"))
    return rows


def slope_table(s) -> list:
    """One dict per (method, tau0), RF included: the slope of log test loss against log N over
    seeds (mean and 95% half-width), and R² of the fit of the seed means."""
    from ...verdicts import seed_interval

    rows = []
    for g, tau in enumerate(s["tau0"]):
        for m in ("gn", "gd", "rf"):
            vals = s["rf"][:, g] if m == "rf" else s["test"][m][:, g]
            sl = slopes(s["n"], vals)
            mean, half = seed_interval(sl)
            rows.append({"method": A.LABELS[m], "tau0": float(tau), "slope": mean, "half": half,
                         "r2": float(r_squared(s["n"], vals))})
    return rows


def claims(s) -> list:
    """Appendix C.2: the gap between RF and learned features grows with N (the learned model's
    log test loss falls faster in log N than RF's, per seed); and the slope depends on the
    regime (GN's and GD's slopes differ between the smallest and the largest ``tau0``)."""
    from ...verdicts import FAILS, HOLDS, UNRESOLVED, close, exceeds, paired_gap, verdict

    rows = []
    for g, tau in enumerate(s["tau0"]):
        rf = slopes(s["n"], s["rf"][:, g])
        for m in ("gn", "gd"):
            sl = slopes(s["n"], s["test"][m][:, g])
            gap = paired_gap(rf, sl)
            rows.append(verdict(f"τ0 = {A.fmt_lr(tau)}: {A.LABELS[m]}'s lead over RF grows with N",
                                "the RF gap keeps increasing with the sample size (Fig. 5)",
                                _fmt_slope(gap),
                                exceeds(gap, 0.0), gap.half, "RF's slope minus the learned model's, "
                                "decades of test loss per decade of N"))
    if len(s["tau0"]) >= 2:
        for m in ("gn", "gd"):
            a = slopes(s["n"], s["test"][m][:, 0])
            b = slopes(s["n"], s["test"][m][:, -1])
            gap = paired_gap(a, b)
            up, down = exceeds(gap, 0.0), exceeds(paired_gap(b, a), 0.0)
            res = HOLDS if HOLDS in (up, down) else (FAILS if close(gap, s["slope_margin"]) == HOLDS else UNRESOLVED)
            rows.append(verdict(f"{A.LABELS[m]}'s slope differs between τ0 = {A.fmt_lr(s['tau0'][0])} and "
                                f"{A.fmt_lr(s['tau0'][-1])}", "strong dependence of the slope on the regime",
                                _fmt_slope(gap), res, gap.half,
                                f"holds if the interval excludes 0; does not hold if within ±{s['slope_margin']:g}"))
    return rows


def _fmt_slope(gap) -> str:
    from ...verdicts import fmt_gap

    return fmt_gap(gap, scale=1.0, unit="", digits=2)


def figure(s):
    """Test loss against N (log-log) for GN, GD and RF, one panel per ``tau0``: geometric mean
    over seeds with its 95% interval, and the fitted straight lines."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    G = len(s["tau0"])
    fig, axes = plt.subplots(1, G, figsize=(COLUMN_WIDTH, 3.4), sharey=True, squeeze=False)
    n = s["n"]
    for g, ax in enumerate(axes[0]):
        for m in ("gn", "gd", "rf"):
            vals = s["rf"][:, g] if m == "rf" else s["test"][m][:, g]
            c, lo, hi = A.log_band(vals)
            sl = float(np.mean(slopes(n, vals)))
            ax.plot(n, c, "o" if m != "rf" else "s", color=A.COLOURS[m], ms=4,
                    label=f"{A.LABELS[m]} (slope {sl:.2f})")
            ax.fill_between(n, lo, hi, color=A.COLOURS[m], alpha=0.15, lw=0)
            ly = np.nanmean(A.log10(vals), axis=-1)
            b = np.polyfit(np.log10(n), ly, 1)
            ax.plot(n, 10 ** np.polyval(b, np.log10(n)), "-" if m != "rf" else "--", color=A.COLOURS[m], lw=1.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(n, [f"{v:g}" for v in n])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_title(f"τ0 = {A.fmt_lr(s['tau0'][g])}", fontsize=10.5)
        ax.set_xlabel("training points N")
        ax.legend(frameon=False, fontsize=8.5, loc="lower left")
    axes[0, 0].set_ylabel("test loss")
    fig.tight_layout()
    return fig


__all__ = ["NAME", "SCALES", "SamplesParams", "affine_claims", "claims", "figure", "r_squared", "run", "slope_change",
           "slope_table", "slopes", "summary"]
