"""One inspection sharded over a Ray cluster (``dl.inspect(..., cluster=...)``).

``shards`` cuts the data into the single-process loop's blocks and moves measure
states between machines, ``worker`` is the actor that keeps the models resident and
folds a shard into fresh states, ``driver`` deals shards and merges the states in
record order, and ``connect`` finds (or starts) the Ray to run on.
"""

from ..engine import inspection as _engine
from . import connect as _connect
from .driver import forget_workers, run_sharded

_engine.sharded_run = run_sharded  # Inspection.run(cluster=...) dispatches here

__all__ = ["run_sharded", "shutdown"]


def shutdown() -> None:
    """Kill the workers kept between runs and stop the local Ray a run started."""
    forget_workers()
    _connect.shutdown()
