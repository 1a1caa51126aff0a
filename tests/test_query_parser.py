"""The query parser: valid queries, and invalid ones with their position and caret."""

from __future__ import annotations

import pytest
from query_workloads import PAPER_QUERY

import dni_lab as dl
from dni_lab.backend.query import QueryError, parse
from dni_lab.backend.query.tokens import tokenize


def caret_of(err: QueryError) -> tuple[str, str]:
    """The quoted query line and the caret line of an error message."""
    lines = str(err).split("\n")
    return lines[-2][2:], lines[-1][2:]


def error(text: str) -> QueryError:
    with pytest.raises(QueryError) as e:
        parse(text)
    return e.value


def test_paper_query_parses_into_its_clauses():
    q = parse(PAPER_QUERY)
    ins = q.inspect
    assert (ins.units.alias, ins.units.column) == ("U", "uid")
    assert (ins.hyps.alias, ins.hyps.column) == ("H", "h")
    assert [m.name for m in ins.measures] == ["corr"]
    assert (ins.inputs.alias, ins.inputs.column, ins.alias) == ("D", "seq", "S")
    assert [(f.name, f.alias) for f in q.from_] == [
        ("models", "M"),
        ("units", "U"),
        ("hypotheses", "H"),
        ("inputs", "D"),
    ]
    assert [(r.alias, r.column) for r in q.group_by] == [("M", "epoch")]
    assert q.render(q.span("HAVING")) == "S.unit_score > 0.8"
    assert q.render(q.span("WHERE")).startswith(
        "M.mid = U.mid AND M.mid = 'sqlparser' AND\nU.layer"
    )
    assert set(q.clauses) == {"SELECT", "INSPECT", "FROM", "WHERE", "GROUP BY", "HAVING"}


def test_tokens_carry_positions_and_decode_literals():
    toks = tokenize("SELECT 'it''s', \"My Col\", 1.5e3 -- comment\n/* block */ x")
    kinds = [(t.kind, t.value) for t in toks]
    assert kinds == [
        ("ident", "SELECT"),
        ("string", "it's"),
        ("punct", ","),
        ("ident", "My Col"),
        ("punct", ","),
        ("number", 1500.0),
        ("ident", "x"),
        ("end", None),
    ]
    assert toks[1].start == 7 and toks[1].end == 14 and toks[3].quoted


def test_optional_parts_measures_with_arguments_and_options():
    q = parse(
        "inspect U, H using local_iou(quantile = 0.8), corr over D "
        "from units U, hypotheses H, inputs D "
        "order by S.unit_score desc limit 10 offset 5 "
        "with (eps = NULL, block_size = 64, device = 'cpu');"
    )
    ins = q.inspect
    assert ins.units.column is None and ins.alias == "S"
    assert [(m.name, m.args) for m in ins.measures] == [
        ("local_iou", {"quantile": 0.8}),
        ("corr", {}),
    ]
    assert {k: v for k, (v, _) in q.options.items()} == {
        "eps": None,
        "block_size": 64,
        "device": "cpu",
    }
    assert "SELECT" not in q.clauses and q.render(q.span("LIMIT")) == "10 offset 5"


def test_join_on_and_aliases_with_as():
    q = parse(
        "SELECT S.uid INSPECT U.uid AND H.h OVER D.seq AS R "
        "FROM models AS M JOIN units AS U ON M.mid = U.mid, hypotheses H, inputs D"
    )
    assert q.inspect.alias == "R"
    assert [(f.alias, f.on is not None) for f in q.from_] == [
        ("M", False),
        ("U", True),
        ("H", False),
        ("D", False),
    ]
    assert q.render(q.from_[1].on) == "M.mid = U.mid"


def test_plain_sql_has_no_inspect_clause():
    q = parse("SELECT mid, count(*) FROM units GROUP BY mid")
    assert q.inspect is None and [f.name for f in q.from_] == ["units"]


def test_error_is_a_dni_error_with_line_column_and_caret():
    err = error(PAPER_QUERY.replace("USING corr OVER", "USING corr OVR"))
    assert isinstance(err, dl.DNIError) and isinstance(err, dl.QueryError)
    assert (err.line, err.column) == (2, 34)
    line, caret = caret_of(err)
    assert line == "INSPECT U.uid AND H.h USING corr OVR D.seq AS S"
    assert caret == " " * 33 + "^^^"
    assert "expected OVER" in err.message


@pytest.mark.parametrize(
    ("text", "message", "token"),
    [
        ("SELEC x INSPECT U AND H OVER D", "Did you mean 'SELECT'", "SELEC"),
        ("", "the query is empty", None),
        ("SELECT a INSPECT U.uid H.h OVER D", "expected AND", "H"),
        ("SELECT a FROM m INSPECT U AND H OVER D", "INSPECT cannot follow FROM", "INSPECT"),
        ("INSPECT U AND H OVER D WHERE a = 1 WHERE b = 2", "duplicate WHERE", "WHERE"),
        ("INSPECT U AND H OVER D WHERE", "WHERE is empty", "WHERE"),
        ("INSPECT U AND H OVER D WHERE (a = 1", "unbalanced '('", "("),
        ("INSPECT U AND H OVER D WHERE a = 1)", "unbalanced ')'", ")"),
        ("INSPECT U AND H OVER D WHERE a = 'x", "unterminated string", "'"),
        ("INSPECT U AND H OVER D WHERE a ? 1", "unexpected character '?'", "?"),
        ("INSPECT U AND H USING corr(q=) OVER D", "expected a value", ")"),
        ("INSPECT U AND H USING FROM x", "expected a measure name", "FROM"),
        ("INSPECT U AND H OVER D x y", "unexpected 'y'", "y"),
        ("INSPECT U AND H OVER D LIMIT ten", "LIMIT takes a whole number", "ten"),
        ("INSPECT U AND H OVER D WITH (eps = 0.1 block_size = 3)", "expected ','", "block_size"),
        ("INSPECT U AND H OVER D GROUP BY U.unit % 2", "GROUP BY takes columns", "U"),
        ("INSPECT U AND H OVER D FROM units U LEFT JOIN models M", "joined with ','", "LEFT"),
        ("INSPECT U AND H OVER D FROM units U, models U", "alias 'U' names two", "models"),
        ("INSPECT U AND H OVER D FROM units U x", "joined with ','", "x"),
        ("INSPECT U AND H OVER D; SELECT 1", "only one statement", ";"),
    ],
)
def test_invalid_queries_point_at_the_offending_token(text, message, token):
    err = error(text)
    assert message in str(err)
    if token is None:
        return
    line, caret = caret_of(err)
    col = caret.index("^")
    assert line[col : col + len(token)] == token
    assert caret.count("^") >= 1


def test_caret_on_a_later_line_of_a_multi_line_query():
    err = error("SELECT S.uid\nINSPECT U.uid AND H.h\n  OVER D.seq\nGROUP BY M.epoch + 1")
    assert err.line == 4
    line, caret = caret_of(err)
    assert line == "GROUP BY M.epoch + 1" and caret.startswith(" " * 9 + "^")
