"""Structure zoo entries: nested Sequential/ModuleList/ModuleDict, tied weights, a module
registered twice, a tap (an Identity whose output is discarded), a module called twice,
a record-level MLP left in train mode, and a model with a BOS position (``prefix=1``)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import Read, Refuse, encode_strings, entry, seeded, strings, vectors

SEQ, VEC = Read("n s u"), Read("n u")


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 8)
        self.body = nn.Sequential(nn.Sequential(nn.Linear(8, 12), nn.ReLU()), nn.Linear(12, 14))
        self.blocks = nn.ModuleList([nn.Linear(14, 14), nn.LayerNorm(14)])
        self.heads = nn.ModuleDict({"a": nn.Linear(14, 10), "b": nn.Linear(14, 11)})

    def forward(self, x):
        h = self.body(self.embed(x))
        for block in self.blocks:
            h = block(h)
        return self.heads["a"](h) + self.heads["b"](h)[..., :10]


@entry("nested-containers", strings, {"*": SEQ}, family="structure")
def nested():
    seeded(30)
    return Nested().eval(), {"encode": encode_strings}


class TiedTap(nn.Module):
    """Output projection tied to the embedding; ``alias`` is ``block`` registered twice;
    ``tap_linear`` and ``tap`` are Identities whose outputs nothing uses (``tap`` after a
    function, so no module produced its input); ``shared`` runs twice."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.block = nn.Linear(12, 12)
        self.alias = self.block
        self.tap = nn.Identity()
        self.tap_linear = nn.Identity()
        self.shared = nn.Linear(12, 12)
        self.out = nn.Linear(12, 9, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        lin = self.block(self.embed(x))
        self.tap_linear(lin)  # taps: their outputs are discarded
        h = torch.tanh(lin)
        self.tap(h)
        return self.out(self.shared(self.shared(h)))


@entry("tied-tap-twice", strings, {
    "shared": Refuse("LayerError", "called twice in one forward pass: which call is read?"),
    "tap": SEQ,  # after a function: proved by a second probe
    "*": SEQ,
}, family="structure")  # fmt: skip
def tied_tap():
    seeded(31)
    return TiedTap().eval(), {"encode": encode_strings}


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(9, 20)
        self.bn = nn.BatchNorm1d(20)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(20, 10)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.bn(self.fc1(x)))))


@entry("mlp-train-dropout-bn", vectors, {"*": VEC}, family="structure")
def mlp_train():
    seeded(32)
    m = MLP().train()  # left in train mode: dropout and batch statistics would show
    with torch.no_grad():
        m.bn.running_mean.normal_(0, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m, {"symbols": lambda r: 1}


def token_lists(n: int = 12, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 9, int(rng.integers(3, 10))).tolist() for _ in range(n)]


def encode_bos(records: list[list[int]]) -> torch.Tensor:
    """Token 9 (BOS) first, then the record's tokens, 0 pads: n + 1 positions."""
    T = max(len(r) for r in records) + 1
    out = torch.zeros(len(records), T, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r) + 1] = torch.tensor([9, *r])
    return out


class BosNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 12)
        self.mix = nn.Linear(12, 14)
        self.norm = nn.LayerNorm(14)

    def forward(self, x):
        h = self.mix(self.embed(x))
        return self.norm(h + h[:, :1])  # every position sees the BOS position


@entry("bos-prefix", token_lists, {"*": SEQ}, family="structure", contract=True)
def bos_prefix():
    seeded(33)
    return BosNet().eval(), {"encode": encode_bos, "prefix": 1}
