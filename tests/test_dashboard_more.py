"""The latent dashboard's further parts: nearest latents, logit-weight histogram,
explanation and per-token ablation effects; the model left as found."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import polars as pl
import pytest
import torch
from feature_sets import identity_set, tiny_gpt2

import dni_lab as dl
from dni_lab import features as F
from dni_lab.features import dashboard_parts as parts

transformers = pytest.importorskip("transformers")

HOOK = "blocks.1.hook_resid_post"


@pytest.fixture(scope="module")
def gpt():
    return tiny_gpt2()


def _state(model, fs):
    """Every submodule's mode and hooks, of the model and of the feature set."""
    mods = list(model.module.modules()) + list(fs.modules())
    return [(m.training, len(m._forward_hooks), len(m._forward_pre_hooks)) for m in mods]


def test_nearest_latents_are_the_decoder_cosines():
    fs = F.StandardSAE(16, 32, HOOK, name="rand")
    torch.manual_seed(1)
    with torch.no_grad():
        fs.W_dec.copy_(torch.randn(32, 16))
        fs.W_dec[7] = 0  # a dead latent: cosine 0 with every row
    near = parts.nearest_latents(fs, 3, n=5)
    W = fs.W_dec.detach().double().numpy()
    norms = np.linalg.norm(W, axis=1)
    cos = np.divide(W @ W[3], norms * norms[3], out=np.zeros(32), where=norms > 0)
    cos[3] = -np.inf
    want = np.argsort(-cos)[:5]
    assert near["latent"].to_list() == want.tolist()
    np.testing.assert_allclose(near["cosine"].to_numpy(), cos[want], rtol=1e-12)
    assert 3 not in near["latent"].to_list()
    assert parts.nearest_latents(fs, 7, n=40).height == 31  # every other latent, once
    assert set(parts.nearest_latents(fs, 7, n=40)["cosine"]) == {0.0}


def test_logit_weight_histogram_covers_the_vocabulary(gpt):
    model, _ = gpt
    fs = identity_set(16, HOOK)
    hist = parts.logit_weight_histogram(model, fs, 5, bins=12)
    V = model.module.get_output_embeddings().weight.shape[0]
    assert hist.height == 12 and hist["count"].sum() == V
    w = (
        model.module.get_output_embeddings().weight.detach().double()
        @ fs.W_dec[5].detach().double()
    )
    assert hist["lo"][0] == pytest.approx(float(w.min()))
    assert hist["hi"][-1] == pytest.approx(float(w.max()))
    assert (hist["lo"].shift(-1).drop_nulls() == hist["hi"].head(11)).all()


def test_explanation_string_and_frame(gpt):
    model, corpus = gpt
    fs = identity_set(16, HOOK)
    records = corpus(20, seed=5)
    dash = F.dashboard(model, fs, records, latent=5, explanation="positive part of x_5",
                       explanation_score=0.75, ablation=False)  # fmt: skip
    assert dash._payload["explanation"] == [{"explanation": "positive part of x_5", "score": 0.75}]
    assert "positive part of x_5" in dash.snapshot_html()
    dash.show(6)  # the string explains the first latent only
    assert dash._payload["explanation"] is None
    scored = pl.DataFrame({"latent": [5, 6, 5], "explanation": ["a", "b", "c"],
                           "score": [0.1, 0.9, 0.4], "extra": [1, 2, 3]})  # fmt: skip
    rows = parts.explanation_rows(5, explanations=scored)
    assert rows.to_dicts() == [
        {"explanation": "c", "score": 0.4},
        {"explanation": "a", "score": 0.1},
    ]
    with pytest.raises(dl.DNIError, match=r"lacks columns \['score'\]"):
        F.dashboard(model, fs, records, explanations=scored.drop("score"))
    with pytest.raises(dl.DNIError, match="not both"):
        parts.explanation_rows(5, "x", explanations=scored)
    with pytest.raises(dl.DNIError, match="needs the explanation"):
        parts.explanation_rows(5, explanation_score=0.5)


def _hand_logprobs(model, record, edit=None):
    """log p(token t | tokens < t) by a plain forward of the HF module, ``edit`` applied
    to block 1's output by a hook of this test."""
    ids = model.tokenizer(record, return_tensors="pt")["input_ids"]
    block = model.module.transformer.h[1]

    def hook(_m, _i, out):  # a block returns a tensor or a tuple, by transformers version
        return (edit(out[0]), *out[1:]) if isinstance(out, tuple) else edit(out)

    handle = block.register_forward_hook(hook) if edit else None
    try:
        with torch.no_grad():
            logits = model.module(ids).logits[0].double()
    finally:
        if handle is not None:
            handle.remove()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    return lp.numpy(), ids.shape[1]


def test_ablation_effects_equal_a_hand_computation(gpt):
    model, corpus = gpt
    fs = identity_set(16, HOOK)  # latent 5 = relu(x_5): ablated, x_5 keeps its negative part
    records = corpus(30, seed=6)
    before = _state(model, fs)
    dash = F.dashboard(model, fs, records, latent=5, n_bins=2, per_bin=2)
    assert _state(model, fs) == before
    abl = dash.summary.ablation
    shown = dash.summary.examples["record"].unique().to_list()
    assert sorted(abl["record"].unique().to_list()) == sorted(shown)
    rec = abl["record"][0]
    one = abl.filter(pl.col("record") == rec).sort("position")

    def remove_latent_5(x):
        x = x.clone()
        x[..., 5] = x[..., 5].clamp(max=0)
        return x

    clean, n = _hand_logprobs(model, records[rec])
    ablated, _ = _hand_logprobs(model, records[rec], remove_latent_5)
    assert one.height == n == model.symbols(records[rec])
    assert one["logprob"][0] is None and one["loss_change"][0] is None  # nothing predicts it
    np.testing.assert_allclose(one["logprob"].to_numpy()[1:], clean, rtol=0, atol=1e-5)
    np.testing.assert_allclose(one["ablated_logprob"].to_numpy()[1:], ablated, rtol=0, atol=1e-5)
    np.testing.assert_allclose(one["loss_change"].to_numpy()[1:], clean - ablated, atol=1e-5)
    assert np.abs(clean - ablated).max() > 1e-4  # the latent fires there: ablating it tells
    p = dash._payload["ablation"]
    assert {e["record"] for e in p} == set(shown)
    assert all(len(e["symbols"]) == len(e["change"]) for e in p)


def test_model_left_as_found_also_after_an_error(gpt, monkeypatch):
    model, corpus = gpt
    fs = identity_set(16, HOOK)
    records = corpus(20, seed=7)
    model.module.train()
    model.module.transformer.h[0].eval()  # a mix: each submodule's own flag comes back
    fs.train()
    try:
        before = _state(model, fs)
        dash = F.dashboard(model, fs, records, latent=5)
        assert _state(model, fs) == before
        calls = []
        real = parts._next_logprobs

        def fail_inside_the_edit(*a):
            calls.append(1)
            if len(calls) == 2:  # the ablated pass: the edit's hook is in place
                raise RuntimeError("boom")
            return real(*a)

        monkeypatch.setattr(parts, "_next_logprobs", fail_inside_the_edit)
        with pytest.raises(RuntimeError, match="boom"):
            dash.show(6)
        assert len(calls) == 2 and _state(model, fs) == before
    finally:
        model.module.eval()
        fs.eval()


def test_panel_payload_snapshot_and_module(gpt):
    model, corpus = gpt
    fs = identity_set(16, HOOK)
    records = corpus(20, seed=8)
    scored = pl.DataFrame({"latent": [5], "explanation": ["x_5 up"], "score": [0.5]})
    dash = F.dashboard(model, fs, records, latent=5, explanations=scored, n_nearest=4)
    p = dash._payload
    assert isinstance(dash, dl.widgets.FeatureDashboard) and p["latent"] == 5
    assert len(p["nearest"]) == 4 and p["explanation"][0]["explanation"] == "x_5 up"
    assert sum(b["count"] for b in p["logit_weights"]) == len(model.tokenizer)
    dash._on_message(dash, {"type": "latent", "latent": p["nearest"][0]["latent"]}, [])
    assert dash.summary.latent == p["nearest"][0]["latent"]  # a click on a nearest latent
    html = dash.snapshot_html()
    for title in ("nearest latents", "logit weights", "ablation effects", "correlated neurons"):
        assert title in html
    esm = dash._esm
    assert esm.count("export default") == 1
    assert not re.search(r"^\s*import\b|import\(|https?://(?!www\.w3\.org)", esm, re.M)  # offline
    node = shutil.which("node")
    if node:  # the composed module parses
        out = subprocess.run([node, "--check", "--input-type=module"], input=esm, text=True,
                             capture_output=True)  # fmt: skip
        assert out.returncode == 0, out.stderr


def test_char_model_ablation_and_a_model_without_next_symbol_logits():
    from conftest import VOCAB, CharLM, encode_chars, random_records

    torch.manual_seed(0)
    toy = CharLM()
    records = random_records(30)
    fs = identity_set(12, "lstm")  # latent 3 = relu(lstm output 3)
    off = dl.Model(toy, encode=encode_chars, name="toy")  # ids 1.., its head scores 0..
    assert F.dashboard(off, fs, records, latent=3).summary.ablation is None
    toy.head = torch.nn.Linear(12, len(VOCAB) + 1)  # now it scores the ids it reads
    model = dl.Model(toy, encode=encode_chars, name="toy")
    abl = F.dashboard(model, fs, records, latent=3).summary.ablation
    rec = abl["record"][0]
    one = abl.filter(pl.col("record") == rec).sort("position")

    def hand(edit):
        handle = toy.lstm.register_forward_hook(
            lambda _m, _i, out: (edit(out[0]), *out[1:]) if edit else None
        )
        try:
            with torch.no_grad():
                ids = encode_chars([records[rec]])
                out = toy(ids)[0].double()
        finally:
            handle.remove()
        return torch.log_softmax(out[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0].numpy()

    def remove_latent_3(x):
        x = x.clone()
        x[..., 3] = x[..., 3].clamp(max=0)
        return x

    assert one.height == len(records[rec])
    np.testing.assert_allclose(one["logprob"].to_numpy()[1:], hand(None), atol=1e-5)
    np.testing.assert_allclose(
        one["ablated_logprob"].to_numpy()[1:], hand(remove_latent_3), atol=1e-5
    )
