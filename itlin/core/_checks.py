"""Input validation with messages that say what to fix (no public API)."""

from __future__ import annotations

import math
import numbers

import jax
import numpy as np


def check_positive(name: str, value, *, allow_zero: bool = False):
    """Raise ValueError unless ``value`` is a finite real number > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    if allow_zero and v < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}; pass 0 for no {name}.")
    if not allow_zero and v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}.")
    return v


def check_scalar(name: str, value, *, allow_zero: bool = False):
    """:func:`check_positive` for a value that may also be a NumPy or JAX scalar, or traced.

    A concrete value (a Python, NumPy or JAX number, 0-d arrays included) is checked, with a
    one-line error; a traced one (inside ``jit`` or ``vmap``) cannot be and passes unchecked.
    Returns ``value`` unchanged, so what is computed never depends on which it was.
    """
    if isinstance(value, jax.core.Tracer):
        return value
    try:
        arr = None if isinstance(value, (str, bytes)) else np.asarray(value)
    except Exception:  # noqa: BLE001 - anything that is not array-like is reported below
        arr = None
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in "iuf":
        what = f"an array of shape {arr.shape}" if arr is not None and arr.ndim else f"{value!r}"
        raise TypeError(f"{name} must be a real number (a scalar), got {what}.")
    check_positive(name, arr.item(), allow_zero=allow_zero)
    return value


def check_positive_int(name: str, value, *, none_means: str = ""):
    """``value`` as an ``int``; a one-line ValueError naming ``name`` unless it is an integer
    >= 1 (``numpy`` integers included; not a bool, not a float). The one positive-integer check
    of the package (core, research support and book). ``none_means``: what ``None`` stands for,
    where the caller accepts it (the caller handles ``None`` itself)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        extra = f", or None for {none_means}" if none_means else ""
        raise ValueError(f"{name} must be a positive integer (>= 1){extra}, got {value!r}.")
    return int(value)


def check_finite_array(name: str, x):
    """Raise ValueError if the (host or device) array has NaN or Inf entries (traced: unchecked)."""
    if isinstance(x, jax.core.Tracer):
        return
    arr = np.asarray(x)
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or Inf); clean the data first.")


def check_same_leading(name_a: str, a, name_b: str, b):
    if np.shape(a)[0] != np.shape(b)[0]:
        raise ValueError(
            f"{name_a} has {np.shape(a)[0]} examples but {name_b} has {np.shape(b)[0]}; "
            "they must have the same length along axis 0."
        )


def check_steps(name: str, value, *, allow_zero: bool = False) -> int:
    """A number of steps as an ``int``: an integer (a whole float such as ``1e3`` too) >= 1, or
    >= 0 with ``allow_zero``; a one-line ValueError/TypeError naming ``name`` otherwise."""
    low = 0 if allow_zero else 1
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and not isinstance(value, jax.core.Tracer):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be an integer >= {low}, got {value!r} ({type(value).__name__}).")
    if not isinstance(value, numbers.Integral):
        if not (math.isfinite(value) and value == int(value)):
            raise ValueError(f"{name} must be a whole number of steps (an integer >= {low}), got {value!r}.")
    if int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
    return int(value)


def check_seed(name: str, value) -> int:
    """A seed: an integer in ``0 .. 2**32 - 1``; a one-line error naming ``name`` otherwise."""
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and not isinstance(value, jax.core.Tracer):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer from 0 to 2**32 - 1, got {value!r}.")
    if not 0 <= int(value) < 2 ** 32:
        raise ValueError(f"{name} must be an integer from 0 to 2**32 - 1, got {value!r}.")
    return int(value)


def check_nonempty(name: str, x):
    """Raise ValueError if the array has no examples (leading axis of length 0, or no axis)."""
    shape = np.shape(x)
    if len(shape) == 0:
        raise ValueError(f"{name} must be an array with one example per row, got a scalar.")
    if shape[0] == 0:
        raise ValueError(f"{name} has no examples (shape {tuple(shape)}); give at least one.")


def output_shape(apply, params, x, what: str = "x"):
    """The shape of ``apply(params, x)`` (abstract: no computation), with a one-line error when
    the model cannot take ``x`` (e.g. a wrong feature dimension)."""
    try:
        out = jax.eval_shape(apply, params, x)
    except (TypeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"the model cannot be applied to {what} of shape {tuple(np.shape(x))} ({first[:200]}); "
                         f"check that {what}'s feature dimension matches the model's parameters.") from None
    return tuple(getattr(out, "shape", ()))


def check_float_dtype(name: str, tree, what: str):
    """Refuse half-precision floating leaves where LAPACK is needed (eigh, Cholesky)."""
    for leaf in jax.tree_util.tree_leaves(tree):
        dt = np.dtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)
        if dt in (np.dtype(np.float16), np.dtype(jax.numpy.bfloat16)):
            raise TypeError(f"{what} needs float32 or float64 {name}, got {dt} (LAPACK has no {dt} solver); cast with "
                            ".astype(jnp.float32).")


def _dtype_of(leaf):
    return np.dtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)


def check_real_dtype(name: str, tree, what: str):
    """Refuse leaves that are not real numbers (complex, bool, strings, objects): a one-line
    TypeError naming ``name`` and the fix. Integers pass (the caller casts them)."""
    for leaf in jax.tree_util.tree_leaves(tree):
        dt = _dtype_of(leaf)
        if dt.kind not in "iuf" and dt != np.dtype(jax.numpy.bfloat16):
            fix = "take the real part or split it into two real features" if dt.kind == "c" else \
                "cast with .astype(jnp.float32)"
            raise TypeError(f"{what} needs real {name}, got dtype {dt}; {fix}.")


def check_float_params(name: str, tree, what: str):
    """Parameters to differentiate must be float32 or float64 (not integer, complex, bool, or half
    precision where LAPACK is needed): a one-line TypeError naming ``name`` and the fix."""
    for leaf in jax.tree_util.tree_leaves(tree):
        dt = _dtype_of(leaf)
        if dt.kind != "f" and dt != np.dtype(jax.numpy.bfloat16):
            fix = "complex parameters are not supported: split them into real and imaginary parts" if dt.kind == "c" \
                else "cast with jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), params)"
            raise TypeError(f"{what} needs floating-point {name} (it differentiates them), got dtype {dt}; {fix}.")
