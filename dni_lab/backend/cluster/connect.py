"""Which Ray a run uses: find it, start it, or say in two seconds why it cannot be reached.

``cluster="local"`` (or a worker count) starts a Ray on this machine once per process
and keeps it for later runs, as a Dask ``Client`` would: starting Ray costs seconds, a
notebook runs many queries. ``"auto"``/True joins the Ray this process is connected to
(or ``RAY_ADDRESS``); any other string is an address handed to ``ray.init``.

A local Ray is started from a thread that lives as long as the process. Ray ties its
``gcs_server`` and ``raylet`` to the *thread* that started them (Linux's
``PR_SET_PDEATHSIG`` fires when that thread ends), so a Ray started by a background
run's thread died with the run, and the next call aborted the process (a notebook's
kernel) after 60 s of "Failed to connect to GCS".
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import DNIError
from .guard import divert_ray_messages, guard_shutdown
from .placement import WorkerShape, worker_shape

__all__ = ["WorkerShape", "connect", "session", "shutdown", "worker_error", "worker_shape"]

T = TypeVar("T")

#: Set when this module started the local Ray, so that :func:`shutdown` stops only that.
_STARTED: dict[str, Any] = {}

#: Seconds to reach an address's port before ``ray.init`` is tried (Ray itself retries
#: for 60 s, printing a C++ warning each second).
CONNECT_TIMEOUT_S = 2.0

#: Bumped whenever this module finds Ray not initialised: a new Ray means new actors.
_GENERATION = itertools.count(1)
_SESSION: dict[str, int] = {"generation": 0}
_CONNECT_LOCK = threading.Lock()


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
    with _CONNECT_LOCK:  # two background runs starting at once start one Ray
        out = _connect(ray, cluster)
    divert_ray_messages()
    guard_shutdown(ray)
    return out


def _connect(ray: Any, cluster: str | int | bool) -> Any:
    local = cluster == "local" or (isinstance(cluster, int) and not isinstance(cluster, bool))
    if ray.is_initialized():
        if local and not _STARTED and not _is_local(ray):
            raise DNIError(
                f"cluster={cluster!r} asks for a local Ray, but this process is connected to "
                "another cluster; pass cluster='auto' to use that one, or ray.shutdown() first."
            )
        return ray
    # Not connected: whatever Ray this process used before (ours, or the user's own that
    # ray.shutdown() ended) is gone, and with it every actor a run kept.
    _STARTED.clear()
    _SESSION["generation"] = next(_GENERATION)
    if local:
        cpus = cluster if isinstance(cluster, int) else None
        with _quiet_ray():
            # address="local": a bare ray.init() joins whatever Ray another process on this
            # machine last recorded under /tmp/ray, and with it that process's fate
            lasting(lambda: ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                                     log_to_driver=False, runtime_env=_local_env(),
                                     configure_logging=False))  # fmt: skip
        _STARTED["local"] = True
        return ray
    address = None if cluster in (True, "auto") else str(cluster)
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address not in (None, "auto", "local"):
        _reachable(address, cluster)
    try:
        with _quiet_ray():
            lasting(lambda: ray.init(address=address or "auto", log_to_driver=False))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise DNIError(
            f"cannot connect to the Ray cluster {cluster!r}: {_first_line(exc)}. Start one "
            "(`ray start --head`), check the address ('ray://host:10001' for Ray Client, "
            "'host:6379' on a node of the cluster), or pass cluster='local'."
        ) from None
    return ray


def session(ray: Any) -> tuple[int, str]:
    """What identifies the Ray this process is connected to now (actors belong to it).

    Parameters
    ----------
    ray : module
        The connected ``ray`` module.

    Returns
    -------
    (int, str)
        How many times this process found Ray not initialised, and the job's id.
    """
    return _SESSION["generation"], ray.get_runtime_context().get_job_id()


def _reachable(address: str, cluster: Any) -> None:
    """Fail in :data:`CONNECT_TIMEOUT_S` when nothing listens at ``address``."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise DNIError(
            f"cluster={cluster!r} is not a Ray address; pass 'ray://host:10001' (Ray Client), "
            "'host:6379' (on a node of the cluster), 'auto' or 'local'."
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S) as s:
            grpc = _speaks_grpc(s)
    except OSError as exc:
        raise DNIError(
            f"cannot reach the Ray cluster at {hostport} within {CONNECT_TIMEOUT_S:g} s "
            f"({exc.strerror or exc}). Start one (`ray start --head`), check the host and "
            "port ('ray://host:10001' for Ray Client), or pass cluster='local'."
        ) from None
    if not grpc:  # ray.init would wait for minutes on a server that is not Ray's
        raise DNIError(
            f"something listens at {hostport}, but it does not answer as a Ray cluster does "
            "(gRPC); check the port ('ray://host:10001' for Ray Client, 'host:6379' for the "
            "head's GCS on a node of the cluster), or pass cluster='local'."
        ) from None


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and
#: its Client server) answers with a SETTINGS frame of its own at once.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _speaks_grpc(sock: socket.socket) -> bool:
    """Whether the server behind ``sock`` answers HTTP/2's preface with a SETTINGS frame
    within :data:`CONNECT_TIMEOUT_S` (a silent or an HTTP/1 server does not)."""
    sock.settimeout(CONNECT_TIMEOUT_S)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    try:
        sock.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9 and time.monotonic() < deadline:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:  # a timeout, or the server closed on the preface
        return False
    return len(head) == 9 and head[3] == 4


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = (text[0] if text else type(exc).__name__).rstrip(".")
    return line if len(line) <= 300 else line[:297] + "..."


@contextlib.contextmanager
def _quiet_ray() -> Iterator[None]:
    """Hide Ray's start-up chatter meant for Ray's own scripts (not errors)."""
    log = logging.getLogger("ray")
    previous = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(previous)


# -- the thread that starts Ray ---------------------------------------------------------

_JOBS: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
    queue.SimpleQueue()
)
_KEEPER: list[threading.Thread] = []
_KEEPER_LOCK = threading.Lock()


def lasting(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread that lives as long as the process; its result or its error.

    The main thread lives that long; any other thread (a background run's) hands ``fn``
    to one daemon thread kept for this purpose, so that the processes ``fn`` starts are
    not killed when the calling thread ends.
    """
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _KEEPER_LOCK:
        if not _KEEPER or not _KEEPER[0].is_alive():
            t = threading.Thread(target=_keep, name="dni_lab-ray-keeper", daemon=True)
            t.start()
            _KEEPER[:] = [t]
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    _JOBS.put((fn, done))
    return done.result()


def _keep() -> None:
    while True:
        fn, done = _JOBS.get()
        if not done.set_running_or_notify_cancel():
            continue
        try:
            done.set_result(fn())
        except BaseException as exc:  # handed to the caller's thread
            done.set_exception(exc)


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
