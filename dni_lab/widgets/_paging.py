"""Filtering, sorting and paging of a frame in Python: only the visible page travels.

A page goes to the browser as column names, kinds and rows of plain values
(a page is at most a few hundred rows, so this is a few kilobytes; the frame
itself never leaves the kernel).
"""

from __future__ import annotations

import math
import re
from typing import Any

import polars as pl

from ..backend.query.sql import refuse_file_access, refuse_file_scan

# A filter with one of these reads as an SQL condition; anything else is a text search.
_SQLISH = re.compile(r"[=<>!]|\b(and|or|not|like|ilike|is|in|between)\b", re.IGNORECASE)


_WHERE = "SELECT * FROM self WHERE "
_AT = re.compile(r"\s*at Line: (\d+), Column: (\d+)")
_COLUMN = re.compile(r'unable to find column "([^"]+)"')


def filter_error(text: str, exc: BaseException) -> str:
    """Polars' SQL error for a filter, told in terms of what the person typed.

    Polars counts columns in the statement it was given (``SELECT * FROM self WHERE``
    plus the filter) and appends its query plan; both would point the reader at text
    they never wrote. The message keeps Polars' first line (and its "Did you mean"),
    drops the plan, and puts a caret under the position in the filter itself.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines()]
    first = lines[0] if lines and lines[0] else type(exc).__name__
    hint = next((ln for ln in lines[1:] if ln.startswith("Did you mean")), "")
    pos = None
    at = _AT.search(first)
    if at:
        first = first[: at.start()] + first[at.end() :]
        if at.group(1) == "1":
            pos = int(at.group(2)) - 1 - len(_WHERE)
    col = _COLUMN.search(first)
    if col:
        first = f"no column {col.group(1)!r}" + first[col.end() :].split(";")[0]
        found = re.search(rf"\b{re.escape(col.group(1))}\b", text)
        pos = found.start() if found else None
    if pos is None and first.endswith("found: EOF"):
        pos = len(text)  # the condition stops short: point after its end
    first = first.removeprefix("sql parser error: ")
    msg = f"cannot filter by {text!r}: {first}" + (f". {hint}" if hint else "")
    if pos is not None and 0 <= pos <= len(text):
        msg += f" (at character {pos + 1})\n  {text}\n  {' ' * pos}^"
    return msg


def kind_of(dtype: pl.DataType) -> str:
    """``"int"``, ``"float"``, ``"bool"`` or ``"str"``: how the browser formats a column."""
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if dtype == pl.Boolean:
        return "bool"
    return "str"


def apply_filter(frame: pl.DataFrame, text: str) -> pl.DataFrame:
    """Rows matching ``text``: an SQL condition (``unit_score > 0.5 and hid = 'paren'``)
    or, without comparison operators, a case-insensitive search of the text columns.

    Raises
    ------
    ValueError
        If ``text`` reads as a condition but Polars' SQL cannot evaluate it.
    """
    text = (text or "").strip()
    if not text or frame.height == 0:
        return frame
    if _SQLISH.search(text):
        try:
            # the query engine's guards: a filter may read this frame, never a file
            refuse_file_access(_WHERE + text)
            plan = pl.SQLContext({"self": frame}, eager=False).execute(_WHERE + text)
            refuse_file_scan(plan.explain(optimized=False))
            return plan.collect()
        except Exception as exc:  # Polars raises several error types for bad SQL
            raise ValueError(filter_error(text, exc)) from exc
    needle = text.lower()
    cols = [c for c, t in frame.schema.items() if t == pl.String]
    if not cols:
        return frame.clear()
    cond = pl.any_horizontal(
        pl.col(c).str.to_lowercase().str.contains(needle, literal=True).fill_null(False)
        for c in cols
    )
    return frame.filter(cond)


def apply_sort(frame: pl.DataFrame, sort: list[Any] | None) -> pl.DataFrame:
    """Sort by ``[[column, "asc" | "desc"], ...]``; nulls last; unknown columns ignored.

    A column written ``|name|`` sorts by its absolute value (a strong negative
    correlation is as telling as a positive one). The sort is stable, so rows equal
    on the keys keep the frame's order (which makes a live table's rows stay put
    between blocks).
    """
    keys = []
    for c, d in sort or []:
        name = c.strip("|")
        if name in frame.columns:
            expr = pl.col(name).abs() if c.startswith("|") and c.endswith("|") else pl.col(name)
            keys.append((expr, d == "desc"))
    if not keys or frame.height < 2:
        return frame
    return frame.sort(
        [e for e, _ in keys],
        descending=[d for _, d in keys],
        nulls_last=True,
        maintain_order=True,
    )


def n_pages(n_rows: int, page_size: int) -> int:
    return max(1, math.ceil(n_rows / max(page_size, 1)))


def page_payload(
    view: pl.DataFrame, page: int, page_size: int, columns: list[str] | None = None
) -> dict[str, Any]:
    """The rows of page ``page`` of ``view`` as a small JSON-able dict.

    Floats are rounded to 6 significant digits (the table shows 3 decimals; the
    full values stay in the kernel) and NaN/inf become null so JSON stays valid.
    """
    page = min(max(page, 0), n_pages(view.height, page_size) - 1)
    part = view.slice(page * page_size, page_size)
    cols = [c for c in (columns or part.columns) if c in part.columns]
    kinds = [kind_of(part.schema[c]) for c in cols]
    data = []
    for c, k in zip(cols, kinds, strict=True):
        values = part[c].to_list()
        if k == "float":
            values = [_round(v) for v in values]
        elif k == "str":
            values = [v if v is None or isinstance(v, str) else str(v) for v in values]
        data.append(values)
    rows = [list(r) for r in zip(*data, strict=True)] if data else []
    return {"columns": cols, "kinds": kinds, "rows": rows, "page": page, "offset": page * page_size}


def _round(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


def row_keys(part: pl.DataFrame) -> list[str]:
    """Selection keys (``mid|uid|hid``) of a page's rows; empty strings without those columns."""
    if not {"mid", "uid"} <= set(part.columns):
        return [""] * part.height
    hid = part["hid"].to_list() if "hid" in part.columns else [None] * part.height
    return [
        f"{m}|{u}|{'' if h is None else h}"
        for m, u, h in zip(part["mid"].to_list(), part["uid"].to_list(), hid, strict=True)
    ]
