"""``bench_hf_depth.py --peers``' side process, on a tiny GPT-2 (the peers themselves are not
installed here: their sides run only where ``.dni_cache/peers-venv`` exists)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from benchmarks import hf_peers_side as side
from benchmarks.bench_hf_depth import WORDS, records
from hypotheses.workloads.hf_tokenizers import bpe


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """A saved 4-block GPT-2, its tokenizer and a data.json, as the parent writes them."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    path = tmp_path_factory.mktemp("peers-bench")
    tok = bpe(records(50, 32, seed=1), vocab_size=300)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=512, n_positions=1024, n_embd=32, n_layer=4, n_head=2,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    GPT2LMHeadModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    rng = np.random.default_rng(0)
    mixed = [" ".join(rng.choice(WORDS, int(k))) for k in rng.integers(4, 120, 24)]
    data = {"uniform": records(8, 32), "mixed": mixed, "batch": 4, "repeats": 1}
    (path / "data.json").write_text(json.dumps(data))
    return path


def test_ours_pads_less_than_record_order_and_reports_every_workload(where):
    bare = side.main("bare", where)
    ours = side.main("ours", where)
    for r in (bare, ours):
        assert {"seconds_block3", "seconds_all", "seconds_mixed", "rss_peak_mb"} <= set(r)
        assert r["rss_peak_mb"] >= r["rss_loaded_mb"] > 0
    # the bare side pads each batch of 4 in record order; dni_lab sorts the block by length
    assert bare["padding_waste_mixed"] > 0.2
    assert ours["padding_waste_mixed"] < bare["padding_waste_mixed"] / 2


def test_waste_counts_padded_slots():
    import torch

    enc = {"attention_mask": torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])}
    assert side.waste([enc]) == pytest.approx(3 / 8)
