"""Tensor zoo entries: 0-dim parameters and buffers (BatchNorm's ``num_batches_tracked``),
non-contiguous (transposed) parameters and buffers, frozen parameters, float16 and
bfloat16 weights. Every post-read step (hashing, provenance, export) meets them."""

from __future__ import annotations

import torch
from torch import nn

from . import Read, encode_strings, entry, seeded, strings

SEQ, CHW = Read("n s u"), Read("n u s")


class ZeroDim(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.lin = nn.Linear(12, 14)
        self.bn = nn.BatchNorm1d(14)  # num_batches_tracked: a 0-dim long buffer
        self.temperature = nn.Parameter(torch.tensor(0.7))
        self.register_buffer("ignore", torch.tensor(-1e5))  # TransformerLens' IGNORE

    def forward(self, x):
        h = self.bn(self.lin(self.embed(x)).transpose(1, 2))
        return h.transpose(1, 2) / self.temperature + self.ignore * 0


@entry("zero-dim-tensors", strings, {"bn": CHW, "*": SEQ}, family="tensors")
def zero_dim():
    seeded(50)
    m = ZeroDim().eval()
    m.bn.num_batches_tracked.fill_(5)
    return m, {"encode": encode_strings}


class Transposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.lin = nn.Linear(12, 10)
        self.lin.weight = nn.Parameter(torch.randn(12, 10).T)  # stride (1, 10)
        self.register_buffer("proj", torch.randn(14, 10).T)  # (10, 14), stride (1, 10)
        self.norm = nn.LayerNorm(14)

    def forward(self, x):
        return self.norm(self.lin(self.embed(x)) @ self.proj)


@entry("transposed-tensors", strings, {"*": SEQ}, family="tensors")
def transposed():
    seeded(51)
    m = Transposed().eval()
    assert not m.lin.weight.is_contiguous() and not m.proj.is_contiguous()
    return m, {"encode": encode_strings}


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.lin = nn.Linear(12, 14)
        self.act = nn.GELU()
        self.conv = nn.Conv1d(14, 10, 3, 1, 1)
        self.norm = nn.LayerNorm(10)

    def forward(self, x):
        h = self.act(self.lin(self.embed(x)))
        return self.norm(self.conv(h.transpose(1, 2)).transpose(1, 2))


PLAIN = {"conv": CHW, "*": SEQ}


@entry("frozen-params", strings, PLAIN, family="tensors")
def frozen():
    seeded(52)
    m = Plain().eval()
    for p in [*m.embed.parameters(), m.lin.weight, *m.norm.parameters()]:
        p.requires_grad_(False)
    return m, {"encode": encode_strings}


@entry("float16-params", strings, PLAIN, family="tensors")
def float16():
    seeded(53)
    return Plain().eval().half(), {"encode": encode_strings}


@entry("bfloat16-params", strings, PLAIN, family="tensors")
def bfloat16():
    seeded(54)
    return Plain().eval().to(torch.bfloat16), {"encode": encode_strings}
