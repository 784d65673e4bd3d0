"""What the two Ortiz-Jimenez experiments share: their binary task, their one-output models and
initialisations, their training recipe, and the gaps their claims are judged on (their NTK Gram
matrices are :func:`itlin.metrics.ntk_gram`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal, Mapping, Optional

import jax
import numpy as np

from ... import verdicts as V
from ...labels import fmt_finite  # noqa: F401 (C.fmt_finite in the ortiz modules)
from .. import Params, param

ModelName = Literal["mlp", "lenet", "resnet18"]
#: "CIFAR-2" in their code: classes 0-4 against 5-9
GROUPS = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
LABELS = {"mlp": "MLP", "lenet": "LeNet", "resnet18": "ResNet-18"}
ORDER, ALL = tuple(LABELS), 10 ** 9  # the models in order of size; ALL: "the whole split"
#: MNIST-1D generated larger (4,000 training, 16,000 test signals) when more than its 1,000 test signals are asked for
MNIST1D_LARGE = {"num_samples": 20_000, "train_split": 0.2}


@dataclass(frozen=True)
class OrtizParams(Params):
    """The parameters both experiments share: data, models, initialisations and their training recipe."""

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1-D models), fashion_mnist or cifar10 (2-D models); None: from scale", label="data set",
        source="CIFAR-10 (Section 3.2; CIFAR-2: classes 0-4 vs 5-9, App. E.2)")
    models: Optional[tuple[ModelName, ...]] = param(None, "any of mlp, lenet, resnet18; None: from scale",
                                                    label="models (one output)", source="Appendix A", distinct=True)
    seeds: Optional[int] = param(None, "initialisations, each with its own NTK; None: from scale", min=1,
                                 label="initialisations", source="our choice: the paper shows one")
    epochs: Optional[int] = param(None, "training epochs; None: from scale", min=1, label="epochs",
                                  source="Appendix A: 100 (200 on CIFAR-2)")
    batch_size: int = param(128, "mini-batch size", min=1, label="batch size", source="Appendix A")
    learning_rate: float = param(0.05, "SGD learning rate, decayed linearly to 0", gt=0,
                                 label="SGD learning rate (decayed linearly to 0)", source="Appendix A")
    momentum: float = param(0.9, "SGD heavy-ball momentum", min=0, lt=1, label="SGD momentum", source="Appendix A")
    resnet_width: Optional[int] = param(None, "ResNet-18 first-stage width; None: from scale", min=1,
                                        label="ResNet-18 first-stage width", source="the standard ResNet-18")
    ntk_memory_mb: float = param(512.0, "memory for the Jacobian blocks of one NTK block (MB)", gt=0)

    def check_common(self, r: Mapping):  # batches larger than the training set
        if r["n_train"] < ALL and r["batch_size"] > r["n_train"]:
            raise ValueError(f"batch_size={r['batch_size']} is more than n_train={r['n_train']} training inputs")


def build_model(name: str, dataset: str, resnet_width: int = 8):
    """One-output versions of their architectures (Appendix A): ``mlp`` (2 x 100, ReLU), ``lenet``
    (LeNet-5: 6 and 16 channels, dense 120 and 84), ``resnet18``; 1-D ones for MNIST-1D."""
    from .... import models

    image = dataset in ("fashion_mnist", "cifar10")
    if name == "mlp":
        return models.mlp(num_outputs=1, widths=(100, 100))
    if name == "lenet":
        return (models.lenet if image else models.lenet1d)(num_outputs=1, channels=(6, 16))
    if name == "resnet18":
        return (models.resnet18 if image else models.resnet18_1d)(num_outputs=1, width=int(resnet_width))
    raise ValueError(f"unknown model {name!r}; choose mlp, lenet or resnet18.")


def load_binary(dataset: str, n_train: int, n_test: int, seed: int):
    """``dataset`` as their binary task (classes 0-4 against 5-9, +-1 targets ``(N, 1)``), with
    class-balanced subsets (``seed``); MNIST-1D generated larger when ``n_test`` exceeds 1,000."""
    from .... import data

    gen = MNIST1D_LARGE if dataset == "mnist1d" and ALL > n_test > 1000 else {}
    ds = data.class_groups(data.load(dataset, **gen), GROUPS, target="pm1")
    n_tr = None if n_train >= ds.n_train else int(n_train)
    n_te = None if n_test >= ds.n_test else int(n_test)
    return ds.subset(n_tr, n_te, seed=seed) if (n_tr or n_te) else ds


def init_key(seed: int, s: int):
    """The key of initialisation ``s``: ``fold_in(PRNGKey(seed), s)``."""
    return jax.random.fold_in(jax.random.PRNGKey(int(seed)), int(s))


def init_many(model, seed: int, count: int, x) -> list:
    """``[(params, model_state)]`` of initialisations ``0 .. count-1`` (:func:`init_key`), by one vmapped init."""
    import jax.numpy as jnp

    keys = jnp.stack([init_key(seed, s) for s in range(int(count))])
    params, states = jax.jit(jax.vmap(lambda k: model.init(k, x)))(keys)
    return [(jax.tree_util.tree_map(lambda a: a[s], params), jax.tree_util.tree_map(lambda a: a[s], states))
            for s in range(int(count))]


def batch_seed(seed: int, s: int) -> int:
    """The mini-batch order of run ``s`` (:func:`itlin.batch_indices`)."""
    return 7919 * int(seed) + int(s)


def sign_targets(vectors, indices) -> np.ndarray:
    """``sign(phi_j)`` (+1 where ``phi_j >= 0``) for each ``j`` of ``indices``: ``(J, N)`` float32."""
    v = np.asarray(vectors)[:, list(indices)].T
    return np.where(v >= 0, 1.0, -1.0).astype(np.float32)


def optimizer(name: str, params: OrtizParams, steps: int):
    """Their SGD (momentum, learning rate decayed linearly to 0 over ``steps``) or Adam (same decay)."""
    import optax

    if name == "sgd":
        return optax.sgd(optax.linear_schedule(params.learning_rate, 0.0, steps), momentum=params.momentum or None)
    if name == "adam":
        return optax.adam(optax.linear_schedule(params.adam_learning_rate, 0.0, steps))
    raise ValueError(f"unknown optimiser {name!r}")


@partial(jax.jit, static_argnums=(0,))
def predict(trainer, state, x):
    """Outputs ``(N,)`` of the model being trained: the network or its linearisation at the anchor."""
    from ....core.linearise import linearised_apply

    f = trainer.model.bind(state.model_state)
    out = f(state.params, x) if trainer.gd_path else linearised_apply(f, state.anchor, state.params, x)
    return out.reshape(-1)


def sign_accuracy(outputs, targets) -> float:
    return float(np.mean((np.asarray(outputs).reshape(-1) > 0) == (np.asarray(targets).reshape(-1) > 0)))


# ------------------------------------------------------------------------------ claims
def gap_claim(id: str, claim: str, paper: str, a, b, rule: str = "exceeds", margin: float = 0.0, *,
              n_test: Optional[int] = None, examples: Optional[tuple] = None, measured: str = "",
              **kw) -> V.Verdict:
    """:func:`itlin.book.verdicts.judge` on ``a - b`` paired over the seeds where both are finite (a
    diverged run's NaN is counted in ``dropped``); the test set's noise from ``examples`` (``(ea,
    eb)``, per seed and example, ``(S, n)``: the per-example versions of ``a`` and ``b`` on the same
    examples, for the paired noise of :func:`itlin.book.verdicts.paired_accuracy_se`), else from
    ``n_test`` (the unpaired bound)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    per_example = None
    if examples is not None and keep.sum() >= 1:
        per_example = (np.asarray(examples[0])[keep], np.asarray(examples[1])[keep])
    gap = V.paired_gap(a[keep], b[keep], n_test=n_test, examples=per_example)
    return V.judge(id, claim, paper, gap, rule, margin, measured=measured, dropped=int((~keep).sum()), **kw)


__all__ = ["ALL", "GROUPS", "LABELS", "MNIST1D_LARGE", "ModelName", "ORDER", "OrtizParams", "batch_seed", "build_model",
           "fmt_finite", "gap_claim", "init_key", "init_many", "load_binary", "optimizer", "predict", "sign_accuracy",
           "sign_targets"]
