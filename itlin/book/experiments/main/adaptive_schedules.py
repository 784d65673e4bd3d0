"""Beyond the papers (issue 17): :func:`itlin.loss_drift` and :func:`itlin.kernel_drift` against
fixed periods K on the Fig. 2 task (LeNet-1D, MNIST-1D, full batch): the accuracy at the same
feature updates or compute, where the updates fall, and stability where a fixed large K diverges.
One compiled program serves every run (:func:`schedule_in_state`, learning rate in the optimiser's state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple, Optional

import numpy as np

from ... import verdicts as V
from ...labels import K_label
from .. import Experiment, Period, param, register
from ...checkpoints import FitJob
from . import _rows as R
from . import _setup as S

NAME = "adaptive_schedules"

SCALES = {
    "tiny": {"n_train": 128, "n_test": 100, "n_eval_train": 128, "channels": 4, "steps": 20, "eval_every": 20,
             "Ks": (5, 10, math.inf), "loss_rtols": (0.1,), "kernel_thresholds": (0.3,), "seeds": 2,
             "learning_rate": 0.02, "momentum": 0.9, "stable_lrs": (30.0,), "stable_K": 10, "probe_size": 4},
    # about three minutes on 2 cores; 12 seeds resolve the stability and frontier claims after Holm
    "default": {"n_train": 384, "n_test": 1000, "n_eval_train": 384, "channels": 8, "steps": 150,
                "eval_every": 150, "Ks": (5, 10, 25, 50, math.inf), "loss_rtols": (0.03,),
                "kernel_thresholds": (0.3,), "seeds": 2, "learning_rate": 0.02, "momentum": 0.9,
                "stable_lrs": (0.4, 0.8, 1.6), "stable_K": 50, "probe_size": 8, "n_test_final": 15_000},
    # the paper's Fig. 2 sizes (full batch, 50 channels, lr 1e-3, plain GD); the adaptive grids are ours
    "paper": {"n_train": 10 ** 9, "n_test": 10 ** 9, "n_eval_train": 10_000, "channels": 50, "steps": 100_000,
              "eval_every": 5_000, "Ks": (100, 1_000, 5_000, 20_000, 50_000, math.inf),
              "loss_rtols": (0.01, 0.03, 0.1, 0.3), "kernel_thresholds": (0.1, 0.3, 0.6), "seeds": 5,
              "learning_rate": 1e-3, "momentum": 0.0, "stable_lrs": (3e-3, 1e-2, 3e-2), "stable_K": 10_000,
              "probe_size": 32},
}
FAMILIES = ("fixed", "loss", "kernel")
MODES = {"fixed": 0, "loss": 1, "kernel": 2}
PREVENTS = 0.5  # "prevents most divergences": the divergence rate falls by more than this
OURS = "our choice: not in the paper"


@dataclass(frozen=True)
class AdaptiveParams(S.SparseParams):
    SCALES = SCALES

    Ks: Optional[tuple[Period, ...]] = param(None, "fixed periods K of the frontier (inf allowed)", label="fixed K",
                                             source="our choice: a log grid", distinct=True)
    loss_rtols: Optional[tuple[float, ...]] = param(None, "loss_drift tolerances", gt=0, label="loss_drift rtol",
                                                    source=OURS)
    kernel_thresholds: Optional[tuple[float, ...]] = param(None, "kernel_drift thresholds", gt=0,
                                                           label="kernel_drift threshold", source=OURS)
    loss_check_every: int = param(5, "steps between loss checks (one forward pass each)", min=1,
                                  label="loss check every (steps)", source=OURS)
    kernel_check_every: int = param(10, "steps between kernel checks (one probe kernel each)", min=1,
                                    label="kernel check every (steps)", source=OURS)
    probe_size: Optional[int] = param(None, "kernel_drift's probe: the first training signals", min=1,
                                      label="kernel_drift probe signals", source=OURS)
    steps: Optional[int] = param(None, "full-batch steps of every run", min=2, label="steps", source=OURS)
    learning_rate: Optional[float] = param(None, "learning rate of the frontier runs", gt=0,
                                           label="learning rate (frontier)", source="Fig. 2 caption (full batch)")
    momentum: Optional[float] = param(None, "heavy-ball momentum of the frontier runs", min=0, max=0.999,
                                      label="momentum (frontier)", source="our choice (see k_sweeps)")
    stable_lrs: Optional[tuple[float, ...]] = param(None, "stability: candidate learning rates of plain gradient "
                                                          "descent, tried in increasing order", gt=0,
                                                    label="stability: candidate learning rates", source=OURS)
    stable_K: Optional[Period] = param(None, "stability: the fixed period expected to diverge",
                                       label="stability: fixed K", source=OURS)
    stable_tolerances: tuple[float, ...] = param((0.1, 0.3), "stability: loss_drift rtol, kernel_drift threshold",
                                                 gt=0, label="stability: rtol, threshold", source=OURS)

    def check(self):
        r = self.resolved()
        problems = [(r["eval_every"] > r["steps"], f"eval_every={r['eval_every']} is more than steps={r['steps']}"),
                    (len(r["Ks"]) < 2, f"Ks needs at least two periods to draw a frontier, got {r['Ks']}"),
                    (any(math.isfinite(K) and K >= r["steps"] for K in r["Ks"]), f"every finite K must be below "
                     f"steps={r['steps']} (else it never relinearises: use inf), got Ks={r['Ks']}"),
                    (math.isfinite(r["stable_K"]) and r["stable_K"] >= r["steps"],
                     f"stable_K={r['stable_K']} must be below steps={r['steps']}"),
                    (r["probe_size"] > r["n_train"], f"probe_size={r['probe_size']} exceeds n_train={r['n_train']}"),
                    (len(r["stable_tolerances"]) != 2, "stable_tolerances is (loss rtol, kernel threshold)")]
        for bad, message in problems:
            if bad:
                raise ValueError(message)


# ------------------------------------------------------------------------------ the schedule
AdaptiveState = NamedTuple("AdaptiveState", [("mode", object), ("value", object), ("kernel", object),
                                               ("period", object)])  # the period: an itlin.PeriodState


def schedule_in_state(f, probe, *, loss_check_every: int, kernel_check_every: int):
    """One :class:`itlin.Schedule` for the three families, set by ``trainer.init(params, family=...,
    value=..., period=K, horizon=steps)``: ``"fixed"`` wraps :func:`itlin.periodic`, ``"loss"`` and
    ``"kernel"`` decide as :func:`itlin.loss_drift` / :func:`itlin.kernel_drift` ``(value, ...)``;
    none after step ``horizon``. Every family computes the network's loss at the loss checks."""
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
    """SGD with its learning rate and momentum in its state (momentum 0: plain gradient descent)."""
    import optax

    return optax.inject_hyperparams(optax.sgd)(learning_rate=0.0, momentum=0.0)


def start(trainer, params, model_state, family: str, value, learning_rate: float, momentum: float, steps: int):
    """``trainer.init`` with the family, its ``value``, the horizon and the optimiser's rates set."""
    import jax.numpy as jnp

    kw = {"period": value, "value": math.inf} if family == "fixed" else {"value": value}
    st = trainer.init(params, model_state, family=family, horizon=int(steps), **kw)
    hp = dict(st.opt_state.hyperparams)
    hp.update({k: jnp.asarray(v, hp[k].dtype) for k, v in (("learning_rate", learning_rate), ("momentum", momentum))})
    return st._replace(opt_state=st.opt_state._replace(hyperparams=hp))


def value_label(family: str, value) -> str:
    """``K=25``, ``loss rtol=0.1``, ``kernel thr=0.3``."""
    return K_label(value) if family == "fixed" else f"{family} {'rtol' if family == 'loss' else 'thr'}={value:g}"


def cost_flops(setup, probe) -> dict:
    """XLA's flop counts (traced, machine independent) of a full-batch linearised step (``K = inf``),
    a relinearisation, a loss check (a forward pass) and a kernel check (the probe's NTK)."""
    import jax

    from ....core.linearise import ntk
    from ....core.train import iterative_linearisation

    flops = lambda lowered: float(lowered.cost_analysis()["flops"])
    plain = iterative_linearisation(setup.model, optimizer(), "inf")
    st, f = plain.init(setup.params, setup.model_state), setup.model.bind(setup.model_state)
    lin_fn = jax.jit(lambda s: plain.linearise(s, setup.x))
    return {"step": flops(jax.jit(lambda s, l: plain.step(s, setup.x, setup.y, None, l)).lower(
                st, jax.eval_shape(lin_fn, st))),
            "relinearise": flops(lin_fn.lower(st)),
            "loss_check": flops(jax.jit(lambda p: f(p, setup.x)).lower(setup.params)),
            "kernel_check": flops(jax.jit(lambda p: ntk(f, p, probe, trace=True)).lower(setup.params))}


def run_cost(family: str, steps: int, updates: int, r: AdaptiveParams, flops: Mapping) -> dict:
    """A run's flops: ``train`` (steps, relinearisations), ``checks`` (the anchor's kernel included)."""
    n = {"loss": int(steps) // int(r.loss_check_every),
         "kernel": int(steps) // int(r.kernel_check_every) + 1}.get(family, 0)
    checks = n * {"loss": flops["loss_check"], "kernel": flops["kernel_check"]}.get(family, 0.0)
    train = steps * flops["step"] + updates * flops["relinearise"]
    return {"train": float(train), "checks": float(checks), "total": float(train + checks), "n_checks": n}


def frontier_trainer(setup, r: AdaptiveParams):
    """``(trainer, probe)``: the one trainer of every run of resolved parameters ``r`` on ``setup``
    (:func:`schedule_in_state`; its probe, the first ``probe_size`` training inputs)."""
    from ....core.train import iterative_linearisation

    probe = setup.x[: int(r.probe_size)]
    trainer = iterative_linearisation(setup.model, optimizer(), schedule_in_state(
        setup.model.bind(setup.model_state), probe, loss_check_every=int(r.loss_check_every),
        kernel_check_every=int(r.kernel_check_every)))
    return trainer, probe


def run(params: AdaptiveParams, ctx):
    setup = S.prepare(params)
    steps = params.steps
    trainer, probe = frontier_trainer(setup, params)
    seeds, runs = S.seed_list(params), {}
    inits = {s: (setup.params, setup.model_state) if s == params.seed else S.init_params(setup.model, setup.x, s)
             for s in seeds}

    def train(group, family, value, lr, mom, seed_list, lr_in_tag=False):
        statuses = []
        for s in seed_list:
            name = S.seed_tag(f"{group} {value_label(family, value)}" + (f" lr={lr:g}" if lr_in_tag else ""), s)
            res = ctx.run(FitJob(name, trainer, start(trainer, *inits[s], family, value, lr, mom, steps), setup.x,
                                 setup.y, steps, eval_sets=setup.evals, eval_every=params.eval_every, seed=s,
                                 blowup=params.blowup))
            runs[name] = {"group": group, "family": family, "value": value, "learning_rate": lr, "momentum": mom,
                          "seed": s}
            if setup.final is not None and res.history.status == "completed":
                runs[name].update(S.final_metrics(trainer, res.state, setup.final))
            statuses.append(res.history.status)
        return statuses

    lr, mom = params.learning_rate, params.momentum
    for family, values in (("fixed", params.Ks), ("loss", params.loss_rtols), ("kernel", params.kernel_thresholds)):
        for v in values:
            train("frontier", family, v, lr, mom, seeds)
    # stability: the smallest candidate learning rate at which fixed stable_K diverges (first seed)
    chosen = next((float(c) for c in sorted(params.stable_lrs)
                   if train("search", "fixed", params.stable_K, c, 0.0, seeds[:1], True)[0] != "completed"), None)
    if chosen is not None:
        train("control", "fixed", 1, chosen, 0.0, seeds[:1], True)  # gradient descent itself at this rate
        for family, v in zip(FAMILIES, (params.stable_K, *params.stable_tolerances)):
            train("stable", family, v, chosen, 0.0, seeds, True)
    return {"flops": ctx.stage("flops", lambda: cost_flops(setup, probe)),
            "meta": {"resolved": S.measured_sizes(setup), "runs": runs, "stable_lr": chosen,
                     **S.data_meta(setup.ds, setup.model)}}


# ------------------------------------------------------------------------------ rows and claims
def rows(rec) -> list:
    """One row per run: :func:`~._rows.run_summary` plus its group, family, value, rates, seed and cost."""
    r, flops, out = rec.settings, {k: float(v) for k, v in rec["flops"].items()}, []
    for name, info in rec.meta["runs"].items():
        row = R.run_summary(rec, name)
        row.update(group=info["group"], family=info["family"], seed=int(info["seed"]),
                   value=R.as_K(info["value"]) if info["family"] == "fixed" else float(info["value"]),
                   learning_rate=float(info["learning_rate"]), momentum=float(info["momentum"]),
                   relin_steps=list(rec.history(name).relin_steps), test=float(info.get("final_test", row["test"])),
                   correct=S.correct_of(info))
        out.append(dict(row, cost=run_cost(row["family"], row["steps"], row["updates"], r, flops)))
    return out


class FrontierRuns:
    """Frontier runs at settings a record ``rec`` lacks, trained on demand with everything else as
    the record made them (data, model, initialisations, learning rate, momentum, steps, checks and
    the final test set); :meth:`rows` gives them as :func:`rows` gives the record's (group
    ``"frontier"``, plus ``trained_here``). The data, model and trainer are built on the first call,
    and the trainer compiles once for every setting. Retraining a setting the record holds gives
    the record's runs (up to the machine's last bits)."""

    def __init__(self, rec):
        self.r = rec.settings
        self.flops = {k: float(v) for k, v in rec["flops"].items()}
        self._setup = self._trainer = None
        self._rows = {}

    def rows(self, family: str, value: float, seeds) -> list:
        """The runs of ``family`` (``"loss"`` or ``"kernel"``) at ``value`` for ``seeds``, cached."""
        from ....core.loop import fit

        if family not in ("loss", "kernel"):
            raise ValueError(f"family is 'loss' or 'kernel' (a fixed K is a record's own setting), got {family!r}.")
        r = self.r
        if self._setup is None:
            self._setup = S.prepare(r)
            self._trainer, _ = frontier_trainer(self._setup, r)
        setup, trainer, out = self._setup, self._trainer, []
        for s in seeds:
            key = (family, float(value), int(s))
            if key not in self._rows:
                init = (setup.params, setup.model_state) if int(s) == int(r.seed) else \
                    S.init_params(setup.model, setup.x, int(s))
                res = fit(trainer, start(trainer, *init, family, float(value), r.learning_rate, r.momentum,
                                         r.steps), setup.x, setup.y, int(r.steps), eval_sets=setup.evals,
                          eval_every=int(r.eval_every), seed=int(s), blowup=float(r.blowup))
                h, done = res.history, res.history.status == "completed"
                final = S.final_metrics(trainer, res.state, setup.final) if done and setup.final is not None else {}
                row = {"group": "frontier", "family": family, "value": float(value), "seed": int(s),
                       "learning_rate": float(r.learning_rate), "momentum": float(r.momentum),
                       "steps": int(res.state.step), "updates": int(res.state.feature_updates),
                       "status": "completed" if done else h.describe(), "diverged_at": h.diverged_at,
                       "relin_steps": list(h.relin_steps), "trained_here": True,
                       "test": float(final.get("final_test", R.final(h, "test/accuracy_lin"))),
                       "correct": S.correct_of(final) if final else None}
                row["cost"] = run_cost(family, row["steps"], row["updates"], r, self.flops)
                self._rows[key] = row
            out.append(self._rows[key])
        return out


def settings_of(rows_, group: str = "frontier") -> list:
    """The distinct ``(family, value)`` of a group: fixed K in increasing K, then loss, then kernel."""
    return sorted({(r["family"], r["value"]) for r in rows_ if r["group"] == group},
                  key=lambda k: (FAMILIES.index(k[0]), k[1]))


def matched(rows_, family: str, value, *, axis: str = "updates") -> tuple:
    """Per seed, an adaptive run's accuracy and the fixed-K curve's at its ``log(1 + updates)`` (or compute),
    and (for the paired test noise) their per-example results, the curve's with its accuracy's weights (``None``
    if a run kept none): ``(seeds, adaptive, fixed, outside, dropped, adaptive_examples, fixed_examples)``."""
    fixed = [q for q in rows_ if q["group"] == "frontier" and q["family"] == "fixed" and q["status"] == "completed"
             and math.isfinite(q["test"])]
    x_of = (lambda q: math.log1p(q["updates"])) if axis == "updates" else (lambda q: q["cost"]["total"])
    found, outside, dropped = [], 0, 0  # beyond the curve: left out (on compute, above it: the costliest K)
    for row in sorted(R.select(rows_, group="frontier", family=family, value=value), key=lambda q: q["seed"]):
        pts = [q for q in fixed if q["seed"] == row["seed"]]
        if row["status"] != "completed" or not math.isfinite(row["test"]) or len(pts) < 2:
            dropped += 1
            continue
        x, ux = x_of(row), np.unique([x_of(q) for q in pts])
        beyond = x < ux[0] - 1e-12 or x > ux[-1] + 1e-12
        outside += beyond
        if beyond and (x < ux[0] - 1e-12 or axis == "updates"):
            continue
        w, at = [np.interp(x, ux, e) for e in np.eye(ux.size)], [[q for q in pts if x_of(q) == u] for u in ux]
        mix = lambda key: sum(wk * np.mean([np.asarray(q[key], np.float64) for q in g], axis=0) for wk, g in zip(w, at))
        found.append((row["seed"], float(row["test"]), float(mix("test")), row.get("correct"),
                      None if any(q.get("correct") is None for q in pts) else mix("correct")))
    seeds, a, b, ea, eb = (list(v) for v in zip(*found)) if found else ([] for _ in range(5))
    known = bool(seeds) and all(e is not None for e in (*ea, *eb))
    return seeds, a, b, outside, dropped, *((np.asarray(ea, np.float64), np.stack(eb)) if known else (None, None))


def judge_rows(rows_, *, n_test: int, steps: int, margin: float, stable_lr: Optional[float], stable_K) -> list:
    """``frontier.<family><value>.updates|compute``: within ``margin`` of the fixed-K curve
    (``close``; a diverged run counts against it); ``timing.<family><value>``: most updates in the
    first half; ``stability.<family>``: divergence rate below the fixed period's by :data:`PREVENTS`."""
    out = []
    for family, value in [s for s in settings_of(rows_) if s[0] != "fixed"]:
        key, name = f"{family}{value:g}", value_label(family, value)
        done = [r for r in R.select(rows_, group="frontier", family=family, value=value) if r["status"] == "completed"]
        ups = f"{np.mean([r['updates'] for r in done]):.1f} feature updates on average" if done else ""
        for axis in ("updates", "compute"):
            seeds, a, b, outside, dropped, ea, eb = matched(rows_, family, value, axis=axis)
            gap = V.paired_gap(a, b, n_test=n_test, examples=None if ea is None else (ea, eb))  # one test set's noise
            out.append(V.judge(f"frontier.{key}.{axis}", f"{name} ends where fixed K does at the same "
                               f"{'number of feature updates' if axis == 'updates' else 'compute'}",
                               "not in the paper (future work)", gap,
                               "close", margin, dropped=dropped,
                               detail=ups + (f"; {outside} seed(s) beyond the fixed-K range" if outside else ""),
                               measured=f"{name} {V.fmt_mean(a)}, fixed K {V.fmt_mean(b)}" if seeds else "no seed"))
        fr = [float(np.mean(np.asarray(r["relin_steps"]) <= steps / 2)) for r in done if r["relin_steps"]]
        out.append(V.judge(f"timing.{key}", f"{name}: most updates in the first half of the run", "not in the paper",
                           V.paired_gap(fr, [0.5] * len(fr)), "exceeds",
                           measured=f"{V.fmt_mean(fr)} of them in the first half" if fr else "no run relinearised",
                           detail=f"{len(done) - len(fr)} run(s) without updates" if len(done) > len(fr) else ""))
    fixed = [r for r in rows_ if r["group"] == "stable" and r["family"] == "fixed"]
    ctl = [f"gradient descent (K=1) at this rate: {r['status']}" for r in rows_ if r["group"] == "control"]
    for family in ("loss", "kernel"):
        g = [r for r in rows_ if r["group"] == "stable" and r["family"] == family]
        claim = f"{family} drift prevents most divergences of fixed {K_label(stable_K)}"
        paper = "not in the paper (the k_sweeps chapter: large K diverges)"
        if stable_lr is None or not g or not fixed:
            out.append(V.stated(f"stability.{family}", claim, paper, "no candidate rate made K diverge", V.UNRESOLVED))
            continue
        k_f, k_s = sum(r["status"] != "completed" for r in fixed), sum(r["status"] != "completed" for r in g)
        out.append(V.judge(f"stability.{family}", claim, paper, V.proportion_gap(k_f, len(fixed), k_s, len(g)),
                           "exceeds", PREVENTS, detail=ctl[0] if ctl else "",
                           measured=f"lr {stable_lr:g}: diverged on {k_f} of {len(fixed)} seeds with fixed "
                                    f"{K_label(stable_K)}, {k_s} of {len(g)} with "
                                    f"{value_label(family, g[0]['value'])}"))
    return out


def claims(rec) -> list:
    r = rec.settings
    return judge_rows(rows(rec), n_test=S.n_test_judged(vars(r)), steps=int(r.steps), margin=float(r.close_margin),
                      stable_lr=rec.meta.get("stable_lr"), stable_K=R.as_K(r.stable_K))


def summary(rec) -> list:
    """Per frontier setting: rate, feature updates, checks and their share of the flops, accuracy."""
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


EXPERIMENT = register(Experiment(NAME, AdaptiveParams, run, version="2", summary=summary, claims=claims))

__all__ = ["AdaptiveParams", "AdaptiveState", "EXPERIMENT", "FAMILIES", "FrontierRuns", "MODES", "NAME", "PREVENTS",
           "SCALES", "claims", "cost_flops", "frontier_trainer", "judge_rows", "matched", "optimizer", "rows",
           "run", "run_cost", "schedule_in_state", "settings_of", "start", "summary", "value_label"]
