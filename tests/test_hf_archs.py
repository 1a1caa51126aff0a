"""The TransformerLens hook set on other layouts: Mistral, OPT, GPT-NeoX, GPT-J, Phi, Gemma2.

Each name resolves, or raises the LayerError its layout calls for (no learned positions
under rotary embeddings; no mid residual stream when attention and MLP run in parallel),
and every resolved hook extracts one row per symbol. GPT-NeoX's fused, per-head
interleaved q/k/v are checked against the projection split by hand.
"""

from __future__ import annotations

import pytest
import torch

from dni_lab.backend.errors import LayerError
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tolerances import assert_close_f32  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

RECORDS = ["select a from tab", "x1 = 1", "insert into tab values a b"]
CPU = torch.device("cpu")
COMMON = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
              max_position_embeddings=64)  # fmt: skip
ARCHS = {
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2)),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(ffn_dim=48, word_embed_proj_dim=32)),
    "neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM",
             dict(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64)),
    "phi": ("PhiConfig", "PhiForCausalLM", {}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(num_key_value_heads=2, head_dim=8)),
}  # fmt: skip
HOOKS = [
    "hook_embed", "hook_pos_embed", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_mid",
    "blocks.1.hook_resid_post", "blocks.1.attn.hook_q", "blocks.1.attn.hook_k",
    "blocks.1.attn.hook_v", "blocks.1.attn.hook_z", "blocks.1.hook_attn_out",
    "blocks.1.mlp.hook_pre", "blocks.1.mlp.hook_post", "blocks.1.hook_mlp_out",
    "blocks.1.ln1.hook_normalized", "blocks.1.ln2.hook_normalized", "ln_final.hook_normalized",
]  # fmt: skip
ROTARY = {"hook_pos_embed"}
PARALLEL = {"blocks.1.hook_resid_mid", "blocks.1.ln2.hook_normalized"}
MISSING = {
    "mistral": ROTARY, "opt": set(), "neox": ROTARY | {"blocks.1.hook_resid_mid"},
    "gptj": ROTARY | PARALLEL, "phi": ROTARY | PARALLEL, "gemma2": ROTARY,
}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 4, vocab_size=280)


def build(which: str, tok) -> HFModel:
    config, cls, extra = ARCHS[which]
    cfg = getattr(transformers, config)(
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, **{**COMMON, **extra}
    )
    torch.manual_seed(0)
    return HFModel(getattr(transformers, cls)(cfg).eval(), tok, name=which)


@pytest.mark.parametrize("which", list(ARCHS))
def test_every_hook_resolves_or_says_why(which, tok):
    model = build(which, tok)
    missing = set()
    for name in HOOKS:
        try:
            addr = model.resolve_layer(name)
        except LayerError as exc:
            assert "rotary" in str(exc) or "in parallel" in str(exc) or "no ln2" in str(exc)
            missing.add(name)
            continue
        plan = layer_plan(model, addr, RECORDS, CPU)
        ((a, units),) = plan.layer_units.items()
        with on_device(model, CPU):
            ((_, acts, _),) = list(symbol_activations(model, RECORDS, a, units, CPU))
        assert acts.shape[:2] == (3, max(model.symbols(r) for r in RECORDS)), name
        assert acts.abs().sum() > 0, name
    assert missing == MISSING[which]


def test_neox_fused_qkv_is_split_per_head(tok):
    model = build("neox", tok)
    qkv = model.module.gpt_neox.layers[1].attention.query_key_value
    rec = RECORDS[2]
    seen = []
    h = qkv.register_forward_hook(lambda _m, _a, out: seen.append(out.detach()))
    try:
        with torch.inference_mode():
            model.module(**tok(rec, return_tensors="pt"))
    finally:
        h.remove()
    per_head = seen[0][0].view(-1, 4, 3, 8)  # (T, heads, q|k|v, head_size)
    for j, name in enumerate("qkv"):
        addr = model.resolve_layer(f"blocks.1.attn.hook_{name}")
        plan = layer_plan(model, addr, [rec], CPU)
        ((a, units),) = plan.layer_units.items()
        with on_device(model, CPU):
            ((_, acts, _),) = list(symbol_activations(model, [rec], a, units, CPU))
        # float32: the tolerance scales with the longest dot product (intermediate_size)
        want = per_head[:, :, j].flatten(1)
        assert_close_f32(acts[0], want, reduction=COMMON["intermediate_size"])
