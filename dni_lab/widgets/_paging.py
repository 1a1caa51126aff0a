"""Filtering, sorting and paging of a frame in Python: only the visible page travels.

A page goes to the browser as column names, kinds and rows of cell texts
(a page is at most a few hundred rows, so this is a few kilobytes; the frame
itself never leaves the kernel).
"""

from __future__ import annotations

import math
import re
from typing import Any

import polars as pl

from ..backend.query.sql import refuse_file_access, refuse_file_scan
from ._format import column_texts

# A filter with one of these reads as an SQL condition; anything else is a text search.
_SQLISH = re.compile(r"[=<>!]|\b(and|or|not|like|ilike|is|in|between)\b", re.IGNORECASE)


_WHERE = "SELECT * FROM self WHERE "
_AT = re.compile(r"\s*at Line: (\d+), Column: (\d+)")
_COLUMN = re.compile(r'unable to find column "([^"]+)"')
_UNSUPPORTED = re.compile(r"operator (\w+) is not currently supported")
_NO_INFIX = re.compile(r"No infix parser for token .*")
#: sqlparser's names for operators Polars parses but cannot evaluate -> how they are typed
#: (the name means nothing to a person looking at what they wrote)
OPERATOR_TEXT = {
    "PGBitwiseShiftRight": ">>",
    "PGBitwiseShiftLeft": "<<",
    "PGBitwiseXor": "#",
    "PGExp": "^",
    "PGOverlap": "&&",
    "PGStartsWith": "^@",
    "PGRegexMatch": "~",
    "PGRegexIMatch": "~*",
    "PGRegexNotMatch": "!~",
    "PGRegexNotIMatch": "!~*",
    "PGLikeMatch": "~~",
    "PGILikeMatch": "~~*",
    "PGNotLikeMatch": "!~~",
    "PGNotILikeMatch": "!~~*",
    "PGSquareRoot": "|/",
    "PGCubeRoot": "||/",
    "PGAbs": "@",
    "PGPostfixFactorial": "!",
    "PGPrefixFactorial": "!!",
    "BitwiseOr": "|",
    "BitwiseAnd": "&",
    "BitwiseXor": "^",
    "Spaceship": "<=>",
    "DuckIntegerDivide": "//",
    "MyIntegerDivide": "DIV",
    "StringConcat": "||",
    "Arrow": "->",
    "LongArrow": "->>",
    "HashArrow": "#>",
    "HashLongArrow": "#>>",
    "AtArrow": "@>",
    "ArrowAt": "<@",
    "AtAt": "@@",
    "Question": "?",
}


def _unsupported_operator(text: str, name: str) -> tuple[str, int | None]:
    """The message for an operator Polars cannot evaluate, and where it was typed first."""
    typed = OPERATOR_TEXT.get(name)
    if typed is None:  # a name not in the table: say so without the internal name
        return "an operator here is not supported", None
    pattern = rf"\b{re.escape(typed)}\b" if typed.isalpha() else re.escape(typed)
    found = re.search(pattern, text, flags=re.IGNORECASE)
    return f"the operator {typed} is not supported", found.start() if found else None


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
    op = _UNSUPPORTED.search(first)
    if op:
        first, pos = _unsupported_operator(text, op.group(1))
    infix = _NO_INFIX.search(first)
    if infix:  # the parser's token type (Sharp, Word(...)) names nothing typed: show the text
        typed = text[pos:].split()[0] if pos is not None and text[pos:].strip() else ""
        first = first[: infix.start()] + (f"unexpected {typed!r}" if typed else "unexpected text")
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


#: Columns whose first header click shows the strongest scores: by |value|, descending.
SCORE_COLUMNS = ("unit_score", "group_score")


def header_cycle(column: str) -> list[list[str]]:
    """The sorts successive clicks on ``column``'s header go through (then the default).

    A score column starts where a person looks first, the strongest units by |score|,
    then signed (positive first, then negative first); any other column starts in
    reading order (A to Z, 0 up), then reversed.
    """
    if column in SCORE_COLUMNS:
        return [[f"|{column}|", "desc"], [column, "desc"], [column, "asc"]]
    return [[column, "asc"], [column, "desc"]]


def next_sort(own: list[Any], column: str, default: list[Any] = ()) -> list[list[str]]:
    """The sort after a click on ``column``'s header, given the person's own sort ``own``
    (empty: the ``default`` order is in force); past the cycle's end, back to the default
    (``[]``). Where the default already sorts ``column`` as a step of its cycle does, the
    click goes on from that step, so the first click always changes what is shown."""
    cycle = header_cycle(column)
    current = [list(k) for k in own[:1]]
    if not current:
        current = [list(k) for k in default if k[0].strip("|") == column][:1]
    if current and current[0] in cycle:
        i = cycle.index(current[0]) + 1
        return [cycle[i]] if i < len(cycle) else []
    return [cycle[0]]


def n_pages(n_rows: int, page_size: int) -> int:
    return max(1, math.ceil(n_rows / max(page_size, 1)))


def page_payload(
    view: pl.DataFrame, page: int, page_size: int, columns: list[str] | None = None
) -> dict[str, Any]:
    """The rows of page ``page`` of ``view`` as a small JSON-able dict (see :func:`cells`)."""
    page = min(max(page, 0), n_pages(view.height, page_size) - 1)
    part = view.slice(page * page_size, page_size)
    cols = [c for c in (columns or part.columns) if c in part.columns]
    kinds = [kind_of(part.schema[c]) for c in cols]
    return {"columns": cols, "kinds": kinds, "page": page, "offset": page * page_size,
            **cells(part, cols)}  # fmt: skip


def cells(part: pl.DataFrame, cols: list[str]) -> dict[str, Any]:
    """Rows of ``part`` as the browser draws them: the cell texts of ``cols`` (written as
    the snapshots write them, :func:`~._format.cell_text`; the values stay in the kernel),
    each row's selection key and each null score's reason."""
    texts = [column_texts(part[c]) for c in cols if c in part.columns]
    return {
        "rows": [list(r) for r in zip(*texts, strict=True)] if texts else [[]] * part.height,
        "keys": row_keys(part),
        "reasons": part["reason"].to_list() if "reason" in part.columns else [],
    }


def row_keys(part: pl.DataFrame) -> list[str]:
    """Selection keys (``mid|uid|hid``) of a page's rows; empty strings without those columns."""
    if not {"mid", "uid"} <= set(part.columns):
        return [""] * part.height
    hid = part["hid"].to_list() if "hid" in part.columns else [None] * part.height
    return [
        f"{m}|{u}|{'' if h is None else h}"
        for m, u, h in zip(part["mid"].to_list(), part["uid"].to_list(), hid, strict=True)
    ]
