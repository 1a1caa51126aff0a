"""A small GPT-2 trained here on the parentheses language, with a BPE tokenizer trained here.

The same records as the parentheses LSTM (:mod:`.parens`: ``0(1()1(2()))0()``,
a digit gives the nesting level before each parenthesis), but read as byte-level
BPE tokens (merges such as ``()`` or ``1(``) by a causal transformer built from
a ``GPT2Config`` (no download) and trained as a language model on next-token
prediction. It is the transformer side of notebook 10, inspected with the same
character-level hypotheses as the LSTM; :class:`dni_lab.backend.hf.HFModel`
maps them to tokens.

The tokenizer is retrained on every load (well under a second, deterministic);
its hash is part of the store key, so cached weights always match its vocabulary.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from . import parens
from .hf_tokenizers import bpe
from .store import cached_model, using_threads

NAME = "parens-gpt2"
QUICK = {"n_train": 1200, "epochs": 4, "n_layer": 2, "n_embd": 64, "n_head": 4}
FULL = {"n_train": 6000, "epochs": 8, "n_layer": 4, "n_embd": 128, "n_head": 4}
VOCAB = 96  # base bytes (256) are in the alphabet, so the target is the merge budget on top
N_POSITIONS = 64


def load(
    quick: bool = False, seed: int = 0, directory: str | os.PathLike | None = None
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The trained GPT-2, its tokenizer and the store's metadata.

    Returns
    -------
    module, tokenizer, meta
        A ``GPT2LMHeadModel`` in eval mode, its ``PreTrainedTokenizerFast``
        (``<|endoftext|>`` pads), and metadata: ``config``, held-out next-token
        ``accuracy``, the ``majority`` baseline, ``train_seconds``, ``loss_history``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from dni_lab.backend.hf import tokenizer_hash

    size = QUICK if quick else FULL
    train_recs = parens.records(size["n_train"], seed=seed)
    test_recs = parens.records(300, seed=seed + 7919)
    tokenizer = bpe(train_recs, vocab_size=256 + VOCAB, bos=True)
    config = {
        **size,
        "seed": seed,
        "threads": 1,
        "tokenizer": tokenizer_hash(tokenizer),
        "records_sha": _records_hash(train_recs),
        "n_positions": N_POSITIONS,
        "train_rng": "seeded",  # dropout draws from a seeded RNG: a retrain is the same model
    }

    def build() -> torch.nn.Module:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            cfg = GPT2Config(
                vocab_size=len(tokenizer),
                n_positions=N_POSITIONS,
                n_embd=size["n_embd"],
                n_layer=size["n_layer"],
                n_head=size["n_head"],
                bos_token_id=tokenizer.eos_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            return GPT2LMHeadModel(cfg)

    def fit(module: torch.nn.Module) -> dict[str, Any]:
        # dropout (GPT-2's default 0.1) draws from the global RNG: without a seed here,
        # every retrain (a clean clone, CI) was a different model
        with using_threads(1), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return _train(module, tokenizer, train_recs, test_recs, size["epochs"], seed)

    module, meta = cached_model(NAME, config, build, fit, directory)
    return module, tokenizer, meta


def _batches(tokenizer: Any, recs: list[str], size: int, gen: torch.Generator):
    order = torch.randperm(len(recs), generator=gen).tolist()
    for i in range(0, len(order), size):
        texts = [recs[j] for j in order[i : i + size]]  # BOS comes from the tokenizer
        enc = tokenizer(texts, padding=True, return_tensors="pt")
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        yield enc, labels


def _train(module, tokenizer, train_recs, test_recs, epochs: int, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(module.parameters(), lr=3e-3, weight_decay=0.01)
    steps = epochs * ((len(train_recs) + 31) // 32)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - 0.9 * s / steps)
    start, cpu0, history = time.perf_counter(), time.process_time(), []
    module.train()
    for _ in range(epochs):
        losses = []
        for enc, labels in _batches(tokenizer, train_recs, 32, gen):
            loss = module(**enc, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        history.append(float(np.mean(losses)))
    module.eval()
    acc, majority = _accuracy(module, tokenizer, test_recs)
    return {
        "accuracy": acc,
        "majority": majority,
        "train_seconds": time.perf_counter() - start,
        "train_cpu_seconds": time.process_time() - cpu0,
        "loss_history": history,
    }


@torch.inference_mode()
def _accuracy(module, tokenizer, recs: list[str]) -> tuple[float, float]:
    """Next-token accuracy on held-out records, and the most frequent token's share."""
    enc = tokenizer(recs, padding=True, return_tensors="pt")
    pred = module(**enc).logits[:, :-1].argmax(-1)
    target, real = enc["input_ids"][:, 1:], enc["attention_mask"][:, 1:].bool()
    counts = torch.bincount(target[real])
    return float((pred == target)[real].float().mean()), float(counts.max() / real.sum())


def _records_hash(recs: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(recs).encode()).hexdigest()[:16]
