"""What the chapter "Gradient flow on the linearised model" (``book/gradient_flow.md``) adds to
:mod:`itlin.book.derivations`: the demo of gradient descent against the closed-form flow, one
eigen-direction of the NTK at a time.

* :func:`eigen_residuals` runs gradient descent on the linearised model in output space (the
  map ``z -> (I - eta Theta) z`` applied ``k`` times: what a step of the chapter's summed loss does
  to the residual, Step 6) and projects the residual on the NTK's eigenvectors, beside the
  closed-form flow ``e^{-lambda_i tau}`` at the same times ``tau = eta k`` (Step 2).
* :func:`gradient_flow_demo` is the chapter's demo (:class:`itlin.book.widgets.Demo`): knobs for
  the step size (as ``eta * lambda_max``) and the time (as ``tau * lambda_min``).

Everything here is NumPy on a kernel computed once: a slider change costs a few matrix powers of
an ``n x n`` matrix, no network pass.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import numpy as np

__all__ = ["DEMO_ETA_LMAX", "DEMO_TIMES", "LIVE_ETA_LMAX", "LIVE_TIMES", "eigen_residuals", "gradient_flow_demo",
           "nonzero_spectrum"]

#: the demo's step sizes as ``eta * lambda_max`` (static grid; GD is stable below 2) and its live values
DEMO_ETA_LMAX = (0.25, 1.5, 1.95, 2.05)
LIVE_ETA_LMAX = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 1.9, 1.95, 2.0, 2.05, 2.1, 2.2)
#: the demo's times as ``tau * lambda_min`` (static grid) and its live values
DEMO_TIMES = (0.01, 0.1, 1.0)
LIVE_TIMES = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 8.0)


def nonzero_spectrum(kernel) -> tuple:
    """``(lam, V, nonzero)``: the eigenvalues (ascending) and eigenvectors of a symmetric kernel, and
    the mask of those that count as non-zero in float64 (above ``lam_max * n * eps``, the
    chapter's rule).

    >>> lam, V, nz = nonzero_spectrum(np.diag([0.0, 1e-15, 2.0, 5.0]))
    >>> lam.tolist(), nz.tolist()
    ([0.0, 1e-15, 2.0, 5.0], [False, False, True, True])
    """
    kernel = np.asarray(kernel, np.float64)
    lam, V = np.linalg.eigh(kernel)
    tol = lam[-1] * kernel.shape[0] * np.finfo(np.float64).eps
    return lam, V, lam > tol


def eigen_residuals(kernel, z0, lr: float, steps: Sequence[int]) -> dict:
    """The residual of the linearised model along each eigenvector of ``kernel`` under gradient
    descent and under gradient flow, for the summed squared loss (the chapter's Eq. 9).

    Gradient descent is the output-space map ``z_{k+1} = (I - lr * kernel) z_k``, applied between
    the recorded ``steps`` with matrix powers (it is what ``k`` steps of parameter-space gradient
    descent do to the linearised outputs); the flow is ``z(tau) = V exp(-lam tau) V^T z0`` at
    ``tau = lr * k``. Returns ``steps``, ``tau``, ``lam`` and ``V`` (ascending), ``nonzero`` (mask),
    ``start`` (``V^T z0``), ``gd`` and ``flow`` (``(len(steps), n)``: the components ``V^T z``,
    each divided by its start; ``nan`` where the start is 0) and ``gd_z`` / ``flow_z`` (the residuals).
    A diverging run's components overflow to ``inf``.

    >>> out = eigen_residuals(np.diag([1.0, 3.0]), np.array([1.0, 1.0]), 0.5, [0, 1, 2])
    >>> out["gd"][:, 1].tolist(), out["gd"][:, 0].tolist()  # (1 - 0.5 * 3)^k and (1 - 0.5)^k
    ([1.0, -0.5, 0.25], [1.0, 0.5, 0.25])
    """
    kernel = np.asarray(kernel, np.float64)
    z0 = np.asarray(z0, np.float64).reshape(-1)
    steps = np.asarray(steps, dtype=np.int64)
    if steps.ndim != 1 or steps.size == 0 or np.any(steps < 0) or np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps are increasing counts >= 0, got {steps.tolist()}.")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr is a positive step size, got {lr!r}.")
    lam, V, nonzero = nonzero_spectrum(kernel)
    lam_c = np.where(nonzero, lam, 0.0)  # rounding's tiny eigenvalues (either sign) count as zero
    step_map = np.eye(kernel.shape[0]) - lr * kernel
    gd_z, z, at = [], z0.copy(), 0
    with np.errstate(over="ignore", invalid="ignore"):
        for k in steps:
            if k > at:
                z = np.linalg.matrix_power(step_map, int(k - at)) @ z
                at = int(k)
            gd_z.append(z.copy())
    gd_z = np.stack(gd_z)
    tau = lr * steps.astype(np.float64)
    start = V.T @ z0
    flow_c = start[None, :] * np.exp(-np.outer(tau, lam_c))
    flow_z = flow_c @ V.T
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        gd_c = gd_z @ V
        scale = np.where(start != 0, start, np.nan)
        return {"steps": steps, "tau": tau, "lr": float(lr), "lam": lam, "V": V, "nonzero": nonzero, "start": start,
                "gd": gd_c / scale, "flow": flow_c / scale, "gd_z": gd_z, "flow_z": flow_z}


def _record_steps(n_end: int, extra: int, points: int = 60) -> np.ndarray:
    """Steps 0, then log-spaced up to ``n_end``, with ``extra`` among them."""
    grid = np.round(np.geomspace(1, max(n_end, 1), points)).astype(np.int64)
    return np.unique(np.r_[0, grid, extra, n_end])


def gradient_flow_demo(kernel, f0, y, x, *, eta_lmax: Sequence[float] = DEMO_ETA_LMAX,
                       times: Sequence[float] = DEMO_TIMES, default_eta_lmax: Optional[float] = None,
                       default_time: float = 1.0, clip: float = 1e3):
    """The chapter's demo: gradient descent against the closed-form flow, per eigen-direction.

    ``kernel`` is the NTK on the training inputs ``x`` (``(n, n)``), ``f0`` the network's outputs
    there and ``y`` the targets (the linearised model starts at ``f0``). Knobs: ``eta_lmax``, the
    step ``eta`` as a multiple of ``1 / lambda_max`` (gradient descent is stable below 2), and
    ``time``, the time ``tau = eta k`` as a multiple of ``1 / lambda_min`` (the smallest non-zero
    eigenvalue); the step count is ``k = max(1, round(tau / eta))``. Each frame draws, top, the
    size of the residual's component along each eigenvector with a non-zero eigenvalue (divided by
    its start) over the time, the flow as lines and gradient descent as markers, up to the largest
    live time, with the chosen time marked; bottom, the linearised outputs at the training inputs
    at that time; and a table of each direction's factor at that time. Once gradient descent
    is past ``clip`` times its start along some direction it has diverged, and nothing of it is
    drawn after (rounding would leak the huge component into the others). In Jupyter the sliders also offer
    :data:`LIVE_ETA_LMAX` and :data:`LIVE_TIMES`.
    """
    import matplotlib.pyplot as plt

    from ..plotting import COLUMN_WIDTH
    from ..widgets import Demo, Knob, View

    kernel = np.asarray(kernel, np.float64)
    f0 = np.asarray(f0, np.float64).reshape(-1)
    y = np.asarray(y, np.float64).reshape(-1)
    xs = np.asarray(x, np.float64).reshape(len(y), -1)[:, 0]
    lam, V, nonzero = nonzero_spectrum(kernel)
    lam_max, lam_min = float(lam[nonzero][-1]), float(lam[nonzero][0])
    default_eta_lmax = eta_lmax[0] if default_eta_lmax is None else default_eta_lmax
    etas = sorted(set(map(float, eta_lmax)) | {float(default_eta_lmax)})
    live_etas = sorted(set(etas) | set(LIVE_ETA_LMAX))
    live_times = sorted(set(map(float, times)) | set(LIVE_TIMES))
    tau_end = max(live_times) / lam_min
    order = np.flatnonzero(nonzero)[::-1]  # the non-zero directions, largest eigenvalue first
    colors = dict(zip(order, plt.cm.plasma(np.linspace(0.08, 0.78, order.size))))
    n_null = int((~nonzero).sum())
    t_lo = min(live_etas) / lam_max  # the first step of the smallest step size: the same axes in every frame
    z0 = f0 - y

    @functools.lru_cache(maxsize=None)
    def path(e):
        lr = e / lam_max
        return lr, eigen_residuals(kernel, z0, lr, _record_steps(int(math.ceil(tau_end / lr)), 0))

    def diverged_at(p):
        """The first recorded step at which gradient descent has left ``clip`` times its start along
        some direction (None if never): past it, rounding leaks the huge top component into the
        others, so nothing after it is drawn."""
        big = ~(np.abs(p["gd"][:, order]) <= clip).all(axis=1)
        return int(p["steps"][np.argmax(big)]) if big.any() else None

    def compute(eta_lmax, time):
        lr, p = path(float(eta_lmax))
        k = max(1, int(round(time / (lam_min * lr))))
        at = eigen_residuals(kernel, z0, lr, [0, k])  # the chosen time, exactly
        tau = lr * k
        div = diverged_at(p)
        gone = div is not None and k >= div
        fig, (ax, bx) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 7.4), layout="constrained")
        upto = p["steps"] <= (div if div is not None else p["steps"][-1])
        t, gd = p["tau"][1:][upto[1:]], p["gd"][1:][upto[1:]]
        tt = np.geomspace(t_lo, tau_end, 400)
        for n, i in enumerate(order, 1):
            c = colors[i]
            ax.plot(tt, np.exp(-lam[i] * tt), color=c, lw=1.8, label=rf"$\lambda_{{{n}}}$ = {lam[i]:.3g}")
            g = np.abs(gd[:, i])
            ax.plot(t, np.clip(np.where(np.isfinite(g), g, clip), 1e-300, clip), "o", ms=3.6, mfc="none", mec=c,
                    mew=1.1)
        if n_null:
            ax.axhline(1.0, color="0.55", lw=1.0, ls=":", label=rf"$\lambda = 0$ ({n_null} directions)")
        if div is not None:
            ax.text(1.02, 0.02, f"GD diverged:\npast {clip:g} times its start\nby step {div:,} (τ = {lr * div:.3g});\n"
                    "not drawn after", transform=ax.transAxes, ha="left", va="bottom", fontsize=9.5,
                    color="#b00020")
        ax.axvline(tau, color="0.2", lw=1.0, ls="--")
        ax.set(xscale="log", yscale="log", xlim=(t_lo, tau_end), ylim=(1e-6, clip * 30),
               xlabel=r"time $\tau = \eta k$", ylabel=r"$|v_i^\top z| \,/\, |v_i^\top z_0|$")
        ax.set_title(rf"residual along each NTK eigenvector: flow (lines), GD (circles); $\eta\lambda_{{\max}}$ = "
                     f"{eta_lmax:g}", fontsize=10.5)
        ax.legend(frameon=False, fontsize=9.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        f_flow, f_gd = y + at["flow_z"][-1], y + at["gd_z"][-1]
        lo, hi = min(y.min(), f0.min()) - 1.0, max(y.max(), f0.max()) + 1.0
        shown = (not gone) & np.isfinite(f_gd) & (f_gd > lo) & (f_gd < hi)
        bx.plot(xs, y, "o", color="k", ms=4.5, label="targets $y$")
        bx.plot(xs, f0, color="0.6", lw=1.0, ls=":", label="at $\\tau = 0$")
        bx.plot(xs, f_flow, color="#1f5fa8", lw=1.8, label="flow")
        bx.plot(xs[shown], f_gd[shown], "x", color="#c9731b", ms=6, mew=1.5, label=f"GD, {k:,} steps")
        if not shown.all():
            bx.text(0.02, 0.97, ("GD has diverged: its" if gone else "GD's") +
                    f" outputs are off the plot at {int((~shown).sum())} of {len(y)} inputs",
                    transform=bx.transAxes, ha="left", va="top", fontsize=10, color="#b00020")
        bx.set(ylim=(lo, hi), xlabel="training input $x$", ylabel="linearised output")
        bx.set_title(rf"the outputs at $\tau$ = {tau:.3g} ($\tau\lambda_{{\min}}$ = {tau * lam_min:.3g})",
                     fontsize=10.5)
        bx.legend(frameon=False, fontsize=9.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        rows = []
        for n, i in enumerate(order, 1):
            g, fl = at["gd"][-1, i], math.exp(-lam[i] * tau)
            rows.append({"direction": f"v{n}", "eigenvalue": f"{lam[i]:.4g}", "η λ": f"{lr * lam[i]:.3g}",
                         "flow e^(−λτ)": f"{fl:.3e}", "GD after k steps": "diverged" if gone else f"{g:+.3e}",
                         "GD − flow": "—" if gone else f"{g - fl:+.2e}"})
        text = (f"η = {lr:.3g}, k = {k:,} steps to τ = {tau:.3g}. Per step GD multiplies the top direction by "
                f"1 − ηλ_max = {1 - eta_lmax:+.3g}: " + ("stable, |1 − ηλ_max| < 1." if abs(1 - eta_lmax) < 1 else
                                                        "|1 − ηλ_max| ≥ 1, so GD diverges along it; the flow does not."))
        return View(fig, table=rows, text=text)

    return Demo([Knob("eta_lmax", etas, default=default_eta_lmax, label="step size η·λmax", live=live_etas),
                 Knob("time", sorted(set(map(float, times)) | {float(default_time)}), default=default_time,
                      label="time τ·λmin", live=sorted(set(live_times) | {float(default_time)}))],
                compute, title="Gradient descent against the closed-form flow, one NTK eigen-direction at a time")
