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

import dataclasses
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from . import experiments as _experiments
from . import verdicts as V
from .judging import experiment_of as _experiment
from .judging import judge  # noqa: F401  (chapters call render.judge)
from .labels import fmt_value


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


def record_command(record) -> str:
    """The command that makes ``record`` again: ``python benchmarks/record.py <experiment> '<JSON>'
    --results results``, with the parameters it was given that differ from their defaults."""
    import json

    exp = _experiment(record)
    defaults = {f.name: f.default for f in dataclasses.fields(exp.params)}
    given = {k: v for k, v in record.params.items() if k in defaults and v is not None and v != defaults[k]
             and not (isinstance(v, list) and tuple(v) == defaults[k])}
    return f"python benchmarks/record.py {exp.name} '{json.dumps(given)}' --results results"


def _seed_span(r: Mapping) -> str:
    first, n = int(r["seed"]), int(r["seeds"])
    return f"seed {first}" if n == 1 else f"seeds {first}-{first + n - 1}"


def cost(info: Mapping) -> str:
    """How long a record took, as a chapter says it: ``"in 1.2 hours"``, ``"in 16 minutes"``,
    ``"in 2.5 hours over 3 sittings"`` for a record resumed from its checkpoints (its
    ``wall_seconds`` counts every sitting), or ``"over several sittings, resumed from its
    checkpoints"`` for one whose count of sittings is not known (records made before the runner
    kept one count only their last sitting).

    >>> cost({"wall_seconds": 960.0, "started_at": "a", "first_started_at": "a"})
    'in 16 minutes'
    >>> cost({"wall_seconds": 9000.0, "sittings": 3, "started_at": "b", "first_started_at": "a"})
    'in 2.5 hours over 3 sittings'
    >>> cost({"wall_seconds": 960.0, "started_at": "b", "first_started_at": "a"})
    'over several sittings, resumed from its checkpoints'
    """
    sittings = int(info.get("sittings", 1))
    if not _clock_known(info):
        return "over several sittings, resumed from its checkpoints"
    hours = info.get("wall_seconds", math.nan) / 3600
    minutes = max(1, round(60 * hours))
    return "in " + (f"{hours:.1f} hours" if hours >= 1 else f"{minutes} minute{'s' if minutes > 1 else ''}") + \
        (f" over {sittings} sittings" if sittings > 1 else "")


def _clock_known(info: Mapping) -> bool:
    """Whether ``wall_seconds`` covers the whole run: false for a record resumed before the runner
    counted every sitting (it kept the last one's seconds only)."""
    return "sittings" in info or info.get("first_started_at", info.get("started_at")) == info.get("started_at")


def seconds_per_seed(rec) -> Optional[float]:
    """Wall-clock seconds of one seed of ``rec`` (its ``wall_seconds`` over its seeds), or ``None``
    when its wall time is not known in full (see :func:`cost`) or was spent on several machines
    (a record pooled from parts made on more than one: :func:`itlin.book.runner.pooled_record`):
    what a chapter prices more seeds with (:func:`what_it_would_take`)."""
    if not _clock_known(rec.info) or int(rec.info.get("machines", 1)) > 1:
        return None
    return rec.info["wall_seconds"] / int(rec.meta["resolved"]["seeds"])


def machine(info: Mapping) -> str:
    """The device a record ran on, and its processor where the record names it (records made
    since 2026-11-27: :func:`itlin.book.runner.processor`)."""
    return info.get("device", "?") + (f", processor {info['processor']}" if info.get("processor") else "")


def _commit(info: Mapping) -> str:
    """The commit a record was made at, short, and whether the tree had uncommitted changes."""
    return (info.get("git_commit") or "?")[:7] + (" (uncommitted changes)" if info.get("git_dirty") else "")


def provenance(rec) -> str:
    """One line on where and how a record was made: :func:`machine`, JAX version, commit and :func:`cost`."""
    info = rec.info
    return f"recorded on {machine(info)} with JAX {info.get('jax_version', '?')} at commit {_commit(info)}, {cost(info)}"


def parts_provenance(parts) -> list:
    """:func:`provenance` for a record made in many parts, one line per way they were made
    (machine, JAX version, commit) rather than one per part: how many parts and seeds, the seeds'
    span, and the time a part took.

    >>> from types import SimpleNamespace as NS
    >>> part = lambda seed, s, **kw: NS(meta={"resolved": {"seed": seed, "seeds": 8}}, info={
    ...     "device": "cpu", "jax_version": "0.10.2", "git_commit": "78ce98f0", "wall_seconds": s, **kw})
    >>> parts_provenance([part(0, 420.0), part(8, 900.0, sittings=2), part(16, 600.0)])
    ['3 parts (24 seeds, 0-23) recorded on cpu with JAX 0.10.2 at commit 78ce98f: 7 to 15 minutes a part, 0.5 hours in all (1 resumed from its checkpoint)']
    >>> parts_provenance([part(0, 420.0), part(8, 400.0)])[0].split(': ')[1]
    '7 minutes a part, 0.2 hours in all'
    >>> parts_provenance([part(0, 420.0)])
    ['1 part (8 seeds, 0-7) recorded on cpu with JAX 0.10.2 at commit 78ce98f, in 7 minutes']
    """
    groups = {}
    for p in parts:
        groups.setdefault((machine(p.info), p.info.get("jax_version", "?"), _commit(p.info)), []).append(p)
    lines = []
    for (where, jax_version, commit), group in groups.items():
        seeds = sorted({s for p in group for s in range(int(p.meta["resolved"]["seed"]),
                                                         int(p.meta["resolved"]["seed"]) + int(p.meta["resolved"]["seeds"]))})
        span = f"{seeds[0]}-{seeds[-1]}" if seeds[-1] - seeds[0] + 1 == len(seeds) else f"between {seeds[0]} and {seeds[-1]}"
        head = (f"{len(group)} part{'s' if len(group) > 1 else ''} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}, "
                f"{span}) recorded on {where} with JAX {jax_version} at commit {commit}")
        if len(group) == 1:
            lines.append(f"{head}, {cost(group[0].info)}")
            continue
        timed = [p.info["wall_seconds"] for p in group if _clock_known(p.info) and "wall_seconds" in p.info]
        resumed = sum(int(p.info.get("sittings", 1)) > 1 for p in group)
        untimed = len(group) - len(timed)
        lo, hi = (max(1, round(s / 60)) for s in (min(timed, default=0), max(timed, default=0)))
        when = (f": {lo if lo == hi else f'{lo} to {hi}'} minutes a part, {sum(timed) / 3600:.1f} hours in all"
                if timed else ": not timed")
        notes = ([f"{resumed} resumed from {'its checkpoint' if resumed == 1 else 'their checkpoints'}"] if resumed else []) + \
            ([f"{untimed} over several sittings, not counted"] if untimed and timed else [])
        lines.append(head + when + (f" ({'; '.join(notes)})" if notes else ""))
    return lines


def evidence(rec, use_record: bool = True):
    """``(judged, note)``: the record a chapter judges and shows for its live run ``rec``, and a
    Markdown paragraph that says which and why.

    With ``use_record`` and a recorded run kept with the book that repeats ``rec``'s settings
    with more seeds (:func:`itlin.book.runner.matching_record`, chosen on parameters alone),
    ``judged`` is that record and the note names it, says how to make it again, and says whether
    the seeds this page re-ran reproduce its findings (:func:`itlin.book.recheck.recheck`): how
    many of its verdicts are unchanged when this page's seeds replace the record's, the largest
    per-seed change of a claim's gap in units of the spread between seeds, and whether the arrays
    are bit-identical (where not: what differs between the machines, and how far the arrays,
    the per-example results and the runs' divergence differ). Otherwise ``judged`` is ``rec``
    itself."""
    from . import recheck, runner

    r = rec.meta.get("resolved", {})
    other = runner.matching_record(rec) if use_record else None
    if other is None:
        why = ("`use_record=False`" if not use_record else
               "no recorded run repeats these settings with more seeds")
        n = r.get("seeds")
        seeds = "" if n is None else f"{n} seed{'s' if n != 1 else ''}; "
        return rec, f"**Judged on this page's run** ({seeds}{why})."
    o, info = other.meta["resolved"], other.info
    check = recheck.recheck(rec, other)
    commit = (info.get("git_commit") or "?")[:7]
    return other, (
        f"**Judged on a recorded run.** The verdicts, tables and figures below are those of the recorded run "
        f"`{other.path.name}`: this experiment at this page's settings with {o['seeds']} seeds "
        f"({_seed_span(o)}), made on {machine(info)} at commit {commit} {cost(info)}. "
        f"This page re-ran its {_seed_span(r)} ({rec.info.get('wall_seconds', 0):.0f} s). {_agreement(check)} "
        f"To judge this page's own run instead, set `use_record=False`; to make the record again: "
        f"`{record_command(other)}`.")


def _agreement(check) -> str:
    """The sentences of :func:`evidence` on whether the page's seeds reproduce the record's
    findings (a :class:`itlin.book.recheck.Recheck`)."""
    words = {V.HOLDS: "holds", V.FAILS: "does not hold", V.UNRESOLVED: "cannot resolve"}
    seeds = "seed replaces" if check.seeds == 1 else "seeds replace"
    text = f"**{check.agreement()}** when this page's {seeds} the record's"
    if check.changed:
        text += " (" + "; ".join(f"`{c.id}`: {words[c.before]} → {words[c.after]}" for c in check.changed) + ")"
    if math.isfinite(check.per_seed):
        text += (f"; a re-run seed moves a claim's measured gap by at most {check.per_seed:.2g} standard deviations "
                 f"between seeds (`{check.per_seed_claim}`)")
    text += "."
    cmp = check.comparison
    if cmp.identical:
        return text + f" Its arrays are bit-identical to the record's ({cmp.arrays:,} compared)."
    if not cmp.arrays and not cmp.packed:
        return text + " No array of the two could be compared seed for seed."
    differs = check.machines_text()
    if differs:
        where = f"the machines differ ({differs}), and XLA's CPU kernels give other last bits, which training makes grow"
    elif not check.named:
        where = ("the record names nothing of its machine but its device" if "processor" not in check.record.info else
                 "this page's run, loaded from results made before runs named their machine, names only its device")
        where += ", so what differs between the machines is not known"
    else:
        named = ", ".join(check.named[:-1]) + " and " + check.named[-1] if len(check.named) > 1 else check.named[0]
        where = (f"of what both name of their machines, {named}, nothing differs: other code, threads or batch "
                 "sizes, or something not recorded")
    parts = []
    if math.isfinite(cmp.max_spread):
        parts.append(f"the largest array difference is {cmp.max_spread:.2g} standard deviations between seeds "
                     f"(`{cmp.spread_key}`)")
    elif cmp.max_abs > 0:
        parts.append(f"arrays differ by up to {cmp.max_abs:.3g}")
    if math.isfinite(cmp.max_flip):
        parts.append(f"at most {100 * cmp.max_flip:.2g}% of the examples change their result (`{cmp.flip_key}`)"
                     if cmp.max_flip > 0 else "no example changes its result")
    if cmp.diverged:
        step = lambda s: "not at all" if s is None else f"at step {s:,}"
        shown = "; ".join(f"{tag} {step(theirs)} in the record, {step(mine)} here"
                          for tag, theirs, mine in cmp.diverged[:3])
        more = f", and {len(cmp.diverged) - 3} more" if len(cmp.diverged) > 3 else ""
        parts.append(f"{len(cmp.diverged)} run{'s' if len(cmp.diverged) != 1 else ''} diverge{'s' if len(cmp.diverged) == 1 else ''} "
                     f"at another step ({shown}{more})")
    if cmp.nonfinite:
        parts.append(f"non-finite entries sit elsewhere in {len(cmp.nonfinite)} array"
                     f"{'s' if len(cmp.nonfinite) != 1 else ''} (a run that diverged at another step)")
    detail = (": " + "; ".join(parts)) if parts else ""
    return text + f" Its arrays are not bit-identical to the record's ({where}){detail}."


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


def verdict_cell(v: V.Verdict) -> str:
    """A claim's verdict as a claims table shows it: its word (:func:`itlin.book.verdicts.word`,
    the Findings' words), with the threshold a reproduced direction falls short of.

    >>> verdict_cell(V.judge("c", "", "", V.Gap(0.012, 0.004, 8, 0.004, 0.0), "exceeds", 0.02))
    '*direction reproduced*, smaller than 2.0 points'
    """
    if V.word(v) == V.DIRECTION:
        return f"*{V.DIRECTION}*, smaller than {_amount(v, v.margin)}"
    return _WORDS[v.verdict]


def claims(verdicts: Sequence[V.Verdict], *, bottom_line: bool = True) -> str:
    """The claims table (claim, the paper, ours, the gap it resolves, the kind of test, verdict),
    headline claims in bold, then a one-sentence bottom line. The test column says
    *confirmatory* for a claim its record was planned to test before its runs
    (:mod:`itlin.book.plans`) and *exploratory* otherwise."""
    rows = [{"claim": f"**{v.claim}**" if v.headline else v.claim, "paper": v.paper, "ours": measured(v),
             "resolves gaps of": resolvable(v), "test": "confirmatory" if v.confirmatory else "exploratory",
             "verdict": verdict_cell(v)} for v in verdicts]
    text = table(rows, ["claim", "paper", "ours", "resolves gaps of", "test", "verdict"])
    return text + ("\n\n" + V.bottom_line(list(verdicts)) if bottom_line else "")


def _amount(v: V.Verdict, x: float) -> str:
    return f"{v.scale * x:.{v.digits}f} {v.unit}".rstrip() if math.isfinite(x) else "—"


def sensitivity(verdicts: Sequence[V.Verdict], margins: Optional[Sequence[float]] = None, *,
                factors: Sequence[float] = (0.5, 1.0, 2.0)) -> str:
    """How each tested verdict depends on its margin: one row per claim with the rule, the verdict
    at each of ``margins`` (default: ``factors`` times the claim's own margin, i.e. half, the
    margin itself and twice it) and, for a one-sided rule, the margins between which it cannot
    resolve (:func:`itlin.book.verdicts.flip_margin`). A reader who reads a paper's adjective
    with another threshold sees where the verdict flips.

    >>> v = V.judge("c", "much faster", "", V.Gap(0.03, 0.005, 8, 0.005, 0.0), "exceeds", 0.02)
    >>> print(sensitivity([v]))
    | claim | rule | at 1.0 points | at 2.0 points | at 4.0 points | cannot resolve between |
    | --- | --- | --- | --- | --- | --- |
    | much faster | superiority (one-sided) | holds | holds | **does not hold** | 2.5 points and 3.5 points |
    """
    tested = [v for v in verdicts if v.tested]
    if not tested:
        raise ValueError("sensitivity needs at least one verdict that is a test of a gap.")
    if margins is None:
        base = tested[0].margin or 0.0
        if base <= 0:
            raise ValueError("a claim judged at a zero margin has no multiples: pass the margins to show.")
        margins = [f * base for f in factors]
    heads = [f"at {_amount(tested[0], m)}" for m in margins]
    rows = []
    for v in tested:
        row = {"claim": v.claim, "rule": V.RULE_WORDS[v.rule]}
        for h, (_, verdict) in zip(heads, V.margin_sensitivity(v, margins)):
            row[h] = _WORDS[verdict]
        lo, hi = V.flip_margin(v)
        row["cannot resolve between"] = ("—" if v.rule == "close" else
                                         f"{_amount(v, lo)} and {_amount(v, hi)}" if math.isfinite(lo) or math.isfinite(hi)
                                         else "no margin >= 0")
        rows.append(row)
    return table(rows)


def what_it_would_take(verdicts: Sequence[V.Verdict], seconds_per_seed: Optional[float] = None,
                       device: str = "this machine", *, of: str = "") -> str:
    """For each unresolved test: the seeds it has, the seeds that would resolve it if the gap and
    the spread stayed as measured (:func:`itlin.book.verdicts.seeds_needed`), and, given
    ``seconds_per_seed`` (one seed of every setting the claim needs, on ``device``), the hours
    those seeds would cost; a sentence saying so when every test resolves (a chapter displays
    the result as it is), naming whose claims they are (``of``, e.g. ``"the step-size record"``)
    where a page shows several such tables."""
    rows = []
    for v in verdicts:
        if not v.tested or v.resolved:
            continue
        n = V.seeds_needed(v)
        need = f"none: {V.no_seeds_reason(v)}" if n is None else f"{n:,}"
        row = {"claim": v.claim, "seeds now": v.gap.n, "seeds that would resolve it": need}
        if seconds_per_seed is not None:
            row[f"hours on {device}"] = "—" if n is None else f"{n * seconds_per_seed / 3600:.2g}"
        rows.append(row)
    where = f"of {of}" if of else "here"
    if not rows:
        return f"Every claim tested {where} resolves: no more seeds are needed to decide them." if any(
            v.tested for v in verdicts) else f"No claim {where} is a test over seeds."
    return (f"The claims {where} that cannot resolve:\n\n" if of else "") + table(rows)


def correction_note(verdicts: Sequence[V.Verdict]) -> str:
    """The sentence said once under a family of verdicts (a chapter's, or a record of other
    settings judged as its own family): how many tests its Holm correction covers."""
    m = sum(v.tested for v in verdicts)
    return (f"Verdicts are corrected for multiplicity: Holm's step-down procedure over the {m} claims tested "
            f"together here keeps the chance of any false verdict among them at {100 * (1 - V.LEVEL):.0f}%, "
            "so each claim is judged at its own, stricter level, and the \"resolves gaps of\" column gives "
            "the half-width of the interval at that level.")


__all__ = ["claims", "correction_note", "cost", "evidence", "judge", "machine", "measured", "parts_provenance", "provenance", "record_command",
           "resolvable", "seconds_per_seed", "verdict_cell", "sensitivity", "settings", "summary", "table", "what_it_would_take"]
