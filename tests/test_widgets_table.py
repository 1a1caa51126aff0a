"""Score table: paging, sorting, filtering, selection, Stop, export; driven as the browser does."""

from __future__ import annotations

import io
import json

import numpy as np
import polars as pl
import pytest

import dni_lab as dl
from dni_lab.widgets import ScoreTable
from dni_lab.widgets.table import progress_line


def big_frame(n: int = 1000, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    score = rng.uniform(-1, 1, n)
    score[::97] = np.nan
    return pl.DataFrame(
        {
            "mid": np.where(np.arange(n) % 2, "a", "b"),
            "uid": np.arange(n),
            "layer": "lstm",
            "unit": np.arange(n),
            "hid": np.where(np.arange(n) % 3, "paren", "depth"),
            "measure": "corr",
            "unit_score": score,
            "reason": np.where(np.isnan(score), "constant", None),
        },
        nan_to_null=True,
    )


def test_only_the_visible_page_travels():
    t = ScoreTable(big_frame(), page_size=20, sort=[["uid", "asc"]])
    assert len(t._page["rows"]) == 20 and t._page["n_pages"] == 50
    assert t._page["columns"][:3] == ["mid", "layer", "unit"]
    assert "reason" not in t._page["columns"]
    t._page_index = 49
    assert t._page["offset"] == 980 and t._page["rows"][0][2] == "980"  # cells as text
    t._page_index = 999  # past the end: the last page
    assert t._page["page"] == 49
    assert repr(t) == "<ScoreTable: 1,000 of 1,000 rows>"


def test_the_browser_sets_filter_and_page_through_messages():
    """js/_common.js: setTraits sends {"type": "set"} (a state sync could be held for good
    while a cell awaits a run); Python sets the named traits together and nothing else."""
    t = ScoreTable(big_frame(), page_size=20, sort=[["uid", "asc"]])
    pages = []
    t.observe(lambda c: pages.append(c["new"]["offset"]), names=["_page"])
    t._handle_custom_msg({"type": "set", "traits": {"_page_index": 3}}, [])
    assert t._page_index == 3 and t._page["offset"] == 60
    t._handle_custom_msg({"type": "set", "traits": {"_filter": "uid >= 500",
                                                     "_page_index": 0}}, [])
    assert t.data.height == 500 and t._page["offset"] == 0
    assert t._page["rows"][0][t._page["columns"].index("uid")] == "500"
    assert pages[-1] == 0  # the last page sent is the filtered first page
    # only the traits the panel names: never its outputs or its selection
    t._handle_custom_msg({"type": "set", "traits": {"_page": {}, "selection": {"mid": "a"},
                                                     "_status": {}}}, [])
    assert t._page["rows"] and t.selection == {} and t._status
    t._handle_custom_msg({"type": "set", "traits": "_page_index"}, [])  # malformed: ignored
    assert t._page_index == 0


def test_sort_desc_asc_with_nulls_last():
    t = ScoreTable(big_frame())
    t._sort = [["unit_score", "desc"]]
    s = t.data["unit_score"]
    assert s.drop_nulls().is_sorted(descending=True) and s[-1] is None
    j = t._page["columns"].index("unit_score")
    page = [float(r[j]) for r in t._page["rows"]]
    assert page == sorted(page, reverse=True)
    t._sort = [["unit_score", "asc"]]
    assert t.data["unit_score"].drop_nulls().is_sorted() and t.data["unit_score"][-1] is None
    t._sort = [["no_such_column", "asc"]]  # ignored, not an error
    assert t.data.height == 1000


def test_filter_sql_text_and_errors():
    t = ScoreTable(big_frame())
    t._filter = "hid = 'depth' and unit_score > 0.5"
    assert t.data.height > 0
    assert (t.data["hid"] == "depth").all() and (t.data["unit_score"] > 0.5).all()
    assert t._status["n_rows"] == t.data.height and t._status["n_total"] == 1000
    t._filter = "DEPTH"  # no operator: a case-insensitive text search
    assert t.data.height == (big_frame()["hid"] == "depth").sum()
    t._filter = "unit_score >>> 1"
    assert "cannot filter" in t._status["error"] and t.data.height == 1000
    t._filter = ""
    assert t._status["error"] == ""


def test_default_sort_is_abs_score_within_each_measure():
    f = big_frame(200).with_columns(
        measure=pl.when(pl.col("uid") % 2 == 0).then(pl.lit("logreg")).otherwise(pl.lit("corr")),
        unit_score=pl.when(pl.col("uid") % 2 == 0).then(pl.col("unit_score") * 50)
        .otherwise(pl.col("unit_score")),
    )  # fmt: skip
    t = ScoreTable(f)
    v = t.data
    assert v["measure"].to_list() == sorted(v["measure"].to_list())  # corr first, then logreg
    for m in ("corr", "logreg"):
        s = v.filter(pl.col("measure") == m)["unit_score"]
        assert s.drop_nulls().abs().is_sorted(descending=True) and s[-1] is None
    corr = v.filter(pl.col("measure") == "corr")["unit_score"].drop_nulls()
    assert corr.min() < -0.9 and abs(corr[0]) > 0.97  # strong negative units rank high
    assert t._page["default_sort"] and t._page["sort"] == [
        ["measure", "asc"],
        ["|unit_score|", "desc"],
    ]
    t._sort = [["unit_score", "desc"]]
    assert not t._page["default_sort"] and t.data["unit_score"][0] > 40  # signed, across measures


def test_filter_errors_point_into_the_text_typed():
    t = ScoreTable(big_frame())
    t._filter = "unit_score > 0.5 and and hid"
    err = t._status["error"]
    assert "(at character 26)" in err and "Column" not in err
    line, caret = err.splitlines()[-2:]
    assert line.strip() == "unit_score > 0.5 and and hid" and caret.index("^") == line.index("hid")
    t._filter = "unit_scor > 0.5"
    err = t._status["error"]
    assert "no column 'unit_scor'" in err and 'Did you mean "unit_score"' in err
    assert "plan" not in err.lower() and err.splitlines()[-1].strip() == "^"
    t._filter = "hid = 'a"
    assert "Unterminated string literal (at character 7)" in t._status["error"]


def test_snapshot_html_is_in_the_bundle_and_escapes():
    f = big_frame(30).with_columns(hid=pl.lit("<b>x</b>"))
    t = ScoreTable(f, page_size=10)
    data, _meta = t._repr_mimebundle_()
    html = data["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "<table" in html and html.count("<tr>") == 11 and "20 more rows" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html and "<script" not in html


def test_converged_share_is_the_rows_own(char_model, records, hyps):
    # read to the end with early stopping on: every row settles (✓), and the header says so
    run = dl.inspect(models=[char_model], hypotheses=hyps, data=records, units=[("lstm", [0, 1])],
                     eps=0.5, background=True, cache=False)  # fmt: skip
    run.wait(30)
    t = ScoreTable(run)
    assert t.frame["converged"].all() and t._status["share_converged"] == 1.0
    assert "100% of pairs converged" in progress_line(t._status)


def test_click_selects_row_even_if_the_page_moved():
    t = ScoreTable(big_frame())
    t._sort = [["uid", "desc"]]
    t._handle_custom_msg({"type": "select", "index": 0, "key": ""}, [])
    assert t.selection == {
        "mid": "a",
        "uid": 999,
        "hid": "depth",
        "layer": "lstm",
        "unit": 999,
        "measure": "corr",
    }
    key = "a|5|paren"  # drawn at row 3 before a re-sort; the key wins
    t._handle_custom_msg({"type": "select", "index": 3, "key": key}, [])
    assert (t.selection["mid"], t.selection["uid"], t.selection["hid"]) == ("a", 5, "paren")
    assert "selected a|5|paren" in repr(t)


def test_export_parquet_and_csv_through_the_panel(tmp_path):
    t = ScoreTable(big_frame())
    t._filter = "hid = 'depth'"
    sent = []
    t.send = lambda content, buffers=None: sent.append((content, buffers))
    t._handle_custom_msg({"type": "export", "format": "parquet"}, [])
    t._handle_custom_msg({"type": "export", "format": "csv"}, [])
    (m1, b1), (m2, b2) = sent
    assert m1["name"] == "scores.parquet" and m2["mime"] == "text/csv"
    assert pl.read_parquet(io.BytesIO(b1[0])).height == t.data.height
    assert pl.read_csv(io.BytesIO(b2[0])).height == t.data.height
    assert t.export(tmp_path / "x.csv").exists()
    with pytest.raises(ValueError, match="cannot export"):
        t._export_bytes("xlsx")


def test_live_run_streams_and_stops(char_model, records, hyps):
    run = dl.inspect(
        models=[char_model],
        hypotheses=hyps,
        data=records * 20,
        units=[("lstm", "*")],
        eps=None,
        block_size=16,
        background=True,
        cache=False,
    )
    t = ScoreTable(run)
    t._min_interval = 0.0
    seen = []
    t.observe(lambda c: seen.append(c["new"].get("records_read")), names=["_status"])
    while not seen or max(x or 0 for x in seen) < 64:
        run.wait(0.05)
    assert t._status["state"] in ("running", "done")
    t._handle_custom_msg({"type": "stop"}, [])
    run.wait(30)
    t._on_block(run)
    assert t._status["state"] == "cancelled" and t._status["stopping"] is False
    assert t.frame.height == 24 and t._status["records_read"] < len(records) * 20
    assert t._status["early_stopping"] is False and t._status["records_per_s"] > 0
    line = progress_line(t._status)
    assert "eps=None: no early stop" in line and "converged" not in line
    assert "reading all records (eps=None)" in progress_line({**t._status, "state": "running"})
    html = t.snapshot_html()
    assert "cancelled" in html and "no early stop" in html and "went on" not in html
    assert len(set(seen)) > 2  # several blocks were shown, not only the end
    assert repr(t) == "<ScoreTable: 24 of 24 rows, cancelled>"


def test_panel_export_carries_the_runs_provenance_and_the_view(char_model, records, hyps, tmp_path):
    run = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", "*")], eps=None,
                     background=True, cache=False)  # fmt: skip
    run.wait(60)
    t = ScoreTable(run)
    where = f"hid = '{t.frame['hid'][0]}'"
    t.filter(where)
    t._refresh()
    meta = dl.read_params(t.export(tmp_path / "shown.parquet"))
    full = dl.provenance(run.result())
    assert meta["data_sha256"] == full["data_sha256"] and meta["measures"] == ["corr"]
    assert meta["view"] == {"rows": t.data.height, "of": t.frame.height,
                            "filter": where, "sort": list(t._sort)}  # fmt: skip
    assert 0 < t.data.height < t.frame.height and not meta.get("partial")
    t.export(tmp_path / "shown.csv")
    side = json.loads((tmp_path / "shown.csv.meta.json").read_text())
    assert side["weights_sha256"] == full["weights_sha256"]


def test_frame_callbacks_and_setter():
    t = ScoreTable()
    got = []
    t.on_frame(lambda f, final: got.append((f.height, final)))
    t.frame = big_frame(10)
    assert got == [(10, True)] and t._page["rows"]


def test_magic_default_view_follows_the_liveview_protocol(char_model, records, hyps):
    magic = pytest.importorskip("dni_lab.magic")
    run = dl.inspect(
        models=[char_model],
        hypotheses=hyps,
        data=records,
        units=[("lstm", [0])],
        eps=None,
        background=True,
        cache=False,
    )
    view = magic.live_display(run)
    assert isinstance(view, ScoreTable)
    run.wait(30)
    view.update()
    view.finish()
    assert view._status["state"] == "done" and view.frame.height == 2


def test_a_selection_made_elsewhere_pages_the_table_to_its_row():
    t = ScoreTable(big_frame(), page_size=20, sort=[["uid", "asc"]])
    t.selection = {"mid": "b", "uid": 500, "hid": "paren"}  # e.g. a plot's point
    assert t._page["page"] == 25 and "b|500|paren" in t._page["keys"]
    t.selection = {"mid": "b", "uid": 510, "hid": "paren"}  # on this page already: stays
    assert t._page["page"] == 25


def test_the_later_cell_snapshot_is_brought_up_to_date(char_model, records, hyps, monkeypatch):
    """A later cell may start after the run ended but before its thread told the table."""
    import IPython.display

    run = dl.inspect(models=[char_model], hypotheses=hyps, data=records * 5,
                     units=[("lstm", "*")], eps=None, block_size=16, background=True,
                     cache=False)  # fmt: skip
    t = ScoreTable(run)
    run._callbacks.clear()  # the run's thread never reaches the table: the race, made certain
    run.wait(30)
    assert t._status["state"] == "running"
    sent = []
    monkeypatch.setattr(IPython.display, "update_display", lambda data, **k: sent.append(data))
    t._display_id = "shown"
    t._publish_final()
    (data,) = sent
    assert "24 of 24 rows, done" in data["text/html"] and "≤" not in data["text/html"]
    assert data["text/plain"] == "<ScoreTable: 24 of 24 rows, done>"
