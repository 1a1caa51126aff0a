"""One inspection sharded over Ray: time and efficiency with 1, 2, 4, ... workers.

Usage::

    python benchmarks/bench_cluster.py                  # DeepBase's default workload
    python benchmarks/bench_cluster.py --quick          # a smoke-test size
    python benchmarks/bench_cluster.py --workers 1,2,4,8,16 --json out.json
    python benchmarks/bench_cluster.py --address auto   # an existing cluster
    python benchmarks/bench_cluster.py --quick --nodes 1,2,3  # + multi-node clusters

The workload is ``benchmarks.workload`` (the SQL LSTM of 512 units over 29,696
windows, 190 parse-tree hypotheses; stand-ins where the real parts are missing), read
to the end (``eps=None``: every run does the same work) with ``corr`` (``--measures``
for others). Printed per
worker count: the run's wall time with workers already started, the speed-up over
one worker, the parallel efficiency ``t(1) / (w * t(w))``, the speed-up over the
single-process run (all cores, no Ray), the one-time start of the actors, and the
largest difference of any unit score from the single-process frame. Hypothesis
caching is off, so each run computes its hypotheses again.

Workers are started on a local Ray with as many CPUs as the largest count asks for
(``--address`` joins a running cluster instead); CPU workers share the node's cores
(each computes with ``cores // workers`` threads). Timings from a busy machine mean
little: run it on a quiet one.

Each run also prints the bytes the driver receives per block (what the workers send
back, the block's hash and the states of calibrating measures, ``mi`` and ``iou``; and
what the holder actor that merges the other states sends: with early stopping the
pairs settled after each block, two bits a pair, and results and frozen scores when a
frame is shown) beside the bytes of that block's behaviors, which a worker computes
and keeps, and their ratio. ``--bytes-measures``
(default ``corr,logreg``) adds one cluster run per measure with the largest worker
count, reading to the end and with early stopping (``eps=0.025``), to show each
measure's share against the target of at most 1% of the behaviors.

``--nodes 1,2,3`` adds a table of multi-node clusters made on this machine
(``ray.cluster_utils.Cluster``): ``n`` nodes of ``max(1, cores // n)`` CPUs each, one
worker per CPU. On a 2-core machine 3 nodes declare 3 CPUs on 2 cores: the table shows
what sharding over nodes costs (start-up, shipping states), not a speed-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Every run here pays its own forward pass: a repeated block must not come from the
# models' behavior memo (bench_warm_query.py measures that on purpose).
if str(REPO) not in sys.path:  # run as a script: make dni_lab and benchmarks importable
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from benchmarks.workload import Workload, build_workload  # noqa: E402


def run(wl: Workload, records: list[Any], measures: list[str], **kw: Any) -> tuple[Any, float]:
    """The workload's inspection, read to the end; returns (frame, seconds)."""
    frame, seconds, _ = run_stats(wl, records, measures, **kw)
    return frame, seconds


def run_stats(wl: Workload, records: list[Any], measures: list[str],
              **kw: Any) -> tuple[Any, float, dict[str, Any]]:  # fmt: skip
    """:func:`run` plus what the driver received (``Inspection.cluster_stats``)."""
    from dni_lab.backend.engine.inspection import Inspection
    from dni_lab.backend.engine.params import InspectParams

    t0 = time.perf_counter()
    kw = {"eps": None, **kw}
    insp = Inspection([dl.Model(wl.module, encode=wl.encode, name="sql-lstm")], wl.hypotheses,
                      measures, records, units=[(wl.layer, "*")],
                      params=InspectParams(cache=False, **kw))  # fmt: skip
    frame = insp.run()
    return frame, time.perf_counter() - t0, getattr(insp, "cluster_stats", {})


def behavior_bytes(wl: Workload, records: list[Any]) -> float:
    """Bytes of one block's behaviors (float32, every symbol of every unit), on average."""
    model = dl.Model(wl.module, encode=wl.encode, name="sql-lstm")
    return 4.0 * wl.hidden * sum(model.symbols(r) for r in records)


def per_block(stats: dict[str, Any]) -> float | None:
    n = stats.get("shards_received")
    return stats["bytes_received"] / n if n else None


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.2f} MB"


def max_diff(a: Any, b: Any) -> float:
    keys = ["uid", "hid", "measure"]
    x = a.sort(keys)["unit_score"].fill_null(0).to_numpy()
    y = b.sort(keys)["unit_score"].fill_null(0).to_numpy()
    return float(np.abs(x - y).max())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    # set here, not on import: tests import the benchmarks
    os.environ.setdefault("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke-test size (1,024 records)")
    ap.add_argument("--records", type=int, default=None, help="records (default 29,696)")
    ap.add_argument("--hidden", type=int, default=None, help="LSTM units (default 512)")
    ap.add_argument("--hyps", type=int, default=None, help="hypotheses (default 190)")
    ap.add_argument("--workers", default=None, help="comma-separated counts (1,2,4,... cores)")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--measures", default="corr",
                    help="comma-separated (logreg is updated on one holder actor: it scales less)")
    ap.add_argument("--address", default=None, help="a Ray address instead of a local Ray")
    ap.add_argument("--nodes", default=None,
                    help="comma-separated node counts: a table of clusters made on this machine")
    ap.add_argument("--bytes-measures", default="corr,logreg",
                    help="measures whose driver bytes per block are measured one by one")
    ap.add_argument("--bytes-eps", default="none,0.025",
                    help="eps values of the per-measure runs ('none': read to the end)")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    n = a.records or (1024 if a.quick else 29_696)
    hidden = a.hidden or (64 if a.quick else 512)
    n_hyps = a.hyps or (20 if a.quick else 190)
    cores = os.cpu_count() or 1
    counts = [int(w) for w in a.workers.split(",")] if a.workers else _powers(cores)
    wl = build_workload(n, hidden, a.quick, n_hyps)
    print(f"workload: {n} records, {hidden} units, {len(wl.hypotheses)} hypothesis objects;")
    for part, src in wl.sources.items():
        print(f"  {part}: {src}")

    ms = a.measures.split(",")
    run(wl, wl.records[: a.block_size], ms, block_size=a.block_size)  # imports, first calls
    one, t_one = run(wl, wl.records, ms, block_size=a.block_size)
    print(f"single process (no Ray, {cores} cores): {t_one:.2f} s")

    import ray

    started = time.perf_counter()
    if a.address:
        ray.init(address=a.address, log_to_driver=False)
    else:
        from dni_lab.backend.cluster.connect import _local_env

        ray.init(num_cpus=max(max(counts), cores), include_dashboard=False,
                 log_to_driver=False, runtime_env=_local_env())  # fmt: skip
    ray_start = time.perf_counter() - started
    rows = []
    try:
        for w in counts:
            kw = {"block_size": a.block_size, "cluster": a.address or "auto", "workers": w}
            _, t_start = run(wl, wl.records[: a.block_size], ms, **kw)  # start the actors
            frame, t, stats = run_stats(wl, wl.records, ms, **kw)
            rows.append({"workers": w, "seconds": t, "actor_start_s": t_start,
                         "max_abs_diff": max_diff(one, frame),
                         "bytes_per_block": per_block(stats)})  # fmt: skip
    finally:
        from dni_lab.backend.cluster import shutdown

        shutdown()
        ray.shutdown()
    t1 = rows[0]["seconds"] if rows[0]["workers"] == 1 else None
    block_bytes = behavior_bytes(wl, wl.records[: a.block_size])
    print(f"Ray start: {ray_start:.1f} s; one block's behaviors: {_mb(block_bytes)} "
          f"({a.block_size} records x {hidden} units, float32)")  # fmt: skip
    print(f"{'workers':>7} {'time s':>8} {'speed-up':>8} {'effic.':>7} {'vs 1 proc':>9} "
          f"{'start s':>8} {'max |Δr|':>9} {'to driver/block':>16} {'share':>6}")  # fmt: skip
    for r in rows:
        r["speedup"] = t1 / r["seconds"] if t1 else None
        r["efficiency"] = t1 / (r["workers"] * r["seconds"]) if t1 else None
        r["vs_single_process"] = t_one / r["seconds"]
        sp = f"{r['speedup']:.2f}x" if t1 else "-"
        ef = f"{r['efficiency']:.0%}" if t1 else "-"
        print(f"{r['workers']:>7} {r['seconds']:>8.2f} {sp:>8} {ef:>7} "
              f"{r['vs_single_process']:>8.2f}x {r['actor_start_s']:>8.1f} "
              f"{r['max_abs_diff']:>9.1e} {_mb(r['bytes_per_block']):>16} "
              f"{_share(r['bytes_per_block'], block_bytes):>6}")  # fmt: skip
    out = {"records": n, "hidden": hidden, "hypotheses": n_hyps, "cores": cores, "measures": ms,
           "single_process_s": t_one, "ray_start_s": ray_start, "runs": rows,
           "block_behavior_bytes": block_bytes, "sources": wl.sources}  # fmt: skip
    if a.bytes_measures:
        eps = [None if e.lower() == "none" else float(e) for e in a.bytes_eps.split(",")]
        out["bytes_by_measure"] = bytes_table(wl, a.bytes_measures.split(","), a.block_size,
                                              max(counts), a.address, block_bytes, eps)  # fmt: skip
    if a.nodes:
        out["nodes"] = node_table(wl, ms, a.block_size, [int(k) for k in a.nodes.split(",")],
                                  cores, one, t_one)  # fmt: skip
    write_results(a.json, out)
    return out


def node_table(wl: Workload, ms: list[str], block_size: int, counts: list[int], cores: int,
               one: Any, t_one: float) -> list[dict[str, Any]]:  # fmt: skip
    """The workload on clusters of 1, 2, 3, ... nodes made on this machine."""
    import ray
    from ray.cluster_utils import Cluster

    # Nodes start workers from this process's environment: they must import dni_lab and
    # the benchmark's model.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    rows = []
    for k in counts:
        per = max(1, cores // k)
        started = time.perf_counter()
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": per, "include_dashboard": False})
        for _ in range(k - 1):
            cluster.add_node(num_cpus=per)
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            kw = {"block_size": block_size, "cluster": "auto"}
            run(wl, wl.records[:block_size], ms, **kw)  # start the actors
            t_start = time.perf_counter() - started
            frame, t, stats = run_stats(wl, wl.records, ms, **kw)
        finally:
            from dni_lab.backend.cluster import shutdown

            shutdown()
            ray.shutdown()
            cluster.shutdown()
        rows.append({"nodes": k, "cpus_per_node": per, "workers": k * per, "seconds": t,
                     "start_s": t_start, "vs_single_process": t_one / t,
                     "bytes_per_block": per_block(stats), "max_abs_diff": max_diff(one, frame)})
    print(f"{'nodes':>5} {'CPUs':>5} {'time s':>8} {'vs 1 proc':>9} {'start s':>8} "
          f"{'to driver/block':>16} {'max |Δr|':>9}   ({cores} cores on this machine)")
    for r in rows:
        print(f"{r['nodes']:>5} {r['nodes'] * r['cpus_per_node']:>5} {r['seconds']:>8.2f} "
              f"{r['vs_single_process']:>8.2f}x {r['start_s']:>8.1f} "
              f"{_mb(r['bytes_per_block']):>16} {r['max_abs_diff']:>9.1e}")
    return rows


def bytes_table(wl: Workload, measures: list[str], block_size: int, workers: int,
                address: str | None, block_bytes: float,
                eps_values: list[float | None]) -> list[dict[str, Any]]:  # fmt: skip
    """Per measure: bytes the driver receives per block, against the block's behaviors.

    Read to the end, the driver receives the final results; with early stopping also
    the pairs that settled after each block (bits) and the scores frozen when they
    did. Each row compares the frame with one process's.
    """
    import ray

    from dni_lab.backend.cluster import shutdown
    from dni_lab.backend.cluster.connect import _local_env

    rows = []
    for eps in eps_values:
        for m in measures:
            one, _ = run(wl, wl.records, [m], block_size=block_size, eps=eps)
            if not ray.is_initialized():
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False,
                             log_to_driver=False, runtime_env=_local_env())  # fmt: skip
            kw = {"block_size": block_size, "cluster": address or "auto", "workers": workers,
                  "eps": eps}  # fmt: skip
            frame, t, stats = run_stats(wl, wl.records, [m], **kw)
            per = per_block(stats)
            rows.append({"measure": m, "eps": eps, "workers": workers, "seconds": t,
                         "blocks": stats.get("shards_received"), "bytes_per_block": per,
                         "share_of_behaviors": None if per is None else per / block_bytes,
                         "max_abs_diff": max_diff(one, frame)})  # fmt: skip
    shutdown()
    ray.shutdown()
    print(f"driver bytes per block by measure ({workers} workers; target <= 1% of a block's "
          f"behaviors, {_mb(block_bytes)}):")  # fmt: skip
    print(f"{'measure':>8} {'eps':>6} {'blocks':>6} {'to driver/block':>16} {'share':>7} "
          f"{'max |Δ|':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['measure']:>8} {r['eps']!s:>6} {r['blocks'] or 0:>6} "
              f"{_mb(r['bytes_per_block']):>16} {_share(r['bytes_per_block'], block_bytes):>7} "
              f"{r['max_abs_diff']:>9.1e}")  # fmt: skip
    return rows


def _share(x: float | None, of: float) -> str:
    return "-" if x is None or not of else f"{x / of:.2%}"


def _powers(cores: int) -> list[int]:
    out, w = [], 1
    while w <= cores:
        out.append(w)
        w *= 2
    return out


if __name__ == "__main__":
    main()
