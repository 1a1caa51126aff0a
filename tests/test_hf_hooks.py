"""The TransformerLens hook set by name on Hugging Face models, against hand-written hooks.

GPT-2 (fused q/k/v, learned positions, plain MLP), a LLaMA-style model (gated MLP,
GQA, rotary positions, RMSNorm) and BERT (post-LN) built from tiny configs; every
hook's extracted values equal a forward hook written by hand (or
``output_hidden_states``) on the record run alone, within 1e-6.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import LayerError
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tolerances import assert_close_f32  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe, wordpiece  # noqa: E402

RECORDS = ["select a from tab", "x1 = 1", "insert into tab values a b", "where"]
CPU = torch.device("cpu")
#: the longest dot product of the tiny models (GPT-2's 4 x 32 MLP): float32 tolerances
#: scale with it (tests/tolerances.py)
FFN = 128


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 4, vocab_size=280)


@pytest.fixture(scope="module")
def gpt2(tok):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )
    return HFModel(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="gpt2")


@pytest.fixture(scope="module")
def llama(tok):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    return HFModel(transformers.LlamaForCausalLM(cfg).eval(), tok, name="llama")


@pytest.fixture(scope="module")
def bert():
    tok = wordpiece(RECORDS * 4, vocab_size=120)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )
    return HFModel(transformers.BertModel(cfg).eval(), tok, name="bert")


def extracted(model: HFModel, layer: str) -> tuple[str, torch.Tensor]:
    """Every unit of ``layer`` over RECORDS (padded together), as the engine extracts them."""
    plan = layer_plan(model, layer, RECORDS, CPU)
    ((addr, units),) = plan.layer_units.items()
    with on_device(model, CPU):
        ((_, acts, _),) = list(symbol_activations(model, RECORDS, addr, units, CPU))
    return addr, acts


def by_hand(model: HFModel, record: str, module: torch.nn.Module, read) -> torch.Tensor:
    """``read(args, output)`` of ``module`` for ``record`` run alone: ``(T, D)``, symbols only."""
    seen = []
    h = module.register_forward_hook(lambda _m, a, out: seen.append(read(a, out)))
    try:
        with torch.inference_mode():
            enc = model.tokenizer(record, return_tensors="pt", return_special_tokens_mask=True)
            special = enc.pop("special_tokens_mask")[0].bool()
            model.module(**enc)
    finally:
        h.remove()
    t = seen[0]
    t = t[0] if t.dim() == 3 else t
    return t[~special] if t.shape[0] == special.shape[0] else t


def hidden_states(model: HFModel, record: str) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        enc = model.tokenizer(record, return_tensors="pt", return_special_tokens_mask=True)
        special = enc.pop("special_tokens_mask")[0].bool()
        out = model.module(**enc, output_hidden_states=True)
    return tuple(h[0][~special] for h in out.hidden_states)


def assert_each_record(model, layer, module, read, want_addr=None):
    addr, acts = extracted(model, layer)
    if want_addr is not None:
        assert addr == want_addr
    for r, rec in enumerate(RECORDS):
        want = by_hand(model, rec, module, read)
        n = model.symbols(rec)
        assert want.shape[0] == n
        assert_close_f32(acts[r, :n], want.float(), reduction=FFN)
    return acts


OUT = staticmethod(lambda a, out: (out[0] if isinstance(out, tuple) else out).detach().clone())
IN = staticmethod(lambda a, out: a[0].detach().clone())


def test_gpt2_hooks_equal_hand_written_hooks(gpt2):
    m, h = gpt2, gpt2.module.transformer.h
    d = 32
    qkv = h[1].attn.c_attn
    for j, name in enumerate("qkv"):
        assert_each_record(
            m, f"blocks.1.attn.hook_{name}", qkv,
            lambda a, out, j=j: out[..., j * d : (j + 1) * d].detach().clone(),
            f"transformer.h.1.attn.hook_{name}",
        )
    assert_each_record(m, "hook_embed", m.module.transformer.wte, OUT.__func__, "transformer.wte")
    assert_each_record(m, "hook_pos_embed", m.module.transformer.wpe, OUT.__func__)
    assert_each_record(m, "blocks.1.attn.hook_z", h[1].attn.c_proj, IN.__func__)
    assert_each_record(m, "blocks.0.hook_resid_mid", h[0].ln_2, IN.__func__,
                       "transformer.h.0.hook_resid_mid")
    assert_each_record(m, "blocks.0.mlp.hook_pre", h[0].mlp.c_fc, OUT.__func__)
    # plain MLP: the activation's output is the input of c_proj
    post = assert_each_record(m, "blocks.0.mlp.hook_post", h[0].mlp.c_proj, IN.__func__)
    assert post.shape[-1] == 128
    assert_each_record(m, "blocks.1.hook_mlp_out", h[1].mlp, OUT.__func__)
    assert_each_record(m, "blocks.1.hook_attn_out", h[1].attn, OUT.__func__)
    # a norm's output (after its weight and bias) is its bridge name's hook_out;
    # hook_normalized is before them (tests/test_tl_meanings.py)
    assert_each_record(m, "blocks.1.ln1.hook_out", h[1].ln_1, OUT.__func__)
    assert_each_record(m, "blocks.1.ln2.hook_out", h[1].ln_2, OUT.__func__)
    assert_each_record(m, "ln_final.hook_out", m.module.transformer.ln_f, OUT.__func__)


def test_llama_hooks_equal_hand_written_hooks(llama):
    m, layers = llama, llama.module.model.layers
    attn, mlp = layers[1].self_attn, layers[1].mlp
    q = assert_each_record(m, "blocks.1.attn.hook_q", attn.q_proj, OUT.__func__)
    k = assert_each_record(m, "blocks.1.attn.hook_k", attn.k_proj, OUT.__func__)
    assert_each_record(m, "blocks.1.attn.hook_v", attn.v_proj, OUT.__func__)
    assert q.shape[-1] == 4 * 8 and k.shape[-1] == 2 * 8  # GQA: keys have their own heads
    assert_each_record(m, "blocks.1.attn.hook_z", attn.o_proj, IN.__func__)
    assert_each_record(m, "hook_embed", m.module.model.embed_tokens, OUT.__func__)
    assert_each_record(m, "blocks.1.hook_resid_mid", layers[1].post_attention_layernorm,
                       IN.__func__)
    assert_each_record(m, "blocks.1.mlp.hook_pre", mlp.gate_proj, OUT.__func__)
    assert_each_record(m, "blocks.1.mlp.hook_pre_linear", mlp.up_proj, OUT.__func__)
    post = assert_each_record(m, "blocks.1.mlp.hook_post", mlp.down_proj, IN.__func__,
                              "model.layers.1.mlp.hook_post")
    assert post.shape[-1] == 48
    assert_each_record(m, "blocks.1.hook_mlp_out", mlp, OUT.__func__)
    assert_each_record(m, "blocks.0.hook_attn_out", layers[0].self_attn, OUT.__func__)
    assert_each_record(m, "blocks.0.ln1.hook_out", layers[0].input_layernorm, OUT.__func__)
    assert_each_record(m, "ln_final.hook_out", m.module.model.norm, OUT.__func__)


def test_gated_hook_post_is_act_gate_times_up(llama):
    """Computed from gate_proj and up_proj by hand, not read from any hook of ours."""
    mlp = llama.module.model.layers[0].mlp
    _, post = extracted(llama, "blocks.0.mlp.hook_post")
    for r, rec in enumerate(RECORDS):
        x = by_hand(llama, rec, llama.module.model.layers[0].post_attention_layernorm, OUT.__func__)
        with torch.inference_mode():
            want = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
        n = llama.symbols(rec)
        assert_close_f32(post[r, :n], want, reduction=FFN)
    _, act = extracted(llama, "model.layers.0.mlp.act_fn")  # act(gate) alone differs
    assert not torch.allclose(act, post, atol=1e-3)


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_residual_stream_hooks_equal_hidden_states(which, request):
    """resid_pre/post are hidden_states[i] / [i+1]; the last hidden state is after ln_final."""
    m = request.getfixturevalue(which)
    names = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.0.hook_resid_post",
             "blocks.1.hook_resid_post", "ln_final.hook_out"]
    got = {n: extracted(m, n)[1] for n in names}
    for r, rec in enumerate(RECORDS):
        hs, n = hidden_states(m, rec), m.symbols(rec)
        for name, want in zip(names, (hs[0], hs[1], hs[1], hs[2], hs[2]), strict=True):
            last_pre_ln = name == "blocks.1.hook_resid_post"
            if last_pre_ln:  # HF's last hidden state is after the final norm
                assert not torch.allclose(got[name][r, :n], want, atol=1e-3)
            else:
                assert_close_f32(got[name][r, :n], want, reduction=FFN)


def test_bert_post_ln_hooks(bert):
    layer = bert.module.encoder.layer[0]
    assert_each_record(bert, "blocks.0.attn.hook_q", layer.attention.self.query, OUT.__func__)
    assert_each_record(bert, "blocks.0.hook_resid_mid", layer.attention.output.LayerNorm,
                       OUT.__func__)
    assert_each_record(bert, "blocks.0.mlp.hook_pre", layer.intermediate.dense, OUT.__func__)
    assert_each_record(bert, "blocks.0.ln2.hook_out", layer.output.LayerNorm, OUT.__func__)
    assert_each_record(bert, "hook_pos_embed", bert.module.embeddings.position_embeddings,
                       OUT.__func__)


def test_unsupported_hooks_say_what_to_read(gpt2, llama, bert):
    for name in ("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_attn_scores"):
        with pytest.raises(LayerError, match="attention pattern.*hook_z"):
            gpt2.resolve_layer(name)
    with pytest.raises(LayerError, match="rotary"):
        llama.resolve_layer("hook_pos_embed")
    with pytest.raises(LayerError, match="final layer norm"):
        bert.resolve_layer("ln_final.hook_normalized")
    with pytest.raises(LayerError, match="not supported"):
        gpt2.resolve_layer("blocks.0.hook_attn_in")  # per-head copies of the input


def test_fused_qkv_slices_cannot_be_forced(gpt2):
    from dni_lab.backend.verify.force import force_units

    with pytest.raises(LayerError, match="fused"):
        with force_units(gpt2, "transformer.h.0.attn.hook_k", [0], 0.0):
            pass


def test_head_column(llama):
    @dl.hypothesis(kind="binary")
    def has_a(r):
        return [c == "a" for c in r]

    units = [("blocks.0.attn.hook_k", "*"), ("blocks.0.attn.hook_z", [0, 8, 31]),
             ("blocks.0.hook_mlp_out", [0])]
    f = llama.with_heads(
        dl.inspect(llama, [has_a], data=RECORDS * 3, units=units, eps=None, cache=False)
    )
    k = f.filter(pl.col("layer") == "model.layers.0.self_attn.k_proj").sort("unit")
    assert k["head"].to_list() == list(np.arange(16) // 8)  # 2 key/value heads of 8
    z = f.filter(pl.col("layer") == "model.layers.0.attn.hook_z").sort("unit")
    assert z["head"].to_list() == [0, 1, 3]
    assert f.filter(pl.col("layer") == "model.layers.0.mlp")["head"].is_null().all()
