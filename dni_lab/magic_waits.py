"""How a cell that names a pending ``%%inspect -o NAME`` waits for its run, and how the
run's result is handed over to ``NAME`` (:class:`RunWaiting`, mixed into the magics).

The cell awaits the run where the kernel allows (:mod:`dni_lab.cell_await`: widgets stay
alive), else the ``pre_run_cell`` hook blocks. Either way an interrupt stops the run and
``NAME`` gets the partial result, said in one line on stderr.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import polars as pl

from .backend.engine.provenance import partial_note, provenance
from .backend.query import QueryRun

_PARTIAL = "dni_lab: {what} holds a {note}"
_POLL_S = 0.1


class RunWaiting:
    """The waiting half of :class:`~dni_lab.magic.InspectMagics`: ``pending`` maps ``-o``
    names to runs still going; ``_awaiter`` is the cell transformer, if the kernel has one."""

    shell: Any
    pending: dict[str, QueryRun]
    _awaiter: Any
    _async_cell: str | None

    def _waiting_names(self, source: str) -> list[str]:
        """Pending ``-o`` names that ``source`` uses whose runs are still going."""
        ns = self.shell.user_ns
        return [
            name
            for name, run in self.pending.items()
            if not run.done and ns.get(name) is run and _names(source, name)
        ]

    def _wants_async(self, raw_cell: str) -> bool:
        """Asked before a cell runs (cell_await): await its runs, keeping widgets alive."""
        if not self._waiting_names(raw_cell):
            return False
        self._async_cell = raw_cell
        return True

    async def _await_runs(self, names: tuple[str, ...]) -> None:
        """What an awaiting cell awaits first: each run, then its result bound to its name.

        The kernel handles widget messages meanwhile (Stop, paging, the filter). Kernel →
        Interrupt cancels the cell's task here: the run stops, the name gets the partial
        result, and the cell goes on, as a blocking wait's interrupt does.
        """
        import asyncio

        for name in names:
            run = self.pending.get(name)
            if run is None:
                continue
            try:
                while not run.done:
                    await asyncio.sleep(_POLL_S / 2)
            except asyncio.CancelledError:
                _stop(run)
                task = asyncio.current_task()
                if task is not None and hasattr(task, "uncancel"):
                    task.uncancel()  # handled: the cell is not cancelled (Python 3.11+)
            self._hand_over(name, run, named=True)

    def wait_for_use(self, info: Any) -> None:
        """``pre_run_cell`` hook: a cell that names a pending ``-o`` variable waits for its run.

        Where the kernel runs the cell as a coroutine (:mod:`dni_lab.cell_await`), the cell
        awaits the run itself and widgets stay alive; otherwise this hook blocks. An
        interrupt while waiting stops the run; the variable gets the partial result.
        """
        ns = self.shell.user_ns
        source = getattr(info, "raw_cell", "") or ""
        awaiting = self._awaiter is not None and self._async_cell == source
        self._async_cell = None
        later: list[str] = []
        for name, run in list(self.pending.items()):
            if ns.get(name) is not run and not run.done:
                del self.pending[name]  # the user rebound the name: not ours any more
                continue
            named = _names(source, name)
            if not run.done and not named:
                continue
            if awaiting and not run.done:
                later.append(name)  # the cell's first statement awaits it
                continue
            try:
                while not run.wait(_POLL_S):
                    pass
            except KeyboardInterrupt:
                _stop(run)
            self._hand_over(name, run, named)
        if self._awaiter is not None:
            self._awaiter.names = tuple(later)

    def _hand_over(self, name: str, run: QueryRun, named: bool) -> None:
        """Bind ``name`` to ``run``'s result (once it ended) and say what it holds."""
        ns = self.shell.user_ns
        _bind(ns, name, run)
        self.pending.pop(name, None)
        if run.error is None and ns.get(name) is run.result(warn=False):
            _say_partial(ns[name], name)  # here, in the cell that first follows the run
        if run.error is not None and named:  # else `name.height` would fail obscurely
            print(
                f"dni_lab: the %%inspect run behind {name!r} failed: "
                f"{type(run.error).__name__}: {run.error}\n{name} is still its handle; "
                f"{name}.result() raises the error.",
                file=sys.stderr,
            )


def _names(source: str, name: str) -> bool:
    """Whether cell ``source`` uses the variable ``name`` (not as an attribute or a part)."""
    return re.search(rf"(?<![\w.]){re.escape(name)}\b", source) is not None


def _say_partial(frame: pl.DataFrame, what: str) -> None:
    """One line on stderr when ``frame`` is a partial result (a Stop or an interrupt)."""
    note = partial_note(provenance(frame))
    if note is not None:
        print(_PARTIAL.format(what=what, note=note), file=sys.stderr)


def _stop(run: QueryRun) -> None:
    """Cancel ``run`` and wait for it, through further interrupts (the partial frame must
    survive an impatient second Ctrl-C)."""
    run.cancel()
    while True:
        try:
            run.wait()
            return
        except KeyboardInterrupt:
            continue


def _bind(ns: dict[str, Any], name: str, run: QueryRun) -> None:
    """``ns[name] = run.result()`` if ``name`` still holds the run (the user may have rebound
    it); a failed run stays bound as its handle, whose ``result()`` raises the error."""
    if ns.get(name) is run and run.done and run.error is None:
        # warn=False: this may be the run's thread; the next cell prints the note
        ns[name] = run.result(warn=False)
