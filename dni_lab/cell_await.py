"""A cell that waits for a background run awaits it, so the panels stay alive meanwhile.

A cell naming a pending ``%%inspect -o NAME`` waits for that run before it runs. Waiting
in a ``pre_run_cell`` hook blocks the kernel's main thread, and with it every widget
message: Stop, paging and the filter did nothing until the run ended (Stop pressed 4 s
into a 29 s run: the run said "done"). ipykernel 7 dispatches widget (comm) messages
while an *async* cell awaits, so such a cell is made async instead: the shell is told to
run it as a coroutine (:func:`install`), and the cell's syntax tree starts with
``await wait_pending(names)`` (:class:`AwaitPending`), which polls the runs with
``asyncio.sleep``. The inserted statement takes the first statement's line number, so
tracebacks still point at the person's own lines.

Where the kernel cannot do that (an older ipykernel, a terminal IPython, another event
loop runner) the hook blocks as before (:meth:`~dni_lab.magic.InspectMagics.wait_for_use`).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

#: the coroutine the inserted statement awaits (set by :func:`install`)
_WAIT: Callable[[tuple[str, ...]], Awaitable[None]] | None = None


@functools.cache
def comms_run_beside_async_cells() -> bool:
    """Whether this ipykernel dispatches comm messages while an async cell awaits.

    Read from its shell dispatcher's source: ipykernel 7.x added the concurrent comm
    dispatch without a version flag or a public API to ask.
    """
    try:
        from ipykernel.kernelbase import Kernel

        source = inspect.getsource(Kernel.shell_main)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    return "comm_msg" in source and "concurrent=True" in source


class AwaitPending(ast.NodeTransformer):
    """Prepends ``await wait_pending(names)`` to the next cell's tree when ``names`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.names: tuple[str, ...] = ()

    def visit_Module(self, node: ast.Module) -> ast.Module:
        names, self.names = self.names, ()
        if not names:
            return node
        stmt = ast.parse(f"await __import__('dni_lab.cell_await').cell_await.wait({names!r})")
        first = node.body[0] if node.body else None
        for sub in ast.walk(stmt):  # the first statement's place: tracebacks stay right
            if hasattr(sub, "lineno"):
                sub.lineno = sub.end_lineno = getattr(first, "lineno", 1)
                sub.col_offset = sub.end_col_offset = 0
        node.body[:0] = stmt.body
        return node


async def wait(names: tuple[str, ...]) -> None:
    """What the inserted statement awaits: the magic's runs behind ``names``."""
    if _WAIT is not None:
        await _WAIT(names)


def install(
    shell: Any,
    wants_async: Callable[[str], bool],
    wait_for: Callable[[tuple[str, ...]], Awaitable[None]],
) -> AwaitPending | None:
    """Make cells for which ``wants_async(raw_cell)`` holds run as coroutines on the kernel's
    loop, awaiting ``wait_for(names)`` first; returns the transformer (``None``: the kernel
    cannot, and the caller keeps blocking)."""
    global _WAIT
    try:
        from IPython.core.interactiveshell import _asyncio_runner
    except ImportError:
        return None
    if not comms_run_beside_async_cells():
        return None
    original = shell.should_run_async

    def should_run_async(
        raw_cell: str, *, transformed_cell: str | None = None, preprocessing_exc_tuple: Any = None
    ) -> bool:
        # only where ipykernel will run the coroutine on its own running loop
        if (
            preprocessing_exc_tuple is None
            and shell.loop_runner is _asyncio_runner
            and _loop_running()
            and wants_async(raw_cell)
        ):
            return True
        return original(
            raw_cell,
            transformed_cell=transformed_cell,
            preprocessing_exc_tuple=preprocessing_exc_tuple,
        )

    shell.should_run_async = should_run_async
    transformer = AwaitPending()
    shell.ast_transformers.append(transformer)
    _WAIT = wait_for
    return transformer


def _loop_running() -> bool:
    try:
        return asyncio.get_event_loop().is_running()
    except RuntimeError:
        return False
