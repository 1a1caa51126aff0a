"""``dl.activations`` writing each pass's values straight into the cache (activation_writes).

A GPT-2 of 2 blocks, width 32, built from a config with a BPE trained here (nothing
downloaded); records of different lengths in several forward passes per block, so rows,
padding and passes are exercised. Values are checked against Hugging Face's own outputs
(hidden states, logits) of each record run alone.
"""

from __future__ import annotations

import sys

import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import BehaviorError
from dni_lab.backend.extraction import activation_writes as aw

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "insert", "into", "values", "b", "where"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(2 + i % 7)) for i in range(9)]
TOL = 1e-5


def _gpt2(seed: int = 0):
    tok = bpe(RECORDS * 3, vocab_size=280)
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    tok.padding_side = "right"
    return module, tok


@pytest.fixture(scope="module")
def gpt2():
    module, tok = _gpt2()
    return module, tok, dl.Model.from_hf(module, tok, name="gpt2")


def _alone(module, tok, text):
    """Hidden states and logits of one record run alone (no padding)."""
    enc = tok([text], return_tensors="pt")
    with torch.no_grad():
        out = module(**enc, output_hidden_states=True)
    return out.hidden_states, out.logits[0]


NAMES = ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "unembed.hook_out",
         "blocks.1.attn.hook_out", "blocks.1.attn.o.hook_out",
         "blocks.0.attn.hook_pattern"]  # fmt: skip


@pytest.mark.parametrize("forward_batch", [None, 3])
def test_values_are_each_record_run_alone_and_padding_is_zero(gpt2, forward_batch):
    module, tok, model = gpt2
    cache = dl.activations(model, RECORDS, NAMES, block_size=len(RECORDS),
                           forward_batch=forward_batch, device="cpu")  # fmt: skip
    assert cache.n_records == len(RECORDS)
    for i, text in enumerate(RECORDS):
        hidden, logits = _alone(module, tok, text)
        n = int(cache.lengths[i])
        assert n == logits.shape[0]
        # the head (computed into the cache from its input) equals the module's logits
        torch.testing.assert_close(cache["unembed.hook_out"][i, :n], logits, atol=TOL, rtol=0)
        torch.testing.assert_close(cache["blocks.0.hook_resid_post"][i, :n], hidden[1][0],
                                   atol=TOL, rtol=0)  # fmt: skip
        for name in ("blocks.1.hook_resid_post", "unembed.hook_out"):
            assert not cache[name][i, n:].any()  # never written: zeros
    # one object captured at two addresses (dropout is the identity in eval): one tensor
    a, b = cache["blocks.1.attn.hook_out"], cache["blocks.1.attn.o.hook_out"]
    assert a.data_ptr() == b.data_ptr()
    assert not torch.equal(cache["blocks.0.hook_resid_post"], cache["blocks.1.hook_resid_post"])


def test_stream_blocks_equal_one_cache(gpt2):
    _module, _tok, model = gpt2
    whole = dl.activations(model, RECORDS, NAMES, block_size=len(RECORDS), forward_batch=4,
                           device="cpu")  # fmt: skip
    first = 0
    for part in dl.activations(model, RECORDS, NAMES, block_size=4, device="cpu", stream=True):
        for name in NAMES:
            for j in range(part.n_records):
                got = part.record(j, name)
                torch.testing.assert_close(got, whole.record(first + j, name), atol=TOL, rtol=0)
        first += part.n_records
    assert first == len(RECORDS)


def test_selected_units_and_a_head_not_asked(gpt2):
    module, tok, model = gpt2
    cache = dl.activations(model, RECORDS[:4], [("unembed.hook_out", [5, 1, 7]),
                                                "blocks.1.hook_resid_post"], device="cpu")
    for i, text in enumerate(RECORDS[:4]):
        _hidden, logits = _alone(module, tok, text)
        n = int(cache.lengths[i])
        torch.testing.assert_close(cache["unembed.hook_out"][i, :n], logits[:, [5, 1, 7]],
                                   atol=TOL, rtol=0)  # fmt: skip


def _hooks(module):
    """Every hook on the module (transformers installs some of its own: compared, not 0)."""
    return [(n, list(m._forward_hooks.values()), list(m._forward_pre_hooks.values()))
            for n, m in module.named_modules()]  # fmt: skip


def test_the_model_is_left_as_found(gpt2):
    module, _tok, model = gpt2
    before = _hooks(module)
    module.train()
    try:
        dl.activations(model, RECORDS, NAMES, forward_batch=2, device="cpu")
        assert module.training and all(m.training for m in module.modules())
        assert _hooks(module) == before
        assert "forward" not in vars(model)
    finally:
        module.eval()


def test_a_nan_at_a_real_symbol_names_its_record():
    module, tok = _gpt2(seed=1)
    model = dl.Model.from_hf(module, tok, name="nan-gpt2")
    with torch.no_grad():
        module.lm_head.weight[3, 0] = float("nan")  # every token's logit 3 is NaN
    with pytest.raises(BehaviorError, match=r"record \d+ of the data"):
        dl.activations(model, RECORDS, ["unembed.hook_out"], forward_batch=3, device="cpu")
    with torch.no_grad():
        module.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(BehaviorError, match="record 0 of the data"):
        dl.activations(model, RECORDS, ["blocks.0.hook_resid_post"], device="cpu")


def test_zeros_are_zero_and_not_resident_until_written():
    t = aw.zeros(4, 1024, 1024)  # 16 MiB
    assert t.dtype == torch.float32 and t.shape == (4, 1024, 1024) and t.is_contiguous()
    assert not t[::7, ::13, ::17].any()
    small = aw.zeros(3, 5, dtype=torch.bfloat16)
    assert small.dtype == torch.bfloat16 and not small.any()
    if not sys.platform.startswith("linux"):
        return
    page = 4096

    def resident() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page

    before = resident()
    big = aw.zeros(64, 1024, 1024)  # 256 MiB, never written
    big[0, 0, 0] = 1.0
    assert resident() - before < 64 << 20
    assert float(big.sum()) == 1.0


def test_left_padding_reads_each_record_from_its_own_first_token():
    module, tok = _gpt2()
    tok.padding_side = "left"  # symbols start past each record's padding
    model = dl.Model.from_hf(module, tok, name="left-gpt2")
    cache = dl.activations(model, RECORDS, ["blocks.0.hook_resid_post", "unembed.hook_out"],
                           forward_batch=4, device="cpu")  # fmt: skip
    tok.padding_side = "right"
    for i, text in enumerate(RECORDS):
        hidden, logits = _alone(module, tok, text)
        n = int(cache.lengths[i])
        torch.testing.assert_close(cache["unembed.hook_out"][i, :n], logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(cache["blocks.0.hook_resid_post"][i, :n], hidden[1][0],
                                   atol=1e-4, rtol=0)  # fmt: skip
        assert not cache["unembed.hook_out"][i, n:].any()
