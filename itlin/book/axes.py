"""The names of the axes an experiment stacks itself, for its record files.

A training run's arrays are stacked over the settings in its tag (``K``, ``seed``, ``n``, ...) by
:mod:`itlin.book.opendata`, which knows those dimensions' names. Some experiments also stack
arrays themselves: Arbel et al.'s ablations over step sizes and seeds, the Fig. 9 damping sweep,
Ortiz et al.'s eigenfunction targets. Each names those axes in its own module
(``Experiment(..., axes=...)``), which :data:`AXES` views by experiment: each entry is an
``fnmatch`` pattern over the result key (as a record file's ``key`` attribute shows it, settings
as ``{K}``) and the names of the array's own axes, in order. The first matching entry wins. An array no entry names keeps generic names (``<variable>_dim<i>``).

A name must differ from the record's settings and variables; one name has one length in a
file (else the file tells the lengths apart, ``name_<length>``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Optional

from .registry import Declared

#: the last axis of per-example results kept as ``numpy.packbits`` bytes
PACKED = "packed_examples"
#: experiment -> its ``axes`` declaration (:class:`itlin.book.study.Experiment`), a read-only view
AXES = Declared("axes")


def names(experiment: str, key: str, rank: int) -> Optional[tuple]:
    """The names :data:`AXES` gives the ``rank`` own axes of ``experiment``'s result ``key``
    (``None`` when no entry matches); raises ``ValueError`` when an entry matches with another
    number of names (the declaration is out of date with the experiment). A scalar has none to name."""
    if rank == 0:
        return None
    for pattern, axis_names in AXES.get(experiment, ()):
        if fnmatchcase(key, pattern):
            if len(axis_names) != rank:
                raise ValueError(f"the axes {experiment} declares name {len(axis_names)} axes of {key!r} "
                                 f"({pattern!r}), which has {rank}; update its axes declaration.")
            return tuple(axis_names)
    return None


__all__ = ["AXES", "PACKED", "names"]
