"""Ortiz-Jimenez et al. (NeurIPS 2021), Appendix E.2-E.3: how training changes the NTK; and the link
with iterative linearisation.

On a binary task (classes 0-4 against 5-9, +-1 labels; their "CIFAR-2" construction), for each
architecture and each initialisation ``s`` (``fold_in(PRNGKey(seed), s)``):

* **Energy concentration** (their Table 1): ``||Phi_k^T y|| / ||y||`` of the +-1 training labels
  on the top ``k = 50`` eigenvectors of the empirical NTK Gram matrix on ``n_kernel`` training
  inputs (a class-balanced subset; all of them by default), at initialisation and at the end of training the network on the labels
  (SGD, momentum 0.9, learning rate 0.05 decayed linearly to 0, batch 128, sigmoid
  cross-entropy), with the test accuracy; also the centred kernel-target alignment
  (:func:`itlin.metrics.kernel_target_alignment`) and the energy on the top ``k'`` eigenvectors
  for every ``k' <= 200``.
* **Alignment spikes** (their Appendix E.3, Figs. 6-7): the network trained on ``sign(phi_j)``
  at the ``n_kernel`` inputs (``phi_j``: eigenvectors of the same initial Gram matrix,
  decreasing eigenvalue, ``j`` from 0) for ``j`` in ``align_indices``, with the same recipe; after training, the relative alignment
  ``a_i(T) = phi_i^T Theta_T phi_i / tr Theta_T`` of every initial eigenvector with the final
  NTK (:func:`itlin.metrics.eigenvector_alignment`), and its gain over initialisation
  ``a_i(T) / a_i(0)`` (``a_i(0) = lambda_i / tr Theta_0``).
* **The link with iterative linearisation**: ``link_model`` trained on the labels with the same
  recipe at the periods ``Ks`` (:func:`itlin.iterative_linearisation`; no relinearisation after
  the last step); energy concentration and alignment of the *trained model's* kernel, the NTK at
  its last linearisation point (``K = 1``: the final weights; ``K = inf``: initialisation).

Every Gram matrix comes from :func:`itlin.book.experiments.ortiz.ortiz_eigenfunctions.gram` (blocks of
:func:`itlin.ntk`). Each (model, initialisation) is one :meth:`ctx.stage
<itlin.book.runner.RunContext.stage>`, so an interrupted run resumes there.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Sequence

import numpy as np

from .. import Experiment, Params, Period, param, register
from .ortiz_eigenfunctions import (ALL, LABELS, ModelName, _dropped, batch_seed, block_size, build_model,
                                   finite_gap, fmt_finite, gram, init_many, load_binary, optimizer, predict,
                                   sign_accuracy, sign_targets, spectrum, with_units)

NAME = "ortiz_concentration"

#: their Table 1 (CIFAR-2, 12,000 training samples, 200 epochs, k = 50)
PAPER_TABLE = {"mlp": (0.260, 0.636, 0.676), "lenet": (0.258, 0.830, 0.750), "resnet18": (0.227, 0.967, 0.814)}
PAPER_N = 12_000
CURVE_K = 200  # energy on the top k' eigenvectors is kept for k' = 1 .. CURVE_K

SCALES = {
    "tiny": {"dataset": "mnist1d", "models": ("mlp",), "n_train": 128, "n_test": 128, "n_kernel": 128, "seeds": 2, "epochs": 4,
             "align_models": ("mlp",), "align_indices": (2, 8), "Ks": (1, 2, math.inf), "resnet_width": 4,
             "link_model": "mlp"},
    # the book on a 2-core CPU (about 2.5 minutes)
    "default": {"dataset": "mnist1d", "models": ("mlp", "lenet", "resnet18"), "n_train": 1000, "n_test": ALL, "n_kernel": 500,
                "seeds": 5, "epochs": 25, "align_models": ("mlp", "lenet"), "align_indices": (4, 16, 64),
                "Ks": (1, 10, 70, math.inf), "resnet_width": 8, "link_model": "lenet"},
    # their CIFAR-2 Table 1: 12,000 training samples, 200 epochs, ResNet-18 of width 64
    "paper": {"dataset": "cifar10", "models": ("mlp", "lenet", "resnet18"), "n_train": 12_000, "n_test": ALL, "n_kernel": 12_000,
              "seeds": 5, "epochs": 200, "align_models": ("mlp", "lenet"), "align_indices": (1, 10, 100, 500),
              "Ks": (1, 1000, 10_000, math.inf), "resnet_width": 64, "link_model": "lenet"},
}


@dataclass(frozen=True)
class ConcentrationParams(Params):
    SCALES = SCALES

    dataset: Optional[Literal["mnist1d", "fashion_mnist", "cifar10"]] = param(
        None, "mnist1d (1-D models), fashion_mnist or cifar10 (2-D; the paper: CIFAR-2 = cifar10 0-4 vs 5-9); "
              "None: from scale")
    models: Optional[tuple[ModelName, ...]] = param(None, "architectures of the table; None: from scale")
    n_train: Optional[int] = param(None, "training inputs (balanced subset); None: from scale", min=1)
    n_test: Optional[int] = param(None, "test inputs (balanced subset); None: from scale", min=1)
    n_kernel: Optional[int] = param(None, "training inputs (a balanced subset) on which the NTK Gram matrices are "
                                          "formed (the paper: 12,000); None: from scale", min=2)
    k: int = param(50, "top eigenvectors of the energy concentration (the paper: 50)", min=1)
    seeds: Optional[int] = param(None, "initialisations; None: from scale", min=1)
    epochs: Optional[int] = param(None, "training epochs (the paper: 200 on CIFAR-2); None: from scale", min=1)
    batch_size: int = param(128, "mini-batch size (the paper: 128)", min=1)
    learning_rate: float = param(0.05, "SGD learning rate, decayed linearly to 0 (the paper: 0.05)", gt=0)
    momentum: float = param(0.9, "SGD heavy-ball momentum (the paper: 0.9)", min=0, lt=1)
    resnet_width: Optional[int] = param(None, "ResNet-18 first-stage width (standard 64); None: from scale", min=1)
    align_models: Optional[tuple[ModelName, ...]] = param(None, "models trained on eigenfunctions for the alignment "
                                                                "spikes (Figs. 6-7); None: from scale")
    align_indices: Optional[tuple[int, ...]] = param(None, "eigenfunctions j trained on for the spikes; None: from "
                                                           "scale", min=1)
    window: float = param(2.0, "the spike is compared with indices i in [j / window, j * window]", gt=1)
    spike_z: float = param(3.0, "a trained eigenfunction stands out when its log alignment gain is more than this "
                                "many robust standard deviations above its window's median", gt=0)
    link_model: Optional[ModelName] = param(None, "model trained with iterative linearisation at the periods Ks; "
                                                  "None: from scale (lenet)")
    Ks: Optional[tuple[Period, ...]] = param(None, "relinearisation periods of link_model (K=1 included); None: "
                                                   "from scale")
    ntk_memory_mb: float = param(512.0, "memory for the Jacobian blocks of one NTK block (MB)", gt=0)

    def check(self):
        r = self.resolved()
        for key in ("models", "align_models", "align_indices", "Ks"):
            if len(set(r[key])) != len(r[key]):
                raise ValueError(f"{key} has repeated values: {r[key]}")
        if 1 not in [K for K in r["Ks"] if math.isfinite(K)]:
            raise ValueError("Ks must include K=1 (gradient descent, the run every other period is compared with)")
        if r["link_model"] not in r["models"]:
            raise ValueError(f"link_model={r['link_model']!r} must be one of models {list(r['models'])}")
        missing = [m for m in r["align_models"] if m not in r["models"]]
        if missing:
            raise ValueError(f"align_models {missing} must be among models {list(r['models'])}")
        n_kernel = min(r["n_kernel"], r["n_train"])
        if r["n_train"] < ALL and r["batch_size"] > r["n_train"]:
            raise ValueError(f"batch_size={r['batch_size']} is more than n_train={r['n_train']} training inputs")
        if r["n_kernel"] < ALL and r["k"] >= n_kernel:
            raise ValueError(f"k={r['k']} eigenvectors out of a Gram matrix on {n_kernel} inputs: take k < n_kernel")
        if r["n_kernel"] < ALL and max(r["align_indices"]) * r["window"] >= n_kernel:
            raise ValueError(f"align_indices up to {max(r['align_indices'])} with window {r['window']:g} reach past "
                             f"the {n_kernel} eigenvectors of the Gram matrix")
        if r["align_models"] and r["n_kernel"] < ALL and r["batch_size"] > n_kernel:
            raise ValueError(f"the spike runs train on the n_kernel={n_kernel} inputs, fewer than batch_size="
                             f"{r['batch_size']}")


def resolve(p: Mapping) -> dict:
    return ConcentrationParams.from_dict(p, experiment=NAME).resolved()


def grams_per_seed(r: Mapping, name: str) -> int:
    """NTK Gram matrices one initialisation of ``name`` needs (``r``: resolved parameters): at
    initialisation and after training on the labels, one per trained eigenfunction (an
    ``align_models`` member) and one per period ``1 < K < inf`` (the ``link_model``).

    >>> grams_per_seed({"align_models": ["mlp"], "align_indices": [4, 16], "link_model": "mlp",
    ...                 "Ks": [1, 10, 70, float("inf")]}, "mlp")
    6
    """
    n = 2
    if name in r["align_models"]:
        n += len(r["align_indices"])
    if name == r["link_model"]:
        n += sum(1 for K in r["Ks"] if float(K) != 1 and math.isfinite(float(K)))
    return n


def schedule(K, steps: int):
    """Period ``K`` over ``steps`` steps without a relinearisation after the last step (so the
    trained model at the end is the one training produced): ``K = 1`` and ``K = inf`` as
    :class:`itlin.Every`, others relinearise after steps ``K, 2K, ... < steps``."""
    from ....core.schedules import AtSteps, Every

    K = float(K)
    if K == 1 or math.isinf(K):
        return Every(math.inf if math.isinf(K) else 1)
    return AtSteps.of(range(int(K), int(steps), int(K)))


def fmt_K(K) -> str:
    return "∞" if math.isinf(float(K)) else f"{int(K):,}"


def key_K(K) -> str:
    """The results key of period ``K``: ``"K=70"``, ``"K=inf"``."""
    return "K=inf" if math.isinf(float(K)) else f"K={int(K)}"


def energy_curve(vectors, y, kmax: int) -> np.ndarray:
    """``||Phi_k'^T y|| / ||y||`` for ``k' = 1 .. kmax`` (``vectors``: eigenvectors by decreasing
    eigenvalue). Entry ``k - 1`` is :func:`itlin.metrics.energy_concentration` with ``k``."""
    y = np.asarray(y, np.float64).reshape(-1)
    proj = np.asarray(vectors)[:, :kmax].T @ y
    return np.sqrt(np.cumsum(proj ** 2)) / np.linalg.norm(y)


def kernel_summary(kernel, y, k: int, spec: Optional[tuple] = None) -> dict:
    """Energy concentration (top ``k``), the curve over ``k' <= 200``, the centred kernel-target
    alignment and the leading eigenvalues of one Gram matrix against +-1 labels ``y``
    (``spec``: its :func:`spectrum`, if already computed)."""
    from ....metrics import kernel_target_alignment

    vals, vecs = spectrum(kernel) if spec is None else spec
    curve = energy_curve(vecs, y, min(CURVE_K, len(vals)))
    return {"ec": float(curve[k - 1]) if k <= curve.size else float(energy_curve(vecs, y, k)[-1]),
            "ec_curve": curve, "kta": kernel_target_alignment(kernel, y), "eigvals": vals[:CURVE_K],
            "trace": float(np.trace(kernel))}


def alignment_gain(vectors, eigvals, kernel_end) -> dict:
    """Relative alignments of the initial eigenvectors with a final kernel and their gains:
    ``a_i(T) = phi_i^T Theta_T phi_i / tr Theta_T`` and ``a_i(T) / (lambda_i / tr Theta_0)``."""
    v = np.asarray(vectors, np.float64)
    kt = np.asarray(kernel_end, np.float64)
    a_end = np.sum(v * (0.5 * (kt + kt.T) @ v), axis=0) / np.trace(kt)
    a0 = np.asarray(eigvals, np.float64) / np.sum(eigvals)
    return {"a_end": a_end, "gain": a_end / a0}


def window(j: int, factor: float, n: int) -> np.ndarray:
    """Indices ``i`` with ``j / factor <= i <= j * factor`` (and ``1 <= i < n``)."""
    lo, hi = max(1, int(math.ceil(j / factor))), min(n - 1, int(math.floor(j * factor)))
    return np.arange(lo, hi + 1)


def spike(gain, j: int, factor: float) -> dict:
    """How far the gain of eigenfunction ``j`` stands out of its window (:func:`window`), on a
    log scale: ``z`` = (log gain_j - median of the other log gains in the window) / their
    robust standard deviation (1.4826 x median absolute deviation), ``ratio`` = gain_j over the
    window's median gain, ``largest`` = gain_j is the window's maximum, ``rank`` = 1 + how many
    indices of the window gained more.

    >>> g = np.exp(np.linspace(-0.1, 0.1, 20)); g[6] = 5.0
    >>> s = spike(g, 6, 2.0); s["z"] > 10, round(s["ratio"], 1), s["largest"], s["rank"]
    (True, 5.1, True, 1)
    """
    g = np.asarray(gain, np.float64)
    w = window(j, factor, g.size)
    others = np.log(g[w[w != j]])
    if others.size < 2 or not np.all(np.isfinite(others)) or not np.isfinite(g[j]) or g[j] <= 0:
        return {"z": math.nan, "ratio": math.nan, "largest": False, "rank": 0}
    med = np.median(others)
    mad = 1.4826 * np.median(np.abs(others - med))
    z = (math.log(g[j]) - med) / mad if mad > 0 else math.inf
    return {"z": float(z), "ratio": float(g[j] / math.exp(med)), "largest": bool(math.log(g[j]) > others.max()),
            "rank": int(1 + np.sum(others > math.log(g[j])))}


def run(p, ctx):
    import jax.numpy as jnp

    from ....core._tree import num_params
    from ....core.train import iterative_linearisation
    from ....data import balanced_indices

    r = resolve(p)
    ds = load_binary(r["dataset"], r["n_train"], r["n_test"], r["seed"])
    n_tr = ds.n_train
    nk = int(min(r["n_kernel"], n_tr))
    if r["k"] >= nk:
        raise ValueError(f"k={r['k']} eigenvectors out of a Gram matrix on {nk} inputs: take k < n_kernel")
    if r["batch_size"] > n_tr:
        raise ValueError(f"batch_size={r['batch_size']} is more than the {n_tr} training inputs")
    x_tr, y_tr = np.asarray(ds.x_train), np.asarray(ds.y_train[:, 0], np.float32)
    x_te, y_te = np.asarray(ds.x_test), np.asarray(ds.y_test[:, 0], np.float32)
    # the Gram matrices' inputs: a class-balanced subset of n_kernel training inputs (all of them by default)
    kidx = np.arange(n_tr) if nk == n_tr else balanced_indices(ds.labels("train"), nk, seed=(r["seed"], 7))
    xk, yk = x_tr[kidx], y_tr[kidx]
    S, E, B = int(r["seeds"]), int(r["epochs"]), int(r["batch_size"])
    steps = E * (n_tr // B)
    align_js = list(r["align_indices"])
    link_Ks = [K for K in r["Ks"] if K != 1]
    out = {"models": {}, "Ks": np.asarray([float(K) for K in r["Ks"]]), "align_indices": np.asarray(align_js)}
    meta_models, cost = {}, {}
    for name in r["models"]:
        model = build_model(name, r["dataset"], r["resnet_width"])
        inits = init_many(model, r["seed"], S, jnp.asarray(x_tr[:2]))
        P = num_params(inits[0][0])
        meta_models[name] = {**model.meta, "num_params": int(P), "block": block_size(P, r["ntk_memory_mb"], nk)}
        base = iterative_linearisation(model, optimizer("sgd", r, steps), 1, loss="bce")
        aligned = name in r["align_models"]
        if aligned:
            steps_align = E * (nk // B)
            align_tr = iterative_linearisation(model, optimizer("sgd", r, steps_align), 1, loss="bce")
        linked = name == r["link_model"]
        link_tr = {K: iterative_linearisation(model, optimizer("sgd", r, steps), schedule(K, steps), loss="bce")
                   for K in link_Ks} if linked else {}
        ctx.say(f"{name}: {P:,} weights, {S} initialisations, Gram matrices on {nk} inputs")

        def one_seed(s, model=model, inits=inits, base=base, aligned=aligned, linked=linked, link_tr=link_tr,
                     name=name):
            from ....core.loop import run as train

            t0 = time.perf_counter()
            p0, st0 = inits[s]
            bs = batch_seed(r["seed"], s)
            t_k = time.perf_counter()
            k0 = gram(model, p0, st0, xk, memory_mb=r["ntk_memory_mb"])
            t_e = time.perf_counter()
            vals0, vecs0 = spectrum(k0)
            res = {"init": kernel_summary(k0, yk, r["k"], (vals0, vecs0)), "ntk_seconds": t_e - t_k,
                   "eigh_seconds": time.perf_counter() - t_e}
            nan_summary = {key: np.full(np.shape(v), np.nan) for key, v in res["init"].items()}
            # trained on the labels (K = 1); a run that diverges keeps NaN metrics (the claims drop it)
            st, log = train(base, base.init(p0, st0), jnp.asarray(x_tr), jnp.asarray(y_tr), steps, batch_size=B,
                            seed=bs)
            res["diverged"] = not bool(np.all(np.isfinite(log.loss)) and log.loss.size == steps)
            if res["diverged"]:
                res["end"] = {**nan_summary, "gain": np.full(min(CURVE_K, nk), np.nan)}
                res["test_acc"] = res["train_acc"] = res["final_loss"] = math.nan
            else:
                kt = gram(model, st.params, st.model_state, xk, memory_mb=r["ntk_memory_mb"])
                res["end"] = kernel_summary(kt, yk, r["k"])
                res["end"]["gain"] = alignment_gain(vecs0, vals0, kt)["gain"][:CURVE_K]
                res["test_acc"] = sign_accuracy(predict(base, st, jnp.asarray(x_te)), y_te)
                res["train_acc"] = sign_accuracy(predict(base, st, jnp.asarray(x_tr)), y_tr)
                res["final_loss"] = float(np.mean(log.loss[-(n_tr // B):]))
            if aligned:
                targets = sign_targets(vecs0, align_js)
                gains, a_end, final = [], [], []
                for t, target in enumerate(targets):
                    st_j, log_j = train(align_tr, align_tr.init(p0, st0), jnp.asarray(xk), jnp.asarray(target),
                                        steps_align, batch_size=B, seed=bs)
                    if not (np.all(np.isfinite(log_j.loss)) and log_j.loss.size == steps_align):
                        gains.append(np.full(nk, np.nan))
                        a_end.append(np.full(nk, np.nan))
                        final.append(math.nan)
                        continue
                    kj = gram(model, st_j.params, st_j.model_state, xk, memory_mb=r["ntk_memory_mb"])
                    g = alignment_gain(vecs0, vals0, kj)
                    gains.append(g["gain"])
                    a_end.append(g["a_end"])
                    final.append(float(np.mean(log_j.loss[-(nk // B):])))
                res["align"] = {"gain": np.stack(gains), "a_end": np.stack(a_end), "a_init": vals0 / vals0.sum(),
                                "final_loss": np.asarray(final)}
            if linked:
                res["link"] = {}
                for K, tr in link_tr.items():
                    stK, logK = train(tr, tr.init(p0, st0), jnp.asarray(x_tr), jnp.asarray(y_tr), steps,
                                      batch_size=B, seed=bs)
                    diverged = not (np.all(np.isfinite(logK.loss)) and logK.loss.size == steps)
                    if diverged:
                        summ, acc = nan_summary, math.nan
                    elif math.isinf(K):  # the kernel never changes: the initial one
                        summ = res["init"]
                        acc = sign_accuracy(predict(tr, stK, jnp.asarray(x_te)), y_te)
                    else:
                        # the trained model's kernel: the NTK at its last linearisation point
                        kK = gram(model, stK.anchor, stK.model_state, xk, memory_mb=r["ntk_memory_mb"])
                        summ = kernel_summary(kK, yk, r["k"])
                        acc = sign_accuracy(predict(tr, stK, jnp.asarray(x_te)), y_te)
                    res["link"][key_K(K)] = {
                        "ec": summ["ec"], "kta": summ["kta"], "ec_curve": summ["ec_curve"], "test_acc": acc,
                        "updates": int(stK.updates), "diverged": diverged,
                        "diverged_at": int(logK.loss.size) if diverged else -1}
            res["seconds"] = time.perf_counter() - t0
            return res

        per = []
        for s in range(S):
            t0 = time.perf_counter()
            per.append(ctx.stage(f"{name}/s={s}", lambda s=s: one_seed(s)))
            ctx.say(f"{name} initialisation {s}: {time.perf_counter() - t0:.1f} s")
        out["models"][name] = _stack(per)
        cost[name] = {"num_params": int(P), "n": nk, "block": block_size(P, r["ntk_memory_mb"], nk),
                      "grams_per_seed": grams_per_seed(r, name),
                      "ntk_seconds": [float(v["ntk_seconds"]) for v in per],
                      "eigh_seconds": [float(v["eigh_seconds"]) for v in per]}
    resolved = {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}
    resolved.update(n_train=n_tr, n_test=ds.n_test, n_kernel=nk, steps=steps, steps_per_epoch=n_tr // B,
                    link_Ks=[float(K) for K in link_Ks])
    out["meta"] = {"resolved": resolved, "models": meta_models, "cost": cost, "dataset": ds.name,
                   "groups": ds.meta.get("groups"), "input_shape": list(ds.input_shape),
                   "kernel_inputs": "class-balanced subset of the training inputs" if nk < n_tr else "all training inputs",
                   "labels": "+-1: classes 0-4 -> -1, 5-9 -> +1"}
    return out


def _stack(per: Sequence[dict]):
    """Seed-wise results (nested dicts) stacked into arrays with a leading seed axis."""
    first = per[0]
    if isinstance(first, dict):
        return {k: _stack([p[k] for p in per]) for k in first}
    return np.stack([np.asarray(p) for p in per])


EXPERIMENT = register(Experiment(
    NAME, ConcentrationParams, run, version="2",
    doc="Ortiz-Jimenez et al. Table 1 and Figs. 6-7: energy concentration of the labels and alignment of the "
        "NTK before and after training; the same measures after iterative linearisation at several K."))


# ============================================================================ analysis (pure)
ORDER = ("mlp", "lenet", "resnet18")


def resolved(rec) -> dict:
    """The parameters the run used (scale defaults filled in, sizes as loaded)."""
    return dict(rec.meta["resolved"])


def random_baseline(k: int, n: int) -> float:
    """The energy concentration of labels with no relation to the kernel: ``sqrt(k / n)`` (the
    expected squared projection of a random direction on ``k`` of ``n`` orthonormal vectors is ``k / n``)."""
    return math.sqrt(k / n)


def table_rows(res: Mapping, k: int, n_kernel: int) -> list:
    """Their Table 1 beside ours: ``(quantity, {model: (ours, theirs)})`` with ours as
    ``"mean ± half-width"`` over seeds; the last row is the random-labels level."""
    names = [m for m in ORDER if m in res["models"]]
    rows = []
    for label, key, idx in (("energy concentration, initialisation", ("init", "ec"), 0),
                            ("energy concentration, end of training", ("end", "ec"), 1),
                            ("test accuracy", ("test_acc",), 2)):
        cells = {}
        for m in names:
            v = res["models"][m]
            for part in key:
                v = v[part]
            cells[m] = (fmt_finite(v), f"{100 * PAPER_TABLE[m][idx]:.1f}%")
        rows.append((label, cells))
    rows.append((f"labels unrelated to the kernel, sqrt(k/N)",
                 {m: (f"{100 * random_baseline(k, n_kernel):.1f}%", f"{100 * random_baseline(50, PAPER_N):.1f}%")
                  for m in names}))
    return rows


def table_markdown(res: Mapping, k: int, n_kernel: int) -> str:
    names = [m for m in ORDER if m in res["models"]]
    head = "| | " + " | ".join(f"{LABELS[m]}: ours | theirs" for m in names) + " |"
    sep = "| --- |" + " ---: | ---: |" * len(names)
    body = [f"| {label} | " + " | ".join(f"{cells[m][0]} | {cells[m][1]}" for m in names) + " |"
            for label, cells in table_rows(res, k, n_kernel)]
    return "\n".join([head, sep] + body)


def claims_table1(res: Mapping, n_test: int) -> list:
    """Their Table 1 as verdicts: (1) per model, the energy concentration at the end of training
    exceeds that at initialisation (paired over seeds); (2) for consecutive models of the order
    MLP, LeNet, ResNet-18 present, the later one ends with more concentration, and (3) with a
    higher test accuracy (differences taken seed by seed; test noise of ``n_test`` inputs added).
    Seeds whose run diverged are dropped."""
    from ...verdicts import exceeds, fmt_gap, verdict

    rows = []
    names = [m for m in ORDER if m in res["models"]]
    for m in names:
        r = res["models"][m]
        g, nd = finite_gap(r["end"]["ec"], r["init"]["ec"])
        pa, pb, _ = PAPER_TABLE[m]
        rows.append(verdict(f"{LABELS[m]}: training concentrates the labels' energy",
                            f"{100 * pa:.1f}% -> {100 * pb:.1f}%",
                            f"{fmt_finite(r['init']['ec'])} -> {fmt_finite(r['end']['ec'])}: {fmt_gap(g)}"
                            f"{_dropped(nd)}", exceeds(g), g.half))
    for a, b in zip(names, names[1:]):
        ra, rb = res["models"][a], res["models"][b]
        g, nd = finite_gap(rb["end"]["ec"], ra["end"]["ec"])
        rows.append(verdict(f"{LABELS[b]} ends more concentrated than {LABELS[a]}",
                            f"{100 * PAPER_TABLE[b][1]:.1f}% vs {100 * PAPER_TABLE[a][1]:.1f}%",
                            f"{fmt_finite(rb['end']['ec'])} vs {fmt_finite(ra['end']['ec'])}: {fmt_gap(g)}"
                            f"{_dropped(nd)}", exceeds(g), g.half))
        g, nd = finite_gap(rb["test_acc"], ra["test_acc"], n_test=n_test)
        rows.append(verdict(f"{LABELS[b]} tests better than {LABELS[a]}",
                            f"{100 * PAPER_TABLE[b][2]:.1f}% vs {100 * PAPER_TABLE[a][2]:.1f}%",
                            f"{fmt_finite(rb['test_acc'])} vs {fmt_finite(ra['test_acc'])}: {fmt_gap(g)}"
                            f"{_dropped(nd)}", exceeds(g), g.half))
    return rows


def spikes(res: Mapping, name: str, js: Sequence[int], factor: float) -> dict:
    """Per seed and trained eigenfunction (``(S, J)`` arrays): ``z``, ``ratio``, ``largest``,
    ``rank`` of :func:`spike`."""
    g = np.asarray(res["models"][name]["align"]["gain"], np.float64)  # (S, J, N)
    S, J, _ = g.shape
    out = {"z": np.zeros((S, J)), "ratio": np.zeros((S, J)), "largest": np.zeros((S, J), bool),
           "rank": np.zeros((S, J), int)}
    for s in range(S):
        for t, j in enumerate(js):
            for key, v in spike(g[s, t], int(j), factor).items():
                out[key][s, t] = v
    return out


def claims_spikes(res: Mapping, js: Sequence[int], factor: float, z: float) -> list:
    """Their Appendix E.3 as a verdict per model. The rule for "stands out": the trained
    eigenfunction's alignment gain lies more than ``z`` robust standard deviations above the
    median of the gains in its window ``[j / factor, j * factor]`` (:func:`spike`, on a log
    scale). Judged on the mean over the trained ``j`` of that score, per seed (diverged runs
    dropped); the detail gives the gain ratio and counts the runs where it is the window's
    largest gain."""
    from ...verdicts import exceeds, paired_gap, verdict

    rows = []
    for name in [m for m in ORDER if m in res["models"] and "align" in res["models"][m]]:
        sp = spikes(res, name, js, factor)
        score = np.where(np.isfinite(sp["z"]), sp["z"], np.nan)
        keep = np.all(np.isfinite(score), axis=1)
        per_seed = score[keep].mean(1)
        g = paired_gap(per_seed, np.zeros(per_seed.size))
        n_top = int(sp["largest"][keep].sum())
        ratio = np.exp(np.log(sp["ratio"][keep]).mean())
        per_j = ", ".join(f"j={j}: {score[keep, t].mean():.1f}" for t, j in enumerate(js))
        dropped = f"; {int((~keep).sum())} seed(s) dropped (a run diverged)" if (~keep).any() else ""
        rows.append(with_units(verdict(
            f"{LABELS[name]}: the trained eigenfunction's alignment spikes",
            "the relative alignment of the trained eigenfunction spikes (Figs. 6-7)",
            f"robust z-score {g.mean:.1f} (95% interval {g.lo:.1f} to {g.hi:.1f}; {per_j}); gain {ratio:.1f}x the "
            f"window's median; the window's largest gain in {n_top} of {int(keep.sum()) * len(js)} runs{dropped}",
            exceeds(g, z), g.half, f"stands out: the interval of the mean z lies above {z:g}"),
            (1.0, " (robust z)", 1)))
    return rows


def link_table(res: Mapping, name: str, Ks: Sequence[float]) -> list:
    """``[(K, updates, ec, kta, test_acc)]`` per period of ``name``'s runs (arrays over seeds):
    ``K = 1`` is the network trained on the labels, ``K = inf`` keeps the initial kernel."""
    r = res["models"][name]
    out = []
    for K in Ks:
        K = float(K)
        if K == 1:
            out.append((K, None, r["end"]["ec"], r["end"]["kta"], r["test_acc"]))
        else:
            v = r["link"][key_K(K)]
            out.append((K, v["updates"], v["ec"], v["kta"], v["test_acc"]))
    return out


def claims_link(res: Mapping, name: str, Ks: Sequence[float], n_test: int) -> list:
    """Linking the papers. For each finite ``K > 1`` of ``name``, with the kernel of the trained
    model (the NTK at its last linearisation point), paired over seeds (diverged runs dropped):
    (1) ``K = 1`` ends with more energy concentration than ``K``, (2) with a larger centred
    kernel-target alignment, (3) ``K`` still ends above initialisation, and (4) ``K = 1`` tests
    better than ``K`` (the main paper: a few feature updates are enough for accuracy)."""
    from ...verdicts import exceeds, fmt_gap, verdict

    rows = []
    if name not in res["models"] or "link" not in res["models"][name]:
        return rows
    table = {K: (u, ec, kta, acc) for K, u, ec, kta, acc in link_table(res, name, Ks)}
    _, ec1, kta1, acc1 = table[1.0]
    init = res["models"][name]["init"]
    for K, (u, ec, kta, acc) in table.items():
        if K == 1 or math.isinf(K):
            continue
        n_up = int(np.median(u))
        what = f"K={fmt_K(K)} ({n_up} feature update{'' if n_up == 1 else 's'})"
        g, nd = finite_gap(ec1, ec)
        rows.append(verdict(f"{LABELS[name]}: K=1 concentrates more than {what}", "not studied",
                            f"{fmt_finite(ec1)} vs {fmt_finite(ec)}: {fmt_gap(g)}{_dropped(nd)}", exceeds(g), g.half))
        g, nd = finite_gap(kta1, kta)
        rows.append(with_units(verdict(f"{LABELS[name]}: K=1 aligns its kernel with the labels more than {what}",
                            "not studied", f"centred alignment {fmt_finite(kta1, 1, '', 3)} vs "
                                           f"{fmt_finite(kta, 1, '', 3)}: {fmt_gap(g, 1, '', 3)}{_dropped(nd)}",
                            exceeds(g), g.half), (1.0, " (alignment)", 3)))
        g, nd = finite_gap(ec, init["ec"])
        rows.append(verdict(f"{LABELS[name]}: {what} concentrates more than initialisation", "not studied",
                            f"{fmt_finite(ec)} vs {fmt_finite(init['ec'])}: {fmt_gap(g)}{_dropped(nd)}", exceeds(g),
                            g.half))
        g, nd = finite_gap(acc1, acc, n_test=n_test)
        rows.append(verdict(f"{LABELS[name]}: K=1 tests better than {what}",
                            "main paper: a few feature updates match K=1",
                            f"{fmt_finite(acc1)} vs {fmt_finite(acc)}: {fmt_gap(g)}{_dropped(nd)}", exceeds(g),
                            g.half))
    return rows


# ============================================================================ tables and figures
def settings_rows(rec) -> list:
    """``(setting, this run, scale="paper", the paper)`` rows for the chapter's settings table."""
    r = resolved(rec)
    paper = ConcentrationParams.from_dict({"scale": "paper"}).resolved()
    models = ", ".join(LABELS[m] + (f" (width {r['resnet_width']})" if m == "resnet18" else "") for m in r["models"])
    pmodels = ", ".join(LABELS[m] + (f" (width {paper['resnet_width']})" if m == "resnet18" else "")
                        for m in paper["models"])
    task = f"{r['dataset']}, classes 0-4 vs 5-9"
    return [
        ("task", f"{task}: {r['n_train']:,} train, {r['n_test']:,} test inputs",
         f"{paper['dataset']}, classes 0-4 vs 5-9: {paper['n_train']:,} train", "CIFAR-2: 12,000 training samples"),
        ("models (one output)", models + ("" if r["dataset"] in ("fashion_mnist", "cifar10") else " (1-D)"), pmodels,
         "MLP 2x100, LeNet-5, ResNet-18"),
        ("initialisations", r["seeds"], paper["seeds"], "one"),
        ("NTK Gram matrices on", f"{r['n_kernel']:,} training inputs", f"{paper['n_kernel']:,}", "12,000"),
        ("energy concentration on top k", r["k"], 50, "50"),
        ("training", f"SGD momentum {r['momentum']:g}, lr {r['learning_rate']:g} -> 0 linearly, batch "
                     f"{r['batch_size']}, {r['epochs']} epochs ({r['steps']:,} steps)",
         f"same, {paper['epochs']} epochs", "same, 200 epochs"),
        ("spikes: models, eigenfunctions j", f"{', '.join(LABELS[m] for m in r['align_models'])}; "
                                             f"{', '.join(map(str, r['align_indices']))}",
         ", ".join(map(str, paper["align_indices"])), "MLP, LeNet; several j"),
        (f"iterative linearisation of the {LABELS[r['link_model']]}: K",
         ", ".join(fmt_K(K) for K in r["Ks"]), ", ".join(fmt_K(K) for K in paper["Ks"]), "not in the paper"),
    ]


def figure_energy(rec):
    """Energy of the labels on the top ``k'`` eigenvectors of the NTK against ``k'``, at
    initialisation (dashed) and at the end of training (solid), mean over seeds; the dotted
    line is labels unrelated to the kernel, ``sqrt(k'/N)``."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    r = resolved(rec)
    names = [m for m in ORDER if m in res["models"]]
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
    colours = dict(zip(names, plt.cm.viridis(np.linspace(0.1, 0.75, len(names)))))
    for m in names:
        v = res["models"][m]
        for part, ls in (("init", "--"), ("end", "-")):
            curve = np.asarray(v[part]["ec_curve"], np.float64).mean(0)
            kk = np.arange(1, curve.size + 1)
            ax.plot(kk, curve, ls, color=colours[m],
                    label=f"{LABELS[m]}, " + ("initialisation" if part == "init" else "end of training"))
    kk = np.arange(1, np.asarray(res["models"][names[0]]["init"]["ec_curve"]).shape[1] + 1)
    ax.plot(kk, np.sqrt(kk / r["n_kernel"]), ":", color="0.5", label=r"unrelated labels, $\sqrt{k/N}$")
    ax.axvline(r["k"], color="0.7", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(r"top $k$ eigenvectors of the NTK Gram matrix")
    ax.set_ylabel(r"$\|\Phi_k^\top y\| / \|y\|$")
    ax.set_ylim(0, 1)
    ax.legend(frameon=False, fontsize=8.5, ncol=2, loc="upper left")
    fig.tight_layout()
    return fig


def figure_spikes(rec):
    """Their Figs. 6-7: relative alignment ``phi_i^T Theta_T phi_i / tr Theta_T`` of the initial
    eigenvectors with the NTK after training on ``sign(phi_j)`` (one colour per ``j``, geometric
    mean over seeds; grey: at initialisation, ``lambda_i / tr Theta_0``), and below it the gain
    over initialisation, with each ``j`` marked."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    from ...plotting import COLUMN_WIDTH

    res = rec.tree()
    r = resolved(rec)
    js = list(np.asarray(res["align_indices"]))
    names = [m for m in ORDER if m in res["models"] and "align" in res["models"][m]]
    imax = min(int(max(js) * r["window"] * 2), np.asarray(res["models"][names[0]]["align"]["a_init"]).shape[1])
    fig, axes = plt.subplots(2, len(names), figsize=(COLUMN_WIDTH, 5.6), sharex=True, squeeze=False)
    colours = plt.cm.plasma(np.linspace(0.1, 0.8, len(js)))
    for k, name in enumerate(names):
        a = res["models"][name]["align"]
        i = np.arange(1, imax)
        geo = lambda x: np.exp(np.log(np.asarray(x, np.float64)).mean(0))
        axes[0, k].plot(i, geo(a["a_init"])[1:imax], color="0.55", lw=1.2, label="initialisation")
        for t, (j, c) in enumerate(zip(js, colours)):
            end = geo(np.asarray(a["a_end"])[:, t])
            gain = geo(np.asarray(a["gain"])[:, t])
            axes[0, k].plot(i, end[1:imax], color=c, lw=1.0, label=f"trained on j={j}")
            axes[1, k].plot(i, gain[1:imax], color=c, lw=1.0)
            axes[0, k].plot([j], [end[j]], "o", color=c, ms=5)
            axes[1, k].plot([j], [gain[j]], "o", color=c, ms=5)
        axes[0, k].set_title(LABELS[name])
        axes[1, k].set_xlabel(r"initial eigenfunction $i$")
        for ax in axes[:, k]:
            ax.set_xscale("log")
            ax.set_yscale("log")
        axes[1, k].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1, k].yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if round(v, 6) in (0.5, 1.5, 3.0, 5.0)
                                                           else ""))
    axes[0, 0].set_ylabel(r"$\phi_i^\top\Theta_T\phi_i / \mathrm{tr}\,\Theta_T$")
    axes[1, 0].set_ylabel("gain over initialisation")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False, fontsize=9)
    return fig


def figure_link(rec):
    """Energy concentration, centred kernel-target alignment and test accuracy of the
    link model against the number of feature updates (``K = inf``: 0, drawn at 0.5), 95%
    intervals over seeds."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH
    from ...verdicts import seed_interval

    res = rec.tree()
    r = resolved(rec)
    name = r["link_model"]
    table = link_table(res, name, r["Ks"])
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_WIDTH, 2.8))
    xs = []
    for K, u, *_ in table:
        xs.append(r["steps"] if K == 1 else (0.5 if math.isinf(K) else float(np.median(u))))
    for ax, idx, label in ((axes[0], 2, "energy concentration"), (axes[1], 3, "centred alignment"),
                           (axes[2], 4, "test accuracy")):
        mi = [seed_interval(np.asarray(row[idx], np.float64)[np.isfinite(np.asarray(row[idx], np.float64))])
              for row in table]
        m = np.array([a for a, _ in mi])
        h = np.array([b if math.isfinite(b) else 0.0 for _, b in mi])
        ax.errorbar(xs, m, yerr=h, fmt="o-", ms=4, capsize=2, color="#1f4e79")
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{0 if math.isinf(K) else int(round(x))}\nK={fmt_K(K)}" for x, (K, *_) in zip(xs, table)],
                           fontsize=8.5)
        ax.minorticks_off()
        ax.set_xlabel("feature updates")
        ax.set_title(label, fontsize=10)
    axes[0].axhline(random_baseline(r["k"], r["n_kernel"]), color="0.6", lw=0.8, ls=":")
    fig.suptitle(f"{LABELS[name]} trained on the labels by iterative linearisation", fontsize=10.5)
    fig.tight_layout()
    return fig
