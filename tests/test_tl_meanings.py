"""TransformerLens names on Hugging Face models mean what TransformerLens means by them.

Main environment: ``hook_normalized`` is the norm's input normalized before its weight
and bias, ``hook_scale`` its scale, ``attn.hook_result`` sums (with ``b_O``) to the
attention's output, ``hook_rot_q/k`` are the rotated queries/keys attention uses,
``hook_q_normed`` is Qwen3's per-head norm, T5 blocks take TL names, nnsight ``.input``
paths read (and force) a module's first input, TL 4 bridge names reach the same
values as TL's own names, and :func:`tl_hook_layout` declares HookedTransformer axes.
Norm weights and biases are drawn away from 1 and 0, so "before the weight" and
"after" differ (by O(1), as on a trained model).

Side environment (``make saelens-env``: transformer-lens): tests/tl_side.py loads the
same saved models into ``HookedTransformer`` and ``TransformerBridge`` and runs
``run_with_cache``; every name dni_lab accepts equals TransformerLens's value within
1e-5 relative, and every name dni_lab refuses is one TransformerLens does not have.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from dni_lab.backend.errors import LayerError
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device
from dni_lab.backend.extraction.layouts.hook_points import tl_hook_layout

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

RECORDS = ["select a from tab", "x1 = 1", "insert into tab values a b"]
CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".dni_cache" / "saelens-venv"
SIDE = Path(os.environ.get("DNI_LAB_SAELENS_PYTHON", VENV / "bin" / "python"))
READY = SIDE.exists() and ("DNI_LAB_SAELENS_PYTHON" in os.environ or (VENV / ".installed").exists())
RTOL = 1e-5
SMALL = dict(num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)


def _perturb(module: nn.Module) -> nn.Module:
    """Norm weights ~ N(1, 0.5), biases ~ N(0, 0.5): before/after the weight differ."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name or ".ln_" in name or "ln_f" in name:
                p.normal_(1.0, 0.5) if name.endswith("weight") else p.normal_(0.0, 0.5)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return module.eval()


def build(which: str, tok) -> HFModel:
    torch.manual_seed(0)
    if which == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=len(tok), n_positions=64, n_ctx=64, n_embd=32, n_layer=2, n_head=4,
            bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
        )  # fmt: skip
        module = transformers.GPT2LMHeadModel(cfg)
    elif which == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_key_value_heads=2,
            pad_token_id=tok.pad_token_id, **SMALL,
        )  # fmt: skip
        module = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.Qwen3Config(
            vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_key_value_heads=2,
            head_dim=12, pad_token_id=tok.pad_token_id, **SMALL,
        )  # fmt: skip
        module = transformers.Qwen3ForCausalLM(cfg)
    return HFModel(_perturb(module), tok, name=which)


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 4, vocab_size=280, bos=True)


@pytest.fixture(scope="module")
def models(tok):
    return {w: build(w, tok) for w in ("gpt2", "llama", "qwen3")}


def extracted(model: HFModel, layer: str, records=RECORDS) -> tuple[str, torch.Tensor]:
    """Every unit of ``layer`` over ``records`` (padded together), as the engine reads them."""
    plan = layer_plan(model, layer, records, CPU)
    ((addr, units),) = plan.layer_units.items()
    with on_device(model, CPU):
        ((_, acts, _),) = list(symbol_activations(model, records, addr, units, CPU))
    return addr, acts


def seen(model: HFModel, module: nn.Module, record: str, pre: bool = False, kwargs=False):
    """What ``module`` took (``pre``) or gave for ``record`` run alone, at symbol positions."""
    got = []
    if pre:
        h = module.register_forward_pre_hook(
            lambda _m, a, k: got.append(a[0] if a else k["hidden_states"]), with_kwargs=True
        )
    else:
        h = module.register_forward_hook(lambda _m, _a, o: got.append(o))
    try:
        with torch.inference_mode():
            enc = model.tokenizer(record, return_tensors="pt", return_special_tokens_mask=True)
            special = enc.pop("special_tokens_mask")[0].bool()
            model.module(**enc)
    finally:
        h.remove()
    out = got[0][0] if isinstance(got[0], tuple) else got[0]
    return out[0][~special].float()


def close(a: torch.Tensor, b: torch.Tensor) -> float:
    """Greatest difference relative to the greatest magnitude of ``b``."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def test_hook_normalized_is_before_weight_and_bias(models):
    """(x - mean) / scale for LayerNorm, x / scale for RMSNorm; the norm's output differs."""
    norms = (("gpt2", "transformer.h.1.ln_2"), ("llama", "model.layers.1.input_layernorm"))
    for which, ln in norms:
        m = models[which]
        norm = m.module.get_submodule(ln)
        block_hook = "ln2" if which == "gpt2" else "ln1"
        addr, got = extracted(m, f"blocks.1.{block_hook}.hook_normalized")
        assert addr == f"{ln}.hook_normalized"
        _, scale = extracted(m, f"blocks.1.{block_hook}.hook_scale")
        assert scale.shape[-1] == 1
        for r, rec in enumerate(RECORDS):
            x, out, n = seen(m, norm, rec, pre=True), seen(m, norm, rec), m.symbols(rec)
            centered = x - x.mean(-1, keepdim=True) if which == "gpt2" else x
            want_scale = (centered.pow(2).mean(-1, keepdim=True) + (norm.eps if which == "gpt2"
                          else norm.variance_epsilon)).sqrt()  # fmt: skip
            assert close(scale[r, :n], want_scale) < RTOL
            assert close(got[r, :n], centered / want_scale) < RTOL
            # the norm's own output is normalized * weight (+ bias): O(1) apart here
            assert (got[r, :n] - out).abs().max() > 0.3
            bias = norm.bias.detach() if which == "gpt2" else 0.0
            assert close(got[r, :n] * norm.weight.detach() + bias, out) < 1e-5


def test_ln_final_and_t5_rms_norm(models, tok):
    m = models["gpt2"]
    addr, got = extracted(m, "ln_final.hook_normalized")
    assert addr == "transformer.ln_f.hook_normalized"
    _, resid = extracted(m, "blocks.1.hook_resid_post")
    centered = resid - resid.mean(-1, keepdim=True)
    want = centered / (centered.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    for r, rec in enumerate(RECORDS):
        n = m.symbols(rec)
        assert close(got[r, :n], want[r, :n]) < RTOL


def test_hook_result_sums_to_the_attention_output(models):
    """Per head z_h W_O[h]; summed over heads plus b_O it is the out projection's output."""
    projections = (("gpt2", "transformer.h.1.attn.c_proj", 32),
                   ("qwen3", "model.layers.1.self_attn.o_proj", 32))  # fmt: skip
    for which, proj_path, d_model in projections:
        m = models[which]
        proj = m.module.get_submodule(proj_path)
        addr, got = extracted(m, "blocks.1.attn.hook_result")
        heads = m.module.config.num_attention_heads
        assert addr.endswith("attn.hook_result") and got.shape[-1] == heads * d_model
        for r, rec in enumerate(RECORDS):
            n = m.symbols(rec)
            per_head = got[r, :n].unflatten(-1, (heads, d_model))
            out = seen(m, proj, rec)
            bias = proj.bias if proj.bias is not None else 0.0
            assert close(per_head.sum(-2) + bias, out) < 1e-5
            z = seen(m, proj, rec, pre=True)
            d = z.shape[-1] // heads
            w = proj.weight if which == "qwen3" else proj.weight.t()
            h0 = z[:, :d] @ w[:, :d].t()
            assert close(per_head[:, 0], h0) < 1e-5
    with pytest.raises(LayerError, match="read"):
        from dni_lab.backend.verify.force import force_units

        with force_units(models["gpt2"], "transformer.h.1.attn.hook_result", [0], 0.0):
            pass


def test_rotary_queries_and_keys(models):
    """hook_rot_q/k: the model's own rotation of q_proj (Qwen3: q_norm) output."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    m = models["qwen3"]
    attn = m.module.model.layers[1].self_attn
    _, rot_q = extracted(m, "blocks.1.attn.hook_rot_q")
    _, rot_k = extracted(m, "blocks.1.attn.hook_rot_k")
    assert rot_q.shape[-1] == 4 * 12 and rot_k.shape[-1] == 2 * 12
    for r, rec in enumerate(RECORDS):
        n = m.symbols(rec)
        q, k = seen(m, attn.q_norm, rec), seen(m, attn.k_norm, rec)  # (T, H, D)
        enc = m.tokenizer(rec, return_tensors="pt", return_special_tokens_mask=True)
        special = enc["special_tokens_mask"][0].bool()
        pos = torch.arange(len(special))[None]
        cos, sin = m.module.model.rotary_emb(q, pos)
        cos, sin = cos[0][~special][None], sin[0][~special][None]
        want_q, want_k = apply_rotary_pos_emb(q[None].transpose(1, 2), k[None].transpose(1, 2),
                                              cos, sin)  # fmt: skip
        assert close(rot_q[r, :n], want_q[0].transpose(0, 1).flatten(1)) < RTOL
        assert close(rot_k[r, :n], want_k[0].transpose(0, 1).flatten(1)) < RTOL
        assert (rot_q[r, :n] - q.flatten(1)).abs().max() > 1e-2  # rotation moved them
    with pytest.raises(LayerError, match="rotary"):
        models["gpt2"].resolve_layer("blocks.0.attn.hook_rot_q")


def test_q_k_normed(models):
    m = models["qwen3"]
    addr, got = extracted(m, "blocks.0.attn.hook_q_normed")
    assert addr == "model.layers.0.self_attn.q_norm"
    assert got.shape[-1] == 4 * 12
    assert m.resolve_layer("blocks.0.attn.hook_k_normed") == "model.layers.0.self_attn.k_norm"
    for other in ("gpt2", "llama"):
        with pytest.raises(LayerError, match="normalizes no per-head"):
            models[other].resolve_layer("blocks.0.attn.hook_q_normed")


def test_t5_blocks_take_tl_names(tok):
    """T5 runs attention then feed-forward, each a sublayer with its own residual add."""
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=len(tok), d_model=16, d_kv=4, num_heads=4, d_ff=32,
                                num_layers=2, feed_forward_proj="gated-gelu",
                                pad_token_id=tok.pad_token_id)  # fmt: skip
    m = HFModel(_perturb(transformers.T5EncoderModel(cfg)), tok, name="t5")
    block = m.module.encoder.block[1]
    checks = {
        "blocks.1.hook_resid_mid": (block.layer[0], False, lambda o: o),
        "blocks.1.hook_attn_out": (block.layer[0].SelfAttention, False, lambda o: o),
        "blocks.1.hook_mlp_out": (block.layer[1].DenseReluDense, False, lambda o: o),
        "blocks.1.mlp.hook_post": (block.layer[1].DenseReluDense.wo, True, lambda o: o),
        "blocks.1.attn.hook_z": (block.layer[0].SelfAttention.o, True, lambda o: o),
        "blocks.1.mlp.hook_pre": (block.layer[1].DenseReluDense.wi_0, False, lambda o: o),
    }
    for name, (mod, pre, _f) in checks.items():
        _, got = extracted(m, name)
        for r, rec in enumerate(RECORDS):
            n = m.symbols(rec)
            assert close(got[r, :n], seen(m, mod, rec, pre=pre)) < RTOL, name
    _, normed = extracted(m, "blocks.1.ln2.hook_normalized")
    _, mid = extracted(m, "blocks.1.hook_resid_mid")
    want = mid / (mid.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()  # T5LayerNorm: RMS
    for r, rec in enumerate(RECORDS):
        n = m.symbols(rec)
        assert close(normed[r, :n], want[r, :n]) < RTOL
    with pytest.raises(LayerError, match="relative"):
        m.resolve_layer("hook_pos_embed")


def test_nnsight_input_paths_read_and_force(models):
    from dni_lab.backend.verify.force import force_units

    m = models["llama"]
    mlp = m.module.model.layers[0].mlp
    addr, got = extracted(m, "model.layers.0.mlp.input")
    assert addr == "model.layers.0.mlp.input"
    assert m.resolve_layer("model.model.layers[0].mlp.input") == addr  # nnsight's root
    for r, rec in enumerate(RECORDS):
        n = m.symbols(rec)
        assert close(got[r, :n], seen(m, mlp, rec, pre=True)) < RTOL
    rec = RECORDS[0]
    with force_units(m, addr, [3], 0.0):
        forced = seen(m, mlp, rec, pre=True)
        gate = seen(m, mlp.gate_proj, rec, pre=True)
    assert forced[:, 3].abs().max() == 0 and gate[:, 3].abs().max() == 0
    assert seen(m, mlp, rec, pre=True)[:, 3].abs().max() > 0  # hooks gone after
    with pytest.raises(LayerError, match="first positional input"):
        m.resolve_layer("model.layers.0.mlp.inputs")


BRIDGE = {  # TransformerLens 4 bridge name -> the TransformerLens name it equals
    "blocks.1.hook_in": "blocks.1.hook_resid_pre",
    "blocks.1.hook_out": "blocks.1.hook_resid_post",
    "blocks.1.attn.hook_out": "blocks.1.hook_attn_out",
    "blocks.1.mlp.hook_out": "blocks.1.hook_mlp_out",
    "blocks.1.attn.o.hook_in": "blocks.1.attn.hook_z",
    "blocks.1.ln2.hook_in": "blocks.1.hook_resid_mid",
    "blocks.1.attn.q.hook_out": "blocks.1.attn.hook_q",
    "blocks.1.mlp.out.hook_in": "blocks.1.mlp.hook_post",
    "embed.hook_out": "hook_embed",
}


def test_bridge_names_reach_the_same_values(models):
    for which in ("gpt2", "llama"):
        m = models[which]
        for bridge, legacy in BRIDGE.items():
            assert m.resolve_layer(bridge) == m.resolve_layer(legacy), (which, bridge)
        # hook_in of a component with no TL name is that module's first input
        _, ln_in = extracted(m, "blocks.1.ln1.hook_in")
        _, pre = extracted(m, "blocks.1.hook_resid_pre")
        assert close(ln_in, pre) < RTOL
        _, final_in = extracted(m, "ln_final.hook_in")
        _, post = extracted(m, "blocks.1.hook_resid_post")
        assert close(final_in, post) < RTOL
    with pytest.raises(LayerError, match="token ids"):
        models["gpt2"].resolve_layer("embed.hook_in")
    with pytest.raises(LayerError, match="not gated"):
        models["gpt2"].resolve_layer("blocks.0.mlp.gate.hook_out")


def test_computed_addresses_join_the_listing_last(models, tok):
    m = build("gpt2", tok)
    before = list(m.addresses)
    m.resolve_layer("blocks.0.attn.hook_result")
    assert m.addresses[: len(before)] == before
    assert m.addresses[len(before) :] == ["transformer.h.0.attn.hook_result"]


@pytest.mark.parametrize(
    ("name", "ndim", "want"),
    [
        ("blocks.0.hook_resid_post", 3, "n s u"),
        ("hook_embed", 3, "n s u"),
        ("blocks.3.attn.hook_z", 4, "n s u u"),
        ("blocks.3.attn.hook_rot_q", 4, "n s u u"),
        ("blocks.0.attn.hook_result", 4, "n s u u"),
        ("blocks.0.ln1.hook_scale", 3, "n s u"),
        ("ln_final.hook_normalized", 3, "n s u"),
        ("blocks.0.attn.hook_pattern", 4, None),
        ("blocks.0.mlp.hook_post", 3, "n s u"),
    ],
)
def test_tl_hook_layout(name, ndim, want):
    assert tl_hook_layout(name, ndim) == want


def test_tl_hook_layout_refuses_what_it_cannot_read():
    with pytest.raises(LayerError, match=r"\(head, query, key\).*hook_z"):
        tl_hook_layout("blocks.0.attn.hook_attn_scores", 4, strict=True)
    with pytest.raises(LayerError, match="dimensions"):
        tl_hook_layout("blocks.0.attn.hook_z", 3, strict=True)
    assert tl_hook_layout("blocks.0.attn.hook_z", 3) is None
    assert tl_hook_layout("not_a_hook", 3) is None


# -- against TransformerLens itself (side environment) ----------------------------------------

LEGACY = [
    "hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre",
    "blocks.1.hook_resid_mid", "blocks.1.hook_resid_post", "blocks.1.hook_attn_out",
    "blocks.1.hook_mlp_out", "blocks.1.attn.hook_q", "blocks.1.attn.hook_k",
    "blocks.1.attn.hook_v", "blocks.1.attn.hook_z", "blocks.1.attn.hook_result",
    "blocks.1.attn.hook_rot_q", "blocks.1.attn.hook_rot_k", "blocks.1.mlp.hook_pre",
    "blocks.1.mlp.hook_pre_linear", "blocks.1.mlp.hook_post", "blocks.1.ln1.hook_normalized",
    "blocks.1.ln1.hook_scale", "blocks.1.ln2.hook_normalized", "blocks.1.ln2.hook_scale",
    "blocks.1.attn.q_norm.hook_normalized", "blocks.1.attn.k_norm.hook_normalized",
    "ln_final.hook_normalized", "ln_final.hook_scale",
]  # fmt: skip
BRIDGE_NAMES = [
    "blocks.1.hook_in", "blocks.1.hook_out", "blocks.1.attn.hook_in", "blocks.1.attn.hook_out",
    "blocks.1.attn.q.hook_out", "blocks.1.attn.k.hook_out", "blocks.1.attn.v.hook_out",
    "blocks.1.attn.o.hook_in", "blocks.1.attn.o.hook_out", "blocks.1.ln1.hook_in",
    "blocks.1.ln1.hook_out", "blocks.1.ln2.hook_in", "blocks.1.ln2.hook_out",
    "blocks.1.mlp.hook_in", "blocks.1.mlp.hook_out", "blocks.1.mlp.in.hook_out",
    "blocks.1.mlp.gate.hook_out", "blocks.1.mlp.out.hook_in", "blocks.1.attn.hook_q_normed",
    "blocks.1.attn.hook_k_normed", "embed.hook_out", "pos_embed.hook_out", "ln_final.hook_in",
    "ln_final.hook_out", "unembed.hook_out",
]  # fmt: skip


def _ours(m: HFModel, names: list[str]) -> dict[str, torch.Tensor | str]:
    out: dict[str, torch.Tensor | str] = {}
    for name in names:
        try:
            out[name] = extracted(m, name)[1]
        except LayerError as exc:
            out[name] = str(exc)
    return out


@pytest.mark.skipif(not READY, reason=f"transformer-lens side environment missing ({SIDE}); "
                    "build it with `make saelens-env`")  # fmt: skip
def test_transformer_lens_itself_agrees(models, tok, tmp_path):
    from safetensors.torch import load_file

    dirs, tokens = {}, []
    for rec in RECORDS:
        tokens.append(tok(rec)["input_ids"])
    for i, (which, m) in enumerate(models.items()):
        d = tmp_path / f"model{i}"  # no 'llama' in it: TL would go by the name, not the config
        m.module.save_pretrained(d)
        tok.save_pretrained(d)
        dirs[which] = str(d)
    job = {"models": dirs, "tokens": tokens, "legacy": LEGACY, "bridge": BRIDGE_NAMES,
           "out": str(tmp_path / "tl.safetensors")}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [str(SIDE), str(ROOT / "tests" / "tl_side.py"), str(tmp_path / "job.json")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = load_file(job["out"])
    meta = json.loads(Path(job["out"] + ".json").read_text())
    table, failures = [], []
    for which, m in models.items():
        for tag, names in (("legacy", LEGACY), ("bridge", BRIDGE_NAMES)):
            if f"{which}|bridge" in meta["why"] and tag == "bridge":
                failures.append(f"{which}: no bridge: {meta['why'][f'{which}|bridge']}")
                continue
            ours = _ours(m, names)
            for name in names:
                key0 = f"{which}|0|{name}"
                if isinstance(ours[name], str):
                    table.append((which, tag, name, "refused", None))
                    if key0 in theirs:
                        failures.append(f"{which} {name}: TL has it, we refuse: {ours[name]}")
                    continue
                if key0 not in theirs:
                    failures.append(f"{which} {name}: we read it, TL has no such hook")
                    continue
                worst = 0.0
                for r, rec in enumerate(RECORDS):
                    special = torch.tensor(tok.get_special_tokens_mask(
                        tokens[r], already_has_special_tokens=True)).bool()  # fmt: skip
                    want = theirs[f"{which}|{r}|{name}"][~special]
                    got = ours[name][r, : m.symbols(rec)]
                    if got.shape != want.shape:
                        failures.append(f"{which} {name}: shape {tuple(got.shape)} vs "
                                        f"{tuple(want.shape)}")  # fmt: skip
                        break
                    worst = max(worst, close(got, want))
                table.append((which, tag, name, "equal" if worst <= RTOL else "DIFFERS", worst))
                if worst > RTOL:
                    failures.append(f"{which} {name}: relative difference {worst:.2e}")
    lines = [f"{w:6} {t:6} {n:40} {s:8} {'' if d is None else f'{d:.1e}'}"
             for w, t, n, s, d in table]  # fmt: skip
    report = Path(os.environ.get("DNI_LAB_TL_TABLE", tmp_path / "table.txt"))
    report.write_text(f"transformer-lens {meta['why']['version']}\n" + "\n".join(lines) + "\n")
    assert not failures, "\n".join(failures)
    assert sum(s == "equal" for _, _, _, s, _ in table) >= 120
    n_pos = len(tokens[0])
    for which, shapes in meta["hooks"].items():
        check_layouts(shapes, n_pos, which)


#: HookedTransformer hook points that are no per-symbol value (tl_hook_layout gives None)
NOT_PER_SYMBOL = ("hook_pattern", "hook_attn_scores", "q_norm.hook_normalized",
                  "q_norm.hook_scale", "k_norm.hook_normalized", "k_norm.hook_scale")  # fmt: skip


def check_layouts(shapes: dict[str, list[int]], n_pos: int, which: str) -> None:
    """Every hook point of a real HookedTransformer has the layout its name declares:
    a batch of one on ``n``, the record's positions on ``s``; patterns and per-row norms
    have none."""
    assert len(shapes) > 30, which
    for name, shape in shapes.items():
        layout = tl_hook_layout(name, len(shape))
        if name.endswith(NOT_PER_SYMBOL):
            assert layout is None, (which, name)
            continue
        assert layout is not None, (which, name, shape)
        axes = layout.split()
        assert shape[axes.index("n")] == 1 and shape[axes.index("s")] == n_pos, (name, shape)


def test_head_column_on_computed_addresses(models):
    import polars as pl

    m = models["qwen3"]
    layers = {n: m.resolve_layer(n) for n in ("blocks.0.attn.hook_result",
              "blocks.0.attn.hook_rot_k", "blocks.0.attn.hook_q_normed",
              "blocks.0.ln1.hook_normalized")}  # fmt: skip
    frame = pl.DataFrame(
        {"mid": ["qwen3"] * 4, "layer": list(layers.values()), "unit": [70, 13, 25, 5]}
    )
    heads = dict(zip(layers, m.with_heads(frame)["head"].to_list(), strict=True))
    # result: d_model 32 per head; rot_k, q_normed: head_dim 12; a norm: no head
    assert heads == {
        "blocks.0.attn.hook_result": 2,
        "blocks.0.attn.hook_rot_k": 1,
        "blocks.0.attn.hook_q_normed": 2,
        "blocks.0.ln1.hook_normalized": None,
    }


def test_rotary_on_gemma3_norms_heads_first(tok):
    """Gemma3 norms queries laid out (batch, head, pos, d): hook_rot_q is still per token."""
    from transformers.models.gemma3 import modeling_gemma3 as g3

    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_key_value_heads=2,
        head_dim=8, pad_token_id=tok.pad_token_id, sliding_window=16, **SMALL,
    )  # fmt: skip
    m = HFModel(_perturb(g3.Gemma3ForCausalLM(cfg)), tok, name="gemma3")
    attn = m.module.model.layers[1].self_attn
    _, rot_q = extracted(m, "blocks.1.attn.hook_rot_q")
    seen_kw: dict = {}
    h = attn.register_forward_pre_hook(lambda _m, a, k: seen_kw.update(k), with_kwargs=True)
    try:
        for r, rec in enumerate(RECORDS):
            with torch.inference_mode():
                enc = m.tokenizer(rec, return_tensors="pt", return_special_tokens_mask=True)
                special = enc.pop("special_tokens_mask")[0].bool()
                m.module(**enc)
                x = seen_kw["hidden_states"]
                q = attn.q_proj(x).view(1, x.shape[1], -1, 8).transpose(1, 2)
                cos, sin = seen_kw["position_embeddings"]
                want, _ = g3.apply_rotary_pos_emb(attn.q_norm(q), q, cos, sin)
            want = want[0].transpose(0, 1).flatten(1)[~special]
            assert close(rot_q[r, : m.symbols(rec)], want) < RTOL
    finally:
        h.remove()


def test_an_input_taken_by_keyword_is_forced_where_it_is_read(models):
    """LLaMA's layers call self-attention with ``hidden_states=...`` (no positional input)."""
    from dni_lab.backend.verify.force import force_units

    m = models["llama"]
    attn = m.module.model.layers[0].self_attn
    addr, got = extracted(m, "model.layers.0.self_attn.input")
    box = {}
    rec = RECORDS[0]
    with force_units(m, addr, [5], 0.0):
        h = attn.register_forward_pre_hook(  # after the forcing hook: sees what it passes on
            lambda _m, a, kw: box.setdefault("in", (a, dict(kw))), with_kwargs=True
        )
        seen(m, attn.q_proj, rec, pre=True)
    h.remove()
    args, kwargs = box["in"]
    x = args[0] if args else kwargs["hidden_states"]
    assert not args and x[..., 5].abs().max() == 0  # by keyword, and forced there
    assert got[0, : m.symbols(rec), 5].abs().max() > 0
