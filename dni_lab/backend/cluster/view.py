"""What a sharded run says about its cluster while it runs, and what its provenance keeps.

The live header (``Progress.cluster_text`` in the engine, which never imports this
adapter) shows the nodes and workers a run reads with,
the shards dealt again after a worker or node died, the nodes lost since the run began and
the probe holders rebuilt; provenance keeps the same counts with the bytes that crossed to
the driver and the file Ray's own messages went to (never the notebook, by default).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from .guard import ray_log

#: Seconds between two reads of Ray's node table (a call to its control store).
NODES_EVERY_S = 1.0


class ClusterView:
    """Counts of one sharded run's cluster, refreshed as shards merge.

    Parameters
    ----------
    ray : module
        The connected Ray.
    """

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        alive = self._alive() or {}
        self.start = set(alive)
        self.nodes = len(alive)
        self.lost_nodes = 0
        self.workers_joined = 0
        self._joined: dict[str, dict[str, float]] = {}  # nodes that joined, not yet given workers
        self._checked = time.monotonic()

    def _alive(self) -> dict[str, dict[str, float]] | None:
        """Alive nodes' ids and resources; None when Ray cannot say."""
        with contextlib.suppress(Exception):  # Ray going away: keep the last counts
            return {n["NodeID"]: n.get("Resources", {}) for n in self.ray.nodes()
                    if n.get("Alive")}  # fmt: skip
        return None

    def refresh(self, force: bool = False) -> None:
        """Re-read the node table, at most every :data:`NODES_EVERY_S` seconds.

        ``lost_nodes`` counts the nodes alive at the start that Ray has marked dead
        since (Ray notices a node's death within seconds, so a node lost just before
        the run ends may not be counted yet).
        """
        now = time.monotonic()
        if not force and now - self._checked < NODES_EVERY_S:
            return
        self._checked = now
        alive = self._alive()
        if alive is not None:
            self.nodes = len(alive)
            self.lost_nodes = len(self.start - set(alive))
            for nid in set(alive) - self.start:
                self.start.add(nid)  # seen: counted once, lost like any other later
                self._joined[nid] = alive[nid]

    def take_joined(self) -> dict[str, dict[str, float]]:
        """Nodes that joined since the last call (id -> resources), handed out once."""
        out, self._joined = self._joined, {}
        return out

    def counts(self, pool: Any) -> dict[str, Any]:
        """The run's cluster as ``Progress.cluster`` and provenance hold it."""
        link = pool.link
        return {
            "nodes": self.nodes,
            "workers": len(pool.actors),
            "workers_joined": self.workers_joined,
            "shards_redealt": pool.redealt,
            "lost_nodes": self.lost_nodes,
            "holder_restarts": 0 if link is None else link.holder_restarts,
            "held_shards_reread": 0 if link is None else link.lost_shards,
            "bytes_received": pool.received + (0 if link is None else link.received),
            "shards_received": pool.answers,
            "ray_log": ray_log(),
        }



def request_demand(ray: Any, bundles: list[dict[str, float]]) -> bool:
    """Tell Ray's autoscaler what a run would use (``[]`` withdraws it); False where this
    Ray has no autoscaler API (a ``ray://`` client, an old Ray).

    The workers reserve no CPU (:mod:`.placement`), so without this hint an autoscaling
    cluster would never see a run's demand; the hint reserves nothing either.
    """
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)
    except Exception:  # a hint: a Ray that cannot take it runs the same
        return False
    return True
