"""A GPT-2 with a planted copy head whose answer is known (tests/test_patching.py).

A GPT-2 of 16 heads per block (built from a config) gets one head planted in block 0:
every query attends to the first token and the head copies that token's embedding into the
residual stream, where the (tied) unembedding reads it. Clean and corrupted records differ
in their first word only, so the logit difference between the two first words at the last
token is carried by that head.
"""

from __future__ import annotations

import torch
import transformers
from hf_workload import WORDS

import dni_lab as dl
from hypotheses.workloads.hf_tokenizers import bpe

HEAD, HEADS, D = 5, 16, 64
DH = D // HEADS
FIRST = ["select", "where", "insert", "values"]
REST = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(2 + i % 4)) for i in range(8)]
CLEAN = [f"{FIRST[i % 4]} {r}" for i, r in enumerate(REST)]
CORRUPTED = [f"{FIRST[(i + 1) % 4]} {r}" for i, r in enumerate(REST)]


def plant(module: torch.nn.Module) -> None:
    """Head ``HEAD`` of block 0 attends to position 0 and copies its token's first dims."""
    t = module.transformer
    with torch.no_grad():
        t.wte.weight.mul_(10)  # logits of a useful size through the tied unembedding
        t.wte.weight[:, -1] = 0
        t.wpe.weight[:, -1] = 0
        t.wpe.weight[0, -1] = 1.0  # the first position's flag
        attn = t.h[0].attn
        q, k, v = (slice(p * D + HEAD * DH, p * D + (HEAD + 1) * DH) for p in range(3))
        w, b = attn.c_attn.weight, attn.c_attn.bias
        w[:, q] = 0
        b[q] = 0
        b[q.start] = 30.0  # a constant query ...
        w[:, k] = 0
        b[k] = 0
        w[-1, k.start] = 30.0  # ... meets the flag's key: attention to position 0
        w[:, v] = 0
        b[v] = 0
        w[torch.arange(DH), torch.arange(v.start, v.stop)] = 1.0  # value: the first DH dims
        o = attn.c_proj.weight
        o[HEAD * DH : (HEAD + 1) * DH] = 0
        o[torch.arange(HEAD * DH, (HEAD + 1) * DH), torch.arange(DH)] = 40.0  # copied back


def build_planted():
    """``(module, tokenizer, dl.Model, answers)``: the planted GPT-2 and its answer tokens."""
    tok = bpe((CLEAN + CORRUPTED + REST) * 4, vocab_size=400)  # every first word: one token
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=32, n_embd=D, n_layer=2, n_head=HEADS,
        bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    plant(module)
    m = dl.Model.from_hf(module, tok, name="planted")
    answers = [
        (tok(a)["input_ids"][0], tok(b)["input_ids"][0])
        for a, b in zip(CLEAN, CORRUPTED, strict=True)
    ]
    assert all(a != b for a, b in answers)
    assert [m.symbols(r) for r in CLEAN] == [m.symbols(r) for r in CORRUPTED]
    return module, tok, m, answers
