"""Figures of the Ortiz-Jimenez et al. experiments: NTK eigenfunctions as targets
(:mod:`~itlin.book.experiments.ortiz.ortiz_eigenfunctions`) and energy concentration
(:mod:`~itlin.book.experiments.ortiz.ortiz_concentration`), and the table of what their NTK Gram
matrices cost. Bands and error bars are 95% intervals over seeds (initialisations).
:func:`eigenfunction_demo` is the chapter's demo over the eigenfunction index (one frame:
:func:`eigenfunction_setting`)."""

from __future__ import annotations

import math
from typing import Mapping, Optional

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from ..experiments.ortiz import _common as C
from ..experiments.ortiz import ortiz_concentration as oc
from ..experiments.ortiz import ortiz_eigenfunctions as oe
from ..labels import K_label
from ...metrics import ntk_block_size
from ..plotting import COLUMN_WIDTH
from ..verdicts import paired_gap, seed_interval

COLOURS = {"network": "#1f4e79", "linear": "#d9731a"}


def _band(ax, x, values, color, label, ls="-", marker="o"):
    """Mean over seeds (rows of ``values``, NaN left out) with its 95% interval as a band."""
    v = np.asarray(values, np.float64)
    mi = [seed_interval(col[np.isfinite(col)]) for col in v.T]
    m = np.array([a for a, _ in mi])
    h = np.array([b if math.isfinite(b) else 0.0 for _, b in mi])
    ax.plot(x, m, ls, color=color, marker=marker, ms=4, label=label)
    ax.fill_between(x, m - h, m + h, color=color, alpha=0.18, lw=0)
    return m


def _jaxis(ax, js):
    """A log axis for eigenfunction indices (symmetric-log when ``j = 0`` is among them)."""
    js = np.asarray(js, np.float64)
    if js.min() >= 1:
        ax.set_xscale("log")
        ax.set_xlim(js.min() / 1.5, js.max() * 1.5)
    else:
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.3, js.max() * 1.5)


def _opts(res):
    return [o for o in ("sgd", "adam") if any(o in oe.present(res, n) for n in res["models"])]


def accuracy(rec):
    """Validation accuracy against j: one panel per (optimiser, model); network solid, linearised
    dashed; the dataset's own labels as horizontal lines."""
    res = rec.tree()
    js, names, opts = np.asarray(res["eigen_indices"]), list(res["models"]), _opts(res)
    J = len(js)
    fig, axes = plt.subplots(len(opts), len(names), figsize=(COLUMN_WIDTH, 2.9 * len(opts) + 0.5), sharex=True,
                             sharey=True, squeeze=False)
    for i, opt in enumerate(opts):
        for k, name in enumerate(names):
            ax, r = axes[i, k], res["models"][name]
            for variant in oe.VARIANTS:
                if f"{opt}_{variant}" not in r:
                    continue
                acc = np.asarray(r[f"{opt}_{variant}"]["val_acc"], np.float64)
                word = "network" if variant == "network" else "linearised"
                _band(ax, js, acc[:, :J], COLOURS[variant], word, "-" if variant == "network" else "--")
                ax.axhline(np.nanmean(acc[:, J]), color=COLOURS[variant], lw=1.0,
                           ls=":" if variant == "linear" else "-.", alpha=0.9, label=f"{word}, own labels")
            ax.axhline(0.5, color="0.6", lw=0.8)
            _jaxis(ax, js)
            ax.set_title(f"{C.LABELS.get(name, name)}, {opt.upper()}")
            if i == len(opts) - 1:
                ax.set_xlabel(r"eigenfunction index $j$")
            if k == 0:
                ax.set_ylabel("validation accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, fontsize=9)
    return fig


def gap(rec):
    """Linearised minus network validation accuracy against j (points), with 95% intervals over
    seeds and validation noise; one panel per optimiser, one line per model."""
    res = rec.tree()
    js, names, opts = np.asarray(res["eigen_indices"]), list(res["models"]), _opts(res)
    n_val = int(rec.meta["resolved"]["n_val"])
    fig, axes = plt.subplots(1, len(opts), figsize=(COLUMN_WIDTH, 3.1), sharey=True, squeeze=False)
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, len(names)))
    for ax, opt in zip(axes[0], opts):
        for c, name in zip(colours, names):
            r = res["models"][name]
            if f"{opt}_network" not in r or f"{opt}_linear" not in r:
                continue
            a_net, a_lin = (np.asarray(r[f"{opt}_{v}"]["val_acc"], np.float64) for v in oe.VARIANTS)
            ok = np.isfinite(a_net) & np.isfinite(a_lin)
            gaps = [paired_gap(a_lin[ok[:, i], i], a_net[ok[:, i], i], n_test=n_val) for i in range(len(js))]
            h = 100 * np.array([g.half if math.isfinite(g.half) else 0.0 for g in gaps])
            ax.errorbar(js * (1.0 + 0.06 * names.index(name)), [100 * g.mean for g in gaps], yerr=h, marker="o",
                        ms=4, capsize=2, color=c, label=C.LABELS.get(name, name))
        ax.axhline(0, color="0.4", lw=0.8)
        _jaxis(ax, js)
        ax.set_xlabel(r"eigenfunction index $j$")
        ax.set_title(opt.upper())
    axes[0, 0].set_ylabel("linearised − network\n(accuracy points)")
    axes[0, 0].legend(frameon=False, fontsize=9)
    fig.tight_layout()
    return fig


def hardness(rec, opt: str = "sgd"):
    """Their Figs. 4-5: iterations to the loss threshold (open markers: not reached within the
    budget, drawn at the budget), l2 and cosine distances from the initial weights, against j,
    for the networks trained with ``opt``."""
    res, r = rec.tree(), rec.meta["resolved"]
    js = np.asarray(res["eigen_indices"])
    J = len(js)
    names = [n for n in res["models"] if f"{opt}_network" in res["models"][n]]
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_WIDTH, 2.9))
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, max(len(names), 1)))
    for c, name in zip(colours, names):
        h = oe.hardness(res, name, r["loss_threshold"], r["steps"], r["steps_per_epoch"], opt)
        med = np.array([np.median(col[~np.isnan(col)]) if (~np.isnan(col)).any() else np.nan
                        for col in h["iterations"][:, :J].T])  # inf when most runs never got there
        reached = np.isfinite(med)
        label = C.LABELS.get(name, name)
        axes[0].plot(js[reached], med[reached], "o-", color=c, ms=4, label=label)
        axes[0].plot(js[~reached], np.full((~reached).sum(), r["steps"]), "o", mfc="none", color=c, ms=6)
        _band(axes[1], js, h["l2"][:, :J], c, label)
        _band(axes[2], js, h["cosine"][:, :J], c, label)
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


def spectrum(rec):
    """The NTK spectra at initialisation (eigenvalue over the trace, decreasing; mean over
    seeds), with the indices used as targets marked."""
    res = rec.tree()
    js = np.asarray(res["eigen_indices"])
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.0))
    colours = plt.cm.viridis(np.linspace(0.1, 0.75, len(res["models"])))
    for c, (name, r) in zip(colours, res["models"].items()):
        ev = np.asarray(r["eigvals"], np.float64)
        rel = (ev / ev.sum(1, keepdims=True)).mean(0)
        ax.plot(np.arange(rel.size) + 1, rel, color=c, label=C.LABELS.get(name, name))
        ax.plot(js + 1, rel[js], "o", color=c, ms=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$j + 1$ (eigenvalues in decreasing order)")
    ax.set_ylabel(r"$\lambda_j / \mathrm{tr}\,\Theta_0$")
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def energy(rec):
    """Energy of the labels on the top ``k'`` eigenvectors of the NTK against ``k'``, at
    initialisation (dashed) and at the end of training (solid), mean over seeds; the dotted
    line is labels unrelated to the kernel, ``sqrt(k'/N)``."""
    res, r = rec.tree(), rec.meta["resolved"]
    names = oc.models_of(res)
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.4))
    colours = dict(zip(names, plt.cm.viridis(np.linspace(0.1, 0.75, len(names)))))
    for m in names:
        for part, ls in (("init", "--"), ("end", "-")):
            curve = np.nanmean(np.asarray(res["models"][m][part]["ec_curve"], np.float64), axis=0)
            ax.plot(np.arange(1, curve.size + 1), curve, ls, color=colours[m],
                    label=f"{C.LABELS[m]}, " + ("initialisation" if part == "init" else "end of training"))
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


def spikes(rec):
    """Their Figs. 6-7: relative alignment ``phi_i^T Theta_T phi_i / tr Theta_T`` of the initial
    eigenvectors with the NTK after training on ``sign(phi_j)`` (one colour per ``j``, geometric
    mean over seeds; grey: at initialisation, ``lambda_i / tr Theta_0``), and below it the gain
    over initialisation, with each ``j`` marked."""
    res, r = rec.tree(), rec.meta["resolved"]
    js = [int(j) for j in res["align_indices"]]
    names = [m for m in oc.models_of(res) if "align" in res["models"][m]]
    imax = min(int(max(js) * r["window"] * 2), np.asarray(res["models"][names[0]]["align"]["a_init"]).shape[1])
    fig, axes = plt.subplots(2, len(names), figsize=(COLUMN_WIDTH, 5.6), sharex=True, squeeze=False)
    colours = plt.cm.plasma(np.linspace(0.1, 0.8, len(js)))
    geo = lambda x: np.exp(np.nanmean(np.log(np.asarray(x, np.float64)), axis=0))
    i = np.arange(1, imax)
    for k, name in enumerate(names):
        a = res["models"][name]["align"]
        axes[0, k].plot(i, geo(a["a_init"])[1:imax], color="0.55", lw=1.2, label="initialisation")
        for t, (j, c) in enumerate(zip(js, colours)):
            end, gain = geo(np.asarray(a["a_end"])[:, t]), geo(np.asarray(a["gain"])[:, t])
            axes[0, k].plot(i, end[1:imax], color=c, lw=1.0, label=f"trained on j={j}")
            axes[1, k].plot(i, gain[1:imax], color=c, lw=1.0)
            axes[0, k].plot([j], [end[j]], "o", color=c, ms=5)
            axes[1, k].plot([j], [gain[j]], "o", color=c, ms=5)
        axes[0, k].set_title(C.LABELS[name])
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


def link(rec):
    """Energy concentration, centred kernel-target alignment and test accuracy of the link model
    against the number of feature updates (``K = inf``: 0, drawn at 0.5)."""
    res, r = rec.tree(), rec.meta["resolved"]
    table = oc.link_table(res, r["link_model"], r["Ks"])
    xs = [r["steps"] if K == 1 else (0.5 if math.isinf(K) else float(np.median(u))) for K, u, *_ in table]
    fig, axes = plt.subplots(1, 3, figsize=(COLUMN_WIDTH, 2.8))
    for ax, idx, label in ((axes[0], 2, "energy concentration"), (axes[1], 3, "centred alignment"),
                           (axes[2], 4, "test accuracy")):
        mi = [seed_interval(np.asarray(row[idx], np.float64)[np.isfinite(np.asarray(row[idx], np.float64))])
              for row in table]
        ax.errorbar(xs, [a for a, _ in mi], yerr=[b if math.isfinite(b) else 0.0 for _, b in mi], fmt="o-", ms=4,
                    capsize=2, color="#1f4e79")
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{0 if math.isinf(K) else int(round(x))}\n{K_label(K)}" for x, (K, *_) in zip(xs, table)],
                           fontsize=8.5)
        ax.minorticks_off()
        ax.set_xlabel("feature updates")
        ax.set_title(label, fontsize=10)
    axes[0].axhline(oc.random_baseline(r["k"], r["n_kernel"]), color="0.6", lw=0.8, ls=":")
    fig.suptitle(f"{C.LABELS[r['link_model']]} trained on the labels by iterative linearisation", fontsize=10.5)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ the cost table of both chapters
def paper_num_params(resnet_width: int = 64) -> dict:
    """Weights of the three one-output models on CIFAR-10 inputs (shapes only, nothing computed)."""
    import jax
    import jax.numpy as jnp

    from ...core._tree import num_params

    out = {}
    for name in C.ORDER:
        model = C.build_model(name, "cifar10", resnet_width)
        shapes = jax.eval_shape(lambda k: model.init(k, jnp.zeros((2, 32, 32, 3), jnp.float32)), jax.random.PRNGKey(0))
        out[name] = int(num_params(shapes[0]))
    return out


def cost_rows(rec, paper_n: int, paper_params: Mapping, grams: Optional[Mapping] = None,
              memory_mb: float = 512.0) -> list:
    """Per model, a row of the cost table: this run's ``N``, ``P``, the float64 Gram matrix, the
    two float32 Jacobian blocks, the NTK and eigendecomposition seconds (median over
    initialisations after the first, which compiles), and the same at the paper's ``N`` and
    ``P`` extrapolated on this machine (``N^2 P`` for the kernel, ``N^3`` for the
    eigendecomposition). ``grams`` (``{model: (Gram matrices here, at the paper's scale)}``)
    adds the NTK time of all of them. A model of ``paper_params`` this run did not measure gets
    the paper's numbers only, its NTK time scaled by ``P`` from the last measured model."""
    size = lambda b: f"{b / 1e9:.1f} GB" if b >= 1e9 else f"{b / 1e6:.0f} MB"
    span = lambda s: f"{s / 3600:.1f} h" if s >= 360 else (f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s")
    out, ref = [], None
    for name in list(rec.meta["cost"]) + [m for m in paper_params if m not in rec.meta["cost"]]:
        c = rec.meta["cost"].get(name)
        row = {"model": C.LABELS.get(name, name)}
        if c is not None:
            n, P = int(c["n"]), int(c["num_params"])
            t = [float(np.median(c[k][1:] if len(c[k]) > 1 else c[k])) for k in ("ntk_seconds", "eigh_seconds")]
            ref = (n, P, *t)
            row.update({"N": f"{n:,}", "P": f"{P:,}", "Gram": size(8.0 * n * n),
                        "Jacobian blocks": size(8.0 * P * int(c["block"])),
                        "NTK": span(t[0]), "eigh": span(t[1])})
            if grams:
                row["NTK, all Grams"] = span(t[0] * grams[name][0])
        elif ref is not None:
            row["model"] += " (not run: NTK time scaled by P)"
        pp = paper_params.get(name)
        if pp and ref is not None:
            n, P, t_ntk, t_eigh = ref
            ntk = t_ntk * (paper_n / n) ** 2 * pp / P
            row.update({"paper: N": f"{paper_n:,}", "paper: P": f"{pp:,}", "paper: Gram": size(8.0 * paper_n ** 2),
                        "paper: Jacobian blocks": size(8.0 * pp * ntk_block_size(pp, memory_mb, paper_n)),
                        "paper: NTK": span(ntk), "paper: eigh": span(t_eigh * (paper_n / n) ** 3)})
            if grams:
                row["paper: NTK, all Grams"] = span(ntk * grams[name][1])
        out.append(row)
    return out


# ------------------------------------------------------------------------------ the demo
def target_gaps(res, column: int, n_val: int) -> dict:
    """Per ``(model, optimiser)`` of an eigenfunctions record's tree ``res`` with both variants:
    ``(network, linear, gap)`` at target ``column`` (of ``val_acc``; the last column is the
    dataset's own labels): the two models' validation accuracies per seed and the
    :class:`~itlin.book.verdicts.Gap` of linearised minus network, paired over the seeds where
    both are finite, with the validation set's paired noise where the record keeps which inputs
    each run got right."""
    out = {}
    for name in res["models"]:
        for opt in oe.present(res, name):
            if not all(f"{opt}_{v}" in res["models"][name] for v in oe.VARIANTS):
                continue
            net, lin = (oe._acc(res, name, f"{opt}_{v}")[:, column] for v in oe.VARIANTS)
            c = [oe._correct(res, name, f"{opt}_{v}", n_val) for v in oe.VARIANTS]
            examples = None if any(x is None for x in c) else (c[1][:, column], c[0][:, column])
            v = C.gap_claim("demo", "", "", lin, net, n_test=n_val, examples=examples)
            out[(name, opt)] = (net, lin, v)
    return out


def eigenfunction_setting(res, column: int, *, n_val: int, title: str, margin: float = oe.CLEAR_MARGIN):
    """One frame of :func:`eigenfunction_demo`: the network against its linearised model on one
    target (``column`` of the record's ``val_acc``). Left: each seed's validation accuracy, network
    (blue) and linearised (orange) side by side per model and optimiser, a seed's two runs joined by
    a grey line, with the mean and its 95% interval over seeds. Right: the gap (linearised minus
    network, points) with its 95% interval (seeds and validation noise), the ``margin`` of "clearly
    ahead" dashed. Returns a :class:`~itlin.book.widgets.View` with a table of the numbers."""
    from ..widgets import View

    groups = target_gaps(res, column, n_val)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 4.0), gridspec_kw={"width_ratios": [2.1, 1]})
    rng = np.random.default_rng(column)
    rows, labels = [], []
    for g, ((name, opt), (net, lin, v)) in enumerate(groups.items()):
        x0, x1 = 3 * g, 3 * g + 1
        ok = np.isfinite(net) & np.isfinite(lin)
        jit = rng.uniform(-0.12, 0.12, net.size)
        ax.plot(np.vstack([x0 + jit, x1 + jit])[:, ok], 100 * np.vstack([net, lin])[:, ok], color="0.7", lw=0.5,
                zorder=1)
        for x, acc, variant in ((x0, net, "network"), (x1, lin, "linear")):
            fin = acc[np.isfinite(acc)]
            ax.scatter(x + jit[np.isfinite(acc)], 100 * fin, s=12, color=COLOURS[variant], alpha=0.55, lw=0, zorder=2,
                       label=("network" if variant == "network" else "linearised") + ", one seed" if g == 0 else None)
            m, h = seed_interval(fin)
            ax.errorbar([x + 0.38], [100 * m], yerr=[100 * h if math.isfinite(h) else 0.0], fmt="D", ms=5,
                        color=COLOURS[variant], mec="k", capsize=3, lw=1.5, zorder=3,
                        label="mean, 95% interval" if g == 0 and variant == "linear" else None)
        labels.append(f"{C.LABELS.get(name, name)}\n{opt.upper()}")
        bx.errorbar([100 * v.mean], [g], xerr=[100 * v.half], fmt="o", color="k", capsize=3, lw=1.5)
        rows.append({"model": C.LABELS.get(name, name), "optimiser": opt.upper(),
                     "network": C.fmt_finite(net), "linearised": C.fmt_finite(lin),
                     "linearised − network": v.gap_text() + (f", {v.dropped} seed(s) left out" if v.dropped else "")})
    ax.axhline(50, color="0.6", lw=0.8, ls=":", label="chance")
    ax.set_xticks([3 * g + 0.5 for g in range(len(groups))], labels)
    ax.set_ylim(30, 102)
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"{title}: each seed", fontsize=10.5, loc="left")
    bx.axvline(0, color="0.4", lw=0.8)
    bx.axvline(100 * margin, color="0.3", lw=1.0, ls="--", label=f"clearly ahead: {100 * margin:g} points")
    bx.set_yticks(range(len(groups)), labels)
    bx.set_ylim(len(groups) - 0.5, -0.5)
    bx.set_xlabel("linearised − network (points)")
    bx.set_title("gap (95% interval)", fontsize=10.5)
    handles, names = ax.get_legend_handles_labels()
    h2, n2 = bx.get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(handles + h2, names + n2, loc="lower center", ncol=3, fontsize=9, frameon=False)
    return View(fig, table=rows)


def eigenfunction_demo(rec):
    """The chapter's demo: one knob, the target, over the record's eigenfunction indices ``j`` and,
    last, the dataset's own labels; each frame is :func:`eigenfunction_setting` on every seed of
    the eigenfunctions record ``rec``, the gap axis shared by the frames (around every frame's
    interval and the margin)."""
    from ..widgets import Demo, Knob

    res = rec.tree()
    js = [int(j) for j in np.asarray(res["eigen_indices"])]
    n_val = int(rec.meta["resolved"]["n_val"])
    values = js + ["labels"]
    column = {**{j: i for i, j in enumerate(js)}, "labels": len(js)}
    ends = [100 * x for c in column.values() for *_, v in target_gaps(res, c, n_val).values()
            for x in (v.mean - v.half, v.mean + v.half) if math.isfinite(x)] + [0.0, 100 * oe.CLEAR_MARGIN]
    pad = 0.08 * (max(ends) - min(ends))
    gap_limits = (min(ends) - pad, max(ends) + pad)

    def compute(target):
        title = "the dataset's own labels" if target == "labels" else f"eigenfunction j = {target}"
        view = eigenfunction_setting(res, column[target], n_val=n_val, title=title)
        view.figure.axes[1].set_xlim(*gap_limits)
        return view

    return Demo(Knob("target", values, default=js[len(js) // 2], label="eigenfunction index j",
                     labels=[str(j) for j in js] + ["own labels"]),
                compute, title="The network against its linearised model, target by target")


__all__ = ["accuracy", "cost_rows", "eigenfunction_demo", "eigenfunction_setting", "energy", "gap", "hardness", "link",
           "paper_num_params", "spectrum", "spikes", "target_gaps"]
