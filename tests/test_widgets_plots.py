"""Plots: chart data, offline SVG, clickable marks, verification results."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from demo_scores import demo_scores

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


def _datasets(spec: dict) -> list[list[dict]]:
    return list(spec.get("datasets", {}).values())


def test_heatmap_labels_name_the_shared_model_layer_and_family_once():
    chart, data, keys = charts.heatmap(demo_scores())
    spec = chart.to_dict()
    x, y = spec["encoding"]["x"], spec["encoding"]["y"]
    assert y["title"] == "unit (sql-lstm lstm)" and x["title"] == "hypothesis (sql.*)"
    # the axis shows the unit index and the rule; the tooltip keeps the full names
    assert data["unit_axis"].to_list() == data["unit"].cast(pl.String).to_list()
    assert all(not a.startswith("sql.") for a in data["hyp_axis"])
    assert data["label"][0] == f"sql-lstm lstm[{data['unit'][0]}]"  # in the tooltip
    assert y["sort"][0] == data.sort(pl.col("unit_score").abs(), descending=True)["unit_axis"][0]
    assert len(keys) == data.height == 40 * 30
    # two models: the model stays on each label, the shared layer goes to the title
    two = pl.concat([demo_scores(8, 4), demo_scores(8, 4, mid="sql@1")])
    spec2 = charts.heatmap(two)[0].to_dict()
    rows = _datasets(spec2)[0]
    assert spec2["encoding"]["y"]["title"] == "unit (lstm)"
    assert {r["unit_axis"] for r in rows} >= {"sql-lstm[0]", "sql@1[0]"}


def test_short_hypothesis_names_need_a_shared_prefix():
    assert charts._short_hids(["paren", "position"]) == (
        {"paren": "paren", "position": "position"}, "hypothesis"
    )  # fmt: skip
    short, title = charts._short_hids(["sql.range:A", "sql.range:B"])
    assert short == {"sql.range:A": "A", "sql.range:B": "B"} and title == "hypothesis (sql.range:*)"
    assert charts._short_hids(["only.one"])[0] == {"only.one": "only.one"}


def test_charts_send_only_the_columns_they_draw():
    """The spec carries its rows inline (JSON to the browser for Vega): the score frame's
    other columns (group_score, err, n_records, ...) stayed in it and quadrupled it."""
    frame = demo_scores()
    drawn = {"rank", "unit_score", "hid", "label", "_href", "hyp_axis", "unit_axis"}
    for build in (charts.sorted_scores, charts.heatmap):
        spec = build(frame)[0].to_dict()
        for rows in _datasets(spec):
            assert set(rows[0]) <= drawn, (build.__name__, set(rows[0]) - drawn)
        assert len(json.dumps(spec)) < 200_000, build.__name__  # 418 KB before


def test_svg_marks_carry_their_tooltip():
    """The SVG panel's tooltip is each clickable mark's description (its aria-label);
    lines and axes carry none that could be shown instead."""
    p = Plot("heatmap", demo_scores(12, 5))
    marks = re.findall(r'<a xlink:href="#dni=(\d+)"><path aria-label="([^"]*)"', p._svg)
    assert len(marks) == len(p._mark_keys) == 60
    i, tip = int(marks[7][0]), marks[7][1]
    row = p.data.row(i, named=True)
    score = f"{row['unit_score']:.3f}".replace("-", "−")  # d3-format's minus sign
    assert tip == f"{row['label']} · {row['hid']} · score {score}"
    s = Plot("sorted", demo_scores(12, 5))
    assert 'aria-roledescription="line mark"' not in s._svg
    assert len(re.findall(r'aria-roledescription="point"', s._svg)) == len(s._mark_keys)


def test_vega_bundle_is_made_once_and_read_from_the_cache(tmp_path, monkeypatch):
    import altair as alt

    from dni_lab.widgets import vega

    made = []

    def bundle(cls=alt.JupyterChart):
        made.append(1)
        cls._esm, cls._is_offline = "// bundled vega", True

    monkeypatch.setenv("DNI_LAB_JS_CACHE", str(tmp_path / "js"))
    monkeypatch.setattr(alt.JupyterChart, "_esm", alt.JupyterChart._esm)
    monkeypatch.setattr(alt.JupyterChart, "_is_offline", False)
    monkeypatch.setattr(alt.JupyterChart, "enable_offline", bundle)
    vega.offline.cache_clear()
    try:
        vega.offline()
        assert made == [1] and len(list((tmp_path / "js").glob("jupyterchart-*.js"))) == 1
        alt.JupyterChart._esm, alt.JupyterChart._is_offline = "", False  # a new kernel
        vega.offline.cache_clear()
        vega.offline()
        assert made == [1] and alt.JupyterChart._esm == "// bundled vega"
    finally:
        vega.offline.cache_clear()


def test_vega_snapshot_draws_its_svg_once_per_chart(monkeypatch):
    from dni_lab.widgets import VegaPlot, vega

    p = VegaPlot("heatmap", demo_scores(12, 5))
    drawn = []
    monkeypatch.setattr(vega, "to_svg", lambda chart: drawn.append(1) or "<svg></svg>")
    p.snapshot_html(), p.snapshot_html()
    assert drawn == [1]
    p.update()
    p.snapshot_html()
    assert drawn == [1, 1]
