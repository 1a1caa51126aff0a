"""The score table worth exploring in (issue 36, target 4), driven as the browser does: the
best unit per hypothesis, all rows scrolled by windows, a histogram per numeric column,
hidden columns, and one number format for the live table and its snapshot."""

from __future__ import annotations

import html
import re

import numpy as np
import polars as pl
import pytest

from dni_lab.widgets import ScoreTable
from dni_lab.widgets._format import cell_text, counted
from dni_lab.widgets._table_explore import MAX_WINDOW, best_per_hypothesis, histograms


def scores(n_units: int = 50, seed: int = 0) -> pl.DataFrame:
    """2 models x 3 hypotheses x 2 measures x n_units units; hypothesis 'flat' of model b
    has no score at all (a constant label)."""
    rng = np.random.default_rng(seed)
    rows = []
    for mid in ("a", "b"):
        for hid in ("paren", "depth", "flat"):
            for measure in ("corr", "logreg"):
                for u in range(n_units):
                    s = float(rng.uniform(-1, 1)) * (40 if measure == "logreg" else 1)
                    if (mid, hid) == ("b", "flat") or u % 7 == 3:
                        s = None
                    rows.append({"mid": mid, "uid": 1000 + u, "layer": "l0" if u % 2 else "l1",
                                 "unit": u, "hid": hid, "measure": measure, "unit_score": s,
                                 "n_records": 3621, "converged": u % 2 == 0})  # fmt: skip
    return pl.DataFrame(rows)


def send_capture(t: ScoreTable) -> list[dict]:
    sent: list[dict] = []
    t.send = lambda content, buffers=None: sent.append(content)  # type: ignore[method-assign]
    return sent


def test_best_unit_per_hypothesis_is_one_click_and_one_row_per_group():
    f = scores()
    t = ScoreTable(f)
    # the toolbar's toggle: a set message
    t._handle_custom_msg({"type": "set", "traits": {"_best": True, "_page_index": 0}}, [])
    v = t.data
    groups = f.select("mid", "hid", "measure").unique()
    assert v.height == groups.height == 12
    assert v.select("mid", "hid", "measure").unique().height == v.height  # one row each
    for row in v.iter_rows(named=True):
        g = f.filter((pl.col("mid") == row["mid"]) & (pl.col("hid") == row["hid"])
                     & (pl.col("measure") == row["measure"]))  # fmt: skip
        best = g["unit_score"].abs().max()
        if best is None:  # a hypothesis without a score keeps one (null) row
            assert row["unit_score"] is None and (row["mid"], row["hid"]) == ("b", "flat")
        else:
            assert abs(row["unit_score"]) == best
    assert t._page["best"] is True and "the best unit per hypothesis" in repr(t)
    assert "the best unit per hypothesis" in t.snapshot_html()
    # the filter keeps rows first, then each group's best among them
    t.filter("layer = 'l0'")
    assert (t.data["layer"] == "l0").all() and t.data.height == 12
    top = f.filter((pl.col("layer") == "l0") & (pl.col("mid") == "a") & (pl.col("hid") == "paren")
                   & (pl.col("measure") == "corr"))["unit_score"].abs().max()  # fmt: skip
    got = t.data.filter((pl.col("mid") == "a") & (pl.col("hid") == "paren")
                        & (pl.col("measure") == "corr"))["unit_score"]  # fmt: skip
    assert abs(got[0]) == top
    # the sort orders the best rows; off again, every row is back
    t.sort_by("unit_score", descending=True)
    assert t.data["unit_score"].drop_nulls().is_sorted(descending=True)
    t.filter("")
    t.show_best(False)
    assert t.data.height == f.height and t._page["best"] is False


def test_best_view_of_a_frame_without_scores_says_why():
    t = ScoreTable(pl.DataFrame({"mid": ["a"], "hid": ["x"]}))
    t.show_best()
    assert "needs a 'unit_score' column" in t._status["error"] and t.data.height == 1
    with pytest.raises(ValueError, match="Turn the view off"):
        best_per_hypothesis(pl.DataFrame({"x": [1]}))


def test_a_histogram_per_numeric_column_over_the_rows_shown():
    f = scores()
    t = ScoreTable(f)
    hist = t._page["hist"]
    assert set(hist) == {"uid", "unit", "unit_score", "n_records"}  # numbers, not bool/text
    h = hist["unit_score"]
    assert len(h["counts"]) == 20 and sum(h["counts"]) == h["n"] == f["unit_score"].count()
    assert h["nulls"] == f["unit_score"].null_count()
    assert h["lo"] == f["unit_score"].min() and h["hi"] == f["unit_score"].max()
    assert hist["n_records"]["counts"] == [f.height]  # one value: one bin
    assert hist["n_records"]["lo_text"] == "3,621"  # the range as the cells write it
    t.filter("measure = 'corr'")  # over the view, not the frame
    h = t._page["hist"]["unit_score"]
    assert h["hi"] <= 1 and sum(h["counts"]) == t.data["unit_score"].count()
    empty = histograms(pl.DataFrame({"x": [None, None]}, schema={"x": pl.Float64}), ["x"])
    assert empty["x"]["counts"] == [] and empty["x"]["nulls"] == 2


def test_all_rows_scroll_by_windows_the_browser_asks_for():
    f = pl.concat([scores(n_units=900)] * 1)  # 10,800 rows
    t = ScoreTable(f, page_size=0, sort=[["uid", "asc"]])
    page = t._page
    assert page["scroll"] and page["n_rows"] == f.height and len(page["rows"]) == 100
    sent = send_capture(t)
    cols = page["columns"]
    t._handle_custom_msg({"type": "rows", "start": 10_700, "count": 100, "seq": page["seq"]}, [])
    (answer,) = sent
    assert answer["type"] == "rows" and answer["start"] == 10_700 and answer["seq"] == page["seq"]
    assert len(answer["rows"]) == len(answer["keys"]) == 100
    view = t.data.slice(10_700, 100)
    assert answer["rows"][0] == [cell_text(view[c][0]) for c in cols]
    assert answer["keys"][0] == f"{view['mid'][0]}|{view['uid'][0]}|{view['hid'][0]}"
    t._handle_custom_msg({"type": "rows", "start": 0, "count": 10_000, "seq": 0}, [])
    assert len(sent[-1]["rows"]) == MAX_WINDOW  # never the whole frame
    # a selection made elsewhere (a plot) scrolls the table to its row
    row = t.data.row(5000, named=True)
    t.selection = {"mid": row["mid"], "uid": row["uid"], "hid": row["hid"]}
    assert sent[-1] == {"type": "reveal", "index": 5000,
                        "key": f"{row['mid']}|{row['uid']}|{row['hid']}"}  # fmt: skip
    # the page-size choice: back to pages
    t._handle_custom_msg({"type": "set", "traits": {"page_size": 100, "_page_index": 0}}, [])
    assert not t._page["scroll"] and len(t._page["rows"]) == 100 and t._page["n_pages"] == 108


def test_hidden_columns_leave_the_rows_and_the_snapshot():
    t = ScoreTable(scores())
    assert t._page["hidden"] is None and t._page["auto_hide"] == ["uid"]
    t._handle_custom_msg({"type": "set", "traits": {"_hidden": ["uid", "n_records"]}}, [])
    assert "uid" not in t._page["columns"] and "n_records" not in t._page["columns"]
    assert "uid" in t._page["all_columns"]  # the menu still offers them
    assert len(t._page["rows"][0]) == len(t._page["columns"])
    assert "uid" not in t._page["hist"]
    assert ">uid<" not in t.snapshot_html() and ">unit<" in t.snapshot_html()
    t.hide_columns([])
    assert "uid" in t._page["columns"]


def _snapshot_cells(markup: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", markup)
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows[1:]]


def test_the_live_table_and_its_snapshot_write_numbers_alike():
    f = scores().with_columns(
        unit_score=pl.when(pl.col("unit") == 1).then(float("nan")).otherwise(pl.col("unit_score"))
    )
    t = ScoreTable(f, page_size=25)
    live = t._page["rows"]
    snap = _snapshot_cells(t.snapshot_html())
    assert snap == live and len(live) == 25
    texts = {v for r in live for v in r}
    assert "3,621" in texts and "3621" not in texts  # thousands separated in both
    assert {"✓", "·", "—"} <= texts  # booleans, and a null or NaN score
    scored = [r[t._page["columns"].index("unit_score")] for r in live]
    assert all(s == "—" or re.fullmatch(r"-?\d+\.\d{3}", s) for s in scored)
    assert counted(1, "unit") == "1 unit" and counted(3621, "row") == "3,621 rows"
    assert cell_text(float("inf")) == "—" and cell_text(True) == "✓" and cell_text(12) == "12"


def test_a_narrow_table_also_hides_id_columns_with_one_value_and_says_it_once():
    one = pl.DataFrame({"mid": ["m"] * 4, "uid": [1, 2, 3, 4], "layer": ["lstm"] * 4,
                        "unit": [0, 1, 2, 3], "hid": ["a", "b", "a", "b"],
                        "measure": ["corr"] * 4, "unit_score": [0.1, 0.2, 0.3, 0.4]})  # fmt: skip
    page = ScoreTable(one)._page
    assert page["constant"] == {"mid": "m", "layer": "lstm", "measure": "corr"}
    assert page["auto_hide"] == ["uid", "mid", "layer", "measure"]
    # two models, a null, or a single row: nothing is constant
    two = one.with_columns(mid=pl.Series(["m", "n", "m", "n"]))
    assert "mid" not in ScoreTable(two)._page["constant"]
    null = one.with_columns(layer=pl.Series(["lstm", None, "lstm", "lstm"]))
    assert "layer" not in ScoreTable(null)._page["constant"]
    assert ScoreTable(one.head(1))._page["constant"] == {}
