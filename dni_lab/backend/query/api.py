"""``dl.query``: run an SQL query with an INSPECT clause (DeepBase §4.1)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from ..engine.run import run_here
from .catalog import Catalog
from .execute import QueryInspection, QueryRun
from .final import build_final
from .grouping import group_query
from .nodes import Query
from .parser import parse
from .relations import Scope
from .sql import DEFAULT_ENGINE, RelationalEngine, SQLEngineError


def query(
    sql: str,
    catalog: Catalog | None = None,
    namespace: Mapping[str, Any] | None = None,
    *,
    background: bool = False,
    on_block: Callable[[Any], None] | None = None,
    engine: RelationalEngine | None = None,
    **options: Any,
) -> pl.DataFrame | QueryRun:
    """Run a query with an INSPECT clause and return its frame.

    ``FROM``/``WHERE`` choose units, hypotheses and inputs; ``GROUP BY`` forms
    unit groups, each inspected separately; ``INSPECT ... AS S`` yields the
    score frame's columns, flattened across groups; ``SELECT``, ``HAVING``,
    ``ORDER BY`` and ``LIMIT`` run over S joined with each row's model, unit
    and hypothesis and with the grouping keys. A query without INSPECT is
    plain SQL over the catalog's relations.

    Parameters
    ----------
    sql : str
        The query, e.g.::

            SELECT M.epoch, S.uid
            INSPECT U.uid AND H.h USING corr OVER D.seq AS S
            FROM models M, units U, hypotheses H, inputs D
            WHERE M.mid = U.mid AND U.layer = 0 AND H.name = 'keywords'
            GROUP BY M.epoch
            HAVING S.unit_score > 0.8
            WITH (eps = 0.025)

    catalog : Catalog, optional
        Registered models, hypotheses and datasets; default :meth:`Catalog.default`.
    namespace : mapping, optional
        Variables the query may name (a notebook's ``user_ns``); by default the
        caller's globals and locals. Its :class:`~dni_lab.Model` and hypothesis
        objects join ``models`` and ``hypotheses``.
    background : bool
        Return a :class:`QueryRun` at once (``.frame`` is the score frame as it
        fills, ``.result()`` the query's frame).
    on_block : callable, optional
        Called after every block with the query's inspection.
    engine : RelationalEngine, optional
        Evaluates the relational parts; Polars' SQLContext by default.
    **options
        ``eps``, ``confidence``, ``block_size``, ``device``, ``behavior``,
        ``max_records``, ``cache``, ``fdr``; they override the query's ``WITH (...)``
        (``fdr=0.05`` is ``WITH FDR 0.05``: S gains ``p_value``, ``q_value`` and
        ``significant``, see :func:`dni_lab.inspect`).

    Returns
    -------
    polars.DataFrame or QueryRun

    Raises
    ------
    QueryError
        For a query that does not parse or names something unknown, with the
        position, a caret and suggestions.
    """
    if namespace is None:
        caller = sys._getframe(1)
        namespace = {**caller.f_globals, **caller.f_locals}
    return run_query(
        parse(sql), catalog or Catalog.default(), namespace, background, on_block, engine, options
    )


def run_query(
    q: Query,
    catalog: Catalog,
    namespace: Mapping[str, Any],
    background: bool = False,
    on_block: Callable[[Any], None] | None = None,
    engine: RelationalEngine | None = None,
    options: dict[str, Any] | None = None,
) -> pl.DataFrame | QueryRun:
    """Run a parsed query (see :func:`query`)."""
    engine = engine or DEFAULT_ENGINE
    scope = Scope(catalog, namespace)
    if q.inspect is None:
        if options or background:
            raise q.error("run options apply to INSPECT queries; this query has no INSPECT", 0)
        return _plain(q, scope, engine)
    grouping = group_query(q, scope, dict(options or {}), engine)
    insp = QueryInspection(grouping, build_final(grouping), engine)
    if background:
        run = QueryRun(insp)  # type: ignore[arg-type]
        if on_block is not None:
            run.on_block(on_block)
        return run.start()
    return run_here(insp, on_block)  # Ctrl-C keeps the partial result, marked partial


def _plain(q: Query, scope: Scope, engine: RelationalEngine) -> pl.DataFrame:
    """Plain SQL over the relations the FROM clause names (to explore the catalog)."""
    tables = {}
    for item in q.from_:
        rel = scope.resolve(item.name)
        if rel is None:
            from .binder import Binder

            Binder(q, scope)  # raises the "unknown relation" error with its caret
        assert rel is not None
        frame = scope.units_frame(None) if rel.kind == "units" else scope.frame(rel)
        tables[item.name] = frame.select([c for c in frame.columns if not c.startswith("__dl_")])
    try:
        return engine.execute(q.text.rstrip().rstrip(";"), tables)
    except SQLEngineError as exc:
        raise q.error(f"cannot evaluate the query: {exc}", 0) from None
