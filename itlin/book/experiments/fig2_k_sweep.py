"""Main paper Fig. 2: full-batch and mini-batch iterative linearisation over K.

Two sweeps over the relinearisation period ``K`` (``K=1``, large ``K``, ``K=inf``), trained
from one initialisation of the paper's LeNet:

* **full batch**: gradient descent on the whole training set, learning rate ``learning_rate``,
  ``steps`` steps;
* **mini-batch**: batches of ``batch_size``, with the caption's rescaling: learning rate
  divided by ``rescale`` (10), ``K`` and the number of steps multiplied by ``rescale``, so the
  relinearisations fall at the same "time" ``learning rate x steps`` in both sweeps.

Plus one control run (full batch): ``K=inf`` at ``inf_lr_multiplier`` times the learning rate,
to see whether ``K=inf`` falls short because it trains slowly or because its features are fixed
(the paper's Fig. 5 makes the same check).

The caption says that "the steps of the full batch runs are similarly scaled down by a factor of
10 for the comparison plot". Read literally (full-batch step ``s`` drawn at ``s / 10``) that
would misalign the two sweeps by a factor of 100; the rescaling that lines them up is
full-batch step ``s`` against mini-batch step ``10 s``. :func:`figure` draws the comparison on
the full-batch step axis with the mini-batch steps divided by ``rescale``, which is that
alignment (the two sweeps' relinearisations coincide).

Sizes default from ``scale`` (``None`` means "from scale"; see :data:`SCALES`). The default scale
trains on a class-balanced 1000-example subset of MNIST-1D for both sweeps (a full-batch step on
all 4000 signals costs about 4 times as much), with 16 channels instead of 50, and uses
heavy-ball momentum 0.9 at a larger learning rate: plain gradient descent fast enough for a CPU
budget put large-``K`` runs past the edge of stability (see the chapter ``book/k_sweeps.md``).
"""

from __future__ import annotations

import math

import numpy as np

from dataclasses import dataclass
from typing import Optional

from . import Experiment, Period, param, register
from . import _sparse as S

NAME = "fig2_k_sweep"

#: size-like defaults per scale (the experiment's version includes a digest of this table)
SCALES = {
    "tiny": {"n_train": 256, "n_test": 200, "n_eval_train": 256, "channels": 4, "Ks": [1, 10, math.inf],
             "mini_Ks": [1, 10], "steps": 40, "eval_every": 5, "learning_rate": 1e-2, "momentum": 0.9, "seeds": 2},
    # five seeds within the CPU budget: one large K, 400 full-batch steps, and the mini-batch
    # sweep for K=1 and the large K only (its K=inf, five runs of 4000 steps, would add about
    # 70 s to a chapter already near the budget; mini_Ks=[1, 100, "inf"] restores it). Final
    # accuracies on 15,000 generated test signals (_sparse.MNIST1D_LARGE), curves on 1,000.
    "default": {"n_train": 1000, "n_test": 1000, "n_eval_train": 1000, "channels": 16,
                "Ks": [1, 100, math.inf], "mini_Ks": [1, 100], "steps": 400, "eval_every": 20,
                "learning_rate": 1e-2, "momentum": 0.9, "seeds": 5, "n_test_final": 15_000},
    # The paper: full batch lr 1e-3, mini-batch 1e-4, K x10 (Fig. 2 caption), 50 channels. It
    # states neither its K values nor its step counts for Fig. 2: we take K up to 5e4 (x10 = 5e5
    # in mini-batch, the lr*K of Fig. 3's 5e6 at lr 1e-5) and ten times the largest K as steps.
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50,
              "Ks": [1, 10_000, 50_000, math.inf], "mini_Ks": [1, 10_000, 50_000, math.inf], "steps": 500_000,
              "eval_every": 1_000, "learning_rate": 1e-3, "momentum": 0.0, "seeds": 3},
}


def tag(sweep: str, K, control: bool = False) -> str:
    """``"full K=150"``, ``"mini K=1500"``, ``"full K=inf lr x10"``."""
    return f"{sweep} K={S.fmt_K(K)}" + (" lr x10" if control else "")


@dataclass(frozen=True)
class Fig2Params(S.SparseParams):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "full-batch periods K (K=1 and 'inf' included); mini-batch "
                                                   "uses K x rescale; None: from scale")
    mini_Ks: Optional[tuple[Period, ...]] = param(None, "the full-batch periods (among Ks) whose mini-batch run "
                                                        "(K x rescale) is made; None: from scale")
    steps: Optional[int] = param(None, "full-batch steps (mini-batch: x rescale); None: from scale", min=1)
    learning_rate: Optional[float] = param(None, "full-batch learning rate (mini-batch: / rescale); None: from "
                                                 "scale", gt=0)
    momentum: Optional[float] = param(None, "heavy-ball momentum of SGD, 0 for plain SGD; None: from scale "
                                            "(default 0.9, paper 0)", min=0, max=0.999)
    rescale: int = param(10, "mini-batch: learning rate / rescale, K and steps x rescale", min=1)
    batch_size: int = param(256, "mini-batch size", min=1)
    inf_lr_multiplier: float = param(10.0, "control run K=inf (full batch) at this multiple of the learning "
                                           "rate; 0 skips it", min=0)

    def check(self):
        r = self.resolved()
        S.check_periods(r, "the gradient-descent baseline every claim compares with")
        missing = [K for K in r["mini_Ks"] if K not in r["Ks"]]
        if missing:
            raise ValueError(f"mini_Ks must be among Ks (full-batch periods); {missing} are not in Ks={r['Ks']}")


def run(p, ctx):
    from ...core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    setup = S.prepare(r, batch_size=r["batch_size"])
    ds, model, evals = setup.ds, setup.model, setup.evals
    f = int(r["rescale"])
    runs = {}

    def train(name, sweep, K, lr, steps, eval_every, batch_size, control=False):
        trainer = iterative_linearisation(model, S.sgd(lr, r["momentum"]), S.schedule(K, steps))
        info = {"sweep": sweep, "K": K, "learning_rate": lr, "steps": steps, "batch_size": batch_size,
                "control": control}
        S.fit_seeds(ctx, name, trainer, setup, r, steps, info, batch_size=batch_size, eval_every=eval_every,
                    runs=runs)

    for K in r["Ks"]:
        train(tag("full", K), "full", K, r["learning_rate"], r["steps"], r["eval_every"], None)
    if r["inf_lr_multiplier"]:
        train(tag("full", math.inf, True), "full", math.inf, r["learning_rate"] * r["inf_lr_multiplier"],
              r["steps"], r["eval_every"], None, control=True)
    for K in r["mini_Ks"]:
        K_mb = K if K == 1 else K * f
        train(tag("mini", K_mb), "mini", K_mb, r["learning_rate"] / f, r["steps"] * f, r["eval_every"] * f,
              r["batch_size"])

    resolved = {k: r[k] for k in ("dataset", "n_train", "n_test", "n_eval_train", "channels", "Ks", "mini_Ks",
                                  "steps", "eval_every", "learning_rate", "momentum", "batch_size", "rescale",
                                  "inf_lr_multiplier", "seed", "seeds", "close_margin", "blowup", "scale")}
    resolved["n_test_final"] = int(setup.final[0].shape[0]) if setup.final is not None else None
    resolved.update(n_train=ds.n_train, n_test=ds.n_test, n_eval_train=len(evals["train"][0]),
                    minibatch_learning_rate=r["learning_rate"] / f, minibatch_steps=r["steps"] * f,
                    minibatch_Ks=[K if K == 1 else K * f for K in r["mini_Ks"]])
    return {"meta": {"resolved": resolved, "runs": runs, **S.data_meta(ds, model)}}


EXPERIMENT = register(Experiment(
    NAME, Fig2Params, run, version="2",
    doc="Main paper Fig. 2: full-batch and mini-batch sweeps over K (K=1, large K, K=inf) with the LeNet, "
        "mini-batch at learning rate /10 and K x10."))


# ------------------------------------------------------------------------------ for the chapter
def resolved(rec) -> dict:
    """The parameters the run used (scale defaults filled in)."""
    return dict(rec.meta["resolved"])


def summary(rec) -> list:
    """One row per training run (a sweep, a K and a seed): see :func:`itlin.book.experiments._sparse.rows_of`."""
    rows = S.rows_of(rec)
    for row in rows:
        row["learning_rate"] = float(row["learning_rate"])
        row["control"] = bool(row["control"])
    return rows


def settings_of(rows) -> list:
    """The distinct (sweep, K, control) settings, full batch first, in increasing K."""
    keys = {(r["sweep"], r["K"], r["control"]) for r in rows}
    return sorted(keys, key=lambda k: (k[0] != "full", k[2], k[1]))


def summary_markdown(rows, inf_lr_multiplier: float = 10.0) -> str:
    """Per sweep and K: learning rate, feature updates, the final accuracies over seeds."""
    from .. import verdicts as V

    out = []
    for sweep, K, control in settings_of(rows):
        g = S.select(rows, sweep=sweep, K=K, control=control)
        done = [r for r in g if r["status"] == "completed"]
        col = lambda key: V.fmt_mean([r[key] for r in done]) if done else "n/a"
        what = S.K_label(K) + (f", lr x{inf_lr_multiplier:g}" if control else "")
        out.append([sweep, what, f"{g[0]['learning_rate']:g}", f"{g[0]['updates']:,}", col("test"), col("test_net"),
                    col("train"), f"{len(done)} of {len(g)} completed"])
    return S.table_markdown(["sweep", "run", "learning rate", "feature updates", "test acc. (trained model)",
                             "test acc. (network)", "train acc. (trained model)", "seeds"], out)


def claims(rows, *, n_test: int, margin: float, rescale: int, inf_lr_multiplier: float = 10.0) -> list:
    """The paper's claims for Fig. 2, judged over seeds on the final test accuracy of the model
    being trained (for K=1 the network itself); a pure function of the summary rows.

    For each sweep: (1) the largest finite K ends within ``margin`` of K=1 (an equivalence
    test); (2) K=inf ends below K=1; (3) the control K=inf at a larger learning rate still ends
    below K=1; (4) for each K run in both sweeps, mini-batch (K x rescale) ends within ``margin``
    of full batch.
    """
    out = []
    pick = lambda **m: S.select(rows, **m)
    for sweep, name in (("full", "full batch"), ("mini", "mini-batch")):
        base = pick(sweep=sweep, K=1, control=False)
        if not base:
            continue
        finite = sorted({r["K"] for r in rows if r["sweep"] == sweep and not r["control"]
                         and math.isfinite(r["K"]) and r["K"] > 1})
        if finite:
            big = pick(sweep=sweep, K=finite[-1], control=False)
            out.append(S.gap_verdict(
                f"{name}: the largest finite K ends close to K=1", "large K ends close to K=1 after a few feature "
                "updates", big, base, n_test=n_test, rule="close", margin=margin,
                label_a=f"{S.K_label(finite[-1])} ({big[0]['updates']} feature updates)", label_b="K=1"))
        inf = pick(sweep=sweep, K=math.inf, control=False)
        if inf:
            out.append(S.gap_verdict(f"{name}: K=∞ (no feature learning) falls short", "K=∞ generalises clearly "
                                     "worse", base, inf, n_test=n_test, rule="exceeds", margin=0.0, label_a="K=1",
                                     label_b="K=∞"))
    ctl = pick(control=True)
    base = pick(sweep="full", K=1, control=False)
    if ctl and base:
        out.append(S.gap_verdict(
            f"full batch: K=∞ falls short even at {inf_lr_multiplier:g}x the learning rate",
            "Fig. 5: K=∞ at a higher learning rate still scales worse", base, ctl, n_test=n_test, rule="exceeds",
            margin=0.0, label_a="K=1", label_b=f"K=∞ at lr x{inf_lr_multiplier:g}"))
    for K in sorted({r["K"] for r in rows if r["sweep"] == "full" and not r["control"]}):
        K_mb = K if K == 1 else K * rescale
        full, mini = pick(sweep="full", K=K, control=False), pick(sweep="mini", K=K_mb, control=False)
        if full and mini:
            out.append(S.gap_verdict(
                f"{S.K_label(K)}: mini-batch (lr /{rescale}, K x{rescale}) ends where full batch does",
                "very little changes from full batch to mini-batch", mini, full, n_test=n_test, rule="close",
                margin=margin, label_a=f"mini {S.K_label(K_mb)}", label_b=f"full {S.K_label(K)}"))
    return out


def phase_starts(histories, metric: str = "test/accuracy_lin") -> np.ndarray:
    """The mean over seeds of ``metric`` at the first evaluation of each phase (at step 0 and
    right after each relinearisation): where each new linearisation starts."""
    starts = []
    for h in histories:
        steps, vals = h.eval_array("step"), h.eval_array(metric)
        marks = [0] + [int(s) for s in h.relin_steps]
        starts.append([float(vals[np.searchsorted(steps, m)]) if np.searchsorted(steps, m) < steps.size
                       else np.nan for m in marks])
    n = min(len(v) for v in starts) if starts else 0
    return np.nanmean(np.asarray([v[:n] for v in starts]), axis=0) if n else np.zeros(0)


def late_gain(histories, metric: str = "test/accuracy_lin") -> float:
    """The mean over seeds of :func:`itlin.book.experiments._sparse.late_gain`: how much the run
    was still gaining over its last fifth."""
    return float(np.nanmean([S.late_gain(h, metric) for h in histories])) if histories else math.nan


def claims_of(rec) -> list:
    """:func:`claims` on a record."""
    r = resolved(rec)
    return claims(summary(rec), n_test=S.n_test_judged(r), margin=float(r.get("close_margin", 0.02)),
                  rescale=int(r["rescale"]), inf_lr_multiplier=float(r["inf_lr_multiplier"]))


def figure(rec):
    """Two rows: full batch and mini-batch (top), and the two overlaid on the full-batch step axis
    (mini-batch steps / rescale; bottom). Curves are the mean test accuracy of the model being
    trained over seeds, with a band from the lowest to the highest seed; legends count each
    run's feature updates; ticks along the bottom mark its relinearisations."""
    import matplotlib.pyplot as plt

    from ..plotting import COLUMN_WIDTH

    rows = summary(rec)
    f = int(rec.meta["resolved"]["rescale"])
    mult = rec.meta["resolved"]["inf_lr_multiplier"]
    fig = plt.figure(figsize=(COLUMN_WIDTH, 7.4))
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])]
    axes[1].sharey(axes[0])
    colours = S.colours(r["K"] for r in rows if r["sweep"] == "full" and not r["control"])
    hist = lambda g: [rec.history(r["tag"]) for r in g]
    for ax, sweep, title in ((axes[0], "full", "full batch"), (axes[1], "mini", "mini-batch")):
        for sw, K, control in settings_of(rows):
            if sw != sweep:
                continue
            g = S.select(rows, sweep=sw, K=K, control=control)
            K_fb = K if (sweep == "full" or K == 1) else K / f
            colour = "0.25" if control else colours.get(K_fb)
            extra = f", lr x{mult:g}" if control else ""
            S.seed_band(ax, hist(g), "test/accuracy_lin", color=colour, linestyle=":" if control else "-",
                        label=S.legend_label(K, g[0]["updates"], extra), lw=1.6)
            S.relin_marks(ax, hist(g)[0], color=colour)
        g0 = S.select(rows, sweep=sweep)
        if g0:
            ax.set_title(f"{title} (learning rate {g0[0]['learning_rate']:g})")
        ax.set_xlabel("step")
        ax.legend(loc="lower right")
    ax = axes[2]
    for sw, K, control in settings_of(rows):
        if control:
            continue
        g = S.select(rows, sweep=sw, K=K, control=False)
        K_fb = K if (sw == "full" or K == 1) else K / f
        scale = 1.0 if sw == "full" else float(f)
        hs = hist(g)
        label = None
        if sw == "full":
            K_mb = K_fb if K_fb == 1 else K_fb * f
            mb = S.select(rows, sweep="mini", K=K_mb, control=False)
            label = f"{S.K_label(K_fb)} full" + (
                f" / {S.K_label(K_mb)} mini: {g[0]['updates']:,} / {mb[0]['updates']:,} feature updates" if mb else
                f": {g[0]['updates']:,} feature updates")
        scaled = [type(h).from_arrays({**h.arrays(), "eval/step": h.eval_array("step") / scale}, h.meta()) for h in hs]
        S.seed_band(ax, scaled, "test/accuracy_lin", color=colours.get(K_fb), lw=1.4 if sw == "full" else 2.6,
                    alpha=0.12, label=label)
    ax.plot([], [], color="0.3", lw=1.4, label="thin: full batch")
    ax.plot([], [], color="0.3", lw=2.6, label=f"wide: mini-batch, steps / {f}")
    ax.set_title("full vs mini-batch, aligned")
    ax.set_xlabel(f"full-batch step = mini-batch step / {f}")
    ax.legend(loc="lower right")
    axes[0].set_ylabel("test accuracy (model being trained)")
    axes[2].set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


def paper_settings() -> dict:
    """The ``scale="paper"`` parameters on CIFAR-10, resolved without running or loading anything."""
    return S.resolve(EXPERIMENT.resolve({"scale": "paper", "dataset": "cifar10"}), SCALES)


def settings_markdown(rec, seeds=None) -> str:
    """This run's settings beside the paper-scale ones, and where each paper-scale value comes from."""
    r, pp = resolved(rec), paper_settings()
    f, fp = int(r["rescale"]), int(pp["rescale"])
    mb = lambda Ks, k: [K if S.as_K(K) in (1.0, math.inf) else K * k for K in Ks]
    net = lambda d, c: f"LeNet-{'2D' if d in S.IMAGE_DATASETS else '1D'}, {c} channels"
    rows = [
        ("dataset", r["dataset"], pp["dataset"], "Section 4"),
        ("network", net(r["dataset"], r["channels"]), net(pp["dataset"], pp["channels"]), "Appendix C"),
        ("training examples (both sweeps)", r["n_train"], pp["n_train"], "the whole training set"),
        ("test examples (final accuracies, verdicts)", S.n_test_judged(r), pp["n_test"],
         "the whole test set (MNIST-1D here: generated larger, see _sparse.MNIST1D_LARGE)"),
        ("test examples (curves)", r["n_test"], pp["n_test"], "the whole test set"),
        ("full-batch learning rate", r["learning_rate"], pp["learning_rate"], "Fig. 2 caption"),
        ("mini-batch learning rate", r["learning_rate"] / f, pp["learning_rate"] / fp, "Fig. 2 caption (/10)"),
        ("momentum", r["momentum"], pp["momentum"], "our choice: none stated (Algorithm 1 is plain gradient descent)"),
        ("full-batch K", r["Ks"], pp["Ks"], "our choice: not stated (largest learning rate x K as in Fig. 3)"),
        ("mini-batch K", mb(r.get("mini_Ks", r["Ks"]), f), mb(pp["mini_Ks"], fp), "Fig. 2 caption (x10)"),
        ("full-batch steps", r["steps"], pp["steps"], "our choice: not stated (10 x the largest K)"),
        ("mini-batch steps", r["steps"] * f, pp["steps"] * fp, "x10, the same learning rate x steps"),
        ("mini-batch size", r["batch_size"], pp["batch_size"], "Appendix C"),
        ("evaluation every (full / mini steps)", f"{r['eval_every']:,} / {r['eval_every'] * f:,}",
         f"{pp['eval_every']:,} / {pp['eval_every'] * fp:,}", "our choice"),
        ("control: K=∞ at a larger learning rate", f"x{r['inf_lr_multiplier']:g}", f"x{pp['inf_lr_multiplier']:g}",
         "our addition (as in Fig. 5)"),
        ("seeds", seeds or r.get("seeds", 1), pp["seeds"], "our choice: the paper reports one run"),
    ]
    return S.settings_markdown(rows)


def claims_markdown(rec_or_rows, **kw) -> str:
    """The verdicts as a Markdown table, followed by a one-sentence bottom line (a record, or
    rows with :func:`claims`'s keyword arguments)."""
    from .. import verdicts as V

    c = claims_of(rec_or_rows) if hasattr(rec_or_rows, "meta") else claims(rec_or_rows, **kw)
    return V.verdicts_markdown(c) + "\n\n" + V.bottom_line(c)
