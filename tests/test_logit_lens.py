"""The logit lens and per-head direct logit attribution as units, against hand computations.

At the last block the lens is the model's own logits; at an earlier block it is the final
norm and the LM head applied by hand to the residual stream; per head, the attributions
plus the out projection's bias add up to the attention output's through the same map.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import corpus, keyword, tiny_bert, tiny_gpt2  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

RECORDS = corpus(6, seed=5)
D = 32  # the tiny GPT-2's width: the unembedding's dot products


@pytest.fixture(scope="module")
def gpt2():
    module, tok = tiny_gpt2(RECORDS, vocab_size=280, n_layer=2)
    return module, tok, dl.Model.from_hf(module, tok, name="g")


def hand(module, tok, record, fn):
    """``fn(hidden_states, logits)`` for ``record`` run alone."""
    with torch.inference_mode():
        out = module(**tok(record, return_tensors="pt"), output_hidden_states=True)
        return fn(out.hidden_states, out.logits[0])


def test_the_lens_at_the_last_block_is_the_models_logits(gpt2):
    module, tok, m = gpt2
    ids = [5, 17, 40]
    last = dl.features.logit_lens(m, "blocks.1.hook_resid_post", ids)
    first = dl.features.logit_lens(m, "blocks.0.hook_resid_post", ids)
    assert last.address == "blocks.1.hook_resid_post:logit_lens" and last.d_sae == 3
    cache = dl.activations(m, RECORDS, [last, first], device="cpu")
    t = module.transformer
    for r, rec in enumerate(RECORDS):
        want = hand(module, tok, rec, lambda hs, logits: logits[:, ids])
        assert_close_f32(cache.record(r, last.address), want, reduction=D)
        want0 = hand(module, tok, rec, lambda hs, logits: module.lm_head(t.ln_f(hs[1][0]))[:, ids])
        assert_close_f32(cache.record(r, first.address), want0, reduction=D)


def test_head_attributions_add_up_to_the_attention_output(gpt2):
    module, _tok, m = gpt2
    ids = [5, 17]
    dla = dl.features.logit_lens(m, "blocks.1.attn.hook_result", ids)
    assert dla.heads == 4 and dla.d_sae == 8 and dla.name == "logit_attribution"
    cache = dl.activations(m, RECORDS, [dla, "blocks.1.hook_attn_out"], device="cpu")
    ln = module.transformer.ln_f
    W = module.lm_head.weight[ids].T

    def linear(v):  # the final norm's linear part, then the unembedding
        return ((v - v.mean(-1, keepdim=True)) * ln.weight) @ W

    with torch.no_grad():
        bias = linear(module.transformer.h[1].attn.c_proj.bias)
        for r in range(len(RECORDS)):
            per_head = cache.record(r, dla.address).reshape(-1, 4, 2)
            want = linear(cache.record(r, "blocks.1.hook_attn_out"))
            got = per_head.sum(1) + bias
            assert_close_f32(got, want, scale=float(want.abs().max()) + 1, reduction=4 * D)


def test_lens_units_are_scored_like_any_unit(gpt2):
    _module, _tok, m = gpt2
    lens = dl.features.logit_lens(m, "blocks.0.hook_resid_post", [5, 17, 40])
    f = dl.inspect(m, [keyword], measures=["corr"], data=RECORDS, units=[lens], eps=None,
                   cache=False)  # fmt: skip
    assert f.height == 3 and set(f["layer"]) == {lens.address}
    assert np.isfinite(f["unit_score"].to_numpy()).all()


def test_models_without_a_head_or_with_many_tokens_are_named(gpt2):
    _module, _tok, m = gpt2
    bmod, btok = tiny_bert(RECORDS)
    with pytest.raises(LayerError, match="no LM head"):
        dl.features.logit_lens(dl.Model.from_hf(bmod, btok, name="b"), "blocks.0.hook_resid_post",
                               [1])  # fmt: skip
    with pytest.raises(DNIError, match="tokens for model"):
        dl.features.logit_lens(m, "blocks.0.hook_resid_post", ["select from where"])
