"""What the chapter on Arbel et al.'s ablations (``book/arbel_ablations.md``) runs, shows and
glues: the sample-size, width, SiLU, teacher-digits and damping experiments, the Fashion-MNIST
record, the tie-in of the step-size and damping claims with the main paper's, and the summary.

The experiments and their claims are the modules of :mod:`itlin.book.experiments.arbel`; their
figures are in :mod:`itlin.book.figures.arbel`. :func:`run` runs (or loads) every experiment of
the chapter and picks the run each one is judged on; each section function then shows one section
(its settings, figure, summary and claims) and returns the glue its prose reads.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from .. import render, runner
from .. import verdicts as V
from ..experiments.arbel import _arbel as A
from ..experiments.arbel import arbel_damping as ED
from ..experiments.arbel import arbel_mnist as EM
from ..experiments.arbel import arbel_samples as EN
from ..experiments.arbel import arbel_steps as ES
from ..experiments.arbel import arbel_width as EW
from ..figures import arbel as figures
from . import made

__all__ = [
    "FASHION", "QUINTIC", "QUINTIC_CLAIM", "TIE_WORDS", "damping_reading", "damping_section", "fashion_section", "label", "mnist_section",
    "run", "samples_section", "seeds_values", "show", "silu_section", "status_lines", "summary_section",
    "tie_section", "width_fit_note", "width_section",
]

FASHION = "arbel_mnist-fashion-24seeds"   # the record on Fashion-MNIST images
QUINTIC = "fig9_damping-paper-h100"       # the main paper's damping record, whose claim the tie-in reads
QUINTIC_CLAIM = "flax.mean.falls"          # that claim: the mean test RMSE falls from the smallest damping to the largest
TIE_WORDS = {V.HOLDS: "agree", V.FAILS: "do not agree", V.UNRESOLVED: "cannot be compared"}


def run(*, scale: str, seed: int, seeds, effect: float, samples_activations: Sequence[str],
        silu_betas: Sequence[float], silu_seeds: int, silu_gn_lrs: Sequence[float], silu_gd_lrs: Sequence[float],
        use_record: bool) -> SimpleNamespace:
    """Runs (or loads) every experiment of the chapter at its parameters and judges each on a
    recorded run of its settings with more seeds where there is one (``use_record``).

    Returns a namespace: the runs made here (``live_ns`` per activation, ``live_w``, ``live_silu``
    per beta, ``live_m``, ``live_d``, all in ``lives``), the runs judged (``rec_ns``, ``rec_w``,
    ``rec_silu``, ``rec_m``, ``rec_d``, all in ``recs``), per experiment the note on which run is
    judged (``notes``), the verdicts of all of them together (``verdicts``) and ``silu_betas``."""
    common = {"scale": scale, "seed": seed, "seeds": seeds, "effect": effect}
    live_ns = {act: runner.run(EN.NAME, {**common, "activation": act}) for act in samples_activations}
    live_w = runner.run(EW.NAME, common)
    live_silu = {b: runner.run(ES.NAME, {**common, "seeds": seeds or silu_seeds, "activation": "silu", "beta": b,
                                         "gn_lrs": silu_gn_lrs, "gd_lrs": silu_gd_lrs}) for b in silu_betas}
    live_m = runner.run(EM.NAME, common)
    live_d = runner.run(ED.NAME, common)
    notes = {}

    def judged(live, key):
        rec, notes[key] = render.evidence(live, use_record)
        return rec

    rec_ns = {act: judged(live, ("samples", act)) for act, live in live_ns.items()}
    rec_w = judged(live_w, "width")
    rec_silu = {b: judged(live, ("silu", b)) for b, live in live_silu.items()}
    rec_m = judged(live_m, "mnist")
    rec_d = judged(live_d, "damping")
    recs = [*rec_ns.values(), rec_w, *rec_silu.values(), rec_m, rec_d]
    return SimpleNamespace(
        live_ns=live_ns, live_w=live_w, live_silu=live_silu, live_m=live_m, live_d=live_d,
        lives=[*live_ns.values(), live_w, *live_silu.values(), live_m, live_d],
        rec_ns=rec_ns, rec_w=rec_w, rec_silu=rec_silu, rec_m=rec_m, rec_d=rec_d, recs=recs, notes=notes,
        verdicts=render.judge(*recs), silu_betas=list(silu_betas))


def label(rec) -> str:
    """The experiment, with its non-linearity.

    >>> from types import SimpleNamespace as NS
    >>> label(NS(experiment="arbel_steps", meta={"resolved": {"activation": "silu", "beta": 1.0}}))
    'arbel_steps (silu, β = 1)'
    >>> label(NS(experiment="arbel_width", meta={"resolved": {"activation": "relu"}}))
    'arbel_width (relu)'
    """
    r_ = rec.meta["resolved"]
    return f"{rec.experiment} ({r_['activation']}" + (f", β = {A.fmt_lr(r_['beta'])})" if r_["activation"] == "silu"
                                                       else ")")


def status_lines(lives) -> list:
    """One line per run made here: its experiment, status, time and device."""
    return [f"{label(live)} here: {live.status_text}, {live.info['wall_seconds']:.0f} s on {live.info['device']}"
            for live in lives]


def seeds_values(R) -> dict:
    """The seeds of the runs made here (``seeds_live``) and of each run judged (``seeds_judged``)."""
    return {
        "seeds_live": " or ".join(str(n) for n in sorted({int(live.meta["resolved"]["seeds"]) for live in R.lives})),
        "seeds_judged": "; ".join(f"{label(rec)}: {rec.meta['resolved']['seeds']}" for rec in R.recs),
    }


def show(verdicts, *ids) -> None:
    """Shows the claims of a section, by id (a claim a run cannot make, e.g. at scale="tiny", is left out)."""
    display(Markdown(render.claims(verdicts.select(*[i for i in ids if i in verdicts.ids]), bottom_line=False)))


def samples_section(R) -> dict:
    """Shows the sample-size experiment per activation (note, settings, figure, summary, claims);
    returns the margin of a slope claim (``slope_margin``, decades per decade)."""
    for act, rec in R.rec_ns.items():
        display(Markdown(f"Sample size, {act}. {R.notes['samples', act]}"))
        display(Markdown(render.settings(rec)))
        figures.samples(EN.arrays(rec), title=f"{act}, ")
        plt.show()
        display(Markdown(render.summary(rec)))
        pre = A.variant(rec.settings)[0]
        show(R.verdicts, *[v.id for v in R.verdicts
                           if v.id.startswith(tuple(pre + k for k in ("lead.", "regime.", "affine")))])
    r_n = next(iter(R.rec_ns.values())).meta["resolved"]
    return {"slope_margin": float(A.slope_margin(r_n["effect"], r_n["n_trains"]))}


def width_fit_note(unfit: Sequence[str]) -> str:
    """Whether every run of the width experiment fitted the data; ``unfit`` names the methods whose
    runs did not all fit.

    >>> width_fit_note([])
    "every run fitted the data, so each row tests the paper's claim"
    >>> width_fit_note(["GD"])
    "GD's runs did not all fit the data within the budget, so its row judges budget-limited runs, not the paper's condition"
    """
    return ("every run fitted the data, so each row tests the paper's claim" if not unfit else
            " and ".join(unfit) + "'s runs did not all fit the data within the budget, so "
            + ("its row judges" if len(unfit) == 1 else "their rows judge")
            + " budget-limited runs, not the paper's condition")


def width_section(R) -> dict:
    """Shows the width experiment; returns whether its runs fitted the data (``width_fit_note``)."""
    display(Markdown(R.notes["width"]))
    display(Markdown(render.settings(R.rec_w)))
    SW = EW.arrays(R.rec_w)
    figures.width(SW)
    plt.show()
    display(Markdown(render.summary(R.rec_w)))
    show(R.verdicts, "width.gn_stable", "width.gd_stable", "width.rf_falls")
    return {"width_fit_note": width_fit_note([A.LABELS[m] for m in ("gn", "gd") if not SW["converged"][m].all()])}


def _steps_figure(rec, title: str) -> None:
    fig = figures.steps_final(A.lr_arrays(rec))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    plt.show()


def silu_section(R) -> None:
    """Shows the SiLU step-size runs per temperature beta, then their claims."""
    for b, rec in R.rec_silu.items():
        display(Markdown(f"SiLU, β = {A.fmt_lr(b)}. {R.notes['silu', b]}"))
        _steps_figure(rec, f"SiLU, β = {A.fmt_lr(b)}, τ0 = {A.fmt_lr(rec.meta['resolved']['tau0'])}")
    show(R.verdicts, *[f"silu_b{A.fmt_lr(b)}.{k}" for b in R.silu_betas for k in ("gn.step_lrfit", "gd.step_lrfit", "best")])


def mnist_section(R) -> dict:
    """Shows the teacher-labelled digits; returns the largest label, the digits' squared norm,
    their pixels and 784 over that norm (``label_max``, ``digits_sqnorm``, ``digits_pixels``,
    ``mnist_ratio``)."""
    rec_m = R.rec_m
    display(Markdown(R.notes["mnist"]))
    display(Markdown(render.settings(rec_m)))
    _steps_figure(rec_m, "teacher-labelled digits, τ0 = 1e-3")
    display(Markdown(render.summary(rec_m)))
    show(R.verdicts, "mnist.gn_step_lrfit", "mnist.hidden.gn", "mnist.gd_diverges")
    return {"label_max": rec_m.meta["label_max"], "digits_sqnorm": rec_m.meta["input_sqnorm"],
            "digits_pixels": int(rec_m.meta["resolved"]["pixels"]), "mnist_ratio": 784 / rec_m.meta["input_sqnorm"]}


def fashion_section() -> dict:
    """Shows the record on Fashion-MNIST images (:data:`FASHION`: provenance, settings, figure,
    summary, claims); returns its squared norm and pixels and the verdicts of its step-size and
    divergence claims (``fashion_`` names)."""
    fashion = runner.open_record(FASHION)
    print(made(fashion))
    display(Markdown(render.settings(fashion)))
    _steps_figure(fashion, "teacher-labelled Fashion-MNIST images, τ0 = 1e-3")
    display(Markdown(render.summary(fashion)))
    v_fashion = render.judge(fashion)
    display(Markdown(render.claims(v_fashion)))
    display(Markdown(render.correction_note(v_fashion)))
    values = {"fashion_sqnorm": fashion.meta["input_sqnorm"], "fashion_pixels": int(fashion.meta["resolved"]["pixels"])}
    for key in ("mnist.gn_step_lrfit", "mnist.gd_diverges"):
        values["fashion_" + key.split(".", 1)[1].replace(".", "_")] = Markdown(V.says(v_fashion[key]))
    return values


def damping_reading(verdict: str) -> str:
    """What the damping claim's verdict says of the main paper and of Arbel et al.'s remark.

    >>> damping_reading(V.UNRESOLVED)
    "it decides neither the main paper's claim nor Arbel et al.'s remark"
    """
    return {
        V.HOLDS: "it supports the main paper (more damping generalises better) and is at odds with Arbel et al.'s "
                 "remark, at least over these floors",
        V.FAILS: "it does not support the main paper here, and is in line with Arbel et al.'s remark",
        V.UNRESOLVED: "it decides neither the main paper's claim nor Arbel et al.'s remark"}[verdict]


def damping_section(R) -> tuple:
    """Shows the damping experiment and its claims beside the main paper's (:data:`QUINTIC`);
    returns the main paper's claim and the glue: how far below the smallest singular value the
    floor lies (``floor_min_decades``), the seeds of the main paper's record, the damping claim's
    verdict, gap, floors and reading."""
    rec_d = R.rec_d
    display(Markdown(R.notes["damping"]))
    display(Markdown(render.settings(rec_d)))
    figures.damping(rec_d)
    plt.show()
    display(Markdown(render.summary(rec_d)))
    sig0 = np.asarray(rec_d["sigma_min_init"])[0]
    rec_q = runner.open_record(QUINTIC)
    # the record's own claim, judged as its family (as the damping chapter and the Findings row judge it)
    quintic = render.judge(rec_q)[QUINTIC_CLAIM]
    d_test = R.verdicts["damping.test"]
    display(Markdown(render.claims([d_test, R.verdicts["damping.lrfit"], quintic], bottom_line=False)))
    return quintic, {
        "floor_min_decades": float(np.log10(np.asarray(rec_d["eps0_ours"])[0] / sig0.max())),
        "quintic_seeds": int(rec_q.meta["resolved"]["seeds"]),
        "damping_test_verdict": Markdown(V.says(d_test)),
        "damping_test_gap": Markdown(d_test.gap_text()),
        "damping_floors": Markdown(f"{A.fmt_lr(rec_d['eps0'][0])} to {A.fmt_lr(rec_d['eps0'][-1])}"),
        "damping_test_reading": Markdown(damping_reading(d_test.verdict)),
    }


def tie_section(R, quintic) -> dict:
    """Shows the tie-in of the SiLU step-size claim at the largest beta, the damping claim and the
    main paper's; returns whether they agree (``tie_word``) and what was measured (``tie_measured``)."""
    step = R.verdicts[f"silu_b{A.fmt_lr(max(R.silu_betas))}.gn.step_lrfit"]
    tie = ED.tie_in(step, R.verdicts["damping.lrfit"], quintic)
    display(Markdown(render.claims([step, R.verdicts["damping.lrfit"], quintic] + tie, bottom_line=False)))
    return {"tie_word": TIE_WORDS[tie[0].verdict], "tie_measured": tie[0].measured}


def summary_section(R) -> None:
    """Shows every claim of the chapter, the correction note, and each claim at the cost of one
    more seed of its own run."""
    display(Markdown(render.claims(R.verdicts)))
    display(Markdown(render.correction_note(R.verdicts)))
    modules: Mapping = {EN.NAME: EN, EW.NAME: EW, ES.NAME: ES, EM.NAME: EM, ED.NAME: ED}
    for rec in R.recs:
        ids = {v.id for v in modules[rec.experiment].claims(rec)}
        display(Markdown(render.what_it_would_take([v for v in R.verdicts if v.id in ids], device=rec.info["device"],
                                                   seconds_per_seed=rec.info["wall_seconds"] / rec.meta["resolved"]["seeds"])))
