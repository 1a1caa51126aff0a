"""``dl.activations`` keeps the model's dtype, as TransformerLens's cache does (issue 49).

A bfloat16 or float16 model's cache holds its values as the model made them, at half a
float32 cache's memory: the hidden states, the attention patterns and the logits, on the
writing path (a Hugging Face model) and on the Extractor's (any other module). Values
equal a hand forward hook bit for bit; a float32 model's cache stays float32.
"""

from __future__ import annotations

import pytest
import torch
from tolerances import f32_tol
from torch import nn

import dni_lab as dl

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

WORDS = "select from where the a an of to in on at by".split()
RECORDS = [" ".join(WORDS[(i * 7 + j) % 12] for j in range(3 + i % 4)) for i in range(5)]
NAMES = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_pattern", "unembed.hook_out"]
WIDTH = 32


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 3, vocab_size=280)


def _gpt2(tok, dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=WIDTH, n_layer=2, n_head=4,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
        attn_implementation="eager",
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval().to(dtype)


def _alone(module, tok, record: str) -> dict[str, torch.Tensor]:
    """One record run alone with hand hooks: block 0's output, block 1's pattern, logits."""
    ids = torch.tensor([tok(record)["input_ids"]])
    with torch.no_grad():
        out = module(ids, output_hidden_states=True, output_attentions=True)
    return {NAMES[0]: out.hidden_states[1][0], NAMES[1]: out.attentions[1][0],
            NAMES[2]: out.logits[0]}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_cache_keeps_the_models_dtype_and_its_values(tok, dtype):
    module = _gpt2(tok, dtype)
    model = dl.Model.from_hf(module, tok, name=f"gpt2-{dtype}")
    resid = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_post",
             "ln_final.hook_scale"]  # fmt: skip
    cache = dl.activations(model, RECORDS, NAMES + resid, device="cpu", shapes="transformer_lens")
    for name in NAMES + resid:
        assert cache[name].dtype == dtype, name
    for i, rec in enumerate(RECORDS):
        want = _alone(module, tok, rec)
        n = int(cache.lengths[i])
        got = {NAMES[0]: cache[NAMES[0]][i, :n], NAMES[2]: cache[NAMES[2]][i, :n],
               NAMES[1]: cache[NAMES[1]][i, :, :n, :n]}  # fmt: skip
        for name in NAMES:
            w = want[name]
            scale = float(w.float().abs().max())
            if dtype == torch.float32:  # tests/tolerances.py's rule: sums of WIDTH terms
                tol = f32_tol(scale, reduction=WIDTH)
            else:  # each op rounds its output to the half dtype: two of its ulps at most
                tol = 2 * torch.finfo(dtype).eps * scale
            assert float((got[name].float() - w.float()).abs().max()) <= tol, name
    # half the bytes of a float32 cache
    if dtype != torch.float32:
        assert cache[NAMES[0]].element_size() == 2
    # the TransformerLens methods run in the model's dtype too
    stack, _labels = cache.accumulated_resid(apply_ln=True, return_labels=True)
    assert stack.dtype == dtype


def test_the_extractors_path_keeps_the_dtype_of_any_module():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 6), nn.Tanh()).eval()
    net = net.to(torch.bfloat16)
    model = dl.Model(net, encode=lambda rs: torch.tensor(rs), name="emb-bf16")
    records = [[1, 2, 3, 4], [5, 6, 7, 8]]
    cache = dl.activations(model, records, ["1"], device="cpu")
    assert cache["1"].dtype == torch.bfloat16
    with torch.no_grad():
        want = net[1](net[0](torch.tensor(records)))
    assert torch.equal(cache["1"], want)
    # a frame is float32 (numpy has no bfloat16) with the same values
    frame = cache.frame("1")
    assert frame["value"].to_numpy().max() == pytest.approx(float(want.float().max()))
