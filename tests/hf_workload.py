"""Tiny Hugging Face models and data the HF tests share (built from configs, no hub).

Import it after ``pytest.importorskip("transformers")``: it needs transformers.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import transformers

import dni_lab as dl
from hypotheses.workloads.hf_tokenizers import bpe, wordpiece

WORDS = ["select", "from", "where", "insert", "into", "values", "a", "b", "tab", "x1", "=", "1"]


def corpus(n: int, seed: int = 0, lo: int = 2, hi: int = 9) -> list[str]:
    """``n`` SQL-ish records of ``lo`` to ``hi - 1`` words."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(lo, hi)))) for _ in range(n)]


@dl.hypothesis(kind="binary", level="char")
def keyword(record: str) -> list[float]:
    out = np.zeros(len(record))
    for w in ("select", "from", "where"):
        i = record.find(w)
        while i >= 0:
            out[i : i + len(w)] = 1
            i = record.find(w, i + 1)
    return out


def tiny_gpt2(records: list[str], vocab_size: int = 300, n_layer: int = 2):
    """A GPT-2 of width 32 and 4 heads with a byte-level BPE trained on ``records``."""
    tok = bpe(records, vocab_size=vocab_size)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=n_layer, n_head=4,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval(), tok


def tiny_bert(records: list[str]):
    """A 2-layer BERT of width 32 with a WordPiece tokenizer trained on ``records``."""
    tok = wordpiece(records, vocab_size=120)
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.BertModel(cfg).eval(), tok


def padded_tok(tok, side: str):
    """A copy of ``tok`` that pads on ``side`` (the fixture's tokenizer stays as it was)."""
    t = copy.deepcopy(tok)
    t.padding_side = side
    return t
