"""A node dies mid-run on a 2-node Ray cluster made on this machine: the frame is unchanged.

Run by ``tests/test_cluster_nodes.py`` in a process of its own (``python
ray_nodes_scenario.py``): a head and a worker node of 1 CPU each
(``ray.cluster_utils.Cluster``), one worker actor on each, and the worker node is
removed (every process on it killed) after the first merged shard. Its actor restarts
on the head, its shards are read again, and the frame equals the one-process frame.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
# Nodes start worker processes from this environment: they must import the test models.
os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent),
                                            os.environ.get("PYTHONPATH", "")])  # fmt: skip
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from conftest import CharLM, encode_chars, paren, position, random_records  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

import dni_lab as dl  # noqa: E402
from dni_lab.backend.engine.inspection import Inspection  # noqa: E402
from dni_lab.backend.engine.params import InspectParams  # noqa: E402

KEYS = ["mid", "uid", "hid", "measure"]
# Nodes whose raylet is gone are declared dead after ~2 s, not Ray's default ~30 s.
FAST_DEATH = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
              "health_check_initial_delay_ms": 0}  # fmt: skip


def model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def same_as_one(many, one) -> None:
    assert one.select(KEYS).equals(many.select(KEYS))
    assert one["n_records"].to_list() == many["n_records"].to_list()
    x, y = (f["unit_score"].fill_null(np.nan).to_numpy() for f in (one, many))
    # float32 sums in another order (workers' thread counts) over every symbol read
    symbols = int(one["n_records"].max() or 1) * 24  # random_records: at most 24 symbols
    assert_close_f32(x, y, reduction=symbols, equal_nan=True)


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_DEATH})  # fmt: skip
    worker_node = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    recs = random_records(240, seed=29)
    hyps, measures = [paren, position], ["corr", "diffmeans"]
    params = InspectParams(eps=None, block_size=12, cache=False, cluster="auto")
    warm = Inspection(model(), hyps, measures, recs[:24], params=params)
    warm.run()  # the actors exist now, one per node
    nodes = ray.get([a.node.remote() for a in warm.cluster_workers], timeout=120)
    assert len(set(nodes)) == 2, f"workers not spread over both nodes: {nodes}"
    print(f"ok one worker on each of {len(set(nodes))} nodes", flush=True)

    removed = []

    def kill_node(insp):
        if not removed:  # shards are in flight on both nodes now
            cluster.remove_node(worker_node, allow_graceful=False)
            removed.append(worker_node.node_id)

    one = dl.inspect(model(), hyps, measures, recs, eps=None, block_size=12,
                     cache=False).sort(KEYS)  # fmt: skip
    insp = Inspection(model(), hyps, measures, recs, params=params)
    same_as_one(insp.run(on_block=kill_node).sort(KEYS), one)
    assert removed and removed[0] in nodes
    print(f"ok the worker node died after shard 0 ({insp.progress.blocks} shards merged); "
          "the frame equals the one-process frame", flush=True)  # fmt: skip
    deadline = time.monotonic() + 120  # Ray marks the node dead after its health checks
    while removed[0] in (alive := {n["NodeID"] for n in ray.nodes() if n["Alive"]}):
        assert time.monotonic() < deadline, "Ray never marked the removed node dead"
        time.sleep(0.2)
    # The next run finds the dead node's worker (replaced then, if the run above
    # finished before that worker's shards failed) and still gives the same frame.
    again = Inspection(model(), hyps, measures, recs, params=params)
    same_as_one(again.run().sort(KEYS), one)
    after = ray.get([a.node.remote() for a in again.cluster_workers], timeout=120)
    assert set(after) <= alive, "a worker still on the dead node"
    print("ok the next run, on the surviving node, gives it too", flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
    print("alive", flush=True)
