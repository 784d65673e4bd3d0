"""Ortiz-Jimenez et al. (NeurIPS 2021), Section 3.2 and Appendix E.1: NTK eigenfunctions as targets.

For each architecture and each initialisation ``s`` (``theta_0 = init(fold_in(PRNGKey(seed), s))``):

1. the empirical NTK ``Theta_0 = J J^T`` of the one-output network at ``theta_0`` on the
   training *and* validation inputs together (their Appendix B), assembled block by block from
   :func:`itlin.ntk` (:func:`gram`: Jacobians of at most ``ntk_memory_mb`` at a time, never a
   ``P x P`` matrix, never all ``N x P`` Jacobians at once), and its eigenvectors ``phi_j``
   sorted by decreasing eigenvalue, ``j`` from 0 (their code; ``phi_0`` has one sign);
2. binary targets ``sign(phi_j(x))`` for ``j`` in ``eigen_indices``: training targets on the
   training inputs, validation targets the signs of the same eigenvector on the validation
   inputs (no out-of-sample extension), plus the dataset's own binary labels (classes 0-4
   against 5-9, their "CIFAR-2") as a baseline task;
3. the network (``K = 1``) and its linearisation at ``theta_0`` (``K = "inf"``), trained by
   :func:`itlin.iterative_linearisation` on every target with the sigmoid cross-entropy, once
   with SGD (momentum 0.9, learning rate 0.05 decayed linearly to 0, batch 128: their
   Appendix A) and once with Adam (same linear decay from ``adam_learning_rate``).

Measured per run: validation and training accuracy of the trained model (the network, or the
linearised model), the mean training loss of every epoch (the mean over the epoch's batches, so
"iterations to a training loss of 0.01" of their Figs. 4-5 costs nothing), and the l2 and
cosine distances between the initial and final weights.

Runs are grouped by (model, optimiser, network/linearised): one :meth:`ctx.stage
<itlin.book.runner.RunContext.stage>` per group, each holding every seed and target. An MLP group
is one compiled program (the trainer's pure ``step`` scanned over the steps, ``jax.vmap``-ed
over seeds and targets); convolutional models train run by run with :func:`itlin.run` (XLA's
CPU convolutions are slow both vmapped over weights and inside compiled loops). Both draw the
same mini-batches (:func:`itlin.batch_indices` with the run's batch seed).

:func:`claims_item1` and :func:`claims_hardness` judge the paper's claims on a record;
:func:`figure_accuracy`, :func:`figure_gap`, :func:`figure_hardness` draw them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Literal, Mapping, Optional, Sequence

import jax
import numpy as np

from .. import Experiment, Params, param, register

NAME = "ortiz_eigenfunctions"

ModelName = Literal["mlp", "lenet", "resnet18"]
OptName = Literal["sgd", "adam"]
DATASETS = ("mnist1d", "fashion_mnist", "cifar10")
#: "CIFAR-2" in their code: classes 0-4 against 5-9
GROUPS = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
VARIANTS = ("network", "linear")
#: models trained as one vmapped program (no convolutions)
VECTORISED = ("mlp",)
LABELS = {"mlp": "MLP", "lenet": "LeNet", "resnet18": "ResNet-18"}
ALL = 10 ** 9  # "the whole split"
#: the pool of their CIFAR-10 NTK (Appendix B: 50,000 training + 10,000 test images)
PAPER_POOL = 60_000

SCALES = {
    "tiny": {"dataset": "mnist1d", "models": ("mlp",), "optimizers": ("sgd",), "eigen_indices": (1, 4, 16), "n_train": 128, "n_val": 64, "seeds": 2,
             "epochs": 2, "resnet_width": 4, "loss_threshold": 0.5},
    # the book on a 2-core CPU (about 2 minutes)
    "default": {"dataset": "mnist1d", "models": ("mlp", "lenet"), "optimizers": ("sgd", "adam"), "eigen_indices": (1, 4, 16, 64, 256), "n_train": 1000,
                "n_val": 500, "seeds": 5, "epochs": 20, "resnet_width": 8, "loss_threshold": 0.1},
    # their CIFAR-10 setting: all 60,000 images, 100 epochs (Appendix A), ResNet-18 of width 64
    "paper": {"dataset": "cifar10", "models": ("mlp", "lenet", "resnet18"), "optimizers": ("sgd", "adam"), "eigen_indices": (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
              "n_train": ALL, "n_val": ALL, "seeds": 5, "epochs": 100, "resnet_width": 64, "loss_threshold": 0.01},
}


@dataclass(frozen=True)
class EigenParams(Params):
    SCALES = SCALES

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1-D models), fashion_mnist or cifar10 (2-D models; the paper: cifar10); None: from scale")
    models: Optional[tuple[ModelName, ...]] = param(None, "architectures: mlp, lenet, resnet18; None: from scale")
    eigen_indices: Optional[tuple[int, ...]] = param(
        None, "eigenfunction indices j (0 = top eigenvalue), increasing; None: from scale", min=0)
    n_train: Optional[int] = param(None, "training inputs (balanced subset of the training split; None: from "
                                         "scale)", min=1)
    n_val: Optional[int] = param(None, "validation inputs (balanced subset of the test split; None: from scale)",
                                 min=1)
    seeds: Optional[int] = param(None, "initialisations (each with its own NTK and targets); None: from scale",
                                 min=1)
    epochs: Optional[int] = param(None, "training epochs (the paper: 100, 200 on CIFAR-2); None: from scale",
                                  min=1)
    optimizers: Optional[tuple[OptName, ...]] = param(None, "sgd (their main text) and/or adam (their Fig. 2); "
                                                            "None: from scale")
    batch_size: int = param(128, "mini-batch size (the paper: 128)", min=1)
    learning_rate: float = param(0.05, "SGD learning rate, decayed linearly to 0 (the paper: 0.05)", gt=0)
    momentum: float = param(0.9, "SGD heavy-ball momentum (the paper: 0.9)", min=0, lt=1)
    adam_learning_rate: float = param(1e-3, "Adam learning rate, decayed linearly to 0 (not stated in the paper)",
                                      gt=0)
    loss_threshold: Optional[float] = param(None, "epoch-mean training loss that counts as trained (their Figs. 4-5: "
                                                  "0.01); None: from scale", gt=0)
    resnet_width: Optional[int] = param(None, "ResNet-18 first-stage width (standard 64); None: from scale", min=1)
    ntk_memory_mb: float = param(512.0, "memory for the Jacobian blocks of one NTK block (MB)", gt=0)

    def check(self):
        r = self.resolved()
        js = list(r["eigen_indices"])
        if sorted(set(js)) != js:
            raise ValueError(f"eigen_indices must be increasing and distinct, got {js}")
        if len(set(r["models"])) != len(r["models"]):
            raise ValueError(f"models has repeated names: {r['models']}")
        if len(set(r["optimizers"])) != len(r["optimizers"]):
            raise ValueError(f"optimizers has repeated names: {r['optimizers']}")
        if r["n_train"] < ALL and r["batch_size"] > r["n_train"]:
            raise ValueError(f"batch_size={r['batch_size']} is more than n_train={r['n_train']} training inputs")
        if r["n_train"] < ALL and r["n_val"] < ALL and js[-1] >= r["n_train"] + r["n_val"]:
            raise ValueError(f"eigen_indices go up to {js[-1]}, but the NTK of n_train + n_val = "
                             f"{r['n_train'] + r['n_val']} inputs has only that many eigenvectors")


# ============================================================================ shared machinery
# (also used by :mod:`itlin.book.experiments.ortiz.ortiz_concentration`)

def is_image_dataset(dataset: str) -> bool:
    return dataset in ("fashion_mnist", "cifar10")


def build_model(name: str, dataset: str, resnet_width: int = 8):
    """One-output versions of their three architectures (Appendix A) for ``dataset``'s inputs:
    ``mlp`` (two hidden layers of 100, ReLU), ``lenet`` (standard LeNet-5: convolutions of 6 and
    16 channels with kernel 5, dense 120 and 84; 1-D for MNIST-1D), ``resnet18`` (1-D for
    MNIST-1D, :func:`itlin.models.resnet18_1d`; first-stage width ``resnet_width``)."""
    from .... import models

    image = is_image_dataset(dataset)
    if name == "mlp":
        return models.mlp(num_outputs=1, widths=(100, 100))
    if name == "lenet":
        return (models.lenet if image else models.lenet1d)(num_outputs=1, channels=(6, 16))
    if name == "resnet18":
        return (models.resnet18 if image else models.resnet18_1d)(num_outputs=1, width=int(resnet_width))
    raise ValueError(f"unknown model {name!r}; choose mlp, lenet or resnet18.")


def load_binary(dataset: str, n_train: int, n_test: int, seed: int):
    """``dataset`` as the binary task of their code (classes 0-4 against 5-9, +-1 targets of
    shape ``(N, 1)``; :func:`itlin.data.class_groups`), with class-balanced subsets of at most
    ``n_train`` / ``n_test`` examples (``seed`` picks them)."""
    from .... import data

    ds = data.class_groups(data.load(dataset), GROUPS, target="pm1")
    n_tr = None if n_train >= ds.n_train else int(n_train)
    n_te = None if n_test >= ds.n_test else int(n_test)
    return ds.subset(n_tr, n_te, seed=seed) if (n_tr or n_te) else ds


def init_key(seed: int, s: int):
    """The key of initialisation ``s``: ``fold_in(PRNGKey(seed), s)``."""
    import jax

    return jax.random.fold_in(jax.random.PRNGKey(int(seed)), int(s))


def init_many(model, seed: int, count: int, x) -> list:
    """``[(params, model_state)]`` of initialisations ``s = 0 .. count-1`` (keys :func:`init_key`),
    made by one compiled, vmapped ``model.init`` (the same values as ``count`` separate calls, in
    one compilation instead of eager initialisation layer by layer)."""
    import jax.numpy as jnp

    keys = jnp.stack([init_key(seed, s) for s in range(int(count))])
    params, states = jax.jit(jax.vmap(lambda k: model.init(k, x)))(keys)
    return [(jax.tree_util.tree_map(lambda a: a[s], params), jax.tree_util.tree_map(lambda a: a[s], states))
            for s in range(int(count))]


def batch_seed(seed: int, s: int) -> int:
    """The mini-batch order of run ``s`` (:func:`itlin.batch_indices`)."""
    return 7919 * int(seed) + int(s)


@partial(jax.jit, static_argnums=(0,))
def _ntk_block(model, params, state, x1, x2):
    from ....core.linearise import ntk

    return ntk(model.bind(state), params, x1, x2)


def block_size(num_params: int, memory_mb: float, n: int) -> int:
    """Inputs per block so that the two blocks of per-example Jacobians (float32, ``P`` numbers
    per input) fit in ``memory_mb``; at least 1, at most ``n``."""
    return int(max(1, min(n, (memory_mb * 2 ** 20) // (2 * 4 * max(int(num_params), 1)))))


def gram(model, params, state, x, *, memory_mb: float = 512.0) -> np.ndarray:
    """The empirical NTK Gram matrix ``J J^T`` (float64 numpy, ``(N, N)``) of a one-output model
    at ``params`` on ``x``, with the model state (batch-norm statistics) frozen.

    Built from the upper-triangular blocks of :func:`itlin.ntk` on blocks of
    :func:`block_size` inputs (the last block zero-padded so every call has one shape and
    compiles once), mirrored; memory: the ``N x N`` result plus two blocks of Jacobians.
    """
    from ....core._tree import num_params

    n = int(x.shape[0])
    b = block_size(num_params(params), memory_mb, n)
    nb = -(-n // b)
    pad = nb * b - n
    xp = np.concatenate([np.asarray(x), np.zeros((pad,) + tuple(x.shape[1:]), np.asarray(x).dtype)]) if pad \
        else np.asarray(x)
    out = np.zeros((nb * b, nb * b), np.float64)
    for i in range(nb):
        for j in range(i, nb):
            k = np.asarray(_ntk_block(model, params, state, xp[i * b:(i + 1) * b], xp[j * b:(j + 1) * b]),
                           np.float64)
            out[i * b:(i + 1) * b, j * b:(j + 1) * b] = k
            if j != i:
                out[j * b:(j + 1) * b, i * b:(i + 1) * b] = k.T
    return out[:n, :n]


def spectrum(kernel) -> tuple:
    """``(eigenvalues, eigenvectors)`` of a symmetric kernel, eigenvalues decreasing (index 0 is
    the largest), in float64 on the host."""
    k = np.asarray(kernel, np.float64)
    s, v = np.linalg.eigh(0.5 * (k + k.T))
    return s[::-1].copy(), v[:, ::-1].copy()


def sign_targets(vectors, indices) -> np.ndarray:
    """``sign(phi_j)`` (+1 where ``phi_j >= 0``) for each ``j`` of ``indices``: ``(J, N)`` float32."""
    v = np.asarray(vectors)[:, list(indices)].T
    return np.where(v >= 0, 1.0, -1.0).astype(np.float32)


def optimizer(name: str, p: Mapping, steps: int):
    """Their SGD (momentum, learning rate decayed linearly to 0 over ``steps``) or Adam (same decay)."""
    import optax

    if name == "sgd":
        return optax.sgd(optax.linear_schedule(p["learning_rate"], 0.0, steps), momentum=p["momentum"] or None)
    if name == "adam":
        return optax.adam(optax.linear_schedule(p["adam_learning_rate"], 0.0, steps))
    raise ValueError(f"unknown optimiser {name!r}")


def predict(trainer, state, x):
    """Outputs ``(N,)`` of the model being trained: the network (``K = 1``) or the linearised
    model at the state's anchor, with the model state frozen."""
    return _predict(trainer, state, x)


@partial(jax.jit, static_argnums=(0,))
def _predict(trainer, state, x):
    from ....core.linearise import linearised_apply

    f = trainer.model.bind(state.model_state)
    out = f(state.params, x) if trainer.gd_path else linearised_apply(f, state.anchor, state.params, x)
    return out.reshape(-1)


def train_runs(trainer, inits, x, targets, steps: int, batch_size: int, batch_seeds: Sequence[int],
               vectorise: bool) -> tuple:
    """Train every (initialisation, target) pair: ``inits`` is a list of ``S`` ``(params,
    model_state)``, ``targets`` ``(S, T, n)`` (+-1), ``batch_seeds`` one per initialisation.

    Returns ``(states, losses)``: ``states[s][t]`` the final :class:`itlin.TrainState`,
    ``losses`` ``(S, T, steps)`` the per-step training losses (of the batch, before the update).
    ``vectorise=True`` runs everything as one compiled program (``lax.scan`` over the steps of
    ``trainer.step``, vmapped over targets and initialisations); otherwise each run is an
    :func:`itlin.run`. Both see the batches of :func:`itlin.batch_indices`.
    """
    import jax
    import jax.numpy as jnp

    from ....core.loop import batch_indices, run

    S, T, n = np.shape(targets)
    x = jnp.asarray(x)
    if vectorise:
        idx = jnp.asarray(np.stack([batch_indices(int(b), 0, steps, n, batch_size) for b in batch_seeds]))
        params = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[p for p, _ in inits])
        states0 = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[st for _, st in inits])

        def one(p0, st0, y, order):
            def body(state, b):
                state, log = trainer.step(state, x[b], y[b])
                return state, log.loss
            return jax.lax.scan(body, trainer.init(p0, st0), order)

        over_targets = jax.vmap(one, in_axes=(None, None, 0, None))
        final, losses = jax.jit(jax.vmap(over_targets, in_axes=(0, 0, 0, 0)))(params, states0, jnp.asarray(targets),
                                                                               idx)
        losses = np.asarray(losses)
        states = [[jax.tree_util.tree_map(lambda a: a[s, t], final) for t in range(T)] for s in range(S)]
        return states, losses
    states, losses = [], np.zeros((S, T, steps), np.float32)
    for s, (p0, st0) in enumerate(inits):
        row = []
        for t in range(T):
            st, log = run(trainer, trainer.init(p0, st0), x, jnp.asarray(targets[s, t]), steps,
                          batch_size=batch_size, seed=int(batch_seeds[s]))
            losses[s, t, :log.loss.shape[0]] = log.loss
            if log.loss.shape[0] < steps:  # stopped at a non-finite loss
                losses[s, t, log.loss.shape[0]:] = np.nan
            row.append(st)
        states.append(row)
    return states, losses


def weight_distances(p0, p1) -> tuple:
    """``(||theta_1 - theta_0||_2, 1 - cos(theta_0, theta_1))`` over all weights."""
    from jax.flatten_util import ravel_pytree

    a = np.asarray(ravel_pytree(p0)[0], np.float64)
    b = np.asarray(ravel_pytree(p1)[0], np.float64)
    return float(np.linalg.norm(b - a)), float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def sign_accuracy(outputs, targets) -> float:
    return float(np.mean((np.asarray(outputs).reshape(-1) > 0) == (np.asarray(targets).reshape(-1) > 0)))


# ============================================================================ the experiment
def resolve(p: Mapping) -> dict:
    return EigenParams.from_dict(p, experiment=NAME).resolved()


def run(p, ctx):
    import jax
    import jax.numpy as jnp

    from ....core._tree import num_params
    from ....core.train import iterative_linearisation

    r = resolve(p)
    ds = load_binary(r["dataset"], r["n_train"], r["n_val"], r["seed"])
    n_tr, n_va = ds.n_train, ds.n_test
    js = list(r["eigen_indices"])
    if js[-1] >= n_tr + n_va:
        raise ValueError(f"eigen_indices go up to {js[-1]}, but the pool has only {n_tr + n_va} inputs")
    if r["batch_size"] > n_tr:
        raise ValueError(f"batch_size={r['batch_size']} is more than the {n_tr} training inputs")
    x_pool = np.concatenate([ds.x_train, ds.x_test])
    labels = np.concatenate([ds.y_train[:, 0], ds.y_test[:, 0]]).astype(np.float32)  # +-1, 0-4 vs 5-9
    S, E, B = int(r["seeds"]), int(r["epochs"]), int(r["batch_size"])
    per_epoch = n_tr // B
    steps = E * per_epoch
    out = {"eigen_indices": np.asarray(js, np.int64), "models": {}}
    cost = {}
    for name in r["models"]:
        model = build_model(name, r["dataset"], r["resnet_width"])
        inits = init_many(model, r["seed"], S, jnp.asarray(x_pool[:2]))
        P = num_params(inits[0][0])
        ctx.say(f"{name}: {P:,} weights; NTK on {n_tr + n_va} inputs, {S} initialisations")

        def spectra(s, model=model, inits=inits):
            t0 = time.perf_counter()
            k = gram(model, inits[s][0], inits[s][1], x_pool, memory_mb=r["ntk_memory_mb"])
            t1 = time.perf_counter()
            vals, vecs = spectrum(k)
            t2 = time.perf_counter()
            return {"eigvals": vals, "targets": sign_targets(vecs, js), "ntk_seconds": t1 - t0,
                    "eigh_seconds": t2 - t1}

        spec = [ctx.stage(f"{name}/ntk/s={s}", partial(spectra, s)) for s in range(S)]
        targets = np.stack([np.concatenate([sp["targets"], labels[None]]) for sp in spec])  # (S, J+1, N)
        cost[name] = {"num_params": int(P), "n": int(n_tr + n_va),
                      "block": block_size(P, r["ntk_memory_mb"], n_tr + n_va),
                      "ntk_seconds": [float(sp["ntk_seconds"]) for sp in spec],
                      "eigh_seconds": [float(sp["eigh_seconds"]) for sp in spec]}
        res = {"eigvals": np.stack([sp["eigvals"] for sp in spec]),
               "balance_train": (targets[:, :, :n_tr] > 0).mean(-1), "balance_val": (targets[:, :, n_tr:] > 0).mean(-1)}
        for opt in r["optimizers"]:
            for variant in VARIANTS:
                K = 1 if variant == "network" else math.inf
                trainer = iterative_linearisation(model, optimizer(opt, r, steps), K, loss="bce")

                def group(trainer=trainer, inits=inits, targets=targets, name=name):
                    t0 = time.perf_counter()
                    states, losses = train_runs(trainer, inits, x_pool[:n_tr], targets[:, :, :n_tr], steps, B,
                                                [batch_seed(r["seed"], s) for s in range(S)],
                                                vectorise=name in VECTORISED)
                    T = targets.shape[1]
                    m = {k: np.full((S, T), np.nan) for k in ("val_acc", "train_acc", "l2_distance", "cos_distance")}
                    m["diverged"] = ~np.all(np.isfinite(losses), axis=-1)
                    for s in range(S):
                        for t in range(T):
                            st = states[s][t]
                            if m["diverged"][s, t]:  # its metrics stay NaN; the claims drop it
                                continue
                            out = np.asarray(predict(trainer, st, x_pool))
                            m["val_acc"][s, t] = sign_accuracy(out[n_tr:], targets[s, t, n_tr:])
                            m["train_acc"][s, t] = sign_accuracy(out[:n_tr], targets[s, t, :n_tr])
                            m["l2_distance"][s, t], m["cos_distance"][s, t] = weight_distances(inits[s][0], st.params)
                    m["epoch_loss"] = np.asarray(losses, np.float64).reshape(S, T, E, per_epoch).mean(-1)
                    m["seconds"] = time.perf_counter() - t0
                    return m

                t0 = time.perf_counter()
                res[f"{opt}_{variant}"] = ctx.stage(f"{name}/{opt}/{variant}", group)
                ctx.say(f"{name} {opt} {variant}: {S} x {len(js) + 1} runs of {steps} steps, "
                        f"{time.perf_counter() - t0:.1f} s")
        out["models"][name] = res
    resolved = {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}
    resolved.update(n_train=n_tr, n_val=n_va, steps=steps, steps_per_epoch=per_epoch)
    out["meta"] = {"resolved": resolved, "cost": cost, "dataset": ds.name, "groups": [list(g) for g in GROUPS],
                   "input_shape": list(ds.input_shape),
                   "models": {m: build_model(m, r["dataset"], r["resnet_width"]).meta for m in r["models"]},
                   "targets": "sign(phi_j) on the pool (train then validation inputs); the last target is the "
                              "dataset's binary labels (classes 0-4: -1, 5-9: +1)"}
    return out


EXPERIMENT = register(Experiment(
    NAME, EigenParams, run, version="1",
    doc="Ortiz-Jimenez et al. Section 3.2 / Appendix E.1: networks and their linearisations trained on the "
        "binarised eigenfunctions of the NTK at initialisation, with SGD and Adam."))


# ============================================================================ analysis (pure)
def resolved(rec) -> dict:
    """The parameters the run used (scale defaults filled in, sizes as loaded)."""
    return dict(rec.meta["resolved"])


def present(res: Mapping, name: str) -> list:
    """The ``"<optimiser>_<variant>"`` groups that ``res["models"][name]`` holds, optimisers in order."""
    keys = [k for k in res["models"][name] if k.endswith(("_network", "_linear"))]
    return sorted({k.rsplit("_", 1)[0] for k in keys}, key=lambda o: ("sgd", "adam").index(o) if o in ("sgd", "adam")
                  else 9)


def iterations_to(epoch_loss, threshold: float, steps_per_epoch: int) -> np.ndarray:
    """Iterations until the epoch-mean training loss first falls to ``threshold`` (counted at the
    end of that epoch), ``inf`` where it never does. ``epoch_loss``: ``(..., epochs)``.

    >>> iterations_to(np.array([[0.5, 0.2, 0.05], [0.5, 0.4, 0.3]]), 0.1, 7).tolist()
    [21.0, inf]
    """
    loss = np.asarray(epoch_loss, np.float64)
    hit = loss <= threshold
    first = np.argmax(hit, axis=-1)
    return np.where(hit.any(-1), (first + 1.0) * steps_per_epoch, np.inf)


def censored(iterations, budget: int, steps_per_epoch: int) -> np.ndarray:
    """Iterations with ``inf`` (never reached) replaced by one epoch past the budget (NaN, a
    diverged run, stays NaN): a lower bound of the true value, so a gap "larger j needs more
    iterations" computed with it is a lower bound too (and resolves nothing when both ends are
    censored)."""
    it = np.asarray(iterations, np.float64)
    return np.where(np.isposinf(it), budget + steps_per_epoch, it)


def spearman(x, y) -> float:
    """Spearman rank correlation (average ranks for ties); NaN for fewer than 3 points or a
    constant side."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(spearmanr(x, y).statistic)


def finite_gap(a, b, n_test: Optional[int] = None):
    """:func:`itlin.book.verdicts.paired_gap` of ``a - b`` over the seeds where both are finite
    (a diverged run leaves NaN); returns ``(Gap, number of seeds dropped)``."""
    from ...verdicts import paired_gap

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    return paired_gap(a[keep], b[keep], n_test=n_test), int((~keep).sum())


def fmt_finite(values, scale: float = 100.0, unit: str = "%", digits: int = 1) -> str:
    """:func:`itlin.book.verdicts.fmt_mean` over the finite values."""
    from ...verdicts import fmt_mean

    v = np.asarray(values, np.float64)
    return fmt_mean(v[np.isfinite(v)], scale, unit, digits)


def _dropped(n: int) -> str:
    return f"; {n} diverged run(s) dropped" if n else ""


def _fmt_j(j) -> str:
    return f"j={int(j)}"


def _pct(v) -> str:
    return fmt_finite(v)


def with_units(row: dict, units: tuple) -> dict:
    """``row`` (a :func:`itlin.book.verdicts.verdict`) with the units of its ``resolvable`` gap:
    ``(scale, unit, digits)``, read by :func:`verdicts_table`."""
    return {**row, "resolvable_as": tuple(units)}


def fmt_resolvable(res, scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
    """The "resolves gaps of" cell: ``—`` without a gap, ``∞ (one seed)`` for a single seed.

    >>> fmt_resolvable(0.0123), fmt_resolvable(41.6, 1.0, " iterations", 0), fmt_resolvable(None)
    ('1.2 points', '42 iterations', '—')
    """
    if res is None or (isinstance(res, float) and math.isnan(res)):
        return "—"
    if math.isinf(res):
        return "∞ (one seed)"
    return f"{scale * res:.{digits}f}{unit}"


def verdicts_table(rows: Sequence[dict], scale: float = 100.0, unit: str = " points", digits: int = 1) -> str:
    """:func:`itlin.book.verdicts.verdicts_markdown` for rows whose resolvable gaps have
    different units: a row's ``resolvable_as`` (:func:`with_units`) overrides ``(scale, unit,
    digits)``."""
    from ...verdicts import FAILS, HOLDS, UNRESOLVED

    lines = ["| claim | paper | ours | resolves gaps of | verdict |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        sc, un, dg = r.get("resolvable_as", (scale, unit, digits))
        word = {HOLDS: "holds", FAILS: "**does not hold**", UNRESOLVED: "*cannot resolve*"}[r["verdict"]]
        measured = r["measured"] + (f" ({r['detail']})" if r.get("detail") else "")
        lines.append(f"| {r['claim']} | {r['paper']} | {measured} | {fmt_resolvable(r.get('resolvable'), sc, un, dg)} "
                     f"| {word} |")
    return "\n".join(lines)


def claims_item1(res: Mapping, js: Sequence[int], n_val: int, *, cross_model: str = "lenet") -> list:
    """The claims of their Section 3.2 and Appendix E.1 (Figs. 2-3), as verdict rows.

    ``res`` is the record's results (``{"models": {name: {"<opt>_<variant>": {"val_acc": (S, J+1),
    ...}}}}``; the last column is the dataset's own labels), ``js`` the eigenfunction indices.

    * *decays*: per model, optimiser and network/linearised, validation accuracy at the first
      ``j`` minus at the last ``j`` exceeds 0 (paired over seeds, test noise of ``n_val``
      inputs added);
    * *linear advantage*: per model and optimiser, the linearised model's accuracy minus the
      network's, averaged over the eigenfunction targets, exceeds 0;
    * *non-linear advantage on the labels* (their CIFAR-2 remark in Appendix A): on the dataset's
      own labels the network beats the linearised model;
    * *curves cross* (``cross_model``, their Fig. 3 on MNIST): holds when the linearised model
      is ahead at some ``j`` and the network at another, both resolved; does not hold when every
      ``j`` is resolved with one sign; cannot resolve otherwise.
    """
    from ...verdicts import FAILS, HOLDS, UNRESOLVED, exceeds, fmt_gap, verdict

    rows = []
    J = len(js)
    for name, r in res["models"].items():
        for opt in present(res, name):
            for variant in VARIANTS:
                key = f"{opt}_{variant}"
                if key not in r:
                    continue
                acc = np.asarray(r[key]["val_acc"], np.float64)
                g, nd = finite_gap(acc[:, 0], acc[:, J - 1], n_test=n_val)
                rhos = [spearman(js, a[:J]) for a in acc if np.all(np.isfinite(a[:J]))] if J >= 3 else []
                rho = float(np.mean(rhos)) if rhos else math.nan
                rows.append(verdict(
                    f"{LABELS.get(name, name)} {variant}, {opt.upper()}: accuracy decays with j",
                    "decays for every model (Figs. 2-3 and their Section 3.2)",
                    f"{_pct(acc[:, 0])} at {_fmt_j(js[0])}, {_pct(acc[:, J - 1])} at {_fmt_j(js[-1])}: "
                    f"drop {fmt_gap(g)}{_dropped(nd)}", exceeds(g), g.half,
                    f"Spearman ρ(j, accuracy) {rho:+.2f} on average" if math.isfinite(rho) else ""))
    for name, r in res["models"].items():
        for opt in present(res, name):
            net, lin = r.get(f"{opt}_network"), r.get(f"{opt}_linear")
            if net is None or lin is None:
                continue
            a_net, a_lin = (np.asarray(v["val_acc"], np.float64) for v in (net, lin))
            g, nd = finite_gap(a_lin[:, :J].mean(1), a_net[:, :J].mean(1), n_test=n_val * J)
            rows.append(verdict(
                f"{LABELS.get(name, name)}, {opt.upper()}: linear advantage on eigenfunctions",
                "linearised models are clearly ahead on CIFAR-10 eigenfunctions (Fig. 2)",
                f"linearised minus network, mean over {J} targets: {fmt_gap(g)}{_dropped(nd)}", exceeds(g), g.half))
            g, nd = finite_gap(a_net[:, J], a_lin[:, J], n_test=n_val)
            rows.append(verdict(
                f"{LABELS.get(name, name)}, {opt.upper()}: network ahead on the dataset's own labels",
                "networks 'perform significantly better than their linear approximations' on CIFAR-2 (App. A)",
                f"network {_pct(a_net[:, J])}, linearised {_pct(a_lin[:, J])}: gap {fmt_gap(g)}{_dropped(nd)}",
                exceeds(g), g.half))
    r = res["models"].get(cross_model)
    if r is not None:
        for opt in present(res, cross_model):
            net, lin = r.get(f"{opt}_network"), r.get(f"{opt}_linear")
            if net is None or lin is None:
                continue
            a_net, a_lin = (np.asarray(v["val_acc"], np.float64) for v in (net, lin))
            gaps = [finite_gap(a_lin[:, i], a_net[:, i], n_test=n_val)[0] for i in range(J)]
            ahead_lin = [js[i] for i, g in enumerate(gaps) if exceeds(g) == HOLDS]
            ahead_net = [js[i] for i, g in enumerate(gaps) if exceeds(g) == FAILS]
            if ahead_lin and ahead_net:
                result = HOLDS
            elif len(ahead_lin) == J or len(ahead_net) == J:
                result = FAILS
            else:
                result = UNRESOLVED
            widest = max(g.half for g in gaps)
            rows.append(verdict(
                f"{LABELS.get(cross_model, cross_model)}, {opt.upper()}: the two curves cross",
                "on MNIST the LeNet's curves cross near j=500 (Fig. 3); no crossing on CIFAR-10",
                "linearised ahead at " + (", ".join(map(str, ahead_lin)) or "no j") + "; network ahead at "
                + (", ".join(map(str, ahead_net)) or "no j") + f"; gaps per j: "
                + ", ".join(f"{100 * g.mean:+.1f}" for g in gaps) + " points",
                result, widest, "a j counts when its interval excludes 0"))
    return rows


def spectrum_text(res: Mapping, js: Sequence[int], top: int = 50) -> str:
    """How fast the NTK spectra decay, per model (mean over initialisations): the share of the
    trace in the top ``top`` eigenvalues, and the eigenvalue at the largest ``j`` as a fraction
    of the largest one.

    >>> ev = np.array([[1.0 / (i + 1) ** 2 for i in range(100)]])
    >>> spectrum_text({"models": {"mlp": {"eigvals": ev}}}, [1, 64], top=10)
    'MLP: the top 10 of 100 eigenvalues hold 94.8% of the trace, and the eigenvalue at j=64 is 0.00024 of the largest'
    """
    parts = []
    for name, r in res["models"].items():
        ev = np.asarray(r["eigvals"], np.float64)
        share = float((ev[:, :top].sum(1) / ev.sum(1)).mean())
        ratio = float((ev[:, int(js[-1])] / ev[:, 0]).mean())
        parts.append(f"{LABELS.get(name, name)}: the top {top} of {ev.shape[1]:,} eigenvalues hold {100 * share:.1f}% "
                     f"of the trace, and the eigenvalue at j={int(js[-1])} is {ratio:.2g} of the largest")
    return "; ".join(parts)


def chance_rows(res: Mapping, js: Sequence[int], n_val: int, name: str = "lenet") -> list:
    """Is each curve of ``name`` above chance at the largest ``j``? Per optimiser and
    network/linearised: validation accuracy minus 0.5, over seeds with the test noise of
    ``n_val`` inputs, judged by :func:`itlin.book.verdicts.exceeds`."""
    from ...verdicts import exceeds, fmt_gap, verdict

    rows = []
    if name not in res["models"]:
        return rows
    J = len(js)
    for opt in present(res, name):
        for variant in VARIANTS:
            key = f"{opt}_{variant}"
            if key not in res["models"][name]:
                continue
            acc = np.asarray(res["models"][name][key]["val_acc"], np.float64)[:, J - 1]
            g, nd = finite_gap(acc, np.full(acc.shape, 0.5), n_test=n_val)
            rows.append(verdict(f"{LABELS.get(name, name)} {variant}, {opt.upper()}: above chance at "
                                f"{_fmt_j(js[-1])}", "—", f"{_pct(acc)}: {fmt_gap(g)} above 50%{_dropped(nd)}",
                                exceeds(g), g.half))
    return rows


def chance_text(rows: Sequence[dict]) -> str:
    """One sentence from :func:`chance_rows`: each curve's accuracy at the largest ``j`` and
    whether it is above chance, indistinguishable from it, or below."""
    from ...verdicts import FAILS, HOLDS

    word = {HOLDS: "above chance", FAILS: "below chance"}
    return "; ".join(f"{r['claim'].split(': above')[0]} {r['measured'].split(':')[0]}, "
                     f"{word.get(r['verdict'], 'not distinguishable from chance')} "
                     f"(resolves {100 * r['resolvable']:.1f} points)" for r in rows)


def hardness(res: Mapping, name: str, threshold: float, steps: int, steps_per_epoch: int, opt: str = "sgd") -> dict:
    """Their Figs. 4-5 for one model (the network trained with ``opt``): per seed and target,
    ``iterations`` to the training-loss ``threshold`` (``inf``: not within the budget),
    ``l2`` and ``cosine`` distances of the final weights from the initial ones."""
    r = res["models"][name][f"{opt}_network"]
    it = iterations_to(r["epoch_loss"], threshold, steps_per_epoch)
    if "diverged" in r:  # a diverged run has no iteration count
        it = np.where(np.asarray(r["diverged"], bool), np.nan, it)
    return {"iterations": it, "iterations_bound": censored(it, steps, steps_per_epoch),
            "l2": np.asarray(r["l2_distance"], np.float64), "cosine": np.asarray(r["cos_distance"], np.float64),
            "final_loss": np.asarray(r["epoch_loss"], np.float64)[..., -1]}


def fitted_range(iterations, js: Sequence[int]) -> int:
    """The number of leading targets that every seed fitted (reached the loss threshold) within
    the budget: targets ``0 .. n-1`` of ``js`` all have finite ``iterations`` ``(S, >= J)``."""
    ok = np.all(np.isfinite(np.asarray(iterations)[:, :len(js)]), axis=0)
    return int(len(js) if ok.all() else np.argmin(ok))


def claims_hardness(res: Mapping, js: Sequence[int], threshold: float, steps: int, steps_per_epoch: int,
                    opt: str = "sgd") -> list:
    """Their Appendix E.1.1 (Figs. 4-5), per model trained with ``opt`` (paired over seeds):

    * the iterations to reach a training loss of ``threshold`` are larger at the last ``j`` than
      at the first (runs that never reach it count one epoch past the budget: a lower bound);
    * the l2 and the cosine distances of the final weights from the initial ones are larger at
      the largest ``j`` that every seed fitted (:func:`fitted_range`) than at the first ``j``.
      The distance at the end of training says how far fitting a target takes the weights only
      for runs that fitted it; unfinished runs stop wherever the budget ends. With fewer than
      two fitted targets the verdict is "cannot resolve".
    """
    from ...verdicts import UNRESOLVED, exceeds, fmt_gap, verdict

    rows = []
    J = len(js)
    for name in res["models"]:
        if f"{opt}_network" not in res["models"][name]:
            continue
        h = hardness(res, name, threshold, steps, steps_per_epoch, opt)
        label = LABELS.get(name, name)
        it = h["iterations_bound"][:, :J]
        reached = np.isfinite(h["iterations"][:, :J]).sum(0)
        g, nd = finite_gap(it[:, J - 1], it[:, 0])
        rows.append(with_units(verdict(
            f"{label}: more iterations to a training loss of {threshold:g} at larger j",
            "grows with the eigenfunction index (Figs. 4-5)",
            f"{fmt_finite(it[:, 0], 1, '', 0)} at {_fmt_j(js[0])} ({reached[0]}/{len(it)} reached it), "
            f"at least {fmt_finite(it[:, J - 1], 1, '', 0)} at {_fmt_j(js[-1])} ({reached[-1]}/{len(it)} reached it): "
            f"gap {fmt_gap(g, 1, ' iterations', 0)}{_dropped(nd)}", exceeds(g), g.half,
            "runs that never reach it count as one epoch past the budget"), (1.0, " iterations", 0)))
        n_fit = fitted_range(h["iterations"], js)
        for key, what in (("l2", "l2 distance"), ("cosine", "cosine distance")):
            v = h[key][:, :J]
            digits = 2 if key == "l2" else 4
            beyond = (f"; beyond it, unfinished runs: {fmt_finite(v[:, J - 1], 1, '', digits)} at {_fmt_j(js[-1])}"
                      if n_fit < J else "")
            if n_fit >= 2:
                last = n_fit - 1
                g, nd = finite_gap(v[:, last], v[:, 0])
                rows.append(with_units(verdict(
                    f"{label}: {what} from the initial weights grows with j (fitted targets)",
                    "grows with the eigenfunction index (Figs. 4-5)",
                    f"{fmt_finite(v[:, 0], 1, '', digits)} at {_fmt_j(js[0])}, {fmt_finite(v[:, last], 1, '', digits)} at "
                    f"{_fmt_j(js[last])}: gap {fmt_gap(g, 1, '', digits)}{_dropped(nd)}", exceeds(g), g.half,
                    f"every seed fitted j <= {js[last]}{beyond}"), (1.0, "", digits)))
            else:
                rows.append(verdict(
                    f"{label}: {what} from the initial weights grows with j (fitted targets)",
                    "grows with the eigenfunction index (Figs. 4-5)",
                    f"fewer than two targets fitted by every seed (loss {threshold:g}); "
                    f"{fmt_finite(v[:, 0], 1, '', digits)} at {_fmt_j(js[0])}{beyond}", UNRESOLVED, None,
                    "no gap between fitted targets to measure"))
    return rows


# ============================================================================ tables and figures
def settings_rows(rec) -> list:
    """``(setting, this run, scale="paper", the paper)`` rows for the chapter's settings table."""
    r = resolved(rec)
    paper = EigenParams.from_dict({"scale": "paper"}).resolved()
    models = ", ".join(LABELS[m] + (f" (width {r['resnet_width']})" if m == "resnet18" else "") for m in r["models"])
    pmodels = ", ".join(LABELS[m] + (f" (width {paper['resnet_width']})" if m == "resnet18" else "")
                        for m in paper["models"])
    one_d = not is_image_dataset(r["dataset"])
    return [
        ("data (pool of the NTK)", f"{r['dataset']}: {r['n_train']:,} train + {r['n_val']:,} validation inputs",
         f"{paper['dataset']}: all of its train + test splits", "CIFAR-10, 60,000 images (MNIST, 70,000, in Fig. 3)"),
        ("models (one output)", models + (" (1-D)" if one_d else ""), pmodels,
         "MLP 2x100, LeNet-5, ResNet-18 (no ResNet on MNIST)"),
        ("initialisations (each its own NTK)", r["seeds"], paper["seeds"], "one"),
        ("eigenfunction indices j", ", ".join(map(str, r["eigen_indices"])),
         ", ".join(map(str, paper["eigen_indices"])), "log-spaced, up to about 1000"),
        ("optimisers", ", ".join(o.upper() for o in r["optimizers"]), "SGD, ADAM", "SGD (main text), Adam (Fig. 2)"),
        ("SGD", f"momentum {r['momentum']:g}, lr {r['learning_rate']:g} -> 0 linearly, batch {r['batch_size']}",
         "same", "momentum 0.9, lr 0.05 decayed, batch 128"),
        ("Adam", f"lr {r['adam_learning_rate']:g} -> 0 linearly, batch {r['batch_size']}", "same", "not stated"),
        ("epochs", f"{r['epochs']} ({r['steps']:,} steps)", paper["epochs"], "100 (200 on CIFAR-2)"),
        ("training loss counted as trained", f"{r['loss_threshold']:g}", f"{paper['loss_threshold']:g}", "0.01"),
    ]


def settings_markdown(rows) -> str:
    """A Markdown table of :func:`settings_rows`-style rows ``(setting, this run, scale="paper", the paper)``."""
    lines = ['| setting | this run | scale="paper" | the paper |', "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def paper_num_params(resnet_width: int = 64) -> dict:
    """Weights of the three one-output models on CIFAR-10 inputs (shapes only, nothing computed)."""
    import jax.numpy as jnp

    from ....core._tree import num_params

    out = {}
    for name in ("mlp", "lenet", "resnet18"):
        model = build_model(name, "cifar10", resnet_width)
        shapes = jax.eval_shape(lambda k: model.init(k, jnp.zeros((2, 32, 32, 3), jnp.float32)), jax.random.PRNGKey(0))
        out[name] = int(num_params(shapes[0]))
    return out


def cost_rows(rec, paper_n: int = 60_000, paper_params: Optional[Mapping] = None, memory_mb: float = 512.0,
              reference: Optional[str] = None) -> list:
    """Per model: ``(model, N, P, Gram memory, Jacobian block memory, measured NTK and eigh
    seconds, estimates at the paper's N and P)``. The estimate scales the measured time by
    ``N^2 P`` (the Gram products dominate) and ``N^3`` (the eigendecomposition) on this machine;
    memory is the float64 Gram on the host plus two float32 Jacobian blocks.

    A model of ``paper_params`` that this run did not measure gets a row with only the paper's
    numbers, its NTK time scaled by ``N^2 P`` from the measured model ``reference`` (default: the
    last one measured) and named in ``"scaled_from"``."""
    out = []
    cost = rec.meta["cost"]
    for name, c in cost.items():
        n, P = int(c["n"]), int(c["num_params"])
        t_ntk = float(np.median(c["ntk_seconds"][1:] if len(c["ntk_seconds"]) > 1 else c["ntk_seconds"]))
        t_eigh = float(np.median(c["eigh_seconds"]))
        pp = (paper_params or {}).get(name)
        row = {"model": name, "n": n, "num_params": P, "gram_bytes": 8.0 * n * n,
               "block_bytes": 2 * 4.0 * P * int(c["block"]), "ntk_seconds": t_ntk, "eigh_seconds": t_eigh,
               "scaled_from": None}
        if pp:
            b = block_size(pp, memory_mb, paper_n)
            row.update(paper_n=paper_n, paper_params=pp, paper_gram_bytes=8.0 * paper_n ** 2,
                       paper_block_bytes=2 * 4.0 * pp * b,
                       paper_ntk_seconds=t_ntk * (paper_n / n) ** 2 * (pp / P),
                       paper_eigh_seconds=t_eigh * (paper_n / n) ** 3)
        out.append(row)
    measured = {row["model"]: row for row in out}
    ref = measured.get(reference) if reference else (out[-1] if out else None)
    for name, pp in (paper_params or {}).items():
        if name in measured or ref is None or "paper_params" not in ref:
            continue
        b = block_size(pp, memory_mb, paper_n)
        out.append({"model": name, "n": None, "num_params": None, "gram_bytes": None, "block_bytes": None,
                    "ntk_seconds": None, "eigh_seconds": None, "scaled_from": ref["model"], "paper_n": paper_n,
                    "paper_params": pp, "paper_gram_bytes": 8.0 * paper_n ** 2, "paper_block_bytes": 2 * 4.0 * pp * b,
                    "paper_ntk_seconds": ref["paper_ntk_seconds"] * pp / ref["paper_params"],
                    "paper_eigh_seconds": ref["paper_eigh_seconds"]})
    return out


def cost_markdown(rows, grams: Optional[Mapping] = None) -> str:
    """A Markdown table of :func:`cost_rows`: this run's memory and time per Gram matrix beside
    the paper's; ``grams`` (``{model: (Gram matrices in this run, at the paper's scale)}``) adds
    the totals of the NTK time."""
    gb, mb = 1e-9, 1e-6
    tot = grams is not None
    head = ("| model | N | P | Gram (float64) | Jacobian blocks | NTK | eigh |" + (" NTK, all Grams |" if tot else "")
            + " paper: N | P | Gram | Jacobian blocks | NTK | eigh |" + (" NTK, all Grams |" if tot else ""))
    lines = [head, "| --- |" + " ---: |" * (head.count("|") - 2)]
    hours = lambda sec: f"{sec / 3600:.1f} h" if sec >= 360 else f"{sec / 60:.1f} min"
    for c in rows:
        label = LABELS.get(c["model"], c["model"])
        if c["n"] is None:
            here = ["not run"] + ["—"] * (6 if tot else 5)
            label += f" (NTK time scaled by P from the {LABELS.get(c['scaled_from'], c['scaled_from'])})"
        else:
            here = [f"{c['n']:,}", f"{c['num_params']:,}", f"{c['gram_bytes'] * mb:.0f} MB",
                    f"{c['block_bytes'] * mb:.0f} MB", f"{c['ntk_seconds']:.1f} s", f"{c['eigh_seconds']:.1f} s"]
            if tot:
                here.append(f"{c['ntk_seconds'] * grams[c['model']][0]:.0f} s")
        paper = [f"{c['paper_n']:,}", f"{c['paper_params']:,}", f"{c['paper_gram_bytes'] * gb:.1f} GB",
                 f"{c['paper_block_bytes'] * mb:.0f} MB", hours(c["paper_ntk_seconds"]), hours(c["paper_eigh_seconds"])]
        if tot:
            paper.append(hours(c["paper_ntk_seconds"] * grams[c["model"]][1]))
        lines.append("| " + " | ".join([label] + here + paper) + " |")
    return "\n".join(lines)


def _band(ax, x, values, color, label, ls="-", marker="o"):
    from ...verdicts import seed_interval

    v = np.asarray(values, np.float64)
    mi = [seed_interval(col[np.isfinite(col)]) for col in v.T]
    m = np.array([a for a, _ in mi])
    h = np.array([b if math.isfinite(b) else 0.0 for _, b in mi])
    ax.plot(x, m, ls, color=color, marker=marker, ms=4, label=label)
    ax.fill_between(x, m - h, m + h, color=color, alpha=0.18, lw=0)
    return m


COLOURS = {"network": "#1f4e79", "linear": "#d9731a"}


def _jaxis(ax, js):
    """A log axis for eigenfunction indices (symmetric-log when ``j = 0`` is among them), limited
    to the indices' range."""
    js = np.asarray(js, np.float64)
    if js.min() >= 1:
        ax.set_xscale("log")
        ax.set_xlim(js.min() / 1.5, js.max() * 1.5)
    else:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.3, js.max() * 1.5)


def figure_accuracy(rec):
    """Validation accuracy against j: one panel per (optimiser, model); network solid, linearised
    dashed, bands 95% intervals over seeds; the dataset's own labels as horizontal lines."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    js = np.asarray(res["eigen_indices"])
    J = len(js)
    names = list(res["models"])
    opts = sorted({o for n in names for o in present(res, n)}, key=lambda o: ("sgd", "adam").index(o))
    fig, axes = plt.subplots(len(opts), len(names), figsize=(COLUMN_WIDTH, 2.9 * len(opts) + 0.5), sharex=True,
                             sharey=True, squeeze=False)
    for i, opt in enumerate(opts):
        for k, name in enumerate(names):
            ax = axes[i, k]
            r = res["models"][name]
            for variant in VARIANTS:
                key = f"{opt}_{variant}"
                if key not in r:
                    continue
                acc = np.asarray(r[key]["val_acc"], np.float64)
                _band(ax, js, acc[:, :J], COLOURS[variant], "network" if variant == "network" else "linearised",
                      "-" if variant == "network" else "--")
                ax.axhline(acc[:, J].mean(), color=COLOURS[variant], lw=1.0, ls=":" if variant == "linear" else "-.",
                           alpha=0.9, label=f"{'network' if variant == 'network' else 'linearised'}, own labels")
            ax.axhline(0.5, color="0.6", lw=0.8)
            _jaxis(ax, js)
            ax.set_title(f"{LABELS.get(name, name)}, {opt.upper()}")
            if i == len(opts) - 1:
                ax.set_xlabel(r"eigenfunction index $j$")
            if k == 0:
                ax.set_ylabel("validation accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=9)
    return fig


def figure_gap(rec):
    """Linearised minus network validation accuracy against j (points), with 95% intervals over
    seeds and test noise; one panel per optimiser, one line per model."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    js = np.asarray(res["eigen_indices"])
    J = len(js)
    n_val = int(resolved(rec)["n_val"])
    names = list(res["models"])
    opts = sorted({o for n in names for o in present(res, n)}, key=lambda o: ("sgd", "adam").index(o))
    fig, axes = plt.subplots(1, len(opts), figsize=(COLUMN_WIDTH, 3.1), sharey=True, squeeze=False)
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, len(names)))
    for ax, opt in zip(axes[0], opts):
        for c, name in zip(colours, names):
            r = res["models"][name]
            if f"{opt}_network" not in r or f"{opt}_linear" not in r:
                continue
            a_net, a_lin = (np.asarray(r[f"{opt}_{v}"]["val_acc"], np.float64) for v in VARIANTS)
            gaps = [finite_gap(a_lin[:, i], a_net[:, i], n_test=n_val)[0] for i in range(J)]
            m = 100 * np.array([g.mean for g in gaps])
            h = 100 * np.array([g.half if math.isfinite(g.half) else 0.0 for g in gaps])
            ax.errorbar(js * (1.0 + 0.06 * names.index(name)), m, yerr=h, marker="o", ms=4, capsize=2,
                        color=c, label=LABELS.get(name, name))
        ax.axhline(0, color="0.4", lw=0.8)
        _jaxis(ax, js)
        ax.set_xlabel(r"eigenfunction index $j$")
        ax.set_title(opt.upper())
    axes[0, 0].set_ylabel("linearised − network\n(accuracy points)")
    axes[0, 0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def figure_hardness(rec, opt: str = "sgd"):
    """Their Figs. 4-5: iterations to the loss threshold (open markers: not reached within the
    budget, drawn at the budget), l2 and cosine distances from the initial weights, against j,
    for the networks trained with ``opt``; bands are 95% intervals over seeds."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    r = resolved(rec)
    js = np.asarray(res["eigen_indices"])
    J = len(js)
    names = [n for n in res["models"] if f"{opt}_network" in res["models"][n]]
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_WIDTH, 2.9))
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, max(len(names), 1)))
    for c, name in zip(colours, names):
        h = hardness(res, name, r["loss_threshold"], r["steps"], r["steps_per_epoch"], opt)
        it = h["iterations"][:, :J]
        med = np.array([np.median(col[~np.isnan(col)]) if (~np.isnan(col)).any() else np.nan
                        for col in it.T])  # inf when most runs never got there
        reached = np.isfinite(med)
        axes[0].plot(js[reached], med[reached], "o-", color=c, ms=4, label=LABELS.get(name, name))
        axes[0].plot(js[~reached], np.full((~reached).sum(), r["steps"]), "o", mfc="none", color=c, ms=6)
        _band(axes[1], js, h["l2"][:, :J], c, LABELS.get(name, name))
        _band(axes[2], js, h["cosine"][:, :J], c, LABELS.get(name, name))
    axes[0].axhline(r["steps"], color="0.6", lw=0.8, ls=":")
    axes[0].set_ylabel(f"iterations to loss {r['loss_threshold']:g}")
    axes[0].set_title("median over seeds", fontsize=9)
    axes[1].set_ylabel(r"$\|\theta_T - \theta_0\|_2$")
    axes[2].set_ylabel(r"$1 - \cos(\theta_0, \theta_T)$")
    for ax in axes:
        _jaxis(ax, js)
        ax.set_xlabel(r"$j$")
    axes[1].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def figure_spectrum(rec):
    """The NTK spectra at initialisation (eigenvalue over the trace, decreasing; mean over
    seeds), with the indices used as targets marked."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    js = np.asarray(res["eigen_indices"])
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.0))
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, len(res["models"])))
    for c, (name, r) in zip(colours, res["models"].items()):
        ev = np.asarray(r["eigvals"], np.float64)
        rel = (ev / ev.sum(1, keepdims=True)).mean(0)
        idx = np.arange(rel.size)
        ax.plot(idx + 1, rel, color=c, label=LABELS.get(name, name))
        ax.plot(js + 1, rel[js], "o", color=c, ms=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$j + 1$ (eigenvalues in decreasing order)")
    ax.set_ylabel(r"$\lambda_j / \mathrm{tr}\,\Theta_0$")
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig
