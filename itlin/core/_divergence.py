"""The one divergence test of the library: a loss that is not finite or has blown up.

Used by the one descent loop (``Stop.diverged`` of :class:`itlin.core.gauss_newton.Descent`:
:func:`itlin.gauss_newton_fit` and Arbel et al.'s engine, GN and GD), :func:`itlin.fit`
(``core/loop.py``) and :func:`itlin.metrics.blown_up`. Each keeps its own floor on the reference loss (the
number it was written with), so that no decision changes.
"""

from __future__ import annotations

import numbers

import jax.numpy as jnp
import numpy as np


def diverged(loss, first=None, factor=None, *, floor=None):
    """Whether ``loss`` is not finite or, with ``factor`` given, ``|loss| > factor * max(|first|, floor)``
    (``factor * |first|`` when ``floor`` is None).

    NumPy in, NumPy out (host checks); anything else is computed with ``jax.numpy`` (jittable, a
    traced ``factor`` included). A Python-number ``first`` gives a Python-number limit, so the
    comparison is made in ``loss``'s dtype exactly as a hand-written ``loss > limit`` would be.

    >>> diverged(np.array([1.0, np.inf, 5.0, 50.0]), 1.0, 10.0).tolist()
    [False, True, False, True]
    >>> bool(diverged(jnp.asarray(1e-20), jnp.asarray(0.0), 10.0, floor=1e-30))
    True
    """
    xnp = np if isinstance(loss, (np.ndarray, np.generic)) else jnp
    bad = ~xnp.isfinite(loss)
    if factor is None:
        return bad
    if isinstance(first, numbers.Real):
        ref = abs(first) if floor is None else max(abs(first), floor)
    else:
        ref = xnp.abs(first) if floor is None else xnp.maximum(xnp.abs(first), floor)
    return bad | (xnp.abs(loss) > factor * ref)
