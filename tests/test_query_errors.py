"""Errors in a query's names and options: position, caret and "did you mean", before any run."""

from __future__ import annotations

import pytest
from conftest import CharLM, encode_chars, random_records
from query_workloads import one_thread, toy_catalog  # noqa: F401  (one_thread: autouse)

import dni_lab as dl

GOOD = {
    "select": "SELECT M.epoch, S.uid, S.unit_score",
    "inspect": "INSPECT U.uid AND H.h USING corr OVER D.seq AS S",
    "from": "FROM models M, units U, hypotheses H, inputs D",
    "where": "WHERE U.layer = 'lstm' AND H.name = 'paren'",
    "rest": "GROUP BY M.epoch HAVING S.unit_score > 0.5",
}


@pytest.fixture(scope="module")
def cat():
    return toy_catalog()


def fails(cat, **parts) -> dl.QueryError:
    sql = "\n".join(parts.get(k, v) for k, v in GOOD.items())
    with pytest.raises(dl.QueryError) as e:
        dl.query(sql, catalog=cat, namespace={})
    return e.value


def under_caret(err: dl.QueryError) -> str:
    """The text the caret underlines."""
    *_, line, caret = str(err).split("\n")
    start = caret.index("^")
    return line[start : start + caret.count("^")].strip()


def test_the_good_query_runs(cat):
    sql = "\n".join(GOOD.values())
    out = dl.query(sql, catalog=cat, namespace={}, eps=None)
    assert out.columns == ["epoch", "uid", "unit_score"]


@pytest.mark.parametrize(
    ("parts", "message", "token"),
    [
        # relations
        ({"from": "FROM modles M, units U, hypotheses H, inputs D"}, "unknown relation 'modles'. "
         "Did you mean 'models'?", "modles"),
        ({"inspect": "INSPECT X.uid AND H.h OVER D.seq AS S"}, "unknown relation or alias 'X'",
         "X"),
        ({"inspect": "INSPECT H.h AND U.uid OVER D.seq AS S"}, "must come from a units, models or "
         "features relation; 'H' is a hypotheses relation", "H.h"),
        # columns and aliases
        ({"where": "WHERE U.layr = 'lstm'"}, "has no column 'layr'. Did you mean 'layer'", "layr"),
        ({"where": "WHERE layr = 'lstm'"}, "unknown column 'layr'. Did you mean 'layer'", "layr"),
        ({"where": "WHERE mid = 'toy'"}, "ambiguous: write M.mid or U.mid", "mid"),
        ({"where": "WHERE Q.layer = 'lstm'"}, "unknown alias 'Q'", "Q"),
        ({"where": "WHERE S.unit_score > 0.5"}, "INSPECT result, computed after WHERE",
         "S.unit_score"),
        ({"rest": "GROUP BY M.epoc"}, "Did you mean 'epoch'?", "epoc"),
        ({"select": "SELECT M.epoch, S.unit_scor"}, "has no column 'unit_scor'. Did you mean "
         "'unit_score'", "unit_scor"),
        ({"select": "SELECT D.did"}, "'D' is not joined to the INSPECT result", "D.did"),
        ({"select": "SELECT D.did, S.uid"}, "add D.did to GROUP BY", "D.did"),
        ({"rest": "GROUP BY M.epoch ORDER BY scor"}, "unknown column 'scor'", "scor"),
        # measures
        ({"inspect": "INSPECT U.uid AND H.h USING corrr OVER D.seq AS S"}, "unknown measure "
         "'corrr'. Did you mean 'corr'?", "corrr"),
        ({"inspect": "INSPECT U.uid AND H.h USING corr(bogus = 1) OVER D.seq AS S"},
         "cannot build measure 'corr'", "corr"),
        ({"inspect": "INSPECT U.uid AND H.h USING corr, corr OVER D.seq AS S"}, "listed twice",
         "corr"),
        # layers, hypotheses, models, datasets
        ({"where": "WHERE U.layer = 'lstn' AND H.name = 'paren'"}, "no layer 'lstn' in "
         "units.layer. Did you mean 'lstm'", "'lstn'"),
        ({"where": "WHERE U.layer IN ('lstm', 'haed')"}, "Did you mean 'head'?", "'haed'"),
        ({"where": "WHERE U.layer = 7"}, "no layer at position 7; layers by position: 0 'embed', "
         "1 'lstm', 2 'head'", "7"),
        ({"where": "WHERE H.name = 'parens'"}, "no hypothesis 'parens' in hypotheses.name. Did "
         "you mean 'paren'?", "'parens'"),
        ({"where": "WHERE M.mid = 'tyo'"}, "no model 'tyo' in models.mid. Did you mean 'toy'?",
         "'tyo'"),
        ({"where": "WHERE D.did = 'char'"}, "no dataset 'char'", "'char'"),
        # options
        ({"rest": "WITH (epsilon = 0.1)"}, "unknown option 'epsilon'. Did you mean 'eps'?",
         "epsilon"),
        ({"rest": "WITH (block_size = -3)"}, "must be a positive whole number", "-"),
        ({"rest": "WITH (confidence = 'high')"}, "between 0 and 1", "'high'"),
    ],
)  # fmt: skip
def test_each_error_names_the_problem_and_points_at_it(cat, parts, message, token):
    err = fails(cat, **parts)
    assert message in err.message
    assert under_caret(err) == token
    assert err.line is not None and err.column is not None


def test_unknown_relation_suggests_namespace_variables_too():
    ns = {"records": random_records(5), "m": dl.Model(CharLM(), encode_chars), "h": len}
    with pytest.raises(dl.QueryError, match="Did you mean 'records'"):
        dl.query("SELECT * INSPECT m AND h OVER recods", namespace=ns)


def test_a_model_that_rejects_every_dataset_is_explained():
    lm = dl.Model(CharLM(hidden=4), encode_chars, name="toy")
    grids = [[[0.0]]]

    def h(r):
        return [0] * len(r)

    with pytest.raises(dl.QueryError, match="cannot list the units of model 'toy'"):
        dl.query("SELECT * INSPECT U AND h OVER grids FROM units U", namespace=locals())


def test_a_misspelled_inspect_points_at_the_typo(cat):
    # Without the check the query would run as plain SQL and fail at its first column.
    e = fails(cat, inspect="INSPCT U.uid AND H.h USING corr OVER D.seq AS S")
    assert "'INSPCT' starts no clause" in str(e) and "Did you mean 'INSPECT'?" in str(e)
    assert "(line 2, column 1)" in str(e) and "\n  ^^^^^^" in str(e)
