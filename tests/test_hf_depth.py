"""Extraction computes only what the question needs: units that end at block k run
blocks <= k only, never the LM head; values equal a full forward pass's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import tiny_gpt2  # noqa: E402

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
