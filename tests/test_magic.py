"""%%inspect and %inspect through a real IPython shell: results, -o, flags, the live hook, and
every error class as a UsageError with the caret and the suggestion (no traceback)."""

from __future__ import annotations

import time

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


def test_a_feature_set_in_the_namespace_is_a_features_relation(session):
    ip, cat = session
    ip.run_cell(
        "import torch\nfrom dni_lab import features as F\n"
        "sae = F.TopKSAE(8, 20, 'lstm', name='sae', k=4)\ntorch.manual_seed(0)\n"
        "_ = [p.data.copy_(torch.randn(p.shape)) for p in sae.parameters()]"
    )
    cell = (
        "SELECT S.* INSPECT F.fid AND H.h USING corr, diffmeans OVER D.seq AS S\n"
        "FROM models M, sae F, hypotheses H, inputs D WHERE M.epoch = 3"
    )
    out = ip.run_cell_magic("inspect", "--eps none -o res", cell)
    ckpt = next(e.model for e in cat.models if e.meta["epoch"] == 3)
    want = dl.inspect(ckpt, [keywords], ["corr", "diffmeans"], sql_records(80),
                      units=[ip.user_ns["sae"]], eps=None)  # fmt: skip
    key = ["uid", "hid", "measure"]
    assert out.height == 20 * 2 and set(out["layer"]) == {"lstm:sae"}
    assert_frame_equal(out.sort(key), want.sort(key))


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
    assert progress_text(run).startswith("done: 80 of 80 records read, ")


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


# -- the background cell -----------------------------------------------------------------
SLOW_SETUP = """\
import time
import dni_lab as dl
from query_workloads import sql_checkpoint, encode_sql, sql_records
lm = dl.Model(sql_checkpoint(1.0), encode_sql, name='lm')
texts = sql_records(200, seed=3)

@dl.hypothesis(name="slow_kw")
def slow_kw(r):
    time.sleep(0.01)  # 200 records: about 2 s, long enough to act while it runs
    return [c.isupper() for c in r]
"""
SLOW_QUERY = "SELECT S.uid, S.unit_score INSPECT lm AND slow_kw OVER texts"
N_UNITS = 73  # every unit of the SQL model (its layers with parameters)


@pytest.fixture
def kernel(session, monkeypatch):
    """The session's shell, taken for a kernel: INSPECT cells run in the background."""
    ip, _ = session
    monkeypatch.setattr(magic, "_in_kernel", lambda: True)
    ip.run_cell(SLOW_SETUP)
    return ip


def test_background_cell_returns_at_once_and_binds_the_run_then_the_frame(kernel, monkeypatch):
    ip = kernel
    shown = []
    real = magic.live_display
    monkeypatch.setattr(magic, "live_display", lambda run: shown.append(real(run)) or shown[-1])
    t0 = time.perf_counter()
    result = ip.run_cell("%%inspect -o res --eps none --block-size 8\n" + SLOW_QUERY)
    assert result.success and result.result is None
    assert time.perf_counter() - t0 < 1.0  # the run goes on; the kernel is free
    run = ip.user_ns["res"]
    assert isinstance(run, QueryRun) and not run.done
    ip.run_cell("other = 1 + 1")  # a cell that does not name res does not wait
    assert not run.done and ip.user_ns["other"] == 2
    # the table's header says both states of res (issue 36, 6): a frame for every cell that
    # names it, the run's handle before that
    note = shown[0].note
    assert "bound to res when the run ends: a cell that names res waits" in note
    assert "until then res holds the run's handle" in note
    ip.run_cell("n = res.height")  # this one does: it sees the final frame
    assert run.done and isinstance(ip.user_ns["res"], pl.DataFrame)
    assert ip.user_ns["n"] == ip.user_ns["res"].height == N_UNITS  # the LSTM's units
    assert ip.user_ns["res"].columns == ["uid", "unit_score"]


def test_stop_binds_the_partial_frame_within_a_second(kernel):
    ip = kernel
    # blocks of 100 slow records (1 s each): a Stop must act inside a block, between records
    ip.run_cell("%%inspect -o res --eps none --block-size 100\n" + SLOW_QUERY)
    run = ip.user_ns["res"]
    time.sleep(0.5)
    t0 = time.perf_counter()
    run.cancel()  # what the table's Stop button does
    assert run.wait(2.0) and time.perf_counter() - t0 < 1.0
    deadline = time.perf_counter() + 2
    while not isinstance(ip.user_ns["res"], pl.DataFrame) and time.perf_counter() < deadline:
        time.sleep(0.02)  # bound by the run's own thread, without another cell
    res = ip.user_ns["res"]
    assert isinstance(res, pl.DataFrame) and res.height == N_UNITS
    assert run.progress.cancelled and run.progress.records_read in (0, 100)
    rec = dl.provenance(res)
    assert rec["partial"] and rec["partial_reason"].startswith("stopped by the user after")


def test_a_stopped_background_result_says_so_in_the_next_cell(kernel, capsys):
    ip = kernel
    ip.run_cell("%%inspect -o res --eps none --block-size 20\n" + SLOW_QUERY)
    run = ip.user_ns["res"]
    while run.progress.blocks < 1:  # a block read: the partial frame has rows to show
        run.wait(0.02)
    run.cancel()  # the table's Stop button
    assert run.wait(10)
    capsys.readouterr()
    ip.run_cell("n = res.height")
    err = capsys.readouterr().err
    read = run.progress.records_read
    assert f"res holds a partial result: stopped by the user after {read:,} of 200 records" in err
    ip.run_cell("m = res.height")
    assert "partial result" not in capsys.readouterr().err  # once, where it was handed over


def test_a_finished_cell_result_keeps_its_provenance(session):
    ip, _ = session
    out = ip.run_cell_magic("inspect", "-o res --eps none", PAPER_QUERY)
    rec = dl.provenance(out)
    assert rec is not None and rec["query"].startswith("SELECT M.epoch") and rec["eps"] is None
    assert not rec["partial"] and not rec["stopped_early"]
    assert rec["records_read"] == rec["total_records"] == 80 * len(rec["steps"])


def test_interrupt_while_a_cell_waits_stops_the_run_and_keeps_the_partial_frame(
    kernel, monkeypatch, capsys
):
    ip = kernel
    ip.run_cell("%%inspect -o res --eps none --block-size 4\n" + SLOW_QUERY)
    run = ip.user_ns["res"]
    real_wait, calls = run.wait, []

    def wait(timeout=None):  # the first wait is interrupted, as Ctrl-C / "interrupt kernel"
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(timeout)

    monkeypatch.setattr(run, "wait", wait)
    ip.run_cell("h = res.height")
    assert run.progress.cancelled and run.progress.records_read < 200
    assert isinstance(ip.user_ns["res"], pl.DataFrame) and ip.user_ns["h"] == N_UNITS
    err = capsys.readouterr().err
    assert "res holds a partial result: stopped by the user after" in err
    assert dl.provenance(ip.user_ns["res"])["partial"]


def test_a_rebound_name_is_left_alone(kernel):
    ip = kernel
    ip.run_cell("%%inspect -o res --block-size 50\n" + SLOW_QUERY)
    run = ip.user_ns["res"]
    ip.run_cell("res = 'mine'")
    run.wait(30)
    ip.run_cell("print(res)")
    assert ip.user_ns["res"] == "mine"


def test_foreground_interrupt_keeps_the_partial_frame(session, monkeypatch, capsys):
    ip, _ = session
    ip.run_cell(SLOW_SETUP)
    real = QueryRun.wait
    state = {"n": 0}

    def wait(self, timeout=None):
        state["n"] += 1
        if state["n"] == 3:  # a Ctrl-C during the run, then a second, impatient one
            raise KeyboardInterrupt
        if state["n"] == 4:
            raise KeyboardInterrupt
        return real(self, timeout)

    monkeypatch.setattr(QueryRun, "wait", wait)
    out = ip.run_cell_magic("inspect", "-o res --eps none --block-size 4", SLOW_QUERY)
    assert isinstance(out, pl.DataFrame) and ip.user_ns["res"] is out and out.height == N_UNITS
    err = capsys.readouterr().err
    assert "the cell's frame holds a partial result: stopped by the user after" in err
    assert err.count("partial result") == 1  # one line, not a warning besides
    assert dl.provenance(out)["partial"]


def test_a_run_displays_as_its_live_table(session):
    pytest.importorskip("anywidget")
    from IPython.core.formatters import DisplayFormatter

    from dni_lab.widgets import ScoreTable

    _, cat = session
    run = dl.query(PAPER_QUERY, catalog=cat, namespace={}, background=True)
    run.wait(30)
    shown = []
    import IPython.display

    orig = IPython.display.display
    try:
        IPython.display.display = lambda obj, **kw: shown.append(obj)
        run._ipython_display_()
    finally:
        IPython.display.display = orig
    (table,) = shown
    assert isinstance(table, ScoreTable) and table.run is run
    assert "INSPECT frame S" in table.note and table.frame.columns[:2] == ["mid", "epoch"]
    assert sorted(table.frame["epoch"].unique().to_list()) == [1, 2, 3]
    assert DisplayFormatter  # the formatter machinery is what calls _ipython_display_


def test_the_final_snapshot_is_also_published_from_the_main_thread(kernel, monkeypatch):
    pytest.importorskip("anywidget")
    import threading

    from dni_lab.widgets import ScoreTable

    calls = []
    monkeypatch.setattr(
        ScoreTable, "refresh_snapshot", lambda self: calls.append(threading.current_thread())
    )
    ip = kernel
    ip.run_cell("%%inspect -o res --block-size 100\n" + SLOW_QUERY)
    ip.user_ns["res"].wait(30)
    ip.run_cell("x = 1")  # any later cell: nbclient applies updates sent under it
    deadline = time.perf_counter() + 5
    while len(calls) < 2 and time.perf_counter() < deadline:
        time.sleep(0.02)  # the run's thread reports its end just after wait() returns
    assert threading.main_thread() in calls and len(calls) == 2  # the run's thread, and here
    ip.run_cell("y = 2")
    assert len(calls) == 2  # once is enough


def test_stop_skips_the_final_fit_and_acts_inside_a_block(char_model, records, monkeypatch):
    """After a Stop the frame is the scores as they stand: no final probe fit (which took
    longer than a block for logreg), and a slow hypothesis is left between records."""
    meas = dl.get_measure("corr")
    fits = []
    real = type(meas).result
    # peek() (the cheap current scores) defaults to result(): only count direct calls
    monkeypatch.setattr(type(meas), "peek", lambda self, *a, **k: real(self, *a, **k))
    monkeypatch.setattr(
        type(meas), "result", lambda self, *a, **k: fits.append(1) or real(self, *a, **k)
    )

    @dl.hypothesis(name="slow")
    def slow(r):
        time.sleep(0.005)
        return [c in "()" for c in r]

    run = dl.inspect(models=[char_model], hypotheses=[slow], measures=[meas], data=records * 40,
                     units=[("lstm", [0, 1])], eps=None, block_size=200, background=True,
                     cache=False)  # fmt: skip
    while run.progress.blocks < 1:
        time.sleep(0.01)
    time.sleep(0.2)  # inside the second block (about 1 s of hypotheses)
    t0 = time.perf_counter()
    run.cancel()
    assert run.wait(5) and time.perf_counter() - t0 < 0.5
    with pytest.warns(dl.PartialResultWarning, match="after 200 of 12,000"):
        frame = run.result()
    assert run.progress.cancelled and run.progress.records_read == 200 and not fits
    assert frame["n_records"].to_list() == [200, 200]
    assert dl.provenance(frame)["records_read"] == 200  # the abandoned block is not counted


def test_a_failed_background_run_is_reported_where_its_name_is_used(kernel, capsys):
    ip = kernel
    ip.run_cell(
        "@dl.hypothesis(name='breaks')\n"
        "def breaks(r):\n"
        "    if r.startswith('SELECT'):\n"
        "        raise ValueError('no SELECT here')\n"
        "    return [0.0] * len(r)\n"
    )
    ip.run_cell("%%inspect -o bad\nSELECT S.uid INSPECT lm AND breaks OVER texts")
    ip.run_cell("x = bad")
    err = capsys.readouterr().err
    assert "the %%inspect run behind 'bad' failed: HypothesisError" in err
    assert isinstance(ip.user_ns["bad"], QueryRun) and ip.user_ns["bad"].error is not None
