"""Jobs sharded over Ray: the by-example index's activations, the permutation test's null.

``NeuronIndex.fit(..., cluster=...)`` runs the model over every record once; here the
records are cut into contiguous shards, each shard is a Ray task that places the
model on its worker's device and returns the shard's ``(records, units)`` activations,
and the driver stacks them in record order. A record's activation depends only on the
record, so the stacked matrix (and the index built from it) is the single-process
one; a task whose worker dies is retried by Ray on another.

``permutation_test(..., cluster=...)`` computes the behaviors once, here, and deals
contiguous runs of its chunks of permutations to tasks; a task replays the random
draws of the chunks before its own, so the counts add up to the single-process ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DNIError
from .actors import forget_workers
from .connect import connect, import_ray, worker_error
from .pickling import check_picklable
from .placement import WorkerShape, fitted, unschedulable, worker_shape

#: Seconds without a finished task after which the cluster is asked whether any node
#: can still run the rest.
STALL_S = 8.0

#: Shards per worker: a few, so that a slow worker does not hold the last shard alone.
SHARDS_PER_WORKER = 4


def _shape(ray: Any, cluster: Any, workers: int | None, device: Any) -> WorkerShape:
    """The tasks' shape; idle inspection actors give their GPUs back first."""
    # a task runs on one node: it asks for no more CPUs than the largest node has
    shape = fitted(worker_shape(ray.cluster_resources(), cluster, workers, device), ray.nodes())
    if shape.num_gpus > 0:  # CPU actors reserve nothing (placement.py); GPU ones do
        forget_workers(ray, idle_only=True)
    return shape


def cancel_unfinished(ray: Any, refs: list[Any]) -> None:
    """Cancel the tasks of ``refs`` still running. Cancelling one whose reply is arriving
    races inside Ray's core worker, which then aborts the whole process ("Tried to
    complete task that was not pending", ray-project/ray#54798's kind): the finished
    ones, the usual case after a sibling's error, are left alone."""
    if not refs:
        return
    _, running = ray.wait(list(refs), num_returns=len(refs), timeout=0)
    for r in running:
        ray.cancel(r)


def _gather(ray: Any, refs: list[Any], options: dict[str, Any]) -> list[Any]:
    """``ray.get(refs)``, but a task no alive node can run (its nodes died) is an error
    within :data:`STALL_S`, not a wait without end."""
    waiting, last = list(refs), time.monotonic()
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=1.0)
        if done:
            ray.get(done)  # a task's error now, not after the others
            last = time.monotonic()
        elif time.monotonic() - last > STALL_S:
            try:
                unschedulable(options, ray.nodes())  # raises when no node can run them
            except DNIError:
                cancel_unfinished(ray, waiting)
                raise
            last = time.monotonic()
    return ray.get(refs)


def _activations_shard(model: Any, records: list[Any], layer: Any, symbol_agg: str,
                       batch_size: int, device: Any) -> tuple[np.ndarray, str]:  # fmt: skip
    from ..examples.acts import Activations

    ev = Activations(model, records, layer, None, symbol_agg, batch_size, device)
    return ev(np.arange(len(records))), ev.resolve()[0]


def sharded_activations(
    model: Any,
    records: Sequence[Any],
    layer: Any,
    symbol_agg: str,
    batch_size: int,
    device: Any,
    cluster: str | int | bool,
    workers: int | None = None,
) -> tuple[np.ndarray, str]:
    """Per-record activations of every unit of ``layer``, computed by Ray tasks.

    Parameters
    ----------
    model : Model
    records : sequence
        The dataset, addressed by position.
    layer, symbol_agg, batch_size, device
        As in :class:`~dni_lab.backend.examples.index.NeuronIndex`.
    cluster, workers
        As in :func:`dl.inspect`.

    Returns
    -------
    (numpy.ndarray, str)
        ``(len(records), width)`` float32 activations in record order, and the
        layer's address.
    """
    if not len(records):
        raise DNIError("the index needs records; pass a non-empty sequence.")
    import_ray()
    check_picklable([(f"model {getattr(model, 'name', type(model).__name__)!r}", model)],
                    "the index's model")  # fmt: skip
    ray = connect(cluster)
    shape = _shape(ray, cluster, workers, device)
    n = len(records)
    size = max(batch_size, math.ceil(n / (shape.count * SHARDS_PER_WORKER)))
    task = ray.remote(_activations_shard).options(**shape.task_options(), max_retries=3)
    model_ref = ray.put(model)
    refs = [task.remote(model_ref, list(records[lo : lo + size]), layer, symbol_agg,
                        batch_size, device) for lo in range(0, n, size)]  # fmt: skip
    try:
        parts = _gather(ray, refs, shape.task_options())
    except ray.exceptions.RayTaskError as exc:
        cancel_unfinished(ray, refs)
        raise worker_error(exc) from None
    return np.concatenate([p for p, _ in parts]), parts[0][1]


def _null_hits_shard(null_hits: Any, blocks: list[tuple], sizes: list[int], first: int,
                     stop: int, alternative: str, target: Any, info: list[Any], seed: int,
                     device: Any, threads: int) -> Any:  # fmt: skip
    import torch

    from ..extraction.extract import resolve_device
    from .shards import moved

    # The driver's thread count: a null score equal to the observed one up to rounding
    # (a signal no shuffle moves) counts or not by the rounding of the sums, which
    # depends on how many threads split them; Ray gives a task threads = its CPUs.
    torch.set_num_threads(threads)
    dev = resolve_device(device)
    return null_hits(moved(blocks, dev), sizes, first, stop, alternative, target, info, seed, dev)


def sharded_null_hits(
    null_hits: Any,
    blocks: list[tuple],
    sizes: list[int],
    alternative: str,
    target: Any,
    info: list[Any],
    seed: int,
    device: Any,
    cluster: str | int | bool,
    workers: int | None = None,
) -> Any:
    """The permutation test's counts of extreme null scores, summed over Ray tasks.

    Parameters
    ----------
    null_hits : callable
        :func:`~dni_lab.backend.verify.stats.null_hits`, passed in so that the cluster
        package never imports the checks that call it (no import cycle).
    blocks, sizes, alternative, target, info, seed
        As in :func:`~dni_lab.backend.verify.stats.null_hits` (``sizes``: permutations
        per chunk, the unit a task takes a contiguous run of).
    device, cluster, workers
        As in :func:`dl.inspect`.

    Returns
    -------
    torch.Tensor
        ``(units, hypotheses)`` float64 counts, equal to the single-process ones.
    """
    import torch

    from .shards import moved

    ray = connect(cluster)
    shape = _shape(ray, cluster, workers, device)
    n = len(sizes)
    per = max(1, math.ceil(n / (shape.count * SHARDS_PER_WORKER)))
    task = ray.remote(_null_hits_shard).options(**shape.task_options(), max_retries=3)
    ref = ray.put(moved(blocks, "cpu"))
    threads = torch.get_num_threads()
    refs = [task.remote(null_hits, ref, sizes, k, min(k + per, n), alternative, target, info, seed,
                        device, threads) for k in range(0, n, per)]  # fmt: skip
    try:
        return sum(_gather(ray, refs, shape.task_options()))
    except ray.exceptions.RayTaskError as exc:
        cancel_unfinished(ray, refs)
        raise worker_error(exc) from None
