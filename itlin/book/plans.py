"""Confirmatory records: the recorded runs whose settings, seeds and one claim were fixed in a
commit before any of their runs (a pre-registration), and which claims are therefore
confirmatory. Every other verdict of the book is exploratory.

:data:`CONFIRMATORY` lists them by folder of ``book/recorded``, each declared by the experiment
that makes the record (``Experiment(..., plans=...)``); ``tests/test_findings.py`` checks
each plan against the git history (its commit precedes the commit that brought the record's first
runs, or, where ``verifiable`` is ``False``, plan and runs arrived in one commit, so the history
cannot show that the plan came first). :func:`mark` flags the planned claim among a record's
verdicts, so that claims tables say which rows are confirmatory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, NamedTuple, Optional, Sequence, Union

from .registry import Declared


class Plan(NamedTuple):
    """A confirmatory record's plan: the ``commit`` that fixed its settings, seeds and one
    ``claim`` before its runs, whether the history shows that (``verifiable``), and, for a
    record made in parts, the planned ``seeds`` (nothing of it is read until every one is in): a
    range, or for a record pooled over a list-valued parameter ``over`` (its parts each made for
    one value of it, e.g. one rung of the ladder), each value's range."""

    commit: str
    claim: str
    verifiable: bool
    seeds: Optional[Union[range, Mapping[str, range]]] = None
    over: str = ""


#: the confirmatory records kept with the book, by folder of ``book/recorded``: a read-only view of
#: what each experiment declares (``Experiment(..., plans={folder: Plan(...)})``)
CONFIRMATORY = Declared("plans", merged=True)


def plan_of(record) -> Optional[Plan]:
    """The plan of ``record`` (a record kept with the book, or a pool of its parts, whose path
    is the record's folder), or ``None`` for an exploratory record or a live run.

    >>> plan_of("ortiz_eigenfunctions-mnist1d-mlp-sgd-fresh-3492seeds").claim
    'linear_advantage.mlp.sgd'
    >>> plan_of("fig2_k_sweep-mnist1d-10seeds") is None
    True
    """
    name = record if isinstance(record, str) else getattr(getattr(record, "path", None), "name", None)
    return CONFIRMATORY.get(name) if name else None


def mark(record, verdicts: Sequence) -> list:
    """``verdicts`` with the record's planned claim flagged ``confirmatory`` (the others as they are)."""
    plan = plan_of(record)
    return [replace(v, confirmatory=True) if plan is not None and v.id == plan.claim else v for v in verdicts]


def kind_of_test(record, claim: str) -> str:
    """Whether ``claim`` on ``record`` is a confirmatory test (with the commit that fixed it, and
    whether that can be checked from the history) or exploratory.

    >>> kind_of_test("fig2_k_sweep-mnist1d-10seeds", "full.inf_short")
    'exploratory'
    >>> kind_of_test("feature_updates-fashion-256-mini-u2-fresh-504seeds", "mini.u2")
    'confirmatory (fixed in 8c39da3, before its runs)'
    """
    plan = plan_of(record)
    if plan is None:
        return "exploratory"
    if plan.claim != claim:
        return f"exploratory (the record is confirmatory for `{plan.claim}`)"
    if plan.verifiable:
        return f"confirmatory (fixed in {plan.commit}, before its runs)"
    return f"confirmatory, **not verifiably fixed in advance** (plan and runs in one commit, {plan.commit})"


__all__ = ["CONFIRMATORY", "Plan", "kind_of_test", "mark", "plan_of"]
