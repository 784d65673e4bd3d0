"""Beyond the papers (issue 17): adaptive relinearisation schedules against a fixed period K.

The main paper relinearises every ``K`` steps and leaves adaptive schedules to future work. The
library has two: :func:`itlin.loss_drift` (relinearise when the linearised and the true loss on
the batch part by more than ``rtol``) and :func:`itlin.kernel_drift` (when the empirical NTK on
a probe batch has moved by more than ``threshold``). This experiment asks, on the headline task
(the LeNet-1D on MNIST-1D of :mod:`~itlin.book.experiments.main.fig2_k_sweep`, full batch):

1. **the frontier**: final test accuracy of the model being trained against the number of
   feature updates, for a grid of fixed ``K`` and a grid of each schedule's tolerance, over
   seeds; at a matched number of feature updates (the fixed-``K`` curve of the same seed
   interpolated in ``log(1 + updates)``), is an adaptive schedule more accurate?
2. **where the updates fall and what the checks cost**: each run's relinearisation steps, the
   kernel movement over each phase (one seed), and the compute of the checks (XLA's flop count
   of a loss check, a probe kernel, a training step and a relinearisation);
3. **stability**: plain gradient descent at a learning rate where a fixed large ``K`` diverges
   (found by a short search), and whether the drift-triggered schedules complete there.

Compile time dominates small CPU runs, and a trainer compiles once per schedule object. So the
schedule here keeps its family and tolerance (or period) in the **schedule's state** instead of
a Python closure (:func:`schedule_in_state`): one compiled program serves every run. Each
family is :class:`itlin.Every`, :func:`itlin.loss_drift` or :func:`itlin.kernel_drift`
otherwise (the tests check they relinearise at the same steps), plus one rule shared by every
schedule of the book: no relinearisation after the last step (see
:func:`itlin.book.experiments.main._sparse.schedule`). The learning rate and momentum live in the
optimiser's state too (``optax.inject_hyperparams``), so the stability runs reuse the same
program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from .. import Experiment, Period, param, register
from . import _sparse as S

NAME = "adaptive_schedules"

SCALES = {
    "tiny": {"n_train": 128, "n_test": 100, "n_eval_train": 128, "channels": 4, "steps": 20, "eval_every": 20,
             "Ks": (5, 10, math.inf), "loss_rtols": (0.1,), "kernel_thresholds": (0.3,), "seeds": 2,
             "learning_rate": 0.02, "momentum": 0.9, "stable_lrs": (30.0,), "stable_K": 10, "probe_size": 4},
    # a CPU budget of about 3 minutes for the whole chapter: 384 training signals, 8 channels,
    # 150 full-batch steps, 5 seeds; every run shares one of three compiled programs
    "default": {"n_train": 384, "n_test": 1000, "n_eval_train": 384, "channels": 8, "steps": 150,
                "eval_every": 150, "Ks": (5, 10, 25, 50, math.inf), "loss_rtols": (0.03, 0.1),
                "kernel_thresholds": (0.3, 0.6), "seeds": 5, "learning_rate": 0.02, "momentum": 0.9,
                "stable_lrs": (0.4, 0.8, 1.6), "stable_K": 50, "probe_size": 8},
    # the paper's Fig. 2 sizes (full batch, 50 channels, lr 1e-3, plain GD) and a K grid up to its
    # largest periods; the paper has no adaptive schedules, so their grids are ours
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50, "steps": 100_000,
              "eval_every": 5_000, "Ks": (100, 1_000, 5_000, 20_000, 50_000, math.inf),
              "loss_rtols": (0.01, 0.03, 0.1, 0.3), "kernel_thresholds": (0.1, 0.3, 0.6), "seeds": 5,
              "learning_rate": 1e-3, "momentum": 0.0, "stable_lrs": (3e-3, 1e-2, 3e-2), "stable_K": 10_000,
              "probe_size": 32},
}

FAMILIES = ("fixed", "loss", "kernel")


@dataclass(frozen=True)
class AdaptiveParams(S.SparseParams):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "fixed periods K of the frontier (inf allowed); None: from "
                                                   "scale")
    loss_rtols: Optional[tuple[float, ...]] = param(None, "loss_drift tolerances rtol; None: from scale", gt=0)
    kernel_thresholds: Optional[tuple[float, ...]] = param(None, "kernel_drift thresholds; None: from scale",
                                                           gt=0)
    loss_check_every: int = param(5, "steps between loss-drift checks (each: one forward pass)", min=1)
    kernel_check_every: int = param(10, "steps between kernel-drift checks (each: one probe kernel)", min=1)
    probe_size: Optional[int] = param(None, "probe inputs of kernel_drift (the first training signals); None: "
                                            "from scale", min=1)
    steps: Optional[int] = param(None, "full-batch steps of every run; None: from scale", min=2)
    learning_rate: Optional[float] = param(None, "learning rate of the frontier runs; None: from scale", gt=0)
    momentum: Optional[float] = param(None, "heavy-ball momentum of the frontier runs; None: from scale", min=0,
                                      max=0.999)
    stable_lrs: Optional[tuple[float, ...]] = param(None, "stability: candidate learning rates (plain gradient "
                                                          "descent), tried in increasing order; None: from scale",
                                                    gt=0)
    stable_K: Optional[Period] = param(None, "stability: the fixed period expected to diverge; None: from scale")
    stable_rtol: float = param(0.1, "stability: loss_drift tolerance", gt=0)
    stable_threshold: float = param(0.3, "stability: kernel_drift threshold", gt=0)

    def check(self):
        r = self.resolved()
        if r["eval_every"] > r["steps"]:
            raise ValueError(f"eval_every={r['eval_every']} is more than steps={r['steps']}")
        finite = [K for K in r["Ks"] if math.isfinite(K)]
        if len(set(r["Ks"])) != len(r["Ks"]):
            raise ValueError(f"Ks has repeated values: {r['Ks']}")
        if len(r["Ks"]) < 2:
            raise ValueError(f"Ks needs at least two periods to draw a frontier, got {r['Ks']}")
        if any(K >= r["steps"] for K in finite):
            raise ValueError(f"every finite K must be below steps={r['steps']} (else it never relinearises: use "
                             f"inf), got Ks={r['Ks']}")
        if math.isfinite(r["stable_K"]) and r["stable_K"] >= r["steps"]:
            raise ValueError(f"stable_K={r['stable_K']} must be below steps={r['steps']}")
        if r["probe_size"] > r["n_train"]:
            raise ValueError(f"probe_size={r['probe_size']} is more than n_train={r['n_train']}")


# ------------------------------------------------------------------------------ the schedules
MODES = {"fixed": 0, "loss": 1, "kernel": 2}


def schedule_in_state(f, probe, *, loss_check_every: int, kernel_check_every: int, steps: int):
    """One :class:`itlin.Schedule` for the three families, chosen by its state
    ``(mode, value, anchor kernel)`` (set by :func:`start`), so that every run of the chapter
    shares one compiled program:

    * ``mode 0``, a fixed period ``K = value``: after steps ``K, 2K, ...``
      (:class:`itlin.Every`; ``value = inf`` never);
    * ``mode 1``, :func:`itlin.loss_drift` ``(rtol=value, check_every=loss_check_every)``;
    * ``mode 2``, :func:`itlin.kernel_drift` ``(threshold=value, probe, kernel_check_every)``,
      with the probe kernel of the network ``f`` (compiled) at the start.

    Never after step ``steps`` (see :func:`itlin.book.experiments.main._sparse.schedule`). The
    trainer asks for the network's loss every ``loss_check_every`` steps whatever the mode
    (``wants_true_loss`` sees only the step): runs of the other modes compute it and ignore it,
    and :func:`run_cost` does not charge them for it. The default state never relinearises."""
    import jax
    import jax.numpy as jnp

    from ....core.linearise import kernel_distance, ntk
    from ....core.schedules import Schedule

    probe = jnp.asarray(probe)
    kernel = lambda g, params: ntk(g, params, probe, trace=True)
    anchor_kernel = jax.jit(lambda params: kernel(f, params))

    def init(g, params):
        return jnp.asarray(MODES["fixed"], jnp.int32), jnp.asarray(jnp.inf, jnp.float32), anchor_kernel(params)

    def update(state, info):
        mode, value, k_anchor = state
        fixed = info.since.astype(jnp.float32) >= value
        drift = jnp.abs(info.lin_loss - info.true_loss) > value * jnp.abs(info.true_loss)
        drift = jnp.where(jnp.isnan(info.true_loss), False, drift)
        check = jnp.logical_and(mode == MODES["kernel"], info.step % kernel_check_every == 0)
        k_now = jax.lax.cond(check, lambda: kernel(info.f, info.params), lambda: k_anchor)
        moved = jnp.logical_and(check, kernel_distance(k_now, k_anchor) > value)
        relin = jnp.select([mode == MODES["fixed"], mode == MODES["loss"]], [fixed, drift], moved)
        relin = jnp.logical_and(relin, info.step < steps)
        return relin, (mode, value, jnp.where(jnp.logical_and(relin, check), k_now, k_anchor))

    return Schedule(init, update, lambda step: step % loss_check_every == 0, "fixed K, loss or kernel drift",
                    ("schedule_in_state", int(loss_check_every), int(kernel_check_every), int(steps),
                     tuple(probe.shape)))


def optimizer():
    """SGD whose learning rate and momentum live in its state (``momentum=0`` is plain gradient
    descent: the trace is then the gradient itself); set them with :func:`start`."""
    import optax

    return optax.inject_hyperparams(optax.sgd)(learning_rate=0.0, momentum=0.0)


def start(trainer, params, model_state, family: str, value, learning_rate: float, momentum: float):
    """``trainer.init`` with the schedule's tolerance (or period) ``value`` and the optimiser's
    learning rate and momentum written into the state."""
    import jax.numpy as jnp

    if family not in MODES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    st = trainer.init(params, model_state)
    sched = (jnp.asarray(MODES[family], jnp.int32), jnp.asarray(float(value), jnp.float32), st.schedule[2])
    opt = st.opt_state
    hp = dict(opt.hyperparams)
    hp["learning_rate"] = jnp.asarray(learning_rate, hp["learning_rate"].dtype)
    hp["momentum"] = jnp.asarray(momentum, hp["momentum"].dtype)
    return st._replace(schedule=sched, opt_state=opt._replace(hyperparams=hp))


def value_label(family: str, value) -> str:
    """``K=25``, ``loss rtol=0.1``, ``kernel thr=0.3``."""
    if family == "fixed":
        return S.K_label(value)
    return f"loss rtol={float(value):g}" if family == "loss" else f"kernel thr={float(value):g}"


def tag(group: str, family: str, value, lr: Optional[float] = None) -> str:
    """``"frontier loss rtol=0.1"``, ``"stable K=50 lr=0.1"``."""
    return f"{group} {value_label(family, value)}" + (f" lr={lr:g}" if lr is not None else "")


# ------------------------------------------------------------------------------ compute
def cost_flops(setup, probe) -> dict:
    """XLA's flop counts (``jax.jit(...).lower(...).cost_analysis()``: traced, not compiled, and
    machine independent) of one full-batch step of the linearised model with a stored
    linearisation, one relinearisation (linearising on the training set), one loss check (a
    forward pass of the network on the training set) and one kernel check (the probe's
    empirical NTK). The step is counted on a trainer without checks (``K = inf``)."""
    import jax

    from ....core.linearise import ntk
    from ....core.train import iterative_linearisation

    flops = lambda lowered: float(lowered.cost_analysis()["flops"])
    plain = iterative_linearisation(setup.model, optimizer(), "inf")
    st = plain.init(setup.params, setup.model_state)
    lin_fn = jax.jit(lambda s: plain.linearise(s, setup.x))
    lin = jax.eval_shape(lin_fn, st)  # shapes only: nothing is compiled or run
    f = setup.model.bind(setup.model_state)
    return {
        "step": flops(jax.jit(lambda s, l: plain.step(s, setup.x, setup.y, None, l)).lower(st, lin)),
        "relinearise": flops(lin_fn.lower(st)),
        "loss_check": flops(jax.jit(lambda p: f(p, setup.x)).lower(setup.params)),
        "kernel_check": flops(jax.jit(lambda p: ntk(f, p, probe, trace=True)).lower(setup.params)),
    }


def checks_of(family: str, steps: int, r: Mapping) -> int:
    """Checks a run makes: a loss check every ``loss_check_every`` steps; a probe kernel every
    ``kernel_check_every`` steps plus the anchor's at the start."""
    if family == "loss":
        return int(steps) // int(r["loss_check_every"])
    if family == "kernel":
        return int(steps) // int(r["kernel_check_every"]) + 1
    return 0


def run_cost(family: str, steps: int, updates: int, r: Mapping, flops: Mapping) -> dict:
    """A run's compute in flops: training steps, relinearisations and checks."""
    checks = checks_of(family, steps, r)
    per_check = {"loss": flops["loss_check"], "kernel": flops["kernel_check"]}.get(family, 0.0)
    train = steps * flops["step"] + updates * flops["relinearise"]
    return {"train": float(train), "checks": float(checks * per_check), "total": float(train + checks * per_check),
            "n_checks": checks}


# ------------------------------------------------------------------------------ run
def _kernel_movement(trainer, setup, probe, family, value, r, lr, mom, steps):
    """One seed's run again, without evaluations, recording after every ``kernel_check_every``
    steps and every relinearisation: the probe kernel's distance from the current anchor's and
    from the initial one, and the distance moved over each phase (anchor to anchor)."""
    import jax

    from ....core.linearise import kernel_distance, ntk
    from ....core.loop import fit

    f = setup.model.bind(setup.model_state)
    kern = jax.jit(lambda p: ntk(f, p, probe, trace=True))
    k0 = kern(setup.params)
    rec = {"step": [], "from_anchor": [], "from_init": []}
    anchor = {"k": k0, "step": 0}
    phases = {"end": [], "moved": []}

    def callback(st, hist):
        k = kern(st.params)
        step = int(st.step)
        if int(st.last) == step and step > 0 and step != anchor["step"]:  # relinearised: a phase ended here
            phases["end"].append(step)
            phases["moved"].append(float(kernel_distance(k, anchor["k"])))
            anchor.update(k=k, step=step)
        rec["step"].append(step)
        rec["from_anchor"].append(float(kernel_distance(k, anchor["k"])))
        rec["from_init"].append(float(kernel_distance(k, k0)))

    st = start(trainer, setup.params, setup.model_state, family, value, lr, mom)
    res = fit(trainer, st, setup.x, setup.y, steps, eval_sets={}, eval_every=int(r["kernel_check_every"]),
              callback=callback, blowup=float(r["blowup"]))
    return {"step": np.asarray(rec["step"], np.int64), "from_anchor": np.asarray(rec["from_anchor"]),
            "from_init": np.asarray(rec["from_init"]), "phase_end": np.asarray(phases["end"], np.int64),
            "phase_moved": np.asarray(phases["moved"]), "relin_steps": np.asarray(res.history.relin_steps, np.int64),
            "status": res.history.describe()}


def run(p, ctx):
    from ....core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    setup = S.prepare(r)
    ds, model = setup.ds, setup.model
    steps = int(r["steps"])
    probe = setup.x[: int(r["probe_size"])]
    f0 = model.bind(setup.model_state)
    opt = optimizer()
    trainer = iterative_linearisation(model, opt, schedule_in_state(
        f0, probe, loss_check_every=int(r["loss_check_every"]), kernel_check_every=int(r["kernel_check_every"]),
        steps=steps))
    trainers = {fam: trainer for fam in FAMILIES}
    runs = {}
    seeds = S.seed_list(r)
    inits = {s: ((setup.params, setup.model_state) if s == int(r["seed"]) else S.init_params(model, setup.x, s))
             for s in seeds}

    def train(group, family, value, lr, mom, seed_list, lr_in_tag=False):
        statuses = []
        for s in seed_list:
            name = S.seed_tag(tag(group, family, value, lr if lr_in_tag else None), s)
            tr = trainers[family]
            st = start(tr, *inits[s], family, value, lr, mom)
            res = ctx.fit(name, tr, st, setup.x, setup.y, steps, eval_sets=setup.evals,
                          eval_every=int(r["eval_every"]), seed=s, blowup=float(r["blowup"]))
            runs[name] = {"group": group, "family": family, "value": value, "learning_rate": lr, "momentum": mom,
                          "seed": s}
            statuses.append(res.history.describe())
        return statuses

    lr, mom = float(r["learning_rate"]), float(r["momentum"])
    # 1. the frontier
    for K in r["Ks"]:
        train("frontier", "fixed", K, lr, mom, seeds)
    for v in r["loss_rtols"]:
        train("frontier", "loss", v, lr, mom, seeds)
    for v in r["kernel_thresholds"]:
        train("frontier", "kernel", v, lr, mom, seeds)

    # 3. stability: the smallest candidate learning rate at which fixed stable_K diverges (first seed)
    chosen = None
    for cand in sorted(r["stable_lrs"]):
        status = train("search", "fixed", r["stable_K"], cand, 0.0, seeds[:1], lr_in_tag=True)[0]
        if status != "completed":
            chosen = float(cand)
            break
    if chosen is not None:
        # is the learning rate too large for the network itself? gradient descent (K=1), first seed
        train("control", "fixed", 1, chosen, 0.0, seeds[:1], lr_in_tag=True)
        train("stable", "fixed", r["stable_K"], chosen, 0.0, seeds, lr_in_tag=True)
        train("stable", "loss", r["stable_rtol"], chosen, 0.0, seeds, lr_in_tag=True)
        train("stable", "kernel", r["stable_threshold"], chosen, 0.0, seeds, lr_in_tag=True)

    # 2. kernel movement over the phases, first seed: a middle fixed K and the middle tolerances
    mid = lambda xs: sorted(xs)[len(xs) // 2]
    finite = [K for K in r["Ks"] if math.isfinite(K)] or [r["Ks"][0]]
    picks = {"fixed": mid(finite), "loss": mid(r["loss_rtols"]), "kernel": mid(r["kernel_thresholds"])}
    movement = {fam: ctx.stage(f"movement {fam}", lambda fam=fam: _kernel_movement(
        trainers[fam], setup, probe, fam, picks[fam], r, lr, mom, steps)) for fam in FAMILIES}
    flops = ctx.stage("flops", lambda: cost_flops(setup, probe))

    resolved = {k: r[k] for k in ("dataset", "n_train", "n_test", "n_eval_train", "channels", "Ks", "loss_rtols",
                                  "kernel_thresholds", "loss_check_every", "kernel_check_every", "probe_size",
                                  "steps", "eval_every", "learning_rate", "momentum", "stable_lrs", "stable_K",
                                  "stable_rtol", "stable_threshold", "seed", "seeds", "close_margin", "blowup",
                                  "scale")}
    resolved.update(n_train=ds.n_train, n_test=ds.n_test, n_eval_train=len(setup.evals["train"][0]))
    return {"movement": {fam: {k: v for k, v in m.items() if k != "status"} for fam, m in movement.items()},
            "flops": {k: float(v) for k, v in flops.items()},
            "meta": {"resolved": resolved, "runs": runs, "stable_lr": chosen,
                     "movement_picks": {k: float(v) for k, v in picks.items()},
                     "movement_status": {fam: str(m["status"]) for fam, m in movement.items()},
                     **S.data_meta(ds, model)}}


EXPERIMENT = register(Experiment(
    NAME, AdaptiveParams, run, version="1",
    doc="Issue 17: adaptive relinearisation (loss drift, kernel drift) against fixed K on the Fig. 2 task: the "
        "accuracy-vs-feature-updates frontier, where the updates fall and what the checks cost, and stability "
        "where a fixed large K diverges."))


# ------------------------------------------------------------------------------ for the chapter
def resolved(rec) -> dict:
    """The parameters the run used (scale defaults filled in)."""
    return dict(rec.meta["resolved"])


def summary(rec) -> list:
    """One row per training run: :func:`itlin.book.experiments.main._sparse.run_summary` (``test``:
    final test accuracy of the model being trained, ``updates``, ``status``) plus the run's
    ``group`` (frontier, search, stable), ``family`` (fixed, loss, kernel), ``value`` (K or the
    tolerance), ``learning_rate``, ``momentum``, ``seed``, its ``relin_steps`` and its compute
    (``cost``: flops of the training steps, relinearisations and checks)."""
    r = resolved(rec)
    flops = {k: float(v) for k, v in rec["flops"].items()}
    out = []
    for name, info in rec.meta["runs"].items():
        row = S.run_summary(rec, name)
        row.update(group=info["group"], family=info["family"], seed=int(info["seed"]),
                   value=S.as_K(info["value"]) if info["family"] == "fixed" else float(info["value"]),
                   learning_rate=float(info["learning_rate"]), momentum=float(info["momentum"]))
        row["relin_steps"] = list(rec.history(name).relin_steps)
        row["cost"] = run_cost(row["family"], row["steps"], row["updates"], r, flops)
        out.append(row)
    return out


def settings_of(rows, group: str = "frontier") -> list:
    """The distinct ``(family, value)`` of a group: fixed K in increasing K, then loss, then kernel."""
    keys = {(r["family"], r["value"]) for r in rows if r["group"] == group}
    return sorted(keys, key=lambda k: (FAMILIES.index(k[0]), k[1]))


def _by_seed(rows, **match) -> dict:
    return {int(r["seed"]): r for r in S.select(rows, **match)}


def matched(rows, family: str, value, *, axis: str = "updates") -> tuple:
    """Per seed, an adaptive setting's final test accuracy and the fixed-K accuracy of the same
    seed at the same number of feature updates (``axis="updates"``: the fixed-K runs'
    accuracies interpolated linearly in ``log(1 + updates)``) or at the same compute
    (``axis="compute"``: interpolated in total flops, checks included). Returns ``(seeds,
    adaptive, fixed, outside)``: paired lists over the seeds where both completed and the point
    lies within the fixed-K range (``outside`` counts those left out because it does not; at
    compute above the costliest fixed K that K is used, and counted in ``outside`` too)."""
    adaptive = _by_seed(rows, group="frontier", family=family, value=value)
    fixed = [r for r in rows if r["group"] == "frontier" and r["family"] == "fixed"]
    seeds, a, b, outside = [], [], [], 0
    for s, row in sorted(adaptive.items()):
        if row["status"] != "completed" or not math.isfinite(row["test"]):
            continue
        pts = [f for f in fixed if int(f["seed"]) == s and f["status"] == "completed" and math.isfinite(f["test"])]
        if len(pts) < 2:
            continue
        if axis == "updates":
            xs = np.asarray([math.log1p(f["updates"]) for f in pts])
            x = math.log1p(row["updates"])
        else:
            xs = np.asarray([f["cost"]["total"] for f in pts])
            x = row["cost"]["total"]
        ys = np.asarray([f["test"] for f in pts])
        order = np.argsort(xs, kind="stable")
        xs, ys = xs[order], ys[order]
        # equal x (e.g. two K with the same count): their mean
        ux = np.unique(xs)
        uy = np.asarray([ys[xs == u].mean() for u in ux])
        if x < ux[0] - 1e-12 or (x > ux[-1] + 1e-12 and axis == "updates"):
            outside += 1
            continue
        if x > ux[-1] + 1e-12:
            outside += 1
        seeds.append(s)
        a.append(float(row["test"]))
        b.append(float(np.interp(x, ux, uy)))
    return seeds, a, b, outside


def frontier_claims(rows, *, n_test: int) -> list:
    """Per adaptive setting of the frontier, two verdicts on "more accurate than a fixed period":
    at the same number of feature updates, and at the same compute (checks counted). Both are
    paired gaps over seeds (:func:`matched`), judged by :func:`itlin.book.verdicts.exceeds` with
    margin 0; the interval counts the seed spread and the test-set noise."""
    from ... import verdicts as V

    out = []
    for family, value in settings_of(rows):
        if family == "fixed":
            continue
        g = S.select(rows, group="frontier", family=family, value=value)
        ups = [r["updates"] for r in g if r["status"] == "completed"]
        for axis, what in (("updates", "the same number of feature updates"), ("compute", "the same compute")):
            seeds, a, b, outside = matched(rows, family, value, axis=axis)
            gap = V.paired_gap(a, b, n_test=n_test) if seeds else V.Gap(math.nan, math.nan, 0, math.nan, math.nan)
            result = V.exceeds(gap) if seeds else V.UNRESOLVED
            measured = (f"{V.fmt_mean(a)} against fixed K {V.fmt_mean(b)}: gap {V.fmt_gap(gap)}" if seeds
                        else "no seed inside the fixed-K range")
            detail = [f"{np.mean(ups):.1f} feature updates on average"] if ups else []
            if outside:
                detail.append(f"{outside} seed(s) beyond the fixed-K range" +
                              (" (compared with the costliest K)" if axis == "compute" else ", left out"))
            out.append(V.verdict(f"{value_label(family, value)} beats fixed K at {what}",
                                 "not in the paper (future work)", measured, result, gap.half, "; ".join(detail)))
    return out


def early_fraction(relin_steps: Sequence[int], steps: int) -> float:
    """The fraction of a run's relinearisations in the first half of its steps (NaN if none)."""
    s = np.asarray(relin_steps, float)
    return float(np.mean(s <= steps / 2)) if s.size else math.nan


def timing_claims(rows, *, steps: int) -> list:
    """Per adaptive setting: are its feature updates front-loaded (more than half of them in the
    first half of training)? Over seeds: the per-seed fraction minus one half, judged by
    :func:`itlin.book.verdicts.exceeds` (a fixed K puts half of them there)."""
    from ... import verdicts as V

    out = []
    for family, value in settings_of(rows):
        if family == "fixed":
            continue
        g = [r for r in S.select(rows, group="frontier", family=family, value=value) if r["status"] == "completed"]
        fr = [early_fraction(r["relin_steps"], steps) for r in g]
        fr = [x for x in fr if math.isfinite(x)]
        gap = V.paired_gap(fr, [0.5] * len(fr)) if fr else V.Gap(math.nan, math.nan, 0, math.nan, math.nan)
        result = V.exceeds(gap) if fr else V.UNRESOLVED
        measured = (f"{V.fmt_mean(fr)} of the updates in the first half" if fr else "no run relinearised")
        out.append(V.verdict(f"{value_label(family, value)}: updates are front-loaded",
                             "not in the paper", measured, result, gap.half,
                             f"{len(g) - len(fr)} run(s) without updates" if len(g) > len(fr) else ""))
    return out


def stability_claims(rows, *, stable_lr: Optional[float], stable_K) -> list:
    """Per adaptive schedule of the stability group, at the learning rate where the fixed period
    ``stable_K`` diverged in the search: does the schedule prevent the divergences? The gap is
    the fixed period's divergence rate minus the schedule's, over the seeds, with Newcombe's
    interval (:func:`itlin.book.verdicts.proportion_gap`; its wider half is the smallest gap the
    seeds resolve). *Holds* when the interval lies above 0 (the schedule diverges less often);
    *does not hold* when it lies below half the fixed period's rate (resolved: the schedule
    prevents fewer than half of the divergences, none at all included); *cannot resolve*
    otherwise, and when no candidate learning rate made the fixed period diverge or it diverged
    on no seed of the group. The detail pairs the seeds: on how many of those where the fixed
    period diverged the schedule completed."""
    from ... import verdicts as V

    out = []
    fixed = _by_seed(rows, group="stable", family="fixed")
    paper = "not in the paper (the k_sweeps chapter: large K diverges)"
    for family in ("loss", "kernel"):
        name = f"{'loss' if family == 'loss' else 'kernel'} drift prevents the divergence of fixed {S.K_label(stable_K)}"
        g = [r for r in rows if r["group"] == "stable" and r["family"] == family]
        if stable_lr is None or not g or not fixed:
            out.append(V.verdict(name, paper, "no candidate learning rate made the fixed K diverge", V.UNRESOLVED))
            continue
        own = {int(r["seed"]): r for r in g}
        div = [s for s, r in fixed.items() if r["status"] != "completed"]
        saved = [s for s in div if s in own and own[s]["status"] == "completed"]
        k_f, n_f = len(div), len(fixed)
        k_s, n_s = sum(r["status"] != "completed" for r in g), len(g)
        gap = V.proportion_gap(k_f, n_f, k_s, n_s)
        if not div:
            result = V.UNRESOLVED
        elif gap.hi < k_f / n_f / 2:
            result = V.FAILS
        else:
            result = V.HOLDS if gap.lo > 0 else V.UNRESOLVED
        done = [r for r in g if r["status"] == "completed"]
        ups = f"; {np.mean([r['updates'] for r in done]):.1f} feature updates on average" if done else ""
        measured = (f"lr {stable_lr:g}: diverged on {k_f} of {n_f} seeds with fixed {S.K_label(stable_K)}, "
                    f"{k_s} of {n_s} with {value_label(family, g[0]['value'])}: fewer by {100 * gap.mean:.0f} points "
                    f"(95% interval {100 * gap.lo:.0f} to {100 * gap.hi:.0f}){ups}")
        detail = [f"completed on {len(saved)} of the {k_f} seeds where K diverged"] if div else \
            ["the fixed period diverged on no seed: nothing to prevent"]
        detail.append(f"does not hold below {100 * k_f / n_f / 2:.0f} points (half the fixed period's rate)")
        ctl = [r for r in rows if r["group"] == "control"]
        if ctl:
            detail.append(f"gradient descent (K=1) at this rate, first seed: {ctl[0]['status']}")
        out.append(V.verdict(name, paper, measured, result, gap.half, "; ".join(detail)))
    return out


def divergence_rows(rows, group: str = "stable") -> list:
    """Per schedule of a group: ``label``, ``completed`` and ``runs`` (counts), ``mean_step`` (the
    mean step of divergence over the diverged runs, NaN if none) and ``after_relin`` (how many
    diverged on the first step after a relinearisation: the loss that blew up is then the
    network's own loss at the new anchor, not the linear model's)."""
    out = []
    for family, value in settings_of(rows, group):
        g = S.select(rows, group=group, family=family, value=value)
        div = [r for r in g if r["status"] != "completed" and r.get("diverged_at") is not None]
        after = [r for r in div if int(r["diverged_at"]) - 1 in set(int(s) for s in r["relin_steps"])]
        out.append({"label": value_label(family, value), "family": family, "completed": len(g) - len(div),
                    "runs": len(g), "mean_step": float(np.mean([r["diverged_at"] for r in div])) if div else math.nan,
                    "after_relin": len(after), "diverged": len(div),
                    "updates": float(np.mean([r["updates"] for r in g])) if g else math.nan})
    return out


def divergence_markdown(rows, group: str = "stable") -> str:
    d = divergence_rows(rows, group)
    return S.table_markdown(
        ["schedule", "seeds completed", "mean step of divergence", "diverged right after a relinearisation",
         "feature updates (mean)"],
        [[x["label"], f"{x['completed']} of {x['runs']}", "—" if math.isnan(x["mean_step"]) else f"{x['mean_step']:.0f}",
          f"{x['after_relin']} of {x['diverged']}", f"{x['updates']:.1f}"] for x in d])


def claims_of(rec) -> list:
    """Every verdict of the chapter, from a record."""
    r = resolved(rec)
    rows = summary(rec)
    stable_K = S.as_K(r["stable_K"])
    return (frontier_claims(rows, n_test=int(r["n_test"])) + timing_claims(rows, steps=int(r["steps"])) +
            stability_claims(rows, stable_lr=rec.meta.get("stable_lr"), stable_K=stable_K))


def claims_markdown(claims) -> str:
    from ... import verdicts as V

    return V.verdicts_markdown(claims) + "\n\n" + V.bottom_line(claims)


def summary_markdown(rows, group: str = "frontier") -> str:
    """Per setting of a group: learning rate, feature updates, checks, the checks' flops as a
    fraction of the training's (steps and relinearisations), final test accuracy, seeds completed."""
    from ... import verdicts as V

    out = []
    for family, value in settings_of(rows, group):
        g = S.select(rows, group=group, family=family, value=value)
        done = [r for r in g if r["status"] == "completed"]
        out.append([value_label(family, value), f"{g[0]['learning_rate']:g}",
                    V.fmt_mean([r["updates"] for r in done], 1, "", 1) if done else "n/a",
                    f"{g[0]['cost']['n_checks']:,}",
                    f"{np.mean([r['cost']['checks'] / r['cost']['train'] for r in done]) * 100:.1f}%" if done else "n/a",
                    V.fmt_mean([r["test"] for r in done]) if done else "n/a",
                    f"{len(done)} of {len(g)}"])
    return S.table_markdown(["schedule", "learning rate", "feature updates", "checks", "checks' flops / training's",
                             "test acc. (trained model)", "seeds completed"], out)


def settings_markdown(rec) -> str:
    """This run's settings beside the paper-scale ones, and where each comes from."""
    r, pp = resolved(rec), paper_settings()
    net = lambda c: f"LeNet-1D, {c} channels"
    rows = [
        ("dataset", r["dataset"], pp["dataset"], "the Fig. 2 task of this book (MNIST-1D)"),
        ("network", net(r["channels"]), net(pp["channels"]), "Appendix C (50 channels)"),
        ("training examples (full batch)", r["n_train"], pp["n_train"], "the whole training set"),
        ("test examples", r["n_test"], pp["n_test"], "the whole test set"),
        ("steps", r["steps"], pp["steps"], "our choice: not stated in the paper"),
        ("learning rate (frontier)", r["learning_rate"], pp["learning_rate"], "Fig. 2 caption (full batch)"),
        ("momentum (frontier)", r["momentum"], pp["momentum"], "our choice at default scale (see k_sweeps)"),
        ("fixed K", r["Ks"], pp["Ks"], "our choice: a log grid"),
        ("loss_drift rtol (check every)", f"{fmt_list(r['loss_rtols'])} ({r['loss_check_every']})",
         f"{fmt_list(pp['loss_rtols'])} ({pp['loss_check_every']})", "our choice: not in the paper"),
        ("kernel_drift threshold (check every, probe)",
         f"{fmt_list(r['kernel_thresholds'])} ({r['kernel_check_every']}, {r['probe_size']})",
         f"{fmt_list(pp['kernel_thresholds'])} ({pp['kernel_check_every']}, {pp['probe_size']})",
         "our choice: not in the paper"),
        ("stability: candidate learning rates (plain GD)", r["stable_lrs"], pp["stable_lrs"], "our choice"),
        ("stability: fixed K, rtol, threshold", f"{S.fmt_K(r['stable_K'])}, {r['stable_rtol']:g}, "
         f"{r['stable_threshold']:g}", f"{S.fmt_K(pp['stable_K'])}, {pp['stable_rtol']:g}, "
         f"{pp['stable_threshold']:g}", "our choice"),
        ("seeds", r["seeds"], pp["seeds"], "our choice: the paper reports one run"),
    ]
    return S.settings_markdown(rows)


def fmt_list(xs) -> str:
    return ", ".join(f"{float(x):g}" for x in xs)


def paper_settings() -> dict:
    """The ``scale="paper"`` parameters, resolved without running or loading anything."""
    return S.resolve(EXPERIMENT.resolve({"scale": "paper"}), SCALES)


# ------------------------------------------------------------------------------ figures
FAMILY_STYLE = {"fixed": ("black", "o", "fixed K"), "loss": ("tab:blue", "s", "loss drift"),
                "kernel": ("tab:red", "D", "kernel drift")}


def _mean_half(values):
    from ... import verdicts as V

    m, h = V.seed_interval(values)
    return m, (0.0 if not math.isfinite(h) else h)


def frontier_figure(rows, flops: Mapping):
    """Final test accuracy (model being trained) against feature updates (top) and against
    compute, checks included, relative to the steps alone (bottom); one point per setting, the
    mean over seeds with 95% intervals on both axes."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, axes = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 6.4))
    for ax, axis in zip(axes, ("updates", "compute")):
        for family in FAMILIES:
            colour, marker, label = FAMILY_STYLE[family]
            pts = []
            for fam, value in settings_of(rows):
                if fam != family:
                    continue
                done = [r for r in S.select(rows, group="frontier", family=fam, value=value)
                        if r["status"] == "completed"]
                if not done:
                    continue
                if axis == "updates":
                    xs = [1 + r["updates"] for r in done]
                else:
                    xs = [r["cost"]["total"] / (r["steps"] * float(flops["step"])) for r in done]
                pts.append((value, _mean_half(xs), _mean_half([r["test"] for r in done])))
            if not pts:
                continue
            x = np.asarray([p[1][0] for p in pts])
            y = np.asarray([p[2][0] for p in pts])
            ax.errorbar(x, 100 * y, xerr=[p[1][1] for p in pts], yerr=[100 * p[2][1] for p in pts], color=colour,
                        marker=marker, linestyle="-" if family == "fixed" else "none", capsize=2, lw=1.2, ms=5,
                        label=label)
            for (value, (mx, _), (my, _)) in pts:
                text = S.K_label(value) if family == "fixed" else f"{value:g}"
                ax.annotate(text, (mx, 100 * my), textcoords="offset points", xytext=(4, 4), fontsize=9,
                            color=colour)
        if axis == "updates":
            ax.set_xscale("log")
            ax.set_xlabel("1 + feature updates (log scale)")
        else:
            ax.set_xlabel("compute relative to the training steps alone (checks and relinearisations included)")
        ax.set_ylabel("test accuracy (%)")
    axes[0].legend(loc="lower right")
    axes[0].set_title("the frontier: accuracy against feature updates")
    axes[1].set_title("the same runs against compute")
    fig.tight_layout()
    return fig


def timing_figure(rows, movement: Mapping, picks: Mapping, steps: int):
    """Top: every frontier run's relinearisation steps, one row per seed, grouped by setting
    (fixed K in black, loss drift blue, kernel drift red). Bottom: one seed's probe-kernel
    distance from the current anchor's kernel against steps, for one setting of each family,
    with its relinearisations marked; the dotted lines are the distance from the initial kernel."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(COLUMN_WIDTH, 7.0), gridspec_kw={"height_ratios": [1.4, 1]})
    y, ticks, labels = 0, [], []
    for family, value in settings_of(rows):
        colour = FAMILY_STYLE[family][0]
        g = sorted(S.select(rows, group="frontier", family=family, value=value), key=lambda r: r["seed"])
        top = y
        for r in g:
            st = np.asarray(r["relin_steps"], float)
            ax.plot(st, np.full(st.shape, y), "|", color=colour, ms=5, mew=1.2)
            y += 1
        ticks.append((top + y - 1) / 2)
        labels.append(value_label(family, value))
        y += 1
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlim(0, steps)
    ax.set_xlabel("step")
    ax.set_title("when each run relinearised (one row per seed)")
    for family in FAMILIES:
        m = movement.get(family)
        if m is None:
            continue
        colour = FAMILY_STYLE[family][0]
        label = value_label(family, picks[family])
        st = np.asarray(m["step"], float)
        bx.plot(st, np.asarray(m["from_anchor"]), color=colour, lw=1.4, label=f"{label}: from the anchor")
        bx.plot(st, np.asarray(m["from_init"]), color=colour, lw=1.0, ls=":")
        for s in np.asarray(m["relin_steps"], float):
            bx.axvline(s, color=colour, lw=0.6, alpha=0.35)
    bx.plot([], [], color="0.3", ls=":", label="dotted: from the initial kernel")
    bx.set_xlim(0, steps)
    bx.set_xlabel("step")
    bx.set_ylabel("probe kernel distance")
    bx.set_title("kernel movement, first seed (thin lines: relinearisations)")
    bx.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def stability_figure(rec, rows):
    """Training loss of the model being trained against steps in the stability group (plain
    gradient descent at the searched learning rate), one line per seed; a cross marks a run
    that diverged, at its last good step."""
    import matplotlib.pyplot as plt

    from ...plotting import COLUMN_WIDTH

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 3.6))
    g = [r for r in rows if r["group"] == "stable"]
    for family in FAMILIES:
        colour, _, name = FAMILY_STYLE[family]
        first = True
        for r in sorted((r for r in g if r["family"] == family), key=lambda r: r["seed"]):
            h = rec.history(r["tag"])
            loss = np.asarray(h.loss, float)
            if not loss.size:
                continue
            st = np.arange(1, loss.size + 1) * h.loss_every
            lab = f"{value_label(family, r['value'])} ({name})" if first else None
            ax.plot(st, loss, color=colour, lw=1.0, alpha=0.8, label=lab)
            if r["status"] != "completed":
                ax.plot(st[-1], loss[-1], "x", color=colour, ms=8, mew=2)
            first = False
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (model being trained)")
    if g:
        ax.set_title(f"plain gradient descent at learning rate {g[0]['learning_rate']:g} (crosses: diverged)")
        ax.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return fig
