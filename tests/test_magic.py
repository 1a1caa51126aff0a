"""%%inspect and %inspect through a real IPython shell: results, -o, flags, the live hook, and
every error class as a UsageError with the caret and the suggestion (no traceback)."""

from __future__ import annotations

import polars as pl
import pytest
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython
from polars.testing import assert_frame_equal
from query_workloads import (  # noqa: F401  (one_thread: an autouse fixture)
    PAPER_QUERY,
    keywords,
    one_thread,
    sql_checkpoints,
    sql_records,
)

import dni_lab as dl
import dni_lab.magic as magic
from dni_lab.backend.query import QueryRun


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython()
    shell.run_line_magic("load_ext", "dni_lab")
    return shell


@pytest.fixture
def session(ip, monkeypatch):
    """A fresh default catalog with the SQL model's checkpoints, and a clean namespace."""
    cat = dl.Catalog()
    monkeypatch.setattr(dl.Catalog, "_default", cat)
    for m in sql_checkpoints():
        cat.add_model(m)
    cat.add_inputs(sql_records(80), "sql_queries")
    cat.add_hypothesis(keywords)
    saved = dict(ip.user_ns)
    yield ip, cat
    for k in set(ip.user_ns) - set(saved):
        del ip.user_ns[k]


def usage_error(ip, capsys, cell: str) -> str:
    """Run a cell that must fail; return what the shell printed (and check: no traceback)."""
    result = ip.run_cell(cell)
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr()
    shown = err.out + err.err
    assert "UsageError" in shown and "Traceback" not in shown
    return shown


def test_load_ext_registers_cell_and_line_magic(ip):
    magics = ip.magics_manager.magics
    assert "inspect" in magics["cell"] and "inspect" in magics["line"]


def test_cell_magic_runs_the_paper_query_and_stores_the_result(session):
    ip, cat = session
    out = ip.run_cell_magic("inspect", "-o res", PAPER_QUERY)
    assert isinstance(out, pl.DataFrame) and out.rows() == [(2, 0), (3, 0)]
    assert ip.user_ns["res"] is out
    assert_frame_equal(out, dl.query(PAPER_QUERY, catalog=cat, namespace={}))


def test_cell_magic_result_is_the_cell_output(session):
    ip, _ = session
    result = ip.run_cell("%%inspect\n" + PAPER_QUERY)
    assert result.success and isinstance(result.result, pl.DataFrame)


def test_flags_set_eps_and_block_size_over_the_query(session):
    ip, _ = session
    sql = (
        "SELECT S.n_records INSPECT U.uid AND H.h OVER D.seq AS S "
        "FROM models M, units U, hypotheses H, inputs D "
        "WHERE M.epoch = 1 AND U.layer = 0 AND D.rid < 40 WITH (eps = 0.5)"
    )
    out = ip.run_cell_magic("inspect", "--eps none --block-size 7", sql)
    assert out["n_records"].unique().to_list() == [40]


def test_line_magic_with_options_and_plain_sql(session):
    ip, _ = session
    out = ip.run_line_magic("inspect", "-o eps SELECT DISTINCT epoch FROM models ORDER BY epoch")
    assert out["epoch"].to_list() == [1, 2, 3] and ip.user_ns["eps"] is out
    one = ip.run_line_magic("inspect", PAPER_QUERY.replace("\n", " "))
    assert one.rows() == [(2, 0), (3, 0)]


def test_namespace_objects_need_no_registration(session):
    ip, _ = session
    ip.run_cell("from query_workloads import sql_checkpoint, encode_sql, sql_records, keywords")
    ip.run_cell("import dni_lab as dl\nlm = dl.Model(sql_checkpoint(1.0), encode_sql, name='lm')")
    ip.run_cell("texts = sql_records(30, seed=3)")
    out = ip.run_line_magic(
        "inspect",
        "SELECT S.uid INSPECT lm AND keywords OVER texts "
        "HAVING S.layer = 'lstm' AND S.unit_score > 0.9",
    )
    assert out["uid"].to_list() == [0]


def test_live_display_is_a_replaceable_hook(session, monkeypatch):
    ip, _ = session
    views = []

    class Recorder:
        def __init__(self, run):
            self.run, self.updates, self.closed = run, 0, False
            views.append(self)

        def update(self):
            self.updates += 1

        def finish(self):
            self.closed = True

    monkeypatch.setattr(magic, "live_display", Recorder)
    ip.run_cell_magic("inspect", "", PAPER_QUERY)
    (view,) = views
    assert isinstance(view.run, QueryRun) and view.closed and view.run.progress.done
    ip.run_cell_magic("inspect", "--no-live", PAPER_QUERY)
    assert len(views) == 1  # --no-live shows nothing


def test_default_live_view_is_the_score_table(session):
    pytest.importorskip("anywidget")
    from dni_lab.widgets import ScoreTable

    _, cat = session
    run = dl.query(PAPER_QUERY, catalog=cat, namespace={}, background=True)
    run.wait()
    view = magic.live_display(run)
    assert isinstance(view, ScoreTable)
    view.finish()
    assert view.frame.height == run.frame.height


def test_progress_view_and_text(session, monkeypatch):
    pytest.importorskip("ipywidgets")
    _, cat = session
    run = dl.query(PAPER_QUERY, catalog=cat, namespace={}, background=True)
    run.wait()
    from dni_lab.widgets.progress import ProgressView, progress_text

    view = ProgressView(run)
    view.finish()
    assert view.bar.value == view.bar.max == 80 and view.bar.bar_style == "success"
    assert progress_text(run).startswith("done: 80/80 records, ")


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("SELEC M.epoch INSPECT U AND H OVER D", ["Did you mean 'SELECT'", "^^^^^"]),
        (PAPER_QUERY.replace("FROM models M", "FROM modls M"),
         ["unknown relation 'modls'. Did you mean 'models'?", "FROM modls M", "     ^^^^^"]),
        (PAPER_QUERY.replace("S.unit_score >", "S.unit_scor >"),
         ["has no column 'unit_scor'. Did you mean 'unit_score'", "HAVING S.unit_scor"]),
        (PAPER_QUERY.replace("USING corr", "USING cor"),
         ["unknown measure 'cor'. Did you mean 'corr'?", "line 2, column 29"]),
        (PAPER_QUERY.replace("U.layer = 0", "U.layer = 'lstn'"),
         ["no layer 'lstn' in units.layer. Did you mean 'lstm'", "^^^^^^"]),
        (PAPER_QUERY.replace("'keywords'", "'keyword'"),
         ["no hypothesis 'keyword' in hypotheses.name. Did you mean 'keywords'?"]),
        (PAPER_QUERY.replace("M.epoch\nHAVING", "M.epoc\nHAVING"),
         ["has no column 'epoc'. Did you mean 'epoch'?"]),
    ],
)  # fmt: skip
def test_query_errors_are_usage_errors_with_caret_and_suggestion(session, capsys, cell, expected):
    ip, _ = session
    shown = usage_error(ip, capsys, "%%inspect\n" + cell)
    for text in expected:
        assert text in shown
    with pytest.raises(UsageError) as e:  # the same error, raised to a caller of the magic
        ip.run_cell_magic("inspect", "", cell)
    assert "^" in str(e.value)


def test_bad_flags_engine_errors_and_empty_cells_are_usage_errors(session, capsys):
    ip, _ = session
    assert "--eps" in usage_error(ip, capsys, "%%inspect --eps often\n" + PAPER_QUERY)
    with pytest.raises(UsageError, match="needs a query"):
        ip.run_line_magic("inspect", "-o x")
    assert "no dl.Catalog named 'nope'" in usage_error(
        ip, capsys, "%%inspect --catalog nope\n" + PAPER_QUERY
    )
    ip.run_cell("from query_workloads import sql_checkpoint, encode_sql, sql_records")
    ip.run_cell("import dni_lab as dl\nlm = dl.Model(sql_checkpoint(1.0), encode_sql, name='lm')")
    ip.run_cell("texts = sql_records(30, seed=3)")
    ip.run_cell("bad = dl.hypothesis(lambda r: [0.0], name='bad')")
    shown = usage_error(ip, capsys, "%inspect SELECT * INSPECT lm AND bad OVER texts")
    assert "HypothesisError" in shown and "returned 1 values" in shown


def test_split_options():
    assert magic.split_options("-o r --eps 0.1 SELECT a") == ("-o r --eps 0.1", "SELECT a")
    assert magic.split_options("--no-live -o select INSPECT x") == (
        "--no-live -o select",
        "INSPECT x",
    )
    assert magic.split_options("-o r") == ("-o r", "")


def test_the_line_is_not_expanded_as_python(session):
    ip, _ = session
    ip.user_ns["epoch"] = 99
    out = ip.run_line_magic("inspect", "SELECT '{epoch}$x' AS s FROM models LIMIT 1")
    assert out["s"].to_list() == ["{epoch}$x"]


def test_kernel_detection_accepts_subclassed_shells(monkeypatch):
    from ipykernel.zmqshell import ZMQInteractiveShell

    class ColabShell(ZMQInteractiveShell):  # front ends subclass the kernel's shell
        pass

    fake = ColabShell.__new__(ColabShell)
    monkeypatch.setattr("IPython.get_ipython", lambda: fake)
    assert magic._in_kernel()
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    assert not magic._in_kernel()
