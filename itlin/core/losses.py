"""Losses on network outputs, their gradients and Hessians with respect to the outputs.

The loss is never linearised: only the network is. For cross-entropy the softmax sits inside
the loss (main paper Section 4, Appendix A), so the linearised model's logits go through an
exact softmax.

Conventions. ``get_loss(name).per_example(f, y)`` returns one loss per example (the functions
behind it are private: :class:`Loss` is the one public route); the training loss is its mean
(``reduction="mean"``) or its sum (``reduction="sum"``). The squared loss of one example is
``0.5 * ||f - y||^2`` summed over outputs, so with ``reduction="sum"`` the gradient with
respect to the outputs is the residual ``f - Y`` of the main paper's Eq. 1-6.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np


def _check_regression_shapes(f, y):
    if f.shape != y.shape:
        raise ValueError(
            f"squared loss needs targets shaped like the outputs: outputs {f.shape}, targets {y.shape}. "
            "Reshape the targets (e.g. y[:, None] for a single output)."
        )


def _squared_per_example(f, y):
    """``0.5 * ||f_n - y_n||^2`` for each example n (outputs and targets of equal shape)."""
    _check_regression_shapes(f, y)
    r = (f - y).reshape(f.shape[0], -1)
    return 0.5 * jnp.sum(r * r, axis=-1)


def _check_class_outputs(shape):
    if len(shape) < 2 or shape[-1] < 2:
        raise ValueError(f"cross-entropy needs one output per class (outputs (N, C) with C >= 2), got outputs of shape "
                         f"{tuple(shape)}; for one output use loss='binary_cross_entropy', or give the model two outputs.")


def _check_labels_in_range(y, num_classes):
    """Concrete integer labels must lie in ``[0, num_classes)``; traced ones pass unchecked."""
    if isinstance(y, jax.core.Tracer):
        return
    y = np.asarray(y)
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        bad = int(y.min()) if y.min() < 0 else int(y.max())
        raise ValueError(f"class labels must lie in 0..{num_classes - 1} (the model has {num_classes} outputs), got "
                         f"{bad}; fix the labels or give the model more outputs.")


def _as_target_probs(logits, y):
    _check_class_outputs(logits.shape)
    num_classes = logits.shape[-1]
    if y.ndim == logits.ndim - 1 and jnp.issubdtype(y.dtype, jnp.integer):
        _check_labels_in_range(y, num_classes)
        return jax.nn.one_hot(y, num_classes, dtype=logits.dtype)
    if y.shape == logits.shape:
        return y.astype(logits.dtype)
    raise ValueError(
        f"cross-entropy needs integer labels of shape {logits.shape[:-1]} or target probabilities of "
        f"shape {logits.shape}; got targets of shape {y.shape} and dtype {y.dtype}."
    )


def _cross_entropy_per_example(logits, y):
    """Softmax cross-entropy for each example; ``y`` is integer labels or probability vectors."""
    p = _as_target_probs(logits, y)
    return -jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def _binary_cross_entropy_per_example(logits, y):
    """Sigmoid cross-entropy of one output per example, ``log(1 + e^f) - y f`` (stable form).

    ``logits`` is ``(N,)`` or ``(N, 1)``; ``y`` holds 0/1 labels or +-1 targets (positive when
    ``y > 0``), one per example. The binary models of Ortiz-Jimenez et al. train so; a one-output
    softmax cross-entropy would be constant.

    >>> import jax.numpy as jnp
    >>> round(float(_binary_cross_entropy_per_example(jnp.zeros(1), jnp.ones(1))[0]), 4)  # log 2
    0.6931
    """
    f = logits.reshape(logits.shape[0], -1)
    if f.shape[1] != 1:
        raise ValueError(f"binary cross-entropy needs one output per example, got outputs of shape {logits.shape}.")
    f = f[:, 0]
    t = jnp.asarray(y).reshape(-1)
    if t.shape != f.shape:
        raise ValueError(f"binary cross-entropy needs one target per example: outputs {logits.shape}, targets "
                         f"{jnp.shape(y)}.")
    t = (t > 0).astype(f.dtype)
    return jax.nn.softplus(f) - t * f


def _squared_hessian(f, y):
    """``H = I`` per example: the scalar ``1`` (``c I`` with ``c = 1``)."""
    return 1.0


def _cross_entropy_hessian(f, y):
    """``diag(p) - p p^T`` per example, ``p = softmax(f)``: ``(N, C, C)``."""
    p = jax.nn.softmax(f.reshape(f.shape[0], -1), axis=-1)
    return jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]


def _binary_cross_entropy_hessian(f, y):
    """``p (1 - p)`` per example, ``p = sigmoid(f)``: ``(N, 1, 1)``."""
    p = jax.nn.sigmoid(f.reshape(f.shape[0], -1))
    return (p * (1 - p))[:, :, None]


def _finite_targets(y):
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        bad = int(y.size - np.count_nonzero(np.isfinite(y)))
        raise ValueError(f"targets y contain {bad} non-finite value(s) (NaN or Inf); clean the data first.")


def _squared_check(out_shape, y):
    y = np.asarray(y)
    if tuple(out_shape) != y.shape:
        raise ValueError(f"squared loss: targets must be shaped like the outputs: outputs {tuple(out_shape)}, targets "
                         f"{y.shape}; reshape the targets (e.g. y[:, None] for a single output).")
    _finite_targets(y)


def _cross_entropy_check(out_shape, y):
    y = np.asarray(y)
    out_shape = tuple(out_shape)
    _check_class_outputs(out_shape)
    if y.shape == out_shape[:-1] and y.dtype.kind in "iu":
        _check_labels_in_range(y, out_shape[-1])
    elif y.shape == out_shape and y.dtype.kind == "f":
        _finite_targets(y)
    else:
        raise ValueError(f"cross-entropy needs integer labels of shape {out_shape[:-1]} or target probabilities of "
                         f"shape {out_shape}; got targets of shape {y.shape} and dtype {y.dtype}.")


def _binary_cross_entropy_check(out_shape, y):
    y = np.asarray(y)
    n = out_shape[0] if len(out_shape) else 0
    if int(np.prod(out_shape[1:], dtype=np.int64)) != 1:
        raise ValueError(f"binary cross-entropy needs one output per example, got outputs of shape {tuple(out_shape)}; "
                         "use loss='cross_entropy' for several classes.")
    if y.size != n:
        raise ValueError(f"binary cross-entropy needs one target per example: outputs {tuple(out_shape)}, targets "
                         f"{y.shape}.")
    _finite_targets(y)


@dataclass(frozen=True)
class Loss:
    """A loss on network outputs, with what the algorithms need of it as data.

    ``name``: ``"squared"``, ``"cross_entropy"`` (softmax), ``"binary_cross_entropy"`` (sigmoid,
    one output) or a name of one's own. ``per_example(f, y)``: one loss per example.
    ``reduction``: ``"mean"`` or ``"sum"`` over the batch. ``hessian(f, y)``: the Hessian of
    ``per_example`` in one example's outputs, as per-example blocks ``(N, C, C)`` or a scalar
    ``c`` for ``c I``; Gauss-Newton (``hessian="loss"``) needs it and refuses a loss without one.
    ``check(out_shape, y)``: validates concrete targets against the outputs' shape before any
    work starts (one-line ``ValueError``), or ``None``. ``hessian`` and ``check`` must be
    functions or ``None`` (TypeError otherwise), and ``per_example`` must return shape ``(N,)``:
    one that returns a scalar (a loss already reduced) or ``(N, C)`` is refused before training
    or Gauss-Newton starts.

    >>> import jax.numpy as jnp
    >>> sq = get_loss("squared")                       # mean over examples of 0.5 ||f - y||^2
    >>> float(sq(jnp.asarray([[1.0], [3.0]]), jnp.zeros((2, 1))))
    2.5
    >>> sq.grad_outputs(jnp.asarray([[1.0], [3.0]]), jnp.zeros((2, 1))).tolist()  # (f - y) / N
    [[0.5], [1.5]]
    >>> sq.per_example(jnp.asarray([[1.0], [3.0]]), jnp.zeros((2, 1))).tolist()    # one loss per example
    [0.5, 4.5]
    >>> [round(v, 4) for v in get_loss("cross_entropy").per_example(jnp.zeros((2, 2)), jnp.asarray([0, 1])).tolist()]
    [0.6931, 0.6931]

    A loss of one's own, with its Hessian (here a pseudo-Huber loss of one output):

    >>> ph = lambda f, y: jnp.sqrt(1 + (f - y).reshape(f.shape[0], -1) ** 2).sum(-1) - 1
    >>> ph_hess = lambda f, y: (1 + (f - y).reshape(f.shape[0], -1, 1) ** 2) ** -1.5
    >>> huber = Loss("pseudo_huber", ph, hessian=ph_hess)
    >>> huber.hessian_outputs(jnp.zeros((2, 1)), jnp.zeros((2, 1)))[:, 0, 0].tolist()  # 1 / N each
    [0.5, 0.5]
    """

    name: str
    per_example: Callable = field(repr=False)
    reduction: str = "mean"
    hessian: Optional[Callable] = field(default=None, repr=False, compare=True)
    check: Optional[Callable] = field(default=None, repr=False, compare=True)

    def __post_init__(self):
        if self.reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {self.reduction!r}.")
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}.")
        if not callable(self.per_example):
            raise TypeError(f"per_example must be a function per_example(f, y) -> one loss per example, got "
                            f"{self.per_example!r}.")
        for field_name, what in (("hessian", "hessian(f, y) -> (N, C, C) blocks or a scalar c"),
                                 ("check", "check(out_shape, y) that raises ValueError on bad targets")):
            value = getattr(self, field_name)
            if value is not None and not callable(value):
                raise TypeError(f"{field_name} must be a function {what}, or None; got {value!r}.")

    def __call__(self, f, y):
        """The training loss: mean or sum of ``per_example`` over the batch."""
        per = self.per_example(f, y)
        return jnp.mean(per) if self.reduction == "mean" else jnp.sum(per)

    def grad_outputs(self, f, y):
        """Gradient of the loss with respect to the outputs, ``L'(f)`` (main paper Appendix A)."""
        return jax.grad(lambda g: self(g, y))(f)

    def hessian_outputs(self, f, y):
        """Block-diagonal Hessian of the loss in the outputs, as an array ``(N, C, C)``.

        Squared loss: the identity per example (Eq. 5-6, ``H = I``). Cross-entropy:
        ``diag(p) - p p^T`` with ``p = softmax(f)`` (the generalised Gauss-Newton matrix).
        Binary cross-entropy: ``p (1 - p)`` with ``p = sigmoid(f)``. Scaled by ``1/N`` for
        ``reduction="mean"``. Taken from the loss's ``hessian`` field.
        """
        if self.hessian is None:
            raise ValueError(_no_hessian(self))
        n = f.shape[0]
        c = int(np.prod(f.shape[1:], dtype=np.int64))
        h = jnp.asarray(self.hessian(f, y), f.dtype)
        if h.ndim == 0:
            h = h * jnp.broadcast_to(jnp.eye(c, dtype=f.dtype), (n, c, c))
        return self.scale(n) * h.reshape(n, c, c)

    def check_targets(self, out_shape, y):
        """Validate concrete targets ``y`` against outputs of shape ``out_shape`` (no-op when
        traced): the loss's ``check`` (label range, shapes, finiteness), and that ``per_example``
        returns one loss per example.

        >>> get_loss("cross_entropy").check_targets((2, 3), jnp.asarray([5, -1]))
        Traceback (most recent call last):
        ...
        ValueError: class labels must lie in 0..2 (the model has 3 outputs), got -1; fix the labels or give the model more outputs.
        """
        if isinstance(y, jax.core.Tracer):
            return
        out_shape = tuple(out_shape)
        if self.check is not None:
            self.check(out_shape, y)
        if out_shape:
            self._check_per_example(out_shape, y)

    def _check_per_example(self, out_shape, y):
        """``per_example`` must give one loss per example, shape ``(N,)`` (abstract: no computation);
        a scalar or ``(N, C)`` would make the mean and :func:`itlin.evaluate`'s sum disagree."""
        spec = lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))
        try:
            per = jax.eval_shape(self.per_example, jax.ShapeDtypeStruct(out_shape, jnp.float32),
                                 jax.tree_util.tree_map(spec, y))
        except Exception:  # noqa: BLE001 - a loss that cannot be traced abstractly fails where it is used
            return
        shape = tuple(getattr(per, "shape", ()))
        if shape != out_shape[:1]:
            raise ValueError(f"loss {self.name!r}: per_example must return one loss per example, shape "
                             f"({out_shape[0]},) for outputs {out_shape}, got shape {shape}; sum over the outputs "
                             "(e.g. jnp.sum(..., axis=-1)) and do not reduce over examples.")

    @property
    def classifies(self) -> bool:
        """Whether the loss is a classification loss (accuracy is then reported)."""
        return self.name in ("cross_entropy", "binary_cross_entropy")

    def scale(self, n: int) -> float:
        """The factor a ``reduction`` puts on a sum over ``n`` examples: ``1/n`` or ``1``."""
        return 1.0 / n if self.reduction == "mean" else 1.0


def _no_hessian(loss) -> str:
    return (f"loss {loss.name!r} carries no output Hessian: give it one, Loss(..., hessian=fn) with fn(f, y) -> "
            "per-example (N, C, C) blocks or a scalar c for c*I, or pass hessian='identity'.")


#: every loss :func:`get_loss` knows, by name, and its aliases
LOSSES = {
    "squared": ("mse", "squared_error"),
    "cross_entropy": ("xent", "softmax_cross_entropy", "ce"),
    "binary_cross_entropy": ("bce", "sigmoid_cross_entropy", "logistic"),
}


def get_loss(name: "str | Loss", reduction: str = "mean") -> Loss:
    """Look up a loss by name. Every loss there is:

    * ``"squared"`` (aliases ``"mse"``, ``"squared_error"``): ``0.5 ||f - y||^2`` per example,
      targets shaped like the outputs;
    * ``"cross_entropy"`` (``"xent"``, ``"softmax_cross_entropy"``, ``"ce"``): softmax
      cross-entropy, outputs ``(N, C)`` with ``C >= 2``, integer labels in ``0..C-1`` or
      probability vectors;
    * ``"binary_cross_entropy"`` (``"bce"``, ``"sigmoid_cross_entropy"``, ``"logistic"``):
      sigmoid cross-entropy of one output per example, 0/1 or +-1 targets;
    * a :class:`Loss` of one's own (returned with the given ``reduction``).

    ``reduction`` is ``"mean"`` over examples (the library's default everywhere) or ``"sum"``
    (the main paper's ``0.5 ||f - Y||^2`` of Eq. 1-6). Called on concrete arrays, a loss checks
    its targets (label range, shapes) and says what to fix.

    >>> get_loss("mse", "sum")
    Loss(name='squared', reduction='sum')
    >>> import jax.numpy as jnp
    >>> get_loss("cross_entropy")(jnp.zeros((2, 3)), jnp.asarray([5, -1]))
    Traceback (most recent call last):
    ...
    ValueError: class labels must lie in 0..2 (the model has 3 outputs), got -1; fix the labels or give the model more outputs.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    if isinstance(name, Loss):
        return name if name.reduction == reduction else dataclasses.replace(name, reduction=reduction)
    key = str(name).lower().replace("-", "_")
    if key in ("squared",) + LOSSES["squared"]:
        return Loss("squared", _squared_per_example, reduction, _squared_hessian, _squared_check)
    if key in ("cross_entropy",) + LOSSES["cross_entropy"]:
        return Loss("cross_entropy", _cross_entropy_per_example, reduction, _cross_entropy_hessian,
                    _cross_entropy_check)
    if key in ("binary_cross_entropy",) + LOSSES["binary_cross_entropy"]:
        return Loss("binary_cross_entropy", _binary_cross_entropy_per_example, reduction,
                    _binary_cross_entropy_hessian, _binary_cross_entropy_check)
    raise ValueError(f"unknown loss {name!r}; choose 'squared', 'cross_entropy' or 'binary_cross_entropy' (or pass "
                     "an itlin.Loss).")


def accuracy(outputs, targets):
    """Fraction of correct predictions. Jittable.

    Several outputs: the arg-max against integer labels, or against the arg-max of
    probability / one-hot targets. One output (``(N,)`` or ``(N, 1)``) with +-1 or 0/1 targets
    (binary tasks): predicted positive when the output is > 0, positive when the target is > 0.

    >>> import jax.numpy as jnp
    >>> float(accuracy(jnp.asarray([[2.0, 1.0], [0.0, 3.0]]), jnp.asarray([0, 0])))
    0.5
    >>> float(accuracy(jnp.asarray([0.3, -2.0]), jnp.asarray([1.0, -1.0])))
    1.0
    """
    outputs, targets = jnp.asarray(outputs), jnp.asarray(targets)
    if outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1):
        f, y = outputs.reshape(-1), targets.reshape(-1)
        if f.shape != y.shape:
            raise ValueError(f"single-output accuracy needs one target per example: outputs {outputs.shape}, "
                             f"targets {targets.shape}.")
        return jnp.mean((f > 0) == (y > 0))
    if targets.ndim == outputs.ndim - 1:
        if targets.shape != outputs.shape[:-1]:
            raise ValueError(f"labels shaped {targets.shape} do not match outputs {outputs.shape}.")
        labels = targets
    elif targets.shape == outputs.shape:
        labels = jnp.argmax(targets, axis=-1)
    else:
        raise ValueError(f"targets must be integer labels {outputs.shape[:-1]} or probabilities {outputs.shape}; "
                         f"got {targets.shape}.")
    return jnp.mean(jnp.argmax(outputs, axis=-1) == labels)


def rmse(f, y):
    """Root mean squared error over all outputs.

    >>> import jax.numpy as jnp
    >>> float(rmse(jnp.asarray([1.0, -1.0]), jnp.zeros(2)))
    1.0
    """
    _check_regression_shapes(f, y)
    return jnp.sqrt(jnp.mean((f - y) ** 2))


__all__ = ["LOSSES", "Loss", "accuracy", "get_loss", "rmse"]
