"""Where a run stands: records read, pairs settled, time left, and why reading ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    """Where a run stands; passed to per-block callbacks."""

    records_read: int = 0
    blocks: int = 0
    pairs_total: int = 0
    pairs_converged: int = 0
    elapsed_s: float = 0.0
    total_records: int | None = None
    done: bool = False
    #: a Stop, ``cancel()`` or Ctrl-C ended the run: its frame is a partial result
    cancelled: bool = False
    #: early stopping ended the run before the data's end (every pair settled): not partial
    stopped_early: bool = False
    #: a limit, not convergence, ended the reading before the data's end, in words:
    #: ``"max_records=5,000"``, ``"max_seconds=30"`` or ``"the stream repeats its 300
    #: distinct records"`` (:mod:`.stopping`); pairs still open then stay open. None otherwise
    ended_by: str | None = None

    @property
    def share_converged(self) -> float:
        return self.pairs_converged / self.pairs_total if self.pairs_total else 0.0

    pairs_decided: int = 0
    #: a sharded run's cluster (:class:`~dni_lab.backend.cluster.view.ClusterView`):
    #: nodes, workers, shards dealt again, nodes lost, holders rebuilt, Ray's log file
    cluster: dict[str, Any] | None = None
    # (elapsed_s, time left) at the last block; private, so not in the repr
    _estimate: tuple[float, float] | None = field(default=None, repr=False)

    @property
    def records_per_s(self) -> float | None:
        """Records read per second so far."""
        if not self.records_read or self.elapsed_s <= 0:
            return None
        return self.records_read / self.elapsed_s

    @property
    def time_left_s(self) -> float | None:
        """Seconds left at most (reading to the end of the data), never above the last estimate.

        ``None`` while the data's length is unknown (a generator without ``max_records``).
        """
        if self.done:
            return 0.0
        if not self.total_records or not self.records_read:
            return None
        left = self.elapsed_s / self.records_read * max(self.total_records - self.records_read, 0)
        if self._estimate is not None:
            at, before = self._estimate
            still = before - (self.elapsed_s - at)
            if still > 0:  # the earlier promise still holds: never raise it
                left = min(left, still)
        return left

    @property
    def ending(self) -> str:
        """Why reading ended before the data's end, in a header's words; "" otherwise."""
        if self.cancelled:
            return "stopped by the user (partial result)"
        left = self.pairs_total - self.pairs_converged - self.pairs_decided
        if self.done and self.ended_by is not None:
            return f"{self.ended_by} ended the reading, {left:,} pairs left open (see reason)"
        if not (self.done and self.stopped_early):
            return ""
        if left > 0:  # LEAVE_OPEN: rare hypotheses, each named in its rows' reason
            return f"early stopping, {left:,} pairs left open (see reason)"
        return "every pair settled (early stopping)"

    @property
    def cluster_text(self) -> str:
        """A sharded run's cluster in a header's words, e.g. ``"Ray: 3 nodes, 2 workers,
        1 shard dealt again, 1 node lost"``; "" for a run in one process."""
        c = self.cluster
        if not c:
            return ""

        def n(k: int, word: str) -> str:
            return f"{k:,} {word}" + ("" if k == 1 else "s")

        parts = [f"Ray: {n(c['nodes'], 'node')}, {n(c['workers'], 'worker')}"]
        if c.get("shards_redealt"):
            parts.append(f"{n(c['shards_redealt'], 'shard')} dealt again")
        if c.get("lost_nodes"):
            parts.append(f"{n(c['lost_nodes'], 'node')} lost")
        if c.get("holder_restarts"):
            parts.append(f"{n(c['holder_restarts'], 'probe holder')} rebuilt")
        return ", ".join(parts)

    def read_text(self) -> str:
        """E.g. ``"1,536 of 78,662 records read — every pair settled (early stopping)"``."""
        of = f" of {self.total_records:,}" if self.total_records else ""
        text = f"{self.records_read:,}{of} records read"
        return f"{text} — {self.ending}" if self.ending else text

    def mark(self, elapsed_s: float) -> None:
        """Record the time at the end of a block and pin the estimate made then."""
        self.elapsed_s = elapsed_s
        left = self.time_left_s
        self._estimate = None if left is None else (elapsed_s, left)
