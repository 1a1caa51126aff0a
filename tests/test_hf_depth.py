"""Extraction computes only what the question needs: units that end at block k run
blocks <= k only, never the LM head; values equal a full forward pass's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import padded_tok, tiny_gpt2  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "insert", "into", "values", "b", "where"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(2 + i % 7)) for i in range(24)]


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(RECORDS, vocab_size=280, n_layer=4)


@dl.hypothesis(kind="binary")
def has_a(record: str) -> list[bool]:
    return [c == "a" for c in record]


def calls_of(module: torch.nn.Module, where: list[torch.nn.Module]):
    counts = [0] * len(where)
    handles = [m.register_forward_pre_hook(lambda *_a, i=i: counts.__setitem__(i, counts[i] + 1))
               for i, m in enumerate(where)]  # fmt: skip
    return counts, handles


@pytest.mark.parametrize("units", [
    [("blocks.1.hook_resid_post", "*")],
    [("blocks.0.mlp.hook_post", [0, 5]), ("blocks.1.attn.hook_z", "*")],
    [("blocks.1.hook_resid_mid", "*")],
])  # fmt: skip
def test_units_in_block_1_never_run_block_2_or_the_head(gpt2, units):
    module, tok = gpt2
    frames = []
    for stop in (True, False):
        m = HFModel(module, tok, name="g")
        m.stop_early = stop
        m.layer_widths(RECORDS[:2], "cpu")  # the one probe pass of a model runs it all
        counts, handles = calls_of(module, [module.transformer.h[2], module.lm_head])
        try:
            frames.append(dl.inspect(m, [has_a], data=RECORDS, units=units, eps=None,
                                     block_size=8, cache=False).sort("uid"))
        finally:
            for h in handles:
                h.remove()
        if stop:
            assert counts == [0, 0]
        else:
            assert counts[0] >= len(RECORDS) // 8
    np.testing.assert_array_equal(frames[0]["unit_score"], frames[1]["unit_score"])


def test_a_module_called_twice_keeps_the_full_pass(gpt2):
    """A shared module (called by two blocks) is read at its last call, as before."""
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    m.layer_widths(RECORDS[:2], "cpu")
    assert m._repeated == set()
    m._repeated = {"transformer.h.0.mlp"}  # as if the probe had seen it twice
    counts, handles = calls_of(module, [module.lm_head])
    try:
        with m.capture(["transformer.h.0.mlp"]), torch.inference_mode():
            out = m.forward(m.encode(RECORDS[:2]))
    finally:
        for h in handles:
            h.remove()
    assert counts == [1] and out is not None


@pytest.mark.parametrize("side", ["left", "right"])
def test_gathered_padding_slots_hold_zeros_and_real_ones_the_hidden_state(gpt2, side):
    """The extractor returns the gathered tensor without a masked copy: its tail is zero."""
    from dni_lab.backend.extraction.extract import _check_finite

    module, tok = gpt2
    m = HFModel(module, padded_tok(tok, side), name="g")
    recs = [RECORDS[6], RECORDS[0]]  # 8 words and 2
    with m.capture(["transformer.h.1"]) as store, torch.inference_mode():
        m.forward(m.encode(recs))
        got = store["transformer.h.1"]
    enc = tok(recs, padding=True, return_tensors="pt")
    enc["position_ids"] = (enc["attention_mask"].cumsum(1) - 1).clamp(min=0)  # as left padding
    with torch.inference_mode():
        ref = module.transformer(**enc, output_hidden_states=True).hidden_states[2]
    n = [m.symbols(r) for r in recs]
    assert n[0] > n[1] and got.shape[1] == n[0]
    assert bool((got[1, n[1] :] == 0).all())
    keep = enc["attention_mask"].bool()
    for r in range(2):
        torch.testing.assert_close(got[r, : n[r]], ref[r][keep[r]], atol=1e-5, rtol=1e-5)
    mask = torch.arange(n[0])[None, :] < torch.tensor(n)[:, None]
    assert _check_finite(got, m, "transformer.h.1", mask) is got  # zeros already: no copy


def test_check_finite_masks_padding_and_names_a_non_finite_symbol():
    from dni_lab.backend.extraction.extract import _check_finite

    model = dl.Model(torch.nn.Linear(2, 2), encode=lambda r: r, name="m")
    mask = torch.tensor([[True, True, True], [True, False, False]])
    act = torch.ones(2, 3, 4)
    out = _check_finite(act, model, "x", mask)  # padding not zero: a masked copy
    assert out is not act and bool((out[1, 1:] == 0).all()) and bool((out[0] == 1).all())
    act[1, 2, 0] = float("nan")  # at padding: masked away
    assert bool(torch.isfinite(_check_finite(act, model, "x", mask)).all())
    act[1, 0, 3] = float("inf")  # at a symbol: named
    with pytest.raises(dl.BehaviorError, match="unit 3, symbol 0 of record 1"):
        _check_finite(act, model, "x", mask)


def test_selected_units_in_and_out_of_order(gpt2):
    """Every unit in order is returned as gathered; a subset is a copy of those columns."""
    from dni_lab.backend.extraction.extract import Extractor, symbol_mask

    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    mask = symbol_mask(m, RECORDS[:4], torch.device("cpu"))
    every = Extractor(m, {"transformer.h.1": np.arange(32)}, "activation", "cpu")(RECORDS[:4], mask)
    some = Extractor(m, {"transformer.h.1": np.array([5, 2, 31])}, "activation", "cpu")(
        RECORDS[:4], mask
    )
    assert every["transformer.h.1"].shape[-1] == 32
    torch.testing.assert_close(some["transformer.h.1"], every["transformer.h.1"][..., [5, 2, 31]])


def test_the_forward_pass_builds_no_key_value_cache(gpt2):
    module, tok = gpt2
    m = HFModel(module, tok, name="g")
    with torch.inference_mode():
        out = m.forward(m.encode(RECORDS[:2]))
    assert out is not None and out.past_key_values is None
    with torch.inference_mode():  # the module's own default builds one
        assert module(**tok(RECORDS[:2], padding=True, return_tensors="pt")).past_key_values
