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
        self.start = self._alive() or set()
        self.nodes = len(self.start)
        self.lost_nodes = 0
        self._checked = time.monotonic()

    def _alive(self) -> set[str] | None:
        with contextlib.suppress(Exception):  # Ray going away: keep the last counts
            return {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
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
            self.lost_nodes = len(self.start - alive)

    def counts(self, pool: Any) -> dict[str, Any]:
        """The run's cluster as ``Progress.cluster`` and provenance hold it."""
        link = pool.link
        return {
            "nodes": self.nodes,
            "workers": len(pool.actors),
            "shards_redealt": pool.redealt,
            "lost_nodes": self.lost_nodes,
            "holder_restarts": 0 if link is None else link.holder_restarts,
            "held_shards_reread": 0 if link is None else link.lost_shards,
            "bytes_received": pool.received + (0 if link is None else link.received),
            "shards_received": pool.answers,
            "ray_log": ray_log(),
        }

