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

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp


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


def _as_target_probs(logits, y):
    num_classes = logits.shape[-1]
    if y.ndim == logits.ndim - 1 and jnp.issubdtype(y.dtype, jnp.integer):
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


@dataclass(frozen=True)
class Loss:
    """A loss on network outputs: ``name`` is ``"squared"``, ``"cross_entropy"`` (softmax) or
    ``"binary_cross_entropy"`` (sigmoid, one output).

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
    """

    name: str
    per_example: Callable = field(repr=False)
    reduction: str = "mean"

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
        ``reduction="mean"``.
        """
        n = f.shape[0]
        flat = f.reshape(n, -1)
        c = flat.shape[1]
        scale = (1.0 / n) if self.reduction == "mean" else 1.0
        if self.name == "squared":
            h = jnp.broadcast_to(jnp.eye(c, dtype=f.dtype), (n, c, c))
        elif self.name == "binary_cross_entropy":
            p = jax.nn.sigmoid(flat)
            h = (p * (1 - p))[:, :, None]
        else:
            p = jax.nn.softmax(flat, axis=-1)
            h = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
        return scale * h

    @property
    def classifies(self) -> bool:
        """Whether the loss is a classification loss (accuracy is then reported)."""
        return self.name in ("cross_entropy", "binary_cross_entropy")

    def scale(self, n: int) -> float:
        """The factor a ``reduction`` puts on a sum over ``n`` examples: ``1/n`` or ``1``."""
        return 1.0 / n if self.reduction == "mean" else 1.0


def get_loss(name: "str | Loss", reduction: str = "mean") -> Loss:
    """Look up a loss by name: ``"squared"`` (alias ``"mse"``) or ``"cross_entropy"`` (``"xent"``).

    ``reduction`` is ``"mean"`` over examples (the library's default everywhere) or ``"sum"``
    (the main paper's ``0.5 ||f - Y||^2`` of Eq. 1-6).

    >>> get_loss("mse", "sum")
    Loss(name='squared', reduction='sum')
    """
    if isinstance(name, Loss):
        return name if name.reduction == reduction else get_loss(name.name, reduction)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    key = str(name).lower().replace("-", "_")
    if key in ("squared", "mse", "squared_error"):
        return Loss("squared", _squared_per_example, reduction)
    if key in ("cross_entropy", "xent", "softmax_cross_entropy", "ce"):
        return Loss("cross_entropy", _cross_entropy_per_example, reduction)
    if key in ("binary_cross_entropy", "bce", "sigmoid_cross_entropy", "logistic"):
        return Loss("binary_cross_entropy", _binary_cross_entropy_per_example, reduction)
    raise ValueError(f"unknown loss {name!r}; choose 'squared', 'cross_entropy' or 'binary_cross_entropy'.")


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


__all__ = ["Loss", "accuracy", "get_loss", "rmse"]
