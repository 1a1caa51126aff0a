"""The parsed query: clauses as token spans, INSPECT and FROM as small records.

Expressions (SELECT items, WHERE and HAVING conditions, ORDER BY keys) stay
token spans: the relational engine evaluates them, and dni_lab only needs to
find the column references in them, check those, and rewrite a few.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import QueryError
from .tokens import Token, render

Span = tuple[int, int]  # token indices [start, end)

# Words that are never column names inside an expression.
SQL_WORDS = frozenset(
    """AND OR NOT IN IS NULL LIKE ILIKE BETWEEN CASE WHEN THEN ELSE END ASC DESC TRUE
    FALSE AS DISTINCT NULLS FIRST LAST INTERVAL ALL ANY EXISTS ON BY OVER PARTITION ROWS
    RANGE UNBOUNDED PRECEDING FOLLOWING CURRENT ROW FILTER WITHIN GROUP ORDER ESCAPE
    SIMILAR TO DIV XOR REGEXP RLIKE SELECT FROM WHERE HAVING LIMIT OFFSET USING""".split()
)
AGGREGATES = frozenset(
    """COUNT SUM AVG MEAN MIN MAX MEDIAN STDDEV STD STDDEV_SAMP STDDEV_POP VARIANCE VAR
    VAR_SAMP VAR_POP ARRAY_AGG STRING_AGG QUANTILE_CONT QUANTILE_DISC PERCENTILE_CONT
    PERCENTILE_DISC FIRST LAST BOOL_AND BOOL_OR""".split()
)


@dataclass
class Ref:
    """A column reference ``alias.column`` or ``column``, or an operand ``alias``.

    ``first``/``last`` are the token indices it spans; ``column`` is ``"*"`` for
    ``alias.*`` and None for a bare alias (INSPECT operands).
    """

    alias: str | None
    column: str | None
    first: int
    last: int


@dataclass
class MeasureSpec:
    """A measure in ``USING``: a name and keyword arguments (``local_iou(quantile=0.9)``)."""

    name: str
    args: dict[str, Any]
    tok: int


@dataclass
class InspectClause:
    """``INSPECT <units> AND <hypotheses> [USING ...] OVER <inputs> [AS alias]``."""

    units: Ref
    hyps: Ref
    measures: list[MeasureSpec]
    inputs: Ref
    alias: str
    tok: int


@dataclass
class FromItem:
    """One relation of FROM: its name, alias and (for ``JOIN ... ON``) the condition."""

    name: str
    alias: str
    tok: int
    on: Span | None = None


@dataclass
class Query:
    """A parsed query. ``clauses`` maps a clause keyword to (keyword token, content span)."""

    text: str
    tokens: list[Token]
    clauses: dict[str, tuple[int, Span]] = field(default_factory=dict)
    inspect: InspectClause | None = None
    from_: list[FromItem] = field(default_factory=list)
    group_by: list[Ref] = field(default_factory=list)
    options: dict[str, tuple[Any, int]] = field(default_factory=dict)

    def span(self, clause: str) -> Span | None:
        return self.clauses[clause][1] if clause in self.clauses else None

    def error(self, message: str, first: int, last: int | None = None) -> QueryError:
        """A :class:`QueryError` with the caret under tokens ``first..last``."""
        a = self.tokens[first]
        b = self.tokens[last if last is not None else first]
        return QueryError(message, self.text, a.start, max(b.end, a.start + 1))

    def render(self, span: Span, subs: dict[int, str] | None = None) -> str:
        """Source text of ``span``; ``subs`` replaces tokens by their *query* index."""
        lo, hi = span
        local = {i - lo: s for i, s in (subs or {}).items() if lo <= i < hi}
        return render(self.text, self.tokens[lo:hi], local)


def scan_refs(q: Query, span: Span) -> list[Ref]:
    """Column references in an expression span (function names and SQL words left out)."""
    toks, out = q.tokens, []
    i, hi = span
    while i < hi:
        t = toks[i]
        prev = toks[i - 1] if i > 0 else None
        skip = (
            t.kind != "ident"
            or (t.text.upper() in SQL_WORDS and not t.quoted)
            or toks[i + 1].is_punct("(")
            or (prev is not None and (prev.is_kw("AS") or prev.is_punct("::", ".")))
        )
        if skip:
            i += 1
            continue
        if i + 2 < hi and toks[i + 1].is_punct("."):
            nxt = toks[i + 2]
            if nxt.kind == "ident" or nxt.is_punct("*"):
                out.append(Ref(t.value, "*" if nxt.text == "*" else nxt.value, i, i + 2))
                i += 3
                continue
        out.append(Ref(None, t.value, i, i))
        i += 1
    return out


def has_aggregate(q: Query, span: Span | None) -> bool:
    """Whether the span calls an aggregate function (``count(...)``, ``max(...)``)."""
    if span is None:
        return False
    toks = q.tokens
    return any(
        toks[i].kind == "ident" and toks[i].text.upper() in AGGREGATES and toks[i + 1].is_punct("(")
        for i in range(*span)
    )


def split_top(q: Query, span: Span, sep: str) -> list[Span]:
    """Split a span at depth-0 ``sep`` (``","`` or ``"AND"``); BETWEEN's AND is kept.

    Splitting a condition at AND is only right without a depth-0 OR (AND binds
    tighter); callers check :func:`has_top_or` first.
    """
    parts, depth, start, between = [], 0, span[0], 0
    for i in range(*span):
        t = q.tokens[i]
        if t.is_punct("("):
            depth += 1
        elif t.is_punct(")"):
            depth -= 1
        elif depth == 0 and t.is_kw("BETWEEN"):
            between += 1
        elif depth == 0 and sep == "AND" and t.is_kw("AND"):
            if between:
                between -= 1
                continue
            parts.append((start, i))
            start = i + 1
        elif depth == 0 and sep == "," and t.is_punct(","):
            parts.append((start, i))
            start = i + 1
    parts.append((start, span[1]))
    return parts


def has_top_or(q: Query, span: Span) -> bool:
    """Whether the span has an OR outside parentheses."""
    depth = 0
    for i in range(*span):
        t = q.tokens[i]
        depth += t.is_punct("(") - t.is_punct(")")
        if depth == 0 and t.is_kw("OR"):
            return True
    return False
