"""Behaviors: one unit's activations over chosen records, the service verify and examples share.

``layer_plan``/``address_and_width`` resolve a layer as the engine does,
``check_units`` validates a unit selection, and ``symbol_activations`` yields
per-batch activations through the engine's Extractor, so every consumer reads
a unit's behavior the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .errors import DNIError
from .extract import Extractor, symbol_mask
from .models import Model
from .resolve import ModelUnits, resolve_units


def layer_plan(model: Model, layer: str | int, sample: Sequence[Any], device) -> ModelUnits:
    """Resolve ``layer`` to its address and width, as the engine resolves units."""
    return resolve_units(model, [[(layer, "*")]], list(sample[:2]), device)


def address_and_width(
    model: Model, layer: str | int, sample: Sequence[Any], device
) -> tuple[str, int]:
    mp = layer_plan(model, layer, sample, device)
    (addr,) = mp.layer_units
    return addr, len(mp.layer_units[addr])


def check_units(units: Sequence[int], width: int, addr: str) -> np.ndarray:
    idx = np.asarray(list(units), dtype=np.int64)
    if idx.size == 0:
        raise DNIError(f"no units given for layer {addr!r}; pass a non-empty list of indices.")
    if idx.min() < 0 or idx.max() >= width or len(set(idx.tolist())) != len(idx):
        raise DNIError(
            f"units {idx.tolist()} are not distinct indices of layer {addr!r} (0..{width - 1})."
        )
    return idx


def batches(items: Sequence[Any], size: int) -> Iterator[tuple[int, list[Any]]]:
    for start in range(0, len(items), size):
        yield start, list(items[start : start + size])


def symbol_activations(
    model: Model,
    records: Sequence[Any],
    addr: str,
    units: np.ndarray | None,
    device: torch.device,
    batch_size: int = 256,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(first, acts (R, T, U), mask (R, T))`` per batch, extracted by the engine's Extractor.

    The caller holds :func:`~.extract.on_device` for the model.
    """
    ex = Extractor(model, {addr: units}, "activation", device)
    for first, recs in batches(records, batch_size):
        mask = symbol_mask(model, recs, device)
        yield first, ex(recs, mask)[addr], mask
