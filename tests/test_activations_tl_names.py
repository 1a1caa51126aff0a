"""``dl.activations`` returns what TransformerLens 4.3's ``run_with_cache`` does (issue 49, item 3).

A GPT-2 of 2 blocks, 4 heads, width 32, built from a config with a byte-level BPE trained
here (nothing downloaded). TransformerLens is not installed in this environment, so every
value is checked against Hugging Face's own outputs (``output_hidden_states``, logits),
forward hooks written here, and hand computations of a LayerNorm's scale; the list of
names is the one TransformerLens 4.3's ``TransformerBridge.run_with_cache`` returned on this
architecture (``benchmarks/bench_activations.py --every`` compares every value with
TransformerLens itself, in its own environment). Records differ in length, so padding is exercised.
"""

from __future__ import annotations

import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "insert", "into", "values", "b", "where"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(2 + i % 5)) for i in range(6)]
N_BLOCKS, HEADS, WIDTH = 2, 4, 32
D_HEAD = WIDTH // HEADS
TOL = 1e-5
#: What TransformerLens 4.3's run_with_cache returned on a 2-block GPT-2 (its order), but
#: embed.hook_in and pos_embed.hook_in: token ids and positions, no units.
_BLOCK = (
    "hook_in hook_resid_pre ln1.hook_in ln1.hook_scale ln1.hook_normalized ln1.hook_out "
    "attn.hook_in attn.q.hook_in attn.q.hook_out attn.hook_q attn.k.hook_in attn.k.hook_out "
    "attn.hook_k attn.v.hook_in attn.v.hook_out attn.hook_v attn.hook_attn_scores "
    "attn.hook_pattern attn.o.hook_in attn.hook_z attn.o.hook_out attn.hook_hidden_states "
    "attn.hook_out hook_attn_out ln2.hook_in hook_resid_mid ln2.hook_scale ln2.hook_normalized "
    "ln2.hook_out mlp.hook_in mlp.in.hook_in mlp.in.hook_out mlp.hook_pre mlp.out.hook_in "
    "mlp.hook_post mlp.out.hook_out mlp.hook_out hook_mlp_out hook_out hook_resid_post"
).split()
TL_NAMES = [
    "embed.hook_out", "hook_embed", "pos_embed.hook_out", "hook_pos_embed",
    *[f"blocks.{i}.{h}" for i in range(N_BLOCKS) for h in _BLOCK],
    "ln_final.hook_in", "ln_final.hook_scale", "ln_final.hook_normalized", "ln_final.hook_out",
    "unembed.hook_in", "unembed.hook_out", "hook_unembed",
]  # fmt: skip


@pytest.fixture(scope="module")
def gpt2():
    tok = bpe(RECORDS * 3, vocab_size=280)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=WIDTH, n_layer=N_BLOCKS, n_head=HEADS,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # weights far from init: values far from each other
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    return module, tok


@pytest.fixture(scope="module")
def cache(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="gpt2")
    return dl.activations(model, RECORDS, TL_NAMES, device="cpu", shapes="transformer_lens")


def alone(module, tok, record: str):
    """One record run alone: its hidden states, logits and hand-hooked values."""
    ids = torch.tensor([tok(record)["input_ids"]])
    got = {}
    h = module.transformer.h
    hooks = [
        h[0].attn.c_proj.register_forward_pre_hook(lambda _m, a: got.__setitem__("z0", a[0])),
        h[1].ln_2.register_forward_pre_hook(lambda _m, a: got.__setitem__("mid1", a[0])),
        h[1].ln_1.register_forward_hook(lambda _m, _a, o: got.__setitem__("ln1_1", o)),
    ]
    try:
        with torch.no_grad():
            out = module(ids, output_hidden_states=True)
    finally:
        for k in hooks:
            k.remove()
    return out, got


def test_every_name_transformer_lens_returns(cache):
    assert set(TL_NAMES) <= set(cache.keys())
    assert cache.n_records == len(RECORDS)


def test_shapes_are_transformer_lens(cache, gpt2):
    R, T = len(RECORDS), int(cache.lengths.max())
    for hook in ("attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z", "attn.o.hook_in",
                 "attn.q.hook_out"):  # fmt: skip
        assert cache[f"blocks.1.{hook}"].shape == (R, T, HEADS, D_HEAD), hook
    assert cache["blocks.0.ln1.hook_scale"].shape == (R, T, 1)
    assert cache["ln_final.hook_scale"].shape == (R, T, 1)
    assert cache["blocks.0.attn.hook_pattern"].shape == (R, HEADS, T, T)
    assert cache["blocks.0.mlp.hook_post"].shape == (R, T, 4 * WIDTH)
    assert cache["hook_unembed"].shape == (R, T, gpt2[0].config.vocab_size)
    # the default: units, as dl.inspect reads them
    module, tok = gpt2
    flat = dl.activations(dl.Model.from_hf(module, tok), RECORDS, ["blocks.1.attn.hook_z"])
    assert flat["blocks.1.attn.hook_z"].shape == (R, T, HEADS * D_HEAD)


def test_values_match_hugging_face(cache, gpt2):
    module, tok = gpt2
    for r, record in enumerate(RECORDS):
        out, got = alone(module, tok, record)
        n = int(cache.lengths[r])
        hs = out.hidden_states
        torch.testing.assert_close(cache["blocks.0.hook_resid_pre"][r, :n], hs[0][0], atol=TOL,
                                   rtol=TOL)  # fmt: skip
        torch.testing.assert_close(cache["blocks.1.hook_resid_pre"][r, :n], hs[1][0], atol=TOL,
                                   rtol=TOL)  # fmt: skip
        # hidden_states[-1] is after ln_f: the last block's output is ln_final's input
        x = cache["ln_final.hook_in"][r, :n]
        ln_f = module.transformer.ln_f
        with torch.no_grad():
            torch.testing.assert_close(ln_f(x), hs[-1][0], atol=TOL, rtol=TOL)
        torch.testing.assert_close(cache["hook_unembed"][r, :n], out.logits[0], atol=1e-4,
                                   rtol=1e-4)  # fmt: skip
        z = got["z0"][0].reshape(n, HEADS, D_HEAD)
        torch.testing.assert_close(cache["blocks.0.attn.hook_z"][r, :n], z, atol=TOL, rtol=TOL)
        torch.testing.assert_close(cache["blocks.1.hook_resid_mid"][r, :n], got["mid1"][0],
                                   atol=TOL, rtol=TOL)  # fmt: skip
        # the LayerNorm's scale and normalized input, by hand from its input
        x1 = hs[1][0]
        c = x1 - x1.mean(-1, keepdim=True)
        scale = (c.pow(2).mean(-1, keepdim=True) + module.transformer.h[1].ln_1.eps).sqrt()
        torch.testing.assert_close(cache["blocks.1.ln1.hook_scale"][r, :n], scale, atol=TOL,
                                   rtol=TOL)  # fmt: skip
        torch.testing.assert_close(cache["blocks.1.ln1.hook_normalized"][r, :n], c / scale,
                                   atol=1e-4, rtol=1e-4)  # fmt: skip
        torch.testing.assert_close(cache["blocks.1.attn.hook_in"][r, :n], got["ln1_1"][0],
                                   atol=TOL, rtol=TOL)  # fmt: skip
        assert not cache["blocks.0.hook_resid_post"][r, n:].any()  # padding stays 0


def test_aliases_share_storage(cache):
    """A value held under several names is one tensor: no copies."""
    same = [
        ("blocks.0.hook_resid_post", "blocks.0.hook_out", "blocks.1.hook_resid_pre"),
        ("blocks.1.ln1.hook_in", "blocks.1.hook_in"),
        ("blocks.0.attn.hook_z", "blocks.0.attn.o.hook_in"),
        ("hook_unembed", "unembed.hook_out"),
        ("blocks.0.mlp.hook_in", "blocks.0.ln2.hook_out", "blocks.0.mlp.in.hook_in"),
    ]
    for names in same:
        ptrs = {cache[n].data_ptr() for n in names}
        assert len(ptrs) == 1, names


def test_tuple_keys_and_other_names(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok)
    c = dl.activations(model, RECORDS[:2], ["blocks.*.hook_resid_post"])
    assert c["resid_post", 1] is c["blocks.1.hook_resid_post"]
    assert c["blocks.1.hook_out"] is c["blocks.1.hook_resid_post"]  # a bridge name, not asked
    assert c.to("cpu") is c
    with pytest.raises(KeyError, match="hook_resid_mid"):
        c["resid_mid", 0]


def test_stack_and_accumulated_resid(cache):
    n = N_BLOCKS
    stacked = cache.stack("resid_post")
    assert stacked.shape[0] == n
    torch.testing.assert_close(stacked[1], cache["blocks.1.hook_resid_post"])
    acc, labels = cache.accumulated_resid(return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"]
    torch.testing.assert_close(acc[2], cache["blocks.1.hook_resid_post"])
    acc, labels = cache.accumulated_resid(1, incl_mid=True, mlp_input=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid"]
    torch.testing.assert_close(acc[3], cache["blocks.1.hook_resid_mid"])


def test_decompose_resid_sums_to_the_stream(cache):
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    torch.testing.assert_close(parts.sum(0), cache["blocks.1.hook_resid_post"], atol=1e-4,
                               rtol=1e-4)  # fmt: skip
    attn = cache.decompose_resid(1, mlp_input=True, mode="attn")
    assert attn.shape[0] == 2 + 2  # embeds, block 0's and block 1's attention


def test_apply_ln_to_stack_is_the_norms_input_scaled(cache, gpt2):
    module = gpt2[0]
    ln = module.transformer.h[1].ln_1
    acc = cache.accumulated_resid(1, apply_ln=True)  # scaled by block 1's ln1
    # the last part is block 1's input: with the norm's weight and bias, ln1's output
    with torch.no_grad():
        got = _masked(cache, acc[-1] * ln.weight + ln.bias)
    torch.testing.assert_close(got, _masked(cache, cache["blocks.1.ln1.hook_out"]), atol=1e-4,
                               rtol=1e-4)  # fmt: skip
    # at the unembed: the final norm recomputed on each part (TransformerLens's logit lens)
    final = cache.accumulated_resid(apply_ln=True)
    with torch.no_grad():  # (padding: the norm's bias there, 0 in the cache)
        torch.testing.assert_close(_masked(cache, final[-1]), cache["ln_final.hook_out"],
                                   atol=1e-4, rtol=1e-4)  # fmt: skip
    # decomposed parts scaled by the final norm's cached scale sum to its normalized input
    parts = cache.decompose_resid(apply_ln=True)
    torch.testing.assert_close(parts.sum(0), cache["ln_final.hook_normalized"], atol=1e-4,
                               rtol=1e-4)  # fmt: skip
    assert torch.isfinite(parts).all()  # padding (scale 0) stays 0, no 0 / 0


def _masked(cache, t):
    """``t`` with the cache's padding slots set to 0."""
    real = torch.arange(t.shape[1])[None, :] < cache.lengths[:, None]
    return t * real[..., None]


def test_bad_input_fails_before_any_forward(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok)

    def hooks():
        return [(len(m._forward_hooks), len(m._forward_pre_hooks)) for m in module.modules()]

    before = hooks()
    calls = []
    hook = module.register_forward_pre_hook(lambda *_: calls.append(1))
    attn = module.config._attn_implementation
    try:
        with pytest.raises(LayerError, match="hook_resid_post"):
            dl.activations(model, RECORDS, "blocks.*.hook_resid_postt")
        with pytest.raises(LayerError, match="selects none"):
            dl.activations(model, RECORDS, lambda name: name.endswith("hook_nothing"))
        with pytest.raises(DNIError, match="stop_at_layer must be a block from 0 to 1"):
            dl.activations(model, RECORDS, ["blocks.0.hook_resid_post"], stop_at_layer=2)
        with pytest.raises(DNIError, match="shapes"):
            dl.activations(model, RECORDS, ["blocks.0.hook_resid_post"], shapes="tl")
    finally:
        hook.remove()
    assert calls == []
    assert module.config._attn_implementation == attn
    assert hooks() == before  # the model left as it was


def test_a_second_call_reuses_its_plan(gpt2, monkeypatch):
    from dni_lab.backend.extraction import activations as acts

    module, tok = gpt2
    model = dl.Model.from_hf(module, tok)
    names = ["blocks.0.hook_resid_post", "blocks.0.attn.hook_pattern"]
    first = dl.activations(model, RECORDS, names)
    planned = []
    real = acts._plan
    monkeypatch.setattr(acts, "_plan", lambda *a: planned.append(1) or real(*a))
    again = dl.activations(model, RECORDS, names)
    assert planned == []
    torch.testing.assert_close(again[names[0]], first[names[0]])
    torch.testing.assert_close(again[names[1]], first[names[1]])
    dl.activations(model, RECORDS, names[:1])  # other names: a plan of their own
    assert planned == [1]


def test_logit_attrs_with_and_without_the_final_scale(cache, gpt2):
    """The parts' attributions (+ the final norm's bias) sum to the logit; apply_ln=False
    is the same without the division by the cached scale."""
    module = gpt2[0]
    tok = 7
    parts = cache.decompose_resid()
    attrs = cache.logit_attrs(parts, tok)  # apply_ln=True: TransformerLens's default
    assert attrs.shape == parts.shape[:-1]
    with torch.no_grad():
        bias = module.transformer.ln_f.bias @ module.lm_head.weight[tok]
    real = torch.arange(parts.shape[2])[None, :] < cache.lengths[:, None]
    logits = cache["hook_unembed"][..., tok]
    torch.testing.assert_close((attrs.sum(0) + bias)[real], logits[real], atol=1e-4, rtol=1e-4)
    raw = cache.logit_attrs(parts, tok, apply_ln=False)
    scale = cache["ln_final.hook_scale"][..., 0]
    torch.testing.assert_close((raw / scale)[:, real], attrs[:, real], atol=1e-4, rtol=1e-4)
    diff = cache.logit_attrs(parts, [tok] * len(RECORDS), incorrect_tokens=[3] * len(RECORDS))
    assert diff.shape == attrs.shape


def test_kept_plans_neither_keep_the_model_alive_nor_travel(gpt2):
    import gc
    import pickle
    import weakref

    module, tok = gpt2
    model = dl.Model.from_hf(module, tok)
    dl.activations(model, RECORDS[:2], ["blocks.0.hook_resid_post"])
    assert len(vars(model)["_activation_plans"]) == 1
    assert len(pickle.loads(pickle.dumps(vars(model)["_activation_plans"]))) == 0
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
