"""What the chapter "ResNet-18, batch norm and data scaling (Figures 4 and 5)"
(``book/resnet_and_data.md``) computes and glues: Figure 4's divergences, premise and gaps,
Figure 5's slopes and their margins, the test set's part of the headline's interval, and what the
chapter's CPU budget traded.

The claims are those of :mod:`itlin.book.experiments.main.fig4_resnet` and
:mod:`itlin.book.experiments.main.fig5_data_scaling`, judged together by the chapter; the figures
are :func:`itlin.book.figures.main.fig4` and :func:`~itlin.book.figures.main.fig5`. Glue names
keep the chapter's ``f4_``, ``f5_`` and ``f45_`` prefixes.
"""

from __future__ import annotations

import dataclasses
import math

from IPython.display import Markdown, display

from .. import plans, render, runner
from .. import verdicts as V
from ..experiments.main import fig4_resnet as fig4
from ..experiments.main import fig5_data_scaling as fig5
from ..experiments.main._setup import n_test_judged
from . import not_judged_yet

__all__ = [
    "FIG4_PLANNED", "can_hold", "decades", "fig4_ids", "fig4_planned", "fig4_values", "fig5_values", "flip_text", "margin_values",
    "n_test_judged", "seed_price", "slope_margins", "test_term_values", "traded_values", "updates_text",
]


# ------------------------------------------------------------------------------ Figure 4
#: Fig. 4 at a setting where K=1 fits (width 8, 5,000 steps), fixed before any run in commit a6d81ac
FIG4_PLANNED = "fig4_resnet-mnist1d-width8-16seeds"


def fig4_planned(name: str = FIG4_PLANNED, planned=None) -> dict:
    """The planned Fig. 4 record (:data:`FIG4_PLANNED`): how far it has come and, only once every
    planned seed is in (``planned``: default the plan's), its premise and its one claim judged
    alone at 95%. Returns the glue (``f4_planned_reading``)."""
    from ..records import made_parts, plan_progress

    plan = plans.plan_of(FIG4_PLANNED)
    parts = made_parts(name)
    progress = plan_progress([p.meta["resolved"] for p in parts], plan.seeds if planned is None else planned)[None]
    if not progress.complete:
        return {"f4_planned_reading": not_judged_yet(progress.text())}
    rec = fig4.EXPERIMENT.pool(parts)
    verdicts = V.Verdicts(plans.mark(rec, fig4.claims(rec)))
    v, premise = verdicts[plan.claim].judged_at(V.LEVEL), verdicts["nobn.k1_trained"]
    display(Markdown(render.claims(V.Verdicts([premise, v]), bottom_line=False)))
    return {"f4_planned_reading": Markdown(
        f"That $K=1$ fits its training set without batch norm *{V.says(premise)}* ({premise.measured}); the planned "
        f"claim, that $K=1250$ ends no worse than $K=1$, *{V.says(v)}*" + (f" ({v.gap_text()})." if v.tested else "."))}


def fig4_ids(verdicts, rec4) -> list:
    """The ids of the chapter's claims that are Figure 4's, in the chapter's order."""
    return [v.id for v in verdicts if v.id in fig4.EXPERIMENT.verdicts(rec4).ids]


def can_hold(verdicts, margin: float) -> Markdown:
    """Whether each "close" claim of Figure 4 (without and with batch norm) can hold, as the prose
    says it: not judged (premise unmet), cannot hold (seeds left out), can come out either way (the
    setting resolves gaps below the margin), or can only be refuted."""
    out = []
    for key, name in (("nobn", "without batch norm"), ("bn", "with batch norm")):
        v = verdicts[f"{key}.large_close"]
        out.append(f"{name} it is not judged, since its premise is unmet" if not v.tested else
                   f"{name} it cannot hold, since diverged runs left {v.dropped} seed(s) out" if v.dropped else
                   f"{name} it can come out either way" if v.half is not None and v.half <= margin else
                   f"{name} it can only be refuted")
    return Markdown("; ".join(out))


def _modes_text(verdicts) -> Markdown:
    most, least = fig4.mode_ranking(verdicts)
    pairs = [v for v in verdicts if v.id.startswith("modes.")]
    return Markdown(
        "With fewer than two batch-norm modes run, the modes cannot be compared." if not pairs else
        "Judged against each other by the same interval rule, "
        + (f"`{most}` diverged more often than every other mode" if most else
           "which mode diverges most *cannot be resolved* (the intervals do not separate one mode from all others)")
        + ", and " + (f"`{least}` less often than every other" if least else "which diverges least *cannot be resolved*")
        + f"; {sum(v.resolved for v in pairs)} of {len(pairs)} pairs of modes are resolved.")


def fig4_values(rec4, rows4, verdicts) -> dict:
    """The glue of Figure 4's claims: divergences per configuration, the premise and the gaps
    without and with batch norm (a gap whose premise is unmet is shown measured, not judged), what
    the setting resolves and of that the test set's part, and how the batch-norm modes rank."""
    r4 = rec4.meta["resolved"]
    counts = fig4.divergences(rows4)
    out = {"f4_div_nobn": counts.get(fig4.NO_BN, (0, 0))[0], "f4_tot": counts.get(fig4.NO_BN, (0, 0))[1]}
    for mode in fig4.BN_MODES:
        out[f"f4_div_{mode}"] = counts[mode][0] if mode in counts else "n/a"
    measured4 = {v.id: v for v in fig4.judge_rows(rows4, n_test=n_test_judged(r4), margin=r4["close_margin"],
                                                  bn_mode=r4["bn_mode"], premise=False)}  # the gaps, premise or not
    out["f4_premise_thr"] = 100 * fig4.premise_threshold(r4["close_margin"])
    for key in ("nobn", "bn"):
        prem, v = verdicts[f"{key}.k1_trained"], verdicts[f"{key}.large_not_worse"]
        out[f"f4_premise_{key}"] = Markdown(V.says(prem))
        out[f"f4_premise_seen_{key}"] = Markdown(prem.measured)
        why = None if prem.verdict == V.HOLDS else "premise unmet"  # as the Findings row says
        out[f"f4_verdict_{key}"] = Markdown(V.says(v, why=why))
        # the two sides over the seeds the gap pairs, and the gap, as the Findings row shows them (an unmet
        # premise: measured, not judged); not K=1's mean over every seed, which pairs with no gap
        out[f"f4_gap_{key}"] = Markdown(f"{v.measured}: gap {v.gap_text()}" if v.tested else v.measured)
        close = verdicts[f"{key}.large_close"]
        out[f"f4_close_{key}"] = Markdown(V.says(close, why=why))
        out[f"f4_res_{key}"] = Markdown(f"{100 * close.half:.1f}" if close.tested else "— (not judged)")
    near, n_div = fig4.near_relinearisation(rows4)
    out["f4_near"], out["f4_ndiv"] = near, n_div
    out["f4_steps"] = int(r4["steps"])
    out["f4_updates"] = max([r["updates"] for r in rows4 if 1 < r["K"] < float("inf") and r["status"] == "completed"]
                            or [0])
    out["f4_margin"] = 100 * r4["close_margin"]
    out["f4_can_hold"] = can_hold(verdicts, r4["close_margin"])
    out["f4_ntest"] = n_test_judged(r4)
    k1_bn = [r["test"] for r in fig4.baseline_rows(rows4, "BN") if not fig4.diverged(r)]
    out["f4_k1_bn"] = 100 * sum(k1_bn) / len(k1_bn) if k1_bn else float("nan")
    out["f4_floor"] = (100 * V.accuracy_noise(sum(k1_bn) / len(k1_bn), n_test_judged(r4)) if k1_bn
                       else float("nan"))
    out["f4_modes"] = _modes_text(verdicts)
    return out


# ------------------------------------------------------------------------------ Figure 5
def decades(rows5) -> float:
    """The decades of data Figure 5's training-set sizes cover (log10 of largest over smallest).

    >>> decades([{"n": 100}, {"n": 1000}])
    1.0
    """
    return math.log10(max(r["n"] for r in rows5) / min(r["n"] for r in rows5))


def updates_text(updates) -> str:
    """A list of feature-update counts in words.

    >>> updates_text([3]), updates_text([1, 2, 4])
    ('3', '1, 2 and 4')
    """
    return ", ".join(map(str, updates[:-1])) + " and " + str(updates[-1]) if len(updates) > 1 else str(updates[0])


def fig5_values(rec5, rows5, verdicts, ids5) -> dict:
    """The glue of Figure 5's claims (``ids5``): each verdict and what it resolves, the lowest
    final training accuracy of each setting on the largest set, the large K's feature updates per
    size, the ratio of the learning rates, the slope margin and what it spans over the sizes."""
    r5 = rec5.meta["resolved"]
    out = {}
    for key in ids5:
        out[f"f5_{key}"] = Markdown(V.says(verdicts[key]))
        out[f"f5_{key}_res"] = 100 * verdicts[key].half
    labels = fig5.labels_of(rows5)
    largest = max(r["n"] for r in rows5)
    train_at = lambda lab: min([r["train"] for r in rows5 if r["setting"] == lab and r["n"] == largest
                                and r["status"] == "completed"] or [float("nan")])
    out["f5_train_k1"] = 100 * train_at(labels[0])
    out["f5_train_big"] = 100 * train_at(labels[1])
    out["f5_train_inf"] = 100 * train_at(labels[3])
    updates_big = [max([r["updates"] for r in rows5 if r["setting"] == labels[1] and r["n"] == n
                        and r["status"] == "completed"] or [0]) for n in sorted({r["n"] for r in rows5})]
    out["f5_updates_big"] = Markdown(updates_text(updates_big))
    out["f5_lr_ratio"] = r5["lr_inf"] / r5["lr"]
    out["f5_margin"] = 100 * r5["slope_margin"]
    out["f5_margin_span"] = 100 * r5["slope_margin"] * decades(rows5)
    out["f5_ntest"] = int(r5["n_test"])
    return out


def slope_margins(rec4, rec5, rows5) -> tuple:
    """``(margins, book_margin)``: the slope margins Figure 5's two "scales like K=1" rows are
    re-judged at (half, once and twice ours, and the book's), the book's being the slope gap that
    moves the accuracy gap across the sizes by the final-accuracy claims' margin."""
    slope_margin = rec5.meta["resolved"]["slope_margin"]
    book5 = rec4.meta["resolved"]["close_margin"] / decades(rows5)
    return sorted({0.5 * slope_margin, slope_margin, 2 * slope_margin, book5}), book5


def flip_text(lo: float, hi: float) -> str:
    """The margins (fractions, shown in points) between which a one-sided claim cannot resolve
    (:func:`itlin.book.verdicts.flip_margin`), as the prose says it.

    >>> flip_text(0.01, 0.05), flip_text(float("-inf"), 0.05), flip_text(float("-inf"), float("inf"))
    ('1.0 and 5.0', '0 and 5.0', 'no margin at or above zero')
    """
    return ("no margin at or above zero" if not (math.isfinite(lo) or math.isfinite(hi)) else
            f"{100 * lo:.1f} and {100 * hi:.1f}" if math.isfinite(lo) and math.isfinite(hi) else
            f"0 and {100 * hi:.1f}" if math.isfinite(hi) else f"{100 * lo:.1f} and any larger")


def margin_values(verdicts, book5: float) -> dict:
    """The glue of the margin sensitivity: the book's slope margin, the one-sided row's verdict
    there, and the margins between which that row cannot resolve."""
    return {"f5_book_margin": 100 * book5,
            "f5_book_verdict": Markdown(V.says(verdicts["finite_not_worse"].at_margin(book5))),
            "f5_flip": Markdown(flip_text(*V.flip_margin(verdicts["finite_not_worse"])))}


def _paired_text(head5, rows5, labels, r5, rec5, live5) -> str:
    paired5 = all(r["correct"] is not None for r in rows5)
    rows_live = fig5.rows(live5)
    labels_live = fig5.labels_of(rows_live)
    n_live = int(live5.meta["resolved"]["n_test"])
    if paired5:
        unpaired5, _ = fig5.slope_gap([{**r, "correct": None} for r in rows5], labels[1], labels[0],
                                      n_test=int(r5["n_test"]))
        return (
            f"The judged run kept which test signals each run classifies right; the unpaired bound on the same runs "
            f"would be {100 * unpaired5.test_half:.1f} points. Of the paired term, {100 * head5.gap.test_floor:.1f} "
            "would remain with any number of seeds: the test signals' own spread in how much more the large K gains "
            "from data than K=1 (`verdicts.paired_accuracy_floor_se`); the rest is the runs' disagreements, which "
            "more seeds average out.")
    if len(labels_live) != 4 or not all(r["correct"] is not None for r in rows_live):
        return ("This page's run did not keep per-signal results either (it was loaded from results made "
                "before runs kept them).")
    paired_live, _ = fig5.slope_gap(rows_live, labels_live[1], labels_live[0], n_test=n_live)
    unpaired_live, _ = fig5.slope_gap([{**r, "correct": None} for r in rows_live], labels_live[1], labels_live[0],
                                      n_test=n_live)
    projected = dataclasses.replace(head5, gap=head5.gap._replace(
        test_half=paired_live.test_half, test_floor=paired_live.test_floor,
        half=math.hypot(head5.gap.seed_half, paired_live.test_half)))
    need = V.seeds_needed(projected)
    seconds5 = render.seconds_per_seed(rec5) or render.seconds_per_seed(live5)
    distance = r5["slope_margin"] - abs(head5.gap.mean)  # how far the gap sits inside the equivalence margin
    return (
        f"This page's run keeps which test signals each run classifies right. Compared signal by signal, its "
        f"test-set term for the same comparison is {100 * paired_live.test_half:.1f} points per tenfold data, "
        f"against the unpaired bound of {100 * unpaired_live.test_half:.1f} on the same run (from "
        f"{paired_live.n} seed{'s' if paired_live.n != 1 else ''}; with more, the runs' disagreements average "
        "out and the term falls). "
        + (f"With that term, {need:,} seeds would decide the headline if its gap and the spread between seeds "
           f"stayed as on the judged run: about {need * seconds5 / 3600:.1f} hours on {rec5.info['device']}."
           if need is not None else
           "Seeds alone would not decide the headline with that term: the interval's half-width must fall below the "
           f"{100 * max(distance, 0.0):.1f} points between the gap and the threshold. How far the term falls with "
           "more seeds is what a record that keeps per-signal results would measure."))


def _seed_choice_text(rec4, rec5, live5, first5) -> str:
    r5 = rec5.meta["resolved"]
    n_first = int(first5.meta["resolved"]["seeds"])
    if not (rec5 is not live5 and rec5.path != first5.path and int(r5["seeds"]) > n_first):
        return ""
    v_first = render.judge(rec4, first5)["finite_close"]  # as this chapter judged it on that record
    cmp5 = runner.compare_seeds(first5, rec5)
    return (
        f"The judged record's number of seeds was not fixed in advance. A first record of {n_first} seeds "
        f"({render.provenance(first5)}), made before runs kept per-signal results, judged the headline, "
        f"the two-sided \"same rate\" claim (`finite_close`): it *{V.says(v_first)}* at "
        f"{v_first.gap_text()}: its interval carried the unpaired bound on the test set's term, and its gap sat "
        f"{100 * (r5['slope_margin'] - abs(v_first.gap.mean)):.1f} points inside the margin. The record judged here "
        f"repeats its settings with {int(r5['seeds'])} seeds, our estimate, after looking, of what the paired term "
        "would need; "
        + (f"its first {n_first} seeds give the first record's numbers again ({cmp5.arrays:,} arrays compared, "
           "identical). " if cmp5.identical else
           f"**its first {n_first} seeds differ from the first record's** (largest difference "
           f"{cmp5.max_abs:.3g} over {cmp5.arrays:,} arrays). ")
        + "Adding seeds after looking is a second look at the same question, so a verdict that only just resolves "
        "here deserves less weight than its interval suggests.")


def test_term_values(verdicts, rec4, rec5, rows5, live5, first5) -> dict:
    """The glue on the test set's part of Figure 5's headline interval: the term, whether it is
    paired signal by signal, what pairing changes (on the judged run, or projected from this
    page's run), and how the judged record's number of seeds was chosen after the first record
    ``first5`` had left the headline open (empty when the judged record is that one)."""
    r5 = rec5.meta["resolved"]
    head5 = verdicts["finite_close"]
    paired5 = all(r["correct"] is not None for r in rows5)
    return {"f5_test_term": 100 * head5.gap.test_half,
            "f5_test_kind": Markdown("paired signal by signal" if paired5
                                     else "the unpaired bound: the judged run did not keep per-signal results"),
            "f5_paired_text": Markdown(_paired_text(head5, rows5, fig5.labels_of(rows5), r5, rec5, live5)),
            "f5_seed_choice": Markdown(_seed_choice_text(rec4, rec5, live5, first5))}


# ------------------------------------------------------------------------------ all claims, and the budget
def seed_price(pairs) -> tuple:
    """``(seconds, priced)`` for the table of what more seeds would take: the seconds of one seed
    of every experiment, from each judged record, or from this page's run of the same settings where
    the record's clock is not known in full (resumed before the runner counted every sitting); and
    the sentence that says which. ``pairs`` are ``(judged, own)`` records, one per figure (4, 5)."""
    seconds = sum(render.seconds_per_seed(judged) or render.seconds_per_seed(own) for judged, own in pairs)
    unknown = [f"Figure {fig}" for fig, (judged, own) in zip((4, 5), pairs)
               if judged is not own and render.seconds_per_seed(judged) is None]
    priced = Markdown(
        "Every judged run's time covers all of it." if not unknown else
        f"The {' and '.join(unknown)} record{'s were' if len(unknown) > 1 else ' was'} resumed before the runner "
        "counted every sitting, so a seed there is priced from this page's run of the same settings: one seed alone "
        "also pays the compilation a record pays once, so that price is an upper bound too.")
    return seconds, priced


def traded_values(live4, live5, rec4, rec5, rows4) -> dict:
    """The glue of "What was traded for the CPU budget": this page's minutes, which runs are
    judged, how much narrower the networks are than the paper's, the seeds, and what one run moves
    a divergence share by."""
    r4, r5 = rec4.meta["resolved"], rec5.meta["resolved"]
    counts = fig4.divergences(rows4)
    return {
        "f45_wall": (live4.info["wall_seconds"] + live5.info["wall_seconds"]) / 60,
        "f45_judged": Markdown("; ".join(
            f"Figure {fig}: " + ("this page's run" if rec is live else
                                 f"the recorded run `{rec.path.name}`, made {render.cost(rec.info)} on "
                                 f"{rec.info['device']}")
            for fig, live, rec in ((4, live4, rec4), (5, live5, rec5)))),
        "f45_narrower": fig4.Fig4Params.paper_resolved()["width"] / r4["width"],
        "f5_channels": int(r5["channels"]),
        "f5_channels_paper": int(fig5.Fig5Params.paper_resolved()["channels"]),
        "f4_width": int(r4["width"]),
        "f45_seeds": Markdown(f"{int(r4['seeds'])} seeds for Figure 4 and {int(r5['seeds'])} for Figure 5"),
        "f4_one_run": 100 / max(1, counts.get(fig4.NO_BN, (0, 1))[1]),
    }
