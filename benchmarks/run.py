"""Speed benchmark of itlin against the naive baselines (issue 7).

    python benchmarks/run.py --json benchmarks/results/cpu.json

Everything is measured in one process on one device; the keys are ratios of median step times
after warm-up (so they survive a noisy, shared machine better than seconds do), plus compile
seconds per benchmark and the absolute medians for reference:

* ``fullbatch_lin_over_gd``: a full-batch linearised step reusing the phase's stored
  linearisation / a full-batch GD step (1D LeNet, MNIST-1D, 4000 examples). Target <= 0.8.
* ``fullbatch_naive_over_gd``: the naive linearised step (a JVP through the network every step,
  what neural-tangents' ``linearize`` does) / a GD step. Reference.
* ``minibatch_lin_over_sgd``: a mini-batch (256) linearised step / an SGD step. Target <= 1.4.
* ``gn_speedup_over_naive``: the naive damped Gauss-Newton step (``jacrev`` Jacobian, ``J J^T``,
  ``eigh``) / itlin's kernel-form step with the closed-form NTK, at Arbel et al.'s scale (N=500,
  d=10, M=5000, P=55,000). Target >= 5. itlin's step is timed in two configurations, ``eigh``
  (``kernel_closed_form``) and a Cholesky solve with ``sigma_min`` by inverse squaring, no
  eigendecomposition (``kernel_cholesky_inverse_squaring``; the fast one on a GPU, whose
  ``eigh`` is latency-bound); the key uses the faster on this device, named by ``gn_method``.
* ``sweep_speedup_over_loop``: the quintic damped-GN sweep (50 seeds x 8 damping values) run one
  by one in a Python loop (one compiled run per call) / the same runs as one vmapped program.
  Target >= 10. ``sweep_speedup_over_stepwise_loop`` uses the weaker baseline of a Python loop
  over runs and GN steps (one compiled step per call). Both use the closed-form MLP kernel;
  ``quintic_closed_form_ntk_speedup`` is what that kernel buys per step over Jacobians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

import itlin
from itlin import __version__, data, models
from itlin.book import limit_blas_threads
from itlin.book.benchmarking import TARGETS, target_met
from itlin.core import gauss_newton as gn
from itlin.core.linearise import linearised_apply
from itlin.core.losses import get_loss


CHUNKS_PER_CALL = 5  # full batch: chunks per timed call


def _block(tree):
    return jax.block_until_ready(tree)


def _median_step(fn, state, steps: int, repeats: int):
    """Median over ``repeats`` of (time of ``steps`` calls of ``fn`` / steps); ``fn`` returns state."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            state = fn(state)
        _block(state)
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times), state


def _interleaved(runs: dict, repeats: int, per_call: int = 1, warm_each: bool = False):
    """Median seconds per step of each ``name: (fn, state)``, timing the runs in turn (A, B, C,
    A, B, C, ...) so that drift in the machine's speed affects them alike. Each timed call is
    one ``fn(state)`` covering ``per_call`` steps; the first call of each is the warm-up, whose
    excess over the median is reported as compile seconds. ``warm_each`` adds an untimed call
    before each timed one: for runs so large that one evicts the other's memory and caches
    (the naive Gauss-Newton step moves ~1 GB; measured on a 2-core CPU, the kernel step timed
    right after it took 5-6x its time in a row, with the code of either version)."""
    states, first, times = {}, {}, {name: [] for name in runs}
    for name, (fn, st) in runs.items():
        first[name], states[name] = _first_call(fn, st)
    for _ in range(repeats):
        for name, (fn, _) in runs.items():
            if warm_each:
                states[name] = _block(fn(states[name]))
            t = time.perf_counter()
            states[name] = _block(fn(states[name]))
            times[name].append((time.perf_counter() - t) / per_call)
    med = {name: statistics.median(v) for name, v in times.items()}
    compile_s = {name: max(0.0, first[name] - med[name] * per_call) for name in runs}
    return med, compile_s


def _flops(fn, *args) -> float:
    """Floating-point operations XLA counts in one call of ``fn`` (its cost analysis)."""
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return float(cost.get("flops", float("nan")))


def _first_call(fn, state):
    t = time.perf_counter()
    state = _block(fn(state))
    return time.perf_counter() - t, state


def bench_fullbatch(repeats: int, steps: int):
    ds = data.load("mnist1d")
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    model = models.lenet1d()
    p0, _ = model.init(jax.random.PRNGKey(0), x[:2])
    opt = optax.sgd(1e-2)
    out = {}
    gd = itlin.iterative_linearisation(model, opt, 1)
    lin = itlin.iterative_linearisation(model, opt, 10 ** 9)
    # The naive linearised step: a JVP through the network at every step, no stored
    # linearisation. It runs in the same kind of loop the trainer uses on this device (one
    # compiled loop per chunk, or one compiled call per step for conv nets on the CPU).
    f = model.bind()
    loss = get_loss("cross_entropy")

    def naive_step(carry):
        params, anchor, ostate = carry
        g = jax.grad(lambda p: loss(linearised_apply(f, anchor, p, x), y))(params)
        upd, ostate = opt.update(g, ostate, params)
        return optax.apply_updates(params, upd), anchor, ostate

    if itlin.device_loop(lin, lin.init(p0), x):
        naive_loop = jax.jit(lambda c: jax.lax.fori_loop(0, steps, lambda i, c: naive_step(c), c))
    else:
        one = jax.jit(naive_step)

        def naive_loop(c):
            for _ in range(steps):
                c = one(c)
            return c

    # each timed call runs CHUNKS_PER_CALL chunks of `steps` steps through one itlin.run call, as
    # fit does between evaluations (the phase's linearisation is made once per call)
    def chunk(tr):
        def fn(st):
            st, _ = itlin.run(tr, st, x, y, CHUNKS_PER_CALL * steps, chunk_size=steps)
            return st
        return fn

    def naive_calls(c):
        for _ in range(CHUNKS_PER_CALL):
            c = naive_loop(c)
        return c

    runs = {"gd": (chunk(gd), gd.init(p0)), "lin": (chunk(lin), lin.init(p0)),
            "naive": (naive_calls, (p0, p0, opt.init(p0)))}
    med, comp = _interleaved(runs, repeats, per_call=CHUNKS_PER_CALL * steps)
    out["fullbatch_ms"] = {k: 1e3 * v for k, v in med.items()}
    out["fullbatch_compile_seconds"] = comp
    # where the time goes: the parts of a GD step and of a linearised step with stored residuals
    r0 = f(p0, x)
    lin_out, lin_jvp = jax.jit(lambda a: jax.linearize(lambda q: f(q, x), a))(p0)
    delta = jax.tree_util.tree_map(lambda a: 1e-2 * a, p0)
    parts = {
        "forward": (jax.jit(lambda p: f(p, x)), (p0,)),
        "forward_and_backward": (jax.jit(jax.grad(lambda p: jnp.vdot(f(p, x), r0))), (p0,)),
        "stored_tangent_pass": (jax.jit(lambda jv, d: jv(d)), (lin_jvp, delta)),
        "stored_transpose_pass": (jax.jit(lambda jv, a, r: jax.linear_transpose(jv, a)(r)), (lin_jvp, p0, r0)),
    }
    comp_ms = {}
    for name, (fn, args) in parts.items():
        _block(fn(*args))
        comp_ms[name], _ = _median_step(lambda _s, fn=fn, args=args: fn(*args), None, steps, repeats)
        comp_ms[name] *= 1e3
    out["fullbatch_components_ms"] = comp_ms
    # the floor set by arithmetic: XLA's flop count of a linearised step with stored residuals
    # (tangent + transpose passes) over a GD step (forward + backward)
    flops = {name: _flops(fn, *args) for name, (fn, args) in parts.items()}
    out["fullbatch_flops"] = flops
    out["fullbatch_flop_floor"] = (flops["stored_tangent_pass"] + flops["stored_transpose_pass"]) \
        / flops["forward_and_backward"]
    out["fullbatch_lin_over_gd"] = med["lin"] / med["gd"]
    out["fullbatch_naive_over_gd"] = med["naive"] / med["gd"]
    return out


def bench_minibatch(repeats: int, steps: int):
    ds = data.load("mnist1d")
    x, y = jnp.asarray(ds.x_train), jnp.asarray(ds.y_train)
    model = models.lenet1d()
    p0, _ = model.init(jax.random.PRNGKey(0), x[:2])
    opt = optax.sgd(1e-2, momentum=0.9)
    runs = {}
    for name, K in (("sgd", 1), ("lin", 1000)):
        tr = itlin.iterative_linearisation(model, opt, K)

        def fn(st, tr=tr):
            st, _ = itlin.run(tr, st, x, y, steps, batch_size=256, chunk_size=steps)
            return st

        runs[name] = (fn, tr.init(p0))
    med, comp = _interleaved(runs, repeats, per_call=steps)
    # the arithmetic floor: XLA's flop count of one linearised mini-batch gradient (the anchor's
    # primal and tangent on the batch by one JVP, then the transpose) over one SGD gradient
    f, loss = model.bind(), get_loss("cross_entropy")
    xb, yb = x[:256], y[:256]
    flops = {"sgd": _flops(jax.grad(lambda p: loss(f(p, xb), yb)), p0),
             "lin": _flops(jax.grad(lambda p, a: loss(linearised_apply(f, a, p, xb), yb)), p0, p0)}
    return {"minibatch_lin_over_sgd": med["lin"] / med["sgd"],
            "minibatch_flops": flops, "minibatch_flop_floor": flops["lin"] / flops["sgd"],
            "minibatch_ms": {k: 1e3 * v for k, v in med.items()},
            "minibatch_compile_seconds": comp}


def bench_gauss_newton(repeats: int):
    """Float64: Arbel et al. train to a loss of 1e-7 with damping at the NTK's smallest
    eigenvalue, where float32 kernels are too ill-conditioned for the two methods to agree."""
    with jax.enable_x64(True):
        return _bench_gauss_newton(repeats)


def _bench_gauss_newton(repeats: int):
    ds = data.teacher_student(n_train=500, n_test=10)
    x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
    model = models.mean_field(width=5000, tau0=1.0)
    p0, _ = model.init(jax.random.PRNGKey(0), x[:2])
    # a non-zero readout, as after a few steps (at v = 0 the hidden-weight Jacobian vanishes)
    p0 = {"u": jnp.asarray(p0["u"], jnp.float64),
          "v": 0.1 * jax.random.normal(jax.random.PRNGKey(1), p0["v"].shape, jnp.float64)}
    f = model.bind()
    damping = gn.ArbelDamping(alpha=1.0, eps0=1e-7)
    loss = get_loss("squared", "mean")
    flat0, unravel = jax.flatten_util.ravel_pytree(p0)

    @jax.jit
    def naive(params):
        flat, unr = jax.flatten_util.ravel_pytree(params)
        J = jax.jacrev(lambda v: f(unr(v), x).reshape(-1))(flat)  # (N, P)
        K = J @ J.T
        s, V = jnp.linalg.eigh(K)
        lam = damping.value(s[0])
        g = jax.grad(lambda o: loss(o, y))(f(params, x)).reshape(-1)
        z = V @ ((V.T @ g) / (s + lam))
        return unr(flat - J.T @ z)

    ntk = lambda p, xx: models.mean_field_ntk(p, xx)

    @jax.jit
    def fast(params):
        new, _ = gn.gauss_newton_step(f, params, x, y, loss="squared", reduction="mean", hessian="identity",
                                      damping=damping, ntk_fn=ntk)
        return new

    @jax.jit
    def fast_no_eigh(params):  # sigma_min without an eigendecomposition, a Cholesky solve
        new, _ = gn.gauss_newton_step(f, params, x, y, loss="squared", reduction="mean", hessian="identity",
                                      damping=damping, ntk_fn=ntk, solve="cholesky", eigmin="inverse_squaring")
        return new

    # each agrees with the naive step: a check that the benchmark compares equal work
    a = jax.flatten_util.ravel_pytree(naive(p0))[0]

    def rel(fn):
        return float(jnp.linalg.norm(a - jax.flatten_util.ravel_pytree(fn(p0))[0]) / jnp.linalg.norm(a - flat0))

    itlin_steps = {"kernel_closed_form": fast, "kernel_cholesky_inverse_squaring": fast_no_eigh}
    runs = {name: (lambda _p, fn=fn: fn(p0), p0) for name, fn in (("naive", naive), *itlin_steps.items())}
    med, comp = _interleaved(runs, repeats, warm_each=True)
    method = min(itlin_steps, key=lambda k: med[k])
    return {"gn_speedup_over_naive": med["naive"] / med[method],
            "gn_method": method,
            "gn_ms": {k: 1e3 * v for k, v in med.items()},
            "gn_step_relative_difference": rel(fast),
            "gn_step_relative_difference_inverse_squaring": rel(fast_no_eigh),
            "gn_compile_seconds": comp}


def bench_sweep(repeats: int, **kw):
    """Float64, as the quintic damping experiment runs (tiny damping needs it)."""
    with jax.enable_x64(True):
        return _bench_sweep(repeats, **kw)


def _bench_sweep(repeats: int, seeds: int = 50, dampings=(1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                 gn_steps: int = 10):
    ds = data.quintic()
    x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
    model = models.mlp(num_outputs=1, width=50, depth=5)
    f = model.bind()
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    params = jax.vmap(lambda k: model.init(k, x[:2])[0])(keys)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), params)
    lams = jnp.asarray(dampings, jnp.float64)

    def one(p, lam):
        p, trace = gn.gauss_newton_fit(f, p, x, y, gn_steps, damping=lam, ntk_fn=model.ntk_fn, reduction="sum",
                                       solve="cholesky")
        return f(p, x)

    single = jax.jit(one)
    batched = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))
    step = jax.jit(lambda p, lam: gn.gauss_newton_step(f, p, x, y, damping=lam, ntk_fn=model.ntk_fn, reduction="sum",
                                                       solve="cholesky")[0])

    def run_params(s):
        return jax.tree_util.tree_map(lambda a: a[s], params)

    def loop(_):  # one compiled run (all its GN steps) per call
        return _block([single(run_params(s), lam) for s in range(seeds) for lam in lams])

    def stepwise(_):  # a Python loop over runs and over steps, one compiled GN step per call
        outs = []
        for s in range(seeds):
            for lam in lams:
                p = run_params(s)
                for _ in range(gn_steps):
                    p = step(p, lam)
                outs.append(f(p, x))
        return _block(outs)

    def vm(_):
        return _block(batched(params, lams))

    # same numbers both ways (on runs that stayed bounded; tiny damping can blow up)
    ref = np.stack([np.asarray(o) for o in loop(None)]).reshape(seeds, len(dampings), -1)
    got = np.asarray(vm(None)).reshape(seeds, len(dampings), -1)
    bounded = np.all(np.isfinite(ref) & (np.abs(ref) < 100), axis=-1)
    max_diff = float(np.max(np.abs(ref[bounded] - got[bounded]))) if bounded.any() else float("nan")
    # Where the two differ, and why: per damping, the largest difference over the bounded runs and
    # the conditioning of the first step's system (K + lambda I, K the sum-loss NTK at init). Ten
    # steps of Gauss-Newton amplify rounding differences (vmapped and looped programs fuse and
    # order float64 operations differently) by about that condition number per step.
    eig0 = np.stack([np.linalg.eigvalsh(np.asarray(model.ntk_fn(run_params(s), x))) for s in range(seeds)])
    by_damping = {}
    for d, lam in enumerate(dampings):
        ok = bounded[:, d]
        diff = np.abs(ref[:, d] - got[:, d])[ok]
        cond = (eig0[:, -1] + lam) / (np.maximum(eig0[:, 0], 0.0) + lam)
        by_damping[f"{lam:g}"] = {"max_abs_difference": float(diff.max()) if diff.size else float("nan"),
                                  "bounded_runs": int(ok.sum()),
                                  "median_condition_number_at_init": float(np.median(cond))}
    med, comp = _interleaved({"loop": (loop, None), "stepwise_loop": (stepwise, None), "vmap": (vm, None)}, repeats)
    # what the closed-form MLP kernel buys per Gauss-Newton step, against Jacobians
    p0 = run_params(0)
    generic = jax.jit(lambda p: gn.gauss_newton_step(f, p, x, y, damping=1.0, reduction="sum", solve="cholesky")[0])
    structured = jax.jit(lambda p: gn.gauss_newton_step(f, p, x, y, damping=1.0, ntk_fn=model.ntk_fn,
                                                        reduction="sum", solve="cholesky")[0])
    ms = {}
    for name, fn in (("jacobian_ntk", generic), ("closed_form_ntk", structured)):
        _block(fn(p0))
        ms[name], _ = _median_step(lambda p, fn=fn: fn(p0), p0, 20, repeats)
    return {"sweep_speedup_over_loop": med["loop"] / med["vmap"],
            "sweep_speedup_over_stepwise_loop": med["stepwise_loop"] / med["vmap"],
            "sweep_seconds": med,
            "sweep_runs": seeds * len(dampings), "sweep_gn_steps": gn_steps,
            "sweep_max_abs_difference": max_diff, "sweep_bounded_runs": int(bounded.sum()),
            "sweep_difference_by_damping": by_damping,
            "quintic_gn_step_ms": {k: 1e3 * v for k, v in ms.items()},
            "quintic_closed_form_ntk_speedup": ms["jacobian_ntk"] / ms["closed_form_ntk"],
            "sweep_compile_seconds": comp}


def machine() -> dict:
    dev = jax.devices()[0]
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0], "jax": jax.__version__,
            "itlin": __version__, "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
            "date": datetime.date.today().isoformat()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed chunk (full batch)")
    ap.add_argument("--only", nargs="*", choices=["fullbatch", "minibatch", "gn", "sweep"])
    ap.add_argument("--label", default=None, help="a name for the machine (e.g. 'cpu-2core', 'h100')")
    args = ap.parse_args(argv)
    limit_blas_threads()
    only = set(args.only or ["fullbatch", "minibatch", "gn", "sweep"])
    res = {"machine": machine(), "label": args.label}
    t0 = time.perf_counter()
    if "fullbatch" in only:
        res.update(bench_fullbatch(args.repeats, args.steps))
    if "minibatch" in only:
        res.update(bench_minibatch(2 * args.repeats + 1, 100))
    if "gn" in only:
        res.update(bench_gauss_newton(args.repeats))
    if "sweep" in only:
        res.update(bench_sweep(max(1, args.repeats // 2)))
    res["compile_seconds"] = {k[:-len("_compile_seconds")]: v for k, v in res.items() if k.endswith("_compile_seconds")}
    for k in list(res):
        if k.endswith("_compile_seconds"):
            del res[k]
    res["targets"] = {k: {"target": f"{op} {v}", "met": target_met(k, res[k])}
                      for k, (op, v) in TARGETS.items() if k in res}
    res["total_seconds"] = time.perf_counter() - t0
    text = json.dumps(res, indent=2, sort_keys=True)
    print(text)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
