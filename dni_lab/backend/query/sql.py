"""The relational engine behind queries: a small interface, and Polars' SQLContext under it.

Everything relational (filters, joins before INSPECT; projections, HAVING,
ORDER BY and LIMIT after it) goes through :class:`RelationalEngine`, so
another engine (DuckDB, a database holding the catalog) can replace Polars
without touching the rest of the query layer.
"""

from __future__ import annotations

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
        ctx = pl.SQLContext(dict(tables), eager=True)
        try:
            return ctx.execute(sql)
        except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
            raise SQLEngineError(first_line(str(exc))) from exc


def first_line(message: str) -> str:
    """Polars appends its resolved plan to messages; the first line is what a user needs."""
    return message.strip().split("\n", 1)[0]


DEFAULT_ENGINE: RelationalEngine = PolarsEngine()
