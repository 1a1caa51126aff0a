"""Attention as behavior: a head's attention to the token a pair hypothesis names,
scored with the usual measures; checked against eager attention weights run by hand."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import padded_tok, tiny_gpt2  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from dni_lab.backend.hf.attention import has_target  # noqa: E402

#: the tiny GPT-2's longest dot product (its 4 x 32 MLP): float32 tolerances scale with it
GPT2_FFN = 128

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "where", "b"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 9] for j in range(2 + i % 6)) for i in range(30)]


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(RECORDS, vocab_size=280, n_layer=2)


def previous(model):
    def previous_token(record: str) -> list[int | None]:
        n = model.symbols(record)
        return [None, *range(n - 1)]

    return previous_token


def hand_weights(module, tok, record: str, block: int) -> torch.Tensor:
    module.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            out = module(**tok(record, return_tensors="pt"), output_attentions=True)
    finally:
        module.set_attn_implementation("sdpa")
    return out.attentions[block][0]  # (heads, T, T)


@pytest.mark.parametrize("side", ["right", "left"])
def test_attention_to_the_previous_token_equals_eager_weights(gpt2, side):
    module, tok = gpt2
    m = HFModel(module, padded_tok(tok, side), name="g")
    (addr,) = m.attention_to(previous(m), blocks=[1])
    assert addr == "transformer.h.1.attn.to_previous_token"
    assert m.layer_widths(RECORDS[:2], "cpu")[addr] == 4
    recs = RECORDS[:6]
    with m.capture([addr]) as store, torch.inference_mode():
        m.forward(m.encode(recs))
    got = store[addr]
    assert module.config._attn_implementation == "sdpa"  # restored
    for r, rec in enumerate(recs):
        w = hand_weights(module, tok, rec, 1)
        n = m.symbols(rec)
        want = torch.stack([w[:, t, t - 1] if t else torch.zeros(4) for t in range(n)])
        assert_close_f32(got[r, :n], want, reduction=GPT2_FFN)


def test_a_previous_token_head_is_found_by_diffmeans(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    pair = previous(m)
    m.attention_to(pair)
    units = [(a, "*") for a in m.addresses if ".attn.to_" in a]
    f = dl.inspect(m, [has_target(pair)], measures=["diffmeans"], data=RECORDS, units=units,
                   eps=None, cache=False)
    assert f.height == 2 * 4 and set(f["layer"]) == {
        "transformer.h.0.attn.to_previous_token", "transformer.h.1.attn.to_previous_token"}
    # the score is each head's mean attention to the previous token (0 where there is none)
    want = []
    for rec in RECORDS:
        w = hand_weights(module, tok, rec, 0)
        n = m.symbols(rec)
        want += [w[:, t, t - 1].numpy() for t in range(1, n)]
    mean0 = np.mean(want, axis=0)
    got = f.filter(pl.col("layer").str.contains("h.0")).sort("unit")["unit_score"].to_numpy()
    np.testing.assert_allclose(got, mean0, rtol=0, atol=1e-5)


def test_bad_pairs_are_named(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    m.attention_to(lambda r: [None], name="short")
    with pytest.raises(ValueError, match="one target"):
        m.encode(["select a from"])
    m2 = HFModel(module, tok, name="g2")
    m2.attention_to(lambda r: [99] * m2.symbols(r), name="far")
    with pytest.raises(ValueError, match="names token 99"):
        m2.encode(["select a"])
    with pytest.raises(DNIError, match="identifier"):
        m2.attention_to(lambda r: [], name="not ok")
    m3 = HFModel(module, tok, name="g3", pool="mean")  # no one query token
    (addr,) = m3.attention_to(lambda r: [None], name="x", blocks=[0])
    with pytest.raises(LayerError, match="attention weights per token"):
        with m3.capture([addr]), torch.inference_mode():
            m3.forward(m3.encode(["select a"]))
