"""What the chapter "Learning NTK eigenfunctions" (``book/ntk_eigenfunctions.md``) computes and
glues: the cost of the paper's scale, the concentration of the spectrum, which claims each section
shows, the checks against chance behind a sentence, the fitted targets, the tally of the claims,
and the record of fresh seeds of the MLP's linear advantage.

The experiment and its claims are :mod:`itlin.book.experiments.ortiz.ortiz_eigenfunctions`
(:data:`NAME`, :data:`CLEAR_MARGIN` and :data:`CLEAR_READINGS` are re-exported here); its figures
are in :mod:`itlin.book.figures.ortiz`. Each ``*_values`` function returns the glue of a section.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from IPython.display import Markdown

from .. import verdicts as V
from ..experiments.ortiz import _common as common
from ..experiments.ortiz import ortiz_eigenfunctions as oe
from ..experiments.ortiz.ortiz_eigenfunctions import CLEAR_MARGIN, CLEAR_READINGS, NAME

__all__ = [
    "CLAIM", "CLEAR_MARGIN", "CLEAR_READINGS", "FRESH", "NAME", "accuracy_claims", "both_text", "chance_values",
    "clear_claims", "clear_values", "cost_rows", "fresh_figure", "fresh_reading", "fresh_records", "fresh_readings",
    "fresh_values", "fresh_verdicts", "hardness_claims", "hardness_values", "indices", "others_text",
    "paper_values", "spectrum_values", "status_line", "tallies", "tally",
]

FRESH = "ortiz_eigenfunctions-mnist1d-mlp-sgd-fresh-3492seeds"  # the record of fresh seeds
BEFORE = "ortiz_eigenfunctions-mnist1d-28seeds"                 # the record it re-tests
CLAIM = "linear_advantage.mlp.sgd"                              # the claim it re-tests


def status_line(live) -> str:
    """The line the chapter prints under its first cell.

    >>> from types import SimpleNamespace as NS
    >>> status_line(NS(status_text="completed", info={"wall_seconds": 12.4, "device": "cpu"}))
    "status of this page's run: completed; 12 s on cpu"
    """
    return f"status of this page's run: {live.status_text}; {live.info['wall_seconds']:.0f} s on {live.info['device']}"


def indices(rec) -> list:
    """The eigen-indices j of the targets of ``rec``, increasing."""
    return [int(j) for j in rec.tree()["eigen_indices"]]


def cost_rows(rec) -> list:
    """The rows of the table of what the paper's scale costs against this run's: the paper's pool,
    parameters and one Gram matrix per initialisation."""
    from ..figures import ortiz as figures

    r = rec.meta["resolved"]
    paper = oe.EigenParams.paper_resolved()
    pp = figures.paper_num_params(paper["resnet_width"])
    grams = {m: (r["seeds"], paper["seeds"]) for m in set(paper["models"]) | set(r["models"])}  # one per initialisation
    return figures.cost_rows(rec, oe.PAPER_POOL, {m: pp[m] for m in paper["models"]}, grams)


def paper_values() -> dict:
    """The paper's pool and the size of its Gram matrix in float64 (GB).

    >>> paper_values()
    {'paper_pool': '60,000', 'paper_gram_gb': 28.8}
    """
    return {"paper_pool": f"{oe.PAPER_POOL:,}", "paper_gram_gb": 8.0 * oe.PAPER_POOL ** 2 / 1e9}


def spectrum_values(rec) -> dict:
    """The glue of the spectrum figure: the least and largest class balance of the validation
    targets (``bal_lo``, ``bal_hi``, in %) and, per model, how much of the trace the top 50
    eigenvalues hold and how small the eigenvalue at the largest j is (``spectrum_text``)."""
    res, js = rec.tree(), indices(rec)
    bal = [np.asarray(v["balance_val"])[:, :len(js)] for v in res["models"].values()]
    ev = {m: np.asarray(v["eigvals"], np.float64) for m, v in res["models"].items()}  # (seeds, N), decreasing
    return {
        "bal_lo": 100 * min(float(b.min()) for b in bal),
        "bal_hi": 100 * max(float(b.max()) for b in bal),
        "spectrum_text": "; ".join(
            f"{common.LABELS.get(m, m)}: the top 50 of {e.shape[1]:,} eigenvalues hold "
            f"{100 * np.mean(e[:, :50].sum(1) / e.sum(1)):.1f}% "
            f"of the trace, and the eigenvalue at j={js[-1]} is {np.mean(e[:, js[-1]] / e[:, 0]):.2g} of the largest"
            for m, e in ev.items()),
    }


def accuracy_claims(verdicts) -> V.Verdicts:
    """The claims about accuracy: all but the ``hardness.`` ones."""
    return V.Verdicts(v for v in verdicts if not v.id.startswith("hardness."))


def hardness_claims(verdicts) -> V.Verdicts:
    """The ``hardness.`` claims."""
    return V.Verdicts(v for v in verdicts if v.id.startswith("hardness."))


def clear_claims(verdicts) -> V.Verdicts:
    """The claims read at several margins: the linear advantage and the dataset's own labels."""
    return V.Verdicts(v for v in verdicts if v.id.startswith(("linear_advantage.", "labels.")))


def chance_values(rec) -> dict:
    """Whether each LeNet curve is above chance at the largest j (checks behind a sentence, not
    claims of the paper: ``chance_text``), the largest j (``largest_j``), the pool's size
    (``pool_n``) and the first j of the upper targets, where the LeNet's curves are to cross
    (``cross_from``)."""
    res, r, js = rec.tree(), rec.meta["resolved"], indices(rec)
    lenet = res["models"].get("lenet", {})
    chance = [common.gap_claim(f"chance.{key}", f"LeNet {key.split('_')[1]}, {key.split('_')[0].upper()}", "—", a,
                               np.full(a.shape, 0.5), n_test=r["n_val"], measured=common.fmt_finite(a))
              for key in lenet if key.endswith(oe.VARIANTS) for a in [np.asarray(lenet[key]["val_acc"])[:, len(js) - 1]]]
    word = {V.HOLDS: "above chance", V.FAILS: "below chance"}
    return {
        "chance_text": "; ".join(f"{v.claim} {v.measured}, {word.get(v.verdict, 'not distinguishable from chance')} "
                                 f"(resolves {100 * v.half:.1f} points)" for v in chance) or "no LeNet in this run",
        "largest_j": js[-1],
        "pool_n": f"{r['n_train'] + r['n_val']:,}",
        "cross_from": js[oe.upper_targets(js)[0]],
    }


def clear_values(clear) -> dict:
    """The margin of "clearly ahead" in points and the readings of ``clear`` at each margin."""
    return {"oe_clear_margin": 100 * oe.CLEAR_MARGIN, "oe_clear_readings": Markdown(oe.clear_readings(clear))}


def hardness_values(rec) -> dict:
    """Per model trained with SGD, up to which j its runs fitted their targets (``fitted_text``),
    and the epochs run (``epochs_run``)."""
    res, r, js = rec.tree(), rec.meta["resolved"], indices(rec)
    fit = {m: oe.fitted_range(oe.hardness(res, m, r["loss_threshold"], r["steps"], r["steps_per_epoch"])["iterations"], js)
           for m in res["models"] if "sgd_network" in res["models"][m]}
    return {
        "fitted_text": "; ".join(f"{common.LABELS.get(m, m)}: " + (f"j up to {js[n - 1]}" if n else "no target")
                                 for m, n in fit.items()),
        "epochs_run": r["epochs"],
    }


def tally(verdicts, prefix: str) -> str:
    """How the claims whose ids start with ``prefix.`` came out."""
    vs = [v for v in verdicts if v.id.startswith(prefix + ".")]
    c = V.Verdicts(vs).counts()
    return f"holds in {c[V.HOLDS]} of {len(vs)}, does not hold in {c[V.FAILS]}, cannot resolve in {c[V.UNRESOLVED]}"


def tallies(verdicts, rec) -> str:
    """The list that sums the claims up, one item per claim of the paper."""
    js = indices(rec)
    t = lambda prefix: tally(verdicts, prefix)  # noqa: E731
    return "\n".join([
        f"* **Accuracy decays with j** (models x optimisers x network/linearised): {t('decay')}.",
        f"* **Linear advantage on eigenfunctions** (model/optimiser pairs): {t('linear_advantage')}.",
        f"* **Network ahead on the dataset's own labels**: {t('labels')}.",
        f"* **The LeNet's curves cross** (the network ahead from j={js[oe.upper_targets(js)[0]]} on): {t('cross')}.",
        f"* **More iterations at larger j**: {t('hardness.iterations')}; **distances grow over the fitted "
        f"targets**: l2 {t('hardness.l2')}; cosine {t('hardness.cosine')}."])


# ------------------------------------------------------------------------------ the fresh seeds
def fresh_records() -> tuple:
    """The record the fresh seeds re-test and the record of the fresh seeds (:data:`FRESH`)."""
    from .. import runner

    return runner.open_record(BEFORE), runner.open_record(FRESH)


def fresh_verdicts(before, fresh) -> tuple:
    """:data:`CLAIM` on the record before, all the claims of the fresh record, and :data:`CLAIM` on
    the fresh record: each claim judged alone at 95%, shown to 0.01 points (thousands of seeds
    resolve less than 0.1)."""
    from .. import render

    v_before = dataclasses.replace(render.judge(before)[CLAIM].judged_at(V.LEVEL), digits=2)
    v_all = render.judge(fresh)
    v = dataclasses.replace(v_all[CLAIM].judged_at(V.LEVEL), digits=2)
    return v_before, v_all, v


def others_text(v_all) -> str:
    """The fresh record's other claims, as the chapter shows them."""
    from .. import render

    others = V.Verdicts(w for w in v_all if w.id != CLAIM)
    return ("The record's other claims, not its test (judged with it as one family, as every record's claims "
            "are):\n\n" + render.claims(others, bottom_line=False))


def fresh_figure(before, fresh, v_before, v):
    """The two intervals of the linear advantage, the record before and the fresh seeds, against the
    margin."""
    import matplotlib.pyplot as plt

    from ..plotting import COLUMN_WIDTH, interval_rows

    rb, rf = before.meta["resolved"], fresh.meta["resolved"]
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 1.9))
    interval_rows(ax, [(f"record above ({int(rb['seeds'])} seeds)", v_before, False),
                       (f"fresh seeds ({int(rf['seeds']):,} seeds)", v, True)], line=100 * oe.CLEAR_MARGIN,
                  xlabel="validation accuracy, linearised minus network (points)")
    fig.tight_layout()
    return fig


def fresh_reading(verdict: str, lo: float, hi: float) -> str:
    """What the fresh seeds say, for the claim's verdict and its interval [lo, hi] (fractions).

    >>> fresh_reading(V.UNRESOLVED, 0.01, 0.03)
    'even these initialisations cannot tell: the interval, 1.00 to 3.00 points, contains the margin'
    """
    return {
        V.HOLDS: f"on these initialisations the linearised MLP is ahead of the network on the eigenfunction targets "
                 f"by more than the margin: the interval, {100 * lo:.2f} to {100 * hi:.2f} points, lies wholly above it",
        V.FAILS: f"on these initialisations the linearised MLP is ahead by less than the margin: the interval, "
                 f"{100 * lo:.2f} to {100 * hi:.2f} points, lies wholly below it"
                 + (" and wholly above zero, so it is ahead, by less than the claim asks" if lo > 0 else ""),
        V.UNRESOLVED: f"even these initialisations cannot tell: the interval, {100 * lo:.2f} to {100 * hi:.2f} points, "
                      f"contains the margin"}[verdict]


def fresh_values(before, fresh, v_before, v) -> dict:
    """The glue of the fresh seeds (``oe_fresh_`` names): the record before's gap and verdict,
    whether any fresh seed is one of its seeds, the seeds, the eigenvalues kept, the verdict, gap,
    margin and resolution, the hours, and the reading."""
    from .. import runner

    rb, rf = before.meta["resolved"], fresh.meta["resolved"]
    shared = set(runner.seed_range(rf)) & set(runner.seed_range(rb))
    return {
        "oe_fresh_before": Markdown(f"{v_before.gap_text()}: the claim *{V.says(v_before)}*"),
        "oe_fresh_overlap": Markdown("none of them is a seed of the record above" if not shared else
                                     f"**{len(shared)} of them are seeds of the record above**"),
        "oe_fresh_seeds": f"{int(rf['seeds']):,}",
        "oe_fresh_seed_lo": f"{int(rf['seed']):,}",
        "oe_fresh_seed_hi": f"{int(rf['seed']) + int(rf['seeds']) - 1:,}",
        "oe_fresh_kept": int(fresh.params["eigvals_kept"]),
        "oe_fresh_verdict": V.says(v),
        "oe_fresh_gap": v.gap_text(),
        "oe_fresh_margin": 100 * oe.CLEAR_MARGIN,
        "oe_fresh_res": 100 * v.half,
        "oe_fresh_hours": fresh.info["wall_seconds"] / 3600,
        "oe_fresh_reading": Markdown(fresh_reading(v.verdict, v.mean - v.half, v.mean + v.half)),
    }


def both_text(on: dict) -> str:
    """Where "clearly ahead" holds, from ``on`` (per margin, whether it holds on the record before
    and on the fresh seeds).

    >>> both_text({0.0: [True, True], 0.01: [False, True], 0.02: [False, False]})
    '"clearly ahead" holds on both records at 0 points, on the fresh seeds only at 1 points, on neither at 2 points'
    """
    pts = lambda ms: " and ".join(f"{100 * m:g}" for m in ms) + " points"  # noqa: E731
    where = [("on both records", lambda h: all(h)), ("on the fresh seeds only", lambda h: h[1] and not h[0]),
             ("on the record above only", lambda h: h[0] and not h[1]), ("on neither", lambda h: not any(h))]
    return "\"clearly ahead\" holds " + ", ".join(
        f"{w} at {pts(ms)}" for w, f in where for ms in [[m for m, h in on.items() if f(h)]] if ms)


def fresh_readings(v_before, v, readings: Sequence[float] = CLEAR_READINGS) -> dict:
    """The readings of the claim at each margin, on the fresh seeds and on the record before, and
    where "clearly ahead" holds (``oe_clear_both``)."""
    on = {m: [V.margin_sensitivity(x, [m])[0][1] == V.HOLDS for x in (v_before, v)] for m in readings}
    return {
        "oe_fresh_readings": Markdown(oe.clear_readings([v]).removeprefix("* ")),
        "oe_fresh_before_readings": Markdown(oe.clear_readings([v_before]).removeprefix("* ")),
        "oe_clear_both": Markdown(both_text(on)),
    }
