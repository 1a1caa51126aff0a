"""Encoder-decoder models (T5, BART): the encoder by default, the decoder under
``decoder_input="same"``; values against hand-written forward hooks."""

from __future__ import annotations

import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import padded_tok  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import wordpiece  # noqa: E402
from tests.test_hf_long import CPU, acts, corpus, keyword  # noqa: E402

#: the longest dot product of the tiny T5 and BART (d_ff): float32 tolerances scale with it
FFN = 32


@pytest.fixture(scope="module")
def tok():
    return wordpiece(corpus(200, seed=1), vocab_size=120)


def tiny_t5(tok, cls=None):
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        vocab_size=len(tok), d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=2,
        pad_token_id=tok.pad_token_id, decoder_start_token_id=tok.pad_token_id,
    )
    return (cls or transformers.T5ForConditionalGeneration)(cfg).eval()


def tiny_bart(tok):
    torch.manual_seed(0)
    cfg = transformers.BartConfig(
        vocab_size=len(tok), d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
        decoder_start_token_id=tok.sep_token_id,
    )
    return transformers.BartModel(cfg).eval()


def by_hand(module, tok, record: str, address: str, decoder: bool) -> torch.Tensor:
    """One record, no padding: the module's output at the record's non-special tokens."""
    enc = tok(record, return_tensors="pt", return_special_tokens_mask=True)
    ids = enc["input_ids"]
    start = module.config.decoder_start_token_id
    dec = torch.cat([torch.tensor([[start]]), ids], 1)
    seen = {}

    def keep(_m, _i, out) -> None:
        seen.setdefault("x", out[0] if isinstance(out, tuple) else out)

    hook = module.get_submodule(address).register_forward_hook(keep)
    try:
        with torch.no_grad():
            module(input_ids=ids, attention_mask=enc["attention_mask"], decoder_input_ids=dec)
    finally:
        hook.remove()
    real = ~enc["special_tokens_mask"][0].bool()
    x = seen["x"][0]
    # decoder position t + 1 reads token t: its symbol is token t
    return x[1:][real] if decoder else x[real]


@pytest.mark.parametrize("arch,side", [("t5", "right"), ("t5", "left"), ("bart", "right")])
def test_both_stacks_match_hand_hooks(tok, arch, side):
    tok = padded_tok(tok, side)  # the encoder's side; the decoder always pads right
    module = tiny_t5(tok) if arch == "t5" else tiny_bart(tok)
    blocks = ("encoder.block", "decoder.block") if arch == "t5" else (
        "encoder.layers", "decoder.layers")
    model = HFModel(module, tok, name=arch, decoder_input="same")
    assert model.positional_layers() == [f"{blocks[0]}.0", f"{blocks[0]}.1"]
    assert model.resolve_layer("decoder.blocks.1.hook_resid_post") == f"{blocks[1]}.1"
    records = corpus(6, seed=3)
    for address, decoder in ((f"{blocks[0]}.1", False), (f"{blocks[1]}.1", True),
                             (f"{blocks[1]}.0", True)):
        got = acts(model, address, records)
        for r, rec in enumerate(records):
            want = by_hand(module, tok, rec, address, decoder)
            assert want.shape[0] == model.symbols(rec)
            assert_close_f32(got[r, : want.shape[0]], want, reduction=FFN)
    # decoder symbols are the record's tokens: hypotheses pool onto them end to end
    f = dl.inspect(model, [keyword], data=corpus(8), eps=None, cache=False,
                   units=[(f"{blocks[1]}.1", "*")])
    assert f.height == 16 and f["unit_score"].is_not_null().sum() > 0


def test_encoder_by_default_and_decoder_errors(tok):
    t5 = tiny_t5(tok, transformers.T5Model)
    model = HFModel(t5, tok, name="t5")  # no decoder inputs: the encoder alone runs
    calls = []
    hook = t5.decoder.register_forward_hook(lambda *_: calls.append(1))
    try:
        f = dl.inspect(model, [keyword], data=corpus(8), eps=None, cache=False)
    finally:
        hook.remove()
    assert not calls and set(f["layer"]) == {"encoder.block.0", "encoder.block.1"}
    assert f.filter(pl.col("unit_score").is_not_null()).height > 0
    records = corpus(4, seed=5)
    got = acts(model, 1, records)
    for r, rec in enumerate(records):
        want = by_hand(t5, tok, rec, "encoder.block.1", False)
        assert_close_f32(got[r, : want.shape[0]], want, reduction=FFN)
    with pytest.raises(LayerError, match="decoder_input='same'"):
        dl.inspect(model, [keyword], data=corpus(4), cache=False,
                   units=[("decoder.block.0", "*")])
    with pytest.raises(LayerError, match="decoder_input='same'"):
        model.resolve_layer("decoder.blocks.0.hook_resid_post")
    with pytest.raises(DNIError, match="unknown decoder_input"):
        HFModel(t5, tok, decoder_input="labels")
    with pytest.raises(DNIError, match="stride"):
        HFModel(t5, tok, decoder_input="same", stride=4, max_length=32)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32)).eval()
    with pytest.raises(DNIError, match="encoder-decoder models"):
        HFModel(bert, tok, decoder_input="same")


def test_decoder_units_are_forced_at_their_symbols(tok):
    from dni_lab.backend.verify.force import force_units

    model = HFModel(tiny_t5(tok), tok, name="t5", decoder_input="same")
    records = corpus(4, seed=7)
    plain = acts(model, "decoder.block.1", records)
    n = torch.tensor([model.symbols(r) for r in records])
    pattern = torch.arange(plain.shape[0] * plain.shape[1] * 2, dtype=torch.float32)
    pattern = pattern.reshape(plain.shape[0], plain.shape[1], 2)
    with force_units(model, "decoder.block.0", [0, 1], pattern):
        forced0 = acts(model, "decoder.block.0", records)
        later = acts(model, "decoder.block.1", records)
    real = torch.arange(plain.shape[1])[None, :] < n[:, None]
    torch.testing.assert_close(forced0[..., :2][real], pattern[real])
    assert not torch.allclose(later[real], plain[real])  # the forcing reached the next block
    # encoder units alone never run the decoder (the pass stops after the encoder)
    calls = []
    hook = model.module.decoder.register_forward_hook(lambda *_: calls.append(1))
    try:
        plan = layer_plan(model, "encoder.block.1", records, CPU)
        ((addr, units),) = plan.layer_units.items()
        calls.clear()  # the probe pass runs every module
        with on_device(model, CPU):
            list(symbol_activations(model, records, addr, units, CPU))
    finally:
        hook.remove()
    assert not calls


def decoder_by_hand(module, tok, record: str, target: list[int], address: str) -> torch.Tensor:
    """The decoder block's output at positions 1.. when it reads ``[start] + target``."""
    enc = tok(record, return_tensors="pt")
    dec = torch.tensor([[module.config.decoder_start_token_id, *target]])
    seen = {}

    def keep(_m, _i, out) -> None:  # returns None: the block's output stays as it is
        seen.setdefault("x", out[0] if isinstance(out, tuple) else out)

    hook = module.get_submodule(address).register_forward_hook(keep)
    try:
        with torch.no_grad():
            module(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                   decoder_input_ids=dec)  # fmt: skip
    finally:
        hook.remove()
    return seen["x"][0, 1:]


@pytest.mark.parametrize("gives", ["ids", "text"])
def test_a_function_gives_the_decoder_its_own_tokens(tok, gives):
    """decoder_input=fn: the decoder reads fn(record) shifted right; symbol t is its token t."""
    module = tiny_t5(tok)
    words = lambda r: tok(r, add_special_tokens=False)["input_ids"]  # noqa: E731

    def backwards(record: str):  # one decoder token per symbol: the record's, reversed
        return words(record)[::-1] if gives == "ids" else " ".join(record.split()[::-1])

    model = HFModel(module, tok, name="t5", decoder_input=backwards)
    records = corpus(6, seed=4)
    got = acts(model, "decoder.block.1", records)
    same = acts(HFModel(module, tok, decoder_input="same"), "decoder.block.1", records)
    for r, rec in enumerate(records):
        if gives == "ids":
            want = decoder_by_hand(module, tok, rec, words(rec)[::-1], "decoder.block.1")
        else:  # a text runs with its special tokens; its other tokens are the symbols
            enc = tok(backwards(rec), return_special_tokens_mask=True)
            want = decoder_by_hand(module, tok, rec, enc["input_ids"], "decoder.block.1")
            want = want[~torch.tensor(enc["special_tokens_mask"], dtype=torch.bool)]
        n = model.symbols(rec)
        assert want.shape[0] == n
        assert_close_f32(got[r, :n], want, reduction=FFN)
    assert not torch.allclose(got, same)  # another decoder text, other values
    f = dl.inspect(model, [keyword], data=corpus(8), eps=None, cache=False,
                   units=[("decoder.block.1", "*")])
    assert f.height == 16 and f["unit_score"].is_not_null().sum() > 0


def test_a_function_with_another_token_count_is_named(tok):
    model = HFModel(tiny_t5(tok), tok, name="t5", decoder_input=lambda r: r + " a")
    with pytest.raises(DNIError, match="gives 4 decoder tokens for record 0.*has 3 symbols"):
        acts(model, "decoder.block.1", ["select a b"])
    mixed = HFModel(tiny_t5(tok), tok, decoder_input=lambda r: r if len(r) > 8 else [1, 2])
    with pytest.raises(DNIError, match="text \\(a string\\) or its token ids"):
        acts(mixed, "decoder.block.1", ["select a b", "a b"])
