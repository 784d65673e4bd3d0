"""What the chapter "From iterative linearisation to Gauss-Newton" (``book/gauss_newton.md``)
computes, prints, glues and draws: the kernel form against the primal form, the ridge check of
damping, one phase of linearised gradient descent converging to the Gauss-Newton point, the
closed-form NTKs against the Jacobian kernel, and the cost of the two forms as the network grows.

Everything here runs in float64: the chapter turns on ``jax_enable_x64`` before it calls any of
these functions. Each ``*_lines`` function returns the lines the chapter prints, each
``*_values`` function the glue of a section (``gn_`` names), each ``*_figure`` function draws one
figure and returns it. The numerics themselves are :mod:`itlin.book.derivations` and
:func:`itlin.gauss_newton_direction`.
"""

from __future__ import annotations

import math
import os
import platform
from types import SimpleNamespace
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "DEMO_DAMPINGS", "FORMS_TOL", "LIVE_DAMPINGS", "SETTINGS", "classification_problem", "convergence_figure",
    "convergence_values", "cost", "cost_figure", "cost_lines", "damped_step_demo", "damped_steps", "device_line",
    "filter_gap_line", "flat", "forms_check", "gauss_newton_direction", "gd_convergence", "ntk_lines", "quintic",
    "quintic_network", "rel_diff", "ridge_lines", "settings", "step_problem",
]

SETTINGS = {  # what None means, per scale
    "tiny": {"gd_time": 6.0, "widths": [4, 8, 16], "max_primal_params": 1200},
    "default": {"gd_time": 25.0, "widths": [4, 8, 16, 24, 32, 50, 100, 200], "max_primal_params": 5000},
    "paper": {"gd_time": 30.0, "widths": [4, 8, 16, 24, 32, 50, 100, 200, 400, 800], "max_primal_params": 12000},
}

# "Agree" means agreement to well under one part in a million: float64 round-off on systems this
# small, not a tolerance chosen after the fact.
FORMS_TOL = 1e-6


def settings(scale: str, gd_time: Optional[float] = None, widths: Optional[Sequence[int]] = None,
             max_primal_params: Optional[int] = None) -> tuple:
    """The chapter's ``gd_time``, ``widths`` and ``max_primal_params``, each of the scale's
    :data:`SETTINGS` where the parameter is None.

    >>> settings("tiny")
    (6.0, [4, 8, 16], 1200)
    >>> settings("default", gd_time=3.0, max_primal_params=10)[::2]
    (3.0, 10)
    """
    s = SETTINGS[scale]
    return gd_time or s["gd_time"], widths or s["widths"], max_primal_params or s["max_primal_params"]


def gauss_newton_direction(*args, **kwargs):
    """The GN direction in the paper's convention: the squared loss summed over examples (Eq. 5-6)."""
    import itlin

    return itlin.gauss_newton_direction(*args, reduction="sum", **kwargs)


def flat(tree) -> np.ndarray:
    """All the leaves of a parameter tree, as one flat array.

    >>> flat({"a": np.ones(2), "b": np.zeros((1, 2))}).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    from jax.flatten_util import ravel_pytree

    return np.asarray(ravel_pytree(tree)[0])


def rel_diff(a, b) -> float:
    """max |a - b| / max |b| over all parameters.

    >>> rel_diff({"w": np.array([1.0, 2.5])}, {"w": np.array([1.0, 2.0])})
    0.25
    """
    a, b = flat(a), flat(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def quintic():
    """The quintic data set's training inputs and targets, in float64."""
    import jax.numpy as jnp

    from ... import data

    ds = data.load("quintic")
    return jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)


def quintic_network(x, seed: int):
    """The quintic network (``models.mlp()``) and its float64 initialisation of ``seed`` on ``x``."""
    import jax

    from ... import models
    from .. import derivations

    net = models.mlp()
    return net, derivations.to_float64(net.init(jax.random.PRNGKey(seed), x)[0])


def classification_problem(seed: int) -> SimpleNamespace:
    """The random three-class problem of the checks (30 two-dimensional inputs, random labels, an
    MLP with three outputs), and the generator that drew it, left where the chapter's further draws
    continue (``rng``)."""
    import jax
    import jax.numpy as jnp

    from ... import models
    from .. import derivations

    rng = np.random.default_rng(seed)
    xc = jnp.asarray(rng.normal(size=(30, 2)))
    labels = jnp.asarray(rng.integers(0, 3, size=30))
    clf = models.mlp(num_outputs=3, width=16, depth=2)
    p_clf = derivations.to_float64(clf.init(jax.random.PRNGKey(seed + 1), xc)[0])
    return SimpleNamespace(rng=rng, x=xc, labels=labels, model=clf, params=p_clf)


def forms_check(x, y, dampings: Sequence[float], seed: int) -> tuple:
    """The kernel form against the primal form, on a small MLP on the quintic (squared loss) and on
    :func:`classification_problem` (cross-entropy), at every damping: the lines of the table and the
    glue (``gn_forms_agree``, ``gn_forms_worst``, ``gn_forms_loosest``)."""
    import itlin
    import jax
    from IPython.display import Markdown

    from ... import models
    from .. import derivations

    small = models.mlp(width=16, depth=3)
    p_small = derivations.to_float64(small.init(jax.random.PRNGKey(seed), x)[0])
    c = classification_problem(seed)
    problems = {
        f"squared loss, quintic (P = {itlin.num_params(p_small)}, n = 20)": (small.bind(), p_small, x, y, "squared"),
        f"cross-entropy, 3 classes (P = {itlin.num_params(c.params)}, n = 30 x 3)":
            (c.model.bind(), c.params, c.x, c.labels, "cross_entropy"),
    }
    lines = [f"{'problem':<45} {'lambda':>8} {'max|kernel - primal| / max|primal|':>36}"]
    diffs = {}
    for name, (f, p, xs, ys, loss) in problems.items():
        for lam in dampings:
            d_k, _ = gauss_newton_direction(f, p, xs, ys, loss=loss, damping=lam, method="kernel")
            d_p, _ = gauss_newton_direction(f, p, xs, ys, loss=loss, damping=lam, method="primal")
            diffs[name, lam] = rel_diff(d_k, d_p)
            lines.append(f"{name:<45} {lam:>8g} {diffs[name, lam]:>36.2e}")
    worst = max(diffs.values())
    positive = sorted(d for d in dampings if d > 0)
    loosest_at_smallest = all(max(positive, key=lambda lam: diffs[name, lam]) == positive[0] for name in problems)
    values = {
        "gn_forms_agree": Markdown("agree" if worst < FORMS_TOL else "**do not** agree"),
        "gn_forms_worst": worst,
        "gn_forms_loosest": Markdown("is loosest at the smallest positive damping" if loosest_at_smallest
                                     else "is **not** loosest at the smallest positive damping in every problem"),
    }
    return lines, values


def ridge_lines(net, params, x, y, dampings: Sequence[float]) -> list:
    """For each positive damping, the gradient norm of the ridge objective at the damped step,
    relative to that at the anchor (kernel form on the quintic network)."""
    from .. import derivations

    apply = net.bind()
    lines = []
    for lam in [d for d in dampings if d > 0]:
        d, _ = gauss_newton_direction(apply, params, x, y, damping=lam, method="kernel")
        lines.append(f"lambda = {lam:>6g}: |grad ridge(theta_s - d)| / |grad ridge(theta_s)| = "
                     f"{derivations.ridge_gradient_norm(apply, params, d, x, y, lam):.1e}")
    return lines


def gd_convergence(net, params, x, y, eta_lmax: float, gd_time: float) -> dict:
    """One phase of gradient descent on the network linearised at ``params``, with step
    ``eta_lmax`` over the largest NTK eigenvalue and ``gd_time`` over the smallest non-zero one in
    length: :func:`itlin.book.derivations.gd_to_gauss_newton`'s result, with the step ``eta``,
    ``k_conv`` (= 1/(eta lambda_min)), the non-zero eigenvalues ``nonzero`` and the ``lines``
    the chapter prints."""
    import itlin

    from .. import derivations

    K = itlin.ntk(net.bind(), params, x)
    lam_all = np.linalg.eigvalsh(np.asarray(K))
    nonzero = lam_all[lam_all > lam_all[-1] * x.shape[0] * np.finfo(np.float64).eps]
    lam_max, lam_min = nonzero[-1], nonzero[0]
    eta = eta_lmax / lam_max
    n_end = int(math.ceil(gd_time / (eta * lam_min)))
    record = np.unique(np.r_[0, np.linspace(0, n_end, 41).astype(int)])
    conv = derivations.gd_to_gauss_newton(net, params, x, y, eta, record, kernel=K)
    k_conv = 1 / (eta * lam_min)
    lines = [f"eta = {eta:.3g} (eta * lambda_max = {eta_lmax}); smallest non-zero NTK eigenvalue {lam_min:.4g}, "
             f"so K_conv = 1/(eta lambda_min) = {k_conv:,.0f} steps"]
    for k, dist in zip(conv["path"].steps, conv["distance"]):
        if k in (0, record[len(record) // 4], record[len(record) // 2], record[-1]):
            lines.append(f"after {k:>7,} steps (k / K_conv = {k / k_conv:5.1f}): "
                         f"||theta_k - theta_GN|| / ||theta_GN - theta_s|| = {dist:.2e}")
    return {**conv, "eta": eta, "k_conv": k_conv, "nonzero": nonzero, "lines": lines}


def convergence_figure(conv: dict):
    """The figure of :func:`gd_convergence`: top, the distance to the Gauss-Newton point along the
    phase; bottom, the spectral filters of damping and of a phase stopped at tau = 1/lambda, over the
    network's NTK eigenvalues."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7.5, 8.4), layout="constrained")
    k_conv = conv["k_conv"]
    steps_ = conv["path"].steps
    ax.semilogy(steps_ / k_conv, conv["flow_distance"], color="0.3", lw=1.5, label=r"closed-form flow at $\tau = \eta k$")
    ax.semilogy(steps_ / k_conv, conv["distance"], "o", ms=4, mfc="none", color="#c9731b", label="linearised gradient descent")
    ax.semilogy(steps_ / k_conv, np.exp(-steps_ / k_conv), color="0.6", ls=":", label=r"$e^{-k/K_{\mathrm{conv}}}$")
    ax.set_xlabel(r"steps in the phase, $k / K_{\mathrm{conv}}$")
    ax.set_ylabel(r"$\|\theta_k - \theta_{GN}\| \,/\, \|\theta_{GN} - \theta_s\|$")
    ax.set_title("one phase of linearised GD approaches the Gauss-Newton point")
    ax.legend(frameon=False)

    s = np.geomspace(1e-4, 1e4, 400)
    for lam, c in zip([1e-2, 1.0, 1e2], ["#1f5fa8", "#6a9f3a", "#8c2d4f"]):
        ax2.semilogx(s, s / (s + lam), color=c, lw=1.8, label=rf"damping $\lambda$ = {lam:g}")
        ax2.semilogx(s, -np.expm1(-s / lam), color=c, lw=1.4, ls="--", label=rf"time $\tau = 1/\lambda$")
    for v in conv["nonzero"]:
        ax2.axvline(v, color="0.8", lw=0.9, zorder=0)
    ax2.set_xlabel(r"NTK eigenvalue $\lambda_i$ (grey: the quintic network's)")
    ax2.set_ylabel("fraction of the residual component removed")
    ax2.set_title("damping (solid) vs stopping the phase at $\\tau$ (dashed)")
    ax2.legend(frameon=False, fontsize=9.5, ncol=3, loc="upper left")
    ax2.set_ylim(0, 1.5)
    return fig


def convergence_values(conv: dict) -> dict:
    """The glue of the convergence figure: the decay rate of the distance over the second half of
    the phase in units of 1/K_conv (``gn_decay_rate``; the slowest eigen-direction alone would give
    exactly 1), the largest relative gap to the closed-form flow (``gn_flow_gap``) and whether the
    distance falls like exp(-k/K_conv) (``gn_decay_like``, within 0.1 of rate 1)."""
    from IPython.display import Markdown

    steps_arr = np.asarray(conv["path"].steps, float)
    dist_arr = np.asarray(conv["distance"])
    flow_arr = np.asarray(conv["flow_distance"])
    late = (steps_arr >= steps_arr[-1] / 2) & (dist_arr > 0)
    rate = -np.polyfit(steps_arr[late] / conv["k_conv"], np.log(dist_arr[late]), 1)[0]
    return {
        "gn_decay_rate": float(rate),
        "gn_flow_gap": float(np.max(np.abs(dist_arr - flow_arr) / flow_arr)),
        "gn_decay_like": Markdown("falls like" if abs(rate - 1) < 0.1 else "does **not** fall like"),
    }


def filter_gap_line() -> str:
    """The largest difference between the damping filter and the filter of a phase stopped at
    tau = 1/lambda, and where it is.

    >>> filter_gap_line()
    'largest difference between the two filters at tau = 1/lambda: 0.204 (at lambda_i / lambda = 2.51)'
    """
    u = np.geomspace(1e-4, 1e4, 100_001)
    gap = np.abs(u / (1 + u) + np.expm1(-u))
    return (f"largest difference between the two filters at tau = 1/lambda: {np.max(gap):.3f} "
            f"(at lambda_i / lambda = {u[np.argmax(gap)]:.2f})")


def ntk_lines(net, params, x, seed: int) -> list:
    """The closed-form NTKs (``Model.ntk_fn``) against the Jacobian kernel (``itlin.ntk``) for the
    quintic network, the three-output MLP of :func:`classification_problem` and a mean-field network
    with a random readout (drawn so that both of its terms are tested), one line each."""
    import itlin
    import jax
    import jax.numpy as jnp

    from ... import models
    from .. import derivations

    c = classification_problem(seed)
    mf = models.mean_field(width=256)
    xm = jnp.asarray(c.rng.normal(size=(30, 10)))
    p_mf = dict(derivations.to_float64(mf.init(jax.random.PRNGKey(seed + 2), xm)[0]))
    p_mf["v"] = jnp.asarray(c.rng.normal(size=p_mf["v"].shape))
    cases = {
        "mlp_ntk, quintic network (1 output)": (net, params, x),
        "mlp_ntk, 3-output MLP": (c.model, c.params, c.x),
        "mean_field_ntk, M = 256, d = 10": (mf, p_mf, xm),
    }
    lines = []
    for name, (model, p, xs) in cases.items():
        k_jac = itlin.ntk(model.bind(), p, xs)
        k_cf = model.ntk_fn(p, xs)
        err = float(jnp.max(jnp.abs(k_jac - k_cf)) / jnp.max(jnp.abs(k_jac)))
        lines.append(f"{name:<36} kernel {tuple(k_jac.shape)}: max |closed form - Jacobian| / max |Jacobian| = {err:.1e}")
    return lines


def device_line() -> str:
    """The device the timings run on, as the chapter prints it."""
    import jax

    dev = jax.devices()[0]
    return f"device: {dev.platform} ({dev.device_kind}), {os.cpu_count()} CPU cores visible, {platform.machine()}; float64"


def cost(x, y, widths: Sequence[int], max_primal_params: int, repeats: int, seed: int) -> dict:
    """Times one damped Gauss-Newton direction (damping 1e-3, five hidden layers) at each width:
    :func:`itlin.book.derivations.gauss_newton_cost`."""
    from .. import derivations

    return derivations.gauss_newton_cost(x, y, widths, depth=5, damping=1e-3, max_primal_params=max_primal_params,
                                         repeats=repeats, seed=seed)


def cost_lines(cost_: dict) -> list:
    """The table of :func:`cost`: per width, the parameters, the three timings, primal over kernel
    and the largest relative difference of the directions (``-`` where the primal form was skipped).

    >>> inf = float("inf")
    >>> for line in cost_lines({"width": [4], "params": [101], "kernel": [1e-3], "kernel_closed_form": [2e-3],
    ...                         "primal": [inf], "max_difference": [inf]}):
    ...     print(line)
     width         P  kernel (Jacobian)  kernel (closed form)     primal  primal / kernel  rel. difference
         4       101             1.00ms                2.00ms  (skipped)                -                -
    """
    lines = [f"{'width':>6} {'P':>9} {'kernel (Jacobian)':>18} {'kernel (closed form)':>21} {'primal':>10} "
             f"{'primal / kernel':>16} {'rel. difference':>16}"]
    for w, P, tk, tc, tp, d in zip(*(cost_[k] for k in ("width", "params", "kernel", "kernel_closed_form", "primal",
                                                         "max_difference"))):
        ratio = f"{tp / tk:>16.1f}" if np.isfinite(tp) else f"{'-':>16}"
        tp_s = f"{tp * 1e3:>8.2f}ms" if np.isfinite(tp) else f"{'(skipped)':>10}"
        d_s = f"{d:>16.1e}" if np.isfinite(d) else f"{'-':>16}"
        lines.append(f"{w:>6} {P:>9,} {tk * 1e3:>16.2f}ms {tc * 1e3:>19.2f}ms {tp_s} {ratio} {d_s}")
    return lines


def cost_figure(cost_: dict):
    """Seconds per Gauss-Newton direction against the number of parameters, for the three variants
    of :func:`cost`, on log-log axes, with the primal curve's slope over its last points."""
    import jax
    import matplotlib.pyplot as plt

    from .. import derivations

    fig, ax = plt.subplots(figsize=(7.2, 4.5), layout="constrained")
    P = cost_["params"]
    ax.loglog(P, cost_["kernel"], "o-", color="#1f5fa8", label="kernel form, Jacobian NTK")
    ax.loglog(P, cost_["kernel_closed_form"], "^-", color="#6a9f3a", label="kernel form, closed-form NTK")
    ok = np.isfinite(cost_["primal"])
    ax.loglog(P[ok], cost_["primal"][ok], "s-", color="#c9731b", label=r"primal form ($P \times P$ solve)")
    if ok.sum() >= 2:
        slope = derivations.loglog_slope(P[ok][-3:], cost_["primal"][ok][-3:])
        ax.annotate(f"slope {slope:.1f} over the last points", xy=(P[ok][-1], cost_["primal"][ok][-1]),
                    xytext=(-10, 0), textcoords="offset points", ha="right", fontsize=8.5, color="#c9731b")
    ax.set_xlabel("number of parameters $P$ (MLP, 5 hidden layers, growing width)")
    ax.set_ylabel("seconds per Gauss-Newton direction (median)")
    ax.set_title(f"cost of one damped GN direction, n = 20, float64, {jax.devices()[0].platform}", fontsize=10)
    ax.legend(frameon=False, fontsize=9)
    return fig


# ------------------------------------------------------------------------------ the demo: the damped step
#: the demo's dampings (static grid, one a decade pair) and its live values (every half decade)
DEMO_DAMPINGS = (1e-8, 1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4)
LIVE_DAMPINGS = tuple(float(f"{v:.3g}") for v in np.logspace(-8, 4, 25))


def damped_steps(J, z0, dampings: Sequence[float]) -> dict:
    """The damped Gauss-Newton step ``delta = -(J^T J + lam I)^{-1} J^T z0`` of the summed squared
    loss (Eq. 6) at each damping, in both forms, beside its two limits.

    ``kernel``: ``-J^T (J J^T + lam I)^{-1} z0`` (Woodbury, an ``n x n`` solve); ``primal``: the
    ``P x P`` solve; both ``(len(dampings), P)``. ``gradient``: ``g = J^T z0``, so that
    ``-g / lam`` is a gradient step of size ``1 / lam`` (the ``lam -> inf`` limit); ``min_norm``:
    ``-J^+ z0`` from ``numpy.linalg.lstsq`` (an SVD of ``J``; the ``lam -> 0`` limit, the
    minimum-norm least-squares step). Per damping: ``difference`` (``||kernel - primal|| /
    ||primal||``), ``cos_gradient`` and ``ratio_gradient`` (the cosine of the kernel-form step with
    ``-g`` and ``||delta|| / ||g / lam||``), ``cos_min_norm`` and ``ratio_min_norm`` (the same
    against the minimum-norm step), and ``residual`` (``||z0 + J delta|| / ||z0||``, the linearised
    training residual left).

    >>> out = damped_steps(np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, 1.0]), [1.0])
    >>> out["kernel"].tolist(), out["min_norm"].tolist()  # -s/(s^2 + lam) per direction; -1/s
    ([[-0.5, -0.4]], [-1.0, -0.5])
    """
    J = np.asarray(J, np.float64)
    z0 = np.asarray(z0, np.float64).reshape(-1)
    lams = np.asarray(dampings, np.float64)
    if lams.ndim != 1 or not np.all(lams > 0):
        raise ValueError(f"dampings are positive numbers (the limit 0 is min_norm), got {lams.tolist()}.")
    n, P = J.shape
    theta, gram, g = J @ J.T, J.T @ J, J.T @ z0
    kernel = np.stack([-J.T @ np.linalg.solve(theta + lam * np.eye(n), z0) for lam in lams])
    primal = np.stack([-np.linalg.solve(gram + lam * np.eye(P), g) for lam in lams])
    min_norm = -np.linalg.lstsq(J, z0, rcond=None)[0]
    norm = np.linalg.norm(kernel, axis=1)

    def cos(a, b):
        return (a @ b) / (norm * np.linalg.norm(b))

    return {"dampings": lams, "kernel": kernel, "primal": primal, "gradient": g, "min_norm": min_norm,
            "difference": np.linalg.norm(kernel - primal, axis=1) / np.linalg.norm(primal, axis=1),
            "cos_gradient": cos(kernel, -g), "ratio_gradient": lams * norm / np.linalg.norm(g),
            "cos_min_norm": cos(kernel, min_norm), "ratio_min_norm": norm / np.linalg.norm(min_norm),
            "residual": np.linalg.norm(z0[None, :] + kernel @ J.T, axis=1) / np.linalg.norm(z0),
            "ntk_eigenvalues": np.linalg.eigvalsh(theta)}


def step_problem(x, y, seed: int, *, width: int = 16, depth: int = 3, grid: int = 300) -> SimpleNamespace:
    """The demo's problem: a small ReLU MLP (``width`` x ``depth``, PyTorch's initialisation, so
    that biases spread the kinks and the kernel has high rank) at its float64 initialisation
    ``seed``, on the quintic's training points ``x``, ``y``: its Jacobian ``J`` there, the residual
    ``z0``, and on ``grid`` inputs across them ``x_grid``, the outputs ``f_grid`` and Jacobian
    ``J_grid`` (to draw the linearised model after a step). Needs ``jax_enable_x64``."""
    import itlin
    import jax
    import jax.numpy as jnp

    from ... import models
    from .. import derivations

    net = models.mlp(width=width, depth=depth, init="torch")
    x = jnp.asarray(x, jnp.float64)
    params = derivations.to_float64(net.init(jax.random.PRNGKey(seed), x)[0])
    apply = net.bind()
    xg = jnp.linspace(float(x.min()), float(x.max()), grid, dtype=jnp.float64)[:, None]
    return SimpleNamespace(x=np.asarray(x)[:, 0], y=np.asarray(y, np.float64).reshape(-1),
                           J=np.asarray(itlin.jacobian(apply, params, x)),
                           z0=np.asarray(apply(params, x), np.float64).reshape(-1) - np.asarray(y).reshape(-1),
                           x_grid=np.asarray(xg)[:, 0], f_grid=np.asarray(apply(params, xg)).reshape(-1),
                           J_grid=np.asarray(itlin.jacobian(apply, params, xg)), params=itlin.num_params(params),
                           width=width, depth=depth)


def damped_step_demo(x, y, seed: int, *, dampings: Sequence[float] = DEMO_DAMPINGS, default: float = 1.0):
    """The chapter's demo (:class:`itlin.book.widgets.Demo`), one knob: the damping ``lam``.

    On :func:`step_problem` (built here, so call it with ``jax_enable_x64`` on; a slider change is
    NumPy only), each frame draws against the damping, marked at the chosen one: the relative
    difference of the kernel-form (Woodbury) and primal steps; the cosine and norm ratio of the
    step to the gradient step ``-g / lam`` and to the minimum-norm step (:func:`damped_steps`),
    with the NTK's eigenvalues as ticks; and the linearised model after the step at the chosen
    damping, both forms, beside the minimum-norm step's and the training points. A table gives the
    numbers at the chosen damping. Jupyter also offers :data:`LIVE_DAMPINGS`.
    """
    import matplotlib.pyplot as plt

    from ..plotting import COLUMN_WIDTH
    from ..widgets import Demo, Knob, View

    prob = step_problem(x, y, seed)
    values = sorted(set(map(float, dampings)) | {float(default)})
    live = sorted(set(values) | set(LIVE_DAMPINGS))
    curve = damped_steps(prob.J, prob.z0, np.logspace(-9, 5, 57))
    eig = curve["ntk_eigenvalues"]
    eig = eig[eig > eig[-1] * len(eig) * np.finfo(np.float64).eps]
    f_min_norm = prob.f_grid + prob.J_grid @ curve["min_norm"]
    lo, hi = min(prob.y.min(), prob.f_grid.min()) - 1.0, max(prob.y.max(), prob.f_grid.max()) + 1.0
    c_grad, c_mn, c_k, c_p = "#8c2d4f", "#1f5fa8", "#1f5fa8", "#c9731b"

    def compute(damping):
        at = damped_steps(prob.J, prob.z0, [damping])
        fig, (ax, bx, cx) = plt.subplots(3, 1, figsize=(COLUMN_WIDTH, 9.6), layout="constrained",
                                         gridspec_kw={"height_ratios": [1.0, 1.5, 1.6]})
        lams = curve["dampings"]
        ax.loglog(lams, curve["difference"], color="0.25", lw=1.6)
        ax.plot(damping, at["difference"][0], "o", color="k", ms=6)
        ax.set(ylabel="relative\ndifference")
        ax.set_title(r"kernel form (Woodbury) against primal form: $\|\delta_{\mathrm{kernel}} - "
                     r"\delta_{\mathrm{primal}}\| \,/\, \|\delta_{\mathrm{primal}}\|$", fontsize=10.5)
        labels = {"gradient": (r"$\cos(\delta, -g)$", r"$\|\delta\| \,/\, \|g/\lambda\|$"),
                  "min_norm": (r"$\cos(\delta, \delta_{\min})$", r"$\|\delta\| \,/\, \|\delta_{\min}\|$")}
        for name, colour in (("gradient", c_grad), ("min_norm", c_mn)):
            bx.semilogx(lams, curve[f"cos_{name}"], color=colour, lw=1.8, label=labels[name][0])
            bx.semilogx(lams, curve[f"ratio_{name}"], color=colour, lw=1.5, ls="--", label=labels[name][1])
            bx.plot([damping] * 2, [at[f"cos_{name}"][0], at[f"ratio_{name}"][0]], "o", color=colour, ms=6)
        bx.plot(eig, np.zeros_like(eig), "|", color="0.35", ms=12, mew=1.4, clip_on=False,
                label="NTK\neigenvalues")
        bx.set(ylim=(-0.02, 1.08), ylabel="cosine, norm ratio")
        bx.set_title(r"the step $\delta$ against the gradient step $-g/\lambda$ and the minimum-norm step "
                     r"$\delta_{\min}$", fontsize=10.5)
        bx.legend(frameon=False, fontsize=9.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        for a in (ax, bx):
            a.axvline(damping, color="0.2", lw=1.0, ls=":")
            a.set_xlim(lams[0], lams[-1])
        bx.set_xlabel(r"damping $\lambda$")
        f_k = prob.f_grid + prob.J_grid @ at["kernel"][0]
        f_p = prob.f_grid + prob.J_grid @ at["primal"][0]
        cx.plot(prob.x_grid, prob.f_grid, color="0.6", lw=1.0, ls=":", label=r"anchor $\theta_s$")
        cx.plot(prob.x_grid, f_min_norm, color="k", lw=1.0, ls="--", label=r"after $\delta_{\min}$")
        cx.plot(prob.x_grid, f_k, color=c_k, lw=2.6, alpha=0.8, label=r"after $\delta$," "\nkernel form")
        cx.plot(prob.x_grid, f_p, color=c_p, lw=1.2, label=r"after $\delta$," "\nprimal form")
        cx.plot(prob.x, prob.y, "o", color="k", ms=4.5, label="training\npoints")
        cx.set(ylim=(lo, hi), xlabel="input $x$", ylabel="linearised output")
        cx.set_title(rf"the linearised network after one step at $\lambda$ = {damping:g}", fontsize=10.5)
        cx.legend(frameon=False, fontsize=9.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        rows = [{"λ": f"{damping:g}", "kernel vs primal": f"{at['difference'][0]:.1e}",
                 "cos(δ, −g)": f"{at['cos_gradient'][0]:.4f}", "‖δ‖ / ‖g/λ‖": f"{at['ratio_gradient'][0]:.4f}",
                 "cos(δ, δ_min-norm)": f"{at['cos_min_norm'][0]:.4f}",
                 "‖δ‖ / ‖δ_min-norm‖": f"{at['ratio_min_norm'][0]:.4f}",
                 "residual left": f"{at['residual'][0]:.3f}"}]
        text = (f"MLP {prob.depth} x {prob.width} (P = {prob.params:,}), n = {len(prob.z0)} quintic points: the "
                f"kernel form solves a {len(prob.z0)} x {len(prob.z0)} system, the primal form a "
                f"{prob.params:,} x {prob.params:,} one. Residual left: ||z0 + Jδ|| / ||z0||.")
        return View(fig, table=rows, text=text)

    return Demo(Knob("damping", values, default=default, label="damping λ", live=live), compute,
                title="The damped Gauss-Newton step against its damping")
