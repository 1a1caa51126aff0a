"""Name binding: FROM aliases to relations, column references to aliases, and checks.

Every reference in WHERE, GROUP BY and the INSPECT operands is resolved here,
so a typo fails before any model runs, with a caret and a suggestion. The
binder also rewrites conditions into SQL the relational engine can run:
bare columns get their alias, and ``U.layer = 0`` (DeepBase's layer numbers)
becomes ``U.layer_index = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from ..errors import did_you_mean
from .features import feature_columns
from .nodes import Query, Ref, Span, scan_refs
from .relations import Relation, Scope
from .tokens import quote_ident

UNIT_COLUMNS = ("mid", "uid", "layer", "unit", "layer_index")
#: Relations of units whose rows depend on the models a query chose (built after them).
UNIT_KINDS = ("units", "features")
# Columns holding names a user types: a literal that matches none of them is a typo.
NAMED = {
    "models": {"mid": "model"},
    "units": {"layer": "layer", "mid": "model"},
    "hypotheses": {"hid": "hypothesis", "name": "hypothesis", "h": "hypothesis"},
    "inputs": {"did": "dataset"},
    "features": {"set": "feature set", "mid": "model", "hook": "hook"},
}
NAMED["hypotheses"] |= {"family": "hypothesis family", "kind": "hypothesis kind"}
_COMPARE = ("=", "==", "<>", "!=", "<", "<=", ">", ">=")


@dataclass
class Bound:
    """A relation under its alias in FROM; ``frame`` is filled by :mod:`.grouping`."""

    alias: str
    rel: Relation
    tok: int
    frame: pl.DataFrame | None = None

    @property
    def kind(self) -> str:
        return self.rel.kind


class Binder:
    """Binds one query's names against a :class:`Scope`."""

    def __init__(self, q: Query, scope: Scope) -> None:
        self.q = q
        self.scope = scope
        self.aliases: dict[str, Bound] = {}
        for item in q.from_:
            self.aliases[item.alias] = Bound(
                item.alias, self._relation(item.name, item.tok), item.tok
            )
        self.result_alias = q.inspect.alias if q.inspect else None
        if self.result_alias in self.aliases:
            raise q.error(
                f"{self.result_alias!r} names both a FROM relation and the INSPECT result; "
                "rename one (INSPECT ... AS S)",
                self.aliases[self.result_alias].tok,
            )

    def _relation(self, name: str, tok: int) -> Relation:
        rel = self.scope.resolve(name)
        if rel is None:
            hint = did_you_mean(name, self.scope.names())
            raise self.q.error(
                f"unknown relation {name!r}.{hint} Relations: models, units, hypotheses, inputs, "
                "features, registered datasets and tables, and namespace variables holding "
                "models, hypotheses, feature sets, records or Polars frames.",
                tok,
            )
        return rel

    def operand(self, ref: Ref, kinds: tuple[str, ...], role: str) -> Bound:
        """The alias an INSPECT operand names; a relation name not in FROM joins FROM."""
        q = self.q
        if ref.alias not in self.aliases:
            rel = self.scope.resolve(ref.alias or "")
            if rel is None:
                hint = did_you_mean(ref.alias or "", [*self.aliases, *self.scope.names()])
                raise q.error(f"unknown relation or alias {ref.alias!r}.{hint}", ref.first)
            self.aliases[ref.alias] = Bound(ref.alias, rel, ref.first)  # type: ignore[index]
        b = self.aliases[ref.alias]  # type: ignore[index]
        if b.kind not in kinds:
            raise q.error(
                f"INSPECT's {role} must come from a {_either(kinds)} relation; "
                f"{ref.alias!r} is a {b.kind} relation",
                ref.first,
                ref.last,
            )
        if ref.column not in (None, "*"):
            self.check_column(b, ref.column, ref.last)
        return b

    def columns(self, b: Bound) -> list[str]:
        if b.kind == "units":
            return list(UNIT_COLUMNS)
        if b.kind == "features" and b.frame is None:
            ids = b.rel.ids
            return feature_columns([self.scope.feats[i] for i in ids] if ids else self.scope.feats)
        frame = b.frame if b.frame is not None else self.scope.frame(b.rel)
        return [c for c in frame.columns if not c.startswith("__dl_")]

    def check_column(self, b: Bound, column: str, tok: int) -> None:
        cols = self.columns(b)
        if column not in cols:
            raise self.q.error(
                f"relation {b.rel.name!r} ({b.alias}) has no column {column!r}."
                f"{did_you_mean(column, cols)} Its columns: {', '.join(cols)}.",
                tok,
            )

    def resolve(self, ref: Ref, clause: str) -> tuple[str, str]:
        """``(alias, column)`` of a reference in a clause evaluated before INSPECT."""
        q = self.q
        if ref.alias is not None:
            if ref.alias == self.result_alias:
                raise q.error(
                    f"{ref.alias!r} is the INSPECT result, computed after {clause}; filter its "
                    "rows in HAVING",
                    ref.first,
                    ref.last,
                )
            if ref.alias not in self.aliases:
                hint = did_you_mean(ref.alias, self.aliases)
                raise q.error(f"unknown alias {ref.alias!r}.{hint}", ref.first)
            self.check_column(self.aliases[ref.alias], ref.column or "", ref.last)
            return ref.alias, ref.column or ""
        owners = [a for a, b in self.aliases.items() if ref.column in self.columns(b)]
        if len(owners) > 1:
            refs = " or ".join(f"{a}.{ref.column}" for a in owners)
            raise q.error(f"column {ref.column!r} is ambiguous: write {refs}", ref.first)
        if not owners:
            every = {c for b in self.aliases.values() for c in self.columns(b)}
            hint = did_you_mean(ref.column or "", every)
            raise q.error(f"unknown column {ref.column!r}.{hint}", ref.first)
        return owners[0], ref.column or ""

    def condition(self, span: Span, clause: str = "WHERE") -> tuple[str, set[str]]:
        """SQL text of a condition with every column qualified, and the aliases it reads."""
        q, subs, used = self.q, {}, set()
        for ref in scan_refs(q, span):
            alias, col = self.resolve(ref, clause)
            used.add(alias)
            b = self.aliases[alias]
            if b.kind == "units" and col == "layer" and _numeric_compare(q, ref):
                col = "layer_index"  # DeepBase numbers layers; ours are 0-based positions
            for i in range(ref.first, ref.last + 1):
                subs[i] = ""
            subs[ref.first] = f"{quote_ident(alias)}.{quote_ident(col)}"
        return q.render(span, subs), used

    def check_literals(self, span: Span, clause: str = "WHERE") -> None:
        """Fail on a name literal (``U.layer = 'lstn'``) that no row of its relation holds."""
        q = self.q
        for ref in scan_refs(q, span):
            alias, col = self.resolve(ref, clause)
            b = self.aliases[alias]
            numeric = b.kind == "units" and col == "layer" and _numeric_compare(q, ref)
            if numeric:
                col = "layer_index"
            elif col not in NAMED.get(b.kind, {}):
                continue
            for value, tok in _compared_literals(q, ref):
                self._check_value(b, col, value, tok)

    def _check_value(self, b: Bound, col: str, value: Any, tok: int) -> None:
        frame = b.frame if b.frame is not None else self.scope.frame(b.rel)
        if col not in frame.columns:
            return
        values = frame[col].drop_nulls().unique().to_list()
        if value in values:
            return
        if col == "layer_index":
            pos = frame.filter(pl.col("layer_index").is_not_null())
            pos = pos.unique(["layer_index"]).sort("layer_index")
            listing = ", ".join(f"{i} {n!r}" for i, n in pos.select("layer_index", "layer").rows())
            raise self.q.error(f"no layer at position {value}; layers by position: {listing}", tok)
        noun = NAMED[b.kind][col]
        names = sorted(map(str, values))
        shown = ", ".join(repr(v) for v in names[:12])
        raise self.q.error(
            f"no {noun} {value!r} in {b.rel.name}.{col}.{did_you_mean(str(value), names)}"
            f" Known: {shown or 'none'}.",
            tok,
        )


def _either(kinds: tuple[str, ...]) -> str:
    """``("units", "models", "features")`` → ``"units, models or features"``."""
    return " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)


def _numeric_compare(q: Query, ref: Ref) -> bool:
    """Whether ``ref`` is compared with a number (``= 0``, ``IN (1, 2)``, ``BETWEEN 1 AND 2``)."""
    toks = q.tokens
    nxt = toks[ref.last + 1]
    if nxt.is_punct(*_COMPARE) or nxt.is_kw("BETWEEN"):
        return toks[ref.last + 2].kind == "number"
    if nxt.is_kw("IN") and toks[ref.last + 2].is_punct("("):
        return toks[ref.last + 3].kind == "number"
    if nxt.is_kw("NOT"):
        return _numeric_compare(q, Ref(ref.alias, ref.column, ref.first, ref.last + 1))
    prev = toks[ref.first - 1] if ref.first > 0 else None
    return bool(prev and prev.is_punct(*_COMPARE) and toks[ref.first - 2].kind == "number")


def _compared_literals(q: Query, ref: Ref) -> list[tuple[Any, int]]:
    """Literals ``ref`` is tested for equality with: ``= 'x'``, ``'x' =``, ``IN ('x', 'y')``."""
    toks, out = q.tokens, []
    j = ref.last + 1
    if toks[j].is_kw("NOT"):
        j += 1
    lit = ("string", "number")
    if toks[j].is_punct("=", "==") and toks[j + 1].kind in lit:
        out.append((toks[j + 1].value, j + 1))
    elif toks[j].is_kw("IN") and toks[j + 1].is_punct("("):
        k = j + 2
        while toks[k].kind in lit:
            out.append((toks[k].value, k))
            if not toks[k + 1].is_punct(","):
                break
            k += 2
    if ref.first >= 2 and toks[ref.first - 1].is_punct("=", "=="):
        if toks[ref.first - 2].kind in lit:
            out.append((toks[ref.first - 2].value, ref.first - 2))
    return out
