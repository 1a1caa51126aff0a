"""Background runs: a handle with the current frame, progress, callbacks and cancel; and a
foreground run that Ctrl-C stops like the Stop button, keeping the partial result."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Protocol

import polars as pl

from ..errors import CancelledError
from .inspection import Inspection, Progress
from .provenance import PartialResultWarning, partial_note, provenance


class Run:
    """A running (or finished) inspection.

    Obtain one with ``dl.inspect(..., background=True)``. The inspection runs in
    a worker thread; PyTorch releases the GIL in its kernels, so a notebook stays
    responsive.

    Attributes
    ----------
    progress : Progress
        Records read, blocks, share of converged pairs, elapsed time.
    """

    #: How a notebook shows a run (``display(run)``, or a run as a cell's last line): set by
    #: ``dni_lab`` to a live score table; the backend itself never imports widgets.
    display_hook: ClassVar[Callable[[Run], Any] | None] = None

    def __init__(self, inspection: Inspection) -> None:
        self.inspection = inspection
        self._callbacks: list[Callable[[Run], None]] = []
        self._lock = threading.Lock()
        self._frame: pl.DataFrame | None = None
        self._final: pl.DataFrame | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._noted = False  # the partial-result warning is given once per run
        self._thread = threading.Thread(target=self._work, name="dni_lab-run", daemon=True)

    def start(self) -> Run:
        self._thread.start()
        return self

    # -- public -----------------------------------------------------------------
    @property
    def progress(self) -> Progress:
        return self.inspection.progress

    @property
    def frame(self) -> pl.DataFrame:
        """The score frame as of the last finished block (converged pairs frozen)."""
        with self._lock:
            if self._final is not None:
                return self._final
            if self._frame is None:
                from .frames import empty_frame

                return empty_frame()
            return self._frame

    def live_frame(self) -> pl.DataFrame:
        """The frame a live view shows: :attr:`frame` (a query's run adds ``epoch``)."""
        return self.frame

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def on_block(self, callback: Callable[[Run], None]) -> Callable[[Run], None]:
        """Call ``callback(run)`` after every block (and once at the end)."""
        self._callbacks.append(callback)
        return callback

    def cancel(self) -> None:
        """Stop after the block in flight; the frame stays consistent, unconverged pairs
        marked ``converged=False``. A probe being fitted stops at its next Newton step
        (well under a second on the demo), keeping the block's data."""
        self.inspection.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends; True if it did within ``timeout``."""
        return self._done.wait(timeout)

    def result(
        self, timeout: float | None = None, partial: bool = True, warn: bool = True
    ) -> pl.DataFrame:
        """The final frame; re-raises the run's error.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the run to end.
        partial : bool
            With False a cancelled run raises :class:`CancelledError` instead of
            returning its partial frame.
        warn : bool
            Warn (:class:`PartialResultWarning`, once per run) when the frame is partial:
            ``dl.provenance(frame)["partial_reason"]`` says why.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run did not finish within {timeout} s; call result() later.")
        if self._error is not None:
            raise self._error
        if self.progress.cancelled and not partial:
            raise CancelledError("the run was cancelled; result(partial=True) returns its frame.")
        assert self._final is not None
        if warn and not self._noted:
            self._noted = warn_if_partial(self._final)
        return self._final

    def __repr__(self) -> str:
        p = self.progress
        return (
            f"<Run {self._state()}: {p.read_text()}, {p.blocks} blocks, "
            f"{p.share_converged:.0%} converged>"
        )

    def _state(self) -> str:
        p = self.progress
        return "cancelled" if p.cancelled else "done" if self.done else "running"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        view = None
        if Run.display_hook is not None:
            try:
                view = Run.display_hook(self)
            except ImportError:  # no widget packages: the text repr says where the run stands
                view = None
        if view is None:
            print(repr(self))
        else:
            display(view)

    # -- worker -----------------------------------------------------------------
    def _work(self) -> None:
        try:
            final = self.inspection.run(on_block=self._after_block)
            with self._lock:
                self._final = final
        except BaseException as exc:  # surfaced by result(); the thread must not die silently
            self._error = exc
            self.inspection.progress.done = True
        finally:
            self._done.set()
            self._notify()

    def _after_block(self, _insp: Inspection) -> None:
        frame = self.inspection.frame(final=False)
        with self._lock:
            self._frame = frame
        self._notify()

    def _notify(self) -> None:
        for cb in list(self._callbacks):
            try:
                cb(self)
            except Exception as exc:  # a broken UI callback must not kill the run
                import warnings

                warnings.warn(f"progress callback {cb!r} raised {exc!r}", stacklevel=1)


def start_run(inspection: Inspection, callbacks: Any = ()) -> Run:
    run = Run(inspection)
    for cb in callbacks:
        run.on_block(cb)
    return run.start()


class Stoppable(Protocol):
    """What a foreground run needs of an inspection (an engine or a query inspection)."""

    def run(self, on_block: Callable[[Any], None] | None = None) -> pl.DataFrame: ...

    def cancel(self) -> None: ...


def run_here(inspection: Stoppable, on_block: Callable[[Any], None] | None = None) -> pl.DataFrame:
    """Run ``inspection`` in this thread; Ctrl-C stops it as the Stop button does.

    The first Ctrl-C (a kernel's interrupt) cancels after the block in flight and the
    partial frame is returned, with a :class:`PartialResultWarning`; a second one
    interrupts at once.

    Parameters
    ----------
    inspection : Inspection or QueryInspection
        What to run.
    on_block : callable, optional
        Called after every block.

    Returns
    -------
    polars.DataFrame
        The final frame; ``dl.provenance(frame)["partial"]`` says whether it is partial.
    """
    with interrupt_cancels(inspection):
        frame = inspection.run(on_block=on_block)
    warn_if_partial(frame)
    return frame


@contextlib.contextmanager
def interrupt_cancels(inspection: Stoppable) -> Iterator[None]:
    """While inside, SIGINT cancels ``inspection`` instead of raising KeyboardInterrupt.

    Only in the main thread, and only over Python's own handler: a handler of someone
    else's (or SIGINT ignored) is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield
        return

    def on_interrupt(_signum: int, _frame: Any) -> None:
        inspection.cancel()
        # a second Ctrl-C means "now": it raises as usual
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def warn_if_partial(frame: pl.DataFrame) -> bool:
    """Warn with the frame's one-line partial-result note; True if it is partial.

    The warning names the caller's line outside dni_lab (``dl.inspect(...)``,
    ``run.result()``), however deep inside the package it was raised.
    """
    note = partial_note(provenance(frame))
    if note is None:
        return False
    level, f = 1, sys._getframe(0)
    while f.f_back is not None and f.f_globals.get("__name__", "").startswith("dni_lab"):
        f, level = f.f_back, level + 1
    warnings.warn(note, PartialResultWarning, stacklevel=level)
    return True
