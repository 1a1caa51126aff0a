"""Structured-output zoo entries: modules returning tuples, dicts, dataclasses and Hugging
Face ``ModelOutput``s; a module of no known kind, undeclared (proved by a second probe) and
declared with ``Layout(output=...)`` (read).

A custom block whose first tensor keeps its input's shape is shape-preserving (the
producer's reading); one that changes the width is of no known kind, and a second probe
proves its reading (its axes move with the records and their length).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import Read, Refuse, encode_strings, entry, seeded, strings

SEQ = Read("n s u")
UNKNOWN = Refuse("LayerError", "a 3-D output of a module of no known kind")


@dataclass
class Pair:
    hidden: torch.Tensor
    gate: torch.Tensor


def _pack(kind: str, a: torch.Tensor, b: torch.Tensor):
    if kind == "tuple":
        return a, b
    if kind == "dict":
        return {"hidden": a, "gate": b}
    if kind == "dataclass":
        return Pair(a, b)
    from transformers.modeling_outputs import BaseModelOutput

    return BaseModelOutput(last_hidden_state=a, hidden_states=(b,))


def _unpack(kind: str, out):
    if kind == "tuple":
        return out[0]
    if kind == "dict":
        return out["hidden"]
    if kind == "dataclass":
        return out.hidden
    return out.last_hidden_state


class Keep(nn.Module):
    """First tensor of the input's shape (shape-preserving), a narrower second one."""

    def __init__(self, kind: str, d: int) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(d, d)
        self.gate = nn.Linear(d, 11)

    def forward(self, x):
        return _pack(self.kind, x + torch.tanh(self.lin(x)), torch.sigmoid(self.gate(x)))


class Change(nn.Module):
    """First tensor wider than the input: a module of no known kind."""

    def __init__(self, kind: str, d: int, out: int) -> None:
        super().__init__()
        self.kind = kind
        self.up = nn.Linear(d, out)

    def forward(self, x):
        y = self.up(x)
        return _pack(self.kind, torch.relu(y), y[..., :10])


class OutputNet(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.keep = Keep(kind, 12)
        self.change = Change(kind, 12, 14)
        self.kind = kind

    def forward(self, x):
        return _unpack(self.kind, self.change(_unpack(self.kind, self.keep(self.embed(x)))))


def _output_entry(kind: str, seed: int) -> None:
    expect = {"*": SEQ}

    def build():
        seeded(seed)
        return OutputNet(kind).eval(), {"encode": encode_strings}

    entry(f"{kind}-output", strings, expect, family="outputs")(build)


for _i, _kind in enumerate(("tuple", "dict", "dataclass", "modeloutput")):
    _output_entry(_kind, 40 + _i)


class Declared(nn.Module):
    """Modules of no known kind, declared: the second tensor of a tuple, a dict's key,
    a ModelOutput's field, and a time-first custom output."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.tup = Change("tuple", 12, 14)
        self.dic = Change("dict", 14, 16)
        self.hf = Change("modeloutput", 16, 18)
        self.tf = TimeFirst(18, 13)

    def forward(self, x):
        h = self.tup(self.embed(x))[0]
        h = self.dic(h)["hidden"]
        h = self.hf(h).last_hidden_state
        return self.tf(h)


class TimeFirst(nn.Module):
    def __init__(self, d: int, out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d, out)

    def forward(self, x):
        return self.lin(x).transpose(0, 1)  # (T, N, out)


@entry("declared-outputs", strings, {
    "tup": Read("n s u", output=1), "dic": Read("n s u", output="gate"),
    "hf": Read("n s u", output="last_hidden_state"),
    "tf": Read("s n u"), "*": SEQ,
}, family="outputs", contract=True)  # fmt: skip
def declared_outputs():
    from .cnn import _layout

    seeded(45)
    layouts = {"tup": _layout("n s u", output=1), "dic": _layout("n s u", output="gate"),
               "hf": _layout("n s u", output="last_hidden_state"), "tf": "s n u"}  # fmt: skip
    return Declared().eval(), {"encode": encode_strings, "layouts": layouts}
