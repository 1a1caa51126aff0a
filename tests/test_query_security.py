"""Queries reach only the catalog's relations: no table function may open a file."""

from __future__ import annotations

import polars as pl
import pytest
from query_workloads import one_thread, toy_catalog  # noqa: F401  (one_thread: autouse)

import dni_lab as dl
from dni_lab.backend.query.sql import SQLEngineError, refuse_file_access

SECRET = "a,b\n1,top-secret\n"


@pytest.fixture(scope="module")
def cat():
    return toy_catalog((1,))


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "secret.csv"
    path.write_text(SECRET)
    return path


@pytest.mark.parametrize(
    "template",
    [
        "SELECT (SELECT max(b) FROM read_csv('{p}')) AS x FROM models",
        "SELECT * FROM READ_CSV('{p}')",
        "SELECT * FROM \"read_csv\"('{p}')",
        "SELECT * FROM read_csv /* hidden */ ('{p}')",
        "SELECT * FROM read_parquet('{p}')",
        "SELECT * FROM read_ipc('{p}')",
        "SELECT * FROM read_json('{p}')",
    ],
)
def test_plain_queries_cannot_read_files(cat, secret, template):
    with pytest.raises(dl.QueryError) as e:
        dl.query(template.format(p=secret), catalog=cat, namespace={})
    # refused before anything runs: by the file guard, or as an unknown relation
    assert "reads files" in str(e.value) or "unknown relation" in str(e.value)
    assert "top-secret" not in str(e.value)


def test_inspect_queries_cannot_read_files(cat, secret):
    sql = (
        "SELECT S.uid, (SELECT count(*) FROM read_csv('" + str(secret) + "')) AS leak\n"
        "INSPECT U.uid AND H.h USING corr OVER D.seq AS S\n"
        "FROM models M, units U, hypotheses H, inputs D\n"
        "WHERE H.name = 'paren'"
    )
    with pytest.raises(dl.QueryError, match="reads files"):
        dl.query(sql, catalog=cat, namespace={}, eps=None)


def test_the_guard_ignores_strings_comments_and_look_alike_names():
    refuse_file_access("SELECT 'read_csv(' AS a, thread_count, my_read_csv FROM t -- read_csv(")
    refuse_file_access("SELECT 'it''s read_csv(x)' FROM models")
    with pytest.raises(SQLEngineError, match="scan_csv"):
        refuse_file_access("SELECT * FROM scan_csv/**/('x')")


@pytest.mark.parametrize(
    "sql",
    [
        # a quote inside a quoted name once opened a fake string literal that hid the call
        "SELECT 1 AS \"x'\", (SELECT max(b) FROM read_csv('{p}')) AS n FROM models",
        'SELECT 1 AS "a""\'", (SELECT max(b) FROM read_csv(\'{p}\')) AS n FROM models',
        # a backslash is a plain character in '...': the literal ends at the quote after it
        "SELECT 'a\\' AS x, (SELECT max(b) FROM read_csv('{p}')) AS n FROM models",
    ],
)
def test_quotes_inside_names_or_literals_hide_no_call(cat, secret, sql):
    with pytest.raises(dl.QueryError, match="reads files"):
        dl.query(sql.format(p=secret), catalog=cat, namespace={})


@pytest.mark.parametrize(
    ("sql", "hidden"),
    [
        ("SELECT $$ ' $$ AS x, read_csv('p')", True),
        ("SELECT $t$ read_csv( $t$ AS x", False),
        ("SELECT E'\\'' AS x, read_csv('p')", True),
        ("SELECT E'read_csv(' AS x", False),
        ("SELECT `x'` , read_csv('p')", True),
        ("SELECT /* a /* b */ read_csv( */ 1", False),
        ("SELECT /* a /* b */ */ read_csv('p')", True),
        ("SELECT \"unterminated, read_csv('p')", True),  # an open quote fails closed
    ],
)
def test_the_lexer_follows_polars_literals_names_and_comments(sql, hidden):
    if hidden:
        with pytest.raises(SQLEngineError, match=r"read_csv\(\.\.\.\) reads files"):
            refuse_file_access(sql)
    else:
        refuse_file_access(sql)


def test_the_plan_backstop_refuses_a_file_scan_the_lexer_missed(secret, monkeypatch):
    from dni_lab.backend.query import sql as sql_mod

    engine = sql_mod.PolarsEngine()
    frame = pl.DataFrame({"mid": ["a"]})
    monkeypatch.setattr(sql_mod, "refuse_file_access", lambda s: None)  # a lexer gap
    with pytest.raises(SQLEngineError, match=r"plan \(Csv SCAN") as e:
        engine.execute(
            f"SELECT (SELECT max(b) FROM read_csv('{secret}')) AS n FROM t", {"t": frame}
        )
    assert "top-secret" not in str(e.value)
    # in-memory frames and look-alike text pass
    out = engine.execute(
        "SELECT 'SCAN' AS x, 'a SCAN [b' AS y, mid AS \"SCAN\" FROM t", {"t": frame}
    )
    assert out.rows() == [("SCAN", "a SCAN [b", "a")]


def test_table_filter_box_cannot_read_files(tmp_path) -> None:
    """The live table's filter box runs SQL too: it gets the same guards as a query."""
    import polars as pl

    from dni_lab.widgets._paging import apply_filter

    secret = tmp_path / "secret.csv"
    secret.write_text("b\n42\n")
    frame = pl.DataFrame({"unit": [1, 2], "unit_score": [0.1, 0.9]})
    assert apply_filter(frame, "unit_score > 0.5")["unit"].to_list() == [2]
    with pytest.raises(ValueError, match="reads files"):
        apply_filter(frame, f"unit_score < (SELECT max(b) FROM read_csv('{secret}'))")
