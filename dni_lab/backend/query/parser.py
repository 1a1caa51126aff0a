"""The parser: clause structure, the INSPECT clause, FROM, GROUP BY and the WITH options.

Grammar (keywords in any case, clauses in this order)::

    [SELECT items]
    INSPECT units (AND | ,) hypotheses [USING measure [(k = v, ...)], ...]
            OVER inputs [[AS] alias]
    [FROM relation [[AS] alias] {, relation [[AS] alias] | [INNER] JOIN ... ON cond}]
    [WHERE cond] [GROUP BY column, ...] [HAVING cond] [ORDER BY keys]
    [LIMIT n [OFFSET m]] [WITH [FDR rate [,]] [(option = value, ...)]] [;]

``WITH FDR 0.05`` controls the false discovery rate over the INSPECT result (the
option ``fdr``; S gains ``p_value``, ``q_value`` and ``significant``).

A query without INSPECT is plain SQL over the catalog's relations.
"""

from __future__ import annotations

import difflib
from typing import Any

from ..errors import did_you_mean
from .errors import QueryError
from .nodes import SQL_WORDS, FromItem, InspectClause, MeasureSpec, Query, Ref, split_top
from .tokens import tokenize

CLAUSES = ("SELECT", "INSPECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "WITH")
_JOIN_WORDS = ("JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "OUTER", "ON", "NATURAL")
_NOT_ALIAS = frozenset(CLAUSES) | {"GROUP", "ORDER", "USING", "OVER", "AS", *_JOIN_WORDS}
#: Every word the grammar reads as a keyword, in any case: the clauses', the INSPECT and
#: WITH clauses' and the expressions'. The notebook extension highlights them in %%inspect
#: cells (labextension/lib/keywords.js is generated from this set: labextension/keywords.py).
KEYWORDS = frozenset(w for p in (*_NOT_ALIAS, *SQL_WORDS, "FDR") for w in p.split())


def parse(text: str) -> Query:
    """Parse ``text`` into a :class:`Query`.

    Raises
    ------
    QueryError
        With the position of the first token that does not fit.
    """
    if not isinstance(text, str):
        raise QueryError(f"a query is SQL text (a str), not {type(text).__name__}.")
    q = Query(text, tokenize(text))
    _split_clauses(q)
    if "INSPECT" in q.clauses:
        q.inspect = _parse_inspect(q)
    if "FROM" in q.clauses:
        q.from_ = _parse_from(q, strict=q.inspect is not None)
    if "GROUP BY" in q.clauses:
        q.group_by = _parse_group_by(q)
    if "LIMIT" in q.clauses:
        _check_limit(q)
    if "WITH" in q.clauses:
        q.options = _parse_with(q)
    return q


def _clause_at(q: Query, i: int) -> tuple[str, int] | None:
    """The clause keyword starting at token ``i`` and its length in tokens."""
    t, nxt = q.tokens[i], q.tokens[i + 1]
    if t.is_kw("GROUP", "ORDER") and nxt.is_kw("BY"):
        return f"{t.text.upper()} BY", 2
    for word in CLAUSES:
        if " " not in word and t.is_kw(word):
            return word, 1
    return None


def _misspelled_clause(q: Query, i: int) -> bool:
    """A word that opens a line and is one typo away from INSPECT (``INSPCT``): without this
    check the query would go on as plain SQL and fail far from the typo."""
    t = q.tokens[i]
    if t.kind == "end" or t.text.upper() == "INSPECT" or not t.text.isalpha():
        return False
    line_start = q.text[: t.start].rsplit("\n", 1)[-1].strip() == ""
    ratio = difflib.SequenceMatcher(None, t.text.upper(), "INSPECT").ratio()
    return line_start and ratio >= 0.8


def _split_clauses(q: Query) -> None:
    toks = q.tokens
    if toks[0].kind == "end":
        raise q.error("the query is empty: write SELECT ... INSPECT ... OVER ... FROM ...", 0)
    first = _clause_at(q, 0)
    if first is None or first[0] not in ("SELECT", "INSPECT"):
        hint = did_you_mean(toks[0].text.upper(), ["SELECT", "INSPECT"])
        raise q.error(f"a query starts with SELECT or INSPECT, not {toks[0].text!r}.{hint}", 0)
    end = len(toks) - 1
    if toks[end - 1].is_punct(";"):
        end -= 1
    depth, opened, marks = 0, [], []
    i = 0
    while i < end:
        t = toks[i]
        if t.is_punct(";"):
            raise q.error("only one statement per query: remove this ';' or what follows", i)
        if t.is_punct("("):
            depth += 1
            opened.append(i)
        elif t.is_punct(")"):
            if depth == 0:
                raise q.error("unbalanced ')': no '(' opens it", i)
            depth -= 1
            opened.pop()
        elif depth == 0 and (hit := _clause_at(q, i)):
            marks.append((hit[0], i, hit[1]))
            i += hit[1]
            continue
        elif depth == 0 and _misspelled_clause(q, i):
            hint = did_you_mean(t.text.upper(), ["INSPECT"])
            raise q.error(f"{t.text!r} starts no clause here.{hint}", i)
        i += 1
    if opened:
        raise q.error("unbalanced '(': no ')' closes it", opened[-1])
    rank = -1
    for k, (name, at, width) in enumerate(marks):
        if name in q.clauses:
            raise q.error(f"duplicate {name} clause", at, at + width - 1)
        if CLAUSES.index(name) < rank:
            prev = marks[k - 1][0]
            raise q.error(
                f"{name} cannot follow {prev}: clauses go in the order {', '.join(CLAUSES)}",
                at,
                at + width - 1,
            )
        rank = CLAUSES.index(name)
        stop = marks[k + 1][1] if k + 1 < len(marks) else end
        if stop == at + width:
            raise q.error(f"{name} is empty: it needs what follows the keyword", at, stop - 1)
        q.clauses[name] = (at, (at + width, stop))


def _ident(q: Query, i: int, what: str, stop: int | None = None) -> str:
    """The identifier at token ``i``; ``stop`` is where the current clause ends."""
    t = q.tokens[i]
    ended = t.kind == "end" or (stop is not None and i >= stop)
    if t.kind != "ident" or ended:
        found = repr(t.text) if t.kind != "end" else "the end of the query"
        raise q.error(f"expected {what}, found {found}", i)
    return t.value


def _operand(q: Query, i: int, what: str, stop: int | None = None) -> tuple[Ref, int]:
    """``alias`` or ``alias.column`` (or ``alias.*``) at token ``i``; returns it and the next i."""
    name = _ident(q, i, what, stop)
    toks = q.tokens
    if toks[i + 1].is_punct("."):
        col = toks[i + 2]
        if col.kind == "ident" or col.is_punct("*"):
            return Ref(name, "*" if col.text == "*" else col.value, i, i + 2), i + 3
        raise q.error(f"expected a column name after '{name}.'", i + 2)
    return Ref(name, None, i, i), i + 1


def _literal(q: Query, i: int) -> tuple[Any, int]:
    """A number, string, TRUE/FALSE or NULL/NONE at token ``i``."""
    t = q.tokens[i]
    if t.is_punct("-") and q.tokens[i + 1].kind == "number":
        return -q.tokens[i + 1].value, i + 2
    if t.kind in ("number", "string"):
        return t.value, i + 1
    if t.is_kw("TRUE", "FALSE"):
        return t.text.upper() == "TRUE", i + 1
    if t.is_kw("NULL", "NONE"):
        return None, i + 1
    raise q.error(f"expected a value (number, 'string', TRUE, FALSE or NULL), found {t.text!r}", i)


def _keyword_args(q: Query, i: int, stop: int) -> tuple[dict[str, Any], dict[str, int], int]:
    """``k = v, ...`` from token ``i`` to a ``)`` or ``stop``; values and key token indices."""
    args: dict[str, Any] = {}
    where: dict[str, int] = {}
    toks = q.tokens
    while i < stop and not toks[i].is_punct(")"):
        key = _ident(q, i, "an option name", stop).lower()
        if not toks[i + 1].is_punct("=", "=="):
            raise q.error(f"expected '=' after {key!r}", i + 1)
        where[key] = i
        args[key], i = _literal(q, i + 2)
        if toks[i].is_punct(","):
            i += 1
        elif i < stop and not toks[i].is_punct(")"):
            raise q.error(f"expected ',' or ')' after the value of {key!r}", i)
    return args, where, i


def _parse_inspect(q: Query) -> InspectClause:
    at, (i, stop) = q.clauses["INSPECT"]
    toks = q.tokens
    units, i = _operand(q, i, "the units to inspect (e.g. U.uid)", stop)
    if i >= stop or not (toks[i].is_kw("AND") or toks[i].is_punct(",")):
        raise q.error(
            "expected AND between the units and the hypotheses (INSPECT U.uid AND H.h)", i
        )
    hyps, i = _operand(q, i + 1, "the hypotheses to inspect (e.g. H.h)", stop)
    measures: list[MeasureSpec] = []
    if toks[i].is_kw("USING"):
        i += 1
        while True:
            name = _ident(q, i, "a measure name after USING", stop)
            spec, i = MeasureSpec(name, {}, i), i + 1
            if i < stop and toks[i].is_punct("("):
                spec.args, _, i = _keyword_args(q, i + 1, stop)
                i += 1  # the ')'
            measures.append(spec)
            if i >= stop or not toks[i].is_punct(","):
                break
            i += 1
    if i >= stop or not toks[i].is_kw("OVER"):
        found = "the end of INSPECT" if i >= stop else repr(toks[i].text)
        raise q.error(f"expected OVER <inputs> (e.g. OVER D.seq), found {found}", min(i, stop))
    inputs, i = _operand(q, i + 1, "the inputs after OVER (e.g. D.seq)", stop)
    alias = "S"
    if i < stop and toks[i].is_kw("AS"):
        i += 1
    if i < stop:
        alias = _ident(q, i, "a name for the INSPECT result (AS S)", stop)
        i += 1
    if i < stop:
        raise q.error(f"unexpected {toks[i].text!r} at the end of INSPECT", i)
    return InspectClause(units, hyps, measures, inputs, alias, at)


def _parse_from(q: Query, strict: bool) -> list[FromItem]:
    """Relations of FROM. Outside INSPECT queries only the names matter (Polars parses)."""
    _, (i, stop) = q.clauses["FROM"]
    toks, items, seen = q.tokens, [], set()
    while i < stop:
        t = toks[i]
        if t.is_punct(",") or t.is_kw("JOIN") or (t.is_kw("INNER") and toks[i + 1].is_kw("JOIN")):
            i += 1
            continue
        if t.is_kw(*_JOIN_WORDS) or t.kind != "ident":
            if strict:
                raise q.error(f"expected a relation name, found {t.text!r}", i)
            i += 1
            continue
        name = _ident(q, i, "a relation name")
        item = FromItem(name, name, i)
        i += 1
        if toks[i].is_kw("AS"):
            item.alias = _ident(q, i + 1, "an alias after AS", stop)
            i += 2
        elif i < stop and toks[i].kind == "ident" and toks[i].text.upper() not in _NOT_ALIAS:
            item.alias = toks[i].value
            i += 1
        if i < stop and toks[i].is_kw("ON"):
            j = i + 1
            while j < stop and not (toks[j].is_punct(",") or toks[j].is_kw(*_JOIN_WORDS)):
                j += 1
            item.on, i = (i + 1, j), j
        ends = i >= stop or toks[i].is_punct(",") or toks[i].is_kw("JOIN", "INNER")
        if strict and not ends:
            raise q.error(
                "before INSPECT, relations are joined with ',' (or INNER JOIN ... ON) and "
                "conditions go in WHERE",
                i,
            )
        if item.alias in seen:
            raise q.error(f"alias {item.alias!r} names two relations; give each its own", item.tok)
        seen.add(item.alias)
        items.append(item)
    return items


def _parse_group_by(q: Query) -> list[Ref]:
    out = []
    for lo, hi in split_top(q, q.span("GROUP BY"), ","):  # type: ignore[arg-type]
        ref, end = _operand(q, lo, "a column to group by")
        if end != hi:
            raise q.error("GROUP BY takes columns (alias.column), not expressions", lo, hi - 1)
        out.append(ref if ref.column is not None else Ref(None, ref.alias, lo, lo))
    return out


def _check_limit(q: Query) -> None:
    lo, hi = q.span("LIMIT")  # type: ignore[misc]
    toks = q.tokens
    ok = toks[lo].kind == "number" and isinstance(toks[lo].value, int)
    if ok and hi - lo == 3:
        ok = toks[lo + 1].is_kw("OFFSET") and isinstance(toks[lo + 2].value, int)
    if not ok or hi - lo not in (1, 3):
        raise q.error("LIMIT takes a whole number of rows (LIMIT 10 [OFFSET 20])", lo, hi - 1)


def _parse_with(q: Query) -> dict[str, tuple[Any, int]]:
    """``WITH [FDR rate [,]] [(k = v, ...)]``: each option's value and its key's token."""
    lo, hi = q.span("WITH")  # type: ignore[misc]
    toks = q.tokens
    out: dict[str, tuple[Any, int]] = {}
    if toks[lo].is_kw("FDR") and not toks[lo + 1].is_punct("=", "=="):
        out["fdr"], lo = (_fdr_rate(q, lo + 1, hi), lo), lo + 2
        if lo < hi and toks[lo].is_punct(","):
            lo += 1
        if lo == hi:
            return out
    paren = toks[lo].is_punct("(")
    args, where, i = _keyword_args(q, lo + paren, hi)
    if paren and not toks[i].is_punct(")"):
        raise q.error("expected ')' to close WITH (...)", i)
    if i + paren != hi:
        raise q.error(f"unexpected {toks[i + paren].text!r} after WITH (...)", i + paren)
    if "fdr" in out and "fdr" in args:
        raise q.error("the false discovery rate is given twice: keep FDR or fdr", where["fdr"])
    return out | {k: (v, where[k]) for k, v in args.items()}


def _fdr_rate(q: Query, i: int, stop: int) -> float:
    """The rate after ``WITH FDR`` at token ``i``: a number strictly between 0 and 1."""
    if i >= stop:
        raise q.error("WITH FDR needs a false discovery rate, e.g. WITH FDR 0.05", i - 1)
    t = q.tokens[i]
    last = i + (t.is_punct("-") and i + 1 < stop)  # a caret under all of "-0.05"
    if not (t.kind == "number" and 0 < t.value < 1):
        raise q.error(
            "WITH FDR takes a false discovery rate strictly between 0 and 1 (e.g. WITH FDR "
            f"0.05), not {q.render((i, last + 1))!r}",
            i,
            last,
        )
    return float(t.value)
