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


def check_period(name: str, value):
    """A relinearisation period: an integer >= 1, or infinity (never relinearise)."""
    if isinstance(value, str) and value.strip().lower() in {"inf", "infinity", "none", "never"}:
        return math.inf
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be an integer >= 1 or math.inf (never relinearise), got {value!r}."
        )
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return math.inf
    if isinstance(value, float) and math.isnan(value):
        raise ValueError(f"{name} must be an integer >= 1 or math.inf, got nan.")
    if float(value) != int(value):
        raise ValueError(
            f"{name} must be a whole number of steps, got {value!r}; "
            f"use an integer such as {max(1, round(float(value)))} (or math.inf for K=infinity)."
        )
    if int(value) < 1:
        raise ValueError(
            f"{name} must be >= 1 (K=1 is plain gradient descent), got {value!r}; "
            "use math.inf for a model that is never relinearised."
        )
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
