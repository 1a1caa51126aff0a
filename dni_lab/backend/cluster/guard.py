"""A session that never wedges: the user's ``ray.shutdown()`` during a run, and Ray's
own messages kept out of the notebook.

While a run talks to Ray (:func:`no_auto_init`), Ray's automatic ``ray.init()`` is off
and ``ray.shutdown`` (wrapped by :func:`guard_shutdown` when a run connects) first waits
for the runs to stop calling Ray: they check :func:`check_ray` between calls and end
with a partial frame. Ray's system messages (a dead node's "Raylet is terminated") go
to :func:`ray_log`'s file (:func:`divert_ray_messages`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

#: Threads of runs talking to Ray now (with how deep), Ray's own auto-init switch as it
#: was before the first, and the condition a ray.shutdown() waits on for them to leave.
_USERS: dict[int, int] = {}
_SAVED: dict[str, Any] = {"auto": True}
_USERS_CHANGED = threading.Condition()
#: Set while the user's ray.shutdown() waits for the runs to stop calling Ray.
LEAVING = threading.Event()

#: Seconds ray.shutdown() waits for the runs to stop calling Ray (a poll is 0.1 s).
LEAVE_WAIT_S = 10.0


class RayGone(Exception):
    """The user's ``ray.shutdown()``: the run must stop calling Ray now."""


@contextlib.contextmanager
def no_auto_init() -> Iterator[None]:
    """Mark this thread as a run talking to Ray, with Ray's automatic ``ray.init()`` off.

    After the user's ``ray.shutdown()`` during a run, the run's next Ray call would
    start a new local Ray of its own (one per call: several clusters, then Ray's raw
    start-up error), and a call that races the shutdown makes Ray's C++ core end the
    whole process ("The core worker has already been shutdown ... The process will
    exit"). So auto-init is off while runs talk to Ray, and ``ray.shutdown()`` (wrapped
    by :func:`guard_shutdown`) first sets :data:`LEAVING` and waits for the runs to
    stop calling Ray: they check :func:`ray_gone` between calls and end partial.
    """
    try:
        from ray._private import auto_init_hook as hook
    except ImportError:  # another Ray layout: its default stays
        hook = None
    me = threading.get_ident()
    with _USERS_CHANGED:
        if not _USERS and hook is not None:
            _SAVED["auto"] = hook.enable_auto_connect
            hook.enable_auto_connect = False
        _USERS[me] = _USERS.get(me, 0) + 1
    try:
        yield
    finally:
        with _USERS_CHANGED:
            _USERS[me] -= 1
            if not _USERS[me]:
                del _USERS[me]
            if not _USERS and hook is not None:
                hook.enable_auto_connect = _SAVED["auto"]
            _USERS_CHANGED.notify_all()


def guard_shutdown(ray: Any) -> None:
    """Wrap ``ray.shutdown`` so that it waits (up to :data:`LEAVE_WAIT_S`) for the runs
    talking to Ray to stop before Ray's core goes (see :func:`no_auto_init`)."""
    original = ray.shutdown
    if getattr(original, "_dni_lab", False):
        return

    def shutdown(*args: Any, **kwargs: Any) -> Any:
        LEAVING.set()
        try:
            me = threading.get_ident()  # a run's own thread (its on_block) stops after
            with _USERS_CHANGED:
                _USERS_CHANGED.wait_for(lambda: not set(_USERS) - {me}, LEAVE_WAIT_S)
            return original(*args, **kwargs)
        finally:
            LEAVING.clear()

    shutdown._dni_lab = True  # type: ignore[attr-defined]
    shutdown.__doc__ = original.__doc__
    ray.shutdown = shutdown


def ray_gone(ray: Any) -> bool:
    """Whether this process is leaving, or left, Ray (``ray.shutdown()``)."""
    if LEAVING.is_set():
        return True
    try:
        return not ray.is_initialized()
    except Exception:  # a Ray half shut down
        return True


def check_ray(ray: Any) -> None:
    """Raise :class:`RayGone` when the user shuts Ray down: no more Ray calls."""
    if ray_gone(ray):
        raise RayGone("ray.shutdown() during the run")


#: Where Ray's own system messages go instead of the notebook (``DNI_LAB_RAY_LOG``
#: names another file; ``-`` leaves them where Ray prints them).
RAY_LOG = os.path.join(tempfile.gettempdir(), f"dni_lab-ray-{os.getpid()}.log")


def ray_log() -> str | None:
    """The file Ray's system messages go to, or None where they are left to Ray."""
    target = os.environ.get("DNI_LAB_RAY_LOG", RAY_LOG)
    return None if target == "-" else target


def divert_ray_messages() -> None:
    """Send Ray's system messages (a dead node's ~25 lines of "Raylet is terminated",
    task retries, a worker's death) to :func:`ray_log`'s file, not the notebook.

    Ray prints them from a thread of its own through ``print_to_stdstream`` with the
    sender ``"raylet"``; the output of your own tasks and actors still reaches you.
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # another Ray layout: its printing stays
        return
    original = ray_worker.print_to_stdstream
    if getattr(original, "_dni_lab", False):
        return

    def diverted(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        target = ray_log()
        if target is not None and data.get("pid") == "raylet":
            try:
                with open(target, "a", encoding="utf-8") as f:
                    f.writelines(f"{line}\n" for line in data.get("lines", []))
                return None
            except OSError:  # an unwritable file: Ray prints it as before
                pass
        return original(data, *args, **kwargs)

    diverted._dni_lab = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = diverted
