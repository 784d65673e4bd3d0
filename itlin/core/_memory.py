"""Sizes checked before allocation (no public API): what a run's traces and outputs need, against
the memory there is, so that a run too large is a one-line error before any work, not an
allocation failure (or an abort inside XLA) after it.

The memory there is: ``$ITLIN_MEMORY_LIMIT`` when set (bytes, e.g. ``8e9`` or ``8G``; ``inf``
turns the checks off), else a device's own limit (``memory_stats()["bytes_limit"]`` on a GPU or
TPU) for what lives on it, else the machine's physical memory (``os.sysconf``). Only what
surely cannot fit is refused: the estimates are lower bounds (a run's other buffers come on top)
and the limits are the whole memory, not what is free now.
"""

from __future__ import annotations

import functools
import math
import os
import re
from typing import Optional

import jax

#: the environment variable that overrides the memory the checks compare with
ENV = "ITLIN_MEMORY_LIMIT"
_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def _from_env() -> Optional[float]:
    """``$ITLIN_MEMORY_LIMIT`` in bytes (``inf``: no limit), or None when it is not set."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    m = re.fullmatch(r"(?i)(inf|\d+(?:\.\d*)?(?:e\d+)?)\s*([kmgt]?)b?", text)
    if m is None:
        raise ValueError(f"{ENV}={text!r} is not a number of bytes; give e.g. 8e9 or 8G (or inf for no check).")
    return float(m.group(1)) * _SUFFIX[m.group(2).lower()]


@functools.lru_cache(maxsize=1)
def _physical() -> Optional[float]:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): no check
        return None


def limit(device=None) -> tuple:
    """``(bytes, where)``: the memory a device (``None``: the host) has, and where the number came
    from; ``bytes`` is None when nothing says (then nothing is refused)."""
    env = _from_env()
    if env is not None:
        return env, f"{ENV}"
    if device is not None:
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - a backend without memory statistics
            stats = None
        if stats and stats.get("bytes_limit"):
            return float(stats["bytes_limit"]), f"the memory of {device.platform.upper()} {device.id}"
    return _physical(), "this machine's memory"


def size(nbytes: float) -> str:
    """``"4.0 TB"``: a number of bytes as a reader would write it."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


def check(what: str, nbytes: float, fix, device=None) -> None:
    """Raise a one-line ValueError when ``what`` needs ``nbytes`` on ``device`` (``None``: host
    memory) and that is more than there is; ``fix(bytes there are)`` says how to make it fit."""
    have, where = limit(device)
    if have is None or not math.isfinite(have) or nbytes <= have:
        return
    raise ValueError(f"{what} needs at least {size(nbytes)}, more than the {size(have)} of {where}; {fix(have)} "
                     f"(set {ENV} to change the limit, inf for no check).")


def default_device(tree=None):
    """The device the arrays of ``tree`` live on (the first found), else JAX's default device."""
    for leaf in jax.tree_util.tree_leaves(tree):
        devices = getattr(leaf, "devices", None)
        if callable(devices) and not isinstance(leaf, jax.core.Tracer):
            try:
                return next(iter(devices()))
            except Exception:  # noqa: BLE001 - a deleted or abstract array
                break
    return jax.local_devices()[0]
