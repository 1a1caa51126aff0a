"""Blocks for the measure tests: padded records whose padding holds garbage.

A measure must never let a padded symbol reach a statistic, so every test block
writes a value into the padding that would show (NaN, inf, a huge number).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def padding_mask(rng: np.random.Generator, R: int, T: int) -> np.ndarray:
    """``(R, T)`` bool mask of records with random lengths in ``0..T`` (empty ones too)."""
    lengths = rng.integers(0, T + 1, R)
    return np.arange(T)[None, :] < lengths[:, None]


def padded_block(
    U: np.ndarray, H: np.ndarray, mask: np.ndarray, u_pad: float, h_pad: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(U, H, mask)`` as the engine passes them, with ``u_pad``/``h_pad`` in the padding."""
    U = U.astype(np.float64)
    H = H.astype(np.float64)
    U[~mask] = u_pad
    H[~mask] = h_pad
    return (
        torch.as_tensor(U, dtype=torch.float32),
        torch.as_tensor(H, dtype=torch.float32),
        torch.as_tensor(mask),
    )


def fold(
    measure: Any, blocks: list, n_units: int, n_hyps: int, info: Any = None, state: Any = None
) -> Any:
    """A state of ``measure`` (new unless ``state`` is given) updated with every block."""
    s = measure.start(n_units, n_hyps, info=info) if state is None else state
    for U, H, m in blocks:
        s = measure.update(s, U, H, m)
    return s


def make_blocks(
    rng: np.random.Generator,
    n_blocks: int,
    R: int,
    T: int,
    signals: Any,
    u_pad: float,
    h_pad: float,
) -> list:
    """``n_blocks`` blocks of ``R`` records padded to ``T``: a mask, then ``signals()``.

    ``signals()`` returns the block's ``(U, H)`` arrays, ``(R, T, n_units)`` and
    ``(R, T, n_hyps)``; ``u_pad``/``h_pad`` overwrite their padding.
    """
    blocks = []
    for _ in range(n_blocks):
        mask = padding_mask(rng, R, T)
        U, H = signals()
        blocks.append(padded_block(U, H, mask, u_pad, h_pad))
    return blocks
