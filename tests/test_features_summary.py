"""dl.features.summarize: one latent's dashboard data as frames."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from feature_sets import identity_set, tiny_gpt2

import dni_lab as dl
from dni_lab import features as F

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt():
    return tiny_gpt2()


def test_summary_of_a_latent(gpt):
    model, corpus = gpt
    fs = identity_set(16, "blocks.1.hook_resid_post")  # latent 5 = relu(x_5)
    records = corpus(60, seed=3)

    @dl.hypothesis(kind="binary", level="word")
    def is_from(r):
        return [w == "from" for w in r.split(" ")]

    frame = dl.inspect(model, [is_from], ["corr"], records, units=[fs], eps=None)
    s = F.summarize(model, fs, 5, records, hypothesis=is_from, frame=frame, n_bins=3, per_bin=2)
    assert s.feature_set == "blocks.1.hook_resid_post:identity" and 0 < s.firing_rate < 1
    assert s.neurons["unit"][0] == 5 and s.neurons["r"][0] > 0.5  # relu(x_5) follows x_5
    ex = s.examples
    assert set(ex["bin"]) == {0, 1, 2} and ex.group_by("bin").agg(pl.col("record").n_unique())[
        "record"
    ].to_list() == [2, 2, 2]
    peaks = ex.group_by("bin").agg(pl.col("activation").max()).sort("bin")["activation"]
    assert peaks.is_sorted()  # higher bins hold higher peaks
    one = ex.filter(pl.col("record") == ex["record"][0])
    assert "".join(one["symbol"]).replace(" ", "") == records[one["record"][0]].replace(" ", "")
    assert set(ex["hypothesis"].unique()) <= {0.0, 1.0}
    n_sym = sum(model.symbols(r) for r in records)
    assert s.density["count"].sum() == round(s.firing_rate * n_sym)  # every nonzero value
    assert s.hypotheses.height == 1 and s.hypotheses["unit"][0] == 5
    # logit effects: W_U · W_dec[5], the top token first
    W_U = model.module.get_output_embeddings().weight.detach().double()
    eff = (W_U @ fs.W_dec[5].detach().double()).numpy()
    top = s.logits.filter(pl.col("side") == "top")
    assert top["effect"][0] == pytest.approx(eff.max()) and top["token"][
        0
    ] == model.tokenizer.decode([int(np.argmax(eff))])
    bottom = s.logits.filter(pl.col("side") == "bottom")
    assert bottom["effect"][0] == pytest.approx(eff.min())
    with pytest.raises(dl.DNIError, match="latents 0..31"):
        F.summarize(model, fs, 32, records)


def test_dashboard_panel_follows_the_selection(gpt):
    from dni_lab.widgets import FeatureDashboard, ScoreTable, link_selection

    model, corpus = gpt
    fs = identity_set(16, "blocks.1.hook_resid_post")
    records = corpus(40, seed=4)

    @dl.hypothesis(kind="binary", level="word")
    def is_from(r):
        return [w == "from" for w in r.split(" ")]

    frame = dl.inspect(model, [is_from], ["corr"], records, units=[fs], eps=None)
    dash = F.dashboard(model, fs, records, hypothesis=is_from, frame=frame)
    assert isinstance(dash, FeatureDashboard)
    best = frame.sort(pl.col("unit_score").abs(), descending=True, nulls_last=True)["unit"][0]
    assert dash.summary.latent == best and dash._payload["latent"] == best
    p = dash._payload
    assert p["bins"] and p["bins"][0]["bin"] >= p["bins"][-1]["bin"]  # the highest bin first
    ex = p["bins"][0]["examples"][0]
    assert len(ex["symbols"]) == len(ex["acts"]) == len(ex["hyp"])
    assert p["logits"]["top"] and p["neurons"][0]["unit"] == best % 16
    table = ScoreTable(frame)
    link_selection(table, dash)
    other = frame.filter(pl.col("unit") != best).row(0, named=True)
    table.selection = other
    assert dash.summary.latent == other["unit"]  # it followed the table
    dash.selection = {"mid": "elsewhere", "layer": "x", "unit": 3}
    assert dash.summary.latent == other["unit"]  # another layer: ignored
    html = dash.snapshot_html()
    assert "LatentDashboard" in html and "correlated neurons" in html and "logit effects" in html
    assert repr(dash).startswith("<LatentDashboard: blocks.1.hook_resid_post:identity latent")
