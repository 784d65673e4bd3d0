"""The speed benchmark's vocabulary: what each measured ratio means and its target.

``benchmarks/run.py`` measures and writes the JSON files in ``benchmarks/results/``; the
Performance chapter of the book reads them back with :func:`load_results` and shows them with
:func:`summary_table`. Keeping the names and targets here keeps the two in step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping

#: (key, what it measures, comparison, target) in the order the book shows them.
METRICS = [
    ("fullbatch_lin_over_gd",
     "full-batch linearised step reusing the phase's linearisation / GD step (LeNet-1D, MNIST-1D, 4000 examples)",
     "<=", 0.8),
    ("fullbatch_flop_floor",
     "XLA's flop count of that linearised step (tangent + transpose passes) / of the GD step: the arithmetic "
     "floor", None, None),
    ("fullbatch_naive_over_gd",
     "naive linearised step (a JVP through the network every step) / GD step, same setting", None, None),
    ("minibatch_lin_over_sgd", "mini-batch (256) linearised step / SGD step, same model", "<=", 1.4),
    ("minibatch_flop_floor",
     "XLA's flop count of one linearised mini-batch gradient (JVP, then transpose) / of one SGD gradient",
     None, None),
    ("gn_speedup_over_naive",
     "naive damped Gauss-Newton step (jacrev, J J^T, eigh) / kernel-form step with the closed-form NTK "
     "(N=500, d=10, M=5000, float64; the faster of its eigh and Cholesky + inverse-squaring configurations, "
     "gn_method)", ">=", 5.0),
    ("sweep_speedup_over_loop",
     "quintic damped-GN sweep (50 seeds x 8 dampings): Python loop of compiled runs / one vmapped program",
     ">=", 10.0),
    ("sweep_speedup_over_stepwise_loop",
     "the same sweep: Python loop over runs and steps (one compiled GN step per call) / vmapped program",
     None, None),
    ("quintic_closed_form_ntk_speedup",
     "quintic GN step with the Jacobian kernel / with the closed-form MLP kernel", None, None),
]

TARGETS = {k: (op, v) for k, _, op, v in METRICS if op is not None}


def target_met(key: str, value: float):
    """True/False against the key's target, or None when the key has no target."""
    if key not in TARGETS or value is None or not math.isfinite(value):
        return None
    op, v = TARGETS[key]
    return value <= v if op == "<=" else value >= v


def load_results(folder=None) -> list:
    """Every benchmark JSON file in ``folder`` (default: the repository's ``benchmarks/results``,
    wherever the caller runs from), each with its file name under ``"file"``."""
    if folder is None:
        from .store import source_checkout

        root = source_checkout()
        if root is None:
            raise FileNotFoundError("the benchmark results live in benchmarks/results of a source checkout of itlin; "
                                    "pass the folder explicitly.")
        folder = root / "benchmarks" / "results"
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        rec["file"] = path.name
        out.append(rec)
    if not out:
        raise FileNotFoundError(f"no benchmark results (*.json) in {folder}; run "
                                "`python benchmarks/run.py --json benchmarks/results/<machine>.json`.")
    return out


def machine_label(rec: dict) -> str:
    """A one-line description of the machine a result file came from."""
    m = rec.get("machine", {})
    label = rec.get("label") or rec["file"].rsplit(".", 1)[0]
    return f"{label} ({m.get('device', '?')}, {m.get('cpu_count', '?')} CPU cores, JAX {m.get('jax', '?')}, {m.get('date', '?')})"


def summary_table(results: list) -> str:
    """A Markdown table: one row per metric, one column per result file."""
    head = "| measure | target | " + " | ".join(r.get("label") or r["file"] for r in results) + " |"
    rule = "|" + "---|" * (2 + len(results))
    rows = [head, rule]
    for key, text, op, v in METRICS:
        cells = []
        for r in results:
            val = r.get(key)
            if val is None:
                cells.append("—")
                continue
            met = target_met(key, val)
            mark = "" if met is None else (" ✓" if met else " ✗ missed")
            cells.append(f"{val:.2f}{mark}")
        target = f"{op} {v:g}" if op else "(reference)"
        rows.append(f"| **{key}**: {text} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def times_table(results: list) -> str:
    """Absolute medians behind the ratios (milliseconds; seconds for the sweep), per file."""
    keys = [("fullbatch_ms", "ms"), ("minibatch_ms", "ms"), ("gn_ms", "ms"), ("quintic_gn_step_ms", "ms"),
            ("sweep_seconds", "s")]
    rows = ["| file | measurement | median |", "|---|---|---|"]
    for r in results:
        for key, unit in keys:
            for name, val in (r.get(key) or {}).items():
                rows.append(f"| {r['file']} | {key.rsplit('_', 1)[0]} / {name} | {val:.3g} {unit} |")
    return "\n".join(rows)


__all__ = ["CIFAR_OVER_FASHION", "METRICS", "PAPER_GPU_HOURS", "TARGETS", "full_batch_step_ms", "load_results",
           "machine_label", "project_wall_time", "projected_device_hours", "run_inventory", "summary_table",
           "target_met", "times_table"]


def project_wall_time(per_run_seconds: float, runs: int, *, devices=(1, 8, 64), compile_seconds: float = 0.0,
                      largest_run_seconds=None, gather_seconds: float = 0.0) -> list:
    """Projected wall time of a sweep of ``runs`` runs spread over each number of ``devices``.

    ``per_run_seconds`` is the amortised device time of one run (a sweep's wall time on one device
    divided by its runs, measured at the per-device batch the projection assumes: a GPU given too
    few runs per device is not filled, and its per-run cost rises). Ideal scaling is
    ``per_run_seconds * runs / d``; what breaks it, each row says in seconds:

    * ``padding_seconds``: the grid padded to a multiple of ``d`` (``ceil(runs / d)`` runs per device);
    * ``largest_run_excess_seconds``: no device finishes before its slowest run, so the wall time is
      at least ``largest_run_seconds`` (one run alone), however many devices there are;
    * ``compile_seconds`` and ``gather_seconds``: compiling once and bringing the results back to
      every process, which more devices do not shorten.

    ``limited_by`` names the largest of these terms and the ideal compute (``"compute"``: scaling
    still pays); ``speedup`` and ``efficiency`` are against the same sweep on one device.

    >>> rows = project_wall_time(2.0, 100, compile_seconds=5.0, largest_run_seconds=10.0)
    >>> [(r["devices"], r["wall_seconds"], r["limited_by"]) for r in rows]
    [(1, 205.0, 'compute'), (8, 31.0, 'compute'), (64, 15.0, 'largest run')]
    >>> round(rows[2]["speedup"], 1), round(rows[2]["efficiency"], 2)
    (13.7, 0.21)
    """
    per_run_seconds, runs = float(per_run_seconds), int(runs)
    if not (per_run_seconds >= 0 and runs >= 1):
        raise ValueError(f"need per_run_seconds >= 0 and runs >= 1, got {per_run_seconds} and {runs}")
    largest = 0.0 if largest_run_seconds is None else float(largest_run_seconds)
    one = compile_seconds + max(per_run_seconds * runs, largest) + gather_seconds
    rows = []
    for d in devices:
        from ..core._checks import check_positive_int
        d = check_positive_int("devices", d)
        ideal = per_run_seconds * runs / d
        per_device = -(-runs // d)
        padded = per_run_seconds * per_device
        compute = max(padded, largest)
        wall = compile_seconds + compute + gather_seconds
        terms = {"compute": ideal, "padding": padded - ideal, "largest run": compute - padded,
                 "compile": float(compile_seconds), "gather": float(gather_seconds)}
        rows.append({
            "devices": d, "runs_per_device": per_device, "ideal_seconds": ideal, "wall_seconds": wall,
            "padding_seconds": padded - ideal, "largest_run_excess_seconds": compute - padded,
            "compile_seconds": float(compile_seconds), "gather_seconds": float(gather_seconds),
            "speedup": one / wall if wall > 0 else math.inf,
            "efficiency": (one / wall) / d if wall > 0 else math.nan,
            "limited_by": max(terms, key=terms.get),
        })
    return rows


# ------------------------------------------------------------------------------ device-hours
#: the papers' own compute budgets (GPU-hours), as they state them
PAPER_GPU_HOURS = {"Goldwaser and Ge (all experiments)": 1500, "Arbel et al. (all experiments)": 3600}

#: how a CIFAR-10 step is priced from the measured Fashion-MNIST steps of the same 2-D LeNet: the
#: convolutions scale with the image area, (32 / 28)^2 (the first layer's 3 input channels ignored)
CIFAR_OVER_FASHION = (32 / 28) ** 2


def run_inventory(name: str, r: Mapping) -> list:
    """``[(kind, runs, steps_per_run)]`` of a headline experiment at resolved settings ``r``: the
    training runs it makes, grouped by the kind of step (``"full"`` batch or ``"mini"``-batch).
    Mirrors the ``run`` of fig2_k_sweep / fig3_augmentation / fig8_adam.

    >>> run_inventory("fig3_augmentation", {"Ks": [1, 1000], "steps": 4000, "seeds": 5})
    [('mini', 10, 4000)]
    """
    seeds = int(r["seeds"])
    if name == "fig2_k_sweep":
        full = (len(r["Ks"]) + (1 if r.get("inf_lr_multiplier") else 0)) * seeds
        return [("full", full, int(r["steps"])), ("mini", len(r["mini_Ks"]) * seeds, int(r["steps"]) * int(r["rescale"]))]
    if name == "fig3_augmentation":
        return [("mini", len(r["Ks"]) * seeds, int(r["steps"]))]
    if name == "fig8_adam":
        return [("mini", 3 * seeds, int(r["steps"]))]  # SGD, Adam, and Adam on solved linearisations
    raise KeyError(f"no run inventory for {name!r}")


def projected_device_hours(name: str, r: Mapping, step_ms: Mapping[str, float]) -> float:
    """Device-hours of experiment ``name`` at settings ``r`` with ``step_ms[kind]`` milliseconds per
    step of each kind (evaluations and compilation not counted)."""
    return sum(runs * steps * step_ms[kind] for kind, runs, steps in run_inventory(name, r)) / 3.6e6


def full_batch_step_ms(minibatch_ms: float, n_train: int, batch_size: int = 256) -> float:
    """A full-batch step priced as ``n_train / batch_size`` mini-batch steps (the GPU is compute
    bound at these sizes, so time grows with the examples a step touches)."""
    return minibatch_ms * n_train / batch_size
