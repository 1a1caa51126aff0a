"""Shared fixtures and helpers: a tiny char LSTM, its encoder, records, hypotheses, and a
check that the model store serves a trained model again."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl

VOCAB = "abcdefghij()+*"


class CharLM(nn.Module):
    def __init__(self, hidden: int = 12, layers: int = 2, cell=nn.LSTM, batch_first: bool = True):
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB) + 1, 6, padding_idx=0)
        self.lstm = cell(6, hidden, num_layers=layers, batch_first=batch_first)
        self.head = nn.Linear(hidden, len(VOCAB))
        self.batch_first = batch_first

    def forward(self, x):
        e = self.embed(x)
        if not self.batch_first:
            e = e.transpose(0, 1)
        out = self.lstm(e)[0]
        if not self.batch_first:
            out = out.transpose(0, 1)
        return self.head(out)


def encode_chars(records, pad_to: int | None = None):
    T = pad_to or max(len(r) for r in records)
    out = torch.zeros(len(records), T, dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor([VOCAB.index(c) + 1 for c in r])
    return out


def random_records(n: int, seed: int = 0, lo: int = 4, hi: int = 24) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(VOCAB), rng.integers(lo, hi))) for _ in range(n)]


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path, monkeypatch):
    """Every test gets its own hypothesis cache directory and a fresh default cache."""
    import dni_lab.backend.hypothesis.cache as cache_mod

    monkeypatch.setenv("DNI_LAB_CACHE", str(tmp_path / "hypcache"))
    monkeypatch.setattr(cache_mod, "DEFAULT", None)
    torch.manual_seed(0)
    # Test models are tiny: one thread is faster and immune to a busy machine's
    # oversubscription (two OpenMP threads made a small LSTM 10x slower under load).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def char_model():
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture
def records():
    return random_records(300)


@dl.hypothesis
def paren(r):
    return [c in "()" for c in r]


@dl.hypothesis(kind="continuous")
def position(r):
    return list(range(len(r)))


@pytest.fixture
def hyps():
    return [paren, position]


def weights_equal(a: nn.Module, b: nn.Module) -> bool:
    """Whether two modules hold the same parameter names and bitwise-equal values."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def assert_served_from_store(
    load: Callable[[], tuple[nn.Module, Any, dict[str, Any]]],
    module: nn.Module,
    train_seconds: float,
) -> dict[str, Any]:
    """Load ``module``'s workload again: the store serves the same weights, much faster than
    training them took. Returns the second load's metadata."""
    start = time.perf_counter()
    again, _, meta = load()
    assert time.perf_counter() - start < max(1.0, train_seconds / 5)
    assert weights_equal(module, again)
    return meta


def pytest_terminal_summary(terminalreporter):
    """Print the reliability battery's counts (tests/test_reliability.py), if it ran."""
    import sys

    battery = sys.modules.get("test_reliability")
    line = battery.summary() if battery is not None else ""
    if line:
        terminalreporter.write_line(line)
