"""What the score table shows, computed from its frame: columns, order, the visible page,
the status line's numbers, and the bytes of an export. Pure functions of their arguments
(the :class:`~.table.ScoreTable` panel holds the state and the locks)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from ..backend.engine.run import Run
from ._paging import n_pages, page_payload
from ._status import run_status

# Shown by default; other columns of the frame (e.g. `epoch` from a query) follow them.
DEFAULT_COLUMNS = (
    "mid",
    "epoch",
    "layer",
    "unit",
    "uid",
    "hid",
    "measure",
    "unit_score",
    "group_score",
    "err",
    "n_records",
    "converged",
)
HIDDEN = ("group", "reason")
#: Without a sort of the person's own: each measure's rows together (probe coefficients and
#: correlations are not on one scale), strongest |score| first (a unit at -0.72 tells as
#: much as one at +0.72).
DEFAULT_SORT = [["measure", "asc"], ["|unit_score|", "desc"]]

_MIME = {"parquet": "application/vnd.apache.parquet", "csv": "text/csv"}
#: Rows of a scrolled table that come with the view (its first screens: the first paint
#: needs no request).
FIRST_WINDOW = 100


def effective_sort(own: list[Any]) -> list[Any]:
    """The sort in force: the person's own, else :data:`DEFAULT_SORT`."""
    return [list(k) for k in own] if own else DEFAULT_SORT


def shown_columns(
    view: pl.DataFrame, columns: list[str] | None, hidden: list[str] | None = None
) -> list[str]:
    """``columns`` if given; else :data:`DEFAULT_COLUMNS` present, then the frame's others
    (an ``epoch`` of a query, a user's column), never :data:`HIDDEN`; less those the person
    hid (``hidden``)."""
    cols = columns or [c for c in DEFAULT_COLUMNS if c in view.columns] + [
        c for c in view.columns if c not in DEFAULT_COLUMNS and c not in HIDDEN
    ]
    return [c for c in cols if c not in (hidden or ())]


def build_page(
    view: pl.DataFrame, page_index: int, page_size: int, cols: list[str], own_sort: list[Any],
    seq: int, explore: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``_page`` payload: the visible rows of ``view`` and what the browser needs to draw
    them (the sort in force, row keys for selection, each null score's reason).

    ``page_size`` 0 scrolls through all rows: the payload holds the first window
    (``n_rows`` says how many there are) and the browser asks for others
    (:func:`~._table_explore.window`). ``explore`` (the columns menu, the best-unit view,
    each shown numeric column's histogram ``hist``: summaries of the view, computed once
    per view by the caller, not per page) is passed on.
    """
    if page_size > 0:
        page = page_payload(view, page_index, page_size, cols)
        page["n_pages"] = n_pages(view.height, page_size)
    else:
        page = page_payload(view, 0, FIRST_WINDOW, cols)
        page["n_pages"] = 1
    page["scroll"] = page_size <= 0
    page["n_rows"] = view.height
    page["sort"] = effective_sort(own_sort)
    page["default_sort"] = not own_sort
    page.update(explore or {})
    page["seq"] = seq
    page["sent_at"] = time.time() * 1000.0
    return page


def build_status(
    view: pl.DataFrame, frame: pl.DataFrame, run: Run | None, state: str, error: str,
    note: str, stop_requested: bool,
) -> dict[str, Any]:
    """The ``_status`` payload: rows shown of all, the run's state and progress, an error."""
    status: dict[str, Any] = {
        "n_rows": view.height,
        "n_total": frame.height,
        "state": state,
        "error": error or (repr(run.error) if run and run.error else ""),
        "note": note,
    }
    if run is not None:
        status.update(run_status(run), stopping=stop_requested and not run.done)
        if "converged" in frame.columns and frame.height:
            # the rows' own ✓ column: a run that read to the end settles every pair,
            # which the engine's count of early convergences does not include
            status["share_converged"] = round(float(frame["converged"].mean()), 4)
    return status


def export_bytes(
    export: Callable[[Path], Path], fmt: str
) -> tuple[dict[str, Any], list[bytes]]:
    """The download message and bytes for the export button: ``export(path)`` writes the
    shown rows to a temporary file of format ``fmt``."""
    if fmt not in _MIME:
        raise ValueError(f"cannot export as {fmt!r}; use 'parquet' or 'csv'.")
    with tempfile.TemporaryDirectory() as tmp:
        payload = export(Path(tmp) / f"scores.{fmt}").read_bytes()
    msg = {"type": "download", "name": f"scores.{fmt}", "mime": _MIME[fmt]}
    return msg, [payload]
