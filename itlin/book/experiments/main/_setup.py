"""What the main paper's headline experiments share: data, the LeNet, seeds and training runs.

:mod:`~itlin.book.experiments.main.fig2_k_sweep`, :mod:`~.fig3_augmentation`, :mod:`~.fig8_adam`
and the studies built on them train the paper's LeNet on MNIST-1D (default), Fashion-MNIST or
CIFAR-10 with iterative linearisation at several periods ``K``. This module holds their common
parameters (:class:`SparseParams`), the dataset and model choice, one initialisation per seed,
and the training of one setting over seeds (:func:`fit_seeds`). Their result rows and verdicts
are in :mod:`~itlin.book.experiments.main._rows`, their figures in :mod:`itlin.book.figures.main`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Mapping, NamedTuple, Optional

import numpy as np

from .. import CLOSE_MARGIN, Derived, Params, param
from ...checkpoints import FitJob

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

    DERIVED = (
        Derived("network", lambda r: f"LeNet-{'2D' if r['dataset'] in IMAGE_DATASETS else '1D'}, "
                                     f"{r['channels']} channels", "Appendix C", after="dataset"),
        Derived("test examples (final accuracies, verdicts)", lambda r: n_test_judged(r),
                "the whole test set (MNIST-1D here: generated larger, see MNIST1D_LARGE)", after="n_train"),
    )

    dataset: Literal["mnist1d", "fashion_mnist", "cifar10"] = param(
        "mnist1d", "mnist1d (1D LeNet), fashion_mnist or cifar10 (2D LeNet)", label="dataset", source="Section 4")
    n_train: Optional[int] = param(None, "training examples (balanced subset; more than the split keeps it "
                                         "whole); None: from scale", min=1, label="training examples",
                                   source="the whole training set")
    n_test: Optional[int] = param(None, "test examples (balanced subset); None: from scale", min=1,
                                  label="test examples (curves)", source="the whole test set")
    n_eval_train: Optional[int] = param(None, "training examples evaluated for train accuracy; None: from scale",
                                        min=1)
    channels: Optional[int] = param(None, "LeNet convolution channels; None: from scale (paper: 50)", min=1)
    eval_every: Optional[int] = param(None, "steps between evaluations; None: from scale", min=1,
                                      label="evaluation every (steps)", source="our choice")
    seeds: Optional[int] = param(None, "seeds per setting (initialisation and batch order); seed, seed+1, ...; "
                                       "None: from scale", min=1, max=100_000, label="seeds",
                                 source="our choice: the paper reports one run")
    close_margin: float = param(CLOSE_MARGIN, "two accuracies count as close when the interval of their gap lies within "
                                      "this (0.02: 2 points, about twice the paper's Fig. 3 gap)", gt=0, lt=1)
    blowup: float = param(100.0, "a run has diverged once its training loss exceeds this multiple of its first "
                                 "loss (or is not finite)", gt=1)
    #: final accuracies' test examples: set by a scale table only (not hashed); None: n_test's
    n_test_final: ClassVar[Optional[int]] = None


def check_periods(r: Mapping, baseline: str) -> None:
    """``r["Ks"]`` includes K=1 (the ``baseline`` every claim compares with) and ``r["eval_every"]``
    fits in ``r["steps"]``."""
    if 1 not in [int(k) for k in r["Ks"] if math.isfinite(k)]:
        raise ValueError(f"Ks must include K=1 ({baseline})")
    if r["eval_every"] > r["steps"]:
        raise ValueError(f"eval_every={r['eval_every']} is more than steps={r['steps']}")


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


def prepare(r: "Params", batch_size: Optional[int] = None, data_seed: Optional[int] = None,
            generation: Optional[Mapping] = None) -> Setup:
    """Load the data and build and initialise the model for resolved parameters ``r`` (an
    experiment's :class:`~itlin.book.study.Params`, or a record's rebuilt by its ``rebuild``). A
    ``batch_size`` larger than the training set fails here, before any training. The subsets
    are drawn with ``data_seed`` (default ``r.seed``); the model is initialised from
    ``r.seed`` either way.

    With ``r.n_test_final`` set (a scale-table entry), the final accuracies are measured on a
    class-balanced test set of that many examples (``Setup.final``; for MNIST-1D generated with
    :data:`MNIST1D_LARGE` when it exceeds the standard split), while the curves during training
    are evaluated on ``n_test`` of them (``Setup.evals["test"]``): a large test set resolves small
    gaps and costs one evaluation per run. ``generation``: the MNIST-1D generator's arguments
    there (default :data:`MNIST1D_LARGE`, see :func:`load_with_final`)."""
    import jax.numpy as jnp

    ds, final = load_with_final(r if data_seed is None else r.replace(seed=int(data_seed)), generation)
    if batch_size is not None and batch_size > ds.n_train:
        raise ValueError(f"batch_size={batch_size} is more than the {ds.n_train} training examples.")
    model = model_for(r.dataset, r.channels, ds.num_outputs)
    params, model_state = init_params(model, ds.x_train, r.seed)
    return Setup(ds, model, params, model_state, eval_sets(ds, r.n_eval_train),
                 jnp.asarray(ds.x_train), jnp.asarray(ds.y_train), final)


#: the seed of the one split of a training split into the pool that training subsets are drawn
#: from and the held-out rest (``train_pool``): the same for every seed, so that no run trains on
#: an example another run is tested on
POOL_SEED = 20261128


def pool_split(labels, pool: int) -> tuple:
    """``(pool, rest)``: indices of a class-balanced pool of ``pool`` examples of a training split
    with ``labels`` (drawn with :data:`POOL_SEED`) and of the examples outside it, both sorted.

    >>> p, q = pool_split(np.repeat(np.arange(3), 4), 6)
    >>> p.size, q.size, sorted(set(p) | set(q)) == list(range(12)), set(p) & set(q)
    (6, 6, True, set())
    """
    from .... import data

    labels = np.asarray(labels)
    if not 1 <= int(pool) < labels.size:
        raise ValueError(f"train_pool={pool} must be at least 1 and less than the {labels.size} training examples, "
                         "so that some are left to test on.")
    inside = np.asarray(data.balanced_indices(labels, int(pool), seed=(POOL_SEED, 2)))
    return np.sort(inside), np.setdiff1d(np.arange(labels.size), inside)


def load_with_final(r: "Params", generation: Optional[Mapping] = None) -> tuple:
    """``(ds, final)``: the data of :func:`prepare` for resolved parameters ``r`` (``dataset``,
    ``n_train``, ``n_test``, ``seed`` and optionally ``n_test_final`` and ``train_pool``), and the
    large test set ``final = (x, y)`` the final accuracies are measured on (``None`` without
    ``n_test_final``). ``generation``: the MNIST-1D generator's arguments when ``n_test_final``
    exceeds the standard split (default :data:`MNIST1D_LARGE`).

    With ``train_pool``, the training split is cut once (:func:`pool_split`, the same for every
    seed) into a pool of that many examples, from which each seed's training subset is drawn, and
    the rest; the final test set is then the whole test split followed by every training example
    outside the pool (``n_test_final`` is ignored): a test set tens of times larger, disjoint from
    every run's training subset."""
    import jax.numpy as jnp

    if getattr(r, "train_pool", None):
        from dataclasses import replace as _replace

        from .... import data

        full = data.load(r.dataset)
        inside, rest = pool_split(full.y_train, int(r.train_pool))
        if int(r.n_train) > inside.size:
            raise ValueError(f"n_train={r.n_train} is more than the train_pool of {inside.size} examples it is "
                             "drawn from.")
        pooled = _replace(full, x_train=full.x_train[inside], y_train=full.y_train[inside],
                          meta={**full.meta, "train_index": inside, "n_train": int(inside.size)})
        n_te = None if r.n_test >= full.n_test else int(r.n_test)
        ds = pooled.subset(int(r.n_train), n_te, seed=r.seed)
        final = (jnp.asarray(np.concatenate([full.x_test, full.x_train[rest]])),
                 jnp.asarray(np.concatenate([full.y_test, full.y_train[rest]])))
        return ds, final
    big = getattr(r, "n_test_final", None)
    if not big:
        return load_data(r.dataset, r.n_train, r.n_test, r.seed), None
    gen = (generation or MNIST1D_LARGE) if r.dataset == "mnist1d" and int(big) > MNIST1D_TEST else None
    ds = load_data(r.dataset, r.n_train, int(big), r.seed, generation=gen)
    final = (jnp.asarray(ds.x_test), jnp.asarray(ds.y_test))
    if r.n_test < ds.n_test:
        ds = ds.subset(None, int(r.n_test), seed=r.seed)
    return ds, final


def measured_sizes(setup: Setup) -> dict:
    """The sizes of the data as loaded (a run stores them in ``meta["resolved"]``, over the
    parameters': a subset size above a split's keeps the whole split)."""
    return {"n_train": setup.ds.n_train, "n_test": setup.ds.n_test, "n_eval_train": len(setup.evals["train"][0]),
            "n_test_final": int(setup.final[0].shape[0]) if setup.final is not None else None}


def n_test_judged(r: Mapping) -> int:
    """The number of test examples the final accuracies (and so the verdicts) are measured on."""
    return int(r.get("n_test_final") or r["n_test"])


def init_params(model, x, seed: int):
    """``(params, model_state)`` of ``model`` initialised from ``seed`` (on the first inputs of ``x``)."""
    import jax

    return model.init(jax.random.PRNGKey(seed), x[:2])


def schedule(K):
    """The schedule a run of period ``K`` trains with: :class:`itlin.Every` ``(1)`` for ``K = 1``
    (the network's own gradient steps), else :func:`itlin.periodic`, whose state holds the
    period and the run's horizon (written by :func:`fit_seeds`), so that one compiled step
    serves every ``K`` and no run relinearises after its last step.

    That last relinearisation would change nothing in training (no step follows it) but would
    replace, at the final evaluation, the linearised model that training produced by the network
    at the same parameters. A run of ``steps`` steps at a finite ``K > 1`` therefore makes
    ``ceil(steps / K) - 1`` feature updates (:func:`updates_of`).
    """
    from ....core.schedules import Every, periodic

    return Every(1) if float(K) == 1 else periodic()


def init_state(trainer, params, model_state, K, steps: Optional[int]):
    """``trainer.init`` with the period ``K`` and the horizon ``steps`` written into a periodic
    schedule's state (a ``K = 1`` trainer has no such state); ``steps=None``: no horizon (a
    relinearisation after the last step too, as :class:`itlin.Every`)."""
    values = {} if trainer.schedule.set is None else {"period": K}
    if values and steps is not None:
        values["horizon"] = int(steps)
    return trainer.init(params, model_state, **values)


def momentum_param(doc: str = "heavy-ball momentum, 0 for plain SGD", *, label: str = "momentum",
                   source: str = "our choice: none stated"):
    """The ``momentum`` parameter of the SGD experiments (``None``: from the scale table)."""
    return param(None, doc, min=0, max=0.999, label=label, source=source)


def batch_size_param(default: Optional[int] = 256, source: str = "Appendix C"):
    """The ``batch_size`` parameter of the mini-batch experiments."""
    return param(default, "mini-batch size", min=1, label="mini-batch size", source=source)


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


# ------------------------------------------------------------------------------ seeds
def seed_list(r: "Params") -> list:
    """The seeds of a run: ``seed, seed + 1, ..., seed + seeds - 1``."""
    return [int(r.seed) + i for i in range(int(r.seeds))]


def seed_tag(tag: str, seed: int) -> str:
    """``"K=150 seed=3"``: one training run of a setting."""
    return f"{tag} seed={seed}"


class SeedRuns(NamedTuple):
    """One setting's training runs, one per seed, as :func:`fit_seeds` makes them: ``tag`` names
    the setting (``"full K=134"``), ``trainer`` trains it for ``steps`` from ``setup`` for each of
    ``seeds`` (the first from the setup's initialisation, the others each from its own), and each
    run is recorded with ``info`` plus its seed. ``blowup``, ``batch_size`` (``None``: full batch),
    ``eval_every`` and ``loss_every`` are each run's (:class:`~itlin.book.checkpoints.FitJob`).
    :func:`seed_runs` fills the seeds and ``blowup`` from an experiment's parameters."""

    tag: str
    trainer: Any
    setup: Setup
    steps: int
    info: Mapping
    seeds: tuple
    blowup: float
    batch_size: Optional[int] = None
    eval_every: Optional[int] = None
    loss_every: Optional[int] = None


def seed_runs(r: "Params", tag: str, trainer, setup: Setup, steps: int, info: Mapping, **options) -> SeedRuns:
    """The :class:`SeedRuns` of a setting of an experiment whose resolved parameters ``r`` give the
    seeds (:func:`seed_list`) and ``blowup``; ``options``: its other fields."""
    return SeedRuns(tag, trainer, setup, int(steps), dict(info), tuple(seed_list(r)), float(r.blowup), **options)


def fit_seeds(ctx, job: SeedRuns, runs: dict) -> None:
    """Make ``job``'s runs, one per seed (each from its own initialisation, with its own batch
    order), as runs ``"<tag> seed=<s>"``, recording each in ``runs`` with the job's ``info`` plus
    the seed (and the final accuracies, where the setup has a final test set). A periodic
    trainer (:func:`schedule`) starts with the period ``info["K"]`` and the horizon ``steps`` in
    its state.

    The seeds run one after another with the same trainer, so it compiles once. (Vectorising
    them with ``jax.vmap`` was measured slower on the CPU for the LeNet's linearised step: 6.3x
    one seed for five, since the vectorised convolutions become grouped ones.)
    """
    setup = job.setup
    for s in job.seeds:
        params, model_state = (setup.params, setup.model_state) if s == job.seeds[0] else \
            init_params(setup.model, setup.x, s)
        name = seed_tag(job.tag, s)
        state = init_state(job.trainer, params, model_state, job.info.get("K", 1), job.steps)
        res = ctx.run(FitJob(name, job.trainer, state, setup.x, setup.y, job.steps, batch_size=job.batch_size,
                             eval_sets=setup.evals, eval_every=job.eval_every, seed=s, blowup=job.blowup,
                             loss_every=None if job.loss_every is None else int(job.loss_every)))
        runs[name] = {**job.info, "seed": s, "setting": job.tag}
        if setup.final is not None:
            runs[name].update(final_metrics(job.trainer, res.state, setup.final))


def final_metrics(trainer, state, final) -> dict:
    """The final test accuracies of a run on the large test set ``final = (x, y)``:
    ``final_test`` (the model being trained), ``final_test_net`` (the network), ``n_test_final``,
    and ``final_correct`` (which examples the model being trained classifies right, as the text
    of :func:`itlin.book.verdicts.pack_correct`) so that gaps between runs get the paired noise
    of the test set (:func:`itlin.book.verdicts.paired_accuracy_se`)."""
    from .... import metrics
    from ....core.loop import evaluate
    from ... import verdicts as V

    m = evaluate(trainer, state, *final)
    return {"final_test": float(m["accuracy_lin"]), "final_test_net": float(m["accuracy"]),
            "n_test_final": int(final[0].shape[0]),
            "final_correct": V.pack_correct(metrics.correct_examples(trainer, state, *final))}


def correct_of(info: Mapping, key: str = "final_correct", n: Optional[int] = None) -> Optional[np.ndarray]:
    """The per-example results a run's record keeps under ``key`` for ``n`` examples (default
    ``info["n_test_final"]``), as booleans; ``None`` if none."""
    from ... import verdicts as V

    return V.unpack_correct(info[key], int(n or info["n_test_final"])).astype(bool) if info.get(key) else None


# ------------------------------------------------------------------------------ Figs 4-5: one program for every K
def sgd_in_state(momentum: float):
    """SGD whose learning rate lives in its state (set by :func:`start`); heavy-ball momentum
    ``momentum`` (0: plain SGD)."""
    import optax

    return optax.inject_hyperparams(optax.sgd)(learning_rate=0.0, momentum=float(momentum) if momentum else None)


@functools.lru_cache(maxsize=64)
def trainer(model, gd: bool, momentum: float = 0.0, **options):
    """The trainer whose compiled step serves every ``K`` and learning rate of a sweep on ``model``
    (:func:`start` writes them into its state), made once per model: ``gd``, the network's own
    gradient steps (``K = 1``), else the linearised model on :func:`itlin.periodic`; the SGD of
    :func:`sgd_in_state`; ``options`` to :func:`itlin.iterative_linearisation`."""
    from ....core.schedules import periodic
    from ....core.train import iterative_linearisation

    return iterative_linearisation(model, sgd_in_state(momentum), 1 if gd else periodic(), **options)


def start(trainer, params, model_state, K, steps: Optional[int], learning_rate: float):
    """``trainer.init`` with the period ``K`` and the run's ``steps`` (its horizon: no
    relinearisation after the last step; ``None``: no horizon, see :func:`init_state`) written
    into the schedule's state (a trainer on :func:`itlin.periodic`, so every K shares one compiled
    step; the gradient path of ``K = 1`` has no such state) and ``learning_rate`` into the
    optimiser's (:func:`sgd_in_state`)."""
    import jax.numpy as jnp

    st = init_state(trainer, params, model_state, K, steps)
    hp = dict(st.opt_state.hyperparams)
    hp["learning_rate"] = jnp.asarray(learning_rate, hp["learning_rate"].dtype)
    return st._replace(opt_state=st.opt_state._replace(hyperparams=hp))


def updates_of(K, steps: int) -> int:
    """Feature updates of a run of ``steps`` steps at period ``K`` without a relinearisation
    after the last step: ``ceil(steps / K) - 1``; 0 for ``K = inf`` (``K = 1`` takes the
    network's own gradient steps, which count ``steps``).

    >>> updates_of(10, 30), updates_of(7, 30), updates_of(float("inf"), 30)
    (2, 4, 0)
    """
    K = float(K)
    return 0 if math.isinf(K) else int(math.ceil(steps / K)) - 1


def missing(what: str, path):
    """Raise for a sub-result (a snapshot, a chosen state) that a run restored from its checkpoint
    no longer has: the run must be made again."""
    raise RuntimeError(f"{what} was not kept with its checkpoint; delete the run's folder {path} to recompute it.")


__all__ = ["DATASETS", "IMAGE_DATASETS", "MNIST1D_LARGE", "MNIST1D_TEST", "PAPER", "Setup", "SparseParams",
           "augmenter", "check_periods", "correct_of", "data_meta", "eval_sets", "final_metrics", "fit_seeds", "SeedRuns", "seed_runs",
           "init_params", "load_data", "load_with_final", "measured_sizes", "missing", "model_for", "n_test_judged",
           "init_state", "prepare", "schedule", "seed_list", "seed_tag", "sgd", "sgd_in_state", "start",
           "trainer", "updates_of"]
