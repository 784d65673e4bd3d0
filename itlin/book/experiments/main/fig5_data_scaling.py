"""Main paper Fig. 5: how test accuracy grows with the training-set size, for K=1, a large K and K=inf.

The paper's LeNet (1-D on MNIST-1D by default) is trained on nested, class-balanced subsets of the
training set of every size in ``sizes``, from several seeds (a seed fixes the subsets, the
initialisation and the batch order), in four settings:

* ``K = 1`` (SGD) and a large finite ``K`` at learning rate ``lr``;
* ``K = inf`` (the linearised network at initialisation, never relinearised) at the larger
  ``lr_inf``, as the paper did "for computational reasons";
* ``K = 1`` at ``lr_inf`` as well: the paper's control that the learning rate is not what
  separates ``K = inf`` from the rest.

A run of ``n`` examples takes ``max(min_steps, epochs * n / batch_size)`` steps, so small sets
are fitted too; the final training accuracy of every run is recorded to show whether it fitted
its training set. The accuracy a run reports is ``metric``: ``"best"``, the highest test
accuracy over its evaluations (the paper's "optimal early stopping", Appendix C), or
``"final"``. Per setting and seed the experiment's claims fit a straight line to accuracy
against ``log10(n)``: the slope is the accuracy gained per tenfold more data.

Runs of all periods share one compiled step per training-set size (:func:`fig4_resnet.period_schedule`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np

from .. import Experiment, Period, Params, param, register
from . import _sparse as S
from . import fig4_resnet as F4

NAME = "fig5_data_scaling"

#: issue 12: at least this many training-set sizes, spanning at least this factor (largest / smallest)
MIN_SIZES, MIN_SPAN = 4, 10

#: the main paper's Fig. 5 learning rates (caption)
PAPER = {"lr": 1e-5, "lr_inf": 1e-3}

SCALES = {
    "tiny": {"dataset": "mnist1d", "sizes": [64, 128, 256, 640], "n_test": 200, "channels": 4, "K": 10, "lr": 1e-2,
             "lr_inf": 1e-1,
             "momentum": 0.9, "batch_size": 32, "epochs": 2, "min_steps": 12, "n_evals": 3, "seeds": 2},
    # four sizes spanning 10x; five seeds (issue 15), bought with shorter runs than the three-seed
    # version (30 epochs, at least 300 steps, instead of 40 and 500); the chapter reports how close
    # each run came to fitting its training set
    "default": {"dataset": "mnist1d", "sizes": [400, 800, 1600, 4000], "n_test": 10 ** 9, "channels": 8, "K": 200,
                "lr": 1e-2, "lr_inf": 1e-1, "momentum": 0.9, "batch_size": 128, "epochs": 30, "min_steps": 300,
                "n_evals": 10, "seeds": 5},
    # the paper: the CIFAR-10 LeNet with 50 channels, lr 1e-5 (finite K) and 1e-3 (K=inf and the
    # control), batch 256 (Fig. 5 caption, Appendix C). Sizes and K are not stated: ours.
    "paper": {"dataset": "cifar10", "sizes": [5000, 10000, 25000, 50000], "n_test": 10 ** 9, "channels": 50,
              "K": 100_000, "lr": 1e-5,
              "lr_inf": 1e-3, "momentum": 0.0, "batch_size": 256, "epochs": 2000, "min_steps": 100_000,
              "n_evals": 50, "seeds": 3},
}


@dataclass(frozen=True)
class Fig5Params(Params):
    SCALES = SCALES

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1D LeNet); fashion_mnist or cifar10 (2D LeNet); None: from scale (mnist1d; paper: cifar10)")
    sizes: Optional[tuple[int, ...]] = param(None, "training-set sizes (nested subsets); None: from scale", min=1)
    n_test: Optional[int] = param(None, "test examples; None: from scale", min=1)
    channels: Optional[int] = param(None, "LeNet convolution channels; None: from scale (paper: 50)", min=1)
    K: Optional[Period] = param(None, "the large finite period; None: from scale")
    lr: Optional[float] = param(None, "SGD learning rate of K=1 and the large K; None: from scale (paper 1e-5)",
                                gt=0)
    lr_inf: Optional[float] = param(None, "learning rate of K=inf and of the K=1 control; None: from scale "
                                          "(paper 1e-3)", gt=0)
    momentum: Optional[float] = param(None, "heavy-ball momentum, 0 for plain SGD; None: from scale", min=0,
                                      max=0.999)
    batch_size: Optional[int] = param(None, "mini-batch size; None: from scale", min=1)
    epochs: Optional[float] = param(None, "passes over the training set per run (at least min_steps steps); "
                                          "None: from scale", gt=0)
    min_steps: Optional[int] = param(None, "fewest steps of any run; None: from scale", min=1)
    n_evals: Optional[int] = param(None, "evaluations per run (the best one is the early-stopping accuracy); "
                                         "None: from scale", min=1)
    metric: Literal["best", "final"] = param("best", "the accuracy of a run: best over its evaluations (the "
                                                     "paper's optimal early stopping) or final")
    seeds: Optional[int] = param(None, "seeds per setting (subsets, initialisation, batches); None: from scale",
                                 min=1, max=100_000)
    slope_margin: float = param(0.05, "two slopes (accuracy per tenfold data) count as close when the interval of "
                                      "their difference lies within this", gt=0, lt=1)
    blowup: float = param(100.0, "a run has diverged once its training loss exceeds this multiple of its first "
                                 "loss (or is not finite)", gt=1)

    def check(self):
        r = self.resolved()
        sizes = list(r["sizes"])
        if len(sizes) < MIN_SIZES:
            raise ValueError(f"sizes needs at least {MIN_SIZES} training-set sizes (a slope with an error, over a "
                             f"span of at least {MIN_SPAN}x), got {sizes}")
        if sorted(set(sizes)) != sizes:
            raise ValueError(f"sizes must be increasing without repeats, got {sizes}")
        if sizes[-1] < MIN_SPAN * sizes[0]:
            raise ValueError(f"sizes must span at least {MIN_SPAN}x (largest / smallest), got {sizes}: "
                             f"{sizes[-1] / sizes[0]:.3g}x")
        if r["batch_size"] > sizes[0]:
            raise ValueError(f"batch_size={r['batch_size']} is more than the smallest size {sizes[0]}")
        if r["lr_inf"] == r["lr"]:
            raise ValueError(f"lr_inf must differ from lr (K=1 runs at both, as the control), got {r['lr']:g} for both")
        if float(r["K"]) == 1 or math.isinf(float(r["K"])):
            raise ValueError(f"K must be a finite period above 1 (K=1 and K=inf are always run), got {r['K']}")


def settings(r) -> list:
    """``(label, K, learning rate)`` of the four settings, in plotting order."""
    return [(f"K=1, lr {r['lr']:g}", 1, r["lr"]), (f"{S.K_label(r['K'])}, lr {r['lr']:g}", r["K"], r["lr"]),
            (f"K=1, lr {r['lr_inf']:g}", 1, r["lr_inf"]), (f"K=∞, lr {r['lr_inf']:g}", math.inf, r["lr_inf"])]


def steps_for(n: int, r) -> int:
    return max(int(r["min_steps"]), int(math.ceil(float(r["epochs"]) * n / int(r["batch_size"]))))


def run(p, ctx):
    import jax
    import jax.numpy as jnp

    from ....core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    full = S.load_data(r["dataset"], max(r["sizes"]), r["n_test"], r["seed"])
    sizes = [min(int(n), full.n_train) for n in r["sizes"]]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes {r['sizes']} repeat once capped at the {full.n_train} training examples.")
    model = S.model_for(r["dataset"], r["channels"], full.num_outputs)
    test = (full.x_test, full.y_test)
    n_eval = sizes[0]  # train accuracy on the first examples of each subset: one shape for every size
    runs = {}
    for n in sizes:
        steps = steps_for(n, r)
        every = max(1, steps // int(r["n_evals"]))
        trainers = {}  # one per path and size (the training arrays' shape is part of the program)
        for label, K, lr in settings(r):
            path = "gd" if K == 1 else "lin"
            if path not in trainers:
                trainers[path] = iterative_linearisation(model, F4.optimizer(r["momentum"]),
                                                         1 if path == "gd" else F4.period_schedule())
            trainer = trainers[path]
            for s in S.seed_list(r):
                ds = full.subset(n, seed=s) if n < full.n_train else full
                x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
                params, state = model.init(jax.random.PRNGKey(s), x[:2])
                name = f"{label} n={n} seed={s}"
                ctx.fit(name, trainer, F4.start(trainer, params, state, K, steps, lr), x, y, steps,
                        batch_size=int(r["batch_size"]), eval_sets={"train": (ds.x_train[:n_eval], ds.y_train[:n_eval]),
                                                                   "test": test},
                        eval_every=every, seed=s, blowup=float(r["blowup"]))
                runs[name] = {"K": K, "setting": label, "learning_rate": lr, "n": n, "seed": s}
    resolved = {k: r[k] for k in ("dataset", "sizes", "n_test", "channels", "K", "lr", "lr_inf", "momentum",
                                  "batch_size", "epochs", "min_steps", "n_evals", "metric", "seed", "seeds",
                                  "slope_margin", "blowup", "scale")}
    resolved.update(sizes=sizes, n_test=full.n_test, steps={str(n): steps_for(n, r) for n in sizes},
                    n_eval_train=n_eval)
    return {"meta": {"resolved": resolved, "runs": runs, **S.data_meta(full, model)}}


EXPERIMENT = register(Experiment(
    NAME, Fig5Params, run, version="1",
    doc="Main paper Fig. 5: test accuracy against training-set size for K=1, a large K and K=inf (and K=1 at "
        "K=inf's learning rate); slopes per tenfold data compared over seeds."))


# ------------------------------------------------------------------------------ for the chapter
def resolved(rec) -> dict:
    return dict(rec.meta["resolved"])


def summary(rec) -> list:
    """One row per run (setting, size, seed): the sparse summary plus ``best`` (highest test
    accuracy over the evaluations of the model being trained), ``n`` and ``learning_rate``."""
    rows = S.rows_of(rec)
    for row in rows:
        h = rec.history(row["tag"])
        acc = h.eval_array("test/accuracy_lin")
        row["best"] = float(np.nanmax(acc)) if acc.size and np.isfinite(acc).any() else math.nan
        row["final"] = row["test"]
    return rows


def labels_of(rows) -> list:
    seen = []
    for r in rows:
        if r["setting"] not in seen:
            seen.append(r["setting"])
    return seen


def slope(sizes, accuracies) -> float:
    """Least-squares slope of accuracy against ``log10(size)``: accuracy gained per tenfold data.

    >>> round(slope([100, 1000, 10000], [0.5, 0.6, 0.7]), 6)
    0.1
    """
    u = np.log10(np.asarray(sizes, np.float64))
    a = np.asarray(accuracies, np.float64)
    if u.size < 2 or not np.all(np.isfinite(a)):
        return math.nan
    return float(np.polyfit(u, a, 1)[0])


def slope_test_half(sizes, p_a, p_b, n_test: int, level: float = 0.95) -> float:
    """Half-width of the interval that the finite test set alone puts on a difference of two
    slopes, each fitted to accuracies ``p_a`` / ``p_b`` (one per size) measured on ``n_test``
    examples: ``z sqrt(sum_i w_i^2 (p_a,i (1 - p_a,i) + p_b,i (1 - p_b,i)) / n_test)`` with the
    least-squares weights ``w_i = (u_i - mean u) / sum_j (u_j - mean u)^2``, ``u = log10(size)``.
    Treating the two settings' errors as independent is conservative: they share the test set.

    >>> round(slope_test_half([100, 1000, 10000], [0.5] * 3, [0.5] * 3, 1000), 4)
    0.0310
    """
    from statistics import NormalDist

    u = np.log10(np.asarray(sizes, np.float64))
    w = (u - u.mean()) / np.sum((u - u.mean()) ** 2)
    pa, pb = np.clip(np.asarray(p_a, np.float64), 0, 1), np.clip(np.asarray(p_b, np.float64), 0, 1)
    var = np.sum(w ** 2 * (pa * (1 - pa) + pb * (1 - pb))) / int(n_test)
    return NormalDist().inv_cdf(0.5 + level / 2) * math.sqrt(var)


def slopes(rows, metric: str = "best") -> dict:
    """``{setting: {seed: slope}}`` over the seeds whose runs at every size completed."""
    sizes = sorted({int(r["n"]) for r in rows})
    out = {}
    for label in labels_of(rows):
        per = {}
        for s in sorted({int(r["seed"]) for r in rows if r["setting"] == label}):
            g = {int(r["n"]): r for r in rows if r["setting"] == label and int(r["seed"]) == s}
            if all(n in g and g[n]["status"] == "completed" for n in sizes):
                per[s] = slope(sizes, [g[n][metric] for n in sizes])
        out[label] = per
    return out


def slope_gap(rows, a: str, b: str, *, n_test: int, metric: str = "best"):
    """The paired gap ``slope(a) - slope(b)`` over seeds (:class:`itlin.book.verdicts.Gap`),
    with the test-set term of :func:`slope_test_half` added in quadrature; ``None`` when no seed
    has both."""
    from ... import verdicts as V

    sl = slopes(rows, metric)
    seeds = sorted(set(sl.get(a, {})) & set(sl.get(b, {})))
    if not seeds:
        return None, seeds
    g = V.paired_gap([sl[a][s] for s in seeds], [sl[b][s] for s in seeds])
    sizes = sorted({int(r["n"]) for r in rows})
    mean_acc = lambda lab: [np.mean([r[metric] for r in rows if r["setting"] == lab and int(r["n"]) == n
                                     and int(r["seed"]) in seeds]) for n in sizes]
    test_half = slope_test_half(sizes, mean_acc(a), mean_acc(b), n_test)
    half = math.hypot(g.seed_half, test_half) if math.isfinite(g.seed_half) else g.seed_half
    return V.Gap(g.mean, half, g.n, g.seed_half, test_half), seeds


def fmt_slope(values) -> str:
    """``"+21.3 ± 2.0 points per tenfold data"`` over seeds."""
    from ... import verdicts as V

    return V.fmt_mean(values, unit=" points")


def claims(rows, *, n_test: int, margin: float, metric: str = "best") -> list:
    """Fig. 5's claims on the slopes of accuracy against ``log10(n)``, paired by seed (a pure
    function of the summary rows; a seed enters a comparison only when all its runs of both
    settings completed):

    * the large finite K has the slope of K=1 at the same learning rate (``close``, ``margin``);
    * K=inf's slope is below that of K=1 at the same (larger) learning rate (``exceeds``, 0);
    * K=inf's slope is below the large finite K's (``exceeds``, 0; the paper's comparison, across
      learning rates);
    * the control: K=1's slope does not depend on the learning rate (``close``, ``margin``).
    """
    from ... import verdicts as V

    labels = labels_of(rows)
    if len(labels) != 4:
        return []
    k1, kbig, k1_hi, kinf = labels
    sl = slopes(rows, metric)
    out = []
    for name, paper, a, b, rule in (
            ("a large finite K scales with data like K=1", "equivalent for all finite K", kbig, k1, "close"),
            ("K=∞ scales worse than K=1 at its learning rate", "worse for K=∞ (with K=1 at lr 1e-3 as the control)",
             k1_hi, kinf, "exceeds"),
            ("K=∞ scales worse than the large finite K", "worse for K=∞ than for every finite K", kbig, kinf,
             "exceeds"),
            ("K=1 scales the same at both learning rates (the control)", "\"not relevant to the comparison\"",
             k1_hi, k1, "close")):
        gap, seeds = slope_gap(rows, a, b, n_test=n_test, metric=metric)
        left_out = len({int(r["seed"]) for r in rows if r["setting"] in (a, b)}) - len(seeds)
        if gap is None:
            out.append(V.verdict(name, paper, "no seed completed every run of both settings", V.UNRESOLVED,
                                 math.nan))
            continue
        measured = (f"{a}: {fmt_slope([sl[a][s] for s in seeds])}, {b}: {fmt_slope([sl[b][s] for s in seeds])} "
                    f"per tenfold data; difference {V.fmt_gap(gap)}")
        result = V.close(gap, margin) if rule == "close" else V.exceeds(gap, 0.0)
        out.append(V.verdict(name, paper, measured, result, gap.half,
                             f"{left_out} seed(s) left out: a run diverged" if left_out else ""))
    return out


def claims_of(rec) -> list:
    r = resolved(rec)
    return claims(summary(rec), n_test=int(r["n_test"]), margin=float(r["slope_margin"]), metric=r["metric"])


def claims_markdown(rec) -> str:
    from ... import verdicts as V

    c = claims_of(rec)
    return V.verdicts_markdown(c, resolvable_unit="points per tenfold data") + "\n\n" + V.bottom_line(c)


def summary_markdown(rows, metric: str = "best") -> str:
    """Per setting and size: feature updates, the test accuracy (``metric``; the other beside it),
    the final training accuracy, over the seeds that completed."""
    from ... import verdicts as V

    other = "final" if metric == "best" else "best"
    out = []
    for label in labels_of(rows):
        for n in sorted({int(r["n"]) for r in rows}):
            g = [r for r in rows if r["setting"] == label and int(r["n"]) == n]
            done = [r for r in g if r["status"] == "completed"]
            col = lambda key: V.fmt_mean([r[key] for r in done]) if done else "n/a"
            out.append([label, f"{n:,}", f"{g[0]['updates']:,}", col(metric), col(other), col("train"),
                        f"{len(done)} of {len(g)}"])
    return S.table_markdown(["setting", "training examples", "feature updates", f"test acc. ({metric})",
                             f"test acc. ({other})", "final train acc.", "seeds completed"], out)


def figure(rec):
    """Left: test accuracy (the record's metric) against training-set size on a log axis, one
    line per setting (mean over seeds, band from lowest to highest); right: each seed's slope per
    tenfold data (dots) and the mean with its 95% seed interval, per setting."""
    import matplotlib.pyplot as plt

    from ... import verdicts as V
    from ...plotting import COLUMN_WIDTH

    r = resolved(rec)
    metric = r["metric"]
    rows = summary(rec)
    labels = labels_of(rows)
    sizes = sorted({int(x["n"]) for x in rows})
    palette = S.colours([1, float(r["K"]), math.inf])
    style = {labels[0]: (palette[1.0], "-", "o"), labels[1]: (palette[float(r["K"])], "-", "s"),
             labels[2]: (palette[1.0], "--", "^"), labels[3]: (palette[math.inf], "--", "D")}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.9), gridspec_kw={"width_ratios": [1.5, 1]})
    sl = slopes(rows, metric)
    for i, label in enumerate(labels):
        c, ls, mk = style[label]
        ys = np.array([[next((x[metric] for x in rows if x["setting"] == label and int(x["n"]) == n
                              and int(x["seed"]) == s and x["status"] == "completed"), np.nan) for n in sizes]
                       for s in sorted({int(x["seed"]) for x in rows})])
        ax.plot(sizes, np.nanmean(ys, 0), color=c, linestyle=ls, marker=mk, label=label)
        if ys.shape[0] > 1:
            ax.fill_between(sizes, np.nanmin(ys, 0), np.nanmax(ys, 0), color=c, alpha=0.15, lw=0)
        vals = list(sl.get(label, {}).values())
        bx.plot(100 * np.asarray(vals), np.full(len(vals), i) + np.linspace(-0.12, 0.12, len(vals)) if vals else [],
                linestyle="none", marker=mk, color=c, alpha=0.6)
        m, h = V.seed_interval(vals) if vals else (math.nan, math.nan)
        if math.isfinite(m):
            bx.errorbar([100 * m], [i], xerr=[[100 * h]] if math.isfinite(h) else None, color=c, marker="|", ms=14,
                        mew=2.2, capsize=4, lw=2)
    ax.set_xscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("training examples")
    ax.set_ylabel(f"test accuracy ({'best over training' if metric == 'best' else 'final'})")
    ax.legend(fontsize=9, frameon=False, loc="lower right")
    bx.set_yticks(range(len(labels)))
    bx.set_yticklabels([lab.replace(", ", "\n") for lab in labels])
    bx.invert_yaxis()
    bx.set_xlabel("slope (points per tenfold data)")
    fig.tight_layout()
    return fig


def paper_settings() -> dict:
    """The ``scale="paper"`` parameters (CIFAR-10 is the paper scale's dataset), resolved without running or
    loading anything."""
    return S.resolve(EXPERIMENT.resolve({"scale": "paper"}), SCALES)


def settings_markdown(rec) -> str:
    r, pp = resolved(rec), paper_settings()
    net = lambda d, c: f"LeNet-{'2D' if d in S.IMAGE_DATASETS else '1D'}, {c} channels"
    steps = r["steps"]
    pp_steps = {str(n): steps_for(n, pp) for n in pp["sizes"]}
    rows = [
        ("dataset", r["dataset"], pp["dataset"], "Section 4"),
        ("network", net(r["dataset"], r["channels"]), net(pp["dataset"], pp["channels"]), "Appendix C"),
        ("training-set sizes", ", ".join(f"{n:,}" for n in r["sizes"]), ", ".join(f"{n:,}" for n in pp["sizes"]), "our choice: not stated (nested, class-balanced subsets)"),
        ("test examples", r["n_test"], 10 ** 9, "the whole test set"),
        ("learning rate, K=1 and large K", r["lr"], pp["lr"], "Fig. 5 caption"),
        ("learning rate, K=∞ and the K=1 control", r["lr_inf"], pp["lr_inf"], "Fig. 5 caption"),
        ("momentum", r["momentum"], pp["momentum"], "our choice: none stated"),
        ("large K", r["K"], pp["K"], "our choice: Fig. 5's K values are not stated"),
        ("steps per run (by size)", ", ".join(f"{int(v):,}" for v in steps.values()),
         ", ".join(f"{int(v):,}" for v in pp_steps.values()),
         "our choice: \"trained until convergence\", at least min_steps and epochs passes"),
        ("mini-batch size", r["batch_size"], pp["batch_size"], "Appendix C (256 or full batch)"),
        ("accuracy reported", r["metric"], pp["metric"], "Appendix C: \"optimal early stopping\""),
        ("seeds", r["seeds"], pp["seeds"], "our choice: the paper shows one run each"),
    ]
    return S.settings_markdown(rows)
