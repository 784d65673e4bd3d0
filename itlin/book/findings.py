"""The Findings: one row per headline claim of the three papers, judged on the recorded run that
decides it, with the other records of the same claim beside it.

Nothing here is typed by hand but the claims' words and where to find them: :data:`HEADLINES` names,
for each claim, the paper's words (with the section), the recorded run that decides it
(``book/recorded/<record>``), the claim's stable id in that record's experiment, the records judged
beside it, and what departs from the paper. :func:`findings` opens the records, judges each record's
claims as one family (Holm's correction over the record's tests, as most chapters judge a recorded
run; four judge the records of their default settings together, with intervals no narrower and, as
``tests/test_findings.py`` checks, the same headline verdicts), and returns a :class:`Finding` per
claim: the verdict, the gap with its interval against the margin, the verdict at half and at twice
the margin (or at the paper's own tolerance where it states one), whether the premise held, and
whether the deciding record was fixed in advance. The book's Findings page (``book/findings.md``)
renders them; ``python -m itlin.book.findings`` prints the table (the README's copy).

A confirmatory record (fixed in a commit before its runs) is judged as it was planned: its
pre-registered claim alone at 95% (``alone=True``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple, Optional, Sequence

from . import render, runner
from . import verdicts as V
from .plans import CONFIRMATORY, Plan, kind_of_test

MAIN, ARBEL, ORTIZ = "Goldwaser & Ge", "Arbel et al.", "Ortiz-Jiménez et al."
PAPERS = (MAIN, ARBEL, ORTIZ)


class Headline(NamedTuple):
    """A headline claim of a paper and where the book judges it.

    ``key``: a stable id of the row; ``paper``: one of :data:`PAPERS`; ``figure``: the figure or
    number it is about; ``words``: the paper's claim in its own words, with its section;
    ``chapter``: the book page that judges it; ``record``: the recorded run that decides it (a
    folder of ``book/recorded``; a folder of parts is pooled); ``claim``: the claim's id in that
    record's experiment; ``others``: other records judged on the same claim id, or
    ``(record, claim id)`` for a record judged on another claim beside it (the mini-batch runs of
    a record made for them, beside a full-batch claim); ``premise``: the
    id of a stated premise in the deciding record ("" when the claim has none); ``tolerance``:
    a tolerance the paper states itself (shown instead of half and twice the margin);
    ``departure``: what departs from the paper and could flip the verdict; ``short``: a few
    words for the README's table and the forest plot. Whether the row is confirmatory is read
    from :data:`CONFIRMATORY` (:attr:`plan`): a confirmatory record's planned claim is judged
    alone at 95%."""

    key: str
    paper: str
    figure: str
    words: str
    chapter: str
    record: str
    claim: str
    others: tuple = ()
    premise: str = ""
    tolerance: Optional[float] = None
    departure: str = ""
    short: str = ""

    @property
    def plan(self) -> Optional["Plan"]:
        """The plan of the deciding record, when it is confirmatory for this claim."""
        plan = CONFIRMATORY.get(self.record)
        return plan if plan is not None and plan.claim == self.claim else None

    @property
    def other_claims(self) -> tuple:
        """The ``others`` as ``(record, claim id)`` pairs, a bare record name meaning this row's claim."""
        return tuple((o, self.claim) if isinstance(o, str) else tuple(o) for o in self.others)


_MNIST1D = "MNIST-1D instead of CIFAR-10, a small CNN, budgets of thousands of steps instead of hundreds of thousands"

HEADLINES = (
    Headline("main.fig2.full", MAIN, "Fig. 2 (full batch)",
             "large K \"performs on par with standard training\"; \"comparable generalisation\" (abstract, §4.1)",
             "k_sweeps", "fig2_k_sweep-mnist1d-4000steps-8seeds", "full.large_not_worse",
             others=("fig2_k_sweep-mnist1d-10seeds", "fig2_k_sweep-mnist1d-h100"),
             departure=_MNIST1D + "; at the default budget the large K is still climbing", short="large K on par with K=1, full batch"),
    Headline("main.fig2.mini", MAIN, "Fig. 2 (mini-batch)",
             "the same for SGD runs: \"comparable generalisation\" with infrequent feature updates (§4.1)",
             "k_sweeps", "fig2_k_sweep-mnist1d-4000steps-8seeds", "mini.large_not_worse",
             others=("fig2_k_sweep-mnist1d-10seeds", "fig2_k_sweep-mnist1d-h100"), departure=_MNIST1D, short="large K on par with K=1, mini-batch"),
    Headline("main.fig2.inf", MAIN, "Fig. 2, §4.2",
             "K=∞ (no feature learning) generalises clearly worse: \"feature learning is essential\" (abstract)",
             "k_sweeps", "fig2_k_sweep-mnist1d-4000steps-8seeds", "full.inf_short",
             others=("fig2_k_sweep-mnist1d-10seeds",), departure=_MNIST1D, short="K=∞ clearly worse"),
    Headline("main.fig3", MAIN, "Fig. 3",
             "with augmentation \"final results differ by under 1%\" (82.3% for K=1, 81.4% for K=5e6; §4.1)",
             "augmentation", "fig3_augmentation-mnist1d-10seeds", "large.not_worse",
             others=("fig3_augmentation-mnist1d-24000steps-8seeds", "fig3_augmentation-fashion-h100-5seeds"),
             premise="large.fits", tolerance=0.01,
             departure="MNIST-1D shifts instead of CIFAR-10 flips and crops; the large K does not fit its training "
                       "set in the budget, and given ten times the budget it diverges", short="augmentation: under 1% below K=1"),
    Headline("main.fig4.nobn", MAIN, "Fig. 4 (no batch norm)",
             "\"large K iterative linearisation again achieves similar test performance to SGD\" (Fig. 4)",
             "resnet_and_data", "fig4_resnet-mnist1d-30seeds", "nobn.large_not_worse", premise="nobn.k1_trained",
             departure="a ResNet-18 of width 4 on MNIST-1D for 200 steps instead of CIFAR-10 at paper width", short="ResNet, no batch norm: on par"),
    Headline("main.fig4.bn", MAIN, "Fig. 4 (batch norm)",
             "with batch norm \"far more sensitive due to linearising the normalisation layers\", yet similar "
             "performance at a smaller K (§4.1)",
             "resnet_and_data", "fig4_resnet-mnist1d-30seeds", "bn.large_not_worse", premise="bn.k1_trained",
             departure="the paper does not say how it linearises batch norm; the book recalibrates its statistics", short="ResNet, batch norm: on par"),
    Headline("main.fig5.finite", MAIN, "Fig. 5",
             "\"the rate at which performance improves as the dataset size increases is equivalent for all finite K\" "
             "(Fig. 5)", "resnet_and_data", "fig5_data_scaling-mnist1d-120seeds", "finite_close",
             others=("fig5_data_scaling-mnist1d-25seeds",),
             departure="MNIST-1D subsets of 400 to 4,000 signals; the slope margin is the book's, not the paper's", short="data scaling: finite K like K=1"),
    Headline("main.fig5.inf", MAIN, "Fig. 5",
             "the rate is \"worse for the case where K=∞ and the features are never updated\" (Fig. 5)",
             "resnet_and_data", "fig5_data_scaling-mnist1d-120seeds", "inf_worse",
             others=("fig5_data_scaling-mnist1d-25seeds",), departure="MNIST-1D subsets", short="data scaling: K=∞ worse"),
    Headline("main.fig6.conv1", MAIN, "Fig. 6 (first layer)",
             "linear-probe accuracy of large-K features improves slower \"and levels off at a lower point\" (Fig. 6)",
             "feature_learning", "feature_learning-mnist1d-30seeds", "probe.conv1.lower",
             departure="K=100 against K=1 on MNIST-1D; \"lower\" read as more than the 2-point margin", short="probe, layer 1: large K lower"),
    Headline("main.fig6.conv2", MAIN, "Fig. 6 (second layer)",
             "the same for the second layer's features (Fig. 6)",
             "feature_learning", "feature_learning-mnist1d-30seeds", "probe.conv2.lower",
             departure="K=100 against K=1 on MNIST-1D; \"lower\" read as more than the 2-point margin", short="probe, layer 2: large K lower"),
    Headline("main.fig7", MAIN, "Fig. 7",
             "\"the evolution of the filters for K=1 is much faster\" (Fig. 7)",
             "feature_learning", "feature_learning-mnist1d-30seeds", "filters.faster",
             departure="\"much faster\" has no number in the paper: the book reads it as more than 2x", short="filters: K=1 much faster"),
    Headline("main.2-3", MAIN, "\"2-3 updates\"",
             "\"for full batch runs (Figure 2a) on CIFAR10, after 2-3 feature updates, each run seems to have "
             "approximately caught up with the K=1 baseline\"; \"for SGD (Figure 2b) it takes more feature updates to "
             "converge\" (workshop version, §4)",
             "feature_updates", "feature_updates-mnist1d-16seeds", "full.suffices_u2",
             others=("feature_updates-fashion-256-u2-fresh-100seeds", "feature_updates-fashion-256-mini-u2-fresh-504seeds",
                     "feature_updates-fashion-pool-u2-fresh-512seeds", "feature_updates-fashion-pool-mini-u2-fresh-512seeds",
                     "feature_updates-fashion-256-10seeds",
                     # the two records made to test two updates with mini-batches: their mini-batch claim
                     ("feature_updates-fashion-256-mini-u2-fresh-504seeds", "mini.suffices_u2"),
                     ("feature_updates-fashion-pool-mini-u2-fresh-512seeds", "mini.suffices_u2")),
             departure="the book's budgets are far shorter than the paper's (400 full-batch steps on subsets of 256 or 1,000 "
                       "images), and the networks far smaller", short="2 updates suffice"),
    Headline("main.8-12", MAIN, "\"8-12 updates\"",
             "\"we get enough feature learning in 8-12 feature updates to achieve comparable generalisation\" (§4.1)",
             "feature_updates", "feature_updates-mnist1d-16seeds", "full.suffices_u8",
             others=("feature_updates-fashion-256-lr3e-3-10seeds", "feature_updates-fashion-256-mini-12seeds"),
             departure="MNIST-1D and Fashion-MNIST subsets instead of CIFAR-10", short="8 updates suffice"),
    Headline("main.fig8", MAIN, "Fig. 8",
             "solving each linearisation fully with Adam generalises worse than SGD (61.3% vs 69.4%; §4.3)",
             "adam_solved", "fig8_adam-mnist1d-16seeds", "solved.below_sgd", others=("fig8_adam-fashion-h100-8seeds",),
             premise="phases.solved", departure="MNIST-1D; the paper's K=2e5 becomes a K that solves each phase here", short="solving each linearisation hurts"),
    Headline("main.fig9", MAIN, "Fig. 9",
             "\"improvement of generalisation as damping increases\": the mean test RMSE falls (Fig. 9)",
             "damping", "fig9_damping-quintic-128seeds", "flax.mean.falls",
             others=("fig9_damping-paper-h100", "fig9_damping-quintic-torch-128seeds"),
             departure="the input interval of the quintic is not stated; the book chooses one", short="more damping, lower test error"),
    Headline("arbel.hidden", ARBEL, "§5, Fig. 2",
             "a \"hidden learning phenomenon\": at small initial scale and small step GN recovers features that "
             "generalise (abstract, §5)", "arbel_setting", "arbel_steps-relu-150seeds", "hidden.gn",
             others=("arbel_steps-relu-gn2fullsteps-24seeds", "arbel_steps-relu-gn2fullsteps-fresh-277seeds"),
             departure="M=250 hidden units and N=50 samples instead of M=5000 and N=500", short="hidden feature learning"),
    Headline("arbel.step", ARBEL, "§5, Fig. 2",
             "larger GN step sizes give features that \"do not generalise well\" (Test-LRfit worse; §5)",
             "arbel_setting", "arbel_steps-relu-gn2fullsteps-fresh-277seeds", "gn.step_lrfit",
             others=("arbel_steps-relu-150seeds", "arbel_steps-relu-gn2fullsteps-24seeds"),
             departure="\"not well\" read as at least 0.1 decades (1.26x) of Test-LRfit", short="larger GN steps generalise worse"),
    Headline("arbel.speed", ARBEL, "abstract, Fig. 1",
             "\"GN is consistently faster than GD in finding a global optimum\" (abstract)",
             "arbel_setting", "arbel_steps-relu-150seeds", "speed.gn_faster",
             others=("arbel_steps-relu-gn2fullsteps-24seeds", "arbel_steps-relu-gn2fullsteps-fresh-277seeds"),
             departure="iterations, not time; GD's budget is 4,000 steps (the paper's 1e6), so its count is a lower "
                       "bound, and seeds where neither finishes count against the claim", short="GN faster than GD"),
    Headline("arbel.init", ARBEL, "§5, Fig. 1",
             "features are learned at a small initial scale: GN beats random features at τ0 = 1e-3 (Fig. 1 left)",
             "arbel_setting", "arbel_init-48seeds", "init.small_gn_beats_rf",
             departure="M=250, N=50; 0.1 decades as the smallest effect that counts", short="features learned at small init"),
    Headline("arbel.sigma", ARBEL, "§5, Fig. 4",
             "σ_min(JJᵀ) increases during training, most at small initial scale (Fig. 4 right)",
             "arbel_setting", "arbel_init-48seeds", "init.sigma_grows", departure="M=250, N=50", short="σ_min grows in training"),
    Headline("arbel.mnist", ARBEL, "App. C (images)",
             "on image data too, larger GN steps give features that generalise worse (App. C)",
             "arbel_ablations", "arbel_mnist-digits-48seeds", "mnist.gn_step_lrfit",
             others=("arbel_mnist-fashion-24seeds",), departure="scikit-learn's digits instead of MNIST", short="images: larger steps worse"),
    Headline("ortiz.decay", ORTIZ, "Figs. 2-3, §3.2",
             "accuracy on the NTK's eigenfunctions decays with the eigenvalue index, for every model (§3.2)",
             "ntk_eigenfunctions", "ortiz_eigenfunctions-mnist1d-28seeds", "decay.mlp.sgd.network",
             departure="MNIST-1D with 1,000 + 1,000 points instead of MNIST and CIFAR-10", short="eigenfunction accuracy decays"),
    Headline("ortiz.linear_advantage", ORTIZ, "Figs. 2-3, §3.2",
             "linearised models are \"clearly\" ahead of their networks on the eigenfunctions (§3.2)",
             "ntk_eigenfunctions", "ortiz_eigenfunctions-mnist1d-mlp-sgd-fresh-3492seeds", "linear_advantage.mlp.sgd",
             others=("ortiz_eigenfunctions-mnist1d-28seeds",),
             departure="\"clearly\" read as more than the book's 2-point margin; an MLP on MNIST-1D", short="linear models clearly ahead"),
    Headline("ortiz.network", ORTIZ, "§3.2",
             "on the dataset's own labels networks \"perform significantly better than their linear "
             "approximations\" (§3.2)", "ntk_eigenfunctions", "ortiz_eigenfunctions-mnist1d-28seeds", "labels.lenet.sgd",
             departure="a LeNet on MNIST-1D", short="networks ahead on real labels"),
    Headline("ortiz.concentration", ORTIZ, "Table 1",
             "training concentrates the labels' energy on the NTK's top eigenfunctions (Table 1)",
             "energy_concentration", "ortiz_concentration-mnist1d-30seeds", "concentrates.mlp",
             departure="MNIST-1D; the top 50 eigenfunctions of a 500-point kernel", short="energy concentrates"),
)


class Finding(NamedTuple):
    """A :class:`Headline` judged: ``verdict`` on its deciding record, the ``others`` as
    ``(record, claim id, verdict)`` (``None`` where the record lacks the claim; a text saying how
    far it has come for a confirmatory record still being made), ``sensitivity`` as
    ``(margin, verdict)`` pairs, ``premise`` the premise's verdict (``""`` when there is none),
    ``setting`` the deciding record's setting (:func:`setting`)."""

    headline: Headline
    verdict: V.Verdict
    others: tuple
    sensitivity: tuple
    premise: str
    setting: str


def _open(name: str):
    recs = runner.open_records(name)
    if len(recs) == 1:
        return recs[0]
    if recs[0].experiment.startswith("arbel"):
        from .experiments.arbel import _arbel

        return _arbel.pool_lr_sweeps(recs)
    from .experiments.main import _rows

    return _rows.pool_seeds(recs)


def _in_progress(name: str) -> str:
    """For a confirmatory record made in parts whose planned seeds are not all in: how far it has
    come (nothing else of it is opened: a look at part of it would be a look at the data that
    judges). ``""`` for any other record."""
    plan = CONFIRMATORY.get(name)
    if plan is None or plan.seeds is None:
        return ""
    progress = runner.seed_progress([p.meta["resolved"] for p in runner.open_records(name)], plan.seeds)
    return "" if progress.complete else f"in progress, not read yet ({progress.made:,} of {len(plan.seeds):,} planned seeds)"


def _judged(name: str, cache: dict) -> V.Verdicts:
    return _opened(name, cache)[1]


def _opened(name: str, cache: dict) -> tuple:
    """``(record, its claims judged as one family)``, cached by name."""
    if name not in cache:
        rec = _open(name)
        cache[name] = (rec, render.judge(rec))
    return cache[name]


def judge_headline(h: Headline, cache: Optional[dict] = None, *,
                   margin_factors: Sequence[float] = (0.5, 2.0)) -> Finding:
    """One headline claim judged on its records (``cache``: judged records by name, shared
    between calls), with its verdict at ``margin_factors`` times its margin (at the paper's own
    tolerance instead, where it states one)."""
    if not margin_factors or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                                     for x in margin_factors):
        raise ValueError(f"margin_factors must be a non-empty list of finite numbers >= 0, got {margin_factors!r}.")
    cache = {} if cache is None else cache
    judged = _judged(h.record, cache)
    if h.claim not in judged.ids:
        raise KeyError(f"finding {h.key!r}: record {h.record!r} has no claim {h.claim!r}; its claims: "
                       f"{', '.join(judged.ids)}.")
    v = judged[h.claim]
    if h.plan is not None:
        v = v.judged_at(V.LEVEL)  # the planned test, alone
    others = []
    for name, claim in h.other_claims:
        waiting = _in_progress(name)
        if waiting:
            others.append((name, claim, waiting))
            continue
        o = _judged(name, cache)
        ov = o[claim] if claim in o.ids else None
        plan = CONFIRMATORY.get(name)
        if ov is not None and plan is not None and plan.claim == claim:
            ov = ov.judged_at(V.LEVEL)  # the planned test, alone
        others.append((name, claim, ov))
    margins = [h.tolerance] if h.tolerance is not None else [f * (v.margin or 0.0) for f in margin_factors]
    sens = tuple(V.margin_sensitivity(v, margins)) if v.tested and (v.margin or h.tolerance is not None) else ()
    premise = judged[h.premise].verdict if h.premise else ""
    return Finding(h, v, tuple(others), sens, premise, setting(_opened(h.record, cache)[0]))


def findings(headlines: Sequence[Headline] = HEADLINES, *, margin_factors: Sequence[float] = (0.5, 2.0),
             cached: bool = False) -> list:
    """Every headline claim judged (:func:`judge_headline`), in order. ``cached``: kept in the
    results folder (:func:`itlin.book.store.results_dir`) under a digest of everything they
    are computed from (:func:`_cache_key`), and read from there while none of it changes."""
    if cached:
        return _cached(headlines, margin_factors)
    cache: dict = {}
    return [judge_headline(h, cache, margin_factors=margin_factors) for h in headlines]


def _cache_key(headlines: Sequence[Headline], margin_factors: Sequence[float]) -> str:
    """A sha256 of what the findings are computed from: the headlines and margin factors, every
    source file of the itlin package, the versions of Python, NumPy and SciPy, and every file of
    the records the headlines name (a record joined or rewritten, or any code changed, gives
    another key)."""
    import hashlib
    import platform
    from pathlib import Path

    import numpy
    import scipy

    h = hashlib.sha256(repr((tuple(headlines), tuple(margin_factors), platform.python_version(), numpy.__version__,
                             scipy.__version__)).encode())
    package, recorded = Path(__file__).resolve().parents[1], runner.recorded_dir()
    names = sorted({n for hl in headlines for n in (hl.record, *(o for o, _ in hl.other_claims))})
    files = [(package, f) for f in sorted(package.rglob("*.py"))] + [
        (recorded, f) for n in names for f in sorted((recorded / n).rglob("*")) if f.is_file()]
    for base, f in files:
        h.update(f.relative_to(base).as_posix().encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _cached(headlines: Sequence[Headline], margin_factors: Sequence[float]) -> list:
    import pickle

    from .store import results_dir

    path = results_dir() / "findings" / f"{_cache_key(headlines, margin_factors)}.pickle"
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass  # not there yet (or unreadable): judged again below
    found = findings(headlines, margin_factors=margin_factors)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = path.with_name(path.name + ".new")
        new.write_bytes(pickle.dumps(found))
        new.replace(path)
    except OSError:
        pass  # a read-only results folder: judged every time
    return found


# ------------------------------------------------------------------------------ rendering
_WORD = {V.HOLDS: "holds", V.FAILS: "does not hold", V.UNRESOLVED: "cannot resolve"}


def gap_against_margin(v: V.Verdict) -> str:
    """``"+6.1 ± 2.4 points vs margin 2.0 (non-inferiority)"``: the gap, its interval at the
    verdict's level and the threshold it is judged against."""
    if not v.tested:
        return v.measured or "—"
    digits = v.digits
    while math.isfinite(v.half) and 0 < v.scale * v.half < 10 ** -digits and digits < 4:
        digits += 1  # an interval that would print as "± 0.0"
    v = replace(v, digits=digits)
    margin = f"{v.scale * (v.margin or 0.0):.{v.digits}f}"
    return f"{v.gap_text()} vs margin {margin} ({V.RULE_WORDS[v.rule].split(' (')[0]})"


def sensitivity_text(f: Finding) -> str:
    """The verdict at half and twice the margin, or at the paper's own tolerance."""
    if not f.sensitivity:
        return "— (no margin to vary)" if f.verdict.tested else "— (not a test)"
    v = f.verdict
    if f.headline.tolerance is not None:
        (m, r), = f.sensitivity
        unit = v.unit[:-1] if v.scale * m == 1 and v.unit.endswith("s") else v.unit
        return f"{_WORD[r]} at the paper's {v.scale * m:g} {unit}".rstrip()
    base = v.margin or 0.0
    return "; ".join(f"{_WORD[r]} at {m / base:g}x ({v.scale * m:.{v.digits}f})" for m, r in f.sensitivity)


def setting(rec) -> str:
    """A record's setting, from its resolved parameters: data, training size, budget and seeds."""
    r, name = rec.meta["resolved"], rec.experiment
    data = {"mnist1d": "MNIST-1D", "fashion_mnist": "Fashion-MNIST", "digits": "digits", "cifar10": "CIFAR-10"}
    parts = []
    if r.get("dataset"):
        parts.append(data.get(r["dataset"], r["dataset"]))
    elif name.startswith("arbel"):
        parts.append("teacher-student")
    elif name.startswith("fig9"):
        parts.append("quintic")
    if r.get("n_train"):
        parts.append(f"{int(r['n_train']):,} training examples")
    if r.get("steps"):
        parts.append(f"{int(r['steps']):,} steps")
    elif r.get("epochs"):
        parts.append(f"{int(r['epochs'])} epochs")
    elif r.get("gn_steps"):
        parts.append(f"{int(r['gn_steps']):,} GN steps")
    parts.append(f"{int(r['seeds']):,} seeds")
    return ", ".join(parts)


def row(f: Finding) -> dict:
    """One row of the Findings table."""
    h, v = f.headline, f.verdict

    def other(n, claim, o):
        where = f"`{n}`" + (f" (`{claim}`)" if claim != h.claim else "")
        if isinstance(o, str):
            return f"{where}: {o}"
        return (f"{where}: {_WORD[o.verdict] if o is not None else 'not judged'}"
                + (f" ({o.gap_text()})" if o is not None and o.tested else "")
                + (f" [{kind_of_test(n, claim)}]" if n in CONFIRMATORY else ""))

    others = "; ".join(other(*o) for o in f.others)
    return {"claim (paper's words)": f"**{h.paper}, {h.figure}**: {h.words}",
            "our setting": f"{f.setting}; {v.measured}" if v.measured else f.setting,
            "verdict": f"**{_WORD[v.verdict]}**",
            "gap vs margin": gap_against_margin(v),
            "at other margins": sensitivity_text(f),
            "premise": _WORD[f.premise] if f.premise else "—",
            "test": kind_of_test(h.record, h.claim),
            "other records": others or "—",
            "could flip it": h.departure or "—",
            "chapter": f"{{doc}}`{h.chapter}` (`{h.claim}`)"}


VERDICT_COLUMNS = ("claim (paper's words)", "verdict", "gap vs margin", "at other margins", "premise", "test", "chapter")
CONTEXT_COLUMNS = ("claim", "our setting", "other records", "could flip it")


def table(found: Sequence[Finding]) -> str:
    """The Findings table in Markdown (MyST roles for the chapter links): each claim's verdict,
    gap, sensitivity, premise, kind of test and chapter (:data:`VERDICT_COLUMNS`)."""
    return render.table([row(f) for f in found], VERDICT_COLUMNS)


def context_table(found: Sequence[Finding]) -> str:
    """The second table: for each claim, our setting, the other records judged on it and the
    departure from the paper that could flip it (:data:`CONTEXT_COLUMNS`)."""
    return render.table([{**row(f), "claim": f"{f.headline.figure}: {f.headline.short}"} for f in found],
                        CONTEXT_COLUMNS)


def plain_table(found: Sequence[Finding]) -> str:
    """A short table for the README: paper, figure, verdict, gap (no MyST roles)."""
    return render.table([{"paper": f.headline.paper, "claim": f"{f.headline.figure}: {f.headline.short}",
                          "verdict": _WORD[f.verdict.verdict], "gap vs margin": gap_against_margin(f.verdict)}
                         for f in found])


def counts(found: Sequence[Finding], paper: Optional[str] = None) -> dict:
    """``{HOLDS: n, FAILS: n, UNRESOLVED: n}`` over the findings (of one paper)."""
    sel = [f for f in found if paper is None or f.headline.paper == paper]
    return {r: sum(f.verdict.verdict == r for f in sel) for r in (V.HOLDS, V.FAILS, V.UNRESOLVED)}


def synthesis(found: Sequence[Finding], paper: str) -> str:
    """A short paragraph for one paper, from its verdicts: how many headline claims hold, and
    which do not hold or cannot resolve."""
    sel = [f for f in found if f.headline.paper == paper]
    if not sel:
        raise ValueError(f"no finding of {paper!r}; papers: {', '.join(PAPERS)}.")
    c = counts(sel)
    name = lambda f: f"{f.headline.figure}, {f.headline.short} ({f.verdict.gap_text() or f.verdict.measured})"
    text = (f"Of the {len(sel)} headline claims of {paper} judged here, {c[V.HOLDS]} hold, "
            f"{c[V.FAILS]} do not hold and {c[V.UNRESOLVED]} cannot be resolved at the book's scale.")
    fails = [name(f) for f in sel if f.verdict.verdict == V.FAILS]
    open_ = [name(f) for f in sel if f.verdict.verdict == V.UNRESOLVED]
    if fails:
        text += " Not holding: " + "; ".join(fails) + "."
    if open_:
        text += " Not resolved: " + "; ".join(open_) + "."
    return text


def forest(found: Sequence[Finding], ax_margin=None, ax_sign=None):
    """Every headline gap as a forest plot: claims with a margin in units of that margin (the
    decision lines at -1, 0 and 1) on ``ax_margin``; claims judged at a zero margin (a sign)
    in units of their own interval's half-width on ``ax_sign`` (the interval clears zero when
    it ends beyond ±1). Returns the figure."""
    import matplotlib.pyplot as plt

    from .plotting import COLUMN_WIDTH

    tested = [f for f in found if f.verdict.tested and math.isfinite(f.verdict.gap.mean)]
    with_m = [f for f in tested if (f.verdict.margin or 0) > 0]
    sign = [f for f in tested if not (f.verdict.margin or 0) > 0]
    if ax_margin is None or ax_sign is None:
        fig, (ax_margin, ax_sign) = plt.subplots(
            2, 1, figsize=(COLUMN_WIDTH, 0.3 * (len(with_m) + len(sign)) + 2.2),
            gridspec_kw={"height_ratios": [max(len(with_m), 1), max(len(sign), 1)]})
    colour = {V.HOLDS: "tab:green", V.FAILS: "tab:red", V.UNRESOLVED: "tab:gray"}
    for ax, rows, unit in ((ax_margin, with_m, "gap / margin"), (ax_sign, sign, "gap / interval half-width")):
        for i, f in enumerate(rows):
            v = f.verdict
            scale = v.margin if unit == "gap / margin" else (v.half if math.isfinite(v.half) and v.half > 0 else 1.0)
            m, h = v.gap.mean / scale, (v.half / scale if math.isfinite(v.half) else math.nan)
            y = len(rows) - 1 - i
            ax.errorbar([m], [y], xerr=[[h], [h]] if math.isfinite(h) else None, fmt="o", ms=3,
                        color=colour[v.verdict], capsize=2)
        ax.set_yticks(range(len(rows)), [f"{f.headline.short} [{f.headline.paper.split()[0]}]" for f in rows][::-1])
        lines = (-1, 0, 1)
        for x in lines:
            ax.axvline(x, color="k", lw=0.6 if x == 0 else 0.4, ls="-" if x == 0 else "--")
        ax.set_xlabel(unit)
        ax.set_xscale("symlog", linthresh=2)
        lo, hi = ax.get_xlim()
        ticks = [t for t in (-20, -10, -5, -2, -1, 0, 1, 2, 5, 10, 20, 50) if lo <= t <= hi]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    ax_margin.set_title("claims judged against a margin")
    ax_sign.set_title("claims judged on the sign of a gap")
    fig = ax_margin.figure
    fig.tight_layout()
    return fig


def _number(x) -> Optional[float]:
    """A float for JSON: ``None`` where it is missing or not finite."""
    return float(x) if x is not None and math.isfinite(float(x)) else None


def as_json(found: Sequence[Finding]) -> list:
    """The findings as plain data (``json.dumps`` writes it): per row its ``id`` (the headline's
    key), ``record`` and ``claim``, the ``verdict``, the ``gap`` (its mean, in the claim's own
    units: a fraction for accuracies), the interval's ``half_width`` at the ``level`` it was
    judged at (Holm's, or 95% for a confirmatory record's planned claim), the ``rule`` and
    ``margin``, ``scale`` and ``unit`` (``scale * gap`` is what the tables print), and
    ``at_margins``: the verdict at margin 0, at the margin and at the other margins the table
    shows, keyed by the margin. A row that is not a test has ``gap`` and ``half_width`` ``None``."""
    out = []
    for f in found:
        v, h = f.verdict, f.headline
        margins = sorted({0.0, float(v.margin or 0.0), *(float(m) for m, _ in f.sensitivity)}) if v.tested else []
        out.append({"id": h.key, "record": h.record, "claim": h.claim, "verdict": v.verdict,
                    "gap": _number(v.mean), "half_width": _number(v.half), "level": v.level, "rule": v.rule,
                    "margin": v.margin, "scale": v.scale, "unit": v.unit,
                    "at_margins": {repr(m): r for m, r in V.margin_sensitivity(v, margins)}})
    return out


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m itlin.book.findings",
                                description="Judge every headline claim on its recorded run and print the table.")
    p.add_argument("--full", action="store_true", help="every column (with MyST roles), not the README's short table")
    p.add_argument("--json", action="store_true", help="every row as JSON (as_json), nothing else")
    a = p.parse_args(argv)
    found = findings(cached=True)
    if a.json:
        import json

        print(json.dumps(as_json(found), indent=1, ensure_ascii=False, allow_nan=False))
        return 0
    print(table(found) if a.full else plain_table(found))
    c = counts(found)
    print(f"\n{len(found)} headline claims: {c[V.HOLDS]} hold, {c[V.FAILS]} do not hold, "
          f"{c[V.UNRESOLVED]} cannot resolve.")
    return 0


__all__ = ["ARBEL", "Finding", "HEADLINES", "Headline", "MAIN", "ORTIZ", "PAPERS", "as_json", "counts", "findings", "forest",
           "context_table", "gap_against_margin", "judge_headline", "plain_table", "row", "sensitivity_text", "setting", "synthesis",
           "table"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
