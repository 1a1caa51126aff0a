"""The lab dashboard: panels composed, one selection followed everywhere."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch
from torch import nn

import dni_lab as dl
from dni_lab.widgets import ImageOverlay, Lab, TextOverlay, link_selection, selection_key


def test_lab_from_a_run_links_every_panel(char_model, records, hyps):
    run = dl.inspect(
        models=[char_model],
        hypotheses=hyps,
        data=records,
        units=[("lstm", "*")],
        eps=None,
        block_size=64,
        background=True,
        cache=False,
    )
    lab = Lab(run, plot_interval=3600.0)  # plots drawn once, at the end
    run.wait(30)
    lab.table._on_block(run)
    assert isinstance(lab.overlay, TextOverlay) and [p.kind for p in lab.plots] == [
        "sorted",
        "heatmap",
    ]
    assert lab.data.height == 24 and all(p.data.height for p in lab.plots)
    # a click in the table: overlay and plots follow
    lab.table._handle_custom_msg({"type": "select", "index": 2, "key": ""}, [])
    key = selection_key(lab.table.selection)
    assert key and selection_key(lab.selection) == key
    assert all(selection_key(p.selection) == key for p in [lab.overlay, *lab.plots])
    assert lab.overlay._layout["units"][0]["key"] == key
    # a click on a plot's point: the table follows
    lab.plots[1]._handle_custom_msg({"type": "select", "index": 5}, [])
    assert selection_key(lab.table.selection) == lab.plots[1]._keys[5]
    lab.select(("toy", 6, "paren"))  # from Python: layer and unit looked up
    assert lab.overlay.selection["layer"] == "lstm" and lab.overlay.selection["unit"] == 0
    assert repr(lab) == "<Lab: 24 rows, TextOverlay, plots sorted,heatmap, selected toy|6|paren>"
    assert lab._repr_mimebundle_()["text/plain"] == repr(lab)


def test_lab_from_a_frame_with_epochs_and_builder(char_model, records, hyps):
    frame = dl.inspect(
        models=[char_model],
        hypotheses=hyps,
        data=records[:50],
        units=[("lstm", [0, 1])],
        eps=None,
        cache=False,
    )
    lab = Lab(
        frame, models=char_model, records=records, hypotheses=hyps, epochs={"toy": 3}, builder=True
    )
    assert [p.kind for p in lab.plots] == ["sorted", "heatmap", "epochs"]
    assert lab.builder is not None and lab.builder.table is lab.table
    assert lab.plots[2].data["epoch"].to_list() == [3, 3]


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def test_lab_picks_the_image_overlay_for_images():
    torch.manual_seed(0)
    model = dl.Model(Conv(), name="cnn")
    imgs = [np.random.default_rng(i).normal(size=(1, 6, 6)).astype(np.float32) for i in range(5)]
    hyp = dl.hypothesis(lambda im: (np.asarray(im)[0] > 0).reshape(-1), name="bright")
    frame = dl.inspect(models=[model], hypotheses=[hyp], data=imgs, eps=None, cache=False)
    lab = Lab(frame, models=model, records=imgs, hypotheses=[hyp])
    assert isinstance(lab.overlay, ImageOverlay)
    lab.table.select_row(0)
    assert lab.overlay._layout["has_mask"] and lab.overlay.data.height == 5 * 36


def test_link_selection_chain():
    from dni_lab.widgets import ScoreTable

    a, b, c = ScoreTable(pl.DataFrame()), ScoreTable(pl.DataFrame()), ScoreTable(pl.DataFrame())
    link_selection(a, b, c)
    c.selection = {"mid": "m", "uid": 1, "hid": "h"}
    assert a.selection == {"mid": "m", "uid": 1, "hid": "h"}


def test_every_panel_has_a_static_snapshot_and_the_lab_refreshes_its_own(
    char_model, records, hyps, monkeypatch
):
    run = dl.inspect(
        models=[char_model], hypotheses=hyps, data=records, units=[("lstm", "*")],
        eps=None, block_size=64, background=True, cache=False,
    )  # fmt: skip
    lab = Lab(run, plot_interval=3600.0)
    published = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: published.append(("d", a, k)))
    monkeypatch.setattr(
        IPython.display, "update_display", lambda *a, **k: published.append(("u", a, k))
    )
    lab._ipython_display_()
    run.wait(30)
    lab.table._on_block(run)  # the end of the run, as the worker thread reports it
    (kind, _, kw), (kind2, (last,), kw2) = published[0], published[-1]
    assert kind == "d" and kind2 == "u" and kw["display_id"] == kw2["display_id"]
    assert "application/vnd.jupyter.widget-view+json" in last
    html = last["text/html"]
    assert html.count('class="dni-snapshot"') == 2 + len(lab.plots)  # table, overlay, plots
    assert "done" in html and html.count("data:image/svg+xml;base64,") == len(lab.plots)
    assert "<svg" not in html  # stripped by sanitisers: charts travel as images
    lab.table._handle_custom_msg({"type": "select", "index": 0, "key": ""}, [])
    data, _ = lab.overlay._repr_mimebundle_()
    # the overlay's snapshot is its text, coloured by the selected unit (not a long table)
    assert "TextOverlay" in data["text/html"] and "<table" not in data["text/html"]
    assert "background-color:rgb(" in data["text/html"]
