"""Ortiz-Jimenez et al. (NeurIPS 2021), Appendix E.2-E.3: how training changes the NTK; and the link
with iterative linearisation.

On their binary task (classes 0-4 against 5-9, +-1 labels), per architecture and initialisation,
with NTK Gram matrices on ``n_kernel`` training inputs and their recipe (SGD, momentum 0.9,
learning rate 0.05 decayed linearly to 0, batch 128, sigmoid cross-entropy): the **energy
concentration** ``||Phi_k^T y|| / ||y||`` of the labels before and after training the network on
them (Table 1), with the test accuracy and the centred kernel-target alignment; the **alignment
spikes** (Figs. 6-7): after training on ``sign(phi_j)``, the alignment ``phi_i^T Theta_T phi_i /
tr Theta_T`` of every initial eigenvector and its gain over ``lambda_i / tr Theta_0``; and **the
link**: ``link_model`` trained on the labels at the periods ``Ks``, with the same measures of the
trained model's kernel (the NTK at its last linearisation point). One stage per (model, seed).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from ... import verdicts as V
from ...axes import PACKED
from ...labels import K_label
from .. import CLOSE_MARGIN, Derived, Experiment, Period, param, register
from ....core.linearise import kernel_eigh
from ....metrics import alignment_gain, energy_curve, kernel_target_alignment, ntk_block_size, ntk_gram, spike_score
from . import _common as C

NAME = "ortiz_concentration"
#: their Table 1 (CIFAR-2, 12,000 training samples, 200 epochs, k = 50): EC at init, at the end, test accuracy
PAPER_TABLE = {"mlp": (0.260, 0.636, 0.676), "lenet": (0.258, 0.830, 0.750), "resnet18": (0.227, 0.967, 0.814)}
PAPER_N = 12_000
CURVE_K = 200  # energy on the top k' eigenvectors is kept for k' = 1 .. CURVE_K

SCALES = {
    "tiny": {"dataset": "mnist1d", "models": ("mlp",), "n_train": 128, "n_test": 128, "n_kernel": 128, "seeds": 2,
             "epochs": 4, "align_models": ("mlp",), "align_indices": (2, 8), "Ks": (1, 2, math.inf),
             "resnet_width": 4, "link_model": "mlp"},
    # the book on a 2-core CPU. Ten initialisations: Holm's correction judges each claim at a stricter
    # level, where five seeds' t quantile is large. 15,000 test signals of an MNIST-1D generated larger
    # (_common.MNIST1D_LARGE): 1,000 put the noise of a difference of accuracies at about 4 points.
    "default": {"dataset": "mnist1d", "models": ("mlp", "lenet", "resnet18"), "n_train": 1000, "n_test": 15_000,
                "n_kernel": 500, "seeds": 2, "epochs": 25, "align_models": ("mlp", "lenet"),
                "align_indices": (4, 16, 64), "Ks": (1, 10, 70, math.inf), "resnet_width": 8, "link_model": "lenet"},
    # their CIFAR-2 Table 1: 12,000 training samples, 200 epochs, ResNet-18 of width 64
    "paper": {"dataset": "cifar10", "models": ("mlp", "lenet", "resnet18"), "n_train": 12_000, "n_test": C.ALL,
              "n_kernel": 12_000, "seeds": 5, "epochs": 200, "align_models": ("mlp", "lenet"),
              "align_indices": (1, 10, 100, 500), "Ks": (1, 1000, 10_000, math.inf), "resnet_width": 64,
              "link_model": "lenet"},
}


@dataclass(frozen=True)
class ConcentrationParams(C.OrtizParams):
    SCALES = SCALES
    DERIVED = (Derived("training steps", lambda r: r.get("steps"), "200 epochs of 12,000 images", after="epochs"),)

    n_train: Optional[int] = param(None, "training inputs; None: from scale", min=1, label="training inputs",
                                   source="Table 1: 12,000 training samples")
    n_test: Optional[int] = param(None, "test inputs (MNIST-1D above 1,000: generated larger); None: from scale",
                                  min=1, label="test inputs", source="the whole test split")
    n_kernel: Optional[int] = param(None, "training inputs of the NTK Gram matrices; None: from scale", min=2,
                                    label="inputs of the Gram matrices", source="Table 1 caption")
    k: int = param(50, "top eigenvectors of the energy concentration", min=1, label="energy concentration on the top k",
                   source="Table 1 caption")
    align_models: Optional[tuple[C.ModelName, ...]] = param(
        None, "models trained on eigenfunctions (spikes); None: from scale", label="spikes: models", source="Figs. 6-7",
        distinct=True)
    align_indices: Optional[tuple[int, ...]] = param(None, "eigenfunctions j trained on (spikes); None: from scale",
                                                     min=1, label="spikes: eigenfunctions j",
                                                     source="our choice: Figs. 6-7 show several", distinct=True)
    window: float = param(2.0, "the spike is compared with indices i in [j / window, j * window]", gt=1,
                          label="spikes: neighbours i in [j / w, j w], w", source="our rule")
    spike_z: float = param(3.0, "the trained eigenfunction stands out when its log gain is this many robust standard "
                                "deviations above its window's median", gt=0,
                           label="spikes: stands out above (robust z)", source="our rule: the usual outlier threshold")
    link_model: Optional[C.ModelName] = param(None, "model trained at the periods Ks; None: from scale",
                                              label="link: model", source="not in the paper")
    Ks: Optional[tuple[Period, ...]] = param(None, "periods of link_model (K=1 included); None: from scale",
                                             label="link: periods K", source="not in the paper", distinct=True)
    close_margin: float = param(CLOSE_MARGIN, "link: K reaches K=1 when the interval of the gap lies within this", gt=0,
                                label="link: close means within", source="the book's equivalence margin")

    def check(self):
        r = self.resolved()
        self.check_common(r)
        if 1 not in [K for K in r["Ks"] if math.isfinite(K)]:
            raise ValueError("Ks must include K=1 (gradient descent, the run every other period is compared with)")
        for key, names in (("link_model", [r["link_model"]]), ("align_models", r["align_models"])):
            if not set(names) <= set(r["models"]):
                raise ValueError(f"{key} {names} must be among models {list(r['models'])}")
        nk = min(r["n_kernel"], r["n_train"])
        if r["n_kernel"] < C.ALL and r["k"] >= nk:
            raise ValueError(f"k={r['k']} eigenvectors out of a Gram matrix on {nk} inputs: take k < n_kernel")
        if r["n_kernel"] < C.ALL and max(r["align_indices"]) * r["window"] >= nk:
            raise ValueError(f"align_indices up to {max(r['align_indices'])} with window {r['window']:g} reach past "
                             f"the {nk} eigenvectors of the Gram matrix")
        if r["align_models"] and r["n_kernel"] < C.ALL and r["batch_size"] > nk:
            raise ValueError(f"the spike runs train on n_kernel={nk} inputs, fewer than batch_size={r['batch_size']}")


# ------------------------------------------------------------------------------ kernels
def grams_per_seed(r: ConcentrationParams, name: str) -> int:
    """NTK Gram matrices one initialisation of ``name`` needs: at initialisation, after training,
    per trained eigenfunction (``align_models``) and per period ``1 < K < inf`` (``link_model``).

    >>> grams_per_seed(ConcentrationParams.rebuild({"align_models": ["mlp"], "align_indices": [4, 16],
    ...                                             "link_model": "mlp", "Ks": [1, 10, 70, float("inf")]}), "mlp")
    6
    """
    n = 2 + (len(r.align_indices) if name in r.align_models else 0)
    return n + (sum(1 for K in r.Ks if float(K) != 1 and math.isfinite(float(K))) if name == r.link_model else 0)


def key_K(K) -> str:
    """The results key of period ``K``: ``"K=70"``, ``"K=inf"``."""
    return "K=inf" if math.isinf(float(K)) else f"K={int(K)}"


def kernel_summary(kernel, y, k: int, spec: Optional[tuple] = None) -> dict:
    """Energy concentration (top ``k``; and its curve over ``k' <= 200``), centred kernel-target
    alignment and leading eigenvalues of a Gram matrix against +-1 labels ``y`` (``spec``: its spectrum)."""
    vals, vecs = kernel_eigh(kernel) if spec is None else spec
    curve = energy_curve(vecs, y, min(CURVE_K, len(vals)))
    return {"ec": float(curve[k - 1]) if k <= curve.size else float(energy_curve(vecs, y, k)[-1]),
            "ec_curve": curve, "kta": kernel_target_alignment(kernel, y), "eigvals": vals[:CURVE_K],
            "trace": float(np.trace(kernel))}


# ------------------------------------------------------------------------------ the experiment
def run(params: ConcentrationParams, ctx):
    import jax.numpy as jnp

    from ....core._tree import num_params
    from ....core.loop import run as train
    from ....core.schedules import periodic
    from ....core.train import iterative_linearisation
    from ....data import balanced_indices

    ds = C.load_binary(params.dataset, params.n_train, params.n_test, params.seed)
    n_tr = ds.n_train
    nk = int(min(params.n_kernel, n_tr))
    if params.k >= nk or params.batch_size > n_tr:  # the training split is smaller than asked for
        raise ValueError(f"k={params.k} and batches of {params.batch_size} need more than the split's {n_tr} inputs")
    x_tr, y_tr = jnp.asarray(ds.x_train), np.asarray(ds.y_train[:, 0], np.float32)
    x_te, y_te = jnp.asarray(ds.x_test), np.asarray(ds.y_test[:, 0], np.float32)
    # the Gram matrices' inputs: a class-balanced subset of n_kernel training inputs
    kidx = np.arange(n_tr) if nk == n_tr else balanced_indices(ds.labels("train"), nk, seed=(params.seed, 7))
    xk, yk = np.asarray(ds.x_train)[kidx], y_tr[kidx]
    S, E, B = params.seeds, params.epochs, params.batch_size
    steps = E * (n_tr // B)
    align_js = list(params.align_indices)
    out = {"models": {}, "Ks": np.asarray([float(K) for K in params.Ks]), "align_indices": np.asarray(align_js)}
    meta_models, cost = {}, {}
    # K=1: the network's own steps; other K: no relinearisation after the last step (horizon)
    trainer = lambda model, n, K=1: iterative_linearisation(model, C.optimizer("sgd", params, n),
                                                            1 if K == 1 else periodic(K, horizon=n), loss="bce")
    ok = lambda log, n: bool(np.all(np.isfinite(log.loss)) and log.loss.size == n)
    for name in params.models:
        model = C.build_model(name, params.dataset, params.resnet_width)
        inits = C.init_many(model, params.seed, S, x_tr[:2])
        P = num_params(inits[0][0])
        meta_models[name] = {**model.meta, "num_params": int(P), "block": ntk_block_size(P, params.ntk_memory_mb, nk)}
        base = trainer(model, steps)
        steps_align = E * (nk // B)
        align_tr = trainer(model, steps_align) if name in params.align_models else None
        link_tr = {K: trainer(model, steps, K) for K in params.Ks if K != 1} if name == params.link_model else {}
        gram = lambda w, state, model=model: ntk_gram(model, w, state, xk, memory_mb=params.ntk_memory_mb)
        ctx.say(f"{name}: {P:,} weights, {S} initialisations, Gram matrices on {nk} inputs")

        def one_seed(s, inits=inits, base=base, align_tr=align_tr, link_tr=link_tr, gram=gram):
            t0 = time.perf_counter()
            p0, st0 = inits[s]
            bs = C.batch_seed(params.seed, s)
            k0 = gram(p0, st0)
            t_e = time.perf_counter()
            vals0, vecs0 = kernel_eigh(k0)
            res = {"init": kernel_summary(k0, yk, params.k, (vals0, vecs0)), "ntk_seconds": t_e - t0,
                   "eigh_seconds": time.perf_counter() - t_e}
            nan_summary = {key: np.full(np.shape(v), np.nan) for key, v in res["init"].items()}
            # trained on the labels (K = 1); a run that diverges keeps NaN metrics (the claims drop it)
            st, log = train(base, base.init(p0, st0), x_tr, jnp.asarray(y_tr), steps, batch_size=B, seed=bs)
            res["diverged"] = not ok(log, steps)
            no_bits = np.zeros((len(y_te) + 7) // 8, np.uint8)  # which test inputs a run gets right (packed)
            if res["diverged"]:
                res["end"] = {**nan_summary, "gain": np.full(min(CURVE_K, nk), np.nan)}
                res["test_acc"] = res["train_acc"] = res["final_loss"] = math.nan
                res["test_correct"] = no_bits
            else:
                kt = gram(st.params, st.model_state)
                res["end"] = kernel_summary(kt, yk, params.k)
                res["end"]["gain"] = alignment_gain(vecs0, vals0, kt)["gain"][:CURVE_K]
                out_te = np.asarray(C.predict(base, st, x_te))
                res["test_acc"] = C.sign_accuracy(out_te, y_te)
                res["test_correct"] = np.packbits((out_te > 0) == (np.asarray(y_te).reshape(-1) > 0))
                res["train_acc"] = C.sign_accuracy(C.predict(base, st, x_tr), y_tr)
                res["final_loss"] = float(np.mean(log.loss[-(n_tr // B):]))
            if align_tr is not None:  # a diverged run keeps NaN alignments
                runs = []
                for target in C.sign_targets(vecs0, align_js):
                    st_j, log_j = train(align_tr, align_tr.init(p0, st0), jnp.asarray(xk), jnp.asarray(target),
                                        steps_align, batch_size=B, seed=bs)
                    runs.append({**alignment_gain(vecs0, vals0, gram(st_j.params, st_j.model_state)),
                                 "final_loss": float(np.mean(log_j.loss[-(nk // B):]))} if ok(log_j, steps_align)
                                else {"gain": np.full(nk, np.nan), "a_end": np.full(nk, np.nan), "final_loss": np.nan})
                res["align"] = {**_stack(runs), "a_init": vals0 / vals0.sum()}
            if link_tr:
                res["link"] = {}
                for K, tr in link_tr.items():
                    stK, logK = train(tr, tr.init(p0, st0), x_tr, jnp.asarray(y_tr), steps, batch_size=B, seed=bs)
                    diverged = not ok(logK, steps)
                    if diverged:
                        summ, acc, bits = nan_summary, math.nan, no_bits
                    else:  # the trained model's kernel: the NTK at its last linearisation point (K=inf: the initial)
                        summ = res["init"] if math.isinf(K) else kernel_summary(gram(stK.anchor, stK.model_state),
                                                                                yk, params.k)
                        out_K = np.asarray(C.predict(tr, stK, x_te))
                        acc = C.sign_accuracy(out_K, y_te)
                        bits = np.packbits((out_K > 0) == (np.asarray(y_te).reshape(-1) > 0))
                    res["link"][key_K(K)] = {
                        "ec": summ["ec"], "kta": summ["kta"], "ec_curve": summ["ec_curve"], "test_acc": acc,
                        "test_correct": bits,
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
        cost[name] = {"num_params": int(P), "n": nk, "block": ntk_block_size(P, params.ntk_memory_mb, nk),
                      "grams_per_seed": grams_per_seed(params, name),
                      **{k: [float(v[k]) for v in per] for k in ("ntk_seconds", "eigh_seconds")}}
    out["meta"] = {"resolved": {"n_train": n_tr, "n_test": ds.n_test, "n_kernel": nk, "steps": steps,
                                "steps_per_epoch": n_tr // B},
                   "models": meta_models, "cost": cost, "dataset": ds.name, "groups": ds.meta.get("groups"),
                   "input_shape": list(ds.input_shape),
                   "labels": "+-1: classes 0-4 -> -1, 5-9 -> +1"}
    return out


def _stack(per: Sequence[dict]):
    """Seed-wise results (nested dicts) stacked into arrays with a leading seed axis."""
    if isinstance(per[0], dict):
        return {k: _stack([p[k] for p in per]) for k in per[0]}
    return np.stack([np.asarray(p) for p in per])


# ------------------------------------------------------------------------------ analysis (pure)
def random_baseline(k: int, n: int) -> float:
    """The energy concentration of labels unrelated to the kernel: ``sqrt(k / n)``."""
    return math.sqrt(k / n)


def models_of(res: Mapping) -> list:
    return [m for m in C.ORDER if m in res["models"]]


def _correct(r: Mapping, n_test: int):  # (S, n_test): which test inputs each seed's run got right
    return None if r.get("test_correct") is None else V.unpack_correct(r["test_correct"], n_test)


def judge_table1(res: Mapping, n_test: int) -> list:
    """Their Table 1, paired over seeds: ``concentrates.<model>`` training raises the energy
    concentration; for consecutive models of MLP, LeNet, ResNet-18, the later one ends more
    concentrated (``order.ec.<later>``) and tests better (``order.test.<later>``)."""
    out, names = [], models_of(res)
    for m in names:
        r, (pa, pb, _) = res["models"][m], PAPER_TABLE[m]
        out.append(C.gap_claim(f"concentrates.{m}", f"{C.LABELS[m]}: training concentrates the labels' energy",
                               f"{100 * pa:.1f}% -> {100 * pb:.1f}%", r["end"]["ec"], r["init"]["ec"],
                               measured=f"{C.fmt_finite(r['init']['ec'])} -> {C.fmt_finite(r['end']['ec'])}",
                               headline=True))
    for a, b in zip(names, names[1:]):
        ra, rb = res["models"][a], res["models"][b]
        ca, cb = _correct(ra, n_test), _correct(rb, n_test)
        out.append(C.gap_claim(
            f"order.ec.{b}", f"{C.LABELS[b]} ends more concentrated than {C.LABELS[a]}",
            f"{100 * PAPER_TABLE[b][1]:.1f}% vs {100 * PAPER_TABLE[a][1]:.1f}%", rb["end"]["ec"], ra["end"]["ec"],
            measured=f"{C.fmt_finite(rb['end']['ec'])} vs {C.fmt_finite(ra['end']['ec'])}", headline=True))
        out.append(C.gap_claim(
            f"order.test.{b}", f"{C.LABELS[b]} tests better than {C.LABELS[a]}",
            f"{100 * PAPER_TABLE[b][2]:.1f}% vs {100 * PAPER_TABLE[a][2]:.1f}%", rb["test_acc"], ra["test_acc"],
            n_test=n_test, examples=None if ca is None or cb is None else (cb, ca), measured=f"{C.fmt_finite(rb['test_acc'])} vs {C.fmt_finite(ra['test_acc'])}"))
    return out


def judge_spikes(res: Mapping, js: Sequence[int], factor: float, z: float) -> list:
    """Their Appendix E.3, ``spike.<model>``: the trained eigenfunction's alignment gain lies
    more than ``z`` robust standard deviations above the median of the gains in its window
    ``[j / factor, j * factor]`` (:func:`itlin.metrics.spike_score`, log scale). Judged on the mean over the trained
    ``j`` of that score, per seed (a seed with a diverged run is dropped)."""
    out = []
    for name in [m for m in models_of(res) if "align" in res["models"][m]]:
        g = np.asarray(res["models"][name]["align"]["gain"], np.float64)  # (S, J, N)
        sp = _stack([_stack([spike_score(gs[t], int(j), factor) for t, j in enumerate(js)]) for gs in g])
        score = np.where(np.isfinite(sp["z"]), sp["z"], np.nan)
        keep = np.all(np.isfinite(score), axis=1)
        per_j = ", ".join(f"j={j}: {np.nanmean(score[:, t]):.1f}" for t, j in enumerate(js))
        ratio = np.exp(np.nanmean(np.log(sp["ratio"][keep]))) if keep.any() else math.nan
        out.append(C.gap_claim(
            f"spike.{name}", f"{C.LABELS[name]}: the trained eigenfunction's alignment spikes",
            "the relative alignment of the trained eigenfunction spikes (Figs. 6-7)",
            np.where(keep, np.nanmean(score, axis=1), np.nan), np.zeros(len(score)), "exceeds", z,
            unit="(robust z)", scale=1.0, digits=1,
            measured=f"mean robust z-score above {z:g} ({per_j})",
            detail=f"gain {ratio:.1f}x the window's median; the window's largest gain in "
                   f"{int(sp['largest'][keep].sum())} of {int(keep.sum()) * len(js)} runs"))
    return out


def link_table(res: Mapping, name: str, Ks: Sequence[float]) -> list:
    """``[(K, updates, ec, kta, test_acc, diverged)]`` per period of ``name`` (arrays over seeds)."""
    r, out = res["models"][name], []
    for K in map(float, Ks):
        v = {"updates": None, "ec": r["end"]["ec"], "kta": r["end"]["kta"], "test_acc": r["test_acc"],
             "diverged": r["diverged"]} if K == 1 else r["link"][key_K(K)]
        out.append((K, v["updates"], v["ec"], v["kta"], v["test_acc"], np.asarray(v["diverged"], bool)))
    return out


def _link_correct(res: Mapping, name: str, K: float, n_test: int):
    r = res["models"][name]
    return _correct(r if K == 1 else r["link"][key_K(K)], n_test)


def judge_link(res: Mapping, name: str, Ks: Sequence[float], n_test: int, margin: float = CLOSE_MARGIN) -> list:
    """Linking the papers, ``link.<what>.K<K>`` per finite ``K > 1`` (the trained model's kernel;
    an equivalence with a diverged run dropped is at most unresolved): ``ec`` K's energy
    concentration within ``margin`` of K=1's; ``kta`` K=1's centred alignment larger; ``init``
    K concentrates more than initialisation; ``test`` K tests within ``margin`` of K=1."""
    if name not in res["models"] or "link" not in res["models"][name]:
        return []
    table = {K: row for K, *row in link_table(res, name, Ks)}
    _, ec1, kta1, acc1, _ = table[1.0]
    c1 = _link_correct(res, name, 1.0, n_test)
    init = res["models"][name]["init"]
    out = []
    for K, (u, ec, kta, acc, _) in table.items():
        if K == 1 or math.isinf(K):
            continue
        n_up, cK = int(np.median(u)), _link_correct(res, name, K, n_test)
        what, k = f"{K_label(K)} ({n_up} feature update{'' if n_up == 1 else 's'})", f"K{int(K)}"
        out += [
            C.gap_claim(f"link.ec.{k}", f"{C.LABELS[name]}: {what} ends as concentrated as K=1", "not studied", ec,
                        ec1, "close", margin, measured=f"{C.fmt_finite(ec)} vs {C.fmt_finite(ec1)}"),
            C.gap_claim(f"link.kta.{k}", f"{C.LABELS[name]}: K=1 aligns its kernel with the labels more than {what}",
                        "not studied", kta1, kta, unit="(alignment)", scale=1.0, digits=3,
                        measured=f"centred alignment {C.fmt_finite(kta1, 1, '', 3)} vs {C.fmt_finite(kta, 1, '', 3)}"),
            C.gap_claim(f"link.init.{k}", f"{C.LABELS[name]}: {what} concentrates more than initialisation",
                        "not studied", ec, init["ec"], measured=f"{C.fmt_finite(ec)} vs {C.fmt_finite(init['ec'])}"),
            C.gap_claim(f"link.test.{k}", f"{C.LABELS[name]}: {what} tests as well as K=1",
                        "main paper: a few feature updates match K=1", acc, acc1, "close", margin, n_test=n_test,
                        examples=None if c1 is None or cK is None else (cK, c1),
                        measured=f"{C.fmt_finite(acc)} vs {C.fmt_finite(acc1)}")]
    return out


def claims(rec) -> list:
    """The paper's claims on a record: :func:`judge_table1`, :func:`judge_spikes`, :func:`judge_link`."""
    res, r = rec.tree(), rec.settings
    return (judge_table1(res, int(r.n_test)) + judge_spikes(res, list(r.align_indices), r.window, r.spike_z)
            + judge_link(res, r.link_model, r.Ks, int(r.n_test), r.close_margin))


def summary(rec) -> list:
    """Their Table 1 beside ours (mean ± 95% half-width over seeds); the last row is the level of
    labels unrelated to the kernel, ``sqrt(k / N)``, for our ``N`` and theirs."""
    res, r = rec.tree(), rec.settings
    rows = [{"": label, **{f"{C.LABELS[m]}: {who}": v for m in models_of(res) for who, v in (
                ("ours", C.fmt_finite(get(res["models"][m]))), ("theirs", f"{100 * PAPER_TABLE[m][i]:.1f}%"))}}
            for label, get, i in (("energy concentration, initialisation", lambda v: v["init"]["ec"], 0),
                                  ("energy concentration, end of training", lambda v: v["end"]["ec"], 1),
                                  ("test accuracy", lambda v: v["test_acc"], 2))]
    return rows + [{"": "labels unrelated to the kernel, sqrt(k/N)", **{
        f"{C.LABELS[m]}: {who}": f"{100 * random_baseline(k, n):.1f}%" for m in models_of(res)
        for who, k, n in (("ours", r.k, r.n_kernel), ("theirs", 50, PAPER_N))}}]


def link_rows(rec) -> list:
    """The link model per period: feature updates, energy concentration, alignment, test accuracy."""
    res, r = rec.tree(), rec.settings
    if "link" not in res["models"].get(r.link_model, {}):
        return []
    return [{"K": K_label(K), "feature updates": "every step" if K == 1 else int(np.median(u)),
             "energy concentration": C.fmt_finite(ec), "centred alignment": C.fmt_finite(kta, 1, "", 3),
             "test accuracy": C.fmt_finite(acc), "diverged": f"{int(div.sum())} of {div.size}"}
            for K, u, ec, kta, acc, div in link_table(res, r.link_model, r.Ks)]


EXPERIMENT = register(Experiment(NAME, ConcentrationParams, run, version="4", summary=summary, claims=claims, axes=(
    ("models/*/link/K={K}/test_correct", ("seed", PACKED)),
    ("models/*/link/K={K}/ec_curve", ("seed", "top_eigenvectors")), ("models/*/link/K={K}/*", ("seed",)),
    ("models/*/test_correct", ("seed", PACKED)), ("models/*/*/ec_curve", ("seed", "top_eigenvectors")),
    ("models/*/*/eigvals", ("seed", "eigenvalue")), ("models/*/end/gain", ("seed", "eigenvalue")),
    ("models/*/align/a_init", ("seed", "init_eigenvector")), ("models/*/align/final_loss", ("seed", "target")),
    ("models/*/align/*", ("seed", "target", "init_eigenvector")), ("Ks", ("period",)),
    ("align_indices", ("target",)), ("models/*", ("seed",)))))

__all__ = ["CURVE_K", "ConcentrationParams", "EXPERIMENT", "NAME", "PAPER_N", "PAPER_TABLE", "SCALES", "claims",
           "grams_per_seed", "judge_link", "judge_spikes", "judge_table1", "kernel_summary", "key_K", "link_rows",
           "link_table", "models_of", "random_baseline", "run", "summary"]
