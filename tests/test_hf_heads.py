"""Per-head units on transformers whose heads × head_dim is not the hidden size.

Qwen3 and Gemma set ``head_dim`` apart from ``hidden_size``: ``blocks.N.attn.hook_z``
(the out projection's input, head-major) must hold every head, and per-head maps
(``q_norm`` / ``k_norm``, with fewer key/value heads under GQA) must read as
heads × head_dim units too. Tiny models built from configs, a BPE trained here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

RECORDS = ["select a from tab", "x1 = 1", "insert into tab values a b", "where"]
CPU = torch.device("cpu")
# hidden 32 everywhere; heads × head_dim = 64 (Qwen3), 48 (Gemma, Gemma2), 64 (Gemma3)
SHAPES = {
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_attention_heads=4, head_dim=16)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(num_attention_heads=2, head_dim=24)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(num_attention_heads=2, head_dim=24)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(num_attention_heads=4, head_dim=16)),
}


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 4, vocab_size=280)


def build(which: str, tok) -> tuple[HFModel, dict]:
    config_cls, model_cls, heads = SHAPES[which]
    cfg = getattr(transformers, config_cls)(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_key_value_heads=heads["num_attention_heads"] // 2,  # GQA: fewer k/v heads
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        **heads,
    )
    torch.manual_seed(0)
    module = getattr(transformers, model_cls)(cfg).eval()
    assert heads["num_attention_heads"] * heads["head_dim"] != cfg.hidden_size
    return HFModel(module, tok, name=which), heads


def hand_pre_hook(module: torch.nn.Module, model: HFModel, record: str) -> torch.Tensor:
    """The out projection's input for one record run alone: ``(T, heads * head_dim)``."""
    seen = []
    h = module.register_forward_pre_hook(lambda _m, a: seen.append(a[0].detach().clone()))
    try:
        with torch.inference_mode():
            model.module(**model.tokenizer(record, return_tensors="pt"))
    finally:
        h.remove()
    return seen[0][0]


def extracted(model: HFModel, layer: str) -> tuple[str, np.ndarray, torch.Tensor]:
    """Every unit of ``layer`` over RECORDS, as the engine resolves and extracts them."""
    plan = layer_plan(model, layer, RECORDS, CPU)
    ((addr, units),) = plan.layer_units.items()
    with on_device(model, CPU):
        ((_, acts, _),) = list(symbol_activations(model, RECORDS, addr, units, CPU))
    return addr, units, acts


@pytest.mark.parametrize("which", list(SHAPES))
def test_hook_z_holds_every_head(which, tok):
    model, heads = build(which, tok)
    width = heads["num_attention_heads"] * heads["head_dim"]
    addr, units, acts = extracted(model, "blocks.1.attn.hook_z")
    assert addr == "model.layers.1.attn.hook_z"
    assert len(units) == width and acts.shape[-1] == width  # not hidden_size (32)
    o_proj = model.module.model.layers[1].self_attn.o_proj
    for r, rec in enumerate(RECORDS):
        want = hand_pre_hook(o_proj, model, rec)
        torch.testing.assert_close(acts[r, : len(want)], want, rtol=1e-4, atol=1e-5)
    # the last head's units are live, not padding past the first heads
    last = acts[..., width - heads["head_dim"] :]
    assert last.abs().sum() > 0


def test_hook_z_in_a_score_frame_covers_every_head(tok):
    model, heads = build("qwen3", tok)
    f = dl.inspect(
        model,
        [dl.hypothesis(kind="binary")(lambda r: [c == "a" for c in r])],
        data=RECORDS * 3,
        units=[("blocks.0.attn.hook_z", "*")],
        eps=None,
        cache=False,
    )
    units = f.filter(f["layer"] == "model.layers.0.attn.hook_z")["unit"].sort().to_list()
    assert units == list(range(heads["num_attention_heads"] * heads["head_dim"]))


@pytest.mark.parametrize("which", ["qwen3", "gemma3"])
def test_per_head_norms_read_head_major_with_fewer_kv_heads(which, tok):
    """Qwen3 normalizes (R, T, H, D), Gemma3 (R, H, T, D): both are heads × head_dim units."""
    model, heads = build(which, tok)
    attn = model.module.model.layers[0].self_attn
    d, n_q = heads["head_dim"], heads["num_attention_heads"]
    n_kv = n_q // 2
    for name, mod, n in (("q_norm", attn.q_norm, n_q), ("k_norm", attn.k_norm, n_kv)):
        _, units, acts = extracted(model, f"model.layers.0.self_attn.{name}")
        assert len(units) == n * d, name
        for r, rec in enumerate(RECORDS):
            seen = []
            h = mod.register_forward_hook(lambda _m, _a, out, s=seen: s.append(out.detach()))
            try:
                with torch.inference_mode():
                    model.module(**tok(rec, return_tensors="pt"))
            finally:
                h.remove()
            out = seen[0][0]
            t = len(tok(rec)["input_ids"])
            per_token = out if which == "qwen3" else out.transpose(0, 1)  # Gemma3: (H, T, D)
            torch.testing.assert_close(acts[r, :t], per_token.reshape(t, n * d))
    k_proj = model.layer_widths(RECORDS, CPU)["model.layers.0.self_attn.k_proj"]
    assert k_proj == n_kv * d


def test_attention_maps_are_not_read_as_heads(tok):
    """A (R, heads, T, T) map is not a per-head output: it keeps its old reading."""
    model, _ = build("qwen3", tok)
    batch = model.encode(RECORDS[:1])
    model.forward(batch)  # sets the batch's token count
    T = batch["input_ids"].shape[1]
    attn_map = torch.zeros(1, 4, T, T)
    assert model.gather_symbols(attn_map).shape == attn_map.shape


def test_hook_z_width_is_measured_when_the_projection_does_not_say(tok, monkeypatch):
    """An out projection of an unknown type (neither Linear nor Conv1D): a probe pass."""
    from dni_lab.backend.hf import names

    monkeypatch.setattr(names, "input_width", lambda _module: None)
    model, heads = build("gemma", tok)
    width = model.layer_widths(RECORDS, CPU)["model.layers.0.attn.hook_z"]
    assert width == heads["num_attention_heads"] * heads["head_dim"]
