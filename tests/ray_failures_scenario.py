"""What a real cluster does to a run, survived: a worker node removed, the probe holder
killed, a permutation test on nodes of one CPU each.

Run by ``tests/test_cluster_failures.py`` in a process of its own (``python
ray_failures_scenario.py [--tries N]``), so that its cluster cannot meet the other
modules' local Ray: a head and two worker nodes of 1 CPU each
(``ray.cluster_utils.Cluster``), one worker actor on each node. The held blocks
(``logreg``'s behaviors of 64 LSTM units, 24 records of 18 to 23 symbols: 110-141 KB)
are over Ray's 100 KB inline limit, so they live only on their worker's node until
the holder fetches them.

Each failure happens at a condition, never after a sleep: a node is removed when
``k`` shards have been merged (early: 2, mid-run: half), the holder's process is
killed when half the shards have been merged. Every run must end with the one-process
frame (1e-6, the same records read). Prints ``ok ...`` per step and ``stats {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from conftest import CharLM, encode_chars, paren, position, random_records  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray_nodes_scenario import FAST_DEATH, KEYS  # noqa: E402  (+ the nodes' PYTHONPATH)

import dni_lab as dl  # noqa: E402
from dni_lab.backend.cluster.actors import forget_workers  # noqa: E402
from dni_lab.backend.cluster.guard import ray_log  # noqa: E402
from dni_lab.backend.engine.inspection import Inspection  # noqa: E402
from dni_lab.backend.engine.params import InspectParams  # noqa: E402

HIDDEN, BLOCK, RECORDS, SHORTEST = 64, 24, 360, 18
UNITS = [("lstm", "*")]  # the top layer's 64 units: a block of 24 records >= 18 symbols
INLINE = 100 * 1024  # Ray's limit for a value sent to its owner inline
MEASURES = ["corr", "logreg"]


@dl.hypothesis
def slow_paren(r):
    """A hypothesis that costs 10 ms a record: workers are busy when a node dies."""
    time.sleep(0.01)
    return [c in "()" for c in r]


HYPS = [slow_paren, position]


def model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=HIDDEN), encode=encode_chars, name="toy")


def largest_difference(many, one) -> float:
    """The greatest score difference; asserts everything else is the same."""
    assert one.select(KEYS).equals(many.select(KEYS)), "rows differ"
    assert one["n_records"].to_list() == many["n_records"].to_list(), "records read differ"
    assert one["reason"].to_list() == many["reason"].to_list(), "reasons differ"
    worst = 0.0
    for col in ("unit_score", "group_score"):
        x, y = (f[col].fill_null(np.nan).to_numpy() for f in (one, many))
        assert (np.isnan(x) == np.isnan(y)).all(), f"{col}: nulls differ"
        worst = max(worst, float(np.nanmax(np.abs(x - y), initial=0.0)))
    assert worst <= 1e-6, f"scores differ by {worst:.3g}"
    return worst


def alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def wait_for(cond, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def run(recs, params, on_block=None):
    insp = Inspection(model(), HYPS, MEASURES, recs, units=UNITS, params=params)
    frame = insp.run(on_block=on_block).sort(KEYS)
    return insp, frame


def node_try(cluster, nodes, recs, params, one, at: int) -> dict:
    """Remove the node of a worker when ``at`` shards are merged; the frame must hold."""
    if len(alive_nodes()) < 3:  # a node removed by the last try: back to three nodes
        nodes.append(cluster.add_node(num_cpus=1))
        wait_for(lambda: len(alive_nodes()) == 3, "the new node")
        forget_workers()  # fresh actors, spread over the nodes alive now (one per node)
    removed: list = []
    where: list = []

    def kill_node(insp):
        if not where:  # after the first block: the actors are up
            where.extend(ray.get([a.node.remote() for a in insp.cluster_workers], timeout=60))
        if not removed and insp.progress.blocks >= at:
            head = ray.get_runtime_context().get_node_id()
            victim = next(n for n in nodes if n.node_id in where and n.node_id != head)
            cluster.remove_node(victim, allow_graceful=False)
            nodes.remove(victim)
            removed.append(victim.node_id)

    t0 = time.perf_counter()
    try:
        insp, frame = run(recs, params, kill_node)
    except Exception as exc:  # what reached the user
        traceback.print_exc()
        return {"at": at, "outcome": f"{type(exc).__module__}.{type(exc).__name__}: "
                f"{str(exc)[:200]}"}  # fmt: skip
    took = time.perf_counter() - t0
    assert removed, "the run ended before the node was removed"
    diff = largest_difference(frame, one)
    wait_for(lambda: removed[0] not in alive_nodes(), "Ray to mark the node dead")
    return {"at": at, "outcome": "frame", "diff": diff, "s": round(took, 2),
            **{k: insp.cluster_stats[k] for k in
               ("shards_redealt", "held_shards_reread", "holder_restarts", "lost_nodes")},
            "header": insp.progress.cluster_text,
            "provenance": insp.provenance().get("cluster")}  # fmt: skip


def holder_try(recs, params, one, at: int) -> dict:
    """Kill the probe holder's process when ``at`` shards are merged."""
    killed: list = []

    def kill_holder(insp):
        if not killed and insp.progress.blocks >= at:
            link = next(s.measure.link for s in insp.states if hasattr(s.measure, "link"))
            pid = ray.get(link.holder.pid.remote(), timeout=60)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    t0 = time.perf_counter()
    try:
        insp, frame = run(recs, params, kill_holder)
    except Exception as exc:
        traceback.print_exc()
        return {"at": at, "outcome": f"{type(exc).__module__}.{type(exc).__name__}: "
                f"{str(exc)[:200]}"}  # fmt: skip
    assert killed, "the run ended before the holder was killed"
    assert insp.cluster_stats["holder_restarts"] >= 1, insp.cluster_stats
    return {
        "at": at,
        "outcome": "frame",
        "diff": largest_difference(frame, one),
        "s": round(time.perf_counter() - t0, 2),
        **insp.cluster_stats,
    }


def join_try(cluster, nodes, recs, params, one) -> dict:
    """A node joins after the first shard: it gets a worker, and the frame holds."""
    added: list = []

    def add_node(insp):
        if not added:
            nodes.append(cluster.add_node(num_cpus=1))
            added.append(nodes[-1].node_id)

    t0 = time.perf_counter()
    insp, frame = run(recs, params, add_node)
    took = time.perf_counter() - t0
    stats = insp.cluster_stats
    return {"outcome": "frame", "diff": largest_difference(frame, one), "s": round(took, 2),
            "workers_joined": stats["workers_joined"], "workers": stats["workers"],
            "nodes": stats["nodes"], "header": insp.progress.cluster_text}  # fmt: skip


def permutation_on_nodes() -> float:
    """workers=1 on 1-CPU nodes: its tasks ask for one CPU, and the p-values are one
    process's."""
    recs = random_records(60, seed=17, lo=4, hi=10)
    kw = {"units": [("lstm", "*")], "n_permutations": 30, "device": "cpu", "seed": 3}
    small = lambda: dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")  # noqa: E731
    torch.manual_seed(0)
    one = dl.verify.permutation_test(small(), [paren, position], recs, **kw)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    many = dl.verify.permutation_test(small(), [paren, position], recs, cluster="auto",
                                      workers=1, **kw)  # fmt: skip
    assert one["p_value"].to_list() == many["p_value"].to_list(), "p-values differ"
    return time.perf_counter() - t0


def start_cluster(tries: int = 3) -> tuple[Cluster, list]:
    """A head and two worker nodes of 1 CPU each, and this process connected to them.

    Ray gives a node 30 s to register, which a loaded 2-core machine can miss: tried
    again then.
    """
    for attempt in range(tries):
        cluster = None
        try:
            head = {"num_cpus": 1, "include_dashboard": False, "_system_config": FAST_DEATH}
            cluster = Cluster(initialize_head=True, head_node_args=head)
            nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
            ray.init(address=cluster.address, log_to_driver=False)
            wait_for(lambda: len(alive_nodes()) == 3, "three nodes")
            return cluster, nodes
        except Exception as exc:
            if attempt == tries - 1 or "timed out during startup" not in str(exc):
                raise
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=1, help="tries of each failure")
    parser.add_argument("--early", action="store_true",
                        help="also remove a node, and kill the holder, after 2 shards")  # fmt: skip
    args = parser.parse_args()
    cluster, nodes = start_cluster()
    recs = random_records(RECORDS, seed=29, lo=SHORTEST)
    params = InspectParams(eps=None, block_size=BLOCK, cache=False, cluster="auto")
    one = dl.inspect(model(), HYPS, MEASURES, recs, units=UNITS, eps=None,
                     block_size=BLOCK, cache=False).sort(KEYS)  # fmt: skip
    shards = RECORDS // BLOCK
    held = 4 * BLOCK * SHORTEST * one.filter(one["measure"] == "logreg")["uid"].n_unique()
    assert held > INLINE, f"a held block of {held} bytes would travel inline"
    t0 = time.perf_counter()
    _, warm = run(recs, params)  # with the actors' start-up
    cold_s = time.perf_counter() - t0
    print(f"ok undisturbed: {cold_s:.2f} s, difference "
          f"{largest_difference(warm, one):.2g}", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    run(recs, params)  # the actors up: what a disturbed run is compared with
    out: dict = {"node": [], "holder": [], "undisturbed_s": round(cold_s, 2),
                 "undisturbed_warm_s": round(time.perf_counter() - t0, 2),
                 "shards": shards}  # fmt: skip
    points = (2, shards // 2) if args.early else (shards // 2,)  # early, mid-run
    for _ in range(args.tries):
        for at in points:
            out["node"].append(node_try(cluster, nodes, recs, params, one, at))
            print("node", json.dumps(out["node"][-1]), flush=True)
        for at in points:
            out["holder"].append(holder_try(recs, params, one, at))
            print("holder", json.dumps(out["holder"][-1]), flush=True)
    out["join"] = join_try(cluster, nodes, recs, params, one)
    print("join", json.dumps(out["join"]), flush=True)
    for kind in ("node", "holder"):
        good = sum(t["outcome"] == "frame" for t in out[kind])
        print(f"ok {kind}: {good} of {len(out[kind])} runs gave the one-process frame",
              flush=True)  # fmt: skip
    out["permutation_s"] = round(permutation_on_nodes(), 2)
    out["ray_log"] = ray_log()
    print("ok permutation_test(cluster=, workers=1) on 1-CPU nodes: one process's p-values",
          flush=True)  # fmt: skip
    print("stats", json.dumps(out), flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
    print("alive", flush=True)
