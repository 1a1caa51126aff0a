"""``dl.activations``: names in, per-symbol activations out, equal to hand-written hooks.

A tiny GPT-2 (built from a config) read by TransformerLens names, nnsight paths and module
paths; a plain LSTM model read through its layout. Every value is compared with a forward
hook written by hand on the record run alone; the model must come back exactly as it was.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.errors import LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import corpus, tiny_gpt2  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

RECORDS = corpus(13, seed=3)
#: the tiny GPT-2's longest dot product (its 4 x 32 MLP): float32 tolerances scale with it
FFN = 128


@pytest.fixture(scope="module")
def gpt2():
    module, tok = tiny_gpt2(RECORDS, vocab_size=280, n_layer=2)
    return module, tok, dl.Model.from_hf(module, tok, name="g")


def by_hand(module, tok, record: str, sub: nn.Module, read_input: bool = False) -> torch.Tensor:
    """``sub``'s output (or first input) for ``record`` run alone: ``(tokens, D)``."""
    seen = []
    if read_input:
        h = sub.register_forward_pre_hook(lambda _m, a: seen.append(a[0].detach().clone()))
    else:
        h = sub.register_forward_hook(
            lambda _m, _a, out: seen.append((out[0] if isinstance(out, tuple) else out).clone())
        )
    try:
        with torch.inference_mode():
            module(**tok(record, return_tensors="pt"))
    finally:
        h.remove()
    return seen[0][0]


def state(module: nn.Module) -> tuple:
    """Everything a read must leave as it was: modes, hooks, tensors (bitwise), grads."""
    modes = tuple(m.training for m in module.modules())
    hooks = tuple(
        (len(m._forward_hooks), len(m._forward_pre_hooks)) for m in module.modules()
    )
    tensors = [t.detach().clone() for t in list(module.parameters()) + list(module.buffers())]
    flags = tuple(p.requires_grad for p in module.parameters())
    dev = tuple(t.device for t in tensors)
    return modes, hooks, tensors, flags, dev


def assert_same_state(a: tuple, b: tuple) -> None:
    assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3] and a[4] == b[4]
    assert all(torch.equal(x, y) for x, y in zip(a[2], b[2], strict=True))


def test_tl_names_and_nnsight_paths_equal_hand_hooks(gpt2):
    module, tok, m = gpt2
    names = ["blocks.1.hook_resid_post", "transformer.h.0.mlp", "blocks.0.attn.hook_z"]
    cache = dl.activations(m, RECORDS, names, block_size=5, device="cpu")
    assert cache.names == names and cache.n_records == len(RECORDS)
    assert cache.addresses["blocks.1.hook_resid_post"] == "transformer.h.1"
    h = module.transformer.h
    subs = {
        names[0]: (h[1], False),
        names[1]: (h[0].mlp, False),
        names[2]: (h[0].attn.c_proj, True),  # hook_z: the out projection's input
    }
    for name, (sub, inp) in subs.items():
        got = cache[name]
        assert got.shape[:2] == (len(RECORDS), int(cache.lengths.max()))
        for r, rec in enumerate(RECORDS):
            want = by_hand(module, tok, rec, sub, inp)
            n = int(cache.lengths[r])
            assert n == m.symbols(rec) == want.shape[0]  # the BPE adds no special tokens
            assert_close_f32(cache.record(r, name), want, reduction=FFN)
            assert not got[r, n:].any()  # padding is 0
    # the address reads the same tensor as the name it came from
    assert torch.equal(cache["transformer.h.1"], cache["blocks.1.hook_resid_post"])


def test_frames_are_the_tensors_long(gpt2):
    _module, _tok, m = gpt2
    cache = dl.activations(m, RECORDS[:4], [("blocks.0.hook_resid_post", [3, 1])], device="cpu")
    f = cache.frame("blocks.0.hook_resid_post")
    assert f.columns == ["record", "symbol", "unit", "value"]
    assert f.height == int(cache.lengths.sum()) * 2
    t = cache["blocks.0.hook_resid_post"]
    for row in f.sample(10, seed=0).iter_rows(named=True):
        col = [3, 1].index(row["unit"])
        assert row["value"] == t[row["record"], row["symbol"], col].item()
    full = dl.activations(m, RECORDS[:4], ["blocks.0.hook_resid_post"], device="cpu")
    assert torch.equal(t, full["blocks.0.hook_resid_post"][..., [3, 1]])
    both = full.to_polars()
    assert both["name"].unique().to_list() == ["blocks.0.hook_resid_post"]
    assert both.drop("name").equals(full.frame("blocks.0.hook_resid_post"))


def test_streamed_blocks_equal_one_cache(gpt2):
    _module, _tok, m = gpt2
    name = "blocks.1.hook_resid_post"
    # the same blocks: the same forward passes, bitwise (other block sizes pad differently)
    whole = dl.activations(m, RECORDS, [name], block_size=4, device="cpu")
    gen = dl.activations(m, iter(RECORDS), [name], block_size=4, device="cpu", stream=True)
    blocks = list(gen)
    assert [b.first for b in blocks] == [0, 4, 8, 12]
    assert [b.n_records for b in blocks] == [4, 4, 4, 1]
    for b in blocks:
        for i in range(b.n_records):
            assert torch.equal(b.record(i, name), whole.record(b.first + i, name))
    frames = pl.concat([b.frame(name) for b in blocks])
    assert frames.equals(whole.frame(name))


def test_the_forward_pass_stops_after_the_last_needed_block(gpt2):
    module, _tok, m = gpt2
    calls = []
    h = module.transformer.h[1].register_forward_hook(lambda *a: calls.append(1))
    try:
        dl.activations(m, RECORDS[:3], ["blocks.0.hook_resid_post"], device="cpu")
        assert calls == []  # block 1 never ran
        dl.activations(m, RECORDS[:3], ["blocks.1.hook_resid_post"], device="cpu")
        assert calls == [1]
    finally:
        h.remove()


def test_the_model_is_left_as_found_also_on_error(gpt2):
    module, _tok, m = gpt2
    module.train()
    module.transformer.h[0].eval()  # mixed modes must come back mixed
    module.transformer.wte.weight.requires_grad_(False)
    try:
        before = state(module)
        dl.activations(m, RECORDS[:3], ["blocks.1.hook_resid_post"], device="cpu")
        assert_same_state(before, state(module))
        with pytest.raises(LayerError, match="blocks.7"):
            dl.activations(m, RECORDS[:3], ["blocks.7.hook_resid_post"], device="cpu")
        assert_same_state(before, state(module))

        def bad(_m, _a, _o):
            raise RuntimeError("boom")

        h = module.transformer.h[0].mlp.register_forward_hook(bad)
        try:
            with pytest.raises(RuntimeError, match="boom"):
                dl.activations(m, RECORDS[:3], ["blocks.1.hook_resid_post"], device="cpu")
        finally:
            h.remove()
        assert_same_state(before, state(module))
        gen = dl.activations(m, RECORDS, ["blocks.0.hook_resid_post"], block_size=2,
                             device="cpu", stream=True)  # fmt: skip
        next(gen)
        assert_same_state(before, state(module))  # between blocks: as the caller left it
        gen.close()
    finally:
        module.eval()
        module.transformer.wte.weight.requires_grad_(True)


def test_a_plain_model_by_its_layout():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(12, 6), nn.LSTM(6, 5, batch_first=True))
    records = ["0123", "45", "9876543", "1"]

    def enc(recs):
        T = max(len(r) for r in recs)
        return torch.tensor([[int(c) for c in r] + [0] * (T - len(r)) for r in recs])

    m = dl.Model(net, encode=enc, symbols=len, name="lstm")
    cache = dl.activations(m, records, ["1"], device="cpu", block_size=3)
    assert cache.lengths.tolist() == [4, 2, 7, 1]
    for r, rec in enumerate(records):
        with torch.inference_mode():
            want = net(enc([rec]))[0][0]
        assert_close_f32(cache.record(r, "1"), want, reduction=6)


def test_bad_arguments_are_named(gpt2):
    _module, _tok, m = gpt2
    with pytest.raises(LayerError, match="no names"):
        dl.activations(m, RECORDS, [])
    with pytest.raises(dl.DNIError, match="no records"):
        dl.activations(m, [], ["blocks.0.hook_resid_post"], device="cpu")
    with pytest.raises(dl.DNIError, match="block_size"):
        dl.activations(m, RECORDS, ["blocks.0.hook_resid_post"], block_size=0)
    cache = dl.activations(m, RECORDS[:2], ["blocks.0.hook_resid_post"], device="cpu")
    with pytest.raises(KeyError, match="blocks.0.hook_resid_post"):
        cache["blocks.1.hook_resid_post"]
    assert np.array_equal(cache.units["blocks.0.hook_resid_post"], np.arange(32))
