"""The notebook's smaller rough edges (issue 26, §3.3 and §3.6), driven as the browser does."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import dni_lab as dl
from dni_lab.widgets import ScoreTable
from dni_lab.widgets._paging import OPERATOR_TEXT, apply_filter, header_cycle, next_sort
from dni_lab.widgets.table import DEFAULT_SORT


def frame(n: int = 40) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    return pl.DataFrame({
        "mid": "m", "uid": np.arange(n), "layer": "lstm", "unit": np.arange(n)[::-1],
        "hid": np.where(np.arange(n) % 2, "paren", "depth"), "measure": "corr",
        "unit_score": rng.uniform(-1, 1, n), "group_score": rng.uniform(0, 1, n),
    })


def click(table: ScoreTable, column: str) -> list:
    table._on_message(table, {"type": "sort", "column": column}, [])  # what the header sends
    return table._sort


# -- §3.6: the header click ------------------------------------------------------------
def test_a_plain_column_sorts_a_to_z_first_then_reversed_then_the_default():
    t = ScoreTable(frame(), page_size=5)
    t._page_index = 3
    assert click(t, "unit") == [["unit", "asc"]]
    assert t._page_index == 0 and t.data["unit"].to_list()[:3] == [0, 1, 2]
    assert click(t, "unit") == [["unit", "desc"]]
    assert t.data["unit"].is_sorted(descending=True)
    assert click(t, "unit") == []  # the default order again
    assert t._page["default_sort"] is True
    assert click(t, "hid") == [["hid", "asc"]] and t.data["hid"][0] == "depth"


def test_a_score_column_shows_the_strongest_first():
    t = ScoreTable(frame())
    # the default already ranks by |unit_score|: the first click goes on to signed, then back
    assert click(t, "unit_score") == [["unit_score", "desc"]]
    assert t.data["unit_score"].is_sorted(descending=True)
    assert click(t, "unit_score") == [["unit_score", "asc"]]
    assert click(t, "unit_score") == []
    # a score column the default does not sort starts by |score| descending
    assert click(t, "group_score") == [["|group_score|", "desc"]]
    assert t.data["group_score"].abs().is_sorted(descending=True)
    assert click(t, "group_score") == [["group_score", "desc"]]


def test_the_cycle_is_the_same_from_any_own_sort():
    for col in ("unit", "unit_score", "group_score", "hid"):
        cycle = header_cycle(col)
        seen, own = [], [["other", "asc"]]  # another column's sort: the cycle starts over
        for _ in range(len(cycle) + 1):
            own = next_sort(own, col)
            seen.append(own)
        assert seen == [[k] for k in cycle] + [[]]
    assert next_sort([], "unit_score", DEFAULT_SORT) == [["unit_score", "desc"]]


# -- §3.6: the progress repr ------------------------------------------------------------
def test_progress_repr_shows_no_private_field():
    p = dl.Progress(records_read=10, total_records=100)
    p.mark(2.0)
    assert p._estimate is not None  # the field is there, and used
    assert "_estimate" not in repr(p) and "records_read=10" in repr(p)


# -- §3.3: filter errors name the operator as typed, with a caret --------------------------
@pytest.mark.parametrize("text, op", [("unit_score >> 1", ">>"), ("unit << 2", "<<"),
                                      ("unit_score > 0 and unit_score ^ 2 > 0", "^")])
def test_an_unsupported_operator_is_named_as_typed_with_a_caret(text, op):
    with pytest.raises(ValueError) as err:
        apply_filter(frame(), text)
    msg = str(err.value)
    assert "PG" not in msg and "Bitwise" not in msg and "currently" not in msg
    assert f"the operator {op} is not supported" in msg
    line, caret = msg.splitlines()[-2:]
    assert line.strip() == text
    assert caret.index("^") - 2 == text.index(op)  # under the operator in the text typed


def test_a_token_the_parser_names_by_type_is_shown_as_typed():
    with pytest.raises(ValueError) as err:
        apply_filter(frame(), "unit_score > 0 and unit #  1 = 0")
    msg = str(err.value)
    assert "Sharp" not in msg and "unexpected '#'" in msg
    assert msg.splitlines()[-1].index("^") - 2 == "unit_score > 0 and unit #  1 = 0".index("#")


def test_the_table_shows_the_mapped_message():
    t = ScoreTable(frame())
    t._filter = "unit_score >> 1"
    assert "the operator >> is not supported" in t._status["error"] and t.data.height == 40


def test_every_mapped_operator_is_spelled():
    assert all(v and "PG" not in v for v in OPERATOR_TEXT.values())


# -- §3.6: notebook 01 picks its "best keyword unit" by |r| --------------------------------
def test_notebook_01_picks_the_best_keyword_unit_by_absolute_r():
    import json
    from pathlib import Path

    nb = Path(__file__).resolve().parents[1] / "notebooks" / "01_quickstart.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"]]
    line = next(ln for src in cells for ln in src.splitlines() if ln.startswith("top = live"))
    # the numbers the issue saw: +0.669 was picked over -0.719
    live = pl.DataFrame({"hid": ["keyword"] * 3 + ["digit"], "unit": [80, 110, 121, 5],
                         "unit_score": [0.669, -0.719, -0.682, 0.9]})
    scope = {"pl": pl, "live": live}
    exec(line, scope)
    assert scope["top"]["unit"] == 110
