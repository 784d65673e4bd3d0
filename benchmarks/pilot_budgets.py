"""Pilot the training budgets of planned records on selection seeds the plans never use.

A confirmatory record fixes its settings before its runs; its budget (the steps in which K=1 fits
its training set, the premise of every "large K ends like K=1" claim) is chosen here, on seeds
90000-90001, from K=1's train accuracy at a quarter, half, three quarters and all of a long run
(with a constant learning rate, a run's accuracy after s steps is that of a run of s steps):

    python benchmarks/pilot_budgets.py ladder 1000x16x3200 4000x16x3200 --results /tmp/pilot
    python benchmarks/pilot_budgets.py fig4 4:0.01 4:0.003 --results /tmp/pilot   # width:lr_no_bn

``ladder`` runs a rung (``<n_train>x<channels>x<max steps>``) of the ladder experiment with K=1
alone (``updates=[steps - 1]`` shares K=1's period, so no other run is made); ``fig4`` runs Fig. 4's
K=1 without and with batch norm for 3,000 steps. Each prints one JSON line per rung or setting with
the train accuracies and the budget: the first evaluation at which every seed reaches ``--fits``
(default 99.5%, above the 98% premise, so that a plan's many seeds clear it too), or ``null``.
A run already in ``--results`` is loaded, not made again.

``benchmarks/results/pilot_budgets.jsonl`` holds the lines of the pilots made so far (on this
project's 2-core CPU, shared with other work, so their wall times are not benchmarks): the
ladder's rungs 1000, 2000 and 4000 examples at 16 channels and 32 and 128 channels at 1,000
examples (16,000 examples not yet piloted), and Fig. 4 at widths 4 and 8.
"""

from __future__ import annotations

import argparse
import json
import sys

SEED = 90000  # the selection seeds: 90000 and 90001


def _budget(curves: dict, fits: float):
    """The first step at which every run's train accuracy reaches ``fits`` (``None`` if never)."""
    steps = next(iter(curves.values()))["step"]
    for i, s in enumerate(steps):
        if s > 0 and all(c["train"][i] >= fits for c in curves.values()):
            return int(s)
    return None


def _curves(rec, prefix: str = "") -> dict:
    out = {}
    for tag in rec.runs:
        if tag.startswith(prefix):
            h = rec.history(tag)
            out[tag] = {"step": h.eval_array("step").tolist(), "train": h.eval_array("train/accuracy").round(4).tolist()}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["ladder", "fig4"])
    ap.add_argument("settings", nargs="+", help="ladder: <n_train>x<channels>x<max steps>; fig4: <width>:<lr_no_bn>")
    ap.add_argument("--results", required=True, help="results folder")
    ap.add_argument("--fits", type=float, default=0.995, help="train accuracy every seed must reach (default 0.995)")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    from itlin.book import limit_blas_threads, runner

    limit_blas_threads()
    for spec in args.settings:
        if args.what == "ladder":
            steps = int(spec.split("x")[2])
            rec = runner.run("ladder", {"rungs": [spec], "updates": [steps - 1], "seeds": 2, "seed": SEED,
                                        "data_seed": SEED}, results_dir=args.results, progress=False)
            curves = _curves(rec)
            line = {"rung": spec, "budget": _budget(curves, args.fits)}
        else:
            width, lr = spec.split(":")
            rec = runner.run("fig4_resnet", {"Ks": [1], "steps": 3000, "eval_every": 500, "seeds": 2, "seed": SEED,
                                             "bn_modes": ["recalibrate"], "width": int(width), "lr_no_bn": float(lr)},
                             results_dir=args.results, progress=False)
            curves = _curves(rec)
            line = {"setting": f"width {width}, lr_no_bn {lr}",
                    "budget_no_bn": _budget({k: v for k, v in curves.items() if k.startswith("no BN")}, args.fits),
                    "budget_bn": _budget({k: v for k, v in curves.items() if k.startswith("BN")}, args.fits)}
        print(json.dumps({**line, "runs": curves, "wall_seconds": round(rec.info["wall_seconds"]),
                          "device": rec.info.get("device"), "git_commit": rec.info.get("git_commit")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
