"""How soon the user's own Ray task starts after a sharded run (issue 35, item 4).

Usage::

    python benchmarks/bench_user_task.py            # 3 runs, stored in results/user_task.json
    python benchmarks/bench_user_task.py --quick    # 1 run, nothing stored

A local Ray of 2 CPUs; ``dl.inspect(..., cluster=2)`` reads a small LSTM's units, then
two tasks of the user's are timed from submission to result: one asking for 1 CPU and one
asking for every CPU (it could not start while a worker held one). dni_lab's workers
reserve no CPU (``cluster/placement.py``) and stay alive for the next run, so nothing has
to be released first. Before any run, the same tasks are timed once as the reference
(their first call also starts Ray's worker process). Target: at most 1 s after a run.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402


class LM(nn.Module):
    """A small character LSTM (defined here: Ray's workers unpickle it by value)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(128, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)

    def forward(self, x):
        return self.lstm(self.emb(x))[0]


def encode(records):
    T = max(map(len, records))
    out = torch.zeros(len(records), T, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor([ord(c) % 128 for c in r])
    return out


def paren(record):
    return [c in "()" for c in record]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import ray

    rng = random.Random(0)
    records = ["".join(rng.choice("ab()") for _ in range(rng.randint(5, 30))) for _ in range(400)]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cpus = int(ray.cluster_resources()["CPU"])

    @ray.remote(num_cpus=1)
    def one_cpu():
        return 1

    @ray.remote(num_cpus=cpus)
    def every_cpu():
        return 1

    def timed(task) -> float:
        t = time.perf_counter()
        ray.get(task.remote(), timeout=120)
        return time.perf_counter() - t

    before = {"one_cpu_s": timed(one_cpu), "every_cpu_s": timed(every_cpu)}
    after = []
    for _ in range(1 if args.quick else args.runs):
        model = dl.Model(LM(), encode=encode, name="toy")
        t = time.perf_counter()
        dl.inspect(model, [dl.hypothesis(paren, name="paren")], ["corr"], records, eps=None,
                   block_size=20, cache=False, cluster=2)  # fmt: skip
        run_s = time.perf_counter() - t
        after.append({"run_s": run_s, "one_cpu_s": timed(one_cpu), "every_cpu_s": timed(every_cpu)})
        print(f"run {run_s:.1f} s; then a 1-CPU task {after[-1]['one_cpu_s']:.3f} s, a "
              f"{cpus}-CPU task {after[-1]['every_cpu_s']:.3f} s")  # fmt: skip
    worst = max(max(a["one_cpu_s"], a["every_cpu_s"]) for a in after)
    print(f"before any run: {before['one_cpu_s']:.3f} s and {before['every_cpu_s']:.3f} s; "
          f"slowest after a run: {worst:.3f} s (target <= 1 s)")  # fmt: skip
    ray.shutdown()
    command = " ".join(["python", "benchmarks/bench_user_task.py", *(argv or sys.argv[1:])])
    payload = {"command": command, "cpus": cpus, "before": before, "after": after,
               "worst_after_s": worst, "target_s": 1.0}  # fmt: skip
    out = args.out or (None if args.quick else REPO / "benchmarks" / "results" / "user_task.json")
    write_results(out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
