"""Run one experiment with given parameters and store its record (for recorded runs kept with the
book, e.g. on a lent GPU).

    python benchmarks/record.py fig2_k_sweep '{"scale": "default", "channels": 50}' --results DIR

The record lands in ``DIR/<experiment>/<hash>/`` (``record.json`` and ``results.npz``), which is
what :func:`itlin.book.runner.open_record` reads; the record stores the parameters, the device, the
versions and the wall time, so this command with the same JSON re-makes it. To keep it with the
book, convert it to an open netCDF-4 file: ``python -m itlin.book.opendata DIR/<experiment>/<hash>
book/recorded/<name>`` (a folder of parts, one sub-folder each, converts to one file; ``--tally``
keeps a many-seed record's per-example results as counts over seeds, for the experiments in
``itlin.book.opendata.TALLY_READERS``).

To pause a record, send it SIGINT or SIGTERM (``kill -INT PID``, Ctrl-C, a scheduler's preemption):
it saves a checkpoint of the run in progress and exits with status 130; the same command resumes it.
This holds for a record started in the background too (``nohup python benchmarks/record.py ... &``),
whose SIGINT the shell would otherwise ignore.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("params", help="the parameters as a JSON object")
    ap.add_argument("--results", required=True, help="results folder")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress lines reach a log file as they happen
    from itlin.book import limit_blas_threads, runner

    limit_blas_threads()  # as every chapter's setup() does: a record's numbers are then the chapters' to the bit
    runner.pause_on_signals()
    try:
        rec = runner.run(args.experiment, json.loads(args.params), results_dir=args.results, progress=False)
    except KeyboardInterrupt as stop:
        print(f"[itlin] paused ({stop or 'interrupted'}): the same command resumes from the checkpoints in "
              f"{args.results}", file=sys.stderr, flush=True)
        return 130
    print(json.dumps({"path": str(rec.path), "status": rec.status, "wall_seconds": rec.info.get("wall_seconds"),
                      "runs": {k: {"status": v["status"], "final": v.get("final")} for k, v in rec.runs.items()}},
                     indent=1, default=str))
    return 0 if rec.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
