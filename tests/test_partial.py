"""What was read, said honestly: records read out of the total, early stopping told apart
from a Stop, and a stopped result marked partial (provenance, a one-line note, the rows)."""

from __future__ import annotations

import signal
import threading

import polars as pl
import pytest
from conftest import CharLM, encode_chars, random_records
from query_workloads import (  # noqa: F401  (one_thread: an autouse fixture)
    encode_sql,
    keywords,
    one_thread,
    sql_checkpoint,
    sql_records,
)

import dni_lab as dl
from dni_lab.backend.engine.provenance import PartialResultWarning, ending, partial_note
from dni_lab.backend.query import QueryRun
from dni_lab.widgets.table import ScoreTable, progress_line

UNITS = [("lstm", "*")]
STOPPED = "stopped by the user after"


@pytest.fixture(autouse=True)
def ctrl_c_reaches_python():
    """Python's own SIGINT handler, as in a terminal: a shell starting the suite as a
    background job hands it SIGINT ignored, and dni_lab rightly leaves that alone."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def model():
    import torch

    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture
def data():
    return random_records(300) * 20  # 6,000 records: early stopping ends far before


def ended(run) -> None:
    assert run.wait(60), "the run did not end within a minute"


def test_early_stopping_header_says_what_was_read(model, data, hyps):
    run = dl.inspect(model, hyps, ["corr"], data, units=UNITS, eps=0.1, block_size=64,
                     cache=False, background=True)  # fmt: skip
    ended(run)
    frame = run.result()
    read = frame["n_records"].max()
    assert read < len(data)  # the premise: early stopping ended the run
    p = run.progress
    assert p.records_read == read and p.total_records == len(data) and p.stopped_early
    table = ScoreTable(run)
    st = table._status
    assert st["records_read"] == read and st["partial"] is False
    line = progress_line(st)
    assert line.startswith(f"{read:,} of {len(data):,} records read — every pair settled")
    assert "early stopping" in table.snapshot_html()
    rec = dl.provenance(frame)
    assert rec["stopped_early"] and not rec["partial"] and rec["partial_reason"] is None
    assert rec["records_read"] == read and rec["total_records"] == len(data)
    assert partial_note(rec) is None
    assert "every pair settled" in repr(run)


def test_reading_everything_is_neither_partial_nor_stopped_early(model, hyps):
    gen = (r for r in random_records(100))  # a generator: its length is learnt at its end
    frame = dl.inspect(model, hyps, ["corr"], gen, units=UNITS, eps=None, cache=False)
    rec = dl.provenance(frame)
    assert rec["records_read"] == rec["total_records"] == 100
    assert not rec["partial"] and not rec["stopped_early"]
    assert frame["converged"].all() and (frame["n_records"] == 100).all()


def test_a_cancelled_run_is_partial_and_says_so_once(model, data, hyps):
    seen = threading.Event()
    run = dl.inspect(model, hyps, ["corr"], data, units=UNITS, eps=None, block_size=64,
                     cache=False, background=True)  # fmt: skip
    run.on_block(lambda r: r.progress.blocks >= 2 and seen.set())
    assert seen.wait(60)
    run.cancel()
    ended(run)
    with pytest.warns(PartialResultWarning, match=rf"partial result: {STOPPED} [\d,]+ of 6,000"):
        frame = run.result()
    read = run.progress.records_read
    assert 0 < read < len(data)
    rec = dl.provenance(frame)
    assert rec["partial"] and rec["partial_reason"] == f"{STOPPED} {read:,} of 6,000 records"
    assert not rec["stopped_early"] and rec["records_read"] == read
    # every row: what was read for it, not converged, and why
    assert (frame["n_records"] == read).all() and not frame["converged"].any()
    assert frame["reason"].str.contains(f"{STOPPED} {read:,} records").all()
    with _no_warning():
        assert run.result() is frame  # once per run
    line = progress_line(ScoreTable(run)._status)
    assert line.startswith(f"{read:,} of 6,000 records read — stopped by the user (partial")
    assert "cancelled" in repr(run) and "partial result" in repr(run)


def test_a_stopped_run_keeps_its_converged_pairs_and_marks_the_rest():
    from test_early_stopping import Replay, _encode, _hyp_family, _record

    model = dl.Model(
        Replay(), layouts={"": "n s u"},  # a stand-in: its output is declared
        encode=_encode, symbols=lambda s: len(_record(s)[0]), name="rp")
    first = {}

    def stop_a_block_after_the_first_convergence(run):
        if "at" in first:
            run.cancel()
        elif run.progress.pairs_converged:
            first["at"] = run.progress.records_read

    run = dl.inspect(model, [_hyp_family()], ["corr"], list(range(20_000)), units=[("", "*")],
                     eps=0.01, block_size=64, cache=False, background=True)  # fmt: skip
    run.on_block(stop_a_block_after_the_first_convergence)
    ended(run)
    with pytest.warns(PartialResultWarning):
        frame = run.result()
    read = run.progress.records_read
    done, left = frame.filter(pl.col("converged")), frame.filter(~pl.col("converged"))
    assert done.height and left.height  # the premise: a Stop between two convergences
    # frozen when each settled: those of the first convergence at its count, not at the Stop's
    assert done["n_records"].is_in([first["at"], read]).all() and first["at"] < read
    assert (done["n_records"] == first["at"]).any()
    assert done["reason"].is_null().all()  # converged scores stand
    assert (left["n_records"] == read).all()
    assert left["reason"].str.starts_with(f"not converged: {STOPPED} {read:,} records").all()
    assert dl.provenance(frame)["partial"]


class _no_warning:
    """``pytest.warns`` cannot say "none": record and check that nothing came."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings(record=True)
        self._seen = self._ctx.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        assert not [w for w in self._seen if issubclass(w.category, PartialResultWarning)]


def test_ctrl_c_in_a_foreground_inspect_keeps_the_partial_frame(model, data, hyps):
    def interrupt(insp):
        if insp.progress.blocks == 2:  # as a person pressing Ctrl-C during the third block
            signal.raise_signal(signal.SIGINT)

    with pytest.warns(PartialResultWarning, match=STOPPED):
        frame = dl.inspect(model, hyps, ["corr"], data, units=UNITS, eps=None, block_size=64,
                           cache=False, on_block=interrupt)  # fmt: skip
    rec = dl.provenance(frame)
    assert rec["partial"] and rec["records_read"] == 128  # the block in flight was kept
    assert (frame["n_records"] == 128).all() and not frame["converged"].any()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_second_ctrl_c_interrupts_at_once(model, data, hyps):
    def interrupt(insp):
        if insp.progress.blocks == 1:  # an impatient person: twice, before the run ends
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        dl.inspect(model, hyps, ["corr"], data, units=UNITS, eps=None, block_size=64,
                   cache=False, on_block=interrupt)  # fmt: skip
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ending_fields():
    assert ending(10, None, cancelled=True, stopped_early=True) == {
        "records_read": 10,
        "total_records": None,
        "partial": True,
        "partial_reason": f"{STOPPED} 10 records",
        "stopped_early": False,  # a Stop, not early stopping, ended it
    }


# -- queries ---------------------------------------------------------------------------
QUERY = "SELECT S.uid, S.n_records, S.converged INSPECT lm AND keywords OVER texts"


@pytest.fixture
def ns():
    lm = dl.Model(sql_checkpoint(1.0), encode_sql, name="lm")
    return {"lm": lm, "keywords": dl.hypothesis(keywords), "texts": sql_records(6000, seed=3)}


def test_a_query_result_keeps_its_provenance_and_reads_honestly(ns):
    run = dl.query(QUERY + " ORDER BY S.uid DESC LIMIT 5", catalog=dl.Catalog(), namespace=ns,
                   background=True, eps=0.2, block_size=64)  # fmt: skip
    ended(run)
    res = run.result()
    rec = dl.provenance(res)
    assert rec is not None and "ORDER BY" in rec["query"] and rec["eps"] == 0.2
    assert rec["stopped_early"] and not rec["partial"]
    s = run.frame  # S: the INSPECT frame every row of the result came from
    assert rec["records_read"] == run.progress.records_read == s["n_records"].max() < 6000
    assert run.progress.total_records == 6000
    assert len(rec["steps"]) == 1 and rec["steps"][0]["weights_sha256"]
    line = progress_line(ScoreTable(run)._status)
    assert line.startswith(f"{rec['records_read']:,} of 6,000 records read — ")
    assert "early stopping" in line


def test_a_stopped_query_is_partial(ns):
    seen = threading.Event()
    run = dl.query(QUERY, catalog=dl.Catalog(), namespace=ns, background=True, eps=None,
                   block_size=64)  # fmt: skip
    assert isinstance(run, QueryRun)
    run.on_block(lambda r: r.progress.blocks >= 2 and seen.set())
    assert seen.wait(60)
    run.cancel()
    ended(run)
    with pytest.warns(PartialResultWarning, match=STOPPED):
        res = run.result()
    rec = dl.provenance(res)
    read = run.progress.records_read
    assert rec["partial"] and rec["partial_reason"] == f"{STOPPED} {read:,} of 6,000 records"
    assert isinstance(res, pl.DataFrame) and not res["converged"].any()
    assert (res["n_records"] == read).all()


def test_ctrl_c_in_a_foreground_query_keeps_the_partial_result(ns):
    def interrupt(insp):
        if insp.progress.blocks == 1:
            signal.raise_signal(signal.SIGINT)

    with pytest.warns(PartialResultWarning, match=STOPPED):
        res = dl.query(QUERY, catalog=dl.Catalog(), namespace=ns, eps=None, block_size=64,
                       on_block=interrupt)  # fmt: skip
    rec = dl.provenance(res)
    assert rec["partial"] and rec["records_read"] == 64 and (res["n_records"] == 64).all()
