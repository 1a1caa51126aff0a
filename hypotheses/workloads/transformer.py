"""A tiny causal transformer, built from a config, that tracks parenthesis depth.

The task is a character-level tagging task on strings we generate ourselves:
balanced parentheses mixed with filler letters, e.g. ``a(b(c)d)``. At every
character the model predicts the nesting depth *after* that character
(0..``max_depth``), reading only the prefix (causal attention), as a language
model would. Depth is exactly what DNI hypotheses (bracket depth, parse-tree
ranges) ask about, and no single position reveals it: it has to be counted.

Every block returns a tuple ``(hidden, attention_weights)``, as many
transformer libraries do, so the inspection engine's tuple-output path is
exercised. Named layers: ``embed``, ``blocks.0`` .. ``blocks.{n-1}`` (tuples),
``blocks.i.attn`` (tuple), ``blocks.i.mlp``, ``norm``, ``head``. A record is
a string and a symbol a character; ``encode`` pads a batch on the right.

Per-character accuracy on held-out strings (seed 0; the most frequent depth
scores 0.34): quick 0.9995 (5 epochs, about 4 s of one CPU core), full 1.0
(10 epochs, about 11 s).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .store import cached_model, using_threads

NAME = "parens-transformer"
VOCAB = "\0()abcde"  # index 0 pads; unknown characters map to the last filler
QUICK = {"n_train": 2000, "n_test": 500, "epochs": 5}
FULL = {"n_train": 5000, "n_test": 1000, "epochs": 10}
ARCH = {"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "max_len": 32, "max_depth": 4}


def generate(n: int, seed: int = 0, min_len: int = 8, max_len: int = 24, max_depth: int = 4):
    """``n`` balanced strings of ``min_len..max_len`` characters and their depth labels."""
    rng = np.random.default_rng(seed)
    strings, depths = [], []
    for _ in range(n):
        length, depth, chars, labels = int(rng.integers(min_len, max_len + 1)), 0, [], []
        for i in range(length):
            left = length - i  # characters still to write, closers included
            u = rng.random()
            if depth >= left or (depth > 0 and u < 0.35):
                ch = ")"
            elif depth < max_depth and depth + 2 <= left and u < 0.7:
                ch = "("
            else:
                ch = VOCAB[3 + int(rng.integers(len(VOCAB) - 3))]
            depth += (ch == "(") - (ch == ")")
            chars.append(ch)
            labels.append(depth)
        strings.append("".join(chars))
        depths.append(labels)
    return strings, depths


def encode(records: Sequence[str], max_len: int = ARCH["max_len"]) -> torch.Tensor:
    """Strings as a right-padded ``(B, T)`` tensor of character ids."""
    if any(len(r) > max_len for r in records):
        raise ValueError(f"records longer than the model's max_len={max_len} characters.")
    width = max((len(r) for r in records), default=0)
    out = torch.zeros(len(records), width, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor([VOCAB.find(c) if c in VOCAB[1:] else 7 for c in r])
    return out


class Embedding(nn.Module):
    """Token plus learned position embeddings."""

    def __init__(self, vocab: int, d_model: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention returning ``(output, weights)``."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, heads, T, d_head)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.n_heads)
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d)), weights


class Block(nn.Module):
    """Pre-norm transformer block; returns ``(hidden, attention_weights)``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, weights = self.attn(self.norm1(x))
        x = x + a
        return x + self.mlp(self.norm2(x)), weights


class TinyTransformer(nn.Module):
    """Embedding, ``n_layers`` blocks, a final norm and a per-character classifier."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        c = {**ARCH, **config}
        self.embed = Embedding(len(VOCAB), c["d_model"], c["max_len"])
        self.blocks = nn.ModuleList(
            Block(c["d_model"], c["n_heads"], c["d_ff"]) for _ in range(c["n_layers"])
        )
        self.norm = nn.LayerNorm(c["d_model"])
        self.head = nn.Linear(c["d_model"], c["max_depth"] + 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x, _ = block(x)
        return self.head(self.norm(x))  # (B, T, max_depth + 1)


def config(quick: bool = False, epochs: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Everything that determines the trained weights."""
    cfg = {**(QUICK if quick else FULL), **ARCH, "seed": seed, "batch": 64, "lr": 3e-3}
    if epochs is not None:
        cfg["epochs"] = epochs
    return {**cfg, "version": 1}


def _batch(strings: list[str], depths: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = encode(strings)
    y = torch.full(ids.shape, -100, dtype=torch.long)  # -100: padding, ignored by the loss
    for i, d in enumerate(depths):
        y[i, : len(d)] = torch.tensor(d)
    return ids, y


def _train(model: nn.Module, cfg: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    torch.manual_seed(cfg["seed"])
    model.load_state_dict(TinyTransformer(cfg).state_dict())  # initialization under the seed
    train = generate(cfg["n_train"], cfg["seed"], max_depth=cfg["max_depth"])
    test = generate(cfg["n_test"], cfg["seed"] + 10_000, max_depth=cfg["max_depth"])
    x, y = _batch(*train)
    xt, yt = _batch(*test)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    gen = torch.Generator().manual_seed(cfg["seed"])
    model.train()
    for _ in range(cfg["epochs"]):
        for idx in torch.randperm(len(x), generator=gen).split(cfg["batch"]):
            logits = model(x[idx])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), y[idx].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(xt).argmax(-1)
    real = yt >= 0
    counts = np.bincount(yt[real].numpy(), minlength=cfg["max_depth"] + 1)
    return {
        "accuracy": round(float((pred == yt)[real].float().mean()), 4),
        "majority_rate": round(float(counts.max() / counts.sum()), 4),
        "n_train": cfg["n_train"],
        "n_test": cfg["n_test"],
        "train_seconds": round(time.perf_counter() - start, 2),
        "task": "depth after each character of balanced parentheses with fillers",
        "layers": ["embed", *(f"blocks.{i}" for i in range(cfg["n_layers"])), "norm", "head"],
    }


def load(
    quick: bool = False, epochs: int | None = None, seed: int = 0, directory: Any = None
) -> tuple[nn.Module, Callable[[Sequence[str]], torch.Tensor], dict[str, Any]]:
    """The trained transformer, its ``encode`` function and its metadata.

    Parameters
    ----------
    quick : bool
        2,000 training strings and 5 epochs instead of 5,000 and 10.
    epochs : int, optional
        Overrides the quick/full epoch count.
    seed : int
        Seeds the strings (held-out ones from ``seed + 10000``) and the initialization.
    directory : path, optional
        Where the model is stored (default ``$DNI_LAB_MODELS``).
    """
    cfg = config(quick, epochs, seed)

    def train(module: nn.Module) -> dict[str, Any]:
        with using_threads(1):
            return _train(module, cfg)

    module, meta = cached_model(NAME, cfg, lambda: TinyTransformer(cfg), train, directory)
    return module, encode, meta
