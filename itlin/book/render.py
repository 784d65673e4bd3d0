"""Markdown for any experiment: its settings table, its summary table and its claims.

Chapters call these on a record; no experiment module builds Markdown of its own::

    rec = runner.run("fig2_k_sweep", runner.params_from("fig2_k_sweep", globals()))
    display(Markdown(render.settings(rec)))     # every labelled parameter, beside the paper's
    display(Markdown(render.summary(rec)))      # the experiment's summary rows
    verdicts = render.judge(rec)                # its claims, Holm-corrected, picked by id
    display(Markdown(render.claims(verdicts)))

Values are formatted by :func:`fmt_value` (``∞`` for infinite periods, ``all`` for "the whole
split", thousands separators, lists joined by commas); strings pass through as they are.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from . import experiments as _experiments
from . import verdicts as V
from .labels import fmt_value


def _experiment(record_or_name):
    name = record_or_name if isinstance(record_or_name, (str, _experiments.Experiment)) else record_or_name.experiment
    return _experiments.get(name)


def _cell(v) -> str:
    return fmt_value(v).replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Mapping[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    """A Markdown table of dict rows (the columns: ``columns``, else every key in order of
    first appearance).

    >>> print(table([{"K": 1, "test": "81.0%"}, {"K": float("inf"), "test": "60.2%"}]))
    | K | test |
    | --- | --- |
    | 1 | 81.0% |
    | ∞ | 60.2% |
    """
    if columns is None:
        columns = []
        for r in rows:
            columns += [k for k in r if k not in columns]
    if not columns:
        raise ValueError("a table needs at least one column.")
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def settings(record, params: Optional[Mapping] = None, *, extra: Iterable = ()) -> str:
    """The settings table of a record (or of an experiment name with ``params``, before it
    runs): every labelled parameter and derived setting, this run's value beside the paper
    column and its source. ``extra``: more ``(label, this run, paper, source)`` rows."""
    exp = _experiment(record)
    rows = exp.settings(None if isinstance(record, (str, _experiments.Experiment)) else record, params)
    rows = list(rows) + list(extra)
    if not rows:
        raise ValueError(f"experiment {exp.name!r} labels none of its parameters: nothing to show.")
    return table([{"setting": w, "this run": a, 'scale="paper"': b, "paper-scale source": src or "—"}
                  for w, a, b, src in rows])


def summary(record, columns: Optional[Sequence[str]] = None) -> str:
    """The experiment's summary table for ``record`` (its ``summary(record)`` rows)."""
    exp = _experiment(record)
    if exp.summary is None:
        raise ValueError(f"experiment {exp.name!r} has no summary.")
    return table(exp.summary(record), columns)


def judge(*records) -> V.Verdicts:
    """The claims of one or more records (a chapter's), with Holm's correction over all their
    tests (:func:`itlin.book.verdicts.holm`), picked by id: ``judge(rec)["full.large_close"]``."""
    out = []
    for rec in records:
        out += list(_experiment(rec).verdicts(rec))
    return V.holm(out)


_WORDS = {V.HOLDS: "holds", V.FAILS: "**does not hold**", V.UNRESOLVED: "*cannot resolve*"}


def resolvable(v: V.Verdict) -> str:
    """The smallest gap a verdict resolves, as shown in its table (``—`` when it is not a test)."""
    half = v.half
    if half is None or math.isnan(half):
        return "—"
    if math.isinf(half):
        return "∞ (one seed)"
    return f"{v.scale * half:.{v.digits}f} {v.unit}".rstrip()


def measured(v: V.Verdict) -> str:
    """What a verdict measured: its description, the gap at its level, and its detail."""
    parts = [p for p in (v.measured, ("gap " + v.gap_text()) if v.gap is not None else "") if p]
    text = ": ".join(parts)
    if v.dropped:
        text += f" ({v.dropped} seed(s) left out: a run diverged)"
    if v.detail:
        text += f" ({v.detail})"
    return text


def claims(verdicts: Sequence[V.Verdict], *, bottom_line: bool = True) -> str:
    """The claims table (claim, the paper, ours, the gap it resolves, verdict), headline
    claims in bold, then a one-sentence bottom line."""
    rows = [{"claim": f"**{v.claim}**" if v.headline else v.claim, "paper": v.paper, "ours": measured(v),
             "resolves gaps of": resolvable(v), "verdict": _WORDS[v.verdict]} for v in verdicts]
    text = table(rows, ["claim", "paper", "ours", "resolves gaps of", "verdict"])
    return text + ("\n\n" + V.bottom_line(list(verdicts)) if bottom_line else "")


def what_it_would_take(verdicts: Sequence[V.Verdict], seconds_per_seed: Optional[float] = None,
                       device: str = "this machine") -> str:
    """For each unresolved test: the seeds it has, the seeds that would resolve it if the gap and
    the spread stayed as measured (:func:`itlin.book.verdicts.seeds_needed`), and, given
    ``seconds_per_seed`` (one seed of every setting the claim needs, on ``device``), the hours
    those seeds would cost. Empty string when every test resolves."""
    rows = []
    for v in verdicts:
        if not v.tested or v.resolved:
            continue
        n = V.seeds_needed(v)
        need = "no number of seeds (the gap sits on the threshold, or the test set is too small)" if n is None \
            else f"{n:,}"
        row = {"claim": v.claim, "seeds now": v.gap.n, "seeds that would resolve it": need}
        if seconds_per_seed is not None:
            row[f"hours on {device}"] = "—" if n is None else f"{n * seconds_per_seed / 3600:.2g}"
        rows.append(row)
    return table(rows) if rows else ""


def correction_note(verdicts: Sequence[V.Verdict]) -> str:
    """The sentence a chapter says once: how many tests its Holm correction covers."""
    m = sum(v.tested for v in verdicts)
    return (f"Verdicts are corrected for multiplicity: Holm's step-down procedure over the {m} tested claims "
            f"of this chapter keeps the chance of any false verdict among them at {100 * (1 - V.LEVEL):.0f}%, "
            "so each claim is judged at its own, stricter level, and the \"resolves gaps of\" column gives "
            "the half-width of the interval at that level.")


__all__ = ["claims", "correction_note", "judge", "measured", "resolvable", "settings",
           "summary", "table", "what_it_would_take"]
