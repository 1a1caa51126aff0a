"""Score table: paging, sorting, filtering, selection, Stop, export; driven as the browser does."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pytest

import dni_lab as dl
from dni_lab.widgets import ScoreTable


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
    t = ScoreTable(big_frame(), page_size=20)
    assert len(t._page["rows"]) == 20 and t._page["n_pages"] == 50
    assert t._page["columns"][:3] == ["mid", "layer", "unit"]
    assert "reason" not in t._page["columns"]
    t._page_index = 49
    assert t._page["offset"] == 980 and t._page["rows"][0][2] == 980
    t._page_index = 999  # past the end: the last page
    assert t._page["page"] == 49
    assert repr(t) == "<ScoreTable: 1000 of 1000 rows>"


def test_sort_desc_asc_with_nulls_last():
    t = ScoreTable(big_frame())
    t._sort = [["unit_score", "desc"]]
    s = t.data["unit_score"]
    assert s.drop_nulls().is_sorted(descending=True) and s[-1] is None
    j = t._page["columns"].index("unit_score")
    page = [r[j] for r in t._page["rows"]]
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
    assert len(set(seen)) > 2  # several blocks were shown, not only the end
    assert repr(t) == "<ScoreTable: 24 of 24 rows, cancelled>"


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
