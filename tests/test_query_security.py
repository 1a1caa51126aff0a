"""Queries reach only the catalog's relations: no table function may open a file."""

from __future__ import annotations

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
        'SELECT * FROM "read_csv"(\'{p}\')',
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
