"""Numerical checks of the book's two derivations (gradient flow; Gauss-Newton).

* :func:`linearised_gd_path` runs gradient descent on the linearised network
  (:class:`itlin.iterative_linearisation` with ``K = inf``, squared loss summed over
  examples, plain SGD) and records the linearised outputs and the parameters at given steps.
* :func:`gradient_flow_comparison` sets that path beside the closed form of gradient flow
  (:func:`itlin.gradient_flow` and :func:`itlin.flow_params`,
  main paper Appendix B) at the same times ``tau = eta * k``; :func:`step_size_study` measures
  the gap at one time for several step sizes (gradient descent is a first-order discretisation
  of the flow, so the gap shrinks like ``eta``); :func:`loglog_slope` fits the order.
* :func:`gd_to_gauss_newton` measures how far ``k`` steps of linearised gradient descent are
  from the (minimum-norm) Gauss-Newton step, the limit ``k -> inf`` (main paper Section 3.1).
* :func:`ridge_gradient_norm` checks that a damped Gauss-Newton step minimises the ridge
  objective on the linearised network (Eq. 6).
* :func:`time_call` times a jitted function (compile excluded) and :func:`gauss_newton_cost`
  times the kernel and primal forms of a Gauss-Newton direction on MLPs of growing width.

The checks are meant to run in float64 (``jax.config.update("jax_enable_x64", True)``);
:func:`to_float64` converts parameters initialised in float32.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LinearisedPath",
    "Timing",
    "gauss_newton_cost",
    "gd_to_gauss_newton",
    "gradient_flow_comparison",
    "linearised_gd_path",
    "loglog_slope",
    "ridge_gradient_norm",
    "step_size_study",
    "time_call",
    "to_float64",
]


def to_float64(tree):
    """Floating leaves of ``tree`` as float64 (needs ``jax_enable_x64``; raises otherwise)."""
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError("float64 needs jax_enable_x64: call jax.config.update('jax_enable_x64', True) first.")
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating) else a, tree)


def _apply_of(model):
    from ..core.model import Model

    return model.bind() if isinstance(model, Model) else model


def _flat(tree) -> np.ndarray:
    from jax.flatten_util import ravel_pytree

    return np.asarray(ravel_pytree(tree)[0])


@dataclass
class LinearisedPath:
    """Gradient descent on the linearised network, recorded at ``steps``.

    ``tau = lr * steps`` (the gradient-flow time), ``outputs`` ``(T, N*C)`` the linearised
    outputs on the training inputs, ``params`` ``(T, P)`` the flattened parameters (ravel order
    of ``jax.flatten_util.ravel_pytree``), ``loss`` the training loss ``0.5 ||f - y||^2`` at
    each recorded step.
    """

    lr: float
    steps: np.ndarray
    tau: np.ndarray
    outputs: np.ndarray
    params: np.ndarray
    loss: np.ndarray


def linearised_gd_path(model, params, x, y, lr: float, steps: Sequence[int], *, chunk_size: int = 2048) -> LinearisedPath:
    """Run gradient descent with step ``lr`` on the network linearised at ``params``.

    The training is itlin's: ``iterative_linearisation(model, optax.sgd(lr), "inf",
    loss="squared", reduction="sum")``, i.e. ``theta <- theta - lr J^T (f_lin(theta) - y)`` with
    ``J`` the Jacobian at ``params`` (main paper Eq. 3 with ``K = inf``). ``steps`` are the
    step counts to record (``0`` allowed), in increasing order.
    """
    import optax

    from ..core.linearise import linearised_apply
    from ..core.loop import run
    from ..core.train import iterative_linearisation

    steps = np.asarray(sorted(int(s) for s in steps), np.int64)
    if steps.size == 0 or steps[0] < 0:
        raise ValueError("steps must be a non-empty list of step counts >= 0.")
    trainer = iterative_linearisation(model, optax.sgd(float(lr)), math.inf, loss="squared", reduction="sum")
    apply = trainer.model.bind()
    x, y = jnp.asarray(x), jnp.asarray(y)
    lin_out = jax.jit(lambda anchor, p: linearised_apply(apply, anchor, p, x))
    state = trainer.init(params)
    outs, flats, losses = [], [], []
    for s in steps:
        todo = int(s) - int(state.step)
        if todo > 0:
            state, log = run(trainer, state, x, y, todo, chunk_size=int(chunk_size))
            if (log.loss.size and not np.isfinite(log.loss[-1])) or int(state.step) != int(s):
                raise FloatingPointError(f"linearised gradient descent with lr={lr:g} diverged before step {int(s)}; "
                                         "use a smaller step size (lr < 2 / largest NTK eigenvalue).")
        f = lin_out(state.anchor, state.params)
        outs.append(np.asarray(f).reshape(-1))
        flats.append(_flat(state.params))
        r = np.asarray(f - y).reshape(-1)
        losses.append(0.5 * float(r @ r))
    return LinearisedPath(lr=float(lr), steps=steps, tau=float(lr) * steps, outputs=np.stack(outs),
                          params=np.stack(flats), loss=np.asarray(losses))


def _flow_params_at(apply, params, x, y, kernel, taus) -> np.ndarray:
    """Flattened :func:`itlin.flow_params` at each finite time in ``taus``
    (compiled once, then evaluated per time: the eager version re-traces the network)."""
    from jax.flatten_util import ravel_pytree

    from ..core.flow import flow_params, gradient_flow
    from ..core.linearise import linearise_at

    flow = gradient_flow(kernel, apply(params, x), y, reduction="sum")
    at = jax.jit(lambda t: ravel_pytree(flow_params(linearise_at(apply, params, x), flow, t))[0])
    return np.stack([np.asarray(at(jnp.asarray(float(t), jnp.result_type(float)))) for t in taus])


def gradient_flow_comparison(model, params, x, y, lr: float, steps: Sequence[int], *, kernel=None) -> dict:
    """Linearised gradient descent beside the closed-form gradient flow at ``tau = lr * k``.

    Returns a dict: ``path`` (:class:`LinearisedPath`), ``kernel`` (the empirical NTK at
    ``params`` on ``x``), ``flow_outputs`` ``(T, N*C)`` from
    :func:`itlin.gradient_flow`, ``flow_params`` ``(T, P)`` from
    :func:`itlin.flow_params`, ``output_error`` (max over outputs of
    ``|f_GD - f_flow|``, per recorded step) and ``param_error`` (``||theta_GD - theta_flow||``
    divided by ``||theta_flow - theta_0||``; 0 where the flow has not moved).
    """
    from ..core.flow import gradient_flow
    from ..core.linearise import ntk

    apply = _apply_of(model)
    x, y = jnp.asarray(x), jnp.asarray(y)
    path = linearised_gd_path(model, params, x, y, lr, steps)
    if kernel is None:
        kernel = ntk(apply, params, x)
    flow = gradient_flow(kernel, apply(params, x), y, reduction="sum")
    flow_out = np.asarray(flow.predict(jnp.asarray(path.tau))).reshape(len(path.tau), -1)
    flow_params = _flow_params_at(apply, params, x, y, kernel, path.tau)
    theta0 = _flat(params)
    out_err = np.max(np.abs(path.outputs - flow_out), axis=1)
    moved = np.linalg.norm(flow_params - theta0, axis=1)
    gap = np.linalg.norm(path.params - flow_params, axis=1)
    param_err = np.where(moved > 0, gap / np.where(moved > 0, moved, 1.0), gap)
    return {"path": path, "kernel": np.asarray(kernel), "flow_outputs": flow_out, "flow_params": flow_params,
            "output_error": out_err, "param_error": param_err}


def step_size_study(model, params, x, y, tau: float, step_counts: Sequence[int], *, kernel=None) -> dict:
    """The gap between gradient descent and gradient flow at time ``tau`` for several step sizes.

    For each ``n`` in ``step_counts`` it takes ``n`` steps of size ``tau / n`` on the linearised
    network and compares with the flow at ``tau``. Returns arrays ``lr``, ``steps``,
    ``output_error`` and ``param_error`` (as in :func:`gradient_flow_comparison`) and the fitted
    orders ``output_order`` and ``param_order`` (:func:`loglog_slope` of error against ``lr``).
    """
    from ..core.linearise import ntk

    apply = _apply_of(model)
    if kernel is None:
        kernel = ntk(apply, params, jnp.asarray(x))
    lrs, oe, pe = [], [], []
    for n in step_counts:
        n = int(n)
        lr = float(tau) / n
        c = gradient_flow_comparison(model, params, x, y, lr, [n], kernel=kernel)
        lrs.append(lr)
        oe.append(float(c["output_error"][-1]))
        pe.append(float(c["param_error"][-1]))
    lrs, oe, pe = np.asarray(lrs), np.asarray(oe), np.asarray(pe)
    return {"lr": lrs, "steps": np.asarray([int(n) for n in step_counts]), "tau": float(tau),
            "output_error": oe, "param_error": pe, "output_order": loglog_slope(lrs, oe),
            "param_order": loglog_slope(lrs, pe)}


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (the order of a power law)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def gd_to_gauss_newton(model, params, x, y, lr: float, steps: Sequence[int], *, kernel=None) -> dict:
    """How close ``k`` steps of linearised gradient descent come to one Gauss-Newton step.

    The Gauss-Newton step without damping (:func:`itlin.gauss_newton_direction`,
    kernel form; the minimum-norm step when the kernel is singular) is the limit of gradient
    descent on the linearised squared loss (main paper Section 3.1, Eq. 5 and 19). Returns
    ``path``, ``gn_params`` (flattened ``theta_0 - d_GN``), ``distance`` (``||theta_k -
    theta_GN|| / ||theta_GN - theta_0||`` per recorded step) and ``flow_distance`` (the same for
    the closed-form flow at ``tau = lr * k``, for reference).
    """
    from ..core.gauss_newton import gauss_newton_direction
    from ..core.linearise import ntk

    apply = _apply_of(model)
    x, y = jnp.asarray(x), jnp.asarray(y)
    if kernel is None:
        kernel = ntk(apply, params, x)
    direction, _ = gauss_newton_direction(apply, params, x, y, loss="squared", reduction="sum", damping=0.0,
                                          method="kernel", ntk_fn=lambda p, xx: kernel)
    theta0 = _flat(params)
    gn = theta0 - _flat(direction)
    path = linearised_gd_path(model, params, x, y, lr, steps)
    size = np.linalg.norm(gn - theta0)
    dist = np.linalg.norm(path.params - gn, axis=1) / size
    flow = _flow_params_at(apply, params, x, y, kernel, path.tau)
    return {"path": path, "gn_params": gn, "distance": dist,
            "flow_distance": np.linalg.norm(flow - gn, axis=1) / size, "step_norm": float(size)}


def ridge_gradient_norm(apply_fn: Callable, anchor, direction, x, y, lam: float) -> float:
    """``||grad R(theta_s - d)|| / ||grad R(theta_s)||`` for the ridge objective of Eq. 6,

    ``R(theta) = 0.5 ||f_lin(theta, X) - Y||^2 + 0.5 lam ||theta - theta_s||^2`` with ``f_lin``
    the network linearised at ``anchor`` (``theta_s``) and ``d`` a damped Gauss-Newton direction:
    zero (to rounding) when ``theta_s - d`` is the minimiser.
    """
    from ..core._tree import tree_sub
    from ..core.linearise import linearised_apply

    x, y = jnp.asarray(x), jnp.asarray(y)

    def ridge(theta):
        r = linearised_apply(apply_fn, anchor, theta, x) - y
        delta = tree_sub(theta, anchor)
        return 0.5 * jnp.sum(r * r) + 0.5 * lam * sum(jnp.sum(d * d) for d in jax.tree_util.tree_leaves(delta))

    grad = jax.grad(ridge)
    at_step = grad(jax.tree_util.tree_map(lambda a, d: a - d, anchor, direction))
    at_anchor = grad(anchor)
    return float(np.linalg.norm(_flat(at_step)) / np.linalg.norm(_flat(at_anchor)))


# ------------------------------------------------------------------------------------ timing
@dataclass
class Timing:
    """Wall-clock seconds of a function: ``first`` (the first call, compile included),
    ``times`` (each timed call), ``median`` and ``best`` of them."""

    first: float
    times: np.ndarray

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def best(self) -> float:
        return float(np.min(self.times))


def time_call(fn: Callable, *args, repeats: int = 5, min_seconds: float = 0.0, **kwargs) -> Timing:
    """Time ``fn(*args, **kwargs)``: one call to compile and warm up, then ``repeats`` timed
    calls (more while their total is under ``min_seconds``), each waited for with
    ``jax.block_until_ready``. Pass the same ``fn`` object each time (jit caches by identity)."""
    from ..core._checks import check_positive_int
    repeats = check_positive_int("repeats", repeats)
    t = time.perf_counter()
    jax.block_until_ready(fn(*args, **kwargs))
    first = time.perf_counter() - t
    times = []
    while len(times) < repeats or sum(times) < min_seconds:
        t = time.perf_counter()
        jax.block_until_ready(fn(*args, **kwargs))
        times.append(time.perf_counter() - t)
        if len(times) >= 1000:
            break
    return Timing(first, np.asarray(times))


def gauss_newton_cost(x, y, widths: Sequence[int], *, depth: int = 5, damping: float = 1e-3,
                      max_primal_params: int = 5000, repeats: int = 3, seed: int = 0,
                      closed_form: bool = True, min_seconds: float = 0.1) -> dict:
    """Time one Gauss-Newton direction in kernel and primal form for MLPs of growing width.

    For each width an :func:`itlin.models.mlp` (``depth`` hidden layers, ReLU, one output per
    target column) is initialised at ``seed`` in the dtype of ``x``; the squared-loss direction
    (summed over examples) with constant damping, solved by Cholesky, is timed (:func:`time_call`: median of at least ``repeats`` calls,
    more while they add up to less than ``min_seconds``, so fast calls are not one noisy sample) with
    ``method="kernel"`` (the empirical NTK from Jacobians), ``method="kernel"`` with the MLP's
    closed-form NTK (``Model.ntk_fn``, when ``closed_form``) and ``method="primal"`` (only
    while ``P <= max_primal_params``: it forms a ``P x P`` matrix). NaN marks what was skipped.
    Returns arrays ``width``, ``params``, ``kernel``, ``kernel_closed_form``, ``primal`` (median
    seconds) and ``max_difference`` (``max |d_kernel - d_primal| / max |d_primal|`` where both ran).
    """
    from ..core._tree import num_params
    from ..core.gauss_newton import gauss_newton_direction
    from ..models import mlp

    x, y = jnp.asarray(x), jnp.asarray(y)
    rows = {"width": [], "params": [], "kernel": [], "kernel_closed_form": [], "primal": [], "max_difference": []}
    for w in widths:
        net = mlp(num_outputs=int(y.shape[-1]), width=int(w), depth=int(depth))
        p, _ = net.init(jax.random.PRNGKey(int(seed)), x)
        p = jax.tree_util.tree_map(lambda a: a.astype(x.dtype), p)
        apply = net.bind()
        n_params = num_params(p)

        def direction(method, ntk_fn=None):
            return lambda: gauss_newton_direction(apply, p, x, y, damping=damping, method=method, ntk_fn=ntk_fn,
                                                  reduction="sum", solve="cholesky")[0]

        k_fn = direction("kernel")
        rows["kernel"].append(time_call(k_fn, repeats=repeats, min_seconds=min_seconds).median)
        rows["kernel_closed_form"].append(
            time_call(direction("kernel", net.ntk_fn), repeats=repeats, min_seconds=min_seconds).median
            if closed_form else math.nan)
        if n_params <= max_primal_params:
            p_fn = direction("primal")
            rows["primal"].append(time_call(p_fn, repeats=repeats, min_seconds=min_seconds).median)
            dk, dp = _flat(k_fn()), _flat(p_fn())
            rows["max_difference"].append(float(np.max(np.abs(dk - dp)) / np.max(np.abs(dp))))
        else:
            rows["primal"].append(math.nan)
            rows["max_difference"].append(math.nan)
        rows["width"].append(int(w))
        rows["params"].append(n_params)
    return {k: np.asarray(v) for k, v in rows.items()}
