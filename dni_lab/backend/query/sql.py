"""The relational engine behind queries: a small interface, and Polars' SQLContext under it.

Everything relational (filters, joins before INSPECT; projections, HAVING,
ORDER BY and LIMIT after it) goes through :class:`RelationalEngine`, so
another engine (DuckDB, a database holding the catalog) can replace Polars
without touching the rest of the query layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

import polars as pl


class SQLEngineError(Exception):
    """The relational engine rejected a statement; the caller adds the query position."""


class RelationalEngine(Protocol):
    """Runs one SQL statement over named frames, eagerly."""

    def execute(self, sql: str, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        """Result of ``sql``, where each key of ``tables`` is a relation name."""
        ...


class PolarsEngine:
    """:class:`RelationalEngine` on ``polars.SQLContext``.

    Two guards keep a query inside the catalog: the statement's code is scanned for
    file-reading table functions before Polars sees it, and the plan Polars builds
    is checked for any file scan before it runs (a backstop for spellings the scan
    might miss: only in-memory frames may be read).
    """

    def execute(self, sql: str, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        refuse_file_access(sql)
        ctx = pl.SQLContext(dict(tables), eager=False)
        try:
            plan = ctx.execute(sql)
            if isinstance(plan, pl.LazyFrame):
                refuse_file_scan(plan.explain(optimized=False))
                plan = plan.collect()
            return plan
        except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
            raise SQLEngineError(first_line(str(exc))) from exc


# The lexer mirrors Polars' SQL parser (sqlparser-rs, generic dialect): '...' with ''
# for a quote (a backslash is a plain character), E'...' with backslash escapes,
# $tag$...$tag$, "..." and `...` names, -- and nested /* */ comments. Literals are
# emptied and comments blanked, so their contents never match; a quoted name keeps its
# letters, so "read_csv"( is still a call. Anything unterminated stays code: the scan
# fails closed.
_LEXEMES = re.compile(
    r"""(?P<str>(?<![\w$])[eE]'(?:[^'\\]|''|\\.)*'|'(?:[^']|'')*'"""
    r"""|\$(?P<tag>(?:[A-Za-z_]\w*)?)\$.*?\$(?P=tag)\$)"""
    r"""|(?P<name>"(?:[^"]|"")*"|`(?:[^`]|``)*`)"""
    r"""|(?P<line>--[^\n]*)|(?P<block>/\*)""",
    re.DOTALL,
)
_FILE_CALL_RE = re.compile(r"\b(?P<name>(?:read|scan)_\w*)\s*\(", re.IGNORECASE)
_SCAN_RE = re.compile(r"^\s*(?:\w+\s+)?SCAN\b")  # a plan node line: 'Csv SCAN [path]'


def code_only(sql: str) -> str:
    """``sql`` with literals emptied, comments blanked and quoted names unquoted."""
    out, pos = [], 0
    while (m := _LEXEMES.search(sql, pos)) is not None:
        out.append(sql[pos : m.start()])
        if m.group("str") is not None:
            out.append("''")
            pos = m.end()
        elif m.group("name") is not None:  # keep a name's letters: "read_csv" is read_csv
            out.append(re.sub(r"\W", "_", m.group("name")[1:-1]) or "_")
            pos = m.end()
        elif m.group("line") is not None:
            out.append(" ")
            pos = m.end()
        else:
            pos = _block_end(sql, m.start())
            out.append(" ")
    out.append(sql[pos:])
    return "".join(out)


def _block_end(sql: str, start: int) -> int:
    """End of the (nestable) block comment opening at ``start``; the text's end if open."""
    depth, i = 0, start
    while i < len(sql):
        pair = sql[i : i + 2]
        if pair in ("/*", "*/"):
            depth += 1 if pair == "/*" else -1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return len(sql)  # unterminated: Polars rejects it, and nothing after it is code


def refuse_file_access(sql: str) -> None:
    """Raise if ``sql`` calls a table function that reads files.

    A query may reach only the catalog's relations; Polars' SQL also offers
    ``read_csv('/any/path')`` and friends, which would let a query read any file
    the process can read.

    Raises
    ------
    SQLEngineError
        Naming the function and what a query may read instead.
    """
    m = _FILE_CALL_RE.search(code_only(sql))
    if m:
        raise SQLEngineError(_refusal(f"{m.group('name')}(...)"))


def refuse_file_scan(plan: str) -> None:
    """Raise if a Polars plan (``LazyFrame.explain()``) scans anything but in-memory frames."""
    for line in plan.splitlines():
        if _SCAN_RE.search(line):
            raise SQLEngineError(_refusal(f"the query's plan ({line.strip()[:60]})"))


def _refusal(what: str) -> str:
    return (
        f"{what} reads files, and a query may only read the catalog's relations "
        "(models, units, hypotheses, inputs and what you registered); load the file in "
        "Python and register it with catalog.add_inputs(...) instead."
    )


def first_line(message: str) -> str:
    """Polars appends its resolved plan to messages; the first line is what a user needs."""
    return message.strip().split("\n", 1)[0]


DEFAULT_ENGINE: RelationalEngine = PolarsEngine()
