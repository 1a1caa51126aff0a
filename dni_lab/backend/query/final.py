"""After INSPECT: SELECT, HAVING, ORDER BY and LIMIT over S joined with what it came from.

Each row of S (one unit × hypothesis × measure of one group) joins, one to one,
its model's row, its unit's row (a latent's ``features`` row: ``S.uid = F.fid``)
and its hypothesis's row, and the grouping keys
of every other alias. So ``M.epoch``, ``U.layer`` or ``H.family`` may be read
in SELECT even when they are not grouping keys: each S row has one of each.
Without aggregates HAVING filters S's rows (DeepBase flattens the groups); with
aggregates (``max(S.unit_score)``) it is SQL's HAVING over the grouping keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ..engine.frames import FDR_SCHEMA, SCHEMA
from ..errors import did_you_mean
from .grouping import Grouping
from .nodes import Query, Span, has_aggregate, scan_refs, split_top
from .sql import RelationalEngine, SQLEngineError
from .tokens import quote_ident

S_TABLE = "__dl_s"


@dataclass
class Final:
    """The statement run over S, and the frames it joins (S itself comes at run time)."""

    sql: str
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)

    def run(self, q: Query, engine: RelationalEngine, scores: pl.DataFrame) -> pl.DataFrame:
        try:
            out = engine.execute(self.sql, {**self.tables, S_TABLE: scores})
        except SQLEngineError as exc:
            at = min(q.clauses.get(c, (len(q.tokens) - 1,))[0] for c in ("SELECT", "INSPECT"))
            raise q.error(f"cannot evaluate the query over the INSPECT result: {exc}", at) from None
        return out.select([c for c in out.columns if not c.startswith("__dl_")])


def build_final(p: Grouping) -> Final:
    """Check every reference after INSPECT and write the statement over S."""
    q, bd = p.query, p.binder
    S = q.inspect.alias  # type: ignore[union-attr]
    qs = quote_ident(S)
    visible: dict[str, list[str]] = {S: list(SCHEMA)}
    if p.options.fdr is not None:  # WITH FDR: S's p_value, q_value and significant
        visible[S] += list(FDR_SCHEMA)
    final = Final("")
    joins = []

    def join(alias: str, frame: pl.DataFrame, on: str) -> None:
        table = f"__dl_t_{len(final.tables)}"
        final.tables[table] = frame
        visible[alias] = [c for c in frame.columns if not c.startswith("__dl_")]
        joins.append(f"JOIN {table} AS {quote_ident(alias)} ON {on}")

    qa = quote_ident
    if p.units.kind == "units":
        u = p.units
        on = f'{qs}."mid" = {qa(u.alias)}."mid" AND {qs}."uid" = {qa(u.alias)}."uid"'
        join(u.alias, u.frame.unique(["mid", "uid"], maintain_order=True), on)  # type: ignore[union-attr]
    if p.units.kind == "features":
        f = p.units
        on = f'{qs}."mid" = {qa(f.alias)}."mid" AND {qs}."uid" = {qa(f.alias)}."fid"'
        join(f.alias, f.frame.unique(["mid", "fid"], maintain_order=True), on)  # type: ignore[union-attr]
    if p.models is not None:
        m = p.models
        frame = m.frame.unique("__dl_m", maintain_order=True)  # type: ignore[union-attr]
        join(m.alias, frame, f'{qs}."__dl_m" = {qa(m.alias)}."__dl_m"')
    h = p.hyps
    frame = h.frame.unique("hid", maintain_order=True)  # type: ignore[union-attr]
    # a category's indicator row ("h=c") joins its categorical hypothesis's row
    join(h.alias, frame, f'{qs}."__dl_hp" = {qa(h.alias)}."hid"')
    for alias in bd.aliases:
        cols = [c for a, c in p.key_refs if a == alias]
        if alias in visible or not cols:
            continue
        keys = {"__dl_g": list(range(len(p.groups)))}
        keys |= {c: [g.keys[(alias, c)] for g in p.groups] for c in cols}
        join(alias, pl.DataFrame(keys, strict=False), f'{qs}."__dl_g" = {qa(alias)}."__dl_g"')
    ctx = _Context(p, visible)
    aggregate = has_aggregate(q, q.span("SELECT")) or has_aggregate(q, q.span("HAVING"))
    select, distinct = ctx.select()
    parts = [f"SELECT {select}", f"FROM {S_TABLE} AS {qs}", *joins]
    if q.span("HAVING") is not None:
        cond = ctx.render(q.span("HAVING"))  # type: ignore[arg-type]
        if aggregate:
            parts += [*_group_by(p), f"HAVING {cond}"]
        else:
            parts.append(f"WHERE {cond}")
    elif aggregate:
        parts += _group_by(p)
    order = [_nulls_last(q, ctx, q.span("ORDER BY"))] if q.span("ORDER BY") else []  # type: ignore[arg-type]
    if not (aggregate or distinct):
        order.append(f'{qs}."__dl_i"')  # S's order: groups, then the engine's row order
    if order:
        parts.append("ORDER BY " + ", ".join(order))
    if q.span("LIMIT"):
        parts.append("LIMIT " + q.render(q.span("LIMIT")))  # type: ignore[arg-type]
    final.sql = "\n".join(parts)
    return final


def _nulls_last(q: Query, ctx, span: Span) -> str:
    """ORDER BY keys, ``NULLS LAST`` where a key says nothing: one null order for SQL and
    the live table (DuckDB's and Polars' default), where a descending sort would put nulls
    first (null scores of constant units topping a ranking)."""
    keys = []
    for part in split_top(q, span, ","):
        toks = q.tokens[part[0] : part[1]]
        said = len(toks) >= 2 and toks[-2].is_kw("NULLS") and toks[-1].is_kw("FIRST", "LAST")
        keys.append(ctx.render(part) + ("" if said else " NULLS LAST"))
    return ", ".join(keys)


def _group_by(p: Grouping) -> list[str]:
    if not p.key_refs:
        return []
    return ["GROUP BY " + ", ".join(f"{quote_ident(a)}.{quote_ident(c)}" for a, c in p.key_refs)]


class _Context:
    """Resolves references after INSPECT: S's columns, joined rows, grouping keys."""

    def __init__(self, p: Grouping, visible: dict[str, list[str]]) -> None:
        self.p = p
        self.q = p.query
        self.visible = visible
        self.S = p.query.inspect.alias  # type: ignore[union-attr]
        self.outputs: set[str] = set()

    def select(self) -> tuple[str, bool]:
        """The SELECT list (``*`` is S's columns and the grouping keys) and DISTINCT."""
        q, span = self.q, self.q.span("SELECT")
        qs = quote_ident(self.S)
        keys = [f"{quote_ident(a)}.{quote_ident(c)}" for a, c in self.p.key_refs if c not in SCHEMA]
        star = ", ".join([f"{qs}.*", *keys])
        if span is None:
            return star, False
        lo, hi = span
        distinct = q.tokens[lo].is_kw("DISTINCT")
        lo += distinct
        for i in range(lo, hi - 1):
            if q.tokens[i].is_kw("AS") and q.tokens[i + 1].kind == "ident":
                self.outputs.add(q.tokens[i + 1].value)
        items = []
        for a, b in split_top(q, (lo, hi), ","):
            if b - a == 1 and q.tokens[a].is_punct("*"):
                items.append(star)
            else:
                items.append(self.render((a, b)))
        return ("DISTINCT " if distinct else "") + ", ".join(items), distinct

    def render(self, span: Span) -> str:
        q, subs = self.q, {}
        for ref in scan_refs(q, span):
            if ref.alias is None and ref.column in self.outputs:
                continue  # an output name from SELECT ... AS name
            alias = self._alias(ref)
            col = "*" if ref.column == "*" else quote_ident(ref.column or "")
            for i in range(ref.first, ref.last + 1):
                subs[i] = ""
            subs[ref.first] = f"{quote_ident(alias)}.{col}"
        return q.render(span, subs)

    def _alias(self, ref) -> str:
        q, vis, aliases = self.q, self.visible, self.p.binder.aliases
        if ref.alias is None:
            owners = [self.S] if ref.column in vis[self.S] else []
            owners = owners or [a for a, cols in vis.items() if ref.column in cols]
            if len(owners) > 1:
                refs = " or ".join(f"{a}.{ref.column}" for a in owners)
                raise q.error(f"column {ref.column!r} is ambiguous: write {refs}", ref.first)
            if not owners:
                every = {c for cols in vis.values() for c in cols} | self.outputs
                hint = did_you_mean(ref.column, every)
                raise q.error(f"unknown column {ref.column!r}.{hint}", ref.first)
            return owners[0]
        if ref.alias not in vis:
            if ref.alias in aliases:
                raise q.error(
                    f"{ref.alias!r} is not joined to the INSPECT result: after INSPECT a query "
                    f"reads {self.S}, its rows' models, units and hypotheses, and grouping keys "
                    f"(add {ref.alias}.{ref.column} to GROUP BY)",
                    ref.first,
                    ref.last,
                )
            hint = did_you_mean(ref.alias, vis)
            raise q.error(f"unknown alias {ref.alias!r}.{hint}", ref.first)
        if ref.column != "*" and ref.column not in vis[ref.alias]:
            b = aliases.get(ref.alias)
            if b is not None and ref.column in self.p.binder.columns(b):
                raise q.error(
                    f"{ref.alias}.{ref.column} is not a grouping key; add it to GROUP BY",
                    ref.first,
                    ref.last,
                )
            hint = did_you_mean(ref.column, vis[ref.alias])
            what = "the INSPECT result" if ref.alias == self.S else f"{ref.alias!r}"
            raise q.error(f"{what} has no column {ref.column!r}.{hint}", ref.last)
        return ref.alias
