"""Which Ray a run uses, and how many workers of what size it starts there.

``cluster="local"`` (or a worker count) starts a Ray on this machine once per process
and keeps it for later runs, as a Dask ``Client`` would: starting Ray costs seconds, a
notebook runs many queries. ``"auto"``/True joins the Ray this process is connected to
(or ``RAY_ADDRESS``); any other string is an address handed to ``ray.init``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import DNIError

#: Set when this module started the local Ray, so that :func:`shutdown` stops only that.
_STARTED: dict[str, Any] = {}


def import_ray() -> Any:
    """The ``ray`` module, or an error that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise DNIError(
            "cluster= needs Ray, which is not installed; pip install 'dni_lab[ray]' "
            "(or pip install ray), or drop cluster= to run in this process."
        ) from exc
    return ray


def _local_env() -> dict[str, Any]:
    """What a local worker needs to import what this process imports.

    Workers are new interpreters: the driver's ``sys.path`` (a source checkout, a
    notebook's folder, the tests' helpers) travels as ``PYTHONPATH``, and the cache
    directory as ``DNI_LAB_CACHE``, so a worker finds the same code and cache.
    """
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    if os.environ.get("DNI_LAB_CACHE"):
        env["DNI_LAB_CACHE"] = os.environ["DNI_LAB_CACHE"]
    return {"env_vars": env}


def connect(cluster: str | int | bool) -> Any:
    """Connect to (or start) the Ray that ``cluster`` names; return the ``ray`` module."""
    ray = import_ray()
    local = cluster == "local" or (isinstance(cluster, int) and not isinstance(cluster, bool))
    if ray.is_initialized():
        if local and not _STARTED and not _is_local(ray):
            raise DNIError(
                f"cluster={cluster!r} asks for a local Ray, but this process is connected to "
                "another cluster; pass cluster='auto' to use that one, or ray.shutdown() first."
            )
        return ray
    if local:
        cpus = cluster if isinstance(cluster, int) else None
        ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env=_local_env(),
            configure_logging=False,
        )
        _STARTED["local"] = True
        return ray
    address = None if cluster in (True, "auto") else str(cluster)
    try:
        ray.init(address=address or "auto", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise DNIError(
            f"cannot connect to the Ray cluster {cluster!r}: {exc}. Start one "
            "(`ray start --head`), check the address ('ray://host:10001' for Ray Client, "
            "'host:6379' on a node of the cluster), or pass cluster='local'."
        ) from exc
    return ray


def _is_local(ray: Any) -> bool:
    try:
        return not ray.util.client.ray.is_connected()
    except AttributeError:
        return True


def worker_error(exc: BaseException) -> BaseException:
    """The worker's own exception inside Ray's wrapper (a DNIError naming the record)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def shutdown() -> None:
    """Stop the local Ray that a ``cluster="local"`` run started (no-op otherwise)."""
    if _STARTED.pop("local", None):
        import ray

        ray.shutdown()


@dataclass(frozen=True)
class WorkerShape:
    """How many actors to start and what each reserves."""

    count: int
    num_cpus: float
    num_gpus: float

    def options(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}


def worker_shape(
    resources: dict[str, float], cluster: Any, workers: int | None, device: Any
) -> WorkerShape:
    """One actor per GPU for a CUDA run, else per CPU, unless ``workers`` says otherwise.

    A CPU worker reserves its share of the cluster's CPUs, which Ray turns into the
    worker's thread count (``OMP_NUM_THREADS``), so workers do not oversubscribe a node.
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
