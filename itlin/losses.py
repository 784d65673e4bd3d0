"""Losses on network outputs, their gradients and Hessians with respect to the outputs.

The loss is never linearised: only the network is. For cross-entropy the softmax sits inside
the loss (main paper Section 4, Appendix A), so the linearised model's logits go through an
exact softmax.

Conventions. ``per_example(f, y)`` returns one loss per example; the training loss is its mean
(``reduction="mean"``) or its sum (``reduction="sum"``). The squared loss of one example is
``0.5 * ||f - y||^2`` summed over outputs, so with ``reduction="sum"`` the gradient with
respect to the outputs is the residual ``f - Y`` of the main paper's Eq. 1-6.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp


def _check_regression_shapes(f, y):
    if f.shape != y.shape:
        raise ValueError(
            f"squared loss needs targets shaped like the outputs: outputs {f.shape}, targets {y.shape}. "
            "Reshape the targets (e.g. y[:, None] for a single output)."
        )


def squared_per_example(f, y):
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


def cross_entropy_per_example(logits, y):
    """Softmax cross-entropy for each example; ``y`` is integer labels or probability vectors."""
    p = _as_target_probs(logits, y)
    return -jnp.sum(p * jax.nn.log_softmax(logits, axis=-1), axis=-1)


@dataclass(frozen=True)
class Loss:
    """A loss on network outputs. ``name`` is ``"squared"`` or ``"cross_entropy"``."""

    name: str
    per_example: Callable
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
        Scaled by ``1/N`` for ``reduction="mean"``.
        """
        n = f.shape[0]
        flat = f.reshape(n, -1)
        c = flat.shape[1]
        scale = (1.0 / n) if self.reduction == "mean" else 1.0
        if self.name == "squared":
            h = jnp.broadcast_to(jnp.eye(c, dtype=f.dtype), (n, c, c))
        else:
            p = jax.nn.softmax(flat, axis=-1)
            h = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
        return scale * h

    def with_reduction(self, reduction: str) -> "Loss":
        """The same loss with ``reduction`` ``"mean"`` or ``"sum"``."""
        return get_loss(self.name, reduction)


def get_loss(name: "str | Loss", reduction: str = "mean") -> Loss:
    """Look up a loss by name: ``"squared"`` (alias ``"mse"``) or ``"cross_entropy"`` (``"xent"``)."""
    if isinstance(name, Loss):
        return name if name.reduction == reduction else get_loss(name.name, reduction)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    key = str(name).lower().replace("-", "_")
    if key in ("squared", "mse", "squared_error"):
        return Loss("squared", squared_per_example, reduction)
    if key in ("cross_entropy", "xent", "softmax_cross_entropy", "ce"):
        return Loss("cross_entropy", cross_entropy_per_example, reduction)
    raise ValueError(f"unknown loss {name!r}; choose 'squared' or 'cross_entropy'.")


def accuracy(logits, y):
    """Fraction of examples whose arg-max logit equals the label (labels or probability targets)."""
    labels = y if y.ndim == logits.ndim - 1 else jnp.argmax(y, axis=-1)
    return jnp.mean(jnp.argmax(logits, axis=-1) == labels)


def rmse(f, y):
    """Root mean squared error over all outputs."""
    _check_regression_shapes(f, y)
    return jnp.sqrt(jnp.mean((f - y) ** 2))


__all__ = [
    "Loss",
    "accuracy",
    "cross_entropy_per_example",
    "get_loss",
    "rmse",
    "squared_per_example",
]
