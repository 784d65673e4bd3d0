"""Main paper Fig. 5: how test accuracy grows with the training-set size, for K=1, a large K and K=inf.

The paper's LeNet is trained on nested, class-balanced subsets of every size in ``sizes``, from
several seeds (a seed fixes the subsets, the initialisation and the batches), in four settings:
``K = 1`` and a large ``K`` at learning rate ``lr``; ``K = inf`` at the larger ``lr_inf`` (the
paper's "for computational reasons"); and ``K = 1`` at ``lr_inf``, the paper's control. A run of
``n`` examples takes ``max(min_steps, epochs * n / batch_size)`` steps. The paper's "optimal early
stopping": the evaluation a run reports (``metric="best"``) is chosen on a validation set of
``n_val`` training examples held out of every subset, then tested once; the test set selects
nothing. The claims compare slopes of accuracy against ``log10(n)`` (accuracy per tenfold data).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import numpy as np

from .. import Derived, Experiment, Params, Period, param, register
from ... import verdicts as V
from ...checkpoints import FitJob
from ...labels import K_label
from . import _rows as R
from . import _setup as S

NAME = "fig5_data_scaling"

#: at least this many training-set sizes, spanning at least this factor (largest / smallest)
MIN_SIZES, MIN_SPAN = 4, 10
#: the main paper's Fig. 5 learning rates (caption)
PAPER = {"lr": 1e-5, "lr_inf": 1e-3}
#: MNIST-1D generated with 25,000 signals split 5,000 / 20,000: a validation set held out of the
#: training signals, subsets up to 4,000, and a test set that resolves slopes to about a point
GENERATION = {"num_samples": 25_000, "train_split": 0.2}
ALL = 10 ** 9
#: where the slope margin (``slope_margin``, 5 points per tenfold data) comes from: nowhere in the paper,
#: which gives no number for "equivalent"; our choice. For scale: over our sizes (a factor 10), a slope gap
#: of that size moves the accuracy gap at the largest set by 5 points, more than the 2-point margin of the
#: book's final-accuracy claims, so the chapter shows the verdict across margins (render.sensitivity)
SLOPE_MARGIN_SOURCE = "our choice: the paper gives no number for \"equivalent\""

SCALES = {
    "tiny": {"dataset": "mnist1d", "sizes": [64, 128, 256, 640], "n_val": 100, "n_test": 200, "channels": 4,
             "K": 10, "lr": 1e-2, "lr_inf": 1e-1, "momentum": 0.9, "batch_size": 32, "epochs": 2, "min_steps": 12,
             "n_evals": 3, "seeds": 2},
    # four sizes spanning 10x, one seed live; the final accuracies on 15,000 generated test signals
    "default": {"dataset": "mnist1d", "sizes": [400, 800, 1600, 4000], "n_val": 1000, "n_test": 15_000,
                "channels": 8, "K": 200, "lr": 1e-2, "lr_inf": 1e-1, "momentum": 0.9, "batch_size": 128,
                "epochs": 30, "min_steps": 300, "n_evals": 10, "seeds": 1},
    # the paper: the CIFAR-10 LeNet with 50 channels, lr 1e-5 (finite K) and 1e-3 (K=inf and the
    # control), batch 256 (Fig. 5 caption, Appendix C). Sizes and K are not stated: ours.
    "paper": {"dataset": "cifar10", "sizes": [4000, 8000, 16000, 40000], "n_val": 5000, "n_test": ALL,
              "channels": 50, "K": 100_000, "lr": 1e-5, "lr_inf": 1e-3, "momentum": 0.0, "batch_size": 256,
              "epochs": 2000, "min_steps": 100_000, "n_evals": 50, "seeds": 3},
}


def steps_for(n: int, r: "Fig5Params") -> int:
    """The steps of a run on ``n`` examples: at least ``min_steps``, and ``epochs`` passes."""
    return max(int(r.min_steps), int(math.ceil(float(r.epochs) * n / int(r.batch_size))))


@dataclass(frozen=True)
class Fig5Params(Params):
    SCALES = SCALES
    DERIVED = (
        Derived("network", lambda r: f"LeNet-{'2D' if r['dataset'] in S.IMAGE_DATASETS else '1D'}, "
                                     f"{r['channels']} channels", "Appendix C", after="dataset"),
        Derived("steps per run (by size)", lambda r: [steps_for(n, Fig5Params.rebuild(r)) for n in r["sizes"]],
                "our choice: \"trained until convergence\", at least min_steps and epochs passes", after="epochs"),
    )

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1D LeNet), fashion_mnist or cifar10 (2D LeNet)", label="dataset", source="Section 4")
    sizes: Optional[tuple[int, ...]] = param(None, "training-set sizes (nested subsets)", min=1,
                                             label="training-set sizes", source="our choice: not stated")
    n_val: Optional[int] = param(None, "training examples held out of every subset, on which the reported "
                                       "evaluation is chosen", min=1, label="validation examples (held out of "
                                 "training)", source="ours: \"optimal early stopping\" says not on what")
    n_test: Optional[int] = param(None, "test examples (the verdicts')", min=1, label="test examples",
                                  source="the whole test set")
    channels: Optional[int] = param(None, "LeNet convolution channels", min=1)
    K: Optional[Period] = param(None, "the large finite period", label="large K",
                                source="our choice: Fig. 5's K values are not stated")
    lr: Optional[float] = param(None, "SGD learning rate of K=1 and the large K", gt=0,
                                label="learning rate, K=1 and large K", source="Fig. 5 caption")
    lr_inf: Optional[float] = param(None, "learning rate of K=inf and of the K=1 control", gt=0,
                                    label="learning rate, K=∞ and the K=1 control", source="Fig. 5 caption")
    momentum: Optional[float] = S.momentum_param()
    batch_size: Optional[int] = S.batch_size_param(None, "Appendix C (256 or full batch)")
    epochs: Optional[float] = param(None, "passes over the training set per run (at least min_steps steps)", gt=0)
    min_steps: Optional[int] = param(None, "fewest steps of any run", min=1)
    n_evals: Optional[int] = param(None, "evaluations on the validation set per run", min=1)
    metric: Literal["best", "final"] = param("best", "the evaluation reported: the best on the validation set "
                                                     "(early stopping) or the final one", label="accuracy reported",
                                             source="Appendix C: \"optimal early stopping\"")
    seeds: Optional[int] = param(None, "seeds per setting (subsets, initialisation, batches)", min=1, max=100_000,
                                 label="seeds", source="our choice: the paper shows one run each")
    slope_margin: float = param(0.05, "the slope margin (accuracy per tenfold data): a large K scales no worse "
                                      "than K=1 when the slope gap's interval lies above minus this, close when "
                                      "within it", gt=0, lt=1, label="slope margin (accuracy per tenfold data)",
                                paper="not stated", source=SLOPE_MARGIN_SOURCE)
    blowup: float = param(100.0, "a run diverged once its training loss exceeds this multiple of its first", gt=1)

    def check(self):
        r = self.resolved()
        sizes = list(r["sizes"])
        for bad, msg in ((len(sizes) < MIN_SIZES, f"sizes needs at least {MIN_SIZES} training-set sizes (a slope with "
                          f"an error, over a span of at least {MIN_SPAN}x), got {sizes}"),
                         (sorted(set(sizes)) != sizes, f"sizes must be increasing without repeats, got {sizes}"),
                         (sizes[-1] < MIN_SPAN * sizes[0], f"sizes must span at least {MIN_SPAN}x (largest/smallest), "
                          f"got {sizes}: {sizes[-1] / sizes[0]:.3g}x"),
                         (r["batch_size"] > sizes[0], f"batch_size={r['batch_size']} is more than the smallest size "
                          f"{sizes[0]}"),
                         (r["lr_inf"] == r["lr"], f"lr_inf must differ from lr (K=1 runs at both, as the control), "
                          f"got {r['lr']:g} for both"),
                         (float(r["K"]) == 1 or math.isinf(float(r["K"])), "K must be a finite period above 1 (K=1 and "
                          f"K=inf are always run), got {r['K']}")):
            if bad:
                raise ValueError(msg)


class Setting(NamedTuple):
    """One setting of the plan: its ``label``, period ``K`` and ``learning_rate``."""
    label: str
    K: float
    learning_rate: float


def settings(r: Fig5Params) -> list:
    """The four :class:`Setting` s, in plotting order (``r``: resolved parameters)."""
    return [Setting(f"K=1, lr {r.lr:g}", 1, r.lr), Setting(f"{K_label(r.K)}, lr {r.lr:g}", r.K, r.lr),
            Setting(f"K=1, lr {r.lr_inf:g}", 1, r.lr_inf), Setting(f"K=∞, lr {r.lr_inf:g}", math.inf, r.lr_inf)]


def split(full, n_val: int, seed: int):
    """``(pool, (x_val, y_val))``: a class-balanced validation set of ``n_val`` training examples
    and the dataset whose training split is the rest (the subsets are drawn from it)."""
    from .... import data

    idx = data.balanced_indices(full.labels("train"), n_val, seed=(seed, 2))
    rest = np.setdiff1d(np.arange(full.n_train), idx)
    return dataclasses.replace(full, x_train=full.x_train[rest], y_train=full.y_train[rest]), \
        (full.x_train[idx], full.y_train[idx])


def run(params: Fig5Params, ctx):
    import jax.numpy as jnp

    from .... import metrics
    from ....core.loop import evaluate

    full = S.load_data(params.dataset, ALL, params.n_test, params.seed,
                       generation=GENERATION if params.dataset == "mnist1d" else None)
    pool, val = split(full, params.n_val, params.seed)
    sizes = [min(int(n), pool.n_train) for n in params.sizes]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes {params.sizes} repeat once capped at the {pool.n_train} training examples left "
                         f"after the {params.n_val} held out for validation.")
    model = S.model_for(params.dataset, params.channels, full.num_outputs)
    test = (jnp.asarray(full.x_test), jnp.asarray(full.y_test))
    n_eval = sizes[0]  # train accuracy on the first examples of each subset: one shape for every size
    runs = {}
    for n in sizes:
        steps = steps_for(n, params)
        for label, K, lr in settings(params):
            trainer = S.trainer(model, K == 1, params.momentum)
            for s in S.seed_list(params):
                ds = pool.subset(n, seed=s) if n < pool.n_train else pool
                x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
                weights, state = S.init_params(model, x, s)
                name, state0, best = f"{label} n={n} seed={s}", S.start(trainer, weights, state, K, steps, lr), {}

                def keep(st, hist, best=best):  # the state at the best validation accuracy so far
                    if hist.evals["step"][-1] == int(st.step) and \
                            hist.evals["val/accuracy_lin"][-1] > best.get("acc", -1.0):
                        best.update(acc=hist.evals["val/accuracy_lin"][-1], step=int(st.step), state=st)

                res = ctx.run(FitJob(name, trainer, state0, x, y, steps, batch_size=params.batch_size,
                                     eval_sets={"train": (ds.x_train[:n_eval], ds.y_train[:n_eval]), "val": val},
                                     eval_every=max(1, steps // params.n_evals), seed=s, blowup=params.blowup,
                                     callback=keep))
                h = res.history
                at = int(h.eval_array("step")[int(np.argmax(np.nan_to_num(h.eval_array("val/accuracy_lin"),
                                                                          nan=-1.0)))]) \
                    if params.metric == "best" else int(res.state.step)
                chosen = {0: state0, int(res.state.step): res.state, best.get("step"): best.get("state")}.get(at)

                def measure(chosen=chosen, at=at, name=name):
                    if chosen is None:
                        S.missing(f"the state at step {at} (best on validation) of run {name!r}", ctx.path)
                    return {"test": evaluate(trainer, chosen, *test)["accuracy_lin"], "step": at,
                            "correct": V.pack_correct(metrics.correct_examples(trainer, chosen, *test))}

                m = ctx.stage(f"{name} test", measure)
                runs[name] = {"K": K, "setting": label, "learning_rate": lr, "n": n, "seed": s,
                              "chosen_test": float(m["test"]), "chosen_step": int(m["step"]),
                              "chosen_correct": str(m["correct"])}
    sizes_ = {"sizes": sizes, "n_val": len(val[0]), "n_test": full.n_test, "n_eval_train": n_eval}
    return {"meta": {"resolved": sizes_, "runs": runs, **S.data_meta(full, model)}}


# ------------------------------------------------------------------------------ rows, summary, claims
def rows(rec) -> list:
    """One row per run (setting, size, seed): :func:`~._rows.rows_of` with ``test`` the test
    accuracy at the evaluation the record's ``metric`` chose (``chosen_step``), ``val`` the
    validation accuracy there, ``n`` and ``learning_rate``, and ``correct``: which test signals
    the run classifies right there (booleans, one per signal; ``None`` for records made before
    runs kept them)."""
    out, n_test = R.rows_of(rec), int(rec.settings.n_test)
    for row in out:
        h = rec.history(row["tag"])
        i = int(np.searchsorted(h.eval_array("step"), int(row["chosen_step"])))
        row["val"] = float(h.eval_array("val/accuracy_lin")[i]) if i < h.eval_array("step").size else math.nan
        row["test"] = float(row["chosen_test"])
        row["correct"] = S.correct_of(row, "chosen_correct", n_test)
        row.pop("chosen_correct", None)
    return out


def labels_of(rows_) -> list:
    return list(dict.fromkeys(r["setting"] for r in rows_))


def summary(rec) -> list:
    """Per setting and size: feature updates, the test accuracy at the chosen evaluation, the
    validation accuracy there and the final training accuracy, over the seeds that completed."""
    rows_, metric = rows(rec), rec.settings.metric
    out = []
    for label in labels_of(rows_):
        for n in sorted({int(r["n"]) for r in rows_}):
            g = [r for r in rows_ if r["setting"] == label and int(r["n"]) == n]
            out.append({"setting": label, "training examples": n, "steps": g[0]["steps"],
                        "feature updates": R.updates(g), f"test acc. ({metric})": R.mean_cell(g, "test"),
                        "validation acc.": R.mean_cell(g, "val"), "final train acc.": R.mean_cell(g, "train"),
                        "seeds completed": f"{sum(r['status'] == 'completed' for r in g)} of {len(g)}"})
    return out


def slope(sizes, accuracies) -> float:
    """Least-squares slope of accuracy against ``log10(size)``: accuracy gained per tenfold data.

    >>> round(slope([100, 1000, 10000], [0.5, 0.6, 0.7]), 6)
    0.1
    """
    a = np.asarray(accuracies, np.float64)
    return float(V.log_slope_weights(sizes) @ a) if len(sizes) >= 2 and np.all(np.isfinite(a)) else math.nan


def slopes(rows_) -> dict:
    """``{setting: {seed: slope}}`` over the seeds whose runs at every size completed."""
    sizes = sorted({int(r["n"]) for r in rows_})
    out = {}
    for label in labels_of(rows_):
        per = {}
        for s in sorted({int(r["seed"]) for r in rows_ if r["setting"] == label}):
            g = {int(r["n"]): r for r in rows_ if r["setting"] == label and int(r["seed"]) == s}
            if all(n in g and g[n]["status"] == "completed" for n in sizes):
                per[s] = slope(sizes, [g[n]["test"] for n in sizes])
        out[label] = per
    return out


def slope_gap(rows_, a: str, b: str, *, n_test: int):
    """``(gap, seeds)``: the paired gap ``slope(a) - slope(b)`` over the seeds with both, the
    test set's term added in quadrature (all NaN without a seed): paired signal by signal when
    every run of both settings kept its per-signal results (``row["correct"]``; a slope is
    ``sum_n w_n accuracy_n``, so signal ``i`` contributes ``sum_n w_n correct_ni``, compared as
    :func:`itlin.book.verdicts.paired_accuracy_se` compares accuracies), else the unpaired bound
    of :func:`itlin.book.verdicts.slope_noise`."""
    sl, sizes = slopes(rows_), sorted({int(r["n"]) for r in rows_})
    seeds = sorted(set(sl.get(a, {})) & set(sl.get(b, {})))
    va, vb = [sl[a][s] for s in seeds], [sl[b][s] for s in seeds]
    cell = {(r["setting"], int(r["seed"]), int(r["n"])): r for r in rows_}
    per_signal = {lab: [[cell[(lab, s, n)].get("correct") for n in sizes] for s in seeds] for lab in (a, b)}
    if seeds and all(c is not None for lab in (a, b) for by_seed in per_signal[lab] for c in by_seed):
        w = V.log_slope_weights(sizes)
        contrib = {lab: np.einsum("n,sni->si", w, np.asarray(per_signal[lab], np.float64)) for lab in (a, b)}
        return V.paired_gap(va, vb, examples=(contrib[a], contrib[b])), seeds
    g = V.paired_gap(va, vb)
    if not seeds:
        return g, seeds
    test_half = V.slope_noise(sizes, *([np.mean([cell[(lab, s, n)]["test"] for s in seeds]) for n in sizes]
                                         for lab in (a, b)), n_test)
    return g._replace(half=math.hypot(g.seed_half, test_half) if math.isfinite(g.seed_half) else g.seed_half,
                      test_half=test_half), seeds


def claims(rec) -> list:
    return judge_rows(rows(rec), n_test=int(rec.settings.n_test), margin=float(rec.settings.slope_margin))


def judge_rows(rows_, *, n_test: int, margin: float) -> list:
    """Fig. 5's claims on the slopes, paired by seed (a seed enters a comparison only when all its
    runs of both settings completed; one left out keeps a "close" claim from holding):
    ``finite_close`` (headline: the large K's slope within ``margin`` of K=1's at the same
    learning rate, on both sides: the caption says "equivalent for all finite K", an equivalence),
    ``finite_not_worse`` (secondary: no more than ``margin`` below K=1's, the weaker one-sided
    reading of Section 4.1's "scales similarly"), ``inf_worse`` (headline: K=inf's below K=1's at the same, larger rate),
    ``inf_worse_finite`` (K=inf's below the large K's) and ``control_close`` (K=1's the same at
    both rates)."""
    labels = labels_of(rows_)
    if len(labels) != 4:
        return []
    k1, kbig, k1_hi, kinf = labels
    sl = slopes(rows_)
    out = []
    for id, claim, paper, a, b, rule in (
            ("finite_close", "a large finite K scales with data like K=1 (either side)",
             "\"The rate at which performance improves as the dataset size increases is equivalent for all finite "
             "K\" (Fig. 5 caption)", kbig, k1, "close"),
            ("finite_not_worse", "a large finite K scales with data no worse than K=1",
             "\"scales similarly to K=1 if trained until convergence\" (Section 4.1), read one-sided", kbig, k1,
             "not_worse"),
            ("inf_worse", "K=∞ scales worse than K=1 at its learning rate",
             "worse for K=∞ (with K=1 at lr 1e-3 as the control)", k1_hi, kinf, "exceeds"),
            ("inf_worse_finite", "K=∞ scales worse than the large finite K", "worse for K=∞ than any finite K",
             kbig, kinf, "exceeds"),
            ("control_close", "K=1 scales the same at both learning rates (the control)",
             "\"not relevant to the comparison\"", k1_hi, k1, "close")):
        gap, seeds = slope_gap(rows_, a, b, n_test=n_test)
        dropped = len({int(r["seed"]) for r in rows_ if r["setting"] in (a, b)}) - len(seeds)
        measured = f"{a}: {V.fmt_mean([sl[a][s] for s in seeds], unit=' points')}, {b}: " \
                   f"{V.fmt_mean([sl[b][s] for s in seeds], unit=' points')} per tenfold data" if seeds else \
                   "no seed completed every run of both settings"
        out.append(V.judge(id, claim, paper, gap, rule, margin if rule in ("close", "not_worse") else 0.0,
                           measured=measured, headline=id in ("finite_close", "inf_worse"),
                           unit="points per tenfold data",
                           dropped=dropped))
    return out


EXPERIMENT = register(Experiment(NAME, Fig5Params, run, version="2", summary=summary, claims=claims))

__all__ = ["EXPERIMENT", "Fig5Params", "GENERATION", "MIN_SIZES", "MIN_SPAN", "NAME", "PAPER", "SCALES", "Setting",
           "SLOPE_MARGIN_SOURCE", "claims",
           "judge_rows", "labels_of", "rows", "settings", "slope", "slope_gap", "slopes", "split",
           "steps_for", "summary"]
