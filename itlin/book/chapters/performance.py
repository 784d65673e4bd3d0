"""What the chapter "Performance" (``book/performance.md``) prints and glues: the benchmark
results against their targets, the vmapped sweep against loops, the kernel-form Gauss-Newton
profile, the sharded sweep, and the device-hours of the recorded runs and of the papers' scale.

The benchmark files are read by :mod:`itlin.book.benchmarking`; the profiles are the JSON files
under ``benchmarks/profiles`` of the source checkout (:func:`profile`). Each ``*_lines`` function
returns the lines the chapter prints, each ``*_values`` function the glue of a section (``perf_``
names).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from IPython.display import Markdown

from .. import benchmarking as B
from .. import runner, store

__all__ = [
    "damping_lines", "damping_values", "floor_values", "gn_lines", "gn_values", "h100_sweep_lines",
    "mesh_lines", "mesh_values", "profile", "profiles_dir", "scale_report", "sweep_lines", "sweep_values",
    "targets_lines",
]


def profiles_dir() -> Path:
    """The folder of the measured profiles, ``benchmarks/profiles`` of the source checkout."""
    return store.source_checkout() / "benchmarks" / "profiles"


def profile(name: str) -> dict:
    """The profile ``benchmarks/profiles/<name>.json``, read."""
    return json.loads((profiles_dir() / f"{name}.json").read_text())


# ------------------------------------------------------------------------------ targets
def targets_lines(results: Sequence[Mapping]) -> list:
    """Per benchmark file: each measured ratio against its target, and the parts of a full-batch
    step where they were measured."""
    out = []
    for r in results:
        out.append(f"== {r['file']}")
        for key, (op, target) in B.TARGETS.items():
            if key in r:
                met = B.target_met(key, r[key])
                out.append(f"  {key:28s} {r[key]:7.2f}  target {op} {target:<5g} -> {'met' if met else 'MISSED'}")
        parts = r.get("fullbatch_components_ms")
        if parts:
            gd = parts["forward_and_backward"]
            lin = parts["stored_tangent_pass"] + parts["stored_transpose_pass"]
            out.append("  full-batch parts (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
            out.append(f"  GD = forward + backward = {gd:.1f} ms; linearised = tangent + transpose = {lin:.1f} ms"
                       f" (ratio {lin / gd:.2f}); forward alone is {parts['forward'] / gd:.0%} of a GD step")
    return out


def floor_values(by_label: Mapping) -> dict:
    """The glue of the step-time ratios: the 2-core CPU's ratios, their flop floors and targets
    (NaN and "(not measured)" where that machine has no floor), and what the H100 shows."""
    cpu = by_label.get("cpu-2core")
    out = {}
    if cpu is not None and "fullbatch_flop_floor" in cpu:
        out = {"perf_fb_target": B.TARGETS["fullbatch_lin_over_gd"][1], "perf_fb_floor": cpu["fullbatch_flop_floor"],
               "perf_fb_cpu": cpu["fullbatch_lin_over_gd"],
               "perf_mb_target": B.TARGETS["minibatch_lin_over_sgd"][1], "perf_mb_floor": cpu["minibatch_flop_floor"],
               "perf_mb_cpu": cpu["minibatch_lin_over_sgd"],
               "perf_fb_vs_floor": Markdown("below" if cpu["fullbatch_lin_over_gd"] < cpu["fullbatch_flop_floor"]
                                            else "above"),
               "perf_mb_vs_floor": Markdown("below" if cpu["minibatch_lin_over_sgd"] < cpu["minibatch_flop_floor"]
                                            else "above"),
               "perf_mb_met": Markdown("meets" if B.target_met("minibatch_lin_over_sgd", cpu["minibatch_lin_over_sgd"])
                                       else "misses"),
               "perf_fb_met": Markdown("meets" if B.target_met("fullbatch_lin_over_gd", cpu["fullbatch_lin_over_gd"])
                                       else "misses")}
    h100 = by_label.get("h100")
    if h100 is not None and "fullbatch_components_ms" in h100:
        hp = h100["fullbatch_components_ms"]
        out["perf_fb_gpu_text"] = Markdown(
            "On the H100 the order is reversed: the step that reuses the stored linearisation is "
            f"{h100['fullbatch_lin_over_gd']:.2f} times a GD step and the naive one "
            f"{h100['fullbatch_naive_over_gd']:.2f} times, so there a stored linearisation costs more than "
            f"recomputing it. Its transposed pass alone takes {hp['stored_transpose_pass']:.2f} ms, about what a "
            f"whole GD forward and backward takes ({hp['forward_and_backward']:.2f} ms); neither ratio meets the "
            f"target, and finding where the transposed pass loses on that device needs a profile on it.")
    else:
        out["perf_fb_gpu_text"] = Markdown("")
    if "perf_fb_target" not in out:
        for k in ("fb_target", "fb_floor", "fb_cpu", "mb_target", "mb_floor", "mb_cpu"):
            out[f"perf_{k}"] = math.nan
        for k in ("fb_vs_floor", "mb_vs_floor", "mb_met", "fb_met"):
            out[f"perf_{k}"] = Markdown("(not measured)")
    return out


# ------------------------------------------------------------------------------ the vmapped sweep
def sweep_lines(results: Sequence[Mapping]) -> list:
    """The table of the vmapped sweep's speed-up over a loop of runs and a loop of steps, per machine."""
    rows = [(r.get("label") or r["file"], r["sweep_runs"], r["sweep_speedup_over_loop"],
             r["sweep_speedup_over_stepwise_loop"]) for r in results if "sweep_speedup_over_loop" in r]
    return ([f"{'machine':<12} {'runs':>5} {'vmap vs loop of runs':>21} {'vmap vs loop of steps':>22}"]
            + [f"{name:<12} {n:>5} {a:>20.1f}x {b:>21.1f}x" for name, n, a, b in rows])


def sweep_values(by_label: Mapping) -> dict:
    """The glue of the sweep's speed-up over a loop of runs on the CPU and on the H100 (NaN where not measured)."""
    cpu, gpu = by_label.get("cpu-2core"), by_label.get("h100")
    return {"perf_sweep_cpu": cpu["sweep_speedup_over_loop"] if cpu else math.nan,
            "perf_sweep_gpu": gpu["sweep_speedup_over_loop"] if gpu else math.nan}


def damping_lines(results: Sequence[Mapping]) -> list:
    """Per benchmark file: the largest difference between the vmapped sweep and the loop, per damping."""
    out = []
    for r in results:
        by = r.get("sweep_difference_by_damping")
        if not by:
            out.append(f"{r['file']}: made before the per-damping record (largest difference over all runs "
                       f"{r.get('sweep_max_abs_difference', float('nan')):.3g})")
            continue
        out.append(f"== {r['file']}")
        out.append(f"{'damping':>9} {'bounded runs':>13} {'cond(K + lambda I)':>19} {'max |vmap - loop|':>18}")
        for lam, d in by.items():
            out.append(f"{lam:>9} {d['bounded_runs']:>13} {d['median_condition_number_at_init']:>19.3g} "
                       f"{d['max_abs_difference']:>18.2e}")
    return out


def damping_values(results: Sequence[Mapping]) -> dict:
    """The glue of the sweep's agreement with the loop: the largest difference where the kernel is
    well conditioned (below 1e3) and ill conditioned (above 1e6), and the runs that were unbounded."""
    if not any(r.get("sweep_difference_by_damping") for r in results):
        return {f"perf_{k}": math.nan for k in ("well_cond_diff", "ill_cond_diff", "unbounded")}
    diffs = [(float(lam), d["median_condition_number_at_init"], d["max_abs_difference"])
             for r in results for lam, d in (r.get("sweep_difference_by_damping") or {}).items()
             if math.isfinite(d["max_abs_difference"])]
    well = [d for lam, c, d in diffs if c < 1e3]
    ill = [d for lam, c, d in diffs if c > 1e6]
    unbounded = sum(r["sweep_runs"] // len(r["sweep_difference_by_damping"]) - d["bounded_runs"]
                    for r in results for d in (r.get("sweep_difference_by_damping") or {}).values())
    return {"perf_well_cond_diff": max(well) if well else math.nan,
            "perf_ill_cond_diff": max(ill) if ill else math.nan, "perf_unbounded": unbounded}


# ------------------------------------------------------------------------------ Gauss-Newton on the GPU
def gn_lines(prof: Mapping) -> list:
    """The parts of one kernel-form damped Gauss-Newton step and the whole steps, from the H100 profile."""
    parts, step = prof["gn_parts_ms"], prof["gn_steps_ms"]
    out = [f"{prof['device']}, JAX {prof['jax']}: one kernel-form damped GN step at N = 500, M = 5000, float64"]
    for k in ("closed_form_ntk", "eigh", "cholesky_solve", "vjp_JT_z", "J_JT", "jacrev_jacobian"):
        out.append(f"  {k:<18} {parts[k]:8.2f} ms")
    for k, label in (("kernel_eigh", "kernel step, eigh"),
                     ("kernel_cholesky_inverse_squaring", "kernel step, Cholesky + squaring"), ("naive", "naive step")):
        out.append(f"  {label:<34} {step[k]:6.2f} ms  speed-up {prof['gn_speedup'][k]:5.2f}x  "
                   f"relative difference to naive {prof['gn_steps_relative_difference_to_naive'][k]:.1e}")
    return out


def gn_values(prof: Mapping) -> dict:
    """The glue of the Gauss-Newton profile: the decomposition's share of the step and the ceiling
    it sets, the two kernel steps' speed-ups, the target, and the smallest-eigenvalue variants."""
    parts, step = prof["gn_parts_ms"], prof["gn_steps_ms"]
    v = parts["sigma_min_variants"]
    squaring = prof["gn_speedup"]["kernel_cholesky_inverse_squaring"]
    return {"perf_eigh_ms": parts["eigh"], "perf_gn_step_ms": step["kernel_eigh"],
            "perf_eigh_share": 100 * (parts["eigh"] / step["kernel_eigh"]),
            "perf_gn_ceiling": step["naive"] / parts["eigh"],
            "perf_gn_gpu_eigh": prof["gn_speedup"]["kernel_eigh"], "perf_gn_gpu_sq": squaring,
            "perf_gn_sq_ms": step["kernel_cholesky_inverse_squaring"],
            "perf_gn_sq_diff": prof["gn_steps_relative_difference_to_naive"]["kernel_cholesky_inverse_squaring"],
            "perf_gn_target": B.TARGETS["gn_speedup_over_naive"][1],
            "perf_gn_met": Markdown("meets" if B.target_met("gn_speedup_over_naive", squaring) else "does not meet"),
            "perf_jacobi_ms": v["eigh_jacobi"]["ms"], "perf_f32_err": 100 * v["eigvalsh_float32"]["relative_error"],
            "perf_sq_ms": v["inverse_squaring"]["ms"], "perf_sq_err": v["inverse_squaring"]["relative_error"]}


# ------------------------------------------------------------------------------ the sharded sweep
def h100_sweep_lines(sw: Mapping) -> list:
    """The H100's runs per second of the measured sweep, and Figure 9 at the paper's scale projected over devices."""
    one, proj = sw["meshes"]["1"], sw["projection"]
    out = [f"{sw['machine']['device']}: {one['runs_per_second']:,.0f} runs/s of the measured sweep, "
           f"{1e3 * one['device_seconds_per_run']:.3f} ms of device time per run",
           f"Figure 9 at the paper's scale ({proj['gn_steps']:,} GN steps per run), projected; {proj['assumes']}:",
           f"{'devices':>8} {'wall (s)':>9} {'speed-up':>9} {'efficiency':>11}  limited by"]
    for row in proj["rows"]:
        out.append(f"{row['devices']:>8} {row['wall_seconds']:>9.1f} {row['speedup']:>9.1f} {row['efficiency']:>11.2f}  "
                   f"{row['limited_by']}")
    return out


def mesh_lines(cpu: Mapping) -> list:
    """The sweep on 1 to 8 virtual CPU devices: runs per second, overhead, compile time and the
    largest difference to one device."""
    out = [f"{'devices':>8} {'runs/s':>8} {'overhead':>9} {'compile (s)':>12} {'max |diff| vs 1 device':>23}"]
    for d, m in sorted(cpu["meshes"].items(), key=lambda kv: int(kv[0])):
        out.append(f"{d:>8} {m['runs_per_second']:>8.1f} {m['overhead_fraction']:>8.1%} {m['compile_seconds']:>12.1f} "
                   f"{m['max_abs_difference']:>23.1e}")
    return out


def mesh_values(cpu: Mapping) -> dict:
    """The glue of the sweep on 8 virtual CPU devices: whether it gives the 1-device numbers, and its overhead."""
    eight = cpu["meshes"]["8"]
    return {"perf_cpu8_identical": Markdown("bit for bit" if eight["bit_identical"] else
                                            f"to {eight['max_abs_difference']:.1e}"),
            "perf_cpu8_overhead": 100 * eight["overhead_fraction"]}


# ------------------------------------------------------------------------------ device-hours
_FIGURE_NAMES = {"fig2_k_sweep": "Figure 2's", "fig3_augmentation": "Figure 3's", "fig8_adam": "Figure 8's",
                 "fig9_damping": "Figure 9's"}


def scale_report(prof: Mapping) -> tuple:
    """``(lines, glue)``: the device-hours of every recorded run; the paper-scale runs of Figures
    2, 3, 8 and 9 priced from the H100's measured steps (CIFAR-10 steps as
    :data:`~itlin.book.benchmarking.CIFAR_OVER_FASHION` times Fashion-MNIST's); and their wall time
    on 1, 8 and 64 GPUs. Figure 9 is its recorded run's time."""
    from ..experiments.main import fig2_k_sweep, fig3_augmentation, fig8_adam

    records = runner.recorded_runs()
    lines = [f"{'recorded run':<46} {'device':<26} {'wall':>8} {'device-hours':>13}"]
    recorded_hours = {}
    for rec in records:
        name = rec.path.relative_to(runner.recorded_dir())
        h = rec.info["wall_seconds"] / 3600
        recorded_hours[rec.experiment] = recorded_hours.get(rec.experiment, 0.0) + h
        lines.append(f"{str(name):<46} {rec.info.get('device', '?')[:26]:<26} {rec.info['wall_seconds']:>7.0f}s {h:>13.3f}")

    t = prof["trainers"]
    fashion = np.mean([t["fig3 fashion K=1 aug"]["ms_per_step"], t["fig3 fashion K=inf aug"]["ms_per_step"],
                       t["fig8 fashion Adam K=inf"]["ms_per_step"]])
    mini_ms = float(fashion) * B.CIFAR_OVER_FASHION
    rows = []
    for name, params in (("fig2_k_sweep", fig2_k_sweep.Fig2Params), ("fig3_augmentation", fig3_augmentation.Fig3Params),
                         ("fig8_adam", fig8_adam.Fig8Params)):
        pp = params.paper_resolved()  # the scale="paper" parameters (on CIFAR-10), resolved without running
        n_train = 50_000 if pp["dataset"] == "cifar10" else pp["n_train"]
        step_ms = {"mini": mini_ms, "full": B.full_batch_step_ms(mini_ms, n_train, pp.get("batch_size") or 256)}
        inv = B.run_inventory(name, pp)
        rows.append((name, inv, B.projected_device_hours(name, pp, step_ms), step_ms))
    fig9 = next(r for r in records if r.experiment == "fig9_damping")
    rows.append(("fig9_damping", [("GN", int(np.size(fig9["test_rmse"])), fig9.meta["resolved"]["gn_steps"])],
                 fig9.info["wall_seconds"] / 3600, None))
    lines.append(f"\nAt the papers' scale on one H100 (CIFAR-10 steps priced at {B.CIFAR_OVER_FASHION:.2f}x the measured "
                 f"Fashion-MNIST steps, {mini_ms:.2f} ms; a full-batch step as 50,000 / 256 mini-batch steps):")
    lines.append(f"{'figure':<18} {'runs x steps':<44} {'device-hours':>13}")
    for name, inv, h, _ in rows:
        desc = ", ".join(f"{n} {kind} x {s:,}" for kind, n, s in inv)
        lines.append(f"{name:<18} {desc:<44} {h:>13.2f}")
    total = sum(row[2] for row in rows)
    lines.append(f"{'total':<18} {'':<44} {total:>13.1f}   (the paper: about "
                 f"{B.PAPER_GPU_HOURS['Goldwaser and Ge (all experiments)']:,})")
    biggest = max(rows, key=lambda row: row[2])
    glue = {"perf_total_hours": float(total), "perf_recorded_hours": sum(recorded_hours.values()),
            "perf_biggest": Markdown(_FIGURE_NAMES[biggest[0]]), "perf_biggest_hours": float(biggest[2]),
            "perf_fb_steps": B.full_batch_step_ms(1.0, 50_000, 256)}

    # Each figure's runs are independent, so several GPUs divide them; no GPU finishes before its
    # longest run, which no device count shortens (Figure 9's vmapped sweep is projected above).
    lines.append("\nWall time at the papers' scale on 1, 8 and 64 GPUs (hours; a device's runs one after another):")
    lines.append(f"{'figure':<18} {'1 GPU':>9} {'8 GPUs':>9} {'64 GPUs':>9}  at 64 GPUs limited by")
    walls = {}
    for name, inv, h, step_ms in rows[:3]:
        run_s = [steps * step_ms[kind] / 1e3 for kind, n, steps in inv for _ in range(n)]
        proj = B.project_wall_time(float(np.mean(run_s)), len(run_s), largest_run_seconds=max(run_s))
        walls[name] = proj
        lines.append(f"{name:<18} " + " ".join(f"{r['wall_seconds'] / 3600:>9.1f}" for r in proj)
                     + f"  {proj[-1]['limited_by']}")
    slowest = max(walls, key=lambda k: walls[k][-1]["wall_seconds"])
    glue.update({"perf_wall64_fig": Markdown(_FIGURE_NAMES[slowest].replace("'s", "")),
                 "perf_wall64_hours": walls[slowest][-1]["wall_seconds"] / 3600,
                 "perf_wall64_limit": Markdown(walls[slowest][-1]["limited_by"]),
                 "perf_wall64_speedup": walls[slowest][-1]["speedup"]})
    return lines, glue
