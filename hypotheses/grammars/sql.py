"""A SQL SELECT grammar in nested tiers of 95, 118, 142 and 171 rules (DeepBase §6.3).

The grammar works on *tokens* (keywords, identifiers, numbers, quoted
strings, punctuation); :func:`tokenize` maps a query to tokens with their
character offsets, so parse-tree signals land on characters. Every keyword
has its own nonterminal (``KwSelect -> 'SELECT'``) so that "inside the
SELECT keyword" is a hypothesis of its own, as in DeepBase's Figure 11.

Tiers add language features and vocabulary; each tier contains the
previous one, so ``n_rules`` scales the language and the number of
hypotheses together:

* 95 — SELECT lists, aggregates, FROM one table, WHERE with AND/OR and comparisons;
* 118 — IN lists, BETWEEN, LIKE, ORDER BY with ASC/DESC;
* 142 — DISTINCT, LIMIT, GROUP BY, HAVING, table aliases and qualified columns,
  NOT, parenthesised conditions;
* 171 — joins, subqueries, IS NULL, column aliases, OFFSET.

Records for the auto-completion model are :func:`windows` of 30 characters
with stride 5; a family evaluates a window from the parse of its full query.
"""

from __future__ import annotations

import random
import re

from nltk.grammar import PCFG

from ..parse_tree import ParseTreeFamily
from ..windows import Window, sliding_windows
from .pcfg import Rule, Sampler, build_pcfg, parse_rules

__all__ = [
    "Window",
    "detokenize",
    "family",
    "generate",
    "grammar",
    "rule_counts",
    "tokenize",
    "windows",
]

_TIERS = [
    """
    Query        -> SelectStmt
    SelectStmt   -> SelectCore
    SelectCore   -> SelectClause FromClause [2] | SelectClause FromClause WhereClause [3]
    SelectClause -> KwSelect SelectList
    SelectList   -> SelectItem [3] | SelectItem Comma SelectList [2]
    SelectItem   -> Star [1] | ColumnRef [6] | Aggregate [2]
    Aggregate    -> AggFunc LParen ColumnRef RParen [4] | KwCount LParen Star RParen [1]
    AggFunc      -> KwCount | KwSum | KwAvg | KwMin | KwMax
    FromClause   -> KwFrom TableRef
    TableRef     -> TableName
    WhereClause  -> KwWhere Condition
    Condition    -> CondTerm [5] | CondTerm KwAnd Condition [2] | CondTerm KwOr Condition [1]
    CondTerm     -> Predicate
    Predicate    -> Comparison
    Comparison   -> ColumnRef CompOp Value
    CompOp       -> '=' [3] | '<' | '>' | '<=' | '>=' | '<>'
    Value        -> Literal [4] | ColumnRef [1]
    Literal      -> Number | String
    ColumnRef    -> ColumnName
    Star -> '*'
    Comma -> ','
    LParen -> '('
    RParen -> ')'
    KwSelect -> 'SELECT'
    KwFrom -> 'FROM'
    KwWhere -> 'WHERE'
    KwAnd -> 'AND'
    KwOr -> 'OR'
    KwCount -> 'COUNT'
    KwSum -> 'SUM'
    KwAvg -> 'AVG'
    KwMin -> 'MIN'
    KwMax -> 'MAX'
    ColumnName -> 'id' | 'name' | 'age' | 'city' | 'price' | 'total' | 'email' | 'status'
    ColumnName -> 'created' | 'score' | 'country' | 'qty' | 'title' | 'year' | 'rating' | 'region'
    TableName  -> 'users' | 'orders' | 'products' | 'items' | 'sales' | 'stores'
    TableName  -> 'customers' | 'events'
    Number     -> '0' | '1' | '2' | '3' | '5' | '7' | '10' | '42' | '100' | '250'
    String     -> "'alice'" | "'bob'" | "'paris'" | "'new'" | "'ok'" | "'x%'"
    String     -> "'tom'" | "'lyon'" | "'a%'" | "'done'"
    """,
    """
    SelectStmt   -> SelectCore OrderClause [2]
    Predicate    -> InPredicate [0.3] | BetweenPredicate [0.3] | LikePredicate [0.3]
    InPredicate  -> ColumnRef KwIn LParen ValueList RParen
    ValueList    -> Literal [2] | Literal Comma ValueList [1]
    BetweenPredicate -> ColumnRef KwBetween Number KwAnd Number
    LikePredicate -> ColumnRef KwLike String
    OrderClause  -> KwOrder KwBy OrderList
    OrderList    -> OrderTerm [3] | OrderTerm Comma OrderList [1]
    OrderTerm    -> ColumnRef | ColumnRef Direction
    Direction    -> KwAsc | KwDesc
    KwIn -> 'IN'
    KwBetween -> 'BETWEEN'
    KwLike -> 'LIKE'
    KwOrder -> 'ORDER'
    KwBy -> 'BY'
    KwAsc -> 'ASC'
    KwDesc -> 'DESC'
    """,
    """
    SelectStmt   -> SelectCore LimitClause [1] | SelectCore OrderClause LimitClause [1]
    LimitClause  -> KwLimit Number
    SelectClause -> KwSelect KwDistinct SelectList [0.2]
    SelectCore   -> SelectClause FromClause GroupClause [1]
    SelectCore   -> SelectClause FromClause WhereClause GroupClause [1]
    GroupClause  -> KwGroup KwBy ColumnList [2] | KwGroup KwBy ColumnList HavingClause [1]
    ColumnList   -> ColumnRef [3] | ColumnRef Comma ColumnList [1]
    HavingClause -> KwHaving Aggregate CompOp Number
    TableRef     -> TableName TableAlias [0.6]
    TableAlias   -> 't1' | 't2' | 't3'
    ColumnRef    -> TableAlias Dot ColumnName [0.4]
    CondTerm     -> LParen Condition RParen [0.3] | KwNot CondTerm [0.2]
    Dot -> '.'
    KwGroup -> 'GROUP'
    KwHaving -> 'HAVING'
    KwNot -> 'NOT'
    KwDistinct -> 'DISTINCT'
    KwLimit -> 'LIMIT'
    """,
    """
    FromClause   -> KwFrom TableRef JoinList [0.5]
    JoinList     -> JoinClause [3] | JoinClause JoinList [1]
    JoinClause   -> KwJoin TableRef KwOn JoinCondition | JoinType KwJoin TableRef KwOn JoinCondition
    JoinType     -> KwInner | KwLeft
    JoinCondition -> ColumnRef Equals ColumnRef
    Equals -> '='
    InPredicate  -> ColumnRef KwIn LParen SelectStmt RParen [0.3]
    Comparison   -> ColumnRef CompOp LParen SelectStmt RParen [0.1]
    SelectItem   -> ColumnRef KwAs AliasName [0.5] | Aggregate KwAs AliasName [0.5]
    AliasName    -> 'n' | 'cnt' | 'avg_price' | 'top'
    LimitClause  -> KwLimit Number KwOffset Number [0.3]
    KwJoin -> 'JOIN'
    KwOn -> 'ON'
    KwInner -> 'INNER'
    KwLeft -> 'LEFT'
    KwAs -> 'AS'
    KwOffset -> 'OFFSET'
    Predicate    -> NullPredicate [0.3]
    NullPredicate -> ColumnRef KwIs KwNull | ColumnRef KwIs KwNot KwNull
    KwIs -> 'IS'
    KwNull -> 'NULL'
    """,
]

_RULE_TIERS: list[list[Rule]] = [parse_rules(t) for t in _TIERS]
_SIZES: list[int] = [sum(len(t) for t in _RULE_TIERS[: i + 1]) for i in range(len(_RULE_TIERS))]

# Nonterminals whose nesting bounds a sampled query's depth (lists, conditions, subqueries).
_RECURSIVE = (
    "SelectStmt",
    "SelectList",
    "Condition",
    "CondTerm",
    "ValueList",
    "OrderList",
    "ColumnList",
    "JoinList",
)
# Functions and keywords written without a space before their "(": COUNT(*), IN (…) keeps one.
_FUNCTIONS = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX"})
_TOKEN = re.compile(
    r"\s*(?:('[^']*')|(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(<=|>=|<>|!=|[(),*=<>.;+\-/]))"
)


def rule_counts() -> list[int]:
    """Available grammar sizes (number of production rules), smallest first."""
    return list(_SIZES)


def _tier(n_rules: int | None) -> int:
    if n_rules is None:
        return len(_SIZES) - 1
    if n_rules not in _SIZES:
        raise ValueError(
            f"n_rules={n_rules} is not an available SQL grammar size; use one of {_SIZES}."
        )
    return _SIZES.index(n_rules)


def grammar(n_rules: int | None = None) -> PCFG:
    """The SQL grammar with ``n_rules`` productions (the full grammar when None).

    Raises
    ------
    ValueError
        If ``n_rules`` is not one of :func:`rule_counts`.
    """
    t = _tier(n_rules)
    return build_pcfg([r for tier in _RULE_TIERS[: t + 1] for r in tier], start="Query")


def tokenize(query: str) -> list[tuple[str, int, int]]:
    """Split a query into ``(terminal, start, end)`` tokens; whitespace separates tokens.

    Raises
    ------
    ValueError
        On a character that starts no token; the message gives its offset.
    """
    out = []
    pos = 0
    n = len(query)
    while pos < n:
        m = _TOKEN.match(query, pos)
        if m is None:
            if query[pos:].isspace():
                break
            bad = pos + len(query[pos:]) - len(query[pos:].lstrip())
            raise ValueError(f"unexpected character {query[bad]!r} at offset {bad} of {query!r}.")
        start = m.start(m.lastindex)
        out.append((m.group(m.lastindex), start, m.end()))
        pos = m.end()
    return out


def detokenize(tokens: list[str]) -> str:
    """Join tokens the way people write SQL: ``COUNT(*)``, ``a, b``, ``t1.id``, ``IN (1, 2)``."""
    out: list[str] = []
    prev = None
    for tok in tokens:
        glue = (
            prev is None
            or tok in (",", ")", ".")
            or prev in ("(", ".")
            or (tok == "(" and prev in _FUNCTIONS)
        )
        out.append(tok if glue else " " + tok)
        prev = tok
    return "".join(out)


def generate(
    n: int,
    seed: int = 0,
    n_rules: int | None = None,
    max_depth: int = 8,
    max_len: int = 160,
) -> list[str]:
    """Sample ``n`` queries from the grammar with ``n_rules`` productions.

    Parameters
    ----------
    n : int
        Number of queries.
    seed : int
        Seed of the sampler; equal seeds give equal queries.
    n_rules : int, optional
        Grammar size, one of :func:`rule_counts` (the full grammar when None).
    max_depth : int
        Largest nesting of lists, conditions and subqueries.
    max_len : int
        Queries longer than this many characters are redrawn (keeps parsing fast).
    """
    sampler = Sampler(grammar(n_rules), max_depth=max_depth, depth_labels=_RECURSIVE)
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        tokens = sampler.draw(rng, max_tokens=max_len // 2)
        if tokens is not None:
            text = detokenize(tokens)
            if len(text) <= max_len:
                out.append(text)
    return out


def windows(queries: list[str], width: int = 30, stride: int = 5) -> list[Window]:
    """Cut queries into windows of ``width`` characters every ``stride`` characters.

    Each :class:`~hypotheses.windows.Window` keeps its query (``.source``) and
    offset (``.start``); a query shorter than ``width`` gives one shorter window.
    """
    return [w for q in queries for w in sliding_windows(q, width, stride)]


def family(n_rules: int | None = None, name: str = "sql", by: str = "label") -> ParseTreeFamily:
    """A parse-tree family over the SQL grammar of ``n_rules`` rules, read by :func:`tokenize`."""
    return ParseTreeFamily(grammar(n_rules), name=name, tokenizer=tokenize, by=by)
