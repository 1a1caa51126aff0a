"""Plots: chart data, offline SVG, clickable marks, verification results."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from dni_lab.widgets import Plot, charts


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    n, hids = 30, ["a", "b", "c"]
    return pl.DataFrame(
        {
            "mid": np.repeat(["e1", "e5"], n * 3),
            "uid": np.tile(np.repeat(np.arange(n), 3), 2),
            "layer": "lstm",
            "unit": np.tile(np.repeat(np.arange(n), 3), 2),
            "hid": np.tile(hids, n * 2),
            "measure": "corr",
            "unit_score": rng.uniform(-1, 1, n * 6),
        }
    )


def test_sorted_scores_ranks_and_keys(frame):
    _, data, keys = charts.sorted_scores(frame, max_hyps=2, clickable=5)
    assert data["hid"].n_unique() == 2 and data.height == 2 * 60
    for _, g in data.group_by("hid"):
        assert g.sort("rank")["unit_score"].is_sorted(descending=True)
    assert len(keys) == 10 and set(keys[0]) == {"mid", "uid", "hid", "layer", "unit", "measure"}


def test_heatmap_limits_units(frame):
    _, data, keys = charts.heatmap(frame, max_units=7, max_hyps=2)
    assert data.select("mid", "uid").n_unique() == 7 and data["hid"].n_unique() == 2
    assert len(keys) == data.height


def test_epoch_scores_from_mapping_or_column(frame):
    _, data, _ = charts.epoch_scores(frame, epochs={"e1": 1, "e5": 5})
    assert sorted(data["epoch"].unique().to_list()) == [1, 5] and data.height == 6
    best = frame.filter((pl.col("mid") == "e1") & (pl.col("hid") == "a"))["unit_score"].abs().max()
    assert data.filter((pl.col("epoch") == 1) & (pl.col("hid") == "a"))["abs_score"][0] == best
    with_col = frame.with_columns(epoch=pl.when(pl.col("mid") == "e1").then(1).otherwise(5))
    assert charts.epoch_scores(with_col)[1].height == 6


def test_plot_panel_svg_is_offline_and_clickable(frame):
    p = Plot("sorted", frame, clickable=3)
    assert p.error == "" and p._svg.startswith("<svg")
    hrefs = re.findall(r'xlink:href="([^"]*)"', p._svg)
    assert hrefs and all(h.startswith("#dni=") for h in hrefs)  # no outside links at all
    assert "http" not in p._svg.replace("http://www.w3.org", "")
    assert len(p._keys) == 9
    p._handle_custom_msg({"type": "select", "index": 4}, [])
    assert p.selection["hid"] == p._mark_keys[4]["hid"] and p._keys[4].startswith(
        p.selection["mid"]
    )
    p._handle_custom_msg({"type": "select", "index": 999}, [])  # stale click: ignored
    assert repr(p).startswith("<Plot: sorted, 180 rows, selected ")


def test_plot_follows_selection_and_updates(frame):
    p = Plot("epochs", frame, epochs={"e1": 1, "e5": 5})
    before = p._svg
    p.selection = {"mid": "e1", "uid": 3, "hid": "a", "layer": "lstm", "unit": 3}
    assert p._svg != before and 'stroke-dasharray="4,3"' in p._svg
    p.update(pl.DataFrame(schema=frame.schema))
    assert p._svg == "" and p.data.height == 0


def test_verification_plot_from_a_verification_result():
    rng = np.random.default_rng(1)
    v = SimpleNamespace(
        frame=pl.DataFrame(
            {"kind": ["baseline"] * 8 + ["treatment"] * 8, "delta_norm": rng.uniform(0, 1, 16)}
        ),
        summary={
            "sets": pl.DataFrame(
                {"set": ["units", "random0", "random1"], "silhouette": [0.5, 0.01, -0.02]}
            )
        },
    )
    p = Plot("verification", v)
    assert p.error == "" and p.data.height == 16 and "Silhouette vs random" in p._svg


def test_bad_input_is_shown_not_raised():
    p = Plot("heatmap", pl.DataFrame({"x": [1]}))
    assert p.error and "dni-error" in p._svg
    with pytest.raises(ValueError, match="unknown plot kind"):
        Plot("pie", None)


def test_vega_plot_is_offline_and_a_click_selects_a_unit():
    from dni_lab.widgets import Lab, VegaPlot, selection_key

    rng = np.random.default_rng(0)
    f = pl.DataFrame(
        {
            "mid": "m", "uid": np.arange(12), "layer": "lstm", "unit": np.arange(12),
            "hid": np.where(np.arange(12) % 2, "a", "b"), "measure": "corr",
            "unit_score": rng.uniform(-1, 1, 12),
        }
    )  # fmt: skip
    p = VegaPlot("sorted", f)
    assert "esm.sh" not in p._esm and "https://" not in p._esm.split("\n", 1)[0]
    assert p.embed_options["actions"] is False
    layers = p.spec["layer"]
    assert not any("href" in layer.get("encoding", {}) for layer in layers)
    params = p.spec.get("params", []) + [q for layer in layers for q in layer.get("params", [])]
    assert any(q["name"] == "unit" and q["select"]["on"] == "click" for q in params)
    # what Vega reports for a click on the third clickable point
    store = [{"unit": "view_1", "fields": [{"field": "_href", "type": "E"}], "values": ["#dni=2"]}]
    p._vl_selections = {"unit": {"value": None, "store": store}}
    assert p.selection == p._keys[2] and p.selection["uid"] in f["uid"].to_list()
    html = p._repr_mimebundle_()[0]["text/html"]
    # the chart as an image (inline <svg> does not survive a notebook's sanitiser)
    assert 'src="data:image/svg+xml;base64,' in html and "<svg" not in html
    assert "dni-snapshot" in html
    lab = Lab(f, charts="vega")  # the dashboard follows a click on a Vega chart
    lab.plots[0]._vl_selections = {"unit": {"value": None, "store": store}}
    assert selection_key(lab.table.selection) == selection_key(lab.plots[0]._keys[2])
    with pytest.raises(ValueError, match="charts="):
        Lab(f, charts="d3")
