"""What a probe reads: one layer's activations per symbol and, to fit or score, 0/1 labels.

Activations come through :func:`dni_lab.activations` (the engine's Extractor, block by
block, ``stream=True``); labels from a hypothesis through
:func:`~dni_lab.backend.hypothesis.values.hypothesis_block` on the hypothesis as the model
reads it (:func:`~dni_lab.backend.hypothesis.hypotheses.for_model`: a transformer's
tokens take character and word values pooled over their spans, as in ``dl.inspect``), or
from ``labels=`` given per record. Symbols where a label is undefined (NaN) are read but
neither trained on nor scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..backend.engine.levels import decided_for_model
from ..backend.engine.provenance import RecordsHash, weights_sha256
from ..backend.engine.resolve import as_records
from ..backend.errors import DNIError, HypothesisError, LayerError
from ..backend.extraction.activations import activations
from ..backend.extraction.models import Model
from ..backend.hypothesis.hypotheses import as_family, hypothesis_block


@dataclass
class Reading:
    """One layer over some records: ``X`` per symbol and where each row comes from."""

    X: torch.Tensor  # (n_symbols, units) float32, records in order, symbols in order
    record: np.ndarray  # (n_symbols,) int64: each row's record
    symbol: np.ndarray  # (n_symbols,) int64: each row's position in its record
    address: str  # the layer's module address
    units: np.ndarray  # the unit indices read, in column order
    n_records: int
    data_sha256: str
    y: np.ndarray | None = None  # (n_symbols,) float64 0/1, NaN where undefined


def as_model(model: Any) -> Model:
    """A :class:`dl.Model` (a bare module is wrapped, as ``dl.activations`` does)."""
    if isinstance(model, nn.Module):
        return Model(model)
    if not isinstance(model, Model):
        raise DNIError(
            f"a probe reads a dl.Model (or an nn.Module), not {type(model).__name__}; wrap a "
            "transformer with dl.Model.from_hf(module, tokenizer)."
        )
    return model


def model_sha256(model: Model) -> str:
    """The model's weights hash, as every score frame's provenance records it."""
    return weights_sha256(model.module)


def read(
    model: Model,
    records: Iterable[Any],
    layer: str,
    units: Sequence[int] | None,
    block_size: int,
    device: str | torch.device,
    hypothesis: Any = None,
    labels: Sequence[Any] | None = None,
) -> Reading:
    """Read ``layer`` (its ``units``, or all) over ``records``, with labels if asked.

    :func:`read_layers` with one layer.

    Raises
    ------
    LayerError
        ``layer`` is not a layer of ``model`` (the message lists the ones it has).
    DNIError
        No records; ``labels`` of the wrong length (per record or per symbol).
    LevelError
        An undeclared level that no record's counts decide (decided once, for all records).
    """
    one = read_layers(model, records, [layer], units, block_size, device, hypothesis, labels)
    return one[layer]


def read_layers(
    model: Model,
    records: Iterable[Any],
    layers: Sequence[str],
    units: Sequence[int] | None,
    block_size: int,
    device: str | torch.device,
    hypothesis: Any = None,
    labels: Sequence[Any] | None = None,
) -> dict[str, Reading]:
    """Read every one of ``layers`` over ``records`` in one forward pass per block.

    The layers are one :func:`dni_lab.activations` call, so each block of
    ``block_size`` records runs the model once for all of them; the labels (a
    hypothesis or ``labels=``) are evaluated once and shared by every layer's
    :class:`Reading` (one ``y``, ``record`` and ``symbol`` array, not copies).

    Memory: each block's padded tensors are cut to their symbols' rows as the block is
    read, so what is held is every layer's float32 ``(n_symbols, units)`` rows, plus,
    while one layer's blocks are joined, a second copy of that one layer.

    Returns
    -------
    dict of str to Reading
        One reading per distinct layer name, in the order given.

    Raises
    ------
    As :func:`read`, for the first layer the model does not have.
    """
    recs = list(as_records(records))  # read twice: activations, then labels
    if not recs:
        raise DNIError("records is empty; pass the records the probe reads.")
    layers = list(dict.fromkeys(layers))
    names = [layer if units is None else (layer, list(units)) for layer in layers]
    family = None
    if hypothesis is not None:
        # the level decided once, from the records whose counts differ (a '9' alone says nothing)
        family = decided_for_model(model, [as_family(hypothesis)], recs)[0]
        if len(family.signals()) != 1:
            raise HypothesisError(
                f"hypothesis {family.name!r} has {len(family.signals())} signals; a probe fits "
                "one: pass one hypothesis (dl.hypothesis), not a family."
            )
    blocks: dict[str, list[torch.Tensor]] = {layer: [] for layer in layers}
    n_symbols: list[int] = []
    ys: list[np.ndarray] = []
    caches = activations(model, recs, names, block_size=block_size, device=device, stream=True)
    cache = None
    for cache in caches:
        lengths = cache.lengths.tolist()
        n_symbols += lengths
        for layer in layers:
            acts = cache[layer]  # a (layer, units) name is cached under its layer
            # only the symbols' rows kept: the padded block is freed with the cache
            # float32: a half-precision model's cache keeps its dtype, a probe fits float32
            blocks[layer].append(torch.cat([acts[i, :n] for i, n in enumerate(lengths)]).float())
        if family is not None:
            block = recs[cache.first : cache.first + cache.n_records]
            H = hypothesis_block([family], block, lengths, cache.first, None)
            ys += [H[i, :n, 0].astype(np.float64) for i, n in enumerate(lengths)]
    addresses, unit_ix = cache.addresses, cache.units
    del cache
    counts = np.asarray(n_symbols, dtype=np.int64)
    record = np.repeat(np.arange(len(recs), dtype=np.int64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    symbol = np.arange(len(record), dtype=np.int64) - starts
    data = RecordsHash()
    data.update(recs)
    y = None
    if family is not None:
        y = np.concatenate(ys)
    elif labels is not None:
        y = _labels(labels, n_symbols)
    out = {}
    for layer in layers:
        X = torch.cat(blocks.pop(layer))  # one layer's blocks joined at a time
        out[layer] = Reading(X, record, symbol, addresses[layer], np.asarray(unit_ix[layer]),
                             len(recs), data.hexdigest(), y)  # fmt: skip
    return out


def _labels(labels: Sequence[Any], n_symbols: list[int]) -> np.ndarray:
    """Per-record labels as one value per symbol: a scalar is read at every symbol."""
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
        raise DNIError("labels must be a sequence, one entry per record.")
    if len(labels) != len(n_symbols):
        raise DNIError(
            f"labels holds {len(labels)} entries for {len(n_symbols)} records; pass one per "
            "record (a number, or one number per symbol)."
        )
    out = []
    for i, (lab, n) in enumerate(zip(labels, n_symbols, strict=True)):
        arr = np.asarray(lab.detach().cpu() if hasattr(lab, "detach") else lab, dtype=np.float64)
        if arr.ndim == 0:
            arr = np.full(n, float(arr))
        elif arr.shape != (n,):
            raise DNIError(
                f"labels[{i}] holds {arr.size} values, but record {i} has {n} symbols as the "
                "model reads it; pass one value per symbol, or one number for the record."
            )
        out.append(arr)
    return np.concatenate(out)


def binary_targets(y: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows where ``y`` is defined and their 0/1 values, checked: two classes, 0/1 only."""
    defined = ~np.isnan(y)
    vals = y[defined]
    odd = np.setdiff1d(np.unique(vals), [0.0, 1.0])
    if odd.size:
        raise DNIError(
            f"{what} holds values {odd[:5].tolist()}; a probe fits a binary concept: pass "
            "0/1 (or booleans), NaN where undefined."
        )
    if vals.size == 0 or vals.min() == vals.max():
        only = "no defined value" if vals.size == 0 else f"only {int(vals[0])}s"
        raise DNIError(
            f"{what} has {only} on these records; a probe needs both classes. Pass records "
            "where the concept both holds and does not."
        )
    return np.flatnonzero(defined), vals


def check_width(reading: Reading, width: int, layer: str) -> None:
    """A probe of ``width`` units applied to a layer read with another width: refused."""
    if reading.X.shape[1] != width:
        raise LayerError(
            f"layer {layer!r} reads {reading.X.shape[1]} units here, the probe weighs {width}; "
            "apply it to a layer of the width it was fitted on."
        )
