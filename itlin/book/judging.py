"""A record's claims judged as one family: the experiment's verdicts on it, its planned
(confirmatory) claim marked, and Holm's correction over all of them.

:func:`judge` is what chapters call (through :mod:`itlin.book.render`, which re-exports it) and
what :mod:`itlin.book.recheck` re-judges a record with; it lives apart from both so that neither
imports the other.
"""

from __future__ import annotations

from . import experiments as _experiments
from . import verdicts as V
from .plans import mark


def experiment_of(record_or_name) -> _experiments.Experiment:
    """The registered experiment of a record, a name or an experiment."""
    name = record_or_name if isinstance(record_or_name, (str, _experiments.Experiment)) else record_or_name.experiment
    return _experiments.get(name)


def judge(*records) -> V.Verdicts:
    """The claims of one or more records as one family: Holm's correction over all their tests
    (:func:`itlin.book.verdicts.holm`), picked by id: ``judge(rec)["full.large_close"]``. Most
    chapters call it once per record; a few pass the records of their default settings together."""
    out = []
    for rec in records:
        out += mark(rec, experiment_of(rec).verdicts(rec))
    return V.holm(out)


__all__ = ["experiment_of", "judge"]
