"""The score table: a score frame paged, sorted and filtered in Python, live while a run streams."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import traitlets

from ..backend.engine.frames import export as export_frame
from ..backend.engine.provenance import provenance
from ..backend.engine.run import Run
from ._base import Panel, as_selection, esm, selection_key
from ._format import counted
from ._paging import apply_filter, apply_sort, next_sort, row_keys
from ._status import QUERY_NOTE, progress_line
from ._table_explore import (
    AUTO_HIDE,
    best_per_hypothesis,
    constant_columns,
    histograms,
    window,
)
from ._table_view import (
    DEFAULT_COLUMNS,
    DEFAULT_SORT,
    HIDDEN,
    build_page,
    build_status,
    effective_sort,
    export_bytes,
    shown_columns,
)

__all__ = ["DEFAULT_COLUMNS", "DEFAULT_SORT", "HIDDEN", "QUERY_NOTE", "ScoreTable", "progress_line"]

class ScoreTable(Panel):
    """A score frame as a table: live while a background run streams, block by block.

    Parameters
    ----------
    source : polars.DataFrame, Run or None
        A score frame, or a run handle (``dl.inspect(..., background=True)``)
        whose frame the table follows until the run ends.
    page_size : int
        Rows per page; only the visible page travels to the browser. 0: one scrolled list
        of all rows, of which only the rows in sight travel (the browser asks for them).
    sort : list, optional
        Initial ``[[column, "asc" | "desc"], ...]`` (``"|col|"`` sorts by the absolute
        value); by default :data:`DEFAULT_SORT`: by measure, then by |unit_score|.
    min_interval : float
        Seconds between two live refreshes (blocks arriving faster are merged).

    Attributes
    ----------
    frame : polars.DataFrame
        The whole score frame as of now.
    data : polars.DataFrame
        The rows the table shows, filtered and sorted (all pages).
    selection : dict
        The clicked row's ``{mid, uid, hid, layer, unit, measure}``.
    """

    _esm = esm("table", "table_parts")
    page_size = traitlets.Int(25).tag(sync=True)
    # wire format: the browser sets these through messages (a header click, _browser_sets) ...
    _sort = traitlets.List().tag(sync=True)
    _filter = traitlets.Unicode("").tag(sync=True)
    _page_index = traitlets.Int(0).tag(sync=True)
    # the best unit per hypothesis (show_best); the columns the person hid (None: not
    # chosen, and a narrow table hides AUTO_HIDE by itself)
    _best = traitlets.Bool(False).tag(sync=True)
    _hidden = traitlets.List(default_value=None, allow_none=True).tag(sync=True)
    _browser_sets = ("_filter", "_page_index", "page_size", "_best", "_hidden")
    # ... and Python answers with the visible page and the run's progress
    # (an empty _sort means DEFAULT_SORT; _page["sort"] names the sort in force)
    _page = traitlets.Dict().tag(sync=True)
    _status = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        source: pl.DataFrame | Run | None = None,
        page_size: int = 25,
        sort: list[Any] | None = None,
        columns: list[str] | None = None,
        min_interval: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(page_size=page_size, _sort=list(sort or []), **kwargs)
        self._lock = threading.RLock()
        self._columns = list(columns) if columns else None
        self._min_interval = min_interval
        self._last_push = 0.0
        self._seq = 0
        self._frame: pl.DataFrame = pl.DataFrame()
        self._view: pl.DataFrame = pl.DataFrame()
        self._explore: dict[str, Any] = {}  # the view's summaries (_refresh)
        self._error = ""
        self.run: Run | None = None
        self._stop_requested = False
        self._frame_callbacks: list[Callable[[pl.DataFrame, bool], None]] = []
        self.note = ""  # said under the header (the magic: what the live frame is)
        self._final_shown = False
        self.on_msg(self._on_message)
        self.observe(self._on_view_change, names=["_sort", "_filter", "page_size", "_best",
                                                  "_hidden"])
        self.observe(self._on_page_change, names=["_page_index"])
        self.observe(self._show_selected, names=["selection"])
        if isinstance(source, pl.DataFrame):
            self.frame = source
        elif source is not None:
            self.watch(source)
        else:
            self._refresh()

    # -- public -----------------------------------------------------------------
    @property
    def frame(self) -> pl.DataFrame:
        return self._frame

    @frame.setter
    def frame(self, frame: pl.DataFrame) -> None:
        with self._lock:
            self._frame = frame
            self._refresh()
        self._notify_frame(True)

    def on_frame(self, callback: Callable[[pl.DataFrame, bool], None]) -> None:
        """Call ``callback(frame, final)`` when the frame changes (``final``: the run ended
        or the frame was set by hand); linked plots use it."""
        self._frame_callbacks.append(callback)

    def _notify_frame(self, final: bool) -> None:
        for cb in list(self._frame_callbacks):
            cb(self._frame, final)

    @property
    def data(self) -> pl.DataFrame:
        return self._view

    def watch(self, run: Run) -> ScoreTable:
        """Follow ``run``: refresh after each block and once when it ends."""
        self.run = run
        if not self.note and hasattr(run.inspection, "grouping"):  # a query's run
            self.note = QUERY_NOTE.format(result="the run's result()")
        run.on_block(self._on_block)
        self._stop_requested = False
        with self._lock:
            self._frame = run.live_frame()
            self._refresh()
        self._notify_frame(run.done)
        return self

    def stop(self) -> None:
        """Cancel the watched run after the block in flight (the Stop button)."""
        if self.run is not None:
            self.run.cancel()
            self._stop_requested = True
            self._push_status()

    def update(self) -> None:
        """Show the watched run's current frame now (the ``%%inspect`` magic calls this from
        the kernel's main thread; blocks arriving faster than ``min_interval`` are merged)."""
        if self.run is not None:
            self._on_block(self.run)

    def finish(self) -> None:
        """Show the run's final frame and state."""
        if self.run is not None:
            with self._lock:
                self._frame = self.run.live_frame()
                self._refresh()
            self._notify_frame(True)
            self._snapshot_final()

    def _running(self) -> bool:
        return self.run is not None and not self.run.done

    def _publish_final(self) -> None:
        if self.run is not None:
            with self._lock:
                self._frame = self.run.live_frame()
                self._refresh()
        self.refresh_snapshot()

    def _snapshot_final(self) -> None:
        # Once per run: the displayed bundle's static part becomes the final table (saved
        # with the notebook; front ends apply it while the displaying cell still runs).
        if self.run is not None and self.run.done and not self._final_shown:
            self._final_shown = True
            self.refresh_snapshot()

    def snapshot_html(self) -> str:
        from ._base import snapshot

        cols = self._shown_columns()
        state = f"{self._describe()}"
        if self.run is not None:
            state += " · " + progress_line(self._status)
        note = self.note
        if self.run is not None and not self.run.done:
            note = (
                "This snapshot was taken while the run went on; the live table follows it in "
                "the notebook. " + note
            ).strip()
        return snapshot("Scores", state, self._view.select(cols), self.page_size or 25, note)

    def show_best(self, on: bool = True) -> None:
        """Show only the best unit of each hypothesis: per model (and checkpoint),
        hypothesis and measure, the row with the largest ``|unit_score|`` (nulls last)
        among the rows the filter keeps; the sort orders them (the toolbar's toggle)."""
        self._best = bool(on)
        self._page_index = 0

    def hide_columns(self, columns: list[str] | None) -> None:
        """Hide ``columns`` (the columns menu); ``[]`` shows every column, ``None`` lets a
        narrow table hide the unit id (which repeats layer and unit)."""
        self._hidden = None if columns is None else list(columns)

    def sort_by(self, column: str, descending: bool = True) -> None:
        self._sort = [[column, "desc" if descending else "asc"]]

    def click_header(self, column: str) -> list[list[str]]:
        """What a click on ``column``'s header does: the next sort of its cycle (a score
        column: |score| descending, descending, ascending; another column: ascending,
        descending), then the default order; back to the first page. Returns the sort.

        Under the default order ``unit_score`` is already by |score| descending, so its
        first click sorts it descending (positive first)."""
        self._sort = next_sort(self._sort, column, DEFAULT_SORT)
        self._page_index = 0
        return self._sort

    def filter(self, text: str) -> None:
        """Show rows matching an SQL condition or containing ``text`` (see ``_paging``)."""
        self._filter = text

    def export(self, path: str | Path) -> Path:
        """Write the shown rows (:attr:`data`) as Parquet, CSV, Arrow or JSON, by suffix.

        The file carries the frame's provenance (``dl.provenance``: parameters, versions,
        hashes, ``partial``) or, while a run reads, its parameters with ``partial`` True;
        ``view`` says which rows were shown (filter, sort, rows of how many).
        """
        meta = provenance(self._frame)
        if meta is None:
            metadata = getattr(getattr(self.run, "inspection", None), "metadata", None)
            meta = metadata() if callable(metadata) else {}
        meta = dict(meta)
        if self._running():
            meta["partial"] = True
            meta["partial_reason"] = "exported while the run was still reading"
        meta["view"] = {"rows": self._view.height, "of": self._frame.height,
                        "filter": self._filter or None, "sort": list(self._sort)}  # fmt: skip
        return export_frame(self._view, path, meta)

    def select_row(self, index: int) -> dict[str, Any]:
        """Select row ``index`` of :attr:`data` (what a click on a row does)."""
        self.selection = as_selection(self._view.slice(index, 1))
        return self.selection

    def _select(self, index: int, key: str) -> None:
        # The view may have changed (a live block) between the page's drawing and the
        # click: trust the row's key over its position.
        with self._lock:
            view = self._view
            if key and row_keys(view.slice(index, 1)) != [key]:
                hits = [i for i, k in enumerate(row_keys(view)) if k == key]
                if not hits:
                    return
                index = hits[0]
            self.selection = as_selection(view.slice(index, 1))

    def _describe(self) -> str:
        shown = f"{self._view.height:,} of {counted(self._frame.height, 'row')}"
        if self._best:
            shown += ", the best unit per hypothesis"
        return f"{shown}, {self._state()}" if self.run is not None else shown

    # -- refresh ----------------------------------------------------------------
    def _on_block(self, run: Run) -> None:
        # Called from the run's worker thread: merge blocks that arrive faster than
        # the browser can usefully redraw, but always show the last one.
        now = time.perf_counter()
        if not run.done and now - self._last_push < self._min_interval:
            self._push_status()
            return
        with self._lock:
            self._frame = run.live_frame()
            self._refresh()
        self._notify_frame(run.done)
        if run.done:
            self._snapshot_final()

    def _show_selected(self, change: Any) -> None:
        """Page to the selected row when it was chosen elsewhere (a plot's point, Python)."""
        key = selection_key(change["new"])
        with self._lock:
            if not key or key in self._page.get("keys", []):
                return
            hits = [i for i, k in enumerate(row_keys(self._view)) if k == key]
            if hits and self.page_size <= 0:  # a scrolled table scrolls to the row
                self.send({"type": "reveal", "index": hits[0], "key": key})
            elif hits:
                self._page_index = hits[0] // self.page_size

    def _on_view_change(self, _change: Any) -> None:
        with self._lock:
            self._refresh()

    def _on_page_change(self, _change: Any) -> None:
        with self._lock:
            self._push_page()

    def _refresh(self) -> None:
        """Recompute the view (filter, sort) and send the visible page and status."""
        try:
            view = apply_filter(self._frame, self._filter)
            self._error = ""
        except ValueError as exc:
            view = self._frame
            self._error = str(exc)
        if self._best:
            try:
                view = best_per_hypothesis(view)
            except ValueError as exc:
                self._error = self._error or str(exc)
        self._view = apply_sort(view, self._effective_sort())
        # the view's summaries, once per view (a page change sends them again as they are)
        every = shown_columns(self._view, self._columns)
        constant = constant_columns(self._frame, every)
        self._explore = {"all_columns": every, "hidden": self._hidden, "best": self._best,
                         "auto_hide": [c for c in AUTO_HIDE if c in every] + list(constant),
                         "constant": constant,
                         "hist": histograms(self._view, self._shown_columns())}  # fmt: skip
        self._push_page()

    def _effective_sort(self) -> list[Any]:
        return effective_sort(self._sort)

    def _shown_columns(self) -> list[str]:
        return shown_columns(self._view, self._columns, self._hidden)

    def _push_page(self) -> None:
        self._seq += 1
        page = build_page(self._view, self._page_index, self.page_size,
                          self._shown_columns(), self._sort, self._seq, self._explore)
        self._last_push = time.perf_counter()
        with self.hold_sync():
            self._page = page
            self._push_status()

    def _state(self) -> str:
        if self.run is None:
            return "static"
        p = self.run.progress
        if self.run.error is not None:
            return "failed"
        return "cancelled" if p.cancelled else "done" if self.run.done else "running"

    def _push_status(self) -> None:
        self._status = build_status(
            self._view, self._frame, self.run, self._state(), self._error, self.note,
            self._stop_requested,
        )

    # -- messages from the browser ------------------------------------------------
    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: list) -> None:
        kind = content.get("type")
        if kind == "stop":
            self.stop()
        elif kind == "select":
            self._select(int(content["index"]), content.get("key", ""))
        elif kind == "sort":
            self.click_header(str(content["column"]))
        elif kind == "rows":  # a scrolled table's window in sight
            with self._lock:
                answer = window(self._view, content.get("start", 0), content.get("count", 0),
                                self._shown_columns(), self._seq)
            self.send(answer)
        elif kind == "export":
            fmt = content.get("format", "parquet")
            self.send(*self._export_bytes(fmt))

    def _export_bytes(self, fmt: str) -> tuple[dict[str, Any], list[bytes]]:
        return export_bytes(self.export, fmt)
