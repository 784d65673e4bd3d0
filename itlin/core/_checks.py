"""Input validation with messages that say what to fix (no public API)."""

from __future__ import annotations

import math
import numbers

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


def check_positive_int(name: str, value, *, none_means: str = ""):
    """Raise unless ``value`` is an integer >= 1 (``numpy`` integers included; not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        extra = f", or None for {none_means}" if none_means else ""
        raise ValueError(f"{name} must be a positive integer{extra}, got {value!r}.")
    return int(value)


def check_finite_array(name: str, x):
    """Raise ValueError if the (host or device) array has NaN or Inf entries."""
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
