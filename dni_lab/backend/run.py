"""Background runs: a handle with the current frame, progress, callbacks and cancel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

import polars as pl

from .engine import Inspection, Progress
from .errors import CancelledError


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

    def result(self, timeout: float | None = None, partial: bool = True) -> pl.DataFrame:
        """The final frame; re-raises the run's error. With ``partial=False`` a cancelled
        run raises :class:`CancelledError` instead of returning its partial frame."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run did not finish within {timeout} s; call result() later.")
        if self._error is not None:
            raise self._error
        if self.progress.cancelled and not partial:
            raise CancelledError("the run was cancelled; result(partial=True) returns its frame.")
        assert self._final is not None
        return self._final

    def __repr__(self) -> str:
        p = self.progress
        state = "cancelled" if p.cancelled else "done" if self.done else "running"
        return (
            f"<Run {state}: {p.records_read} records, {p.blocks} blocks, "
            f"{p.share_converged:.0%} converged>"
        )

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
