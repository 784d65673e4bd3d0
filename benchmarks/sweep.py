"""A sweep spread over devices with :func:`itlin.core.sweep.sweep`: wall time, overhead, agreement.

    python benchmarks/sweep.py [--seeds 16] [--dampings 8] [--gn-steps 50] [--json PATH]

The sweep is the main paper's Fig. 9 at a small size: damped Gauss-Newton (float64, Cholesky,
the MLP's closed-form kernel) on the quintic, the 5x50 ReLU MLP, ``seeds`` initialisations
(:func:`itlin.book.experiments.main.fig9_damping.init_params`) x ``dampings`` damping values
log-spaced in [1e-4, 1e3]; with ``--train-tol 0`` (the default) every run takes all
``gn-steps`` steps, so every configuration does the same work.

Each measurement runs in a child process, since the number of devices is fixed when JAX starts:

* on a CPU: one child with 1 device and one with 8 virtual devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=8``; ``--cpu-devices`` changes the list).
  The virtual devices share the machine's cores, so this measures the machinery (overhead,
  agreement), not a speed-up;
* on GPUs (or TPUs): one child on the real devices, the sweep on the first device alone and on
  all of them; there the runs per second are the number to read.

For each mesh: ``sweep_seconds`` (median wall time of a whole :func:`sweep` call after the
first, which compiles: ``compile_seconds`` is the first call's excess), ``program_seconds``
(median time of the compiled program alone on inputs already on the devices), their difference
``overhead_seconds`` (padding, placing the grid, bringing results back), ``runs_per_second``,
``single_run_seconds`` (one run alone on one device: no number of devices makes a sweep faster
than that) and the largest difference from the 1-device results. A projection to 1, 8 and 64
devices of this kind (:func:`itlin.book.benchmarking.project_wall_time`) is made for
``--project-runs`` runs of ``--project-steps`` steps (default: Fig. 9 at the paper's scale, 200
seeds x 19 dampings, at most 20,000 steps), assuming time linear in steps.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a source checkout without installing itlin


# ------------------------------------------------------------------------------ child: measure
def _problem(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from itlin import data, gauss_newton_fit, models
    from itlin.book.experiments.main.fig9_damping import init_params
    from itlin.core.sweep import grid_product

    ds = data.quintic()
    model = models.mlp(num_outputs=1, width=args.width, depth=args.depth, activation="relu")
    x, y = jnp.asarray(ds.x_train, jnp.float64), jnp.asarray(ds.y_train, jnp.float64)
    xt, yt = jnp.asarray(ds.x_test, jnp.float64), jnp.asarray(ds.y_test, jnp.float64)
    inits = init_params(model, x, args.seeds, 0)
    apply = model.bind()
    tol = 0.5 * x.shape[0] * float(args.train_tol) ** 2

    def fn(point):
        p0 = jax.tree_util.tree_map(lambda a: a[point["seed"]], inits)
        p, trace = gauss_newton_fit(apply, p0, x, y, args.gn_steps, damping=point["damping"], learning_rate=1.0,
                                    tol=tol, ntk_fn=model.ntk_fn, reduction="sum", solve="cholesky")
        return {"train_rmse": jnp.sqrt(jnp.mean((apply(p, x) - y) ** 2)),
                "test_rmse": jnp.sqrt(jnp.mean((apply(p, xt) - yt) ** 2)),
                "steps": trace.steps, "diverged": trace.diverged}

    grid, _ = grid_product(seed=np.arange(args.seeds), damping=np.geomspace(1e-4, 1e3, args.dampings))
    return fn, grid


def _time(call, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def child(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from itlin.core.sweep import _vmapped, sweep, sweep_mesh

    fn, grid = _problem(args)
    g = len(grid["seed"])
    devices = jax.devices()
    # a CPU child measures its (virtual) devices all together; a GPU child one device and all of them
    sizes = [len(devices)] if devices[0].platform == "cpu" or len(devices) == 1 else [1, len(devices)]
    stats = {"platform": devices[0].platform, "device_kind": getattr(devices[0], "device_kind", ""),
             "device_count": len(devices), "runs": g, "meshes": {}}
    for k in sizes:
        mesh = sweep_mesh(devices[:k])
        t = time.perf_counter()
        out = sweep(fn, grid, mesh=mesh)
        first = time.perf_counter() - t
        # the compiled program alone, on inputs already on the devices (the same compiled program)
        sharding = NamedSharding(mesh, PartitionSpec("sweep"))
        padded_len = -(-g // k) * k
        padded = {n: np.concatenate([v, np.repeat(v[-1:], padded_len - g, axis=0)]) for n, v in grid.items()}
        placed = jax.device_put(padded, sharding)
        jax.block_until_ready(_vmapped(fn, sharding, placed))
        # timed in turn (sweep, program, sweep, ...) so that a shared machine's drift hits both alike
        pairs = [(_time(lambda: sweep(fn, grid, mesh=mesh), 1),
                  _time(lambda: jax.block_until_ready(_vmapped(fn, sharding, placed)), 1)) for _ in range(args.repeats)]
        seconds = statistics.median(p[0] for p in pairs)
        program = statistics.median(p[1] for p in pairs)
        np.savez(os.path.join(args.child_dir, f"out{k}.npz"), **out)
        stats["meshes"][str(k)] = {
            "devices": k, "sweep_seconds": seconds, "program_seconds": program,
            "overhead_seconds": seconds - program, "overhead_fraction": (seconds - program) / seconds,
            "compile_seconds": max(first - seconds, 0.0), "runs_per_second": g / seconds,
            "device_seconds_per_run": seconds * k / g, "steps_run": int(np.sum(out["steps"])),
            "diverged_runs": int(np.sum(out["diverged"]))}
    # one run alone, on one device: the floor of any sweep's wall time
    one = {n: v[-1:] for n, v in grid.items()}  # the largest damping: all runs take the same steps here
    mesh1 = sweep_mesh(devices[:1])
    sweep(fn, one, mesh=mesh1)
    stats["single_run_seconds"] = _time(lambda: sweep(fn, one, mesh=mesh1), args.repeats)
    with open(os.path.join(args.child_dir, "stats.json"), "w") as fh:
        json.dump(stats, fh)


# ------------------------------------------------------------------------------ parent: compare
def _run_child(args, cpu_devices=None):
    env = dict(os.environ, ITLIN_QUIET="1")
    if cpu_devices is not None:  # the host-platform device count; it does not change GPUs
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={cpu_devices}"])
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--child-dir", args.child_dir,
           "--seeds", str(args.seeds), "--dampings", str(args.dampings), "--gn-steps", str(args.gn_steps),
           "--train-tol", str(args.train_tol), "--width", str(args.width), "--depth", str(args.depth),
           "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"the child with {cpu_devices or 'the real'} devices failed:\n"
                 f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    with open(os.path.join(args.child_dir, "stats.json")) as fh:
        return json.load(fh)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--dampings", type=int, default=8)
    ap.add_argument("--gn-steps", type=int, default=50)
    ap.add_argument("--train-tol", type=float, default=0.0, help="stop a run below this train RMSE (0: never)")
    ap.add_argument("--width", type=int, default=50)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpu-devices", default="1,8", help="virtual CPU device counts to compare on a CPU")
    ap.add_argument("--project-runs", type=int, default=200 * 19)
    ap.add_argument("--project-steps", type=int, default=20000)
    ap.add_argument("--label", default=None)
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from itlin.book import limit_blas_threads

    limit_blas_threads()
    if args.child:
        return child(args)

    import numpy as np

    from itlin.book.benchmarking import project_wall_time

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        args.child_dir = tmp
        first = _run_child(args, cpu_devices=1)  # on a GPU machine: the real devices, 1 and all
        children = [first]
        if first["platform"] == "cpu":
            for n in (int(v) for v in args.cpu_devices.split(",")):
                if n != 1:
                    children.append(_run_child(args, cpu_devices=n))
        meshes = {}
        for c in children:
            meshes.update(c["meshes"])
        ref = dict(np.load(os.path.join(tmp, "out1.npz")))
        for k, m in meshes.items():
            out = dict(np.load(os.path.join(tmp, f"out{k}.npz")))
            m["max_abs_difference"] = max(float(np.max(np.abs(out[n].astype(float) - ref[n].astype(float))))
                                          for n in ref)
            m["bit_identical"] = all(np.array_equal(out[n], ref[n]) for n in ref)
    base = meshes["1"]
    for m in meshes.values():
        m["speedup_over_one_device"] = base["sweep_seconds"] / m["sweep_seconds"]
    scale = args.project_steps / args.gn_steps
    widest = meshes[max(meshes, key=int)]
    projection = project_wall_time(base["device_seconds_per_run"] * scale, args.project_runs,
                                   compile_seconds=base["compile_seconds"],
                                   largest_run_seconds=first["single_run_seconds"] * scale,
                                   gather_seconds=max(widest["overhead_seconds"], 0.0))
    import jax  # only now: the parent never held a device while the children ran

    res = {
        "label": args.label,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                    "jax": jax.__version__, "device": f"{first['platform']}:{first['device_kind']}",
                    "devices": first["device_count"], "date": datetime.date.today().isoformat()},
        "sweep": {"seeds": args.seeds, "dampings": args.dampings, "gn_steps": args.gn_steps,
                  "train_tol": args.train_tol, "width": args.width, "depth": args.depth, "runs": first["runs"],
                  "dtype": "float64"},
        "meshes": meshes,
        "single_run_seconds": first["single_run_seconds"],
        "projection": {"runs": args.project_runs, "gn_steps": args.project_steps,
                       "assumes": "time linear in GN steps; per-run time of this device at this per-device batch",
                       "rows": projection},
        "total_seconds": time.perf_counter() - t0,
    }
    text = json.dumps(res, indent=2, sort_keys=True)
    print(text)
    for k, m in sorted(meshes.items(), key=lambda kv: int(kv[0])):
        print(f"{k:>3} device(s): {m['sweep_seconds']:.3f} s per sweep ({m['runs_per_second']:.1f} runs/s), "
              f"program {m['program_seconds']:.3f} s, overhead {m['overhead_seconds']:.3f} s, compile "
              f"{m['compile_seconds']:.1f} s, max |diff| vs 1 device {m['max_abs_difference']:.2e}"
              f"{' (bit for bit)' if m['bit_identical'] else ''}", file=sys.stderr)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
