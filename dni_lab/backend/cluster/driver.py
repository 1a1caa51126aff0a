"""The driver: deal shards to worker actors, merge their states in order, stop early.

The driver runs the single-process loop's bookkeeping on an
:class:`~dni_lab.backend.engine.inspection.Inspection` (progress, convergence, the live frame,
``on_block`` callbacks, cancel) but never runs a model after the first block's unit
resolution. Shards are dealt ahead (two per worker) so workers never wait for the
driver; a result is merged only when every earlier shard has been, so early stopping
decides on exactly the states one process would hold, and shards read past the
stopping point are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import polars as pl
import torch

from ..engine.inspection import Inspection
from ..engine.provenance import RecordsHash
from .actors import forget_workers
from .connect import connect, import_ray
from .guard import no_auto_init, ray_gone
from .pickling import check_picklable
from .pool import Pool
from .worker import Plan, worker_params

__all__ = ["forget_workers", "run_sharded"]


def run_sharded(
    insp: Inspection, on_block: Callable[[Inspection], None] | None = None
) -> pl.DataFrame:
    """Run ``insp`` over the Ray cluster its parameters name; return the final frame.

    Parameters
    ----------
    insp : Inspection
        A prepared inspection whose ``params.cluster`` is set.
    on_block : callable, optional
        Called with ``insp`` after each shard is merged, in shard order.

    Returns
    -------
    polars.DataFrame
        The score frame, as :meth:`Inspection.run` returns it.
    """
    import_ray()  # before any work: a missing Ray is the first thing to say
    insp.device = torch.device("cpu")  # the driver only merges; workers pick their device
    start = time.perf_counter()
    # Shards are read ahead of the merge: the data's hash must cover merged records only.
    merged_hash, insp._records_hash = insp._records_hash, RecordsHash()
    parts = insp._parts()
    part0 = next(parts)
    block0 = part0.read()  # the driver reads block 0 alone: units resolve on its records
    insp._prepare(insp._resolve_units(block0))
    plan = Plan(
        insp.models, insp.families, insp.measures, insp.units, worker_params(insp.params), block0
    )
    check_picklable(_parts(plan), "the inspection")  # before Ray's start-up, not after
    ray = connect(insp.params.cluster)
    pool = Pool(ray, plan, insp)
    insp.cluster_workers = pool.actors  # for a notebook (and the tests) to see them
    insp.progress.cluster = pool.view.counts(pool)  # the live header's "Ray: ..." part
    ok = False
    with no_auto_init():  # a ray.shutdown() now waits for this run to stop, which it does
        try:
            try:
                insp._read_to_end = pool.run(insp, part0, parts, on_block, start, merged_hash)
                ok = not insp._cancel
            except (Exception, SystemExit):  # Ray ends a call it shut down with SystemExit
                if not ray_gone(ray):
                    raise
                _left(insp, pool)
            finally:
                pool.close(keep=ok)
                insp._records_hash = merged_hash
                # before _finish: the frame's provenance keeps what failures cost
                pool.view.refresh(force=True)
                insp.cluster_stats = pool.view.counts(pool)
            try:
                return insp._finish(start)  # a held probe's final fit runs on its holder
            except (Exception, SystemExit):
                if not ray_gone(ray):
                    raise
                _left(insp, pool)
                return insp._finish(start)  # with the results the driver has
        finally:
            if pool.link is not None:
                pool.link.close(keep=ok and not insp._cancel)
            # what crossed the network to the driver (benchmarks/bench_cluster.py prints
            # it), and what failures cost: shards dealt again, held blocks read again,
            # holders lost, nodes lost
            insp.cluster_stats = pool.view.counts(pool)
            insp.progress.cluster = insp.cluster_stats


def _left(insp: Inspection, pool: Pool) -> None:
    """The user's ``ray.shutdown()`` during the run: the workers died with that Ray. The
    frame so far is a partial one, as after a Stop; the next call starts a new Ray
    (``connect()`` notices)."""
    insp._cancel = True
    if pool.link is not None:
        pool.link.closed = True  # the results it received stand


def _parts(plan: Plan) -> list[tuple[str, Any]]:
    """The plan's parts as an error names them."""
    named = [(f"model {m.name!r}", m) for m in plan.models]
    named += [(f"hypothesis {_name(h)!r}", h) for h in plan.hypotheses]
    named += [(f"measure {_name(m)!r}", m) for m in plan.measures]
    return [*named, ("units=", plan.units), ("the run's options", plan.params),
            ("the first block of records", plan.sample)]  # fmt: skip


def _name(obj: Any) -> str:
    return str(getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__)
