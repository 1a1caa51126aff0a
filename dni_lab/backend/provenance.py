"""What a score frame came from: the query's parameters, versions, weights and data.

Every frame that :func:`dni_lab.inspect` returns carries this record, so that
``dl.export(frame, path)`` writes a reproducible file without being told the
parameters again. Polars frames hold no metadata of their own; the record is kept
beside the frame object for as long as it lives (a filtered or sorted copy is a new
frame, and exporting it needs ``params=`` or ``dl.provenance(original)``).
"""

from __future__ import annotations

import hashlib
import platform
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from .._version import __version__
from .behavior_memo import model_state

_RECORDS: dict[int, dict[str, Any]] = {}


def attach(frame: pl.DataFrame, record: dict[str, Any]) -> pl.DataFrame:
    """Keep ``record`` as the provenance of ``frame`` (until the frame is collected)."""
    key = id(frame)
    _RECORDS[key] = record
    weakref.finalize(frame, _RECORDS.pop, key, None)
    return frame


def provenance(frame: pl.DataFrame) -> dict[str, Any] | None:
    """The provenance record of a frame returned by ``dl.inspect``, or None.

    Examples
    --------
    >>> frame = dl.inspect(...)                       # doctest: +SKIP
    >>> dl.provenance(frame)["data_sha256"]           # doctest: +SKIP
    """
    return _RECORDS.get(id(frame))


def versions() -> dict[str, str]:
    """Versions of what computed the scores."""
    return {
        "dni_lab": __version__,
        "torch": torch.__version__,
        "polars": pl.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def weights_sha256(module: nn.Module) -> str:
    """Hash of a module's parameters and buffers (names, shapes, dtypes and bytes).

    Remembered per module until a weight changes (:func:`.behavior_memo.model_state`):
    every call hashes the provenance of its models, and GPT-2's 500 MB took a second.
    """
    state = model_state(module)
    try:
        known = _SHA256.get(module)
    except TypeError:  # a module class that defines __eq__ without __hash__
        return _hash_weights(module)
    if known is not None and known[0] == state:
        return known[1]
    digest = _hash_weights(module)
    _SHA256[module] = (state, digest)
    return digest


_SHA256: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[int, ...], str]] = (
    weakref.WeakKeyDictionary()
)


def _hash_weights(module: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class RecordsHash:
    """Incremental hash of the records a run read, in order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.count = 0

    def update(self, records: Iterable[Any]) -> None:
        for r in records:
            self._h.update(_record_bytes(r))
            self._h.update(b"\x00")
            self.count += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _record_bytes(record: Any) -> bytes:
    if isinstance(record, str):
        # a window of a longer text is that text plus its offset (hypotheses read the whole)
        source = getattr(record, "source", None)
        start = getattr(record, "start", None)
        extra = f"\x01{start}\x01{source}" if source is not None else ""
        return (str(record) + extra).encode("utf-8", "surrogatepass")
    if isinstance(record, torch.Tensor):
        record = record.detach().cpu().numpy()
    if isinstance(record, np.ndarray):
        return f"{record.dtype}{record.shape}".encode() + np.ascontiguousarray(record).tobytes()
    return repr(record).encode("utf-8", "surrogatepass")
