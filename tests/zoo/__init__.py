"""The conformance zoo: small models from configs, each with its records and, per named
module, the reading the layout contract gives (``Read``) or the refusal it demands
(``Refuse``).

An entry's ``build()`` returns ``(module, model_kwargs)`` with fixed-seed random weights;
``expect`` maps fnmatch patterns of module addresses to readings, the first match wins,
and every named module of the model must match one. ``tests/test_zoo.py`` compares
dni_lab with hand-written hooks over every (entry, module).
"""

from __future__ import annotations

import fnmatch
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .reference import Read, Refuse

VOCAB = "abcdefgh"


@dataclass
class Entry:
    """One zoo model: how to build it, its records and the expected reading per module.

    ``contract`` marks entries that need the layout contract's ``Model(layouts=...,
    prefix=...)`` (they are skipped with that reason where ``Model`` lacks them).
    """

    name: str
    build: Callable[[], tuple[nn.Module, dict[str, Any]]]
    records: Callable[[], list[Any]]
    expect: dict[str, Read | Refuse]
    contract: bool = False
    family: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    def expected(self, address: str) -> Read | Refuse | None:
        """The first expectation whose pattern matches ``address``."""
        for pattern, want in self.expect.items():
            if fnmatch.fnmatchcase(address, pattern):
                return want
        return None


ZOO: dict[str, Entry] = {}


def entry(name: str, records: Callable[[], list[Any]], expect: dict, **kw: Any) -> Callable:
    """Register the decorated builder as zoo entry ``name``."""

    def wrap(build: Callable) -> Callable:
        ZOO[name] = Entry(name, build, records, expect, **kw)
        return build

    return wrap


def seeded(seed: int) -> None:
    """Fixed-seed random init: every builder calls it first."""
    torch.manual_seed(seed)


def values(record: Any, n: int) -> list[float]:
    """A deterministic continuous hypothesis: ``n`` values drawn from the record's bytes."""
    if isinstance(record, np.ndarray):
        raw = record.tobytes()
    else:
        raw = repr(record).encode()
    rng = np.random.default_rng(zlib.crc32(raw))
    return rng.normal(size=n).tolist()


# -- records ----------------------------------------------------------------------------
def strings(n: int = 12, lo: int = 3, hi: int = 9, seed: int = 0) -> list[str]:
    """Strings over :data:`VOCAB`, ``lo``..``hi`` characters (never as long as a width)."""
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(VOCAB), rng.integers(lo, hi + 1))) for _ in range(n)]


def encode_strings(records: list[str]) -> torch.Tensor:
    """Token ids (0 pads), one position per character."""
    T = max(len(r) for r in records)
    out = torch.zeros(len(records), T, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor([VOCAB.index(c) + 1 for c in r])
    return out


def images(n: int = 6, shape: tuple[int, int, int] = (3, 16, 12), seed: int = 0) -> list:
    """Non-square float32 images: a square map would let a transpose hide."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(np.float32) for _ in range(n)]


def signals(n: int = 8, seed: int = 0) -> list:
    """Raw 1-D signals of 64..128 samples, multiples of 16 (one symbol per 4 samples)."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=int(rng.integers(4, 9)) * 16).astype(np.float32) for _ in range(n)]


def encode_signals(records: list) -> torch.Tensor:
    """(N, 1, L) zero-padded to the longest signal."""
    L = max(len(r) for r in records)
    out = torch.zeros(len(records), 1, L)
    for i, r in enumerate(records):
        out[i, 0, : len(r)] = torch.from_numpy(r)
    return out


def spectrograms(n: int = 8, mel: int = 11, seed: int = 0) -> list:
    """(mel, frames) arrays, 5..9 frames: a symbol is a frame."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(mel, int(rng.integers(5, 10)))).astype(np.float32) for _ in range(n)]


def encode_spectrograms(records: list) -> torch.Tensor:
    """(N, 1, mel, frames) zero-padded to the longest record."""
    T = max(r.shape[1] for r in records)
    out = torch.zeros(len(records), 1, records[0].shape[0], T)
    for i, r in enumerate(records):
        out[i, 0, :, : r.shape[1]] = torch.from_numpy(r)
    return out


def vectors(n: int = 10, d: int = 9, seed: int = 0) -> list:
    """Feature vectors; one symbol each (a record-level model)."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=d).astype(np.float32) for _ in range(n)]


def load_all() -> dict[str, Entry]:
    """Import every builder module (they register themselves) and return the zoo."""
    from . import cnn, containers, outputs, sequence, tensors, undeclared, vision  # noqa: F401

    return ZOO


__all__ = ["ZOO", "Entry", "Read", "Refuse", "entry", "load_all", "seeded", "values"]
