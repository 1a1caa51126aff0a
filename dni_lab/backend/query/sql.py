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
    """:class:`RelationalEngine` on ``polars.SQLContext`` (eager)."""

    def execute(self, sql: str, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
        refuse_file_access(sql)
        ctx = pl.SQLContext(dict(tables), eager=True)
        try:
            return ctx.execute(sql)
        except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
            raise SQLEngineError(first_line(str(exc))) from exc


# String literals and comments are blanked first (their contents never match, and a comment
# between a name and its parenthesis hides nothing); then a call of a name starting with
# read_ or scan_, bare or quoted: Polars' table functions that open files.
_SKIP = r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/"
_FILE_CALL = r"(?P<name>[\"`]?\b(?:read|scan)_\w*[\"`]?)\s*\("
_SKIP_RE = re.compile(_SKIP, re.DOTALL)
_FILE_CALL_RE = re.compile(_FILE_CALL, re.IGNORECASE)


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
    code = _SKIP_RE.sub(lambda m: "''" if m.group(0).startswith("'") else " ", sql)
    m = _FILE_CALL_RE.search(code)
    if m:
        name = m.group("name").strip('"`')
        raise SQLEngineError(
                f"{name}(...) reads files, and a query may only read the catalog's relations "
                "(models, units, hypotheses, inputs and what you registered); load the file in "
                "Python and register it with catalog.add_inputs(...) instead."
            )


def first_line(message: str) -> str:
    """Polars appends its resolved plan to messages; the first line is what a user needs."""
    return message.strip().split("\n", 1)[0]


DEFAULT_ENGINE: RelationalEngine = PolarsEngine()
