"""The result rows of the headline experiments and the verdicts judged on them.

One row per training run (a setting and a seed) of a record made by :func:`._setup.fit_seeds`: its final
accuracies, feature updates and status (:func:`rows_of`); rows are picked by their fields (:func:`select`)
and a claim on two settings is a gap paired by seed (:func:`gap_verdict`)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from ... import verdicts as V
from ...store import run_status
from ._setup import correct_of

def as_K(value) -> float:
    """A period as stored in a record's meta (``"inf"`` for infinity) back to a number, read by
    :func:`itlin.parse_period` (the one parser of periods and their spellings of infinity)."""
    from ....core.schedules import parse_period

    return float(parse_period(value))


# ------------------------------------------------------------------------------ summaries
def updates(group) -> int:
    """The feature updates of a setting: the most any of its runs (``group``: rows) made, which
    is what a completed run makes (a run that diverged stopped with fewer)."""
    return max(int(r["updates"]) for r in group)


def final(history, key: str) -> float:
    """The last evaluated value of ``key`` (NaN if none)."""
    v = history.eval_array(key)
    return float(v[-1]) if v.size else math.nan


def run_summary(rec, tag: str) -> dict:
    """What a chapter reports about one training run of ``rec``.

    ``test``/``train``: accuracy of the model being trained (the linearised model; for ``K=1``
    it is the network) at the last evaluation; ``test_net``/``train_net``: the network
    ``f(theta_T)`` there; ``updates``: feature updates (Definition 1); ``status``.
    """
    h = rec.history(tag)
    r = rec.runs[tag]
    status, diverged_at = run_status(r)  # an old record's "diverged at step N" as every reader reads it
    return {
        "tag": tag,
        "steps": int(r["steps"]),
        "target_steps": int(r.get("target_steps", r["steps"])),
        "updates": int(r["feature_updates"]),
        "status": status.describe(diverged_at),
        "diverged_at": diverged_at,
        "test": final(h, "test/accuracy_lin"),
        "test_net": final(h, "test/accuracy"),
        "train": final(h, "train/accuracy_lin"),
        "train_net": final(h, "train/accuracy"),
    }


def late_gain(history, key: str = "test/accuracy_lin", fraction: float = 0.2) -> float:
    """How much ``key`` rose over the last ``fraction`` of the run: its final value minus its best
    value over the evaluations before that. Positive when the run was still improving at the
    end (for a large K the best earlier value is the peak of an earlier phase, so the sawtooth
    of relinearisations does not count as a gain)."""
    steps, vals = history.eval_array("step"), history.eval_array(key)
    if vals.size < 2:
        return math.nan
    early = steps <= (1.0 - fraction) * steps[-1]
    if not early.any() or not np.isfinite(vals[-1]):
        return math.nan
    return float(vals[-1] - np.nanmax(vals[early]))


def rows_of(rec) -> list:
    """One row per training run of a headline record: :func:`run_summary` plus the run's
    recorded settings (``setting``, ``seed``, ``K``, ...). Records made before seeds were runs
    of their own count as seed ``params["seed"]``."""
    out = []
    for name, info in rec.meta["runs"].items():
        row = run_summary(rec, name)
        row.update({k: v for k, v in info.items() if k not in row})
        row["K"] = as_K(info["K"])
        if "final_test" in info:  # measured on the large test set (see prepare)
            row["test"], row["test_net"] = float(info["final_test"]), float(info["final_test_net"])
            row.pop("final_correct", None)
            row["correct"], row["tallies"] = correct_of(info), rec.tallies
        row.setdefault("seed", int(rec.params.get("seed", 0)))
        row.setdefault("setting", name)
        out.append(row)
    return out


def select(rows: Sequence[Mapping], **match) -> list:
    """The rows whose fields equal ``match`` (periods compared as numbers)."""
    def same(a, b):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return a == b

    return [r for r in rows if all(k in r and same(r[k], v) for k, v in match.items())]


def gap_verdict(id: str, claim: str, paper: str, rows_a: Sequence[Mapping], rows_b: Sequence[Mapping], *,
                n_test: int, rule: str, margin: float, label_a: str, label_b: str, metric: str = "test",
                headline: bool = False) -> V.Verdict:
    """The verdict on the gap ``a - b`` of ``metric`` (an accuracy), paired by seed over the seeds where both
    settings completed: ``rule="close"`` (within ``margin``) or ``"exceeds"`` (``a`` above ``b`` by more
    than ``margin``). The test set's noise is the paired one when both sides stored which examples they
    classify right (``row["correct"]``, or counted over these seeds in ``row["tallies"]``), else the
    unpaired bound from ``n_test``. A seed whose run diverged on either side is left out and counted
    (``dropped``); an equivalence ("close") with any seed left out is at most *cannot resolve*."""
    done = lambda rows: {int(r["seed"]): r for r in rows if r["status"] == "completed" and math.isfinite(r[metric])}
    a, b = done(rows_a), done(rows_b)
    seeds = sorted(set(a) & set(b))
    dropped = len({int(r["seed"]) for r in (*rows_a, *rows_b)}) - len(seeds)
    va, vb = [a[s][metric] for s in seeds], [b[s][metric] for s in seeds]
    per_example = None
    if metric == "test" and seeds and all(x[s].get("correct") is not None for x in (a, b) for s in seeds):
        per_example = ([a[s]["correct"] for s in seeds], [b[s]["correct"] for s in seeds])
    t = a[seeds[0]].get("tallies") if metric == "test" and seeds else None  # per-example results counted over seeds
    if per_example is None and t is not None and all(x[s].get("tallies") is t for x in (a, b) for s in seeds):
        per_example = t.pair({a[s]["setting"] for s in seeds}, {b[s]["setting"] for s in seeds}, seeds)
    gap = V.paired_gap(va, vb, n_test=n_test, examples=per_example)
    measured = f"{label_a} {V.fmt_mean(va)}, {label_b} {V.fmt_mean(vb)}" if seeds else "no completed pair"
    return V.judge(id, claim, paper, gap, rule, margin, measured=measured, headline=headline, dropped=dropped)


def pool_seeds(records: Sequence):
    """One record of several, each recorded for its own seeds (e.g. one process per seed on a
    device, as the H100 records in ``book/recorded/``): the runs keep their names (each carries
    its ``seed`` and ``setting``, as :func:`~._setup.fit_seeds` writes them), ``seeds`` in the
    resolved parameters is the total, the wall time summed; the first record's provenance
    otherwise. Generic renderers then show them as one run."""
    from ...records import pooled_record

    arrays, paths, runs, meta_runs = {}, [], {}, {}
    for rec in records:
        for tag in rec.runs:
            if "seed" not in rec.meta["runs"][tag]:
                raise ValueError(f"pool_seeds: run {tag!r} of {rec.path} does not record its seed; pool records "
                                 "made with the seeds parameter.")
            if tag in runs:
                raise ValueError(f"pool_seeds: two records hold the run {tag!r}; pool records of different seeds.")
            runs[tag] = rec.runs[tag]
            meta_runs[tag] = rec.meta["runs"][tag]
        for p in rec.paths:
            arrays["/".join(p)] = rec.arrays["/".join(p)]
            paths.append(list(p))
    return pooled_record(records, arrays, paths, meta={"runs": meta_runs}, info={"runs": runs})


def seeds_cell(rows: Sequence[Mapping]) -> str:
    """``"4 of 5 completed"``: how many of a setting's runs (one per seed) completed."""
    return f"{sum(r['status'] == 'completed' for r in rows)} of {len(rows)} completed"


def mean_cell(rows: Sequence[Mapping], key: str) -> str:
    """The mean of ``key`` over the completed rows with its interval over seeds (``n/a`` if none)."""
    done = [r[key] for r in rows if r["status"] == "completed"]
    return V.fmt_mean(done) if done else "n/a"


#: the detail of a claim whose premise did not hold
PREMISE_UNMET = "premise unmet"


def premise_unmet(v: V.Verdict, premise: V.Verdict, why: str) -> V.Verdict:
    """``v`` when its ``premise`` holds; else the same claim as *cannot resolve*, detail
    :data:`PREMISE_UNMET` and ``why``: the setting is not the one the paper's claim is about. It
    becomes a stated row (no test: a multiple-testing correction would judge a test again), with
    the gap it measured kept in its description. Figs. 3 and 4 treat their premises so."""
    if premise.verdict == V.HOLDS:
        return v
    seen = v.measured + (f": gap {V.fmt_gap(v.gap, v.scale, ' ' + v.unit, v.digits)}" if v.gap is not None else "")
    if v.dropped:
        seen += f" ({v.dropped} seed(s) left out: a run diverged)"
    return V.stated(v.id, v.claim, v.paper, seen + ", not judged", V.UNRESOLVED,
                    detail=f"{PREMISE_UNMET}: {why}, {premise.measured}", headline=v.headline)


__all__ = ["PREMISE_UNMET", "premise_unmet", "as_K", "final", "gap_verdict", "late_gain", "mean_cell", "pool_seeds", "rows_of", "run_summary",
           "seeds_cell", "select", "updates"]
