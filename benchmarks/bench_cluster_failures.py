"""What a lost node and a killed probe holder cost a sharded run (issue 35, item 8).

Usage::

    python benchmarks/bench_cluster_failures.py --tries 2  # results/cluster_failures.json

Runs ``tests/ray_failures_scenario.py`` (a head and two worker nodes of 1 CPU made on this
machine by ``ray.cluster_utils.Cluster``; ``corr`` and ``logreg`` over blocks above Ray's
inline limit) with ``--early``: a worker node removed after 2 shards and mid-run, the
probe holder's process killed after 2 shards and mid-run, ``--tries`` times each. It
stores each try's time to the frame, the shards dealt again, the held blocks read again
and the holders rebuilt, next to the same run undisturbed (actors up). Every try must end
with the one-process frame (the scenario checks it; the difference is stored too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "cluster_failures.json"))
    args = ap.parse_args(argv)
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "ray_failures_scenario.py"), "--tries",
         str(args.tries), "--early"], capture_output=True, text=True, timeout=3600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO / "tests",
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or not any(x.startswith("stats ") for x in lines):
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 1
    stats = json.loads(next(x for x in lines if x.startswith("stats "))[6:])
    base = stats["undisturbed_warm_s"]
    summary = {}
    for kind in ("node", "holder"):
        tries = stats[kind]
        good = [t for t in tries if t["outcome"] == "frame"]
        secs = [t["s"] for t in good]
        summary[kind] = {
            "tries": len(tries), "frames": len(good),
            "median_s": statistics.median(secs) if secs else None,
            "max_s": max(secs) if secs else None,
            "vs_undisturbed": statistics.median(secs) / base if secs else None,
            "shards_redealt": [t.get("shards_redealt", 0) for t in good],
            "held_shards_reread": [t.get("held_shards_reread", 0) for t in good],
            "holder_restarts": [t.get("holder_restarts", 0) for t in good],
            "max_diff": max((t["diff"] for t in good), default=None),
        }  # fmt: skip
        s = summary[kind]
        print(f"{kind}: {s['frames']} of {s['tries']} frames, median {s['median_s']} s "
              f"({s['vs_undisturbed']:.2f}x undisturbed {base} s), shards dealt again "
              f"{s['shards_redealt']}, held re-read {s['held_shards_reread']}")  # fmt: skip
    write_results(args.out, {"command": " ".join(["python", "benchmarks/bench_cluster_failures.py",
                                                  *(argv or sys.argv[1:])]),
                             "shards": stats["shards"], "undisturbed_s": stats["undisturbed_s"],
                             "undisturbed_warm_s": base, **summary})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
