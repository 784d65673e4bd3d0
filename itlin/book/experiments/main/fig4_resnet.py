"""Main paper Fig. 4: ResNet-18 with and without batch norm, at K=1 and at large K.

Mini-batch iterative linearisation of a ResNet-18 (the 1-D network of
:func:`itlin.models.resnet18_1d` on MNIST-1D signals; the 2-D CIFAR network of
:func:`itlin.models.resnet18` on images) with data augmentation, trained from several seeds at
``K = 1`` and at the larger periods of ``Ks``, once without batch norm and once with it for each
way of treating batch norm while the network is linearised (``bn_modes``):

* ``"recalibrate"`` (the library's behaviour): the linearised network applies batch norm in
  inference mode with the statistics frozen at the anchor, and every relinearisation measures
  them again on the current batch (a momentum-0 training pass, ``model.calibrate_fn``);
* ``"frozen"``: the same, but the statistics are never measured again (the model is built with
  ``calibrate_fn=None``): the workshop version of the paper says "BatchNorm stats were frozen
  for linearisation";
* ``"batch"``: the network is linearised in training mode, normalising each batch by its own
  statistics, so those statistics are part of the function being linearised
  (:func:`itlin.models.batch_stats_model`); the journal version calls what it did "linearising
  the BatchNorm layer".

In the first two modes the statistics at the start are measured at the initialisation on the
first training batch of the seed (the flax defaults, mean 0 and variance 1, would make every
batch-norm layer an identity until the first relinearisation, and forever when frozen). ``K = 1``
is the network's own training mode whatever the mode, so the ``K = 1`` runs with batch norm are
made once and are the baseline of every mode (evaluated with the running averages).

A run has diverged once its training loss is not finite or exceeds ``blowup`` times its first
loss (:func:`itlin.fit`); the experiment counts such runs per configuration and period.

All periods of one configuration share one compiled program: the period lives in the schedule's
state (:func:`period_schedule`) and the learning rate in the optimiser's (:func:`start`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Mapping, Optional

import numpy as np

from .. import Experiment, Period, param, register, Params
from . import _sparse as S

NAME = "fig4_resnet"

BN_MODES = ("recalibrate", "frozen", "batch")
BNMode = Literal["recalibrate", "frozen", "batch"]
NO_BN = "no BN"
#: what each configuration is called in tables and legends
CONFIG_LABELS = {NO_BN: "no batch norm", "recalibrate": "BN, recalibrated", "frozen": "BN, frozen",
                 "batch": "BN, batch statistics"}
#: the main paper's Fig. 4 settings (Appendix C)
PAPER = {"lr_no_bn": 7e-7, "K_no_bn": 1_000_000, "lr_bn": 1e-5, "K_bn": 100_000}

ALL = 10 ** 9

SCALES = {
    "tiny": {"dataset": "mnist1d", "n_train": 256, "n_test": 200, "n_eval_train": 200, "width": 2, "Ks": [1, 10],
             "steps": 30, "eval_every": 10, "lr_no_bn": 1e-3, "lr_bn": 1e-2, "momentum": 0.9, "batch_size": 64,
             "seeds": 2},
    # a narrow ResNet-18 (first stage 4 channels) on all of MNIST-1D, five seeds (issue 15). To stay
    # within the chapter's CPU budget with five seeds, one large K (three feature updates in 200
    # steps) instead of K=25 and K=100 in 400 steps (three seeds)
    "default": {"dataset": "mnist1d", "n_train": ALL, "n_test": ALL, "n_eval_train": 500, "width": 4,
                "Ks": [1, 50], "steps": 200, "eval_every": 40, "lr_no_bn": 1e-2, "lr_bn": 5e-2, "momentum": 0.9,
                "batch_size": 128, "seeds": 5},
    # the paper: ResNet-18 (width 64) on CIFAR-10, lr 7e-7 / K=1e6 without BN and 1e-5 / K=1e5 with
    # BN (Appendix C), plain SGD, batch 256; no step count stated: ten phases of the largest K
    "paper": {"dataset": "cifar10", "n_train": ALL, "n_test": ALL, "n_eval_train": 10_000, "width": 64,
              "Ks": [1, 100_000, 1_000_000],
              "steps": 10_000_000, "eval_every": 100_000, "lr_no_bn": 7e-7, "lr_bn": 1e-5, "momentum": 0.0,
              "batch_size": 256, "seeds": 3},
}


@dataclass(frozen=True)
class Fig4Params(Params):
    SCALES = SCALES

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1-D ResNet-18, circular shifts); fashion_mnist or cifar10 (2-D ResNet-18, crops, flips); "
              "None: from scale (mnist1d; paper: cifar10)")
    n_train: Optional[int] = param(None, "training examples (balanced subset; more than the split keeps it whole); "
                                         "None: from scale", min=1)
    n_test: Optional[int] = param(None, "test examples; None: from scale", min=1)
    n_eval_train: Optional[int] = param(None, "training examples evaluated for train accuracy; None: from scale",
                                        min=1)
    width: Optional[int] = param(None, "ResNet-18 first-stage width (standard: 64); None: from scale", min=1)
    Ks: Optional[tuple[Period, ...]] = param(None, "periods K (K=1 included; 'inf' allowed); None: from scale")
    steps: Optional[int] = param(None, "training steps per run; None: from scale", min=1)
    eval_every: Optional[int] = param(None, "steps between evaluations; None: from scale", min=1)
    lr_no_bn: Optional[float] = param(None, "SGD learning rate without batch norm; None: from scale (paper 7e-7)",
                                      gt=0)
    lr_bn: Optional[float] = param(None, "SGD learning rate with batch norm; None: from scale (paper 1e-5)", gt=0)
    momentum: Optional[float] = param(None, "heavy-ball momentum, 0 for plain SGD; None: from scale", min=0,
                                      max=0.999)
    batch_size: Optional[int] = param(None, "mini-batch size; None: from scale (paper 256)", min=1)
    bn_mode: BNMode = param("recalibrate", "how batch norm is treated while linearised in the headline comparison: "
                                           "recalibrate, frozen or batch")
    bn_modes: tuple[BNMode, ...] = param(BN_MODES, "the batch-norm modes run for the divergence comparison "
                                                   "(bn_mode among them)")
    augment: bool = param(True, "augment every batch (paper: with batch norm yes, without batch norm no)")
    max_shift: int = param(4, "MNIST-1D: largest random circular shift", min=0)
    pad: int = param(4, "images: zero padding before the random crop", min=0)
    flip: bool = param(True, "images: random horizontal flips")
    seeds: Optional[int] = param(None, "seeds per setting; None: from scale", min=1, max=100_000)
    close_margin: float = param(0.05, "two final accuracies count as close when the interval of their gap lies "
                                      "within this", gt=0, lt=1)
    blowup: float = param(100.0, "a run has diverged once its training loss exceeds this multiple of its first "
                                 "loss (or is not finite)", gt=1)

    def check(self):
        r = self.resolved()
        S.check_periods(r, "the SGD baseline")
        if len(set(self.bn_modes)) != len(self.bn_modes):
            raise ValueError(f"bn_modes has repeated values: {list(self.bn_modes)}")
        if self.bn_mode not in self.bn_modes:
            raise ValueError(f"bn_mode={self.bn_mode!r} must be one of bn_modes={list(self.bn_modes)}")
        if r["batch_size"] > r["n_train"]:
            raise ValueError(f"batch_size={r['batch_size']} is more than n_train={r['n_train']}")
        if "batch" in self.bn_modes:  # evaluation batches of 500 are normalised by their own statistics
            for k in ("n_test", "n_eval_train"):
                v = r[k]
                if v < ALL and v > EVAL_BATCH and v % EVAL_BATCH:
                    raise ValueError(f"{k}={v}: with bn_mode 'batch' the evaluation batches ({EVAL_BATCH} examples) "
                                     f"are normalised by their own statistics, so {k} must be at most {EVAL_BATCH} "
                                     f"or a multiple of it (padding would enter the statistics)")


#: the evaluation batch of :func:`itlin.core.loop.evaluate`
EVAL_BATCH = 500


# ------------------------------------------------------------------------------ shared with Fig. 5
def period_schedule():
    """One :class:`itlin.Schedule` for every fixed period: its state is ``(K, steps)`` and it
    relinearises after steps ``K, 2K, ...`` below ``steps`` (never after the last step, as
    :func:`itlin.book.experiments.main._sparse.schedule`); ``K = inf`` never. Runs of different
    periods then share one compiled step. Set the state with :func:`start`."""
    import jax.numpy as jnp

    from ....core.schedules import Schedule

    def init(f, params):
        return jnp.asarray(jnp.inf, jnp.float32), jnp.asarray(0, jnp.int32)

    def update(state, info):
        K, steps = state
        relin = jnp.logical_and(info.since.astype(jnp.float32) >= K, info.step < steps)
        return relin, state

    return Schedule(init, update, None, "fixed K in the state", ("period_in_state",))


def optimizer(momentum: float):
    """SGD whose learning rate lives in its state (set by :func:`start`); heavy-ball momentum
    ``momentum`` (0: plain SGD)."""
    import optax

    return optax.inject_hyperparams(optax.sgd)(learning_rate=0.0, momentum=float(momentum))


def start(trainer, params, model_state, K, steps: int, learning_rate: float):
    """``trainer.init`` with the period ``K`` and ``steps`` written into the schedule's state (a
    trainer on :func:`period_schedule`) and ``learning_rate`` into the optimiser's."""
    import jax.numpy as jnp

    st = trainer.init(params, model_state)
    if trainer.schedule.spec == ("period_in_state",):
        st = st._replace(schedule=(jnp.asarray(float(K), jnp.float32), jnp.asarray(int(steps), jnp.int32)))
    opt = st.opt_state
    hp = dict(opt.hyperparams)
    hp["learning_rate"] = jnp.asarray(learning_rate, hp["learning_rate"].dtype)
    return st._replace(opt_state=opt._replace(hyperparams=hp))


def updates_of(K, steps: int) -> int:
    """Feature updates of a run of ``steps`` steps at period ``K`` (no relinearisation after the
    last step): ``ceil(steps / K) - 1``, 0 for ``K = 1``'s gradient path and ``K = inf``."""
    K = float(K)
    if math.isinf(K):
        return 0
    return int(math.ceil(steps / K)) - 1


# ------------------------------------------------------------------------------ models and data
def base_model(dataset: str, width: int, batch_norm: bool, num_outputs: int = 10):
    from .... import models

    make = models.resnet18 if dataset in S.IMAGE_DATASETS else models.resnet18_1d
    return make(num_outputs=num_outputs, width=int(width), batch_norm=bool(batch_norm))


def model_for(base, config: str):
    """The model a configuration linearises: ``base`` as it is (no BN, ``"recalibrate"``),
    without calibration (``"frozen"``), or in training mode (``"batch"``)."""
    from .... import models

    if config in (NO_BN, "recalibrate"):
        return base
    if config == "frozen":
        return dataclasses.replace(base, calibrate_fn=None)
    if config == "batch":
        return models.batch_stats_model(base)
    raise ValueError(f"unknown configuration {config!r}")


def tag(config: str, K) -> str:
    return f"{config} K={S.fmt_K(K)}"


def run(p, ctx):
    import jax
    import jax.numpy as jnp

    from ....core.loop import batch_indices
    from ....core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    ds = S.load_data(r["dataset"], r["n_train"], r["n_test"], r["seed"])
    if r["batch_size"] > ds.n_train:
        raise ValueError(f"batch_size={r['batch_size']} is more than the {ds.n_train} training examples.")
    evals = S.eval_sets(ds, r["n_eval_train"])
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    aug = S.augmenter(r["dataset"], pad=r["pad"], flip=r["flip"], max_shift=r["max_shift"]) if r["augment"] else None
    steps, bs = int(r["steps"]), int(r["batch_size"])
    big = [K for K in r["Ks"] if float(K) != 1]
    runs = {}

    def fit_all(config, model, Ks, lr, calibrate=None):
        """One trainer per path (K=1: the network's gradient; K>1: the linearised model with the
        period in the state), every K and seed of ``config``; ``calibrate(params, state, x)``
        measures the statistics at the initialisation."""
        trainers = {}
        for K in Ks:
            path = "gd" if float(K) == 1 else "lin"
            if path not in trainers:
                trainers[path] = iterative_linearisation(model, optimizer(r["momentum"]),
                                                         1 if path == "gd" else period_schedule(), augment=aug)
            trainer = trainers[path]
            for s in S.seed_list(r):
                params, state = model.init(jax.random.PRNGKey(s), x[:2])
                if calibrate is not None:  # statistics of the initialisation, on the seed's first batch
                    state = calibrate(params, state, x[jnp.asarray(batch_indices(s, 0, 1, ds.n_train, bs)[0])])
                name = S.seed_tag(tag(config, K), s)
                ctx.fit(name, trainer, start(trainer, params, state, K, steps, lr), x, y, steps, batch_size=bs,
                        eval_sets=evals, eval_every=int(r["eval_every"]), seed=s, blowup=float(r["blowup"]))
                runs[name] = {"K": K, "config": config, "seed": s, "setting": tag(config, K),
                              "batch_norm": config != NO_BN, "learning_rate": lr}

    nobn = base_model(r["dataset"], r["width"], False, ds.num_outputs)
    fit_all(NO_BN, nobn, r["Ks"], r["lr_no_bn"])
    base_bn = base_model(r["dataset"], r["width"], True, ds.num_outputs)
    # K=1 is the network's own training mode in every mode: made once, the baseline of all of them
    fit_all("BN", base_bn, [1], r["lr_bn"], base_bn.calibrate)
    for mode in r["bn_modes"]:
        fit_all(mode, model_for(base_bn, mode), big, r["lr_bn"], base_bn.calibrate if mode != "batch" else None)
    resolved = {k: r[k] for k in ("dataset", "n_train", "n_test", "n_eval_train", "width", "Ks", "steps",
                                  "eval_every", "lr_no_bn", "lr_bn", "momentum", "batch_size", "bn_mode",
                                  "bn_modes", "augment", "pad", "flip", "max_shift", "seed", "seeds",
                                  "close_margin", "blowup", "scale")}
    resolved.update(n_train=ds.n_train, n_test=ds.n_test, n_eval_train=len(evals["train"][0]),
                    augmentation=augmentation_text(r))
    return {"meta": {"resolved": resolved, "runs": runs, **S.data_meta(ds, base_bn)}}


def augmentation_text(r) -> str:
    if not r["augment"]:
        return "none"
    if r["dataset"] in S.IMAGE_DATASETS:
        return f"random crops (zero padding {r['pad']})" + (" and random horizontal flips" if r["flip"] else "")
    return f"random circular shifts by up to {r['max_shift']} positions"


EXPERIMENT = register(Experiment(
    NAME, Fig4Params, run, version="1",
    doc="Main paper Fig. 4: ResNet-18 with and without batch norm at K=1 and large K, with data augmentation; "
        "three treatments of batch norm while linearised and how often each diverges."))


# ------------------------------------------------------------------------------ for the chapter
def resolved(rec) -> dict:
    return dict(rec.meta["resolved"])


def summary(rec) -> list:
    """One row per training run: :func:`itlin.book.experiments.main._sparse.rows_of` plus ``config``."""
    return S.rows_of(rec)


def configs_of(rows) -> list:
    order = [NO_BN, "BN", *BN_MODES]
    return [c for c in order if any(r["config"] == c for r in rows)]


def baseline_rows(rows, config: str) -> list:
    """The ``K = 1`` runs a configuration is compared with (the shared batch-norm ones for every mode)."""
    return S.select(rows, config=NO_BN if config == NO_BN else "BN", K=1)


def diverged(row) -> bool:
    return row["status"] != "completed"


def divergence_counts(rows) -> dict:
    """``{(config, K): (diverged, runs, [steps at which they diverged])}`` for every setting."""
    out = {}
    for r in rows:
        key = (r["config"], float(r["K"]))
        d, n, at = out.get(key, (0, 0, []))
        out[key] = (d + diverged(r), n + 1, at + ([r["diverged_at"]] if diverged(r) and r["diverged_at"] else []))
    return out


def near_relinearisation(rows, within: int = 5) -> tuple:
    """``(n, total)``: how many of the ``total`` diverged runs at a finite K > 1 stopped within
    ``within`` steps after one of their relinearisations (steps ``K, 2K, ...``; a run's recorded
    divergence step ``s`` is the first step whose loss blew up, so ``(s - 1) mod K`` steps after)."""
    hits = [(int(r["diverged_at"]) - 1) % int(r["K"]) < within for r in rows
            if diverged(r) and r["diverged_at"] and math.isfinite(r["K"]) and r["K"] > 1]
    return sum(hits), len(hits)


def divergence_markdown(rows) -> str:
    """Diverged runs out of seeds, per configuration (rows) and period (columns), with the median
    step at which they diverged."""
    counts = divergence_counts(rows)
    Ks = sorted({k for _, k in counts})
    out = []
    for c in configs_of(rows):
        cells = []
        for K in Ks:
            if (c, K) not in counts:
                cells.append("—" if not (c in BN_MODES and K == 1) else "as BN, K=1")
                continue
            d, n, at = counts[(c, K)]
            cells.append(f"{d} of {n}" + (f" (median step {int(np.median(at)):,})" if at else ""))
        out.append([CONFIG_LABELS.get(c, "BN (K=1, training mode)" if c == "BN" else c), *cells])
    return S.table_markdown(["configuration", *[f"diverged at {S.K_label(K)}" for K in Ks]], out)


def summary_markdown(rows) -> str:
    """Per configuration and period: feature updates, final test accuracy of the model being
    trained and of the network, final train accuracy, over the seeds that completed."""
    from ... import verdicts as V

    out = []
    for c in configs_of(rows):
        for K in sorted({r["K"] for r in rows if r["config"] == c}):
            g = S.select(rows, config=c, K=K)
            done = [r for r in g if not diverged(r)]
            col = lambda key: V.fmt_mean([r[key] for r in done]) if done else "n/a"
            label = "BN (all modes)" if c == "BN" else CONFIG_LABELS[c]
            out.append([label, S.K_label(K), f"{g[0]['updates']:,}", col("test"), col("test_net"), col("train"),
                        f"{len(done)} of {len(g)}"])
    return S.table_markdown(["configuration", "run", "feature updates", "test acc. (model being trained)",
                             "test acc. (network)", "train acc.", "seeds completed"], out)


def claims(rows, *, n_test: int, margin: float, bn_mode: str) -> list:
    """Fig. 4's claims, judged over seeds (a pure function of the summary rows):

    * without batch norm, and with it (in ``bn_mode``), the largest finite K ends within
      ``margin`` of K=1 (final test accuracy of the model being trained; diverged runs left
      out, and the detail says how many);
    * for each batch-norm mode run, large-K runs diverge more often than without batch norm:
      the share of all runs at the finite periods above 1 (every seed) that diverged, the
      mode's minus no batch norm's, with Newcombe's interval for a difference of two proportions
      (:func:`itlin.book.verdicts.proportion_gap`), judged with
      :func:`itlin.book.verdicts.exceeds` (margin 0). A t-interval over a few seeds would
      collapse to zero width whenever the seeds happen to agree.
    """
    from ... import verdicts as V

    out = []
    finite = sorted({r["K"] for r in rows if math.isfinite(r["K"]) and r["K"] > 1})
    if not finite:
        return out
    for c, what in ((NO_BN, "without batch norm"), (bn_mode, f"with batch norm ({CONFIG_LABELS[bn_mode]})")):
        big = S.select(rows, config=c, K=finite[-1])
        base = baseline_rows(rows, c)
        if big and base:
            paper = (f"similar to SGD (K=1e6 at lr 7e-7, CIFAR-10)" if c == NO_BN else
                     "similar to SGD (K=1e5 at lr 1e-5, CIFAR-10, with augmentation)")
            out.append(S.gap_verdict(f"{what}, a large K ends close to K=1", paper, big, base, n_test=n_test,
                                     rule="close", margin=margin,
                                     label_a=f"{S.K_label(finite[-1])} ({big[0]['updates']} feature updates)",
                                     label_b="K=1"))

    def frac(config):
        per = {}
        for r in rows:
            if r["config"] == config and r["K"] in finite:
                per.setdefault(int(r["seed"]), []).append(diverged(r))
        return {s: float(np.mean(v)) for s, v in per.items()}

    ref = frac(NO_BN)
    for mode in [m for m in BN_MODES if any(r["config"] == m for r in rows)]:
        mine = frac(mode)
        seeds = sorted(set(ref) & set(mine))
        if not seeds:
            continue
        n_runs = len(seeds) * len(finite)
        k_mine = round(sum(mine[s] for s in seeds) * len(finite))
        k_ref = round(sum(ref[s] for s in seeds) * len(finite))
        gap = V.proportion_gap(k_mine, n_runs, k_ref, n_runs)
        measured = (f"{CONFIG_LABELS[mode]}: {k_mine} of {n_runs} diverged; no batch norm: {k_ref} of {n_runs}; "
                    f"gap in diverged share {100 * gap.mean:+.1f} ± {100 * gap.half:.1f} points")
        out.append(V.verdict(f"with batch norm ({CONFIG_LABELS[mode]}), large-K runs diverge more often",
                             "far more likely to diverge with batch norm, so K was 10x smaller", measured,
                             V.exceeds(gap, 0.0), gap.half))
    return out


def mode_divergence(rows) -> dict:
    """``{mode: (diverged, runs)}`` over the large-K runs (every finite K > 1 and seed) of each
    batch-norm mode present in ``rows``."""
    out = {}
    for r in rows:
        if r["config"] in BN_MODES and math.isfinite(r["K"]) and r["K"] > 1:
            d, n = out.get(r["config"], (0, 0))
            out[r["config"]] = (d + diverged(r), n + 1)
    return {m: out[m] for m in BN_MODES if m in out}


def mode_claims(rows) -> dict:
    """The batch-norm modes judged against each other (a pure function of the summary rows), by
    the rule of :func:`claims`' divergence verdicts: for each pair of modes run, "the first
    diverges more often than the second" on the share of large-K runs that diverged, with
    Newcombe's interval (:func:`itlin.book.verdicts.proportion_gap`) judged by
    :func:`itlin.book.verdicts.exceeds` (margin 0): it holds, does not hold (the second diverges
    more) or cannot be resolved (the interval spans 0).

    Returns ``{"pairs": [verdicts], "most": mode or None, "least": mode or None}``: ``most`` is
    the mode that diverges more often than *every* other mode with intervals that exclude 0,
    ``least`` the one that diverges less often than every other; ``None`` where the intervals do
    not separate one mode from all the others (or fewer than two modes were run)."""
    from ... import verdicts as V

    counts = mode_divergence(rows)
    modes = list(counts)
    pairs, beats = [], {m: set() for m in modes}
    for i, a in enumerate(modes):
        for b in modes[i + 1:]:
            (ka, na), (kb, nb) = counts[a], counts[b]
            gap = V.proportion_gap(ka, na, kb, nb)
            result = V.exceeds(gap, 0.0)
            if result == V.HOLDS:
                beats[a].add(b)
            elif result == V.FAILS:
                beats[b].add(a)
            measured = (f"{CONFIG_LABELS[a]}: {ka} of {na} diverged; {CONFIG_LABELS[b]}: {kb} of {nb}; gap in "
                        f"diverged share {100 * gap.mean:+.1f} ± {100 * gap.half:.1f} points")
            pairs.append(V.verdict(f"{CONFIG_LABELS[a]} diverges more often than {CONFIG_LABELS[b]}",
                                   "not compared (one treatment, not stated which)", measured, result, gap.half))
    others = lambda m: set(modes) - {m}
    most = [m for m in modes if len(modes) > 1 and beats[m] == others(m)]
    least = [m for m in modes if len(modes) > 1 and all(m in beats[o] for o in others(m))]
    return {"pairs": pairs, "most": most[0] if most else None, "least": least[0] if least else None}


def mode_sentence(result: Mapping) -> str:
    """One sentence on which batch-norm mode diverges most and least, from :func:`mode_claims`,
    saying "cannot resolve" where the intervals overlap."""
    from ... import verdicts as V

    pairs = result["pairs"]
    if not pairs:
        return "With fewer than two batch-norm modes run, the modes cannot be compared."
    name = lambda m: f"`{m}`"
    most = (f"{name(result['most'])} diverged more often than every other mode" if result["most"] else
            "which mode diverges most *cannot be resolved* (the intervals do not separate one mode from all others)")
    least = (f"{name(result['least'])} less often than every other" if result["least"] else
             "which diverges least *cannot be resolved*")
    held = sum(p["verdict"] != V.UNRESOLVED for p in pairs)
    return (f"Judged against each other by the same interval rule, {most}, and {least}; "
            f"{held} of {len(pairs)} pairs of modes are resolved.")


def claims_of(rec) -> list:
    r = resolved(rec)
    return claims(summary(rec), n_test=int(r["n_test"]), margin=float(r["close_margin"]), bn_mode=r["bn_mode"])


def mode_claims_markdown(rows) -> str:
    """The pairwise mode verdicts of :func:`mode_claims` as a table, and :func:`mode_sentence`."""
    from ... import verdicts as V

    result = mode_claims(rows)
    return (V.verdicts_markdown(result["pairs"]) + "\n\n" if result["pairs"] else "") + mode_sentence(result)


def claims_markdown(rec) -> str:
    from ... import verdicts as V

    c = claims_of(rec)
    return V.verdicts_markdown(c) + "\n\n" + V.bottom_line(c)


def figure(rec):
    """Test accuracy against steps, one panel per configuration (no batch norm, then each
    batch-norm mode): ``K = 1`` (the network, black) and each larger K (the model being trained),
    mean over the seeds that completed with a band from the lowest to the highest; the legend
    counts diverged runs, and a cross marks the step where each diverged run stopped."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    rows = summary(rec)
    panels = [c for c in configs_of(rows) if c != "BN"]
    ncol = 2
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(COLUMN_WIDTH, 2.7 * nrow + 0.9), sharex=True, sharey=True,
                             squeeze=False)
    Ks = sorted({r["K"] for r in rows})
    colours = S.colours(Ks)
    for ax, c in zip(axes.flat, panels):
        for K in Ks:
            g = S.select(rows, config="BN" if (c != NO_BN and K == 1) else c, K=K)
            if not g:
                continue
            done = [r for r in g if not diverged(r)]
            hs = [rec.history(r["tag"]) for r in done]
            lab = f"{S.K_label(K)}" + (f", {len(g) - len(done)} of {len(g)} diverged" if len(done) < len(g) else "")
            metric = "test/accuracy" if K == 1 else "test/accuracy_lin"
            line = S.seed_band(ax, hs, metric, color=colours[float(K)], label=lab) if hs else None
            if line is None:
                ax.plot([], [], color=colours[float(K)], label=lab)
            for r in g:
                if diverged(r) and r["diverged_at"]:
                    ax.plot([r["diverged_at"]], [0.02], marker="x", ms=7, mew=1.8, color=colours[float(K)],
                            linestyle="none", transform=ax.get_xaxis_transform(), clip_on=False)
        ax.set_title(CONFIG_LABELS[c])
        ax.legend(loc="best", fontsize=9, frameon=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


def paper_settings() -> dict:
    """The ``scale="paper"`` parameters (CIFAR-10 is the paper scale's dataset), resolved without running or
    loading anything."""
    return S.resolve(EXPERIMENT.resolve({"scale": "paper"}), SCALES)


def settings_markdown(rec) -> str:
    r, pp = resolved(rec), paper_settings()
    net = lambda d, w: f"ResNet-18 {'2-D' if d in S.IMAGE_DATASETS else '1-D'}, width {w}"
    aug_paper = "random crops (zero padding 4) and random horizontal flips"
    rows = [
        ("dataset", r["dataset"], pp["dataset"], "Section 4"),
        ("network", net(r["dataset"], r["width"]), net(pp["dataset"], pp["width"]), "Appendix C (ResNet-18)"),
        ("augmentation", r["augmentation"], aug_paper, "Appendix C: the BN run with augmentation, the no-BN run "
         "without; Fig. 3's recipe assumed"),
        ("training examples", r["n_train"], pp["n_train"], "the whole training set"),
        ("test examples", r["n_test"], pp["n_test"], "the whole test set"),
        ("learning rate, no BN", r["lr_no_bn"], pp["lr_no_bn"], "Appendix C"),
        ("learning rate, BN", r["lr_bn"], pp["lr_bn"], "Appendix C"),
        ("momentum", r["momentum"], pp["momentum"], "our choice: none stated"),
        ("K", r["Ks"], pp["Ks"], "Appendix C: 1e6 without BN, 1e5 with BN"),
        ("BN while linearised", ", ".join(r["bn_modes"]) + f" (headline: {r['bn_mode']})",
         ", ".join(pp["bn_modes"]) + f" (headline: {pp['bn_mode']})",
         "workshop App. C: \"stats were frozen\"; journal: \"linearising the BatchNorm layer\""),
        ("steps", r["steps"], pp["steps"], "our choice: not stated (10 x the largest K)"),
        ("mini-batch size", r["batch_size"], pp["batch_size"], "Appendix C"),
        ("seeds", r["seeds"], pp["seeds"], "our choice: the paper shows one run each"),
    ]
    return S.settings_markdown(rows)
