"""The worker actors kept between runs, per Ray session and worker shape.

A new Python with torch costs seconds per worker, and a notebook runs many queries on
one cluster, so a run's actors stay for the next. They reserve no CPU (placement.py),
so keeping them costs the user's own tasks nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Any

from .connect import session
from .placement import WorkerShape, placed, spread
from .probes import _HOLDERS, forget_holders
from .worker import ShardWorker

#: Restarts of a dead worker (and retries of its shard) before the run fails.
RETRIES = 3

#: Actors kept between runs, under (Ray session, worker shape).
Key = tuple[tuple[int, str], WorkerShape]
_HOSTS: dict[Key, list[Any]] = {}

#: Runs reading with each key's actors right now (a notebook may start a query while
#: the last one is still stopping), and the lock that keeps the two tables consistent.
_BUSY: Counter[Key] = Counter()
_LOCK = threading.RLock()


def forget_workers(ray: Any | None = None, idle_only: bool = False) -> None:
    """Kill the kept actors: their CPUs and GPUs are needed elsewhere, or Ray stops.

    Kept actors hold their resources while idle, so a new worker shape, or the Ray tasks
    of :mod:`.tasks`, would wait for them forever. ``idle_only`` spares the actors of a
    run in progress.
    """
    with _LOCK:
        if not idle_only and _HOLDERS:
            forget_holders(ray or _ray())
        for key in [k for k in _HOSTS if not (idle_only and _BUSY[k])]:
            for a in _HOSTS.pop(key):
                with contextlib.suppress(Exception):  # already dead, or Ray already gone
                    (ray or _ray()).kill(a, no_restart=True)
            _BUSY.pop(key, None)


def _ray() -> Any:
    import ray

    return ray


def hosts(ray: Any, shape: WorkerShape) -> tuple[Key, list[Any]]:
    """The kept actors of ``shape`` (started if need be), marked busy for one more run."""
    now = session(ray)
    key = (now, shape)
    with _LOCK:
        for old in [k for k in _HOSTS if k[0] != now]:
            # Actors of a Ray this process left (the user's ray.shutdown()) died with it;
            # their handles would fail with "Can't find actor ... from a different cluster".
            del _HOSTS[old]
            _BUSY.pop(old, None)
        if key not in _HOSTS:
            forget_workers(ray, idle_only=True)
            nodes = spread(ray.nodes(), shape.count, "GPU" if shape.num_gpus > 0 else "CPU")
            _HOSTS[key] = [new_actor(ray, shape, node) for node in nodes]
        _BUSY[key] += 1
        return key, _HOSTS[key]


def new_actor(ray: Any, shape: WorkerShape, node: str | None = None) -> Any:
    """A new worker actor of ``shape``, on ``node`` (None: where Ray places it).

    Ray restarts a worker whose process died (on the same node) and retries its shard;
    a worker whose node died cannot restart there, and :class:`~.pool.Pool` replaces it.
    """
    opts = {**shape.options(), "max_restarts": RETRIES, "max_task_retries": RETRIES}
    return ray.remote(ShardWorker).options(**placed(opts, node)).remote(shape.threads)


def release(ray: Any, key: Key, keep: bool, gone: bool) -> None:
    """A run is done with ``key``'s actors; kill them unless ``keep`` or another run
    reads with them (``gone``: they died with the user's Ray, nothing to kill)."""
    with _LOCK:
        _BUSY[key] -= 1
        if not keep and not _BUSY[key]:
            for a in _HOSTS.pop(key, []):
                with contextlib.suppress(Exception):
                    if not gone:
                        ray.kill(a, no_restart=True)
