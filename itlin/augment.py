"""Data augmentation as jittable JAX functions of a PRNG key.

Main paper Fig. 3 and Fig. 4 (right) train with "flips and random crops": :func:`augment` draws,
for every image of an NHWC batch, a random crop of the image padded by ``pad`` pixels on each
side (the standard CIFAR-10 recipe, pad 4) and a horizontal flip with probability 1/2. Padding is
with zeros, which after per-channel standardisation (:mod:`itlin.data`) is the training mean.
For 1-D signals (MNIST-1D, ``(N, length, channels)``), :func:`augment_1d` applies a random shift;
flips are not offered there because a mirrored MNIST-1D signal is a different digit's template.

Each example gets its own draw; the same key gives the same batch, so a training run that
derives the key from its step number is reproducible.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp


def _check_int(name, value, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


@partial(jax.jit, static_argnames=("pad", "flip"))
def _augment(key, x, pad, flip):
    n, h, w, c = x.shape
    k_y, k_x, k_f = jax.random.split(key, 3)
    if pad > 0:
        padded = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        dy = jax.random.randint(k_y, (n,), 0, 2 * pad + 1)
        dx = jax.random.randint(k_x, (n,), 0, 2 * pad + 1)
        x = jax.vmap(lambda img, a, b: jax.lax.dynamic_slice(img, (a, b, 0), (h, w, c)))(padded, dy, dx)
    if flip:
        mirror = jax.random.bernoulli(k_f, 0.5, (n,))
        x = jnp.where(mirror[:, None, None, None], x[:, :, ::-1, :], x)
    return x


def augment(key, x, *, pad: int = 4, flip: bool = True):
    """Random crop with zero padding and random horizontal flip of an NHWC batch (main paper Fig. 3).

    Args:
      key: a ``jax.random`` key.
      x: images ``(N, H, W, C)``.
      pad: pixels of zero padding on each side before cropping back to ``H x W`` (offsets
        uniform in ``0..2*pad`` along each axis); 0 disables cropping.
      flip: mirror each image left-right with probability 1/2.

    Returns an array of the shape and dtype of ``x``. Jitted (``pad`` and ``flip`` static).
    """
    if getattr(x, "ndim", None) != 4:
        raise ValueError(f"augment expects an NHWC batch (N, H, W, C), got shape {getattr(x, 'shape', None)}; "
                         "for 1-D signals (N, length, channels) use augment_1d.")
    _check_int("pad", pad)
    return _augment(key, jnp.asarray(x), pad, bool(flip))


@partial(jax.jit, static_argnames=("max_shift", "mode"))
def _augment_1d(key, x, max_shift, mode):
    n, length, c = x.shape
    shift = jax.random.randint(key, (n,), 0, 2 * max_shift + 1)
    padded = jnp.pad(x, ((0, 0), (max_shift, max_shift), (0, 0)), mode="wrap" if mode == "wrap" else "constant")
    return jax.vmap(lambda s, a: jax.lax.dynamic_slice(s, (a, 0), (length, c)))(padded, shift)


def augment_1d(key, x, *, max_shift: int = 4, mode: str = "wrap"):
    """Random shift of 1-D signals ``(N, length, channels)`` by ``-max_shift..max_shift`` steps.

    ``mode="wrap"`` shifts circularly (like MNIST-1D's own generative translation);
    ``mode="zeros"`` shifts in zeros. Jitted (``max_shift`` and ``mode`` static).
    """
    if getattr(x, "ndim", None) != 3:
        raise ValueError(f"augment_1d expects signals shaped (N, length, channels), got shape "
                         f"{getattr(x, 'shape', None)}; for NHWC images use augment.")
    _check_int("max_shift", max_shift)
    if mode not in ("wrap", "zeros"):
        raise ValueError(f"mode must be 'wrap' or 'zeros', got {mode!r}.")
    if max_shift >= x.shape[1] and mode == "zeros":
        raise ValueError(f"max_shift={max_shift} would shift whole signals of length {x.shape[1]} out of view.")
    return _augment_1d(key, jnp.asarray(x), max_shift, mode)


__all__ = ["augment", "augment_1d"]
