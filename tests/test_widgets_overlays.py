"""Text and image overlays: activations over symbols, hypothesis tracks, paging, ordering."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.extraction.extract import Extractor, symbol_mask
from dni_lab.widgets import ImageOverlay, TextOverlay, selection_key
from dni_lab.widgets.image_overlay import to_rgb

SEL = {"mid": "toy", "uid": 7, "hid": "paren", "layer": "lstm", "unit": 1}


def test_text_overlay_matches_the_extractor(char_model, records, hyps):
    o = TextOverlay(char_model, records, hyps, selection=SEL, page_size=5)
    assert o.error == ""
    lay = o._layout
    assert [r["index"] for r in lay["records"]] == [0, 1, 2, 3, 4]
    assert lay["n_symbols"] == sum(len(r) for r in records[:5])
    vals = np.frombuffer(o._values, np.float32)
    ext = Extractor(char_model, {"lstm": [1]}, "activation", torch.device("cpu"))
    want = ext(records[:5], symbol_mask(char_model, records[:5], torch.device("cpu")))["lstm"]
    flat = np.concatenate([want[i, : len(r), 0].numpy() for i, r in enumerate(records[:5])])
    np.testing.assert_allclose(vals, flat, atol=1e-6)
    sig = np.frombuffer(o._signals, np.float32)
    assert sig.tolist() == [float(c in "()") for r in records[:5] for c in r]
    assert lay["units"][0]["signal"] == [0.0, 1.0] and lay["units"][0]["scale_of"] == "this page"
    assert o.data.columns == ["record", "position", "symbol", "key", "activation", "signal"]
    assert o.data.height == lay["n_symbols"] and o.data["symbol"][0] == records[0][0]
    assert repr(o) == (
        "<TextOverlay: 300 records, 1 unit, page 1/60, order index, selected toy|7|paren>"
    )


def test_text_overlay_paging_order_and_pins(char_model, records, hyps):
    o = TextOverlay(char_model, records, hyps, page_size=10)
    assert o._layout["units"] == [] and o.data.height == 0
    o.selection = SEL
    o._page_index = 3
    assert o._layout["records"][0]["index"] == 30
    o._order = "top"  # the browser's "top activating" button
    assert o._page_index == 0 and o._layout["units"][0]["scale_of"] == "all records"
    peaks = o.source.peaks(SEL)[:, 1]
    shown = [r["index"] for r in o._layout["records"]]
    assert shown == np.argsort(-peaks, kind="stable")[:10].tolist()
    o._order = "bottom"
    assert o._layout["records"][0]["index"] == int(np.argmin(o.source.peaks(SEL)[:, 0]))
    # several units side by side: pin, then select another
    o.pinned = [*o.pinned, dict(o.selection)]
    o.selection = {**SEL, "uid": 8, "unit": 2, "hid": "position"}
    keys = [u["key"] for u in o._layout["units"]]
    assert keys == ["toy|8|position", "toy|7|paren"]
    assert len(o._values) == 4 * 2 * o._layout["n_symbols"]
    o.pin()
    assert len(o.pinned) == 2
    assert set(o.data["key"].unique()) == {"toy|8|position", "toy|7|paren"}


def test_text_overlay_reports_errors_in_the_panel(char_model, records):
    o = TextOverlay(char_model, records, selection={**SEL, "mid": "nope"})
    assert "no model 'nope'" in o.error and o._layout["error"] == o.error
    o.selection = SEL  # recovers; no hypotheses given: no signal track
    assert o.error == "" and o._layout["units"][0]["signal"] is None


def test_overlay_does_not_touch_the_runs_module(char_model, records, hyps):
    # The overlay works on a private copy: a background run hooks the original module.
    o = TextOverlay(char_model, records, hyps, selection=SEL)
    copy = o.source.model("toy")
    assert copy.module is not char_model.module
    assert o.source.model("toy") is copy  # cached while the weights stay
    with torch.no_grad():
        char_model.module.head.weight.add_(1.0)
    assert o.source.model("toy") is not copy  # renewed after an in-place update


class TinyConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def square(img):
    m = np.zeros(img.shape[-2:], np.float32)
    m[2:5, 2:6] = 1
    return m.reshape(-1)


def test_image_overlay_map_and_mask():
    torch.manual_seed(0)
    model = dl.Model(TinyConv(), name="cnn")
    imgs = [np.random.default_rng(i).normal(size=(1, 8, 10)).astype(np.float32) for i in range(7)]
    hyp = dl.hypothesis(square, name="square")
    sel = {"mid": "cnn", "uid": 0, "layer": "conv", "unit": 2, "hid": "square"}
    o = ImageOverlay(model, imgs, [hyp], selection=sel, page_size=4)
    assert o.error == ""
    lay = o._layout
    assert lay["has_map"] and lay["has_mask"] and len(lay["cells"]) == 4
    assert len(o._images) == 4 * 8 * 10 * 3 and len(o._maps) == 4 * 80 * 4
    mask = np.frombuffer(o._masks, np.uint8).reshape(4, 8, 10)
    assert mask[0, 2:5, 2:6].all() and mask[0].sum() == 12
    with torch.no_grad():
        want = model.module(torch.as_tensor(imgs[0])[None])[0, 2].numpy().reshape(-1)
    np.testing.assert_allclose(np.frombuffer(o._maps, np.float32)[:80], want, atol=1e-5)
    assert o.data.columns == ["record", "y", "x", "activation", "mask"]
    assert o.data.height == 4 * 80 and o.data["mask"].sum() == 4 * 12
    o._handle_custom_msg({"type": "set", "traits": {"_page_index": 1}}, [])  # the pager
    assert [c["index"] for c in o._layout["cells"]] == [4, 5, 6]
    # the "top activating" button and the slider (js/image_overlay.js through setTraits)
    o._handle_custom_msg({"type": "set", "traits": {"_order": "top", "_page_index": 0}}, [])
    o._handle_custom_msg({"type": "set", "traits": {"opacity": 0.5}}, [])
    assert o.opacity == 0.5 and o._page_index == 0
    peaks = [c["peak"] for c in o._layout["cells"]]
    assert peaks == sorted(peaks, reverse=True)
    assert repr(o).startswith("<ImageOverlay: 7 images, page 1/2, order top")


def test_to_rgb_grey_colour_and_one_hot():
    assert to_rgb(np.arange(6.0).reshape(2, 3)).shape == (2, 3, 3)
    assert to_rgb(np.ones((3, 2, 2))).dtype == np.uint8
    onehot = np.zeros((4, 2, 2))
    onehot[2, 0, 0] = 1
    pic = to_rgb(onehot)
    assert (pic[0, 0] != pic[1, 1]).any()
    assert isinstance(pl.DataFrame(), pl.DataFrame)


def test_text_overlay_steps_to_the_next_unit_of_its_layer(char_model, records, hyps):
    o = TextOverlay(char_model, records, hyps, selection=SEL, page_size=5)
    first = dict(o.selection)
    o._handle_custom_msg({"type": "step", "delta": 1}, [])  # the "unit ›" button
    assert o.selection["unit"] == first["unit"] + 1 and o.selection["uid"] == first["uid"] + 1
    assert o.selection["layer"] == first["layer"] and o.selection["hid"] == first["hid"]
    assert o._layout["units"][0]["key"] == selection_key(o.selection)  # redrawn for it
    o.step_unit(-1)
    assert o.selection == first
    o.step_unit(-(first["unit"] + 1))  # before the first unit: stays
    assert o.selection == first
