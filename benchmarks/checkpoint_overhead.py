"""Wall-time overhead of checkpointing a training run through the runner.

One real training run -- the main paper's LeNet (1-D variant: 2 conv layers of 50 channels,
kernel 5, dense 120-84) on MNIST-1D, mini-batch iterative linearisation with K=10 and Adam --
is run through :func:`itlin.book.runner.run` with a checkpoint every ``--every`` steps (default 200)
and with checkpoints off, in one process. A warm-up run compiles everything first (the trainer
is shared between runs so that no timed run compiles), then the two settings alternate for
``--repeats`` rounds, each in a fresh results folder, and the script prints the median wall
times and their ratio.

    python benchmarks/checkpoint_overhead.py [--steps 1000] [--every 200] [--batch-size 32] [--repeats 3]

Besides the ratio of wall times (noisy on a shared machine), it reports the time spent inside
the checkpoint saves themselves, which is the overhead measured directly.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ITLIN_QUIET", "1")

import jax  # noqa: E402
import optax  # noqa: E402

from dataclasses import dataclass  # noqa: E402

import itlin  # noqa: E402
from itlin.book import limit_blas_threads, provenance, runner  # noqa: E402
from itlin.book.experiments import Experiment, Params, Period, param, register  # noqa: E402

_CACHE = {}


def _setup(p):
    key = (p["K"], p["batch_size"], p["learning_rate"], p["n_train"])
    if key not in _CACHE:
        from itlin.data import load
        from itlin.models import get_model

        ds = load("mnist1d", n_train=p["n_train"], n_test=500)
        model = get_model("lenet1d", num_outputs=10)
        params, state = model.init(jax.random.PRNGKey(0), ds.x_train[:2])
        trainer = itlin.iterative_linearisation(model, optax.adam(p["learning_rate"]), p["K"])
        _CACHE[key] = (ds, trainer, params, state)
    return _CACHE[key]


def run_bench(p, ctx):
    ds, trainer, params, state = _setup(p)
    res = ctx.fit("lenet1d", trainer, trainer.init(params, state), ds.x_train, ds.y_train, p["steps"],
                  batch_size=p["batch_size"], eval_sets={"test": (ds.x_test, ds.y_test)}, eval_every=p["eval_every"],
                  seed=p["seed"])
    return {"loss": res.history.arrays()["loss"], "test_accuracy": res.history.eval_array("test/accuracy")}


@dataclass(frozen=True)
class BenchParams(Params):
    K: Period = param(10)
    batch_size: int = param(32, min=1)
    learning_rate: float = param(1e-3, gt=0)
    n_train: int = param(4000, min=1)
    steps: int = param(1000, min=1)
    eval_every: int = param(500, min=1)


register(Experiment("bench_checkpoint_overhead", BenchParams, run_bench,
                    doc="Benchmark only: LeNet-1D on MNIST-1D, K=10, Adam, mini-batches."))


SAVES = {"n": 0, "seconds": 0.0}
_save_fit = runner.RunContext._save_fit


def _counting_save_fit(self, *a, **k):
    t0 = time.perf_counter()
    try:
        return _save_fit(self, *a, **k)
    finally:
        SAVES["n"] += 1
        SAVES["seconds"] += time.perf_counter() - t0


runner.RunContext._save_fit = _counting_save_fit


def timed(params, every, root: Path):
    SAVES.update(n=0, seconds=0.0)
    with tempfile.TemporaryDirectory(dir=root) as d:
        t0 = time.perf_counter()
        rec = runner.run("bench_checkpoint_overhead", params, results_dir=d, force=True,
                         checkpoint_every_steps=every, checkpoint_every_seconds=None, progress=False, verbose=False)
        wall = time.perf_counter() - t0
    assert rec.status == "completed", rec.status
    rec.saves, rec.save_seconds = SAVES["n"], SAVES["seconds"]
    return wall, rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=200, help="checkpoint every so many steps")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    limit_blas_threads()
    params = {"steps": args.steps, "batch_size": args.batch_size}
    root = Path(tempfile.mkdtemp(prefix="itlin-bench-"))

    t, _ = timed(params, args.every, root)  # warm-up: compiles the trainer and the evaluation
    print(f"warm-up (compile + run): {t:.2f} s", flush=True)
    with_ck, without_ck, in_saves = [], [], []
    for i in range(args.repeats):
        a, rec = timed(params, args.every, root)
        b, ref = timed(params, None, root)
        with_ck.append(a)
        without_ck.append(b)
        in_saves.append(rec.save_seconds)
        same = all((rec.arrays[k] == ref.arrays[k]).all() for k in rec.arrays if not k.endswith("seconds"))
        print(f"round {i + 1}: with checkpoints {a:.2f} s ({rec.saves} saves, {1e3 * rec.save_seconds:.1f} ms "
              f"in them), without {b:.2f} s; same numbers: {same}", flush=True)
    m_with, m_without = statistics.median(with_ck), statistics.median(without_ck)
    m_saves = statistics.median(in_saves)
    n_ck = rec.saves  # at chunk ends (chunks of 256 steps, cut at evaluations) >= every steps apart, + the end
    out = {
        "model": "lenet1d (channels 50, 50; dense 120, 84)", "data": "mnist1d, 4000 train, 500 test",
        "K": 10, "batch_size": args.batch_size, "steps": args.steps, "checkpoint_every_steps": args.every,
        "checkpoints_per_run": n_ck, "trainer_chunk_size": 256, "repeats": args.repeats,
        "median_seconds_with": m_with, "median_seconds_without": m_without, "ratio": m_with / m_without,
        "median_seconds_in_saves": m_saves, "ms_per_checkpoint": 1e3 * m_saves / max(1, n_ck),
        "save_fraction_of_run": m_saves / m_with,
        "device": provenance._device()["device"], "cpu_count": os.cpu_count(),
    }
    print(f"median wall time: with checkpoints every {args.every} steps {m_with:.3f} s, without {m_without:.3f} s")
    print(f"ratio of medians with/without: {out['ratio']:.4f}; time inside the {n_ck} checkpoint saves: "
          f"{1e3 * m_saves:.1f} ms ({out['ms_per_checkpoint']:.1f} ms each), "
          f"{100 * out['save_fraction_of_run']:.3f}% of the run")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
