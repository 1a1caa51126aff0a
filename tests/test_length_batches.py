"""length_batches: a block's records cut into forward batches where padding is least."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from dni_lab.backend.extraction.length_batches import length_batches


def waste(n: torch.Tensor, batches: list[torch.Tensor]) -> float:
    slots = sum(len(b) * int(n[b].max()) for b in batches)
    return 1 - int(n.sum()) / slots


def fixed_runs(n: torch.Tensor, B: int) -> list[torch.Tensor]:
    order = torch.argsort(n, descending=True, stable=True)
    return [order[i : i + B] for i in range(0, len(n), B)]


@pytest.mark.parametrize("B", [1, 2, 3, 5, 16, 64])
@pytest.mark.parametrize("N", [0, 1, 5, 17, 64, 101])
def test_every_record_once_and_batches_at_least_half_full(B, N):
    n = torch.as_tensor(np.random.default_rng(N * 7 + B).integers(1, 60, N))
    batches = length_batches(n, B)
    got = torch.cat(batches).tolist() if batches else []
    assert sorted(got) == list(range(N))
    assert all(len(b) <= B for b in batches)
    if N > B:
        assert all(len(b) >= -(-B // 2) for b in batches[:-1])
        assert len(batches) <= 2 * -(-N // B) + 1
    # never more padding than fixed runs of B over the sorted block
    if N:
        assert waste(n, batches) <= waste(n, fixed_runs(n, B)) + 1e-12


def test_mixed_lengths_waste_under_ten_percent():
    # the peers benchmark's shape: 64 records of 16 to 256 words (35 to 455 tokens), 16 a pass
    n = torch.as_tensor(np.random.default_rng(2).integers(35, 456, 64))
    fixed = waste(n, fixed_runs(n, 16))
    cut = waste(n, length_batches(n, 16))
    assert fixed > 0.12 and cut <= 0.10
    # longest first, and records of one batch are consecutive in length order
    batches = length_batches(n, 16)
    assert [int(n[b].max()) for b in batches] == sorted((int(n[b].max()) for b in batches),
                                                        reverse=True)  # fmt: skip
    for a, b in itertools.pairwise(batches):
        assert int(n[a].min()) >= int(n[b].max())
