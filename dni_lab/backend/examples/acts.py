"""Per-record activations of a layer's units, computed on demand and counted.

A record's activation of a unit is an aggregate of the unit's activation over
the record's symbols: ``max`` (does the record drive the unit high anywhere?),
``mean``, or ``last`` (the final state of a recurrent model). The count of
records run through the model is the cost by-example queries minimise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import DNIError
from ..extraction.behaviors import address_and_width, check_units, features_of, symbol_activations
from ..extraction.extract import on_device, resolve_device

SYMBOL_AGGS = ("max", "mean", "last")


def choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    """``value`` if it is one of ``allowed``, else a DNIError naming the choices."""
    if value not in allowed:
        raise DNIError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}.")
    return value


def aggregate_symbols(acts: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """``(R, T, D)`` activations → ``(R, D)``: max, mean or last over each record's symbols."""
    m = mask[..., None]
    if how == "max":
        return acts.masked_fill(~m, float("-inf")).amax(1)
    if how == "mean":
        return (acts * m).sum(1) / m.sum(1).clamp_min(1)
    last = (mask.sum(1) - 1).clamp_min(0)
    return acts[torch.arange(acts.shape[0], device=acts.device), last]


class Activations:
    """Per-record activations of units of one layer, computed on demand and counted.

    Parameters
    ----------
    model : Model
    records : sequence
        The dataset; records are addressed by position.
    layer : str, int or feature set
        A layer of the model, or a feature set (``dl.features``) attached to it: its
        latents are the units.
    units : sequence of int, optional
        Units of the layer to compute (default: all).
    symbol_agg : {"max", "mean", "last"}
    batch_size : int
    device : str or torch.device

    Attributes
    ----------
    evaluated_ : int
        Records run through the model so far (the cost DeepEverest minimises).
    """

    def __init__(
        self, model, records, layer, units=None, symbol_agg="max", batch_size=256, device="auto"
    ) -> None:
        self.model, self.records, self.layer, self.units = model, records, layer, units
        self.symbol_agg, self.batch_size, self.device = symbol_agg, batch_size, device
        self.evaluated_ = 0

    def resolve(self) -> tuple[str, int]:
        """The layer's address and width (one probe pass, cached by the model)."""
        if not hasattr(self, "address_"):
            dev = resolve_device(self.device)
            with on_device(self.model, dev):
                self.address_, self.width_ = address_and_width(
                    self.model, self.layer, self.records, dev
                )
        return self.address_, self.width_

    def __call__(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """``(len(ids), n_units)`` float32 activations of the records at ``ids``."""
        choice(self.symbol_agg, SYMBOL_AGGS, "symbol aggregation")
        addr, width = self.resolve()
        idx = None if self.units is None else check_units(self.units, width, addr)
        ids = np.asarray(ids, dtype=np.int64)
        recs = [self.records[i] for i in ids.tolist()]
        dev, out = resolve_device(self.device), []
        with on_device(self.model, dev):
            feats = features_of(self.model, self.layer)
            for _, acts, mask in symbol_activations(
                self.model, recs, addr, idx, dev, self.batch_size, features=feats
            ):
                out.append(aggregate_symbols(acts, mask, self.symbol_agg).float().cpu())
        self.evaluated_ += len(ids)
        n = width if idx is None else len(idx)
        return torch.cat(out).numpy() if out else np.zeros((0, n), np.float32)
