"""Main paper Fig. 8: solving each linearisation with Adam before relinearising.

Three mini-batch runs of the LeNet per seed, from one initialisation: ``SGD K=1``, ``Adam K=1``
(the paper's control) and ``Adam solved K=...``: Adam with a large constant ``K`` meant to solve
each linearised (convex) problem, to about 100% train accuracy, before relinearising (Section
4.3), each from scratch (``reset_optimizer``: a fresh Adam state per phase). Whether each phase
was solved is measured (:func:`phases_of`): the claim ``phases.solved``. Sizes, periods, steps
and learning rates come from :data:`SCALES`; the chapter (``book/adam_solved.md``) says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from .. import Experiment, Period, param, register
from ... import verdicts as V
from ...labels import fmt_K, pct, pts
from . import _rows as R
from . import _setup as S

NAME = "fig8_adam"

#: size-like defaults per scale (the experiment's version includes a digest of this table)
SCALES = {
    "tiny": {"n_train": 256, "n_test": 200, "n_eval_train": 256, "channels": 4, "K": 20, "steps": 80,
             "eval_every": 5, "learning_rate": 1e-2, "momentum": 0.9, "adam_learning_rate": 1e-2, "seeds": 2},
    # Adam's rate and K chosen on the training set (selection seeds 100-102) to solve every phase; 4 seeds: CPU budget
    "default": {"n_train": 1000, "n_test": 1000, "n_eval_train": 1000, "channels": 16, "K": 700, "steps": 2100,
                "eval_every": 100, "learning_rate": 3e-3, "momentum": 0.9, "adam_learning_rate": 5e-3, "seeds": 1,
                "n_test_final": 15_000},
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50, "K": 200_000,
              "steps": 2_000_000, "eval_every": 20_000, "learning_rate": 1e-4, "momentum": 0.0,
              "adam_learning_rate": 1e-3, "seeds": 3},
}


def solved_tag(K) -> str:
    return f"Adam solved K={fmt_K(K)}"


@dataclass(frozen=True)
class Fig8Params(S.SparseParams):
    SCALES = SCALES
    PAPER = {"dataset": "cifar10"}

    K: Optional[Period] = param(None, "period of the Adam-solved run (>= 2)", label="K of the Adam-solved run",
                                source="Fig. 8 caption (K=2e5)")
    steps: Optional[int] = param(None, "training steps of every run", min=1, label="steps (every run)",
                                 source="our choice: not stated (ten phases)")
    adam_learning_rate: Optional[float] = param(None, "Adam learning rate (both Adam runs)", gt=0,
                                                label="Adam learning rate (both Adam runs)",
                                                source="our choice: not stated (Adam's usual default)")
    learning_rate: Optional[float] = param(None, "SGD learning rate", gt=0, label="SGD learning rate",
                                           source="our choice: not stated (Fig. 2's mini-batch rate)")
    momentum: Optional[float] = S.momentum_param("SGD heavy-ball momentum, 0 for plain SGD", label="SGD momentum")
    reset_optimizer: bool = param(True, "fresh Adam state at every relinearisation", label="fresh Adam state at "
                                  "each relinearisation", source="our reading: each problem solved from scratch")
    solved_accuracy: float = param(0.99, "train accuracy of the linearised model that counts a phase as solved",
                                   min=0, max=1, label="'solved': train accuracy of the linearised model",
                                   source="Section 4.3 (\"100% train accuracy\"), with 1% slack")
    batch_size: int = S.batch_size_param()
    blowup: float = param(1e4, "diverged: training loss above this multiple of the first (or not finite); above "
                               "the usual 100, since the loss jumps ~100x at each relinearisation when solved", gt=1)

    def check(self):
        r = self.resolved()
        if not math.isfinite(r["K"]) or r["K"] < 2:
            raise ValueError(f"K must be a finite period >= 2 (each phase solved, then relinearised), got {r['K']}")
        if r["eval_every"] > r["K"]:
            raise ValueError(f"eval_every={r['eval_every']} must be at most K={r['K']} (every phase evaluated)")
        if r["steps"] < r["K"]:
            raise ValueError(f"steps={r['steps']} is less than K={r['K']}: not one phase would be solved")


class Setting(NamedTuple):
    """One setting of the plan: its run ``tag`` and the ``info`` its runs record (optimizer, rates, K)."""
    tag: str
    info: dict


def run(params: Fig8Params, ctx):
    import optax

    from ....core.train import iterative_linearisation

    setup = S.prepare(params, batch_size=params.batch_size)
    sgd, adam = S.sgd(params.learning_rate, params.momentum), optax.adam(params.adam_learning_rate)
    info, runs = {"optimizer": "adam", "learning_rate": params.adam_learning_rate}, {}
    settings = [Setting("SGD K=1", {"optimizer": "sgd", "learning_rate": params.learning_rate,
                                    "momentum": params.momentum, "K": 1}), Setting("Adam K=1", {**info, "K": 1}),
                Setting(solved_tag(params.K), {**info, "K": int(params.K), "reset_optimizer": params.reset_optimizer})]
    for name, info in settings:
        opt = adam if info["optimizer"] == "adam" else sgd
        trainer = iterative_linearisation(setup.model, opt, S.schedule(info["K"]),
                                          reset_optimizer=info.get("reset_optimizer", False))
        S.fit_seeds(ctx, S.seed_runs(params, name, trainer, setup, params.steps, info, batch_size=params.batch_size,
                                     eval_every=params.eval_every), runs)
    return {"meta": {"resolved": S.measured_sizes(setup), "runs": runs, **S.data_meta(setup.ds, setup.model)}}


def rows(rec) -> list:
    """One row per training run (a setting and a seed): :func:`~._rows.rows_of`."""
    return [{**row, "learning_rate": float(row["learning_rate"])} for row in R.rows_of(rec)]


def summary(rec) -> list:
    """Per run: optimiser, learning rate, feature updates and the final accuracies over seeds."""
    rows_, out = rows(rec), []
    for setting in sorted({x["setting"] for x in rows_}, key=lambda t: ("solved" in t, t)):
        g = R.select(rows_, setting=setting)
        out.append({"run": setting, "optimiser": g[0]["optimizer"], "learning rate": f"{g[0]['learning_rate']:g}",
                    "feature updates": R.updates(g), "test acc.": R.mean_cell(g, "test"),
                    "train acc. (network)": R.mean_cell(g, "train_net"),
                    "train acc. (model being trained)": R.mean_cell(g, "train"),
                    "seeds": R.seeds_cell(g)})
    return out


def phases_of(history, K: int, solved_accuracy: float) -> list:
    """One dict per phase of an Adam-solved run: its steps, the train and test accuracy of the
    linearised model at its last evaluation before the relinearisation (``solved``: train
    accuracy >= ``solved_accuracy``; ``complete``: it ran all ``K`` steps)."""
    steps = history.eval_array("step")
    relin = [int(s) for s in history.relin_steps]
    last = int(steps[-1]) if steps.size else 0
    ends = relin + ([last] if not relin or relin[-1] < last else [])
    out, start = [], 0
    for end in ends:
        # the evaluation at a relinearisation step comes after it (the new linearisation): exclude it
        inside = np.flatnonzero((steps > start) & ((steps < end) if end in relin else (steps <= end)))
        if inside.size:
            i = inside[-1]
            tr = float(history.eval_array("train/accuracy_lin")[i])
            out.append({"start": start, "end": end, "eval_step": int(steps[i]), "train_lin": tr,
                        "test_lin": float(history.eval_array("test/accuracy_lin")[i]),
                        "solved": tr >= float(solved_accuracy), "complete": end - start == int(K)})
        start = end
    return out


def phases(rec) -> dict:
    """``{seed: phases_of(...)}`` for the Adam-solved runs of a record."""
    r = rec.settings
    return {row["seed"]: phases_of(rec.history(row["tag"]), int(r.K), float(r.solved_accuracy))
            for row in rows(rec) if row["setting"] == solved_tag(r.K)}


def phase_rows(by_seed: dict) -> list:
    """Rows of the phase table: per phase, its steps and per seed the train accuracy of the
    linearised model at its last evaluation (``not solved`` marked)."""
    cell = lambda ph: pct(ph["train_lin"]) + ("" if ph["solved"] else " (not solved)")
    longest = max(by_seed.values(), key=len, default=[])
    return [{"phase": i + 1, "steps": f"{ph['start']:,}-{ph['end']:,}",
             **{f"seed {s}": cell(by_seed[s][i]) if i < len(by_seed[s]) else "—" for s in sorted(by_seed)}}
            for i, ph in enumerate(longest)]


def claims(rec) -> list:
    """Fig. 8's claims on a record: :func:`judge_rows` on its rows and phases."""
    r = rec.settings
    return judge_rows(rows(rec), phases(rec), n_test=S.n_test_judged(vars(r)), margin=float(r.close_margin),
                      solved_accuracy=float(r.solved_accuracy), K=int(r.K))


def judge_rows(rows_, by_seed: dict, *, n_test: int, margin: float, solved_accuracy: float, K: int) -> list:
    """Fig. 8's claims, a pure function of the rows and phases: ``phases.solved`` (stated, the
    premise) every complete phase of every seed was solved; ``solved.below_sgd`` (headline) the
    Adam-solved run ends below K=1 SGD; ``adam.not_cause`` plain Adam ends no more than
    ``margin`` below SGD; ``solved.below_adam`` the Adam-solved run ends below plain Adam."""
    complete = [p for ph in by_seed.values() for p in ph if p["complete"]]
    solved_n = sum(p["solved"] for p in complete)
    lowest = min((p["train_lin"] for p in complete), default=math.nan)
    out = [V.stated(
        "phases.solved", "each linearisation is solved before relinearising",
        "K large enough to reach 100% train accuracy each time",
        f"{solved_n} of {len(complete)} complete phases (all seeds) reached {pct(solved_accuracy, 0)} train accuracy "
        f"of the linearised model; lowest {pct(lowest)}",
        V.HOLDS if complete and solved_n == len(complete) else V.FAILS)]
    runs = {t: R.select(rows_, setting=s) for t, s in (("SGD", "SGD K=1"), ("Adam", "Adam K=1"),
                                                        ("Adam-solved", solved_tag(K)))}
    solved, sgd, adam = (pct(S.PAPER[k], d) for k, d in (("fig8_adam_solved", 1), ("fig8_sgd", 1), ("fig8_adam", 0)))
    for id_, claim, paper, a, b, m in (
            ("solved.below_sgd", "solving each linearisation generalises worse than K=1 SGD",
             f"Adam-solved {solved} vs SGD {sgd}: {pts(S.PAPER['fig8_adam_solved'] - S.PAPER['fig8_sgd'])}",
             "SGD", "Adam-solved", 0.0),
            ("adam.not_cause", f"plain Adam is not the cause: it ends no more than {100 * margin:g} points below "
             "SGD", f"Adam over {adam} vs SGD {sgd}", "Adam", "SGD", -margin),
            ("solved.below_adam", "solving each linearisation generalises worse than plain Adam",
             f"{solved} vs over {adam}", "Adam", "Adam-solved", 0.0)):
        out.append(R.gap_verdict(id_, claim, paper, runs[a], runs[b], n_test=n_test, rule="exceeds", margin=m,
                                 label_a=a, label_b=b, headline=id_ == "solved.below_sgd"))
    return out


EXPERIMENT = register(Experiment(NAME, Fig8Params, run, version="3", summary=summary, claims=claims, tallies=True,
                                 pool=R.pool_seeds))

__all__ = ["EXPERIMENT", "Fig8Params", "NAME", "SCALES", "Setting", "claims", "judge_rows", "phase_rows", "phases", "phases_of",
           "rows", "solved_tag", "summary"]
