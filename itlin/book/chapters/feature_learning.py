"""What the chapter "Feature learning (Figures 6 and 7)" (``book/feature_learning.md``) computes
and glues: the setting, the probes' claims, the filters' movement and the fraction of the run at
which a large K's filters are K=1's, the comparison with the fewest feature updates, and the
kernel's movement.

The claims are those of :mod:`itlin.book.experiments.main.feature_learning`; the figures are
:func:`itlin.book.figures.main.fig6`, :func:`~itlin.book.figures.main.fig7`,
:func:`~itlin.book.figures.main.fig7_distances` and :func:`~itlin.book.figures.main.kernel_movement`.
Glue names keep the chapter's ``fl_`` prefix.
"""

from __future__ import annotations

import math

import numpy as np
from IPython.display import Markdown

from .. import verdicts as V
from ..experiments.main import feature_learning as fl
from ..experiments.main._rows import as_K, select, updates
from ..labels import K_label

__all__ = [
    "fewest_text", "FILTER_IDS", "filter_values", "kernel_rows", "kernel_values", "much_values", "n_test",
    "PROBE_IDS", "probe_values", "setting_values", "verdict_values",
]

#: the probes' claims, per layer: the large K's probe improves, more slowly than K=1's, and levels off lower
PROBE_IDS = [f"probe.{layer}.{what}" for layer in fl.LAYERS for what in ("improves", "slower", "lower")]
#: the filters' claims of Figure 7
FILTER_IDS = ["filters.faster", "filters.early", "filters.ten_percent"]


def n_test(r) -> int:
    """The test examples the final accuracies are measured on (``n_test_final``, else ``n_test``).

    >>> n_test({"n_test": 500, "n_test_final": None}), n_test({"n_test": 500, "n_test_final": 4000})
    (500, 4000)
    """
    return int(r.get("n_test_final") or r["n_test"])


def verdict_values(verdicts, ids) -> dict:
    """Each claim's verdict as a predicate (:func:`itlin.book.verdicts.says`), glued as ``fl_<id with
    dots as underscores>``."""
    return {"fl_" + i.replace(".", "_"): Markdown(V.says(verdicts[i])) for i in ids}


def setting_values(rec, rows) -> dict:
    """The glue of the setting: the large K the figures compare and its feature updates, K=1's,
    the paper's, the seeds, steps, minutes per seed and the periods run."""
    r_fl = rec.meta["resolved"]
    Kb = fl.large_K(rows)
    return {"fl_K": K_label(Kb), "fl_K_updates": updates(select(rows, K=Kb)),
            "fl_K1_updates": updates(select(rows, K=1)), "fl_paper_updates": fl.PAPER_UPDATES,
            "fl_seeds": int(r_fl["seeds"]), "fl_steps": int(r_fl["steps"]),
            "fl_seed_minutes": rec.info["wall_seconds"] / 60 / int(rec.meta["resolved"]["seeds"]),
            "fl_Ks_text": Markdown(", ".join(K_label(as_K(k)) for k in r_fl["Ks"]))}


def probe_values(verdicts, rec) -> dict:
    """The glue of the probes (Figure 6): each verdict, the gaps they resolve, the probe test
    set's part of that, and the margin."""
    probe_half = [verdicts[i].half for i in PROBE_IDS]
    return {**verdict_values(verdicts, PROBE_IDS),
            "fl_probe_res_lo": 100 * min(probe_half), "fl_probe_res_hi": 100 * max(probe_half),
            "fl_probe_test": 100 * max(verdicts[i].gap.test_half for i in PROBE_IDS),
            "fl_margin": 100 * float(rec.meta["resolved"]["close_margin"])}


def filter_values(verdicts, rows) -> dict:
    """The glue of the filters (Figure 7): the fraction of the run at which the large K's filters
    are K=1's (mean and per seed), the snapshots' spacing, each claim's verdict and resolution, the
    ratio of the distances moved, and the paper's band."""
    nums = fl.filter_numbers(rows)
    frac = [n["fraction"] for n in nums]
    ten = verdicts["filters.ten_percent"]
    return {"fl_fraction": 100 * float(np.mean(frac)) if frac else float("nan"),
            **verdict_values(verdicts, FILTER_IDS),
            "fl_spacing": 100 * nums[0]["resolution"] if nums else float("nan"),
            "fl_half_spacing": 50 * nums[0]["resolution"] if nums else float("nan"),
            "fl_frac_seeds": Markdown(", ".join(f"{100 * f:.0f}%" for f in frac) if frac else "none"),
            "fl_ten_res": 100 * ten.half,
            "fl_ten_res_vs_band": Markdown(
                "less than the band's half-width, so the claim can hold as well as be refuted"
                if ten.half < fl.PAPER_FRACTION_MARGIN else
                "no less than the band's half-width, so the claim could only be refuted"),
            "fl_early_res": 100 * verdicts["filters.early"].half,
            "fl_faster_res": verdicts["filters.faster"].half,
            "fl_much": fl.MUCH_FASTER,
            "fl_ratio": math.exp(verdicts["filters.faster"].gap.mean),  # the verdict's mean log ratio
            "fl_band_lo": 100 * (fl.PAPER_FRACTION - fl.PAPER_FRACTION_MARGIN),
            "fl_band_hi": 100 * (fl.PAPER_FRACTION + fl.PAPER_FRACTION_MARGIN)}


def much_values(much) -> dict:
    """The glue of where "much faster" flips (``much`` from
    :func:`~itlin.book.experiments.main.feature_learning.much_faster_readings`): the sentence, and
    each reading of "much" as a log ratio."""
    return {"fl_much_sentence": Markdown(much["sentence"]),
            "fl_much_logs": Markdown(", ".join(f"{x:g}x is {m:.2f}" for x, m in zip(fl.MUCH_FASTER_READINGS,
                                                                                  much["margins"])))}


def fewest_text(fewest, verdicts, rows) -> str:
    """How the claims judged against the run with the fewest feature updates (``fewest``, from
    :func:`~itlin.book.experiments.main.feature_learning.fewest_updates_claims`) compare with the
    same claims against the large K, as the chapter says it."""
    if not fewest:
        return "This setting has one large $K$ only: the figures above compare it."
    Kb = fl.large_K(rows)
    K_one = max(r["K"] for r in rows if np.isfinite(r["K"]))
    same = [(v, verdicts[v.id.removeprefix("fewest.")]) for v in fewest]
    held = lambda vs: sum(v.verdict == "holds" for v in vs)
    n_upd = lambda K: (lambda u: f"{u} feature update{'s' if u != 1 else ''}")(updates(select(rows, K=K)))
    text = (f"Against {K_label(K_one)} ({n_upd(K_one)}), {held([a for a, _ in same])} of these {len(same)} "
            f"claims hold; against {K_label(Kb)} ({n_upd(Kb)}), {held([b for _, b in same])} of the same "
            f"{len(same)}.")
    ids = lambda pairs_: ", ".join(f"`{a.id.removeprefix('fewest.')}`" for a, _ in pairs_)
    flipped = [(a, b) for a, b in same if a.resolved and b.resolved and a.verdict != b.verdict]
    partly = [(a, b) for a, b in same if a.verdict != b.verdict and not (a.resolved and b.resolved)]
    if flipped:
        text += (f" Verdicts that reverse: {ids(flipped)}; these statements of the paper depend on how few "
                 "feature updates the large-$K$ run makes.")
    if partly:
        text += (f" Resolved against one and not the other (the contrast's wider probe interval is one reason): "
                 f"{ids(partly)}.")
    if not flipped and not partly:
        text += " No verdict changes between the two."
    return text


def kernel_rows(tab) -> list:
    """The rows of the kernel-movement table (``tab`` from
    :func:`~itlin.book.experiments.main.feature_learning.kernel_table`), formatted."""
    return [{"run": K_label(t["K"]), "feature updates": t["updates"],
             "relative change (model trained)": f"{t['movement_anchor']:.3g}",
             "per feature update": "—" if math.isnan(t["per_update"]) else f"{t['per_update']:.2g}",
             "relative change (network)": f"{t['movement_net']:.3g}",
             "rotation (model trained)": f"{t['rotation_anchor']:.3g}",
             "rotation (network)": f"{t['rotation_net']:.3g}", "alignment at the end": f"{t['alignment_anchor']:.3f}",
             "alignment at initialisation": f"{t['alignment_init']:.3f}", "seeds": t["seeds"]} for t in tab]


def kernel_values(kernel, tab) -> dict:
    """The glue of the kernel's movement: how many neighbouring pairs of the ``kernel.`` claims
    hold, the movement per feature update, and what K=inf's two kernels show."""
    out = {}
    for short in ("change", "rotation"):
        pairs_ = [v for v in kernel if v.id.startswith(f"kernel.{short}.")]
        held = sum(v.verdict == "holds" for v in pairs_)
        out[f"fl_monotone_{short}"] = Markdown(f"{held} of {len(pairs_)} neighbouring pairs hold" + (
            "" if held == len(pairs_) else "; not shown: " + "; ".join(
                f"*{v.claim.split(': ', 1)[1]}*" for v in pairs_ if v.verdict != "holds")))
    per = [t for t in tab if t["updates"] > 0]
    ratio = per[0]["per_update"] / per[-1]["per_update"] if len(per) > 1 else float("nan")
    if ratio > 2:
        text = (f"The movement is far from proportional to the number of updates: per feature update, "
                f"{K_label(per[0]['K'])} moves the kernel {ratio:.0f} times as far as K=1. This is the paper's "
                "remark that \"a single step with K=1 results in less feature learning than 10^5 steps with K=10^5\": "
                "a feature update after a long phase carries the whole phase's movement at once.")
    elif ratio == ratio:
        text = (f"Per feature update, {K_label(per[0]['K'])} moves the kernel {ratio:.1f} times as far as K=1: "
                "here the movement is not much more than proportional to the number of updates, unlike the paper's "
                "remark that a single K=1 step learns less than a whole long phase.")
    else:
        text = "With fewer than two finite periods, the movement per feature update cannot be compared."
    out["fl_per_update_text"] = Markdown(text)
    inf = next((t for t in tab if math.isinf(t["K"])), None)
    out["fl_inf_text"] = Markdown(
        "(no K=inf run in this sweep)" if inf is None else
        f"For K=inf the network's own kernel at its final weights has changed by {inf['movement_net']:.3g} relative "
        f"to initialisation (rotation {inf['rotation_net']:.3g}), while the kernel of the model being trained has not "
        f"moved ({inf['movement_anchor']:.3g})")
    return out
