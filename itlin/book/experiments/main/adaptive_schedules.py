"""Beyond the papers (issue 17): adaptive relinearisation schedules against a fixed period K.

The main paper relinearises every ``K`` steps and leaves adaptive schedules to future work. The
library has two: :func:`itlin.loss_drift` (relinearise when the linearised and the true loss on
the batch part by more than ``rtol``) and :func:`itlin.kernel_drift` (when the empirical NTK on a
probe batch has moved by more than ``threshold``). On the headline task (the LeNet-1D on MNIST-1D
of :mod:`~itlin.book.experiments.main.fig2_k_sweep`, full batch) this experiment asks:

1. **the frontier**: at a matched number of feature updates (the fixed-``K`` curve of the same
   seed interpolated in ``log(1 + updates)``), or at matched compute, does an adaptive schedule
   end where a fixed period does (within ``close_margin``)?
2. **where the updates fall and what the checks cost**: are the adaptive updates front-loaded?
   The kernel movement over each phase (one seed) and XLA's flop counts of the pieces;
3. **stability**: plain gradient descent at a learning rate where a fixed large ``K`` diverges
   (found by a short search): do the drift-triggered schedules prevent most divergences?

One compiled program serves every run: the schedule (:func:`schedule_in_state`) keeps its family
and tolerance in its state, the period and the run's horizon (no relinearisation after the last
step) in the core's :func:`itlin.periodic` state, and the learning rate and momentum sit in the
optimiser's state (``optax.inject_hyperparams``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from ... import verdicts as V
from ...labels import K_label, fmt_value
from .. import Experiment, Period, param, register
from . import _rows as R
from . import _setup as S

NAME = "adaptive_schedules"

SCALES = {
    "tiny": {"n_train": 128, "n_test": 100, "n_eval_train": 128, "channels": 4, "steps": 20, "eval_every": 20,
             "Ks": (5, 10, math.inf), "loss_rtols": (0.1,), "kernel_thresholds": (0.3,), "seeds": 2,
             "learning_rate": 0.02, "momentum": 0.9, "stable_lrs": (30.0,), "stable_K": 10, "probe_size": 4},
    # about three minutes on a 2-core CPU: 384 training signals, 8 channels, 150 full-batch steps,
    # one tolerance per family, 8 seeds (enough to resolve the stability claims after the chapter's
    # correction); final accuracies on 15,000 generated test signals (_setup.MNIST1D_LARGE)
    "default": {"n_train": 384, "n_test": 1000, "n_eval_train": 384, "channels": 8, "steps": 150,
                "eval_every": 150, "Ks": (5, 10, 25, 50, math.inf), "loss_rtols": (0.03,),
                "kernel_thresholds": (0.3,), "seeds": 8, "learning_rate": 0.02, "momentum": 0.9,
                "stable_lrs": (0.4, 0.8, 1.6), "stable_K": 50, "probe_size": 8, "n_test_final": 15_000},
    # the paper's Fig. 2 sizes (full batch, 50 channels, lr 1e-3, plain GD) and a K grid up to its
    # largest periods; the paper has no adaptive schedules, so their grids are ours
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50, "steps": 100_000,
              "eval_every": 5_000, "Ks": (100, 1_000, 5_000, 20_000, 50_000, math.inf),
              "loss_rtols": (0.01, 0.03, 0.1, 0.3), "kernel_thresholds": (0.1, 0.3, 0.6), "seeds": 5,
              "learning_rate": 1e-3, "momentum": 0.0, "stable_lrs": (3e-3, 1e-2, 3e-2), "stable_K": 10_000,
              "probe_size": 32},
}
FAMILIES = ("fixed", "loss", "kernel")
MODES = {"fixed": 0, "loss": 1, "kernel": 2}
#: a schedule "prevents the divergences" when its divergence rate is below the fixed period's by more than this
PREVENTS = 0.5


@dataclass(frozen=True)
class AdaptiveParams(S.SparseParams):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "fixed periods K of the frontier (inf allowed); None: from scale",
                                             label="fixed K", source="our choice: a log grid")
    loss_rtols: Optional[tuple[float, ...]] = param(None, "loss_drift tolerances rtol; None: from scale", gt=0,
                                                    label="loss_drift rtol", source="our choice: not in the paper")
    kernel_thresholds: Optional[tuple[float, ...]] = param(None, "kernel_drift thresholds; None: from scale", gt=0,
                                                           label="kernel_drift threshold",
                                                           source="our choice: not in the paper")
    loss_check_every: int = param(5, "steps between loss-drift checks (each: one forward pass)", min=1,
                                  label="loss check every (steps)", source="our choice")
    kernel_check_every: int = param(10, "steps between kernel-drift checks (each: one probe kernel)", min=1,
                                    label="kernel check every (steps)", source="our choice")
    probe_size: Optional[int] = param(None, "probe inputs of kernel_drift (the first training signals); None: "
                                            "from scale", min=1, label="kernel_drift probe signals", source="our choice")
    steps: Optional[int] = param(None, "full-batch steps of every run; None: from scale", min=2, label="steps",
                                 source="our choice: not stated")
    learning_rate: Optional[float] = param(None, "learning rate of the frontier runs; None: from scale", gt=0,
                                           label="learning rate (frontier)", source="Fig. 2 caption (full batch)")
    momentum: Optional[float] = param(None, "heavy-ball momentum of the frontier runs; None: from scale", min=0,
                                      max=0.999, label="momentum (frontier)", source="our choice (see k_sweeps)")
    stable_lrs: Optional[tuple[float, ...]] = param(None, "stability: candidate learning rates (plain gradient "
                                                          "descent), tried in increasing order; None: from scale",
                                                    gt=0, label="stability: candidate learning rates",
                                                    source="our choice")
    stable_K: Optional[Period] = param(None, "stability: the fixed period expected to diverge; None: from scale",
                                       label="stability: fixed K", source="our choice")
    stable_rtol: float = param(0.1, "stability: loss_drift tolerance", gt=0, label="stability: rtol",
                               source="our choice")
    stable_threshold: float = param(0.3, "stability: kernel_drift threshold", gt=0, label="stability: threshold",
                                    source="our choice")

    def check(self):
        r = self.resolved()
        finite = [K for K in r["Ks"] if math.isfinite(K)]
        if r["eval_every"] > r["steps"]:
            raise ValueError(f"eval_every={r['eval_every']} is more than steps={r['steps']}")
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


# ------------------------------------------------------------------------------ the schedule
class AdaptiveState(NamedTuple):
    """:func:`schedule_in_state`'s state: the family (``mode``), its tolerance (``value``), the
    probe kernel at the anchor, and the core's :class:`itlin.PeriodState` (``K`` and horizon)."""

    mode: object
    value: object
    kernel: object
    period: object


def schedule_in_state(f, probe, *, loss_check_every: int, kernel_check_every: int):
    """One :class:`itlin.Schedule` for the three families, chosen by its state, so that every run
    shares one compiled program. Set at ``trainer.init(params, family=..., value=..., period=K,
    horizon=steps)``:

    * ``family="fixed"``: :func:`itlin.periodic` (``period=K``; ``inf`` never);
    * ``"loss"``: :func:`itlin.loss_drift` ``(rtol=value, check_every=loss_check_every)``;
    * ``"kernel"``: :func:`itlin.kernel_drift` ``(threshold=value, probe, kernel_check_every)``.

    None relinearises after step ``horizon`` (the periodic state's). The trainer asks for the
    network's loss every ``loss_check_every`` steps whatever the family; the other families
    ignore it (and :func:`run_cost` does not charge them for it)."""
    import jax
    import jax.numpy as jnp

    from ....core.linearise import kernel_distance, ntk
    from ....core.schedules import Schedule, periodic

    probe, per = jnp.asarray(probe), periodic(math.inf)
    kernel = lambda g, params: ntk(g, params, probe, trace=True)
    anchor_kernel = jax.jit(lambda params: kernel(f, params))

    def init(g, params):
        return AdaptiveState(jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, jnp.float32), anchor_kernel(params),
                             per.init(g, params))

    def update(state, info):
        fixed, _ = per.update(state.period, info)
        drift = jnp.abs(info.lin_loss - info.true_loss) > state.value * jnp.abs(info.true_loss)
        drift = jnp.where(jnp.isnan(info.true_loss), False, drift)
        check = jnp.logical_and(state.mode == MODES["kernel"], info.step % kernel_check_every == 0)
        k_now = jax.lax.cond(check, lambda: kernel(info.f, info.params), lambda: state.kernel)
        moved = jnp.logical_and(check, kernel_distance(k_now, state.kernel) > state.value)
        relin = jnp.select([state.mode == MODES["fixed"], state.mode == MODES["loss"]], [fixed, drift], moved)
        relin = jnp.logical_and(relin, info.step < state.period.horizon)
        return relin, state._replace(kernel=jnp.where(jnp.logical_and(relin, check), k_now, state.kernel))

    def set_(state, *, family=None, value=None, **period):
        if family is not None and family not in MODES:
            raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
        return state._replace(mode=state.mode if family is None else jnp.asarray(MODES[family], jnp.int32),
                              value=state.value if value is None else jnp.asarray(float(value), jnp.float32),
                              period=per.set(state.period, **period))

    return Schedule(init, update, lambda step: step % loss_check_every == 0, "fixed K, loss or kernel drift",
                    ("schedule_in_state", int(loss_check_every), int(kernel_check_every), tuple(probe.shape)), set_)


def optimizer():
    """SGD whose learning rate and momentum live in its state (momentum 0: plain gradient descent)."""
    import optax

    return optax.inject_hyperparams(optax.sgd)(learning_rate=0.0, momentum=0.0)


def start(trainer, params, model_state, family: str, value, learning_rate: float, momentum: float, steps: int):
    """``trainer.init`` with the family, its tolerance or period ``value``, the horizon ``steps``
    and the optimiser's learning rate and momentum written into the state."""
    import jax.numpy as jnp

    kw = {"period": value, "value": math.inf} if family == "fixed" else {"value": value}
    st = trainer.init(params, model_state, family=family, horizon=int(steps), **kw)
    hp = dict(st.opt_state.hyperparams)
    hp.update(learning_rate=jnp.asarray(learning_rate, hp["learning_rate"].dtype),
              momentum=jnp.asarray(momentum, hp["momentum"].dtype))
    return st._replace(opt_state=st.opt_state._replace(hyperparams=hp))


def value_label(family: str, value) -> str:
    """``K=25``, ``loss rtol=0.1``, ``kernel thr=0.3``."""
    return K_label(value) if family == "fixed" else f"{family} {'rtol' if family == 'loss' else 'thr'}={value:g}"


def tag(group: str, family: str, value, lr: Optional[float] = None) -> str:
    """``"frontier loss rtol=0.1"``, ``"stable K=50 lr=0.1"``."""
    return f"{group} {value_label(family, value)}" + (f" lr={lr:g}" if lr is not None else "")


# ------------------------------------------------------------------------------ compute
def cost_flops(setup, probe) -> dict:
    """XLA's flop counts (traced, not compiled; machine independent) of one full-batch step of the
    linearised model with a stored linearisation (a trainer without checks, ``K = inf``), one
    relinearisation, one loss check (a forward pass on the training set) and one kernel check."""
    import jax

    from ....core.linearise import ntk
    from ....core.train import iterative_linearisation

    flops = lambda lowered: float(lowered.cost_analysis()["flops"])
    plain = iterative_linearisation(setup.model, optimizer(), "inf")
    st = plain.init(setup.params, setup.model_state)
    lin_fn = jax.jit(lambda s: plain.linearise(s, setup.x))
    lin = jax.eval_shape(lin_fn, st)
    f = setup.model.bind(setup.model_state)
    return {"step": flops(jax.jit(lambda s, l: plain.step(s, setup.x, setup.y, None, l)).lower(st, lin)),
            "relinearise": flops(lin_fn.lower(st)),
            "loss_check": flops(jax.jit(lambda p: f(p, setup.x)).lower(setup.params)),
            "kernel_check": flops(jax.jit(lambda p: ntk(f, p, probe, trace=True)).lower(setup.params))}


def run_cost(family: str, steps: int, updates: int, r: Mapping, flops: Mapping) -> dict:
    """A run's compute in flops: training steps and relinearisations (``train``), checks (a loss
    check every ``loss_check_every`` steps; a probe kernel every ``kernel_check_every`` steps plus
    the anchor's at the start) and their ``total``."""
    n = {"loss": int(steps) // int(r["loss_check_every"]),
         "kernel": int(steps) // int(r["kernel_check_every"]) + 1}.get(family, 0)
    per = {"loss": flops["loss_check"], "kernel": flops["kernel_check"]}.get(family, 0.0)
    train = steps * flops["step"] + updates * flops["relinearise"]
    return {"train": float(train), "checks": float(n * per), "total": float(train + n * per), "n_checks": n}


def _kernel_movement(trainer, setup, probe, family, value, r, lr, mom, steps):
    """One seed's run again, without evaluations: after every ``kernel_check_every`` steps, the
    probe kernel's distance from the current anchor's and from the initial one."""
    import jax

    from ....core.linearise import kernel_distance, ntk
    from ....core.loop import fit

    f = setup.model.bind(setup.model_state)
    kern = jax.jit(lambda p: ntk(f, p, probe, trace=True))
    k0 = kern(setup.params)
    rec, anchor = {"step": [], "from_anchor": [], "from_init": []}, {"k": k0, "step": 0}

    def callback(st, hist):
        k, step = kern(st.params), int(st.step)
        if int(st.last) == step and step > 0 and step != anchor["step"]:  # relinearised here
            anchor.update(k=k, step=step)
        rec["step"].append(step)
        rec["from_anchor"].append(float(kernel_distance(k, anchor["k"])))
        rec["from_init"].append(float(kernel_distance(k, k0)))

    st = start(trainer, setup.params, setup.model_state, family, value, lr, mom, steps)
    res = fit(trainer, st, setup.x, setup.y, steps, eval_sets={}, eval_every=int(r["kernel_check_every"]),
              callback=callback, blowup=float(r["blowup"]))
    return {**{k: np.asarray(v) for k, v in rec.items()}, "relin_steps": np.asarray(res.history.relin_steps, np.int64)}


# ------------------------------------------------------------------------------ run
def run(p, ctx):
    from ....core.train import iterative_linearisation

    r = S.resolve(p, SCALES)
    setup = S.prepare(r)
    steps, probe = int(r["steps"]), setup.x[: int(r["probe_size"])]
    trainer = iterative_linearisation(setup.model, optimizer(), schedule_in_state(
        setup.model.bind(setup.model_state), probe, loss_check_every=int(r["loss_check_every"]),
        kernel_check_every=int(r["kernel_check_every"])))
    seeds, runs = S.seed_list(r), {}
    inits = {s: (setup.params, setup.model_state) if s == int(r["seed"]) else S.init_params(setup.model, setup.x, s)
             for s in seeds}

    def train(group, family, value, lr, mom, seed_list, lr_in_tag=False):
        statuses = []
        for s in seed_list:
            name = S.seed_tag(tag(group, family, value, lr if lr_in_tag else None), s)
            res = ctx.fit(name, trainer, start(trainer, *inits[s], family, value, lr, mom, steps), setup.x, setup.y,
                          steps, eval_sets=setup.evals, eval_every=int(r["eval_every"]), seed=s,
                          blowup=float(r["blowup"]))
            runs[name] = {"group": group, "family": family, "value": value, "learning_rate": lr, "momentum": mom,
                          "seed": s}
            if setup.final is not None and res.history.status == "completed":
                runs[name].update(S.final_metrics(trainer, res.state, setup.final))
            statuses.append(res.history.status)
        return statuses

    lr, mom = float(r["learning_rate"]), float(r["momentum"])
    for family, values in (("fixed", r["Ks"]), ("loss", r["loss_rtols"]), ("kernel", r["kernel_thresholds"])):
        for v in values:
            train("frontier", family, v, lr, mom, seeds)
    # stability: the smallest candidate learning rate at which fixed stable_K diverges (first seed)
    chosen = next((float(c) for c in sorted(r["stable_lrs"])
                   if train("search", "fixed", r["stable_K"], c, 0.0, seeds[:1], True)[0] != "completed"), None)
    if chosen is not None:
        train("control", "fixed", 1, chosen, 0.0, seeds[:1], True)  # gradient descent itself at this rate
        for family, v in (("fixed", r["stable_K"]), ("loss", r["stable_rtol"]), ("kernel", r["stable_threshold"])):
            train("stable", family, v, chosen, 0.0, seeds, True)
    # kernel movement over the phases, first seed: a middle fixed K and the middle tolerances
    mid = lambda xs: sorted(xs)[len(xs) // 2]
    picks = {"fixed": mid([K for K in r["Ks"] if math.isfinite(K)] or [r["Ks"][0]]), "loss": mid(r["loss_rtols"]),
             "kernel": mid(r["kernel_thresholds"])}
    movement = {fam: ctx.stage(f"movement {fam}", lambda fam=fam: _kernel_movement(
        trainer, setup, probe, fam, picks[fam], r, lr, mom, steps)) for fam in FAMILIES}
    return {"movement": movement, "flops": ctx.stage("flops", lambda: cost_flops(setup, probe)),
            "meta": {"resolved": S.measured_sizes(setup), "runs": runs, "stable_lr": chosen,
                     "movement_picks": {k: float(v) for k, v in picks.items()}, **S.data_meta(setup.ds, setup.model)}}


# ------------------------------------------------------------------------------ rows and claims
def rows(rec) -> list:
    """One row per training run: :func:`~._rows.run_summary` (``test``: the final test accuracy
    of the model being trained, on the large test set where the scale sets one) plus ``group``
    (frontier, search, control, stable), ``family``, ``value`` (K or the tolerance),
    ``learning_rate``, ``momentum``, ``seed``, ``relin_steps`` and ``cost`` (:func:`run_cost`)."""
    r, flops = rec.meta["resolved"], {k: float(v) for k, v in rec["flops"].items()}
    out = []
    for name, info in rec.meta["runs"].items():
        row = R.run_summary(rec, name)
        row.update(group=info["group"], family=info["family"], seed=int(info["seed"]),
                   value=R.as_K(info["value"]) if info["family"] == "fixed" else float(info["value"]),
                   learning_rate=float(info["learning_rate"]), momentum=float(info["momentum"]),
                   relin_steps=list(rec.history(name).relin_steps))
        if "final_test" in info:
            row["test"] = float(info["final_test"])
        row["cost"] = run_cost(row["family"], row["steps"], row["updates"], r, flops)
        out.append(row)
    return out


def settings_of(rows_, group: str = "frontier") -> list:
    """The distinct ``(family, value)`` of a group: fixed K in increasing K, then loss, then kernel."""
    return sorted({(r["family"], r["value"]) for r in rows_ if r["group"] == group},
                  key=lambda k: (FAMILIES.index(k[0]), k[1]))


def matched(rows_, family: str, value, *, axis: str = "updates") -> tuple:
    """Per seed, an adaptive setting's final test accuracy and the fixed-K accuracy of the same
    seed at the same number of feature updates (interpolated linearly in ``log(1 + updates)``)
    or at the same compute (``axis="compute"``, total flops, checks included). Returns ``(seeds,
    adaptive, fixed, outside, dropped)``: ``outside`` counts seeds beyond the fixed-K range (left
    out on the updates axis; compared with the costliest K on the compute axis); ``dropped`` the
    seeds left out because the adaptive run or fewer than two fixed runs completed."""
    adaptive = {int(r["seed"]): r for r in R.select(rows_, group="frontier", family=family, value=value)}
    fixed = [r for r in rows_ if r["group"] == "frontier" and r["family"] == "fixed"]
    seeds, a, b, outside, dropped = [], [], [], 0, 0
    x_of = (lambda q: math.log1p(q["updates"])) if axis == "updates" else (lambda q: q["cost"]["total"])
    for s, row in sorted(adaptive.items()):
        pts = [q for q in fixed if int(q["seed"]) == s and q["status"] == "completed" and math.isfinite(q["test"])]
        if row["status"] != "completed" or not math.isfinite(row["test"]) or len(pts) < 2:
            dropped += 1
            continue
        xs, ys = np.asarray([x_of(q) for q in pts]), np.asarray([q["test"] for q in pts])
        ux = np.unique(xs)
        uy, x = np.asarray([ys[xs == u].mean() for u in ux]), x_of(row)
        if x < ux[0] - 1e-12 or x > ux[-1] + 1e-12:
            outside += 1
            if x < ux[0] - 1e-12 or axis == "updates":
                continue
        seeds.append(s)
        a.append(float(row["test"]))
        b.append(float(np.interp(x, ux, uy)))
    return seeds, a, b, outside, dropped


def early_fraction(relin_steps: Sequence[int], steps: int) -> float:
    """The fraction of a run's relinearisations in the first half of its steps (NaN if none)."""
    s = np.asarray(relin_steps, float)
    return float(np.mean(s <= steps / 2)) if s.size else math.nan


def judge_rows(rows_, *, n_test: int, steps: int, margin: float, stable_lr: Optional[float], stable_K) -> list:
    """The chapter's claims on the rows (a pure function, tested on constructed rows):

    * ``frontier.<family><value>.updates`` / ``.compute``: the adaptive setting ends within
      ``margin`` of the fixed-K curve of the same seed at its update count / its compute (a
      ``close`` test, seed spread and test-set noise; a seed whose run diverged is counted);
    * ``timing.<family><value>``: more than half of its updates fall in the first half of the
      run (the per-seed fraction minus one half, ``exceeds``);
    * ``stability.<family>``: at the learning rate where the fixed period diverged, the
      schedule's divergence rate is below the fixed period's by more than :data:`PREVENTS`
      (Newcombe's interval; *cannot resolve* when no candidate rate made it diverge)."""
    out = []
    for family, value in settings_of(rows_):
        if family == "fixed":
            continue
        key, name = f"{family}{value:g}", value_label(family, value)
        done = [r for r in R.select(rows_, group="frontier", family=family, value=value) if r["status"] == "completed"]
        ups = f"{np.mean([r['updates'] for r in done]):.1f} feature updates on average" if done else ""
        for axis, what in (("updates", "the same number of feature updates"), ("compute", "the same compute")):
            seeds, a, b, outside, dropped = matched(rows_, family, value, axis=axis)
            gap = V.paired_gap(a, b, n_test=n_test) if seeds else V.Gap(math.nan, math.nan, 0, math.nan, math.nan)
            beyond = f"{outside} seed(s) beyond the fixed-K range" + (" (against the costliest K)" if axis ==
                                                                          "compute" else ", left out")
            out.append(V.judge(f"frontier.{key}.{axis}", f"{name} ends where fixed K does at {what}",
                               "not in the paper (future work)", gap, "close", margin, dropped=dropped,
                               measured=f"{name} {V.fmt_mean(a)}, fixed K {V.fmt_mean(b)}" if seeds else "no seed",
                               detail="; ".join(x for x in (ups, beyond if outside else "") if x)))
        fr = [x for x in (early_fraction(r["relin_steps"], steps) for r in done) if math.isfinite(x)]
        gap = V.paired_gap(fr, [0.5] * len(fr)) if fr else V.Gap(math.nan, math.nan, 0, math.nan, math.nan)
        out.append(V.judge(f"timing.{key}", f"{name}: most updates in the first half of the run", "not in the paper",
                           gap, "exceeds", 0.0, measured=f"{V.fmt_mean(fr)} of them in the first half" if fr else
                           "no run relinearised", detail=f"{len(done) - len(fr)} run(s) without updates"
                           if len(done) > len(fr) else ""))
    fixed = [r for r in rows_ if r["group"] == "stable" and r["family"] == "fixed"]
    for family in ("loss", "kernel"):
        g = [r for r in rows_ if r["group"] == "stable" and r["family"] == family]
        claim = f"{family} drift prevents most divergences of fixed {K_label(stable_K)}"
        paper = "not in the paper (the k_sweeps chapter: large K diverges)"
        if stable_lr is None or not g or not fixed:
            out.append(V.stated(f"stability.{family}", claim, paper, "no candidate learning rate made the fixed K "
                                "diverge", V.UNRESOLVED))
            continue
        k_f, k_s = sum(r["status"] != "completed" for r in fixed), sum(r["status"] != "completed" for r in g)
        ctl = [r["status"] for r in rows_ if r["group"] == "control"]
        out.append(V.judge(f"stability.{family}", claim, paper, V.proportion_gap(k_f, len(fixed), k_s, len(g)),
                           "exceeds", PREVENTS, measured=f"lr {stable_lr:g}: diverged on {k_f} of {len(fixed)} seeds "
                           f"with fixed {K_label(stable_K)}, {k_s} of {len(g)} with {value_label(family, g[0]['value'])}",
                           detail=f"gradient descent (K=1) at this rate: {ctl[0]}" if ctl else ""))
    return out


def claims(rec) -> list:
    r = rec.meta["resolved"]
    return judge_rows(rows(rec), n_test=S.n_test_judged(r), steps=int(r["steps"]), margin=float(r["close_margin"]),
                      stable_lr=rec.meta.get("stable_lr"), stable_K=R.as_K(r["stable_K"]))


def summary(rec) -> list:
    """Per frontier setting: learning rate, feature updates, checks, the checks' flops as a share
    of the training's, the final test accuracy (mean and interval over seeds), seeds completed."""
    rows_, out = rows(rec), []
    for family, value in settings_of(rows_):
        g = R.select(rows_, group="frontier", family=family, value=value)
        done = [r for r in g if r["status"] == "completed"]
        share = np.mean([r["cost"]["checks"] / r["cost"]["train"] for r in done]) if done else math.nan
        out.append({"schedule": value_label(family, value), "learning rate": f"{g[0]['learning_rate']:g}",
                    "feature updates": V.fmt_mean([r["updates"] for r in done], 1, "", 1) if done else "n/a",
                    "checks": g[0]["cost"]["n_checks"], "checks' flops / training's": f"{100 * share:.1f}%",
                    "test acc. (trained model)": R.mean_cell(g, "test"), "seeds completed": f"{len(done)} of {len(g)}"})
    return out


def divergence_rows(rows_, group: str = "stable") -> list:
    """Per schedule of a group: seeds completed, the mean step of divergence, how many diverged
    on the first step after a relinearisation (the loss that blew up is then the network's own
    loss at the new anchor), and the mean feature updates."""
    out = []
    for family, value in settings_of(rows_, group):
        g = R.select(rows_, group=group, family=family, value=value)
        div = [r for r in g if r["status"] != "completed" and r.get("diverged_at") is not None]
        after = [r for r in div if int(r["diverged_at"]) - 1 in {int(s) for s in r["relin_steps"]}]
        out.append({"schedule": value_label(family, value), "seeds completed": f"{len(g) - len(div)} of {len(g)}",
                    "mean step of divergence": f"{np.mean([r['diverged_at'] for r in div]):.0f}" if div else "—",
                    "diverged right after a relinearisation": f"{len(after)} of {len(div)}",
                    "feature updates (mean)": f"{np.mean([r['updates'] for r in g]):.1f}"})
    return out


EXPERIMENT = register(Experiment(
    NAME, AdaptiveParams, run, version="2", summary=summary, claims=claims,
    doc="Issue 17: adaptive relinearisation (loss drift, kernel drift) against fixed K on the Fig. 2 task: the "
        "accuracy-vs-feature-updates frontier, where the updates fall and what the checks cost, and stability "
        "where a fixed large K diverges."))

__all__ = ["AdaptiveParams", "AdaptiveState", "EXPERIMENT", "FAMILIES", "MODES", "NAME", "PREVENTS", "SCALES",
           "claims", "cost_flops", "divergence_rows", "early_fraction", "judge_rows", "matched", "optimizer", "rows",
           "run", "run_cost", "schedule_in_state", "settings_of", "start", "summary", "tag", "value_label"]
