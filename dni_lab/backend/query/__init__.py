"""Declarative inspection: SQL with DeepBase's INSPECT clause over a session catalog.

:func:`query` parses (:mod:`.parser`), binds names (:mod:`.binder`) against the
catalog and namespace (:mod:`.catalog`, :mod:`.relations`), splits the query
into GROUP BY groups and engine steps (:mod:`.grouping`), runs the steps
(:mod:`.execute`) and applies the statement over the INSPECT result
(:mod:`.final`); the relational parts run on a :class:`~.sql.RelationalEngine`
(Polars' SQLContext by default).
"""

from .api import query, run_query
from .catalog import Catalog
from .errors import QueryError
from .execute import QueryRun
from .parser import parse
from .sql import PolarsEngine, RelationalEngine

__all__ = [
    "Catalog",
    "PolarsEngine",
    "QueryError",
    "QueryRun",
    "RelationalEngine",
    "parse",
    "query",
    "run_query",
]
