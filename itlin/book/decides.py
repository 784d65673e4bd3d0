"""What decides each headline claim of a recorded run, written into its file for readers without itlin.

A record file (:mod:`itlin.book.opendata`) keeps every array of its runs, but not which of them a
claim is judged on, nor how. For every claim that a row of the Findings (:data:`itlin.book.findings.
HEADLINES`) reads on a record, :func:`describe` writes that down as a file attribute ``claim.<id>``
(JSON): the Findings rows it decides, is judged beside or is a part of (a row whose verdict is the
conjunction of its claim and its parts, ``Headline.parts``), the rule, margin and confidence level it
is stated at (Holm's level within the record's family, or 95% for a confirmatory record's planned
claim), the variables it reads, and the two sides ``a`` and ``b`` of its gap per seed as NumPy
expressions over them (with the test set's per-example results, where they enter), or, for a share
of runs that diverged, which runs count on each side. The script
``book/recorded/recompute.py`` evaluates them with xarray, NumPy and SciPy alone, and
``tests/test_recompute.py`` checks that it finds every headline gap and half-width that itlin does.

The expressions are built here, per experiment, from the same rows and indices the claims use
(the settings a gap compares are read from the claims' own calls of :func:`._rows.gap_verdict`).
A pooled record's ``resolved_params`` become the pooled settings (its seeds the total).
``python -m itlin.book.decides`` rewrites the records the Findings read (attributes only).
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
from pathlib import Path
from typing import Callable, Optional, Sequence

from .. import _io
from . import opendata, render, runner
from . import verdicts as V

PREFIX = "claim."
#: the file attribute that says what the ``claim.<id>`` attributes are
ABOUT = ("claim.<id>: JSON, what decides each claim the book's Findings read on this record: the rows it decides "
         "('decides') or is judged beside ('beside'), its rule, margin and level, the variables it reads, and its gap "
         "as NumPy expressions a and b per seed (book/recorded/README.md; book/recorded/recompute.py evaluates them)")
#: :data:`ABOUT` in a record where a claim is a part of a row (the words of the others stay as they were written)
ABOUT_PARTS = ABOUT.replace("('decides') or is judged beside ('beside')",
                            "('decides'), is judged beside ('beside') or is a part of ('part_of')")


# ------------------------------------------------------------------------------ per experiment
@contextlib.contextmanager
def _spy(module, name: str, seen: dict):
    """Record ``(args, kwargs)`` of each call of ``module.name`` by its first argument (a claim id)."""
    real = getattr(module, name)

    def spy(*args, **kw):
        seen[args[0]] = (args, kw)
        return real(*args, **kw)

    setattr(module, name, spy)
    try:
        yield seen
    finally:
        setattr(module, name, real)


def _one(rows, field: str = "setting") -> Optional[str]:
    values = {str(r[field]) for r in rows}
    return values.pop() if len(values) == 1 else None


def _gap_rows(rec, ids, keys) -> dict:
    """The claims judged by :func:`._rows.gap_verdict` (Figs. 2, 3, 4, 8 and the feature updates):
    the final test accuracy of one setting's run against another's, seed by seed."""
    from .experiments import get
    from .experiments.main import _rows

    with _spy(_rows, "gap_verdict", {}) as seen:
        get(rec.experiment).claims(rec)
    out = {}
    for cid in ids:
        if cid not in seen:
            continue
        (_, _, _, rows_a, rows_b), kw = seen[cid][0][:5], seen[cid][1]
        a, b = _one(rows_a), _one(rows_b)
        if a is None or b is None or kw.get("metric", "test") != "test":
            continue
        runs = {s: [(tag, f) for tag, f in rec.meta["runs"].items() if str(f.get("setting", tag)) == s] for s in (a, b)}
        final = all("final_test" in f for s in (a, b) for _, f in runs[s])
        if final:
            side = {s: f"meta('final_test', setting={s!r})" for s in (a, b)}
            what = "final_test (runs_json: each run's accuracy on the final test set)"
        else:
            side = {s: f"per_run({keys[_template(f'_fits/{runs[s][0][0]}/eval/test/accuracy_lin')]!r}, at=-1, "
                       f"setting={s!r})" for s in (a, b)}
            what = "the test accuracy of the trained (linearised) model at the last evaluation"
        recipe = {"statistic": "paired", "a": side[a], "b": side[b], "n_test": int(kw["n_test"]),
                  "formula": f"{what}: setting {a!r} minus setting {b!r}"}
        if final and all(isinstance(f.get("final_correct"), str) for s in (a, b) for _, f in runs[s]):
            n = {int(float(f["n_test_final"])) for s in (a, b) for _, f in runs[s]}.pop()
            recipe["examples"] = [f"correct({keys[_template(f'_bits/{runs[s][0][0]}/final_correct')]!r}, {n}, "
                                  f"setting={s!r})" for s in (a, b)]
        if rec.tallies is not None:
            recipe["tally"] = [a, b]
        out[cid] = recipe
    return out


def _feature_learning(rec, ids, keys) -> dict:
    """Figs. 6-7: the linear probes' accuracy (final, and over the snapshots after step 0), the
    first-layer filters' movement and where along K=1's run they are closest to the large K's
    final ones, K=1 against the large K."""
    from .experiments.main import _rows as R
    from .experiments.main import feature_learning as FL

    rows = FL.rows(rec)
    base, big = R.select(rows, K=1), R.select(rows, K=FL.large_K(rows))
    a, b = _one(base), _one(big)
    tag = base[0]["tag"]
    r = rec.meta["resolved"]
    n = int(r.get("n_test_final") or r["n_test"])
    out = {}
    for L in FL.LAYERS:
        p, c = (keys[_template(f"snapshots/{tag}/probe_{L}{x}")] for x in ("", "_correct"))
        # the final probe (at the last snapshot) and the probe over the snapshots after step 0
        for claim, (wrap, at, said) in {"lower": ("{}", ", at=-1", "at the last snapshot"),
                                        "slower": ("mean({}[:, 1:], axis=1)", "",
                                                   "averaged over the snapshots after step 0")}.items():
            if f"probe.{L}.{claim}" in ids:
                a_, b_ = (wrap.format(f"per_run({p!r}{at}, setting={s!r})") for s in (a, b))
                out[f"probe.{L}.{claim}"] = {
                    "statistic": "paired", "a": a_, "b": b_, "n_test": n,
                    "examples": [wrap.format(f"correct({c!r}, {n}{at}, setting={s!r})") for s in (a, b)],
                    "formula": f"the {L} probe's test accuracy {said}: {a!r} minus {b!r}"}
    sides = {"filters.early": ("0 * frac + 0.5", "frac", "half of K=1's run minus the fraction of it"),
             "filters.ten_percent": ("frac", f"0 * frac + {FL.PAPER_FRACTION!r}",
                                     f"the fraction of K=1's run minus {FL.PAPER_FRACTION:.0%}")}
    if set(sides) & set(ids):
        f, st = (keys[_template(f"snapshots/{tag}/{x}")] for x in ("filters", "step"))
        axes = tuple(range(2, base[0]["filters"].ndim + 1))  # a run's filters beyond its snapshot axis
        define = {"one": f"per_run({f!r}, setting={a!r})", "big": f"per_run({f!r}, setting={b!r})",
                  "steps": f"per_run({st!r}, setting={a!r})",
                  "dist": f"sqrt(sum((one - big[:, -1:]) ** 2, axis={axes}))",
                  "kept": "all(isfinite(dist), axis=1)",
                  "frac": "take_along_axis(steps, argmin(dist, axis=1)[:, None], axis=1)[:, 0] / steps[:, -1]"}
        for cid, (side_a, side_b, what) in sides.items():
            if cid in ids:
                out[cid] = {"statistic": "paired", "define": define, "a": side_a, "b": side_b, "keep": "kept",
                            "reading": "(steps[:, 1] / steps[:, -1])[argmin(~kept)] / 2", "base_level": V.LEVEL,
                            "formula": f"where along K=1's run its first-layer filters are closest (Euclidean) to "
                                       f"{b!r}'s final ones, as a fraction of its last snapshot's step: {what} (half "
                                       f"the snapshots' spacing, read on the first seed kept, added to the interval "
                                       f"as the reading's error)"}
    if "filters.faster" in ids:
        f = keys[_template(f"snapshots/{tag}/filters")]
        out["filters.faster"] = {
            "statistic": "paired",
            "define": {"one": f"per_run({f!r}, setting={a!r})", "big": f"per_run({f!r}, setting={b!r})",
                       "ratio": "log(rownorm(one[:, -1] - one[:, 0])) - log(rownorm(big[:, -1] - big[:, 0]))"},
            "a": "ratio", "b": "zeros_like(ratio)",
            "formula": f"log of how far the first-layer filters moved from their start (Euclidean norm), {a!r} over {b!r}"}
    return out


def _fig4(rec, ids, keys) -> dict:
    """Fig. 4's divergences: the share of the large-K runs (every finite K > 1 and seed) that
    diverged with batch norm in a mode, minus the share without batch norm."""
    from .experiments.main import fig4_resnet as F4

    rows = F4.rows(rec)

    def diverged(config: str) -> str:
        runs = [f"completed(config={config!r}, K={K!r})" for K in
                sorted({r["K"] for r in rows if r["config"] == config and math.isfinite(r["K"]) and r["K"] > 1})]
        return f"1 - {runs[0]}" if len(runs) == 1 else "1 - stack([" + ", ".join(runs) + "])"

    out = {}
    for cid in ids:
        mode = cid[len("diverge."):]
        if cid.startswith("diverge.") and mode in F4.CONFIG_LABELS:
            out[cid] = {"statistic": "proportions", "a": diverged(mode), "b": diverged(F4.NO_BN), "base_level": V.LEVEL,
                        "formula": f"the share of the runs at every finite K above 1 (each seed) that diverged (did "
                                   f"not complete): {F4.CONFIG_LABELS[mode]} minus {F4.CONFIG_LABELS[F4.NO_BN]}"}
    return out


def _fig5(rec, ids, keys) -> dict:
    """Fig. 5: slopes of the test accuracy (at the step chosen on validation) against log10 of the data size."""
    from .experiments.main import fig5_data_scaling as F5

    rows = F5.rows(rec)
    labels = F5.labels_of(rows)
    if len(labels) != 4:
        return {}
    k1, kbig, k1_hi, kinf = labels
    sides = {"finite_close": (kbig, k1), "finite_not_worse": (kbig, k1), "inf_worse": (k1_hi, kinf),
             "inf_worse_finite": (kbig, kinf), "control_close": (k1_hi, k1)}
    sizes = sorted({int(r["n"]) for r in rows})
    n_test = int(rec.meta["resolved"]["n_test"])
    if not all(r.get("correct") is not None for r in rows):
        return {}  # an unpaired slope bound: not described
    out = {}
    for cid in ids:
        if cid not in sides:
            continue
        a, b = sides[cid]
        slope = lambda s: f"slope_weights({sizes}) @ stack([" + ", ".join(  # noqa: E731
            f"meta('chosen_test', setting={s!r}, n={n})" for n in sizes) + "])"
        bits = lambda s: keys[_template(f"_bits/{next(r['tag'] for r in rows if r['setting'] == s)}/chosen_correct")]  # noqa: E731
        ex = lambda s: f"einsum('n,nsi->si', slope_weights({sizes}), stack([" + ", ".join(  # noqa: E731
            f"correct({bits(s)!r}, {n_test}, setting={s!r}, n={n})" for n in sizes) + "]))"
        out[cid] = {"statistic": "paired", "a": slope(a), "b": slope(b), "examples": [ex(a), ex(b)],
                    "formula": f"slope of chosen_test (runs_json) against log10 of the training-set size n, per tenfold "
                               f"data: {a!r} minus {b!r}"}
    return out


def _fig9(rec, ids, keys) -> dict:
    """Fig. 9: the mean test RMSE over the kept seeds, log10 at the smallest damping minus at the largest."""
    from .experiments.main import fig9_damping as F9

    r = F9.resolved(rec)
    pre = f"{r['init']}."
    blown = "" if r.get("blowup") is None else (
        " | any(~isnan(trace) & (~isfinite(trace ** 2) | (abs(trace ** 2) > "
        f"{float(r['blowup'])!r} * maximum(abs(trace[..., :1] ** 2), {2.0 ** -1022!r}))), axis=-1)")
    define = {"train": f"var({keys['train_rmse']!r})", "test": f"var({keys['test_rmse']!r})",
              "trace": f"var({keys['train_rmse_trace']!r})",
              "dropped": f"(var({keys['diverged']!r}) != 0){blown} | ~isfinite(train) | ~isfinite(test) | "
                         f"(train > {float(r['rmse_threshold'])!r})"}
    values = f"where(dropped, nan, test)[argsort(var({keys['dampings']!r}))]"
    out = {}
    for cid in ids:
        key = cid[len(pre):]
        if key in F9.CLAIMS and F9.CLAIMS[key][0] == "mean":
            out[cid] = {"statistic": "bootstrap", "define": define, "values": values, "reducer": "nanmean(v, axis=-1)",
                        "resamples": F9.BOOTSTRAP, "rng_seed": 0, "ends": [0, -1],
                        "formula": "log10 of the mean test RMSE over the kept seeds (diverged, blown-up and unfitted "
                                   "runs dropped) at the smallest damping minus at the largest"}
        elif key == "best.similar":
            out[cid] = {"statistic": "bootstrap", "define": define, "values": values,
                        "reducer": f"quantile(where(isnan(v), inf, v), {F9.BEST_QUANTILE!r}, axis=-1, method='lower')",
                        "resamples": F9.BOOTSTRAP, "rng_seed": 0, "ends": [0, -1],
                        "formula": f"log10 of the best runs' test RMSE (the {F9.BEST_QUANTILE:.0%} quantile over the "
                                   "seeds, the lower value; dropped runs count as infinite) at the smallest damping "
                                   "minus at the largest"}
    return out


def _arbel_sweep(rec, ids, keys) -> dict:
    """Arbel et al.'s step-size sweeps (``arbel_steps``, ``arbel_mnist``): log10 gaps between two
    steps (GN's and GD's Test-LRfit, GN's iterations to the stopping loss), the hidden-learning
    gain, the iterations to the stopping loss of GN against GD, and (SiLU) the test loss of each
    method at its step chosen on validation."""
    from .experiments.arbel import _arbel as A
    from .experiments.arbel import arbel_steps as AS

    s = A.lr_arrays(rec)
    r = s["r"]
    pre, _ = A.variant(r)
    ns, nl = A.at(s["lr"]["gn"], r.small_lr), A.at(s["lr"]["gn"], r.large_lr)
    var = lambda m, k: f"var({keys[f'{m}/{k}']!r})"  # noqa: E731
    out = {}
    for cid in ids:
        what = cid[len(pre):] if cid.startswith(pre) else cid
        if what in ("gn.step_lrfit", "mnist.gn_step_lrfit"):
            out[cid] = {"statistic": "paired", "a": f"log10({var('gn', 'lrfit')}[{nl}, :, -1])",
                        "b": f"log10({var('gn', 'lrfit')}[{ns}, :, -1])",
                        "keep": f"({var('gn', 'diverged')}[{nl}] == 0) & ({var('gn', 'diverged')}[{ns}] == 0)",
                        "formula": f"log10 of GN's final Test-LRfit at step {r.large_lr:g} minus at step {r.small_lr:g}"}
        elif what == "gd.step_lrfit":
            ds, dl, budgeted = AS.gd_steps(s)
            small = s["lr"]["gd"][ds]
            out[cid] = {"statistic": "paired", "a": f"log10({var('gd', 'lrfit')}[{ds}, :, -1])",
                        "b": f"log10({var('gd', 'lrfit')}[{dl}, :, -1])",
                        "keep": f"({var('gd', 'diverged')}[{ds}] == 0) & ({var('gd', 'diverged')}[{dl}] == 0)",
                        "formula": f"log10 of GD's final Test-LRfit at step {small:g} minus at step {r.large_lr:g}"
                                   + (f" (its step {small:g}: the smallest whose budget covers the step x iterations "
                                      f"of the paper's GD at {r.small_lr:g})" if budgeted else "")}
        elif what == "gn.step_faster":
            out[cid] = {"statistic": "paired",
                        "define": {"ok": f"({var('gn', 'converged')} != 0) & ({var('gn', 'diverged')} == 0)",
                                   "count": f"where(ok, {var('gn', 'steps')}, {float(r.gn_steps)!r})"},
                        "a": f"log10(count[{ns}])", "b": f"log10(count[{nl}])", "keep": f"ok[{ns}] | ok[{nl}]",
                        "formula": f"log10 of GN's iterations to the stopping loss (the budget where it did not reach "
                                   f"it) at step {r.small_lr:g} minus at step {r.large_lr:g}; seeds where "
                                   "neither reached it left out"}
        elif what == "best":
            define = {}
            for m in ("gn", "gd"):
                define[f"score_{m}"] = (f"where(any({var(m, 'diverged')} != 0, axis=-1), inf, "
                                        f"nanmean(log10({var(m, 'val')}[:, :, -1]), axis=-1))")
                define[f"best_{m}"] = f"argmin(where(isnan(score_{m}), inf, score_{m}))"
            loss = {m: f"log10({var(m, 'test')}[best_{m}, :, -1])" for m in ("gn", "gd")}
            ahead, behind = ("gn", "gd") if r.beta > 1 else ("gd", "gn")
            out[cid] = {"statistic": "paired", "define": define, "a": loss[behind], "b": loss[ahead],
                        "keep": f"({var('gn', 'diverged')}[best_gn] == 0) & ({var('gd', 'diverged')}[best_gd] == 0)",
                        "formula": f"each method at the step with the lowest mean log10 validation loss: log10 of "
                                   f"{behind.upper()}'s final test loss minus {ahead.upper()}'s"}
        elif what in ("hidden.gn", "mnist.hidden.gn"):
            out[cid] = {"statistic": "paired",
                        "define": {"lt": f"log10({var('gn', 'train')}[{ns}])",
                                   "k": f"sum(cumprod(lt >= lt[:, :1] - {float(r.effect)!r}, axis=1), axis=1) - 1",
                                   "gain": f"log10(var({keys['rf_test']!r})) - log10(take_along_axis("
                                           f"{var('gn', 'lrfit')}[{ns}], k[:, None], axis=1)[:, 0])"},
                        "a": "gain", "b": "0 * gain", "keep": f"{var('gn', 'diverged')}[{ns}] == 0",
                        "formula": f"GN at step {r.small_lr:g}: log10 of RF's test loss minus Test-LRfit's at the last "
                                   "checkpoint whose training loss is still within the margin of its first"}
        elif what == "speed.gn_faster":
            define = {}
            for m in ("gn", "gd"):
                define[f"ok_{m}"] = f"({var(m, 'converged')} != 0) & ({var(m, 'diverged')} == 0)"
                define[m] = (f"where(any(ok_{m}, axis=0), min(where(ok_{m}, {var(m, 'steps')}, inf), axis=0), "
                             f"{float(getattr(r, f'{m}_steps'))!r})")
            out[cid] = {"statistic": "paired", "define": define, "a": "log10(gd)", "b": "log10(gn)",
                        "keep": "any(ok_gn, axis=0) | any(ok_gd, axis=0)",
                        "formula": "log10 of the fewest iterations to the stopping loss over the step sizes (the budget "
                                   "where none reached it): GD's minus GN's"}
    return out


def _arbel_init(rec, ids, keys) -> dict:
    """Arbel et al.'s ``tau0`` sweep: each method at its step chosen on validation, at the smallest ``tau0``."""
    var = lambda m, k: f"var({keys[f'{m}/{k}']!r})"  # noqa: E731
    out = {}
    for cid in ids:
        m = "gn" if cid in ("init.small_gn_beats_rf", "init.sigma_grows") else \
            "gd" if cid == "init.small_gd_beats_rf" else None
        if m is None:
            continue
        define = {"score": f"where(any({var(m, 'diverged')}[:, 0] != 0, axis=-1), inf, "
                           f"nanmean(log10({var(m, 'val')}[:, 0, :, -1]), axis=-1))",
                  "best": "argmin(where(isnan(score), inf, score))"}
        keep = f"{var(m, 'diverged')}[best, 0] == 0"
        if cid == "init.sigma_grows":
            out[cid] = {"statistic": "paired", "define": define, "keep": keep,
                        "a": f"log10({var(m, 'sigma_rel')}[best, 0, :, -1])",
                        "b": f"log10({var(m, 'sigma_rel')}[best, 0, :, 0])",
                        "formula": "at the smallest tau0, GN at the step with the lowest mean log10 validation loss: "
                                   "log10 of sigma_min(JJ^T) over its mean eigenvalue, final minus initial"}
        else:
            out[cid] = {"statistic": "paired", "define": define, "keep": keep,
                        "a": f"log10(var({keys['rf_test']!r})[0])", "b": f"log10({var(m, 'test')}[best, 0, :, -1])",
                        "formula": f"at the smallest tau0: log10 of RF's test loss minus {m.upper()}'s at the step with "
                                   "the lowest mean log10 validation loss"}
    return out


def _ortiz_eigen(rec, ids, keys) -> dict:
    """Ortiz-Jiménez et al.'s eigenfunctions: validation accuracy per target, network and linearised."""
    from .experiments.ortiz import ortiz_eigenfunctions as OE

    res_js = [int(j) for j in rec["eigen_indices"]]
    J, n = len(res_js), int(rec.meta["resolved"]["n_val"])
    out = {}

    def acc(name, group):
        return f"var({keys[f'models/{name}/{group}/val_acc']!r})"

    def bits(name, group, cols):
        k = f"models/{name}/{group}/val_correct"
        return None if k not in keys else f"unpack(var({keys[k]!r})[:, {cols}], {n})"

    for cid in ids:
        kind, rest = cid.split(".", 1)
        if kind == "decay":
            name, opt, variant = rest.split(".")
            g = f"{opt}_{variant}"
            recipe = {"a": f"{acc(name, g)}[:, 0]", "b": f"{acc(name, g)}[:, {J - 1}]", "n_test": n,
                      "formula": f"validation accuracy of the {name} {variant}, {opt}: first eigenfunction (j={res_js[0]}) "
                                 f"minus last (j={res_js[-1]})"}
            ex = [bits(name, g, 0), bits(name, g, J - 1)]
        elif kind == "cross":
            name, opt = rest.split(".")
            net, lin = f"{opt}_network", f"{opt}_linear"
            up = OE.upper_targets(res_js)
            recipe = {"a": f"mean({acc(name, net)}[:, {up}], axis=1)", "b": f"mean({acc(name, lin)}[:, {up}], axis=1)",
                      "n_test": n * len(up),
                      "formula": f"validation accuracy averaged over the eigenfunctions from the median index up "
                                 f"(j={res_js[up[0]]} to {res_js[up[-1]]}): the {name} network minus its "
                                 f"linearisation ({opt})"}
            ex = [None if bits(name, g, up) is None else f"mean({bits(name, g, up)}, axis=1)" for g in (net, lin)]
        elif kind in ("linear_advantage", "labels"):
            name, opt = rest.split(".")
            lin, net = f"{opt}_linear", f"{opt}_network"
            if kind == "linear_advantage":
                recipe = {"a": f"mean({acc(name, lin)}[:, :{J}], axis=1)", "b": f"mean({acc(name, net)}[:, :{J}], axis=1)",
                          "n_test": n * J, "formula": f"validation accuracy averaged over the {J} eigenfunctions: the "
                                                      f"linearised {name} minus the network ({opt})"}
                ex = [None if bits(name, g, f":{J}") is None else f"mean({bits(name, g, f':{J}')}, axis=1)"
                      for g in (lin, net)]
            else:
                recipe = {"a": f"{acc(name, net)}[:, {J}]", "b": f"{acc(name, lin)}[:, {J}]", "n_test": n,
                          "formula": f"validation accuracy on the dataset's own labels: the {name} network minus its "
                                     f"linearisation ({opt})"}
                ex = [bits(name, net, J), bits(name, lin, J)]
        else:
            continue
        if None not in ex:
            recipe["examples"] = ex
        out[cid] = {"statistic": "paired", **recipe}
    return out


def _ortiz_concentration(rec, ids, keys) -> dict:
    """Ortiz-Jiménez et al.'s Table 1: the labels' energy on the NTK's top eigenvectors, end minus start."""
    out = {}
    for cid in ids:
        if cid.startswith("concentrates."):
            m = cid.split(".", 1)[1]
            out[cid] = {"statistic": "paired", "a": f"var({keys[f'models/{m}/end/ec']!r})",
                        "b": f"var({keys[f'models/{m}/init/ec']!r})",
                        "formula": f"the {m}'s energy concentration at the end of training minus at initialisation"}
    return out


#: experiment -> ``f(record, claim ids, {result key template: variable}) -> {claim id: recipe}``
BUILDERS: dict = {**dict.fromkeys(("fig2_k_sweep", "fig3_augmentation", "fig8_adam", "feature_updates"), _gap_rows),
                  "fig4_resnet": lambda rec, ids, keys: {**_gap_rows(rec, ids, keys), **_fig4(rec, ids, keys)},
                  "feature_learning": _feature_learning, "fig5_data_scaling": _fig5, "fig9_damping": _fig9,
                  "arbel_steps": _arbel_sweep, "arbel_mnist": _arbel_sweep, "arbel_init": _arbel_init,
                  "ortiz_eigenfunctions": _ortiz_eigen, "ortiz_concentration": _ortiz_concentration}


# ------------------------------------------------------------------------------ the attributes
def _template(key: str) -> str:
    return opendata._template(key)[0]


def _keys(path) -> dict:
    """``{result key template: variable name}`` of a record file."""
    import h5py

    with h5py.File(path, "r") as h:
        out = {}
        for name, obj in h.items():
            key = obj.attrs.get("key") if isinstance(obj, h5py.Dataset) else None
            if key is not None:
                out[key.decode() if isinstance(key, bytes) else str(key)] = name
    return out


def _variables(recipe: dict) -> list:
    """The variables an expression of ``recipe`` reads (``runs_json`` for a field of the runs)."""
    found = []
    texts = [recipe.get(k) for k in ("a", "b", "keep", "values", "reading")] + list(recipe.get("examples", [])) \
        + list(recipe.get("define", {}).values())
    for text in filter(None, texts):
        for node in ast.walk(ast.parse(text, mode="eval")):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("meta", "completed"):
                    found.append("runs_json")
                elif node.func.id in ("var", "per_run", "correct") and node.args:
                    found.append(node.args[0].value)
    if "tally" in recipe:
        found += ["tally_setting_a", "tally_setting_b", "tally_seeds", "tally_a_only", "tally_b_only"]
    return list(dict.fromkeys(found))


def _reading(name: str) -> dict:
    """``{claim id: {"decides": [rows], "beside": [rows], "part_of": [rows]}}``: the claims the
    Findings read on record ``name``, by the rows they decide, are judged beside and are a part of
    (``Headline.parts``: the row's verdict is their conjunction with the claim that decides it)."""
    from .findings import HEADLINES

    out: dict = {}
    for h in HEADLINES:
        roles = [("decides", h.record, h.claim), *(("beside", o, c) for o, c in h.other_claims),
                 *(("part_of", p, c) for p, c in h.parts)]
        for role, record, claim in roles:
            if record == name:
                out.setdefault(claim, {"decides": [], "beside": [], "part_of": []})[role].append(h.key)
    return out


def describe(name: str, cache: Optional[dict] = None) -> dict:
    """The file attributes that say what decides each claim the Findings read on record ``name``
    (``claim.<id>``, :data:`ABOUT`) and, for a record of several parts, its pooled ``resolved_params``.
    A claim this module cannot describe (not a test, or a form no builder writes) is left out."""
    from .findings import _in_progress, _opened
    from .plans import CONFIRMATORY

    if _in_progress(name):
        return {}  # a confirmatory record still being made is not read
    rec, judged = _opened(name, {} if cache is None else cache)
    reading = _reading(name)
    path = runner.recorded_dir() / name / opendata.FILE
    build: Callable = BUILDERS.get(rec.experiment, lambda *_: {})
    built = build(rec, [c for c in reading if c in judged.ids and judged[c].tested], _keys(path))
    attrs = {}
    plan = CONFIRMATORY.get(name)
    for cid, recipe in built.items():
        v = judged[cid]
        alone = plan is not None and plan.claim == cid
        level = V.LEVEL if alone else v.level
        why = ("its record's planned claim, judged alone (confirmatory)" if alone else
               f"Holm's correction over the record's {v.family} tests" if v.family > 1 else "the only test of its record")
        roles = {k: rows for k, rows in reading[cid].items() if rows or k != "part_of"}  # part_of only where it is one
        attrs[PREFIX + cid] = json.dumps({
            **roles, "claim": v.claim, "rule": v.rule, "margin": v.margin, "level": level, "level_why": why,
            "scale": v.scale, "unit": v.unit, "variables": _variables(recipe), **recipe}, ensure_ascii=False)
    if attrs:
        parts = any("part_of" in json.loads(v) for v in attrs.values())
        attrs["claims_described"] = ABOUT_PARTS if parts else ABOUT
    if int(opendata.attributes(path).get("parts", 1)) > 1:
        attrs["resolved_params"] = json.dumps(_io.jsonable(rec.meta["resolved"]))
    return attrs


def recorded_names() -> list:
    """Every record the Findings read, deciding a row, beside one or as a part of one, in name order."""
    from .findings import HEADLINES

    return sorted({n for h in HEADLINES for n in (h.record, *(o for o, _ in h.other_claims), *(p for p, _ in h.parts))})


def write(names: Optional[Sequence[str]] = None, say=print) -> list:
    """Rewrite the attributes of records ``names`` (default :func:`recorded_names`) with
    :func:`describe` (:func:`itlin.book.opendata.set_attributes`: the arrays are not touched),
    leaving a file whose attributes already say it alone; returns the paths rewritten."""
    out = []
    for name in (recorded_names() if names is None else names):
        attrs = describe(name)
        path = runner.recorded_dir() / name / opendata.FILE
        now = opendata.attributes(path)
        if attrs and all(now.get(k) == v for k, v in attrs.items()) and not any(
                k.startswith(PREFIX) and k not in attrs for k in now):
            say(f"{name}: unchanged (its attributes already say this)")
            continue  # the file is left as it is (rewriting the same attributes would still change its bytes)
        if not attrs:
            if any(k.startswith(PREFIX) for k in opendata.attributes(path)):  # described once, no longer read
                out.append(opendata.set_attributes(path, {}, drop_prefix=PREFIX))
                say(f"{name}: nothing to describe (its old descriptions dropped)")
            else:
                say(f"{name}: nothing to describe")
            continue
        path = opendata.set_attributes(path, attrs, drop_prefix=PREFIX)
        say(f"{name}: {sum(k.startswith(PREFIX) for k in attrs)} claim(s) described")
        out.append(path)
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m itlin.book.decides", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="recorded runs, by name or folder (default: every record the Findings "
                                             "read)")
    a = ap.parse_args(argv)
    write([Path(n).name for n in a.names] or None)
    return 0


__all__ = ["ABOUT", "ABOUT_PARTS", "BUILDERS", "PREFIX", "describe", "recorded_names", "write"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
