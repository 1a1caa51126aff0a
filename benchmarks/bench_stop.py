"""How long Stop takes on the main job: ``corr`` + ``logreg`` on the SQL LSTM.

Usage::

    python benchmarks/bench_stop.py                 # the demo's model, Stop at 2..13 s
    python benchmarks/bench_stop.py --quick         # the quick model, three Stops

Each trial starts the demo's inspection (the SQL grammar's parse-tree family, 128
units, eps 0.025) in the background, presses Stop (``run.cancel()``, what the live
table's button does) after a delay, and times how long the run takes to end with
its partial frame. The delays are spread so that Stops land in every phase of a
block: hypotheses, extraction, the measures' updates and the probe's Newton steps.
Target (issue 13): a cancel acts within about a second. It asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from hypotheses.grammars import sql as grammar  # noqa: E402
from hypotheses.workloads import sql as workload  # noqa: E402


def trial(model: dl.Model, records: list, family, delay: float) -> dict:
    """Start the demo's inspection, Stop it after ``delay`` s, time the end of the run."""
    model.behavior_memo.clear()  # every trial pays its own forward passes
    run = dl.inspect(
        models=[model], hypotheses=[family], measures=["corr", "logreg"], data=records,
        units=[("lstm", "*")], eps=0.025, background=True,
    )  # fmt: skip
    time.sleep(delay)
    ended_before = run.done
    t0 = time.perf_counter()
    run.cancel()
    run.wait(60)
    took = time.perf_counter() - t0
    partial = run.result(partial=True)
    return {
        "delay_s": delay,
        "stop_s": took,
        "ended_before_stop": ended_before,
        "blocks": run.progress.blocks,
        "records_read": run.progress.records_read,
        "rows": partial.height,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="quick model, three Stops")
    ap.add_argument("--delays", type=float, nargs="+", default=None, help="seconds before Stop")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "stop.json")
    args = ap.parse_args(argv)
    delays = args.delays or ([1.0, 2.0, 3.0] if args.quick else
                             [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])  # fmt: skip
    module, encode, _ = workload.load(quick=args.quick, hidden=128)
    model = dl.Model(module, encode=encode, name="sql-lstm")
    records = workload.records(150 if args.quick else 1200, seed=10_007)
    family = grammar.family()
    trial(model, records[:64], family, 0.5)  # warm-up: imports, thread pools
    rows = [trial(model, records, family, float(d)) for d in delays]
    for r in rows:
        note = " (the run had already ended)" if r["ended_before_stop"] else ""
        print(f"Stop at {r['delay_s']:4.1f} s: run ended {r['stop_s']:.2f} s later, after "
              f"{r['blocks']} blocks ({r['records_read']:,} records){note}")  # fmt: skip
    stops = [r["stop_s"] for r in rows if not r["ended_before_stop"]]
    if stops:
        print(f"Stop latency over {len(stops)} trials: median {statistics.median(stops):.2f} s, "
              f"max {max(stops):.2f} s (target: about 1 s)")  # fmt: skip
    write_results(args.out, {"quick": args.quick, "trials": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
