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

from dataclasses import dataclass
from typing import Optional

from . import Experiment, Period, param, register
from . import _sparse as S

NAME = "fig2_k_sweep"

#: size-like defaults per scale (the experiment's version includes a digest of this table)
SCALES = {
    "tiny": {"n_train": 256, "n_test": 200, "n_eval_train": 256, "channels": 4, "Ks": [1, 10, math.inf],
             "steps": 40, "eval_every": 5, "learning_rate": 1e-2, "momentum": 0.9},
    "default": {"n_train": 1000, "n_test": 1000, "n_eval_train": 1000, "channels": 16,
                "Ks": [1, 40, 150, math.inf], "steps": 600, "eval_every": 10, "learning_rate": 1e-2,
                "momentum": 0.9},
    # The paper: full batch lr 1e-3, mini-batch 1e-4, K x10 (Fig. 2 caption), 50 channels. It
    # states neither its K values nor its step counts for Fig. 2: we take K up to 5e4 (x10 = 5e5
    # in mini-batch, the lr*K of Fig. 3's 5e6 at lr 1e-5) and ten times the largest K as steps.
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50,
              "Ks": [1, 10_000, 50_000, math.inf], "steps": 500_000, "eval_every": 1_000,
              "learning_rate": 1e-3, "momentum": 0.0},
}


def tag(sweep: str, K, control: bool = False) -> str:
    """``"full K=150"``, ``"mini K=1500"``, ``"full K=inf lr x10"``."""
    return f"{sweep} K={S.fmt_K(K)}" + (" lr x10" if control else "")


@dataclass(frozen=True)
class Fig2Params(S.SparseParams):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "full-batch periods K (K=1 and 'inf' included); mini-batch "
                                                   "uses K x rescale; None: from scale")
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
        S.check_periods(self.resolved(), "the gradient-descent baseline every claim compares with")


def run(p, ctx):
    from ...core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    ds, model, params, model_state, evals, x, y = S.prepare(r, batch_size=r["batch_size"])
    f = int(r["rescale"])
    runs = {}

    def train(name, sweep, K, lr, steps, eval_every, batch_size, control=False):
        trainer = iterative_linearisation(model, S.sgd(lr, r["momentum"]), S.schedule(K, steps))
        ctx.fit(name, trainer, trainer.init(params, model_state), x, y, steps, batch_size=batch_size,
                eval_sets=evals, eval_every=eval_every, seed=r["seed"])
        runs[name] = {"sweep": sweep, "K": K, "learning_rate": lr, "steps": steps, "batch_size": batch_size,
                      "control": control}

    for K in r["Ks"]:
        train(tag("full", K), "full", K, r["learning_rate"], r["steps"], r["eval_every"], None)
    if r["inf_lr_multiplier"]:
        train(tag("full", math.inf, True), "full", math.inf, r["learning_rate"] * r["inf_lr_multiplier"],
              r["steps"], r["eval_every"], None, control=True)
    for K in r["Ks"]:
        K_mb = K if K == 1 else K * f
        train(tag("mini", K_mb), "mini", K_mb, r["learning_rate"] / f, r["steps"] * f, r["eval_every"] * f,
              r["batch_size"])

    resolved = {k: r[k] for k in ("dataset", "n_train", "n_test", "n_eval_train", "channels", "Ks", "steps",
                                  "eval_every", "learning_rate", "momentum", "batch_size", "rescale",
                                  "inf_lr_multiplier", "seed", "scale")}
    resolved.update(n_train=ds.n_train, n_test=ds.n_test, n_eval_train=len(evals["train"][0]),
                    minibatch_learning_rate=r["learning_rate"] / f, minibatch_steps=r["steps"] * f,
                    minibatch_Ks=[K if K == 1 else K * f for K in r["Ks"]])
    return {"meta": {"resolved": resolved, "runs": runs, **S.data_meta(ds, model)}}


EXPERIMENT = register(Experiment(
    NAME, Fig2Params, run, version="1",
    doc="Main paper Fig. 2: full-batch and mini-batch sweeps over K (K=1, large K, K=inf) with the LeNet, "
        "mini-batch at learning rate /10 and K x10."))


# ------------------------------------------------------------------------------ for the chapter
def resolved(rec) -> dict:
    """The parameters the run used (scale defaults filled in)."""
    return dict(rec.meta["resolved"])


def summary(rec) -> list:
    """One dict per training run: sweep, K, learning rate, feature updates, final accuracies
    (see :func:`itlin.book.experiments._sparse.run_summary`)."""
    out = []
    for name, info in rec.meta["runs"].items():
        s = S.run_summary(rec, name)
        s.update(sweep=info["sweep"], K=S.as_K(info["K"]), learning_rate=float(info["learning_rate"]),
                 control=bool(info["control"]))
        out.append(s)
    return out


def summary_markdown(rec) -> str:
    rows = []
    for s in summary(rec):
        what = S.K_label(s["K"]) + (f", lr x{rec.meta['resolved']['inf_lr_multiplier']:g}" if s["control"] else "")
        rows.append([s["sweep"], what, f"{s['learning_rate']:g}", f"{s['updates']:,}", S.pct(s["test"]),
                     S.pct(s["test_net"]), S.pct(s["train"]), s["status"]])
    return S.table_markdown(["sweep", "run", "learning rate", "feature updates", "test acc. (trained model)",
                             "test acc. (network)", "train acc. (trained model)", "status"], rows)


def claims(rec) -> list:
    """The paper's claims for Fig. 2, judged on this record's final numbers.

    For each sweep: (1) the largest finite K ends within the noise tolerance of K=1
    (:func:`itlin.book.experiments._sparse.tolerance`, two standard errors); (2) K=inf ends more
    than the tolerance below K=1; plus (3) the control K=inf at a larger learning rate still
    falls short, and (4) the two sweeps end within the tolerance of each other for every K.
    Accuracies are those of the model being trained (for K=1 the network itself).
    """
    rows = summary(rec)
    n_test = int(rec.meta["resolved"]["n_test"])
    out = []
    by = {(s["sweep"], s["K"], s["control"]): s for s in rows}
    for sweep, name in (("full", "full batch"), ("mini", "mini-batch")):
        base = by.get((sweep, 1.0, False))
        if base is None:
            continue
        tol = S.tolerance(base["test"], n_test)
        finite = sorted(s["K"] for s in rows if s["sweep"] == sweep and not s["control"]
                        and math.isfinite(s["K"]) and s["K"] > 1)
        if finite:
            big = by[(sweep, finite[-1], False)]
            gap = base["test"] - big["test"]
            ok = None if not math.isfinite(gap) else (gap <= tol and big["status"] == "completed")
            rise = S.late_gain(rec.history(big["tag"]))
            out.append(S.claim(
                f"{name}: the largest finite K catches up with K=1",
                "large K ends close to K=1 after a few feature updates",
                f"K=1 {S.pct(base['test'])}, {S.K_label(big['K'])} {S.pct(big['test'])} (network "
                f"{S.pct(big['test_net'])}) after {big['updates']} feature updates{S.status_note(big)}: "
                f"gap {S.pts(gap)}",
                ok, f"tolerance {100 * tol:.1f} points; over the last fifth of the run "
                    f"{S.K_label(big['K'])} gained {S.pts(rise)}"))
        inf = by.get((sweep, math.inf, False))
        if inf is not None:
            short = base["test"] - inf["test"]
            out.append(S.claim(
                f"{name}: K=∞ (no feature learning) falls short",
                "K=∞ generalises clearly worse",
                f"K=∞ {S.pct(inf['test'])} (train {S.pct(inf['train'])}): {S.pts(-short)} against K=1",
                None if not math.isfinite(short) else bool(short > tol), f"tolerance {100 * tol:.1f} points"))
    ctl = next((s for s in rows if s["control"]), None)
    base = by.get(("full", 1.0, False))
    if ctl is not None and base is not None:
        tol = S.tolerance(base["test"], n_test)
        short = base["test"] - ctl["test"]
        mult = rec.meta["resolved"]["inf_lr_multiplier"]
        out.append(S.claim(
            f"full batch: K=∞ falls short even at {mult:g}x the learning rate",
            "Fig. 5: K=∞ at a higher learning rate still scales worse",
            f"K=∞ at lr {ctl['learning_rate']:g}: {S.pct(ctl['test'])} (train {S.pct(ctl['train'])}), "
            f"{S.pts(-short)} against K=1",
            None if not math.isfinite(short) else bool(short > tol), f"tolerance {100 * tol:.1f} points"))
    f = int(rec.meta["resolved"]["rescale"])
    pairs = []
    for s in rows:
        if s["sweep"] != "full" or s["control"]:
            continue
        K_mb = s["K"] if s["K"] == 1 else s["K"] * f
        m = by.get(("mini", K_mb, False))
        if m is not None:
            pairs.append((s, m))
    if pairs:
        diffs = [m["test"] - s["test"] for s, m in pairs]
        tols = [S.tolerance(s["test"], n_test) for s, _ in pairs]
        ok = all(math.isfinite(d) and abs(d) <= t for d, t in zip(diffs, tols))
        out.append(S.claim(
            "mini-batch (lr /10, K x10) ends where full batch does",
            "very little changes from full batch to mini-batch",
            ", ".join(f"{S.K_label(s['K'])}: {S.pts(d)}" for (s, _), d in zip(pairs, diffs)),
            ok, f"tolerance {100 * max(tols):.1f} points"))
    return out


def figure(rec):
    """Three panels: full batch, mini-batch (test accuracy of the model being trained against
    steps) and the two overlaid on the full-batch step axis (mini-batch steps / rescale). Legends
    count each run's feature updates; ticks along the bottom mark its relinearisations."""
    import matplotlib.pyplot as plt

    from ..plotting import plot_curve

    rows = summary(rec)
    f = int(rec.meta["resolved"]["rescale"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    colours = S.colours(s["K"] for s in rows if s["sweep"] == "full" and not s["control"])
    for ax, sweep, title in ((axes[0], "full", "full batch"), (axes[1], "mini", "mini-batch")):
        for s in rows:
            if s["sweep"] != sweep:
                continue
            K_fb = s["K"] if (sweep == "full" or s["K"] == 1) else s["K"] / f
            h = rec.history(s["tag"])
            colour = "0.25" if s["control"] else colours.get(K_fb)
            extra = f", lr x{rec.meta['resolved']['inf_lr_multiplier']:g}" if s["control"] else ""
            plot_curve(ax, h.eval_array("step"), h.eval_array("test/accuracy_lin"), status=s["status"],
                       diverged_at=s["diverged_at"], label=S.legend_label(s["K"], s["updates"], extra),
                       color=colour, linestyle=":" if s["control"] else "-", lw=1.6)
            S.relin_marks(ax, h, color=colour)
        lr = rows[[s["sweep"] for s in rows].index(sweep)]["learning_rate"]
        ax.set_title(f"{title} (learning rate {lr:g})")
        ax.set_xlabel("step")
        ax.legend(fontsize=8, loc="lower right")
    ax = axes[2]
    for s in rows:
        if s["control"]:
            continue
        h = rec.history(s["tag"])
        K_fb = s["K"] if (s["sweep"] == "full" or s["K"] == 1) else s["K"] / f
        scale = 1.0 if s["sweep"] == "full" else float(f)
        label = None
        if s["sweep"] == "full":
            K_mb = K_fb if K_fb == 1 else K_fb * f
            mb = next((m for m in rows if m["sweep"] == "mini" and m["K"] == K_mb), None)
            label = f"{S.K_label(K_fb)} full" + (
                f" / {S.K_label(K_mb)} mini: {s['updates']:,} / {mb['updates']:,} feature updates" if mb else
                f": {s['updates']:,} feature updates")
        plot_curve(ax, h.eval_array("step") / scale, h.eval_array("test/accuracy_lin"), status=s["status"],
                   diverged_at=s["diverged_at"], color=colours.get(K_fb), lw=1.4 if s["sweep"] == "full" else 2.4,
                   alpha=1.0 if s["sweep"] == "full" else 0.45, label=label)
        if s["sweep"] == "full":
            S.relin_marks(ax, h, color=colours.get(K_fb))
    ax.plot([], [], color="0.3", lw=1.4, label="thin: full batch")
    ax.plot([], [], color="0.3", lw=2.4, alpha=0.45, label=f"wide: mini-batch, steps / {f}")
    ax.set_title("full vs mini-batch, aligned")
    ax.set_xlabel(f"full-batch step = mini-batch step / {f}")
    ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("test accuracy of the model being trained")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig



def paper_settings() -> dict:
    """The ``scale="paper"`` parameters on CIFAR-10, resolved without running or loading anything."""
    return S.resolve(EXPERIMENT.resolve({"scale": "paper", "dataset": "cifar10"}), SCALES)


def settings_markdown(rec) -> str:
    """This run's settings beside the paper-scale ones, and where each paper-scale value comes from."""
    r, pp = resolved(rec), paper_settings()
    f, fp = int(r["rescale"]), int(pp["rescale"])
    mb = lambda Ks, k: [K if S.as_K(K) in (1.0, math.inf) else K * k for K in Ks]
    net = lambda d, c: f"LeNet-{'2D' if d in S.IMAGE_DATASETS else '1D'}, {c} channels"
    rows = [
        ("dataset", r["dataset"], pp["dataset"], "Section 4"),
        ("network", net(r["dataset"], r["channels"]), net(pp["dataset"], pp["channels"]), "Appendix C"),
        ("training examples (both sweeps)", r["n_train"], pp["n_train"], "the whole training set"),
        ("test examples", r["n_test"], pp["n_test"], "the whole test set"),
        ("full-batch learning rate", r["learning_rate"], pp["learning_rate"], "Fig. 2 caption"),
        ("mini-batch learning rate", r["learning_rate"] / f, pp["learning_rate"] / fp, "Fig. 2 caption (/10)"),
        ("momentum", r["momentum"], pp["momentum"], "our choice: none stated (Algorithm 1 is plain gradient descent)"),
        ("full-batch K", r["Ks"], pp["Ks"], "our choice: not stated (largest learning rate x K as in Fig. 3)"),
        ("mini-batch K", mb(r["Ks"], f), mb(pp["Ks"], fp), "Fig. 2 caption (x10)"),
        ("full-batch steps", r["steps"], pp["steps"], "our choice: not stated (10 x the largest K)"),
        ("mini-batch steps", r["steps"] * f, pp["steps"] * fp, "x10, the same learning rate x steps"),
        ("mini-batch size", r["batch_size"], pp["batch_size"], "Appendix C"),
        ("evaluation every (full / mini steps)", f"{r['eval_every']:,} / {r['eval_every'] * f:,}",
         f"{pp['eval_every']:,} / {pp['eval_every'] * fp:,}", "our choice"),
        ("control: K=∞ at a larger learning rate", f"x{r['inf_lr_multiplier']:g}", f"x{pp['inf_lr_multiplier']:g}",
         "our addition (as in Fig. 5)"),
    ]
    return S.settings_markdown(rows)


def claims_markdown(rec) -> str:
    """The claims as a Markdown table, followed by a one-sentence bottom line."""
    c = claims(rec)
    return S.claims_markdown(c) + "\n\n" + S.bottom_line(c)
