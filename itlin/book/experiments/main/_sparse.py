"""Shared pieces of the headline experiments on sparse feature updates (main paper Figs. 2, 3, 8).

:mod:`~itlin.book.experiments.main.fig2_k_sweep`, :mod:`~itlin.book.experiments.main.fig3_augmentation` and
:mod:`~itlin.book.experiments.main.fig8_adam` train the paper's LeNet on MNIST-1D (default), Fashion-MNIST
or CIFAR-10 with iterative linearisation at several periods ``K``. This module holds what they
share: the dataset and model choice, parameters that default from ``scale``, run summaries, the
noise tolerance used to judge the paper's claims, and plotting helpers that show the number of
feature updates (Definition 1) on every figure.

Not an experiment module (its name starts with ``_``, so the registry does not import it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from .. import Params, param

#: datasets the headline experiments accept, and the LeNet each gets
DATASETS = ("mnist1d", "fashion_mnist", "cifar10")
IMAGE_DATASETS = ("fashion_mnist", "cifar10")

#: the main paper's CIFAR-10 numbers (Section 4.1 and 4.3)
PAPER = {
    "fig3_k1": 0.823,          # K=1 with augmentation
    "fig3_k5e6": 0.814,        # K=5e6 with augmentation
    "fig8_sgd": 0.694,         # K=1 SGD
    "fig8_adam_solved": 0.613,  # each linearisation solved with Adam, K=2e5
    "fig8_adam": 0.70,         # plain Adam: "over 70%"
}


# ------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class SparseParams(Params):
    """The dataset, size, width and evaluation parameters every headline experiment takes."""

    dataset: Literal["mnist1d", "fashion_mnist", "cifar10"] = param(
        "mnist1d", "mnist1d (1D LeNet), fashion_mnist or cifar10 (2D LeNet)")
    n_train: Optional[int] = param(None, "training examples (balanced subset; more than the split keeps it "
                                         "whole); None: from scale", min=1)
    n_test: Optional[int] = param(None, "test examples (balanced subset); None: from scale", min=1)
    n_eval_train: Optional[int] = param(None, "training examples evaluated for train accuracy; None: from scale",
                                        min=1)
    channels: Optional[int] = param(None, "LeNet convolution channels; None: from scale (paper: 50)", min=1)
    eval_every: Optional[int] = param(None, "steps between evaluations; None: from scale", min=1)
    seeds: Optional[int] = param(None, "seeds per setting (initialisation and batch order); seed, seed+1, ...; "
                                       "None: from scale", min=1, max=100_000)
    close_margin: float = param(0.02, "two accuracies count as close when the interval of their gap lies within "
                                      "this (0.02: 2 points, about twice the paper's Fig. 3 gap)", gt=0, lt=1)
    blowup: float = param(100.0, "a run has diverged once its training loss exceeds this multiple of its first "
                                 "loss (or is not finite)", gt=1)


def check_periods(r: Mapping, baseline: str) -> None:
    """``r["Ks"]`` includes K=1 (the ``baseline`` every claim compares with) and no repeats, and
    ``r["eval_every"]`` fits in ``r["steps"]``."""
    if 1 not in [int(k) for k in r["Ks"] if math.isfinite(k)]:
        raise ValueError(f"Ks must include K=1 ({baseline})")
    if len(set(r["Ks"])) != len(r["Ks"]):
        raise ValueError(f"Ks has repeated values: {r['Ks']}")
    if r["eval_every"] > r["steps"]:
        raise ValueError(f"eval_every={r['eval_every']} is more than steps={r['steps']}")


def resolve(p: Mapping, table: Mapping[str, Mapping]) -> dict:
    """``p`` with every ``None`` replaced by the value of ``table[p["scale"]]`` (what the
    experiment runs with; stored in its record's meta as ``meta["resolved"]``)."""
    out = dict(p)
    for key, value in table[p["scale"]].items():
        if out.get(key) is None:
            out[key] = value
    return out


def fmt_K(K) -> str:
    """``1``, ``150``, ``inf``, ``5e6``: a short spelling of a period for tags and legends."""
    K = float(K)
    if math.isinf(K):
        return "inf"
    K = int(K)
    if K >= 10_000:
        e = len(str(K)) - 1
        m = K / 10 ** e
        if m == int(m):
            return f"{int(m)}e{e}"
    return str(K)


def K_label(K) -> str:
    """``K=150`` or ``K=∞`` for plots."""
    return "K=∞" if math.isinf(float(K)) else f"K={fmt_K(K)}"


def as_K(value) -> float:
    """A period as stored in a record's meta (``"inf"`` for infinity) back to a number, read by
    :func:`itlin.parse_period` (the one parser of periods and their spellings of infinity)."""
    from ....core.schedules import parse_period

    return float(parse_period(value))


# ------------------------------------------------------------------------------ data and models
#: MNIST-1D generated with more signals, for a test set that resolves gaps of about a point:
#: 20,000 signals split 4,000 / 16,000 (the package's defaults give 5,000 split 4,000 / 1,000,
#: whose test set alone cannot resolve gaps under about 4 points). Used by experiments that ask
#: for a final test set larger than the standard split's (``n_test_final`` in their scale table).
MNIST1D_LARGE = {"num_samples": 20_000, "train_split": 0.2}
#: the test examples of the standard MNIST-1D split
MNIST1D_TEST = 1000


def load_data(dataset: str, n_train: int, n_test: int, seed: int, *, generation: Optional[Mapping] = None):
    """The dataset with class-balanced subsets of at most ``n_train``/``n_test`` examples
    (values above a split's size keep the whole split). ``generation``: keyword arguments for
    the MNIST-1D generator (e.g. :data:`MNIST1D_LARGE`); ignored for other datasets."""
    from .... import data

    full = data.load(dataset, **(dict(generation) if generation and dataset == "mnist1d" else {}))
    n_tr = None if n_train is None or n_train >= full.n_train else int(n_train)
    n_te = None if n_test is None or n_test >= full.n_test else int(n_test)
    return full.subset(n_tr, n_te, seed=seed) if (n_tr or n_te) else full


def model_for(dataset: str, channels: int, num_outputs: int = 10):
    """The main paper's LeNet (two convolutions of kernel 5, dense 120 and 84): the 1-D variant
    for MNIST-1D signals, the 2-D one for images."""
    from .... import models

    if dataset in IMAGE_DATASETS:
        return models.lenet(num_outputs=num_outputs, channels=channels)
    return models.lenet1d(num_outputs=num_outputs, channels=channels)


def augmenter(dataset: str, *, pad: int = 4, flip: bool = True, max_shift: int = 4):
    """The augmentation of main paper Fig. 3: random crops of the zero-padded image and random
    horizontal flips for images; for MNIST-1D signals, random circular shifts by up to
    ``max_shift`` positions (:func:`itlin.augment.augment_1d`), the 1-D analogue of a crop."""
    from functools import partial

    from .... import augment

    if dataset in IMAGE_DATASETS:
        return partial(augment.augment, pad=int(pad), flip=bool(flip))
    return partial(augment.augment_1d, max_shift=int(max_shift))


class Setup(NamedTuple):
    """What every training run of an experiment starts from: the data, the LeNet and its one
    initialisation, the evaluation sets, and the training arrays."""
    ds: object
    model: object
    params: object
    model_state: object
    evals: dict
    x: object
    y: object
    final: Optional[tuple] = None


def prepare(r: Mapping, batch_size: Optional[int] = None) -> Setup:
    """Load the data and build and initialise the model for resolved parameters ``r``. A
    ``batch_size`` larger than the training set fails here, before any training.

    With ``r["n_test_final"]`` set (a scale-table entry), the final accuracies are measured on a
    class-balanced test set of that many examples (``Setup.final``; for MNIST-1D generated with
    :data:`MNIST1D_LARGE` when it exceeds the standard split), while the curves during training
    are evaluated on ``n_test`` of them (``Setup.evals["test"]``): a large test set resolves small
    gaps and costs one evaluation per run."""
    import jax.numpy as jnp

    big = r.get("n_test_final")
    if big:
        gen = MNIST1D_LARGE if r["dataset"] == "mnist1d" and int(big) > MNIST1D_TEST else None
        ds = load_data(r["dataset"], r["n_train"], int(big), r["seed"], generation=gen)
        final = (jnp.asarray(ds.x_test), jnp.asarray(ds.y_test))
        if r["n_test"] < ds.n_test:
            ds = ds.subset(None, int(r["n_test"]), seed=r["seed"])
    else:
        ds, final = load_data(r["dataset"], r["n_train"], r["n_test"], r["seed"]), None
    if batch_size is not None and batch_size > ds.n_train:
        raise ValueError(f"batch_size={batch_size} is more than the {ds.n_train} training examples.")
    model = model_for(r["dataset"], r["channels"], ds.num_outputs)
    params, model_state = init_params(model, ds.x_train, r["seed"])
    return Setup(ds, model, params, model_state, eval_sets(ds, r["n_eval_train"]),
                 jnp.asarray(ds.x_train), jnp.asarray(ds.y_train), final)


def n_test_judged(r: Mapping) -> int:
    """The number of test examples the final accuracies (and so the verdicts) are measured on."""
    return int(r.get("n_test_final") or r["n_test"])


def init_params(model, x, seed: int):
    import jax

    params, model_state = model.init(jax.random.PRNGKey(seed), x[:2])
    return params, model_state


def schedule(K, steps: int):
    """The relinearisation schedule of period ``K`` over a run of ``steps`` steps, without a
    relinearisation after the very last step.

    That one would change nothing in training (no step follows it) but would replace, at the
    final evaluation, the linearised model that training produced by the network at the same
    parameters: the end of the run would show the network instead of the model being trained.
    So ``K = 1`` and ``K = inf`` are :class:`itlin.Every`; any other ``K``
    relinearises after steps ``K, 2K, ...`` below ``steps`` (:class:`itlin.AtSteps`),
    giving ``ceil(steps / K) - 1`` feature updates.

    The core does the same with the period and the run's length in the schedule's state, so
    that one compiled step serves every ``K`` and every length: :func:`itlin.periodic` and
    ``trainer.init(params, period=K, horizon=steps)`` (the same decisions, bit for bit).

    >>> import itlin, optax, jax.numpy as jnp
    >>> [int(s) for s in schedule(4, 10).steps]
    [4, 8]
    >>> tr = itlin.iterative_linearisation(lambda p, x: x @ p, optax.sgd(0.1), itlin.periodic(), loss="squared")
    >>> st, log = itlin.run(tr, tr.init(jnp.zeros(2), period=4, horizon=10), jnp.eye(2), jnp.ones(2), 10)
    >>> [i + 1 for i, r in enumerate(log.relinearised) if r]
    [4, 8]
    """
    from ....core.schedules import AtSteps, Every

    K = float(K)
    if K == 1 or math.isinf(K):
        return Every(math.inf if math.isinf(K) else 1)
    return AtSteps.of(range(int(K), int(steps), int(K)))


def sgd(learning_rate: float, momentum: float):
    """SGD, with heavy-ball momentum when ``momentum > 0``."""
    import optax

    return optax.sgd(learning_rate, momentum=momentum if momentum else None)


def eval_sets(ds, n_eval_train: int) -> dict:
    """``{"train": first n_eval_train training examples, "test": the test set}`` for ``fit``.

    The training subset is class-balanced (:meth:`itlin.data.Dataset.subset`)."""
    if n_eval_train >= ds.n_train:
        tr = (ds.x_train, ds.y_train)
    else:
        sub = ds.subset(n_train=int(n_eval_train))
        tr = (sub.x_train, sub.y_train)
    return {"train": tr, "test": (ds.x_test, ds.y_test)}


def data_meta(ds, model) -> dict:
    return {"dataset": ds.name, "n_train": ds.n_train, "n_test": ds.n_test,
            "input_shape": list(ds.input_shape), "model": model.name,
            "model_meta": {k: v for k, v in getattr(model, "meta", {}).items()}}


# ------------------------------------------------------------------------------ summaries
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
    return {
        "tag": tag,
        "steps": int(r["steps"]),
        "updates": int(r["feature_updates"]),
        "status": r["status"] if r.get("diverged_at") is None else f"diverged at step {r['diverged_at']}",
        "diverged_at": r.get("diverged_at"),
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


def pct(x, digits: int = 1) -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):.{digits}f}%"


def pts(x, digits: int = 1) -> str:
    """A difference of accuracies in percentage points."""
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):+.{digits}f} points"


# ------------------------------------------------------------------------------ seeds and verdicts
def seed_list(r: Mapping) -> list:
    """The seeds of a run: ``seed, seed + 1, ..., seed + seeds - 1``."""
    return [int(r["seed"]) + i for i in range(int(r["seeds"]))]


def seed_tag(tag: str, seed: int) -> str:
    """``"K=150 seed=3"``: one training run of a setting."""
    return f"{tag} seed={seed}"


def fit_seeds(ctx, tag: str, trainer, setup: "Setup", r: Mapping, steps: int, info: Mapping, *,
              batch_size: Optional[int], eval_every: int, runs: dict) -> None:
    """Train ``trainer`` once per seed of ``r`` (each from its own initialisation, with its own
    batch order), as runs ``"<tag> seed=<s>"``; records ``info`` plus the seed for each in ``runs``.

    The seeds run one after another with the same trainer, so it compiles once. (Vectorising
    them with ``jax.vmap`` was measured slower on the CPU for the LeNet's linearised step: 6.3x
    one seed for five, since the vectorised convolutions become grouped ones.)
    """
    for s in seed_list(r):
        params, model_state = (setup.params, setup.model_state) if s == int(r["seed"]) else \
            init_params(setup.model, setup.x, s)
        name = seed_tag(tag, s)
        res = ctx.fit(name, trainer, trainer.init(params, model_state), setup.x, setup.y, steps,
                      batch_size=batch_size, eval_sets=setup.evals, eval_every=eval_every, seed=s,
                      blowup=float(r["blowup"]))
        runs[name] = {**info, "seed": s, "setting": tag}
        if setup.final is not None:
            runs[name].update(final_metrics(trainer, res.state, setup.final))


def final_metrics(trainer, state, final) -> dict:
    """The final test accuracies of a run on the large test set ``final = (x, y)``:
    ``final_test`` (the model being trained), ``final_test_net`` (the network), ``n_test_final``."""
    from ....core.loop import evaluate

    m = evaluate(trainer, state, *final)
    return {"final_test": float(m["accuracy_lin"]), "final_test_net": float(m["accuracy"]),
            "n_test_final": int(final[0].shape[0])}


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


def gap_verdict(name: str, paper: str, rows_a: Sequence[Mapping], rows_b: Sequence[Mapping], *, n_test: int,
                rule: str, margin: float, label_a: str, label_b: str, metric: str = "test") -> dict:
    """A verdict on the gap ``a - b`` of ``metric`` (an accuracy), paired by seed over the runs
    of both settings that completed (:mod:`itlin.book.verdicts`): ``rule="close"`` (within
    ``margin``) or ``"exceeds"`` (``a`` above ``b`` by more than ``margin``). Diverged runs never
    enter it; the detail says how many were left out."""
    from ... import verdicts as V

    done = lambda rows: {int(r["seed"]): r for r in rows if r["status"] == "completed" and math.isfinite(r[metric])}
    a, b = done(rows_a), done(rows_b)
    seeds = sorted(set(a) & set(b))
    left_out = len({int(r["seed"]) for r in (*rows_a, *rows_b)}) - len(seeds)
    gap = V.paired_gap([a[s][metric] for s in seeds], [b[s][metric] for s in seeds], n_test=n_test) if seeds \
        else V.Gap(math.nan, math.nan, 0, math.nan, math.nan)
    result = (V.close(gap, margin) if rule == "close" else V.exceeds(gap, margin)) if len(seeds) >= 1 \
        else V.UNRESOLVED
    measured = (f"{label_a} {V.fmt_mean([a[s][metric] for s in seeds])}, {label_b} "
                f"{V.fmt_mean([b[s][metric] for s in seeds])}: gap {V.fmt_gap(gap)}") if seeds else "no completed pair"
    detail = f"{left_out} seed(s) left out: a run diverged" if left_out else ""
    return V.verdict(name, paper, measured, result, gap.half, detail)


def table_markdown(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt_value(v) -> str:
    """A parameter value for a settings table: ``all`` for "the whole split" sizes, ``∞`` for
    infinite periods, compact periods, lists joined by commas."""
    if isinstance(v, (list, tuple)):
        return ", ".join(fmt_value(x) for x in v)
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, str):
        return "∞" if v == "inf" else v
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1):
        v = int(v)
        if v >= 10 ** 9:
            return "all"
        return fmt_K(v) if v >= 10_000 else f"{v:,}"
    return f"{v:g}"


def settings_markdown(rows) -> str:
    """``rows``: ``(what, this run's value, the paper-scale value, where the paper-scale value
    comes from)``."""
    return table_markdown(["setting", "this run", 'scale="paper"', "paper-scale source"],
                          [[w, fmt_value(a), fmt_value(b), src] for w, a, b, src in rows])


# ------------------------------------------------------------------------------ plotting
def colours(Ks) -> dict:
    """One colour per period, the same scheme in every chapter: ``K=1`` black, ``K=inf`` grey,
    the finite large periods from the plasma colour map (purple for the smallest, orange for
    the largest)."""
    import matplotlib.pyplot as plt

    Ks = sorted(set(float(K) for K in Ks))
    finite = [K for K in Ks if math.isfinite(K) and K != 1]
    out = {1.0: "black", math.inf: "0.55"}
    out.update(zip(finite, plt.cm.plasma(np.linspace(0.15, 0.75, len(finite))) if finite else []))
    return out


def relin_marks(ax, history, *, x_scale: float = 1.0, color=None, max_marks: int = 200, y: float = 0.0,
                size: float = 7.0):
    """Short ticks along the bottom of ``ax`` at the steps after which the run relinearised
    (its feature updates), drawn in the run's colour; nothing for runs that relinearise
    more than ``max_marks`` times (``K = 1``: every step)."""
    steps = np.asarray(history.relin_steps, dtype=float)
    if steps.size == 0 or steps.size > max_marks or (steps.size > 1 and np.all(np.diff(steps) == 1)):
        return None
    trans = ax.get_xaxis_transform()
    return ax.plot(steps / x_scale, np.full(steps.shape, y), linestyle="none", marker="|", markersize=size,
                   markeredgewidth=1.6, color=color, transform=trans, clip_on=False)[0]


def update_axis(ax, relin_steps, *, x_scale: float = 1.0, label: str = "feature updates", max_ticks: int = 12):
    """A secondary x axis on top of ``ax`` counting the feature updates of one run: tick ``n``
    sits at the step of its ``n``-th relinearisation."""
    steps = np.asarray(relin_steps, dtype=float) / x_scale
    top = ax.secondary_xaxis("top")
    if steps.size == 0:
        top.set_xticks([])
    else:
        idx = np.arange(steps.size)
        stride = max(1, int(math.ceil(steps.size / max_ticks)))
        keep = idx[(idx + 1) % stride == 0] if stride > 1 else idx
        top.set_xticks(steps[keep])
        top.set_xticklabels([str(i + 1) for i in keep])
    top.set_xlabel(label)
    return top


def seed_band(ax, histories: Sequence, metric: str, *, color=None, label: Optional[str] = None, lw: float = 1.8,
              linestyle: str = "-", alpha: float = 0.18):
    """The mean over seeds of an evaluated metric against steps, with a band from the lowest to
    the highest seed; a run that diverged ends where it did (the mean covers the steps every
    seed reached)."""
    curves = [(h.eval_array("step"), h.eval_array(metric)) for h in histories]
    curves = [(x, y) for x, y in curves if x.size]
    if not curves:
        return None
    n = min(x.size for x, _ in curves)
    x = curves[0][0][:n]
    ys = np.stack([y[:n] for _, y in curves])
    line = ax.plot(x, np.nanmean(ys, axis=0), color=color, lw=lw, linestyle=linestyle, label=label)[0]
    if len(curves) > 1:
        ax.fill_between(x, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=line.get_color(), alpha=alpha, lw=0)
    return line


def shared_legend(fig, ax, ncol: int = 2):
    """One legend for all panels (they draw the same runs), under them, clear of the curves."""
    handles, labels = ax.get_legend_handles_labels()
    rows = max(1, math.ceil(len(labels) / ncol))
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)


def legend_label(K, updates: int, extra: str = "") -> str:
    """``K=150: 4 feature updates`` (plus ``extra``)."""
    word = "feature update" if updates == 1 else "feature updates"
    return f"{K_label(K)}{extra}: {updates:,} {word}"
