"""``dl.activations`` reads attention patterns and stops after a block (issue 49, item 3).

A GPT-2 of 3 blocks, 4 heads, width 32, built from a config with a byte-level BPE trained
here (nothing downloaded). TransformerLens is not installed in this environment, so
``blocks.N.attn.hook_pattern`` is checked against Hugging Face's own
``output_attentions=True`` on each record alone, and ``hook_attn_scores`` against a hand
computation from the block's own ``ln_1`` and ``c_attn``: ``q k^T / sqrt(d_head)`` with
``-inf`` above the diagonal, as TransformerLens's ``hook_attn_scores`` holds it.
``stop_at_layer=k`` is checked with forward hooks that count the calls of later blocks
and of the LM head, against a full run's values, and the model is left as it was found.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import padded_tok  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "insert", "into", "values", "b", "where"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(2 + i % 7)) for i in range(10)]
PATTERN = "blocks.1.attn.hook_pattern"
SCORES = "blocks.1.attn.hook_attn_scores"
TOL = 1e-6


@pytest.fixture(scope="module")
def gpt2():
    tok = bpe(RECORDS * 3, vocab_size=280)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=3, n_head=4,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # weights far from init: attention far from uniform
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    return module, tok


def alone(module, ids: list[int]):
    """One record run alone with eager attention: its attentions and hidden states."""
    before = module.config._attn_implementation
    module.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return module(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        module.set_attn_implementation(before)


def hand_scores(module, hidden: torch.Tensor, block: int) -> torch.Tensor:
    """``(heads, T, T)``: the block's own q, k from ``ln_1`` and ``c_attn``, scaled and masked."""
    layer = module.transformer.h[block]
    H, D = module.config.n_head, module.config.n_embd // module.config.n_head
    with torch.no_grad():
        q, k, _v = layer.attn.c_attn(layer.ln_1(hidden[0])).split(module.config.n_embd, dim=-1)
        q, k = (t.unflatten(-1, (H, D)).transpose(0, 1) for t in (q, k))  # (H, T, D)
        s = q @ k.transpose(-1, -2) / D**0.5
    T = s.shape[-1]
    above = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return s.masked_fill(above, float("-inf"))


def ids_of(tok, text: str) -> list[int]:
    return tok(text)["input_ids"]


def state(module, model) -> dict:
    """What dl.activations must leave as it found: hooks, modes, attention, grads."""
    hooks = {
        n: (len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in module.named_modules()
    }
    return {
        "hooks": hooks,
        "training": {n: m.training for n, m in module.named_modules()},
        "attn": module.config._attn_implementation,
        "forward": "forward" in vars(model),
        "stop_early": model.stop_early,
        "modes": torch._C._len_torch_function_stack(),
        "grad": torch.is_grad_enabled(),
    }


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("forward_batch", [None, 3])
def test_pattern_equals_output_attentions_on_each_record_alone(gpt2, side, forward_batch):
    module, tok = gpt2
    m = HFModel(module, padded_tok(tok, side), name="g")
    names = [f"blocks.{b}.attn.hook_pattern" for b in range(3)]
    cache = dl.activations(m, RECORDS, names, forward_batch=forward_batch, block_size=4)
    T = max(len(ids_of(tok, r)) for r in RECORDS)
    for b, name in enumerate(names):
        assert cache[name].shape == (len(RECORDS), 4, T, T)  # TransformerLens's axes
        for i, r in enumerate(RECORDS):
            ref = alone(module, ids_of(tok, r)).attentions[b][0]
            got = cache.record(i, name)
            assert got.shape == ref.shape
            torch.testing.assert_close(got, ref, atol=TOL, rtol=0)
            assert not cache[name][i, :, len(ref[0]) :].any()  # 0 past the record's tokens
    lengths = [len(ids_of(tok, r)) for r in RECORDS]
    assert cache.pattern_lengths.tolist() == lengths
    assert cache.addresses[names[0]] == "transformer.h.0.attn.hook_pattern"
    assert module.config._attn_implementation == "sdpa"  # eager only while reading


def test_scores_equal_q_k_from_the_blocks_own_projections(gpt2):
    module, tok = gpt2
    m = HFModel(module, padded_tok(tok, "left"), name="g")
    names = [f"blocks.{b}.attn.hook_attn_scores" for b in range(3)]
    cache = dl.activations(m, RECORDS, [*names, "blocks.2.attn.hook_pattern"], forward_batch=4)
    for i, r in enumerate(RECORDS):
        out = alone(module, ids_of(tok, r))
        for b, name in enumerate(names):
            ref = hand_scores(module, out.hidden_states[b], b)
            got = cache.record(i, name)
            inf = torch.isinf(ref)
            assert torch.equal(torch.isinf(got), inf) and (got[inf] < 0).all()
            torch.testing.assert_close(got[~inf], ref[~inf], atol=1e-5, rtol=1e-5)
        # the pattern is the softmax of the scores, as in TransformerLens
        soft = torch.softmax(cache.record(i, "blocks.2.attn.hook_attn_scores"), dim=-1)
        torch.testing.assert_close(cache.record(i, "blocks.2.attn.hook_pattern"), soft,
                                   atol=TOL, rtol=0)  # fmt: skip


def test_token_ids_with_a_bos_keep_it_as_a_position(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    bos = tok.eos_token_id  # TransformerLens's to_tokens prepends the BOS
    ids = [[bos, *ids_of(tok, r)] for r in RECORDS[:4]]
    cache = dl.activations(m, ids, [PATTERN, "blocks.1.hook_resid_post"])
    assert cache.pattern_lengths.tolist() == [len(i) for i in ids]
    assert cache.lengths.tolist() == [len(i) - 1 for i in ids]  # the BOS is no symbol
    for i, row in enumerate(ids):
        ref = alone(module, row).attentions[1][0]
        torch.testing.assert_close(cache.record(i, PATTERN), ref, atol=TOL, rtol=0)
        assert torch.allclose(cache.record(i, PATTERN).sum(-1), torch.ones(4, len(row)))


def test_heads_filters_frames_and_streams(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    full = dl.activations(m, RECORDS, [PATTERN, SCORES])
    some = dl.activations(m, RECORDS, [(PATTERN, [1, 3])])
    assert torch.equal(some[PATTERN], full[PATTERN][:, [1, 3]])
    assert some.units[PATTERN].tolist() == [1, 3]
    # TransformerLens's names_filter and a glob choose patterns too
    chosen = dl.activations(m, RECORDS, lambda n: n.endswith("hook_pattern"))
    assert chosen.names == [f"blocks.{b}.attn.hook_pattern" for b in range(3)]
    assert torch.equal(chosen[PATTERN], full[PATTERN])
    globbed = dl.activations(
        m, RECORDS, ["blocks.*.attn.hook_attn_scores", "blocks.0.hook_resid_pre"]
    )
    assert set(globbed.names) == {"blocks.0.hook_resid_pre"} | {
        f"blocks.{b}.attn.hook_attn_scores" for b in range(3)
    }
    # a long frame over each record's own tokens
    frame = full.frame(PATTERN)
    assert frame.columns == ["record", "head", "query", "key", "value"]
    assert frame.height == 4 * sum(n * n for n in full.pattern_lengths.tolist())
    row = frame.filter((frame["record"] == 2) & (frame["head"] == 3) & (frame["query"] == 1)
                       & (frame["key"] == 0))  # fmt: skip
    assert row["value"][0] == pytest.approx(float(full[PATTERN][2, 3, 1, 0]))
    assert {"name", "unit", "head"} <= set(dl.activations(
        m, RECORDS[:2], [PATTERN, "blocks.0.hook_resid_post"]).to_polars().columns)  # fmt: skip
    # streamed blocks hold the same values
    blocks = list(dl.activations(m, RECORDS, [PATTERN], block_size=3, stream=True))
    assert [b.first for b in blocks] == [0, 3, 6, 9]
    for b in blocks:
        for j in range(b.n_records):
            torch.testing.assert_close(
                b.record(j, PATTERN), full.record(b.first + j, PATTERN), atol=TOL, rtol=0
            )  # another batch: float order only


def calls_of(modules: list[torch.nn.Module]):
    """Forward hooks that count each module's completed calls (the stop raises before
    the next block's own forward: its pre-hooks may run, its code does not)."""
    counts = [0] * len(modules)
    handles = [m.register_forward_hook(lambda *_a, i=i: counts.__setitem__(i, counts[i] + 1))
               for i, m in enumerate(modules)]  # fmt: skip
    return counts, handles


@pytest.mark.parametrize("forward_batch", [None, 4])
def test_stop_at_layer_never_runs_later_blocks(gpt2, forward_batch):
    module, tok = gpt2
    m = HFModel(module, padded_tok(tok, "left"), name="g")
    names = ["blocks.0.hook_resid_post", "blocks.1.attn.hook_z", "blocks.2.hook_resid_pre",
             PATTERN, SCORES, "blocks.0.attn.hook_pattern"]  # fmt: skip
    full = dl.activations(m, RECORDS, names, forward_batch=forward_batch)  # the probe pass too
    module.train()  # modes are put back as found, not to eval
    before = state(module, m)
    late = [module.transformer.h[2].ln_1, module.transformer.h[2], module.lm_head]
    counts, handles = calls_of([module.transformer.h[1], *late])
    try:
        cache = dl.activations(m, RECORDS, names, stop_at_layer=1, forward_batch=forward_batch)
    finally:
        for h in handles:
            h.remove()
    passes = 1 if forward_batch is None else -(-len(RECORDS) // forward_batch)
    assert counts[0] >= passes and counts[1:] == [0, 0, 0]  # block 1 ran; block 2, the head not
    assert state(module, m) == before
    module.eval()
    for n in names:
        assert torch.equal(cache[n], full[n]), n


def test_stop_at_layer_on_units_alone_and_the_last_block(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    m.stop_early = False  # the model's own stop off: stop_at_layer alone ends the pass
    full = dl.activations(m, RECORDS, ["blocks.0.mlp.hook_post", "blocks.2.hook_resid_post"])
    for k, late in ((0, module.transformer.h[1]), (2, module.transformer.ln_f)):
        counts, handles = calls_of([late, module.lm_head])
        try:
            cache = dl.activations(m, RECORDS, ["blocks.0.mlp.hook_post"], stop_at_layer=k)
        finally:
            for h in handles:
                h.remove()
        assert counts == [0, 0], k
        assert torch.equal(cache["blocks.0.mlp.hook_post"], full["blocks.0.mlp.hook_post"])
    assert "forward" not in vars(m) and m.stop_early is False


def test_stop_at_layer_errors_before_any_pass(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    before = state(module, m)
    counts, handles = calls_of([module.transformer.h[0]])
    try:
        for bad in (3, -1, 1.0, True):
            with pytest.raises(DNIError, match="stop_at_layer must be a block from 0 to 2"):
                dl.activations(m, RECORDS, ["blocks.0.hook_resid_post"], stop_at_layer=bad)
        with pytest.raises(LayerError, match="read after block 1"):
            dl.activations(m, RECORDS, ["blocks.2.hook_resid_post"], stop_at_layer=1)
        with pytest.raises(LayerError, match="read after block 0"):
            dl.activations(m, RECORDS, [PATTERN], stop_at_layer=0)
        with pytest.raises(LayerError, match="read after block 0"):
            dl.activations(m, RECORDS, ["transformer.ln_f"], stop_at_layer=0)
        with pytest.raises(LayerError, match="read after block 0 only"):
            dl.activations(m, RECORDS, "blocks.2.*", stop_at_layer=0)
        with pytest.raises(DNIError, match="grad="):
            dl.activations(m, RECORDS, [PATTERN], grad=lambda r, o, i: o.logits.sum((1, 2)))
        with pytest.raises(LayerError, match="has 3 blocks"):
            dl.activations(m, RECORDS, ["blocks.7.attn.hook_pattern"])
    finally:
        for h in handles:
            h.remove()
    assert counts == [0]
    assert state(module, m) == before
    # a filter leaves out what the stop never reaches, as TransformerLens's cache does
    cache = dl.activations(m, RECORDS, lambda n: n.endswith("hook_pattern"), stop_at_layer=1)
    assert cache.names == ["blocks.0.attn.hook_pattern", PATTERN]


def test_the_model_is_left_as_found_after_an_error_inside_attention(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    dl.activations(m, RECORDS[:2], ["blocks.0.hook_resid_post"])  # the probe pass
    before = state(module, m)

    def boom(*_a):
        raise RuntimeError("boom")

    # c_proj runs inside the attention module, while the scores' softmax tap is open
    h = module.transformer.h[1].attn.c_proj.register_forward_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            dl.activations(m, RECORDS, [SCORES, "blocks.0.hook_resid_post"], stop_at_layer=1)
    finally:
        h.remove()
    assert state(module, m) == before
    again = dl.activations(m, RECORDS, [SCORES])
    assert np.isfinite(again.record(0, SCORES).diagonal(dim1=-2, dim2=-1).numpy()).all()


def test_pattern_and_scores_on_a_llama_with_grouped_keys(gpt2):
    """Rotary positions and GQA: the scores are the softmax's input the model computed."""
    _module, tok = gpt2
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    module = transformers.LlamaForCausalLM(cfg).eval()
    m = HFModel(module, padded_tok(tok, "left"), name="llama")
    cache = dl.activations(m, RECORDS, [PATTERN, SCORES])
    for i, r in enumerate(RECORDS):
        ref = alone(module, ids_of(tok, r)).attentions[1][0]
        torch.testing.assert_close(cache.record(i, PATTERN), ref, atol=TOL, rtol=0)
        torch.testing.assert_close(torch.softmax(cache.record(i, SCORES), -1), ref,
                                   atol=TOL, rtol=0)  # fmt: skip


class Blocks(torch.nn.Module):
    """A plain module whose blocks are an nn.ModuleList: its positions are the blocks."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = torch.tanh(b(x))
        return x


def test_stop_at_layer_on_a_plain_model():
    module = Blocks()
    model = dl.Model(module, encode=lambda recs: torch.stack([torch.as_tensor(r) for r in recs]),
                     symbols=len)  # fmt: skip
    records = [np.random.default_rng(i).normal(size=(5, 4)).astype(np.float32) for i in range(6)]
    names = ["blocks.0", "blocks.1"]
    full = dl.activations(model, records, names)
    counts, handles = calls_of([module.blocks[1], module.blocks[2]])
    try:
        cache = dl.activations(model, records, names, stop_at_layer=1)
    finally:
        for h in handles:
            h.remove()
    assert counts == [1, 0]
    assert "forward" not in vars(model)
    for n in names:
        assert torch.equal(cache[n], full[n])
    with pytest.raises(LayerError, match="read after block 0"):
        dl.activations(model, records, names, stop_at_layer=0)
