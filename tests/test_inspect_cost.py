"""Inspection at the cost of the forward (issue 49, item 2): the bookkeeping around the
forward pass does less, and every score stays what it was.

A block's layers share one symbol layout (its flat slots are computed once per batch),
the extractor finds the padding slots once per batch, and ``corr`` adds its float32
runs into float64 in one cumulative sum. Each is checked here against the computation
it replaced, bit for bit.
"""

from __future__ import annotations

import pytest
import torch

import dni_lab as dl
from dni_lab.backend.extraction.extract import Extractor, _check_finite, symbol_mask
from dni_lab.backend.hf import HFModel
from dni_lab.backend.hf.encoding import token_layout

transformers = pytest.importorskip("transformers")
from hypotheses.workloads import parens  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

RECORDS = parens.records(40, seed=5)


@pytest.fixture(scope="module")
def gpt2():
    tok = bpe(RECORDS, vocab_size=256 + 32, bos=True)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=3,
                                  n_head=2, bos_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id)  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval(), tok


def test_flat_slots_are_computed_once_and_read_what_indexing_reads():
    keep = torch.tensor([[False, True, True, True], [False, True, False, False]])
    lay = token_layout(keep)
    flat, tail = lay.flat_slots(4, torch.device("cpu"))
    again = lay.flat_slots(4, torch.device("cpu"))
    assert again[0] is flat and again[1] is tail  # one computation per batch
    t = torch.randn(2, 4, 3)
    ref = t[lay.rows.expand_as(lay.index), lay.index]  # advanced indexing, the old way
    ref[1, 1:] = 0  # record 1 holds one symbol: its tail slots read zeros
    from dni_lab.backend.hf.encoding import gather

    assert torch.equal(gather(t, lay, 4, ()), ref)
    assert tail.tolist() == [4, 5]  # slots 1 and 2 of record 1 (3 slots per record)


@pytest.mark.parametrize("side", ["left", "right"])
def test_every_layer_of_a_block_is_its_hidden_state_exactly(gpt2, side):
    module, tok = gpt2
    tok.padding_side = side
    m = HFModel(module, tok, name="g")
    addrs = [f"transformer.h.{k}" for k in range(3)]
    mask = symbol_mask(m, RECORDS[:9], torch.device("cpu"))
    got = Extractor(m, dict.fromkeys(addrs), "activation", torch.device("cpu"))(RECORDS[:9], mask)
    enc = tok(RECORDS[:9], padding=True, return_tensors="pt", return_special_tokens_mask=True)
    keep = enc["attention_mask"].bool() & ~enc.pop("special_tokens_mask").bool()
    enc["position_ids"] = (enc["attention_mask"].cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        hs = module.transformer(**enc, output_hidden_states=True).hidden_states
    for k, a in enumerate(addrs[:2]):  # the last block's hidden state is after ln_f
        n = mask.sum(1)
        for r in range(len(n)):
            assert torch.equal(got[a][r, : n[r]], hs[k + 1][r][keep[r]])
            assert not bool(got[a][r, n[r] :].any())  # padding slots hold zeros


def test_padding_slots_found_once_mask_as_before():
    model = dl.Model(torch.nn.Linear(2, 2), encode=lambda r: r, name="m")
    mask = torch.tensor([[True, True, True], [True, False, False]])
    pad = (~mask).reshape(-1).nonzero().flatten()
    act = torch.ones(2, 3, 4)
    out = _check_finite(act, model, "x", mask, pad=pad)  # padding not zero: a masked copy
    assert out is not act and bool((out[1, 1:] == 0).all()) and bool((out[0] == 1).all())
    act = act.masked_fill(~mask[..., None], 0.0)
    assert _check_finite(act, model, "x", mask, pad=pad) is act  # zeros already: no copy
    view = torch.ones(2, 4, 3).transpose(1, 2)  # not contiguous: read without a copy
    assert bool((_check_finite(view, model, "x", mask)[1, 1:] == 0).all())
    act[1, 0, 3] = float("nan")
    with pytest.raises(dl.BehaviorError, match="unit 3, symbol 0 of record 1"):
        _check_finite(act, model, "x", mask, pad=pad)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cumulative_sum_adds_runs_as_one_addition_after_another(threads):
    # corr relies on it: its float64 co-moments must not move by one bit
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(threads)
        for n in (2, 3, 17, 40):
            runs = torch.randn(n, 700, 5, generator=gen) * 10 ** torch.randn(n, 700, 5,
                                                                           generator=gen)
            one_by_one = torch.zeros(700, 5, dtype=torch.float64)
            for r in range(n):
                one_by_one.add_(runs[r])
            at_once = torch.zeros(700, 5, dtype=torch.float64)
            at_once.add_(torch.cumsum(runs, 0, dtype=torch.float64)[-1])
            assert torch.equal(one_by_one, at_once)
    finally:
        torch.set_num_threads(before)
