"""Early stopping on the default workload: records read, time, and scores within ε.

Usage::

    python benchmarks/bench_early_stop.py                 # 29,696 windows, 512 units, 190 hyps
    python benchmarks/bench_early_stop.py --records 2048  # smaller
    DNI_LAB_BENCH_MODEL=standin python benchmarks/bench_early_stop.py  # untrained LSTM

Two cold ``dl.inspect`` runs with ``corr`` (fresh hypothesis caches, the model
placed once): a full scan (``eps=None``) and early stopping at ``eps`` (DeepBase's
0.025). It prints the records each read, their times, the share of scores within
``eps`` of the full-data value, and how many pairs early stopping left open (and
why). Targets (issue 11, item 4): at most 25% of the records, at least 95% of the
scores within ε. It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
# Every run here pays its own forward pass: a repeated block must not come from the
# models' behavior memo (bench_warm_query.py measures that on purpose).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from benchmarks.run_benchmarks import inspect, score_matrix  # noqa: E402
from benchmarks.workload import build_workload  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    # set here, not on import: tests import the benchmarks
    os.environ.setdefault("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=29_696)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--eps", type=float, default=0.025)
    ap.add_argument("--quick", action="store_true", help="quick model variant")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    wl = build_workload(args.records, args.hidden, args.quick)
    for part, src in wl.sources.items():
        print(f"{part}: {src}")
    mem = 8 << 30
    full, t_full = inspect(wl, wl.records, ["corr"], None,
                           cache=dl.HypothesisCache(directory=False, max_bytes=mem))  # fmt: skip
    es, t_es = inspect(wl, wl.records, ["corr"], args.eps,
                       cache=dl.HypothesisCache(directory=False, max_bytes=mem))  # fmt: skip
    hids = full["hid"].unique(maintain_order=True).to_list()
    r_full = score_matrix(full, args.hidden, hids)
    r_es = score_matrix(es, args.hidden, hids)
    both = np.isfinite(r_full) & np.isfinite(r_es)
    within = float(np.mean(np.abs(r_full - r_es)[both] <= args.eps))
    read = int(es["n_records"].max())
    reasons = es.filter(pl.col("reason").is_not_null())["reason"].str.split(":").list.first()
    res = {
        "records": len(wl.records), "units": args.hidden, "hypotheses": len(hids),
        "eps": args.eps, "sources": wl.sources,
        "full_scan_s": t_full, "early_stop_s": t_es, "early_stop_records_read": read,
        "share_records_read": read / len(wl.records), "share_within_eps": within,
        "pairs": int(es.height), "pairs_with_reason": reasons.value_counts().to_dicts(),
        "load_average": os.getloadavg(),
    }  # fmt: skip
    print(f"full scan: {len(wl.records):,} records in {t_full:.1f} s; early stopping at eps="
          f"{args.eps}: {read:,} records ({read / len(wl.records):.0%}, target <= 25%) in "
          f"{t_es:.1f} s ({t_full / t_es:.1f}x faster)")  # fmt: skip
    print(f"scores within eps of the full-data value: {within:.1%} of {int(both.sum()):,} "
          "(target >= 95%)")
    for row in res["pairs_with_reason"]:
        print(f"  {row['count']:,} pairs: {row['reason']}")
    print(f"load average {res['load_average']}")
    write_results(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
