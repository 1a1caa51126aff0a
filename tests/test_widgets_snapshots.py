"""Static snapshots that survive a notebook's sanitiser and follow the selection (issue 26, §3.2).

A saved notebook shows each panel's ``text/html`` where its widget model does not exist
(nbconvert, GitHub, another machine). JupyterLab and Notebook 7 sanitise untrusted HTML:
inline ``<svg>`` goes, so charts travel as ``<img>`` data URIs; the text overlay is
coloured spans; and the Lab's snapshot is republished after a selection.
"""

from __future__ import annotations

import base64
import re
import threading

import IPython.display
import numpy as np
import polars as pl

import dni_lab as dl
from dni_lab.widgets import Lab, Plot, TextOverlay
from dni_lab.widgets._static import coloured_records, diverging, svg_img


def scores(n: int = 16) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    return pl.DataFrame({
        "mid": "toy", "uid": np.arange(n), "layer": "lstm", "unit": np.arange(n), "hid": "paren",
        "measure": "corr", "unit_score": rng.uniform(-1, 1, n),
    })


def test_a_chart_is_an_image_of_its_svg():
    html = Plot("sorted", scores()).snapshot_html()
    src = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert src and "<svg" not in html
    assert base64.b64decode(src.group(1)).decode().startswith("<svg")
    assert svg_img('<div class="dni-error">x</div>') == '<div class="dni-error">x</div>'


def test_the_diverging_map_matches_the_panels():
    assert diverging(-1.0) == (33, 102, 172) and diverging(1.0) == (178, 24, 43)
    assert diverging(0.0) == (247, 247, 247) and diverging(float("nan")) == (200, 200, 200)


def test_coloured_records_colour_each_symbol():
    layout = {"records": [{"index": 3, "symbols": list("a<b"), "offset": 0}],
              "units": [{"scale": 2.0, "label": "toy lstm[1]", "scale_of": "this page"}]}
    html = coloured_records(layout, np.array([2.0, 0.0, -2.0], np.float32))
    spans = re.findall(r'background-color:rgb\((\d+),(\d+),(\d+)\)', html)
    assert [tuple(map(int, s)) for s in spans] == [(178, 24, 43), (247, 247, 247), (33, 102, 172)]
    assert "&lt;" in html and "#3" in html and "toy lstm[1]" in html
    plain = coloured_records({**layout, "units": []}, np.zeros(3, np.float32))
    assert "background-color" not in plain and "no unit selected" in plain


def test_the_text_overlay_snapshot_is_its_coloured_page(char_model, records, hyps):
    sel = {"mid": "toy", "layer": "lstm", "unit": 2, "uid": 2, "hid": "paren"}
    ov = TextOverlay(char_model, records[:8], hyps, selection=sel, page_size=4)
    html = ov.snapshot_html()
    assert "<table" not in html and html.count("font-family:monospace") == 4  # one per record
    n_symbols = ov._layout["n_symbols"]
    assert html.count("background-color:rgb(") == n_symbols


def test_the_lab_republishes_its_snapshot_after_a_selection(char_model, records, hyps, monkeypatch):
    frame = dl.inspect(models=[char_model], hypotheses=hyps, data=records[:40],
                       units=[("lstm", "*")], eps=None, cache=False)
    lab = Lab(frame, models=[char_model], records=records[:10], hypotheses=hyps)
    lab.snapshot_delay = 0.0
    updated = threading.Event()
    published = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: published.append(a[0]))

    def update(data, **_k):
        published.append(data)
        updated.set()

    monkeypatch.setattr(IPython.display, "update_display", update)
    lab._ipython_display_()
    assert "0 units" in published[0]["text/html"]  # nothing selected yet
    lab.table.select_row(0)
    assert updated.wait(10), "the snapshot was not republished after the selection"
    html = published[-1]["text/html"]
    assert "1 unit," in html and "background-color:rgb(" in html
    assert "application/vnd.jupyter.widget-view+json" in published[-1]

