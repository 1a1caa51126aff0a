"""How many workers a run starts, what each reserves, and on which node each one lives.

**CPU reservation.** A CPU worker is an actor that *reserves no CPU* (``num_cpus=0``):
actors outlive a run (starting one costs seconds), and an actor's reservation is held
for its whole life, so reserving a run's CPUs would keep them from the user's own Ray
tasks between runs (Ray's default actors hold none either). A worker instead sets its
own thread count to its share of its node's CPUs, and the driver places workers on
nodes in proportion to the nodes' CPUs (pinned: :func:`placed`), which is what a
reservation bought. A GPU
worker reserves its GPU (Ray assigns devices by reservation) and no CPU. The Ray tasks
of :mod:`.tasks` (index build, permutation test) reserve their CPUs: a task gives them
back when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import DNIError


@dataclass(frozen=True)
class WorkerShape:
    """How many workers to start and what each one uses.

    Attributes
    ----------
    count : int
        Workers.
    num_cpus : float
        Each worker's share of the cluster's CPUs (its thread count, at least 1).
    num_gpus : float
        GPUs each worker reserves (0 for CPU workers).
    """

    count: int
    num_cpus: float
    num_gpus: float

    @property
    def threads(self) -> int:
        """Threads a worker computes with: its CPU share, at least one."""
        return max(1, int(self.num_cpus))

    def options(self) -> dict[str, Any]:
        """An actor's reservation: its GPU, never CPUs (see the module's note)."""
        return {"num_cpus": 0, "num_gpus": self.num_gpus}

    def task_options(self) -> dict[str, Any]:
        """A task's reservation: its CPU share (given back when the task ends) and GPU."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}


def worker_shape(
    resources: dict[str, float], cluster: Any, workers: int | None, device: Any
) -> WorkerShape:
    """One worker per GPU for a CUDA run, else per CPU, unless ``workers`` says otherwise.

    A CPU worker's share of the cluster's CPUs becomes its thread count, so workers do
    not oversubscribe a node.
    """
    cpus = float(resources.get("CPU", 1.0))
    gpus = float(resources.get("GPU", 0.0))
    dev = str(device)
    want_gpu = dev.startswith("cuda") or (dev == "auto" and gpus >= 1)
    if dev.startswith("cuda") and gpus < 1:
        raise DNIError(
            f"device={dev!r} but the Ray cluster has no GPU; pass device='cpu' or 'auto', "
            "or add GPU nodes to the cluster."
        )
    if workers is None:
        if isinstance(cluster, int) and not isinstance(cluster, bool):
            workers = cluster
        else:
            workers = max(1, int(gpus if want_gpu else cpus))
    if want_gpu:
        return WorkerShape(workers, 1.0, min(1.0, gpus / workers))
    # More workers than CPUs share them (fractions), or Ray would leave some unscheduled.
    share = cpus / workers if workers > cpus else float(int(cpus // workers))
    return WorkerShape(workers, share, 0.0)


def spread(nodes: list[dict[str, Any]], count: int, resource: str = "CPU") -> list[str | None]:
    """Node ids for ``count`` workers, in proportion to each alive node's ``resource``.

    Parameters
    ----------
    nodes : list of dict
        ``ray.nodes()``.
    count : int
        Workers to place.
    resource : str
        What a node offers workers ("CPU", or "GPU" for GPU workers).

    Returns
    -------
    list
        One node id per worker; all None when the cluster has one such node (Ray's
        default placement is right there).
    """
    alive = [(n["NodeID"], float(n.get("Resources", {}).get(resource, 0.0)))
             for n in nodes if n.get("Alive")]  # fmt: skip
    alive = [(nid, r) for nid, r in alive if r > 0]
    if len(alive) < 2:
        return [None] * count
    total = sum(r for _, r in alive)
    # Largest remainder: each node its proportional share, the rest to the largest parts.
    exact = [(nid, count * r / total) for nid, r in alive]
    out = {nid: int(x) for nid, x in exact}
    rest = sorted(exact, key=lambda e: (-(e[1] - int(e[1])), e[0]))
    for nid, _ in rest[: count - sum(out.values())]:
        out[nid] += 1
    return [nid for nid, _ in alive for _ in range(out[nid])]


def placed(options: dict[str, Any], node_id: str | None) -> dict[str, Any]:
    """``options`` pinned to ``node_id`` (None: left to Ray).

    Pinned hard: Ray ignores a *soft* affinity for an actor that reserves nothing (it
    lands on any node). A worker whose node dies therefore cannot restart elsewhere;
    the driver replaces it with an unpinned one and deals its shards again.
    """
    if node_id is None:
        return options
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def fitted(shape: WorkerShape, nodes: list[dict[str, Any]]) -> WorkerShape:
    """``shape`` with its tasks' CPU request cut to the largest alive node's CPUs.

    Ray schedules a task on one node: one worker's share of a two-node cluster's CPUs
    (2 of 1 + 1) fits no node, and the task would wait forever.

    Raises
    ------
    DNIError
        When no alive node has the GPUs a task asks for.
    """
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    cpus = max((float(r.get("CPU", 0.0)) for r in alive), default=0.0)
    out = WorkerShape(shape.count, min(shape.num_cpus, cpus) if cpus > 0 else 0.0, shape.num_gpus)
    unschedulable(out.task_options(), nodes)
    return out


def unschedulable(options: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """Raise when no alive node of ``nodes`` (``ray.nodes()``) has what ``options`` asks.

    Ray keeps such a task pending without a word (an "infeasible" task), waiting for a
    node that may never join.
    """
    want = {"CPU": float(options.get("num_cpus") or 0.0),
            "GPU": float(options.get("num_gpus") or 0.0)}  # fmt: skip
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    if any(all(float(r.get(k, 0.0)) >= v for k, v in want.items()) for r in alive):
        return
    have = ", ".join(f"{float(r.get('CPU', 0)):g} CPU + {float(r.get('GPU', 0)):g} GPU"
                     for r in alive) or "none"  # fmt: skip
    raise DNIError(
        f"no node of the Ray cluster can run a task that asks for {want['CPU']:g} CPU and "
        f"{want['GPU']:g} GPU (alive nodes: {have}); pass fewer CPUs per worker (more "
        "workers=), device='cpu', or add a node that has them."
    )
