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
import numpy as np

from ._checks import check_finite_array, check_float_dtype, check_real_dtype
from .linearise import Linearisation


def _tolerance(dtype) -> float:
    """The relative tolerance of the kernel checks: ``sqrt(eps)`` of ``dtype`` (3.5e-4 in
    float32, 1.5e-8 in float64), far above the round-off of a computed NTK, far below a real
    asymmetry or negative eigenvalue."""
    return float(np.sqrt(np.finfo(dtype).eps))


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def _check_times(t):
    """Times ``t`` (concrete only): real, ``>= 0`` (``inf`` allowed), not NaN."""
    if not _concrete(t):
        return
    arr = np.asarray(t)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"t must be a real time or an array of times >= 0, got dtype {arr.dtype}.")
    if np.isnan(arr).any() or (arr < 0).any():
        bad = arr[np.isnan(arr) | (arr < 0)].ravel()[0]
        raise ValueError(f"t must be >= 0 (a time learning_rate * steps; inf for the limit), got {float(bad)!r}.")


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
        _check_times(t)
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
        :func:`flow_params`: a singular kernel does not interpolate). A negative or NaN time, a
        test kernel whose width is not the training kernel's ``N*C`` or whose rows are not a
        whole number of test examples, and an ``f_test0`` of another size are refused
        (ValueError).

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
        k_test_train, f_test0 = jnp.asarray(k_test_train), jnp.asarray(f_test0)
        width, c = self.eigenvalues.shape[0], max(1, _per_example(self.shape))
        if k_test_train.ndim != 2 or k_test_train.shape[1] != width or k_test_train.shape[0] % c:
            raise ValueError(f"k_test_train must be K(x_test, X) of shape (M*{c}, {width}) (test x training "
                             f"examples-times-outputs, as itlin.ntk(f, params, x_test, X)), got {k_test_train.shape}.")
        if f_test0.size != k_test_train.shape[0]:
            raise ValueError(f"f_test0 must hold the {k_test_train.shape[0]} test outputs of k_test_train's rows, got "
                             f"shape {f_test0.shape}.")
        check_real_dtype("k_test_train", k_test_train, "predict")
        check_finite_array("k_test_train", k_test_train)
        check_finite_array("f_test0", f_test0)
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

    The kernel must be symmetric positive semi-definite, as an NTK is. Round-off is forgiven
    and nothing more: an asymmetry ``max |K - K^T|`` up to ``sqrt(eps) max |K|`` (``eps`` of the
    kernel's float dtype) is removed by using ``(K + K^T) / 2``, and negative eigenvalues down to
    ``-sqrt(eps) max |s|`` are taken as 0. A kernel beyond either, one with NaN or Inf, a complex
    or half-precision one, and an empty problem are refused with a one-line ValueError/TypeError
    (checked on concrete values; inside ``jit`` the kernel is taken as given).

    >>> import jax.numpy as jnp
    >>> flow = gradient_flow(2.0 * jnp.eye(2), jnp.zeros(2), jnp.ones(2))   # mean: rate 1/2
    >>> round(float(flow.predict(1.0)[0]), 6)                               # 1 - exp(-2 * 1 / 2)
    0.632121
    >>> gradient_flow(jnp.asarray([[1.0, 2.0], [2.0, 1.0]]), jnp.zeros(2), jnp.ones(2))
    Traceback (most recent call last):
    ...
    ValueError: kernel is not positive semi-definite: its smallest eigenvalue is -1 (below -3.5e-04 * 3); give an NTK (J J^T), or add a ridge (K + c I, c >= 1) if that is the model you mean.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    kernel = jnp.asarray(kernel)
    f0, y = jnp.asarray(f0), jnp.asarray(y)
    if f0.shape != y.shape:
        raise ValueError(f"f0 and y must have the same shape, got {f0.shape} and {y.shape}.")
    if f0.ndim == 0 or f0.size == 0:
        raise ValueError(f"f0 and y must hold at least one example ((N, C) or (N,) with N >= 1), got shape {f0.shape}.")
    if kernel.shape != (f0.size, f0.size):
        raise ValueError(f"the kernel must be {f0.size} x {f0.size} (examples x outputs), got {kernel.shape}.")
    for name, a in (("kernel", kernel), ("f0", f0), ("y", y)):
        check_real_dtype(name, a, "gradient_flow")
        check_finite_array(name, a)
    check_float_dtype("kernel", kernel, "gradient_flow")
    if not jnp.issubdtype(kernel.dtype, jnp.floating):
        kernel = kernel.astype(jnp.result_type(float))
    f0, y = f0.astype(jnp.result_type(f0, kernel.dtype)), y.astype(jnp.result_type(y, kernel.dtype))
    concrete = _concrete(kernel)
    if concrete:
        k = np.asarray(kernel, np.float64)
        tol, scale = _tolerance(kernel.dtype), float(np.max(np.abs(k)))
        asym = float(np.max(np.abs(k - k.T)))
        if asym > tol * scale:
            raise ValueError(f"kernel is not symmetric: max |K - K^T| = {asym:.3g}, beyond round-off "
                             f"({tol:.1e} * max |K| = {tol * scale:.3g}); give a symmetric kernel such as itlin.ntk's, "
                             "or (K + K.T) / 2 if that is the kernel you mean.")
    s, v = jnp.linalg.eigh(0.5 * (kernel + kernel.T))
    if concrete:
        low, top = float(jnp.min(s)), float(jnp.max(jnp.abs(s)))
        if low < -tol * top:
            raise ValueError(f"kernel is not positive semi-definite: its smallest eigenvalue is {low:.3g} (below "
                             f"-{tol:.1e} * {top:.3g}); give an NTK (J J^T), or add a ridge (K + c I, c >= "
                             f"{-low:.3g}) if that is the model you mean.")
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

    ``lin``'s outputs must have the flow's shape (the same training set); otherwise ValueError.
    """
    if not isinstance(flow, GradientFlow):
        raise TypeError(f"flow must be a GradientFlow from itlin.gradient_flow, got {type(flow).__name__}.")
    if not isinstance(lin, Linearisation):
        raise TypeError(f"lin must be a Linearisation from itlin.linearise_at, got {type(lin).__name__}.")
    if tuple(lin.outputs.shape) != tuple(flow.shape):
        raise ValueError(f"lin and flow are of different problems: lin's outputs have shape {tuple(lin.outputs.shape)}, "
                         f"the flow's {tuple(flow.shape)}; linearise on the training inputs the flow was built for.")
    t = flow._t(t)
    z = flow.dual(t).reshape(t.shape + tuple(flow.shape)).astype(lin.outputs.dtype)
    if t.ndim == 0:
        step = lin.vjp(z)
    else:
        step = jax.vmap(lin.vjp)(z.reshape((-1,) + tuple(flow.shape)))
        step = jax.tree_util.tree_map(lambda g: g.reshape(t.shape + g.shape[1:]), step)
    return jax.tree_util.tree_map(lambda a, g: a - g, lin.anchor, step)


__all__ = ["GradientFlow", "flow_params", "gradient_flow"]
