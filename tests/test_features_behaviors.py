"""Latents through the behaviors service: dl.examples' top records and the text overlay of a
latent equal those of a layer that outputs the latents (test_features_units' reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars
from test_features_units import WithLatents, topk_set

import dni_lab as dl
from dni_lab.backend.examples import NeuronIndex
from dni_lab.widgets import Lab, TextOverlay


@pytest.fixture
def pair():
    """The model with a feature set on its LSTM, and the reference whose layer outputs it."""
    torch.manual_seed(0)
    lm = CharLM()
    fs = topk_set()
    ref = dl.Model(WithLatents(lm, fs), encode_chars, name="m", layouts={"latents": "n s u"})
    return dl.Model(lm, encode_chars, name="m"), ref, fs


def test_examples_of_a_latent_are_those_of_a_layer_that_outputs_it(pair, records):
    model, ref, fs = pair
    recs = records[:200]
    alive = [j for j in range(fs.d_sae)
             if dl.examples.Activations(ref, recs, "latents", [j], device="cpu")(
                 np.arange(20)).max() > 0][:3]  # fmt: skip
    assert len(alive) == 3
    for agg in ("sum", "max"):
        got = dl.examples.topk(model, recs, fs, alive, 8, agg, device="cpu")
        want = dl.examples.topk(ref, recs, "latents", alive, 8, agg, device="cpu")
        assert got.frame["record"].to_list() == want.frame["record"].to_list()
        np.testing.assert_allclose(got.frame["score"], want.frame["score"], atol=1e-6)
    got = dl.examples.knn(model, recs, fs, alive, 4, 6, device="cpu")
    want = dl.examples.knn(ref, recs, "latents", alive, 4, 6, device="cpu")
    assert got.frame["record"].to_list() == want.frame["record"].to_list()
    # an index of the latents answers as the scan does, reading fewer records
    index = NeuronIndex(fs, device="cpu").fit(model, recs)
    fast = dl.examples.topk(model, recs, fs, alive, 8, "sum", index, device="cpu")
    scan = dl.examples.topk(model, recs, fs, alive, 8, "sum", device="cpu")
    assert fast.frame["record"].to_list() == scan.frame["record"].to_list()
    with pytest.raises(dl.DNIError, match=r"not distinct indices of layer 'lstm:sae' \(0..31\)"):
        dl.examples.topk(model, recs, fs, [40], 3, device="cpu")


def sel(layer: str, unit: int) -> dict:
    return {"mid": "m", "uid": 100 + unit, "hid": "paren", "layer": layer, "unit": unit}


def test_the_text_overlay_colours_symbols_by_a_latent(pair, records, hyps):
    model, ref, fs = pair
    recs = records[:60]
    peaks = dl.examples.Activations(ref, recs, "latents", None, device="cpu")(np.arange(6))
    j = int(np.argmax(peaks.max(0)))  # the latent that fires most on the first page
    o = TextOverlay(model, recs, hyps, selection=sel("lstm:sae", j), page_size=6, features=fs)
    want = TextOverlay(ref, recs, hyps, selection=sel("latents", j), page_size=6)
    assert o.error == "" and want.error == ""
    vals = np.frombuffer(o._values, np.float32)
    np.testing.assert_allclose(vals, np.frombuffer(want._values, np.float32), atol=1e-6)
    assert np.count_nonzero(vals) > 0  # a latent that fires on this page: not all zeros
    assert o._signals == want._signals  # the hypothesis track under the text
    o._order = want._order = "top"
    assert [r["index"] for r in o._layout["records"]] == [
        r["index"] for r in want._layout["records"]
    ]
    o.selection = sel("lstm:sae", 2)
    assert o.step_unit(1)["unit"] == 3 and o.step_unit(1)["uid"] == 104
    o.selection = sel("lstm:sae", 31)
    assert o.step_unit(1)["unit"] == 31  # the set's last latent: d_sae bounds the step
    # without the set the overlay cannot read the latent, and says so in the panel
    bare = TextOverlay(model, recs, hyps, selection=sel("lstm:sae", 2))
    assert "lstm:sae" in bare.error
    with pytest.raises(dl.DNIError, match="features= takes feature sets"):
        TextOverlay(model, recs, hyps, features=["lstm:sae"])


def test_the_lab_overlay_reads_the_runs_feature_sets(pair, records, hyps):
    model, _, fs = pair
    run = dl.inspect(model, hyps, ["corr"], records[:40], units=[fs], background=True, eps=None)
    run.result()
    lab = Lab(run)
    assert lab.overlay is not None and lab.overlay.source.features == {"lstm:sae": fs}
    lab.overlay.selection = sel("lstm:sae", 0)
    assert lab.overlay.error == "" and lab.overlay.data.height > 0
