"""Gradient flow of a linearised squared-loss model in closed form (main paper Appendix B, Eq. 9-19).

Training the linearised model ``f_lin`` with gradient descent of step ``eta`` on the squared loss
``L = r * sum_n 0.5 ||f_n - y_n||^2`` (``r = 1/N`` for ``reduction="mean"``, the library's
default, ``1`` for ``"sum"``, the paper's Eq. 1) follows, for small ``eta``, the flow

    d theta / dt = -r J^T (f - y),       t = eta * steps,

whose solution, with ``K = J J^T = V diag(s) V^T`` and ``r_0 = f(theta_s, X) - Y``, is

    f(t)     = Y + V exp(-r s t) V^T r_0                                         (Eq. 14)
    theta(t) = theta_s - J^T z(t),   z(t) = V diag((1 - exp(-r s t)) / s) V^T r_0   (Eq. 18)

and ``z(inf) = K^+ r_0`` is the minimum-norm interpolating step (Eq. 19, undamped Gauss-Newton).
The factor ``(1 - exp(-r s t)) / s`` tends to ``r t`` as ``s -> 0``, so the formulas hold for a
singular kernel. Predictions at other points use ``f_test(t) = f_test(0) - K_test,train z(t)``.

:func:`gradient_flow` does the one eigendecomposition and returns a :class:`GradientFlow` that
predicts outputs at any times, on training or test points, and gives the dual coefficients
``z(t)`` from which :func:`flow_params` builds the parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp

from .linearise import Linearisation


def _nonzero(s):
    """The eigenvalues taken as non-zero in the limit ``t = inf`` (the pseudo-inverse's rule:
    above ``max(s) * M * eps``); the others are round-off of a singular kernel."""
    return s > jnp.max(s) * s.shape[-1] * jnp.finfo(s.dtype).eps


def _factor(s, rt):
    """``(1 - exp(-s rt)) / s``, continued to ``rt`` at ``s = 0``; ``1/s`` (pseudo-inverse) at ``rt = inf``."""
    inf = jnp.isinf(rt)
    finite_rt = jnp.where(inf, 0.0, rt)
    safe = jnp.where(jnp.abs(s) > 0, s, 1.0)
    at_t = jnp.where(jnp.abs(s) > 0, -jnp.expm1(-safe * finite_rt) / safe, finite_rt)
    rel = _nonzero(s)
    at_inf = jnp.where(rel, 1.0 / jnp.where(rel, s, 1.0), 0.0)
    return jnp.where(inf, at_inf, at_t)


@partial(jax.tree_util.register_dataclass, data_fields=["eigenvalues", "eigenvectors", "residual", "targets"],
         meta_fields=["rate", "shape"])
@dataclass(frozen=True)
class GradientFlow:
    """The closed-form flow of one linearisation (a pytree; built by :func:`gradient_flow`).

    ``eigenvalues``/``eigenvectors``: of the training kernel (clipped at 0); ``residual``:
    ``f(0) - Y`` flattened; ``targets``: ``Y`` flattened; ``rate``: the reduction's factor
    ``r``; ``shape``: the outputs' shape.

    >>> import jax.numpy as jnp
    >>> flow = gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), reduction="sum")
    >>> flow.eigenvalues.tolist(), flow.rate, flow.shape
    ([1.0, 1.0], 1.0, (2,))
    >>> [round(v, 6) for v in flow.predict(1.0).tolist()]     # 1 - exp(-1)
    [0.632121, 0.632121]
    """

    eigenvalues: jax.Array
    eigenvectors: jax.Array
    residual: jax.Array
    targets: jax.Array
    rate: float
    shape: tuple

    def _t(self, t):
        return jnp.asarray(t, self.eigenvalues.dtype)

    def dual(self, t):
        """``z(t)`` (flattened, ``(..., N*C)`` for an array of times) with ``theta(t) = theta_s - J^T z(t)``."""
        t = self._t(t)
        fac = _factor(self.eigenvalues, self.rate * t[..., None])  # (..., NC)
        v = self.eigenvectors
        return (fac * (v.T @ self.residual)) @ v.T

    def predict(self, t, k_test_train=None, f_test0=None):
        """Outputs at time(s) ``t``: on the training points (``k_test_train=None``, Eq. 14), or
        on test points given ``K(x_test, X)`` (``(M*C, N*C)``) and the test outputs at the
        anchor ``f_test0``. ``t`` may be a scalar or an array (a leading axis of times);
        ``t = inf`` is the limit (eigenvalues below ``max * M * eps`` count as zero, as in
        :func:`flow_params`: a singular kernel does not interpolate).

        >>> import jax.numpy as jnp
        >>> flow = gradient_flow(jnp.eye(2), jnp.zeros((2, 1)), jnp.ones((2, 1)), reduction="sum")
        >>> flow.predict(jnp.asarray([0.0, jnp.inf]))[:, :, 0].tolist()
        [[0.0, 0.0], [1.0, 1.0]]
        >>> float(flow.predict(jnp.inf, 0.5 * jnp.ones((1, 2)), jnp.zeros((1, 1)))[0, 0])  # 0 + 0.5 * 2
        1.0
        """
        t = self._t(t)
        if k_test_train is None:
            v = self.eigenvectors
            decay = jnp.exp(-jnp.multiply.outer(self.rate * t, self.eigenvalues))
            # t = inf: the same threshold as flow_params (the pseudo-inverse's), so that round-off
            # eigenvalues of a singular kernel are not taken as directions that were fitted
            decay = jnp.where(jnp.isinf(t)[..., None], jnp.where(_nonzero(self.eigenvalues), 0.0, 1.0), decay)
            out = self.targets + (decay * (v.T @ self.residual)) @ v.T
            return out.reshape(t.shape + tuple(self.shape))
        if f_test0 is None:
            raise ValueError("predict on test points needs f_test0, the test outputs at the anchor.")
        out = f_test0.reshape(-1) - self.dual(t) @ k_test_train.T
        return out.reshape(t.shape + (k_test_train.shape[0] // max(1, _per_example(self.shape)),)
                           + tuple(self.shape[1:]))


def _per_example(shape) -> int:
    n = 1
    for d in shape[1:]:
        n *= int(d)
    return n


def gradient_flow(kernel, f0, y, *, reduction: str = "mean") -> GradientFlow:
    """The closed-form gradient flow of a linearised squared-loss model (one ``eigh`` of ``kernel``).

    ``kernel`` is the training NTK (``(N*C, N*C)``, example-major, as :func:`itlin.ntk`), ``f0``
    the outputs at the anchor and ``y`` the targets, both ``(N, C)`` or ``(N,)``. Time is
    ``t = learning_rate * steps`` for gradient descent on the loss with the same ``reduction``
    (``"mean"`` by default, as the trainer).

    >>> import jax.numpy as jnp
    >>> flow = gradient_flow(2.0 * jnp.eye(2), jnp.zeros(2), jnp.ones(2))   # mean: rate 1/2
    >>> round(float(flow.predict(1.0)[0]), 6)                               # 1 - exp(-2 * 1 / 2)
    0.632121
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    kernel = jnp.asarray(kernel)
    f0, y = jnp.asarray(f0), jnp.asarray(y)
    if f0.shape != y.shape:
        raise ValueError(f"f0 and y must have the same shape, got {f0.shape} and {y.shape}.")
    if kernel.shape != (f0.size, f0.size):
        raise ValueError(f"the kernel must be {f0.size} x {f0.size} (examples x outputs), got {kernel.shape}.")
    s, v = jnp.linalg.eigh(0.5 * (kernel + kernel.T))
    rate = 1.0 / f0.shape[0] if reduction == "mean" else 1.0
    return GradientFlow(jnp.clip(s, 0.0, None), v, (f0 - y).reshape(-1), y.reshape(-1), rate, tuple(f0.shape))


def flow_params(lin: Linearisation, flow: GradientFlow, t):
    """Parameters at time(s) ``t`` of the flow of ``lin``'s model: ``theta_s - J^T z(t)`` (Eq. 18;
    Eq. 19 at ``t = inf``). ``lin`` is :func:`itlin.linearise_at` on the training inputs. ``t``
    may be a scalar or an array, as in :meth:`GradientFlow.predict`: each leaf then gets the
    times' shape as leading axes.

    >>> import jax.numpy as jnp
    >>> from itlin.core.linearise import linearise_at
    >>> f = lambda p, x: x @ p
    >>> x, y = jnp.eye(2), jnp.asarray([1.0, 2.0])
    >>> lin = linearise_at(f, jnp.zeros(2), x)
    >>> flow = gradient_flow(x @ x.T, lin.outputs, y)
    >>> flow_params(lin, flow, jnp.inf).tolist()
    [1.0, 2.0]
    >>> flow_params(lin, flow, jnp.asarray([0.0, jnp.inf])).tolist()     # one row per time
    [[0.0, 0.0], [1.0, 2.0]]
    """
    t = flow._t(t)
    z = flow.dual(t).reshape(t.shape + tuple(flow.shape)).astype(lin.outputs.dtype)
    if t.ndim == 0:
        step = lin.vjp(z)
    else:
        step = jax.vmap(lin.vjp)(z.reshape((-1,) + tuple(flow.shape)))
        step = jax.tree_util.tree_map(lambda g: g.reshape(t.shape + g.shape[1:]), step)
    return jax.tree_util.tree_map(lambda a, g: a - g, lin.anchor, step)


__all__ = ["GradientFlow", "flow_params", "gradient_flow"]
