"""Does scale flip it? The number-of-updates claim on a ladder toward the paper's scale.

The main paper's most quoted result is that a few feature updates catch up with K=1: "8-12" in
the journal version, "2-3" (of full-batch runs) in the workshop version, on CIFAR-10 with 50,000
training images and 50-channel networks. The book's :mod:`~.feature_updates` judges it on MNIST-1D
with 1,000 training examples and a 16-channel LeNet. This experiment measures the same gaps (u = 2,
3 and 8 feature updates against K=1, full batch, final test accuracy of the model being trained)
on a ladder of *rungs* toward the paper along two axes: the training-set size at 16 channels, and
the width at 1,000 examples. Each rung is :mod:`~.feature_updates`' full-batch plan at that rung's
size, width and budget (``rungs``: ``"<n_train>x<channels>x<steps>"``), with one training subset
for all seeds (as the book's default record).

Its claims (:func:`judge_rows`):

* per rung ``r`` (``n<n>c<c>``): ``<r>.k1_fits`` (stated, the premise: K=1 ends with train accuracy
  at least ``1 - close_margin`` on every seed) and ``<r>.suffices_u<u>`` (``u`` updates end no
  worse than K=1 by more than ``close_margin``: non-inferiority, the papers' "caught up");
* per axis (``data``, ``width``) and ``u``: ``<axis>.u<u>.shrinks``, the trend rule (:func:`trend`):
  the change of the gap per doubling of the axis, fitted by weighted least squares over the axis's
  rungs (each rung's gap weighted by its inverse variance, known-variance normal interval), holds
  when its interval lies above 0 (the gap, negative at the smallest rung, shrinks toward 0 as the
  axis grows), does not hold when it lies below, and cannot resolve otherwise. Its premises: K=1
  fits on every rung of the axis, and the smallest rung's gap lies below 0 (a gap to shrink);
  where either is unmet it cannot resolve (:func:`~._rows.premise_unmet`).

:func:`ladder_report` gives, per axis and ``u``, the first rung whose interval lies inside the
margin (if any) and the gap extrapolated to four times the largest rung with its own interval.

The book's record is made in parts, one rung and a few seeds each, pooled over their rungs
(:func:`pool`); its plan (rungs, budgets, seeds and the one confirmatory claim, ``data.u2.shrinks``)
is ``book/recorded/ladder-mnist1d-16seeds/NOTES.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import NamedTuple, Optional

from .. import Experiment, Plan, param, register
from ... import verdicts as V
from ...labels import K_label
from . import _rows as R
from . import _setup as S
from .feature_updates import UpdatesParams, _fit_plan, period

NAME = "ladder"
#: the one MNIST-1D generation of every rung: 16,000 training signals (the largest rung's; the
#: book's standard large split, :data:`~._setup.MNIST1D_LARGE`, has 4,000) and 16,000 test signals,
#: of which the final accuracies read ``n_test_final``
GENERATION = {"num_samples": 32_000, "train_split": 0.5}

_RUNG = re.compile(r"^(\d+)x(\d+)x(\d+)$")
#: the normal quantile of a two-sided interval at the book's level (95%)
Z = NormalDist().inv_cdf(0.5 + V.LEVEL / 2)

SCALES = {
    "tiny": {"n_train": 256, "n_test": 200, "n_eval_train": 256, "channels": 4, "steps": 40, "eval_every": 10,
             "updates": [2, 8], "mini_updates": [], "learning_rate": 1e-2, "momentum": 0.9, "seeds": 2,
             "rungs": ["256x4x40", "512x4x40", "256x8x40"]},
    "default": {"n_train": 1000, "n_test": 1000, "n_eval_train": 1000, "channels": 16, "steps": 400,
                "eval_every": 100, "updates": [2, 3, 8], "mini_updates": [], "learning_rate": 1e-2, "momentum": 0.9,
                "seeds": 2, "n_test_final": 15_000,
                "rungs": ["1000x16x800", "2000x16x800", "4000x16x1600", "16000x16x3200", "1000x32x800",
                          "1000x128x800"]},
    "paper": {"n_train": 1000, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 16, "steps": 400,
              "eval_every": 100, "updates": [2, 3, 8], "mini_updates": [], "learning_rate": 1e-2, "momentum": 0.9,
              "seeds": 16, "rungs": ["1000x16x400", "4000x16x800", "16000x16x1600", "50000x16x3200",
                                     "1000x50x400", "1000x128x400"]},
}


class Rung(NamedTuple):
    """One rung: training examples, LeNet channels and full-batch steps."""

    n_train: int
    channels: int
    steps: int

    @property
    def name(self) -> str:
        return f"n{self.n_train}c{self.channels}"

    @classmethod
    def parse(cls, text: str) -> "Rung":
        m = _RUNG.match(str(text).strip())
        if not m:
            raise ValueError(f"a rung is '<n_train>x<channels>x<steps>', e.g. '1000x16x400'; got {text!r}")
        return cls(*(int(g) for g in m.groups()))


@dataclass(frozen=True)
class LadderParams(UpdatesParams):
    SCALES = SCALES

    rungs: Optional[tuple[str, ...]] = param(
        None, "rungs as '<n_train>x<channels>x<steps>'; the first is the base of both axes (data: its channels, "
              "width: its n_train); None: from scale", label="rungs (examples x channels x steps)",
        source="our choice: toward the paper's 50,000 images and 50 channels", distinct=True)

    def check(self):
        r = self.resolved()
        rungs = [Rung.parse(t) for t in r["rungs"]]
        too_many = [(g.name, u) for g in rungs for u in r["updates"] if u >= g.steps]
        if too_many:
            raise ValueError(f"updates need fewer than each rung's steps: {too_many}")
        if r["mini_updates"]:
            raise ValueError("the ladder is full batch: mini_updates must be empty")
        base = rungs[0]
        for g in rungs[1:]:
            if g.n_train != base.n_train and g.channels != base.channels:
                raise ValueError(f"rung {g.name} differs from the base {base.name} in both examples and channels: "
                                 "each rung moves one axis")


def rungs_of(r: LadderParams) -> list:
    return [Rung.parse(t) for t in r.rungs]


def run(params: LadderParams, ctx):
    from ....core.train import iterative_linearisation

    runs, meta = {}, {}
    for g in rungs_of(params):
        part = replace(params, n_train=g.n_train, channels=g.channels, steps=g.steps, n_eval_train=g.n_train,
                       eval_every=max(1, g.steps // 4)).resolve()  # the premise reads every training example
        setup = S.prepare(part, data_seed=params.data_seed, generation=GENERATION)
        mine: dict = {}
        _fit_plan(part, _Tagged(ctx, g.name), setup, mine, {}, iterative_linearisation)
        for tag, info in mine.items():
            runs[f"{g.name} {tag}"] = {**info, "rung": g.name, "n_train": g.n_train, "channels": g.channels,
                                       "setting": f"{g.name} {info['setting']}"}
        meta[g.name] = S.measured_sizes(setup)
    # parts made for their own rungs pool into one record (see pool)
    return {"meta": {"runs": runs, "rungs": meta, "pool_over": ["rungs"], **S.data_meta(setup.ds, setup.model)}}


def pool(records):
    """One record of parts, each made for its own rungs and seeds (a record kept in parts, one
    rung and a few seeds each): the runs of all, the rungs in the parts' order
    (:func:`~itlin.book.store.pool_over`), each rung's measured sizes."""
    rec = R.pool_seeds(records)
    rec.meta["rungs"] = {k: v for part in records for k, v in part.meta["rungs"].items()}
    return rec


class _Tagged:
    """The runner's context with each training run's name prefixed by its rung."""

    def __init__(self, ctx, prefix: str):
        self._ctx, self._prefix = ctx, prefix

    def run(self, job):
        return self._ctx.run(job._replace(tag=f"{self._prefix} {job.tag}"))

    def __getattr__(self, name):
        return getattr(self._ctx, name)


# ------------------------------------------------------------------------------ rows and claims
def rows(rec) -> list:
    return R.rows_of(rec)


class Trend(NamedTuple):
    """The weighted least-squares line of a gap against log2 of an axis (base rung at 0):
    ``slope`` per doubling and ``intercept`` (at the base rung), their variances and covariance,
    and the rungs' ``x`` (doublings) used."""

    slope: float
    intercept: float
    var_slope: float
    var_intercept: float
    cov: float
    x: tuple

    def at(self, x: float) -> tuple:
        """``(gap, standard error)`` the line predicts ``x`` doublings from the base rung."""
        m = self.intercept + self.slope * x
        v = self.var_intercept + x * x * self.var_slope + 2 * x * self.cov
        return m, math.sqrt(max(v, 0.0))


def trend(x, gaps, ses) -> Trend:
    """The gap per doubling by weighted least squares, weights ``1 / se**2`` (each rung's gap as a
    known-variance measurement: the interval of the slope is normal, with no fitted residual
    variance). Needs two rungs at distinct ``x``.

    >>> t = trend([0, 1, 2], [-0.10, -0.06, -0.02], [0.01, 0.01, 0.01])
    >>> round(t.slope, 4), round(t.intercept, 4), round(math.sqrt(t.var_slope), 5)
    (0.04, -0.1, 0.00707)
    """
    import numpy as np

    x, g, se = (np.asarray(v, float) for v in (x, gaps, ses))
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("a trend needs at least two rungs along its axis")
    w = 1.0 / se ** 2
    sw, sx, sy = w.sum(), (w * x).sum(), (w * g).sum()
    sxx, sxy = (w * x * x).sum(), (w * x * g).sum()
    d = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / d
    intercept = (sxx * sy - sx * sxy) / d
    return Trend(float(slope), float(intercept), float(sw / d), float(sxx / d), float(-sx / d), tuple(map(float, x)))


def axes_of(rungs: list) -> dict:
    """``{"data": [rungs along the training-set size], "width": [...]}``, each from the base rung (the
    first), sorted by its axis."""
    base = rungs[0]
    data = sorted({g for g in rungs if g.channels == base.channels}, key=lambda g: g.n_train)
    width = sorted({g for g in rungs if g.n_train == base.n_train}, key=lambda g: g.channels)
    return {"data": data, "width": width}


def _doublings(axis: str, g: Rung, base: Rung) -> float:
    return math.log2(g.n_train / base.n_train) if axis == "data" else math.log2(g.channels / base.channels)


def judge_rows(rows_, rungs: list, *, updates, n_test: int, margin: float) -> list:
    """The ladder's claims, a pure function of the rows (see the module's docstring)."""
    out, per_rung = [], {}
    thr = 1.0 - float(margin)
    for g in rungs:
        mine = R.select(rows_, rung=g.name, sweep="full")
        base = R.select(mine, K=1)
        if not base:
            continue
        ok = [r for r in base if r["status"] == "completed" and r["train"] >= thr]
        done = [r["train"] for r in base if r["status"] == "completed"]
        fits = V.stated(f"{g.name}.k1_fits", f"{g.name}: K=1 fits its training set (train accuracy at least "
                        f"{100 * thr:g}% on every seed)", "the premise: the large-K runs are compared with a trained K=1",
                        f"{len(ok)} of {len(base)} seeds" + (f"; lowest {100 * min(done):.1f}%" if done else ""),
                        V.HOLDS if len(ok) == len(base) else V.FAILS)
        out.append(fits)
        per_rung[g] = {"fits": fits}
        for u in updates:
            K = period(u, g.steps)
            big = R.select(mine, K=K)
            if not big:
                continue
            v = R.gap_verdict(f"{g.name}.suffices_u{u}", f"{g.name}: {u} feature updates ({K_label(K)}) end no worse "
                              "than K=1", "workshop: caught up after 2-3 updates (full batch); journal: 8-12",
                              big, base, n_test=n_test, rule="not_worse", margin=margin, label_a=f"u={u}",
                              label_b="K=1")
            out.append(v)
            per_rung[g][u] = v
    for axis, along in axes_of(rungs).items():
        along = [g for g in along if g in per_rung]
        if len(along) < 2:
            continue
        for u in updates:
            pts = [(g, per_rung[g].get(u)) for g in along]
            if any(v is None or not v.tested or not math.isfinite(v.gap.mean) for _, v in pts):
                continue
            t = trend([_doublings(axis, g, along[0]) for g, _ in pts], [v.gap.mean for _, v in pts],
                      [v.gap.half / Z for _, v in pts])
            se = math.sqrt(t.var_slope)
            half = Z * se
            gap = V.Gap(t.slope, half, min(v.gap.n for _, v in pts), half, 0.0, dist="normal")
            v = V.judge(f"{axis}.u{u}.shrinks", f"along the {axis} axis, the gap of {u} updates to K=1 shrinks toward 0 "
                        "as the axis doubles", "a few feature updates catch up at the paper's scale",
                        gap, "exceeds", 0.0, measured=f"per doubling, over {len(pts)} rungs", unit="points per doubling")
            unmet = [g.name for g, _ in pts if per_rung[g]["fits"].verdict != V.HOLDS]
            first = pts[0][1]
            if not unmet and not (first.mean + first.half < 0):
                premise = V.stated(f"{axis}.u{u}.gap_at_base", "", "", "the smallest rung's gap does not lie below 0",
                                   V.FAILS)
                v = R.premise_unmet(v, premise, "no gap to shrink at the smallest rung")
            elif unmet:
                premise = V.stated(f"{axis}.u{u}.k1_fits", "", "", f"K=1 does not fit at {', '.join(unmet)}", V.FAILS)
                v = R.premise_unmet(v, premise, "K=1 did not fit its training set on every rung")
            out.append(v)
    return out


def claims(rec) -> list:
    r = rec.settings
    return judge_rows(rows(rec), rungs_of(r), updates=[int(u) for u in r.updates], n_test=S.n_test_judged(vars(r)),
                      margin=float(r.close_margin))


def ladder_report(verdicts, rungs: list, *, updates, margin: float) -> list:
    """Per axis and ``u``: the trend's verdict, the first rung (smallest) whose gap lies inside the
    margin (its interval above ``-margin``), and the gap extrapolated to four times the axis's
    largest rung (two doublings beyond it), with the normal interval of the line there."""
    out = []
    by_id = {v.id: v for v in verdicts}
    for axis, along in axes_of(rungs).items():
        for u in updates:
            pts = [(g, by_id.get(f"{g.name}.suffices_u{u}")) for g in along]
            pts = [(g, v) for g, v in pts if v is not None and v.tested]
            if len(pts) < 2:
                continue
            inside = next((g.name for g, v in pts if v.mean - v.half > -margin), None)
            t = trend([_doublings(axis, g, along[0]) for g, _ in pts], [v.gap.mean for _, v in pts],
                      [v.gap.half / Z for _, v in pts])
            x_far = _doublings(axis, pts[-1][0], along[0]) + 2
            m, se = t.at(x_far)
            out.append({"axis": axis, "u": u, "trend": by_id.get(f"{axis}.u{u}.shrinks"), "first_inside": inside,
                        "extrapolated_to": 4 * (pts[-1][0].n_train if axis == "data" else pts[-1][0].channels),
                        "extrapolated": m, "extrapolated_half": Z * se})
    return out


def summary(rec) -> list:
    """Per rung and run: feature updates and the final accuracies over seeds."""
    out, rows_ = [], rows(rec)
    for g in rungs_of(rec.settings):
        for K in sorted({r["K"] for r in R.select(rows_, rung=g.name)}):
            grp = R.select(rows_, rung=g.name, K=K)
            out.append({"rung": g.name, "steps": g.steps, "run": K_label(K), "feature updates": R.updates(grp),
                        "test acc.": R.mean_cell(grp, "test"), "train acc.": R.mean_cell(grp, "train"),
                        "seeds": R.seeds_cell(grp)})
    return out


#: the book's record, fixed in commit 9d9b62b before any of its runs: each rung's planned seeds
PLANNED = {**dict.fromkeys(("1000x16x800", "2000x16x800", "4000x16x1600", "1000x32x800", "1000x128x800"),
                           range(5000, 5016)), "16000x16x3200": range(5000, 5008)}
EXPERIMENT = register(Experiment(NAME, LadderParams, run, version="1", summary=summary, claims=claims, pool=pool,
                                 plans={f"{NAME}-mnist1d-16seeds": Plan("9d9b62b", "data.u2.shrinks", True, PLANNED,
                                                                        "rungs")}))

__all__ = ["EXPERIMENT", "GENERATION", "LadderParams", "NAME", "PLANNED", "Rung", "SCALES", "Trend", "Z", "axes_of", "claims", "judge_rows",
           "ladder_report", "pool", "rows", "rungs_of", "summary", "trend"]
