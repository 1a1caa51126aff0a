"""The tiny transformer: data, tuple-returning blocks, quick training and the cache."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import assert_served_from_store

from hypotheses.workloads import transformer as tr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DNI_LAB_MODELS", str(path))
        start = time.perf_counter()
        module, encode, meta = tr.load(quick=True)
        yield module, encode, meta, time.perf_counter() - start


def test_generated_strings_are_balanced_and_labelled() -> None:
    strings, depths = tr.generate(200, seed=1)
    assert strings == tr.generate(200, seed=1)[0]
    for s, d in zip(strings, depths, strict=True):
        assert 8 <= len(s) <= 24 and len(d) == len(s)
        depth = 0
        for ch, label in zip(s, d, strict=True):
            depth += (ch == "(") - (ch == ")")
            assert label == depth and 0 <= depth <= 4
        assert depth == 0


def test_encode_pads_on_the_right() -> None:
    ids = tr.encode(["(a)", "()"])
    assert ids.tolist() == [[1, 3, 2], [1, 2, 0]]
    with pytest.raises(ValueError, match="max_len"):
        tr.encode(["(" * 40])


def test_quick_model_tracks_depth(trained) -> None:
    _, _, meta, _ = trained
    # stated accuracy: >= 0.95 per character; the most frequent depth is about 0.34
    assert meta["majority_rate"] < 0.5
    assert meta["accuracy"] >= 0.95


def test_blocks_return_tuples_and_the_model_a_tensor(trained) -> None:
    module, encode, _, _ = trained
    seen = {}
    hook = module.blocks[0].register_forward_hook(lambda m, i, o: seen.setdefault("out", o))
    with torch.no_grad():
        logits = module(encode(["(a(b)c)", "()"]))
    hook.remove()
    hidden, weights = seen["out"]
    assert isinstance(seen["out"], tuple)
    assert hidden.shape == (2, 7, 32) and weights.shape == (2, 2, 7, 7)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 7))
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))  # causal
    assert logits.shape == (2, 7, 5)
    assert logits[0].argmax(-1).tolist() == [1, 1, 2, 2, 1, 1, 0]
    # causal: a longer batch-mate (more padding) does not change a record's outputs
    with torch.no_grad():
        alone = module(encode(["()"]))
    assert torch.allclose(alone[0], logits[1, :2], atol=1e-5)


def test_second_load_hits_the_cache(trained, monkeypatch) -> None:
    module, _, meta, first_seconds = trained
    monkeypatch.setattr(tr, "_train", lambda *a: pytest.fail("retrained a cached model"))
    meta2 = assert_served_from_store(lambda: tr.load(quick=True), module, first_seconds)
    assert meta2["sha256"] == meta["sha256"]
