"""Feature sets the feature tests share: a lossless one and random ones."""

from __future__ import annotations

import torch

from dni_lab import features as F


def identity_set(d: int, hook: str) -> F.StandardSAE:
    """relu(x) - relu(-x) = x: latent j is x_j's positive part, d + j its negative part."""
    fs = F.StandardSAE(d, 2 * d, hook, name="identity")
    eye = torch.eye(d)
    with torch.no_grad():
        fs.W_enc.copy_(torch.cat([eye, -eye], 1))
        fs.W_dec.copy_(torch.cat([eye, -eye], 0))
    return fs


def tiny_gpt2():
    """An untrained 2-block GPT-2 (width 16) with a BPE tokenizer trained here, and ``corpus``."""
    import transformers
    from test_hf import corpus

    import dni_lab as dl
    from hypotheses.workloads.hf_tokenizers import bpe

    tok = bpe(corpus(200, seed=1), vocab_size=300)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=2,
                                  n_head=2, eos_token_id=tok.eos_token_id)  # fmt: skip
    return dl.Model.from_hf(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="gpt"), corpus
