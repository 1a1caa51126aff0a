"""A PyTorch ``DataLoader`` as ``data=``: the stream of records it batches.

A loader yields collated batches; each is split back into its records along the batch
axis before any of the user's code (``encode``, hypotheses) sees one: a tensor or array
into its rows, a list or tuple of columns (``default_collate`` of ``(x, y)`` samples)
into one tuple per record, a mapping of columns into one dict per record, recursively. A
0-d value (a collated ``int`` label) becomes a Python number again; strings stay as they
are. A batch whose columns disagree on their length, or of a kind that cannot be split,
raises a :class:`~dni_lab.backend.errors.RecordError` naming the batch and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ..errors import RecordError

_ATOMS = (str, bytes, bool, int, float, complex, type(None), np.generic)


def is_loader(data: Any) -> bool:
    return isinstance(data, DataLoader)


class Unbatched:
    """The records of a :class:`DataLoader`, one at a time; iterable again and again (each
    pass a fresh pass over the loader)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        if self.loader.batch_size is None and self.loader.batch_sampler is None:
            yield from self.loader  # automatic batching off: each item is a record
            return
        for index, batch in enumerate(self.loader):
            yield from split_batch(batch, index)

    def __repr__(self) -> str:  # an error that shows the data must not list its records
        return f"Unbatched({type(self.loader).__name__})"


def loader_total(loader: DataLoader) -> int | None:
    """Records the loader yields, where its dataset and sampler say so; else None."""
    if isinstance(loader.dataset, IterableDataset):
        return None
    try:
        n = len(loader.sampler)  # type: ignore[arg-type]
    except TypeError:
        return None
    bs = loader.batch_size
    if bs is None:
        return None if loader.batch_sampler is not None else n
    return n - n % bs if loader.drop_last else n


def split_batch(batch: Any, index: int = 0) -> list[Any]:
    """The records of one collated batch (see the module docstring)."""
    return _split(batch, index)


def _split(batch: Any, index: int) -> list[Any]:
    if isinstance(batch, torch.Tensor):
        if batch.ndim == 0:
            raise _unsplittable(batch, index, "a 0-d tensor has no batch axis")
        return [r.item() if r.ndim == 0 else r for r in batch.unbind(0)]
    if isinstance(batch, np.ndarray):
        if batch.ndim == 0:
            raise _unsplittable(batch, index, "a 0-d array has no batch axis")
        return [r.item() if r.ndim == 0 else r for r in batch]
    if isinstance(batch, Mapping):
        keys = list(batch)
        cols = [_split(batch[k], index) for k in keys]
        return [dict(zip(keys, row, strict=True)) for row in _rows(cols, keys, batch, index)]
    if isinstance(batch, (list, tuple)):
        if all(isinstance(x, _ATOMS) for x in batch):  # a column of strings or numbers
            return list(batch)
        cols = [_split(c, index) for c in batch]
        return [tuple(row) for row in _rows(cols, range(len(cols)), batch, index)]
    raise _unsplittable(batch, index, f"a {type(batch).__name__} is not a tensor, array, "
                                      "list, tuple or mapping")  # fmt: skip


def _rows(cols: list[list[Any]], names: Any, batch: Any, index: int) -> Any:
    lengths = {len(c) for c in cols}
    if len(lengths) > 1:
        sizes = ", ".join(f"{n!r}: {len(c)}" for n, c in zip(names, cols, strict=True))
        raise _unsplittable(batch, index, f"its columns hold different counts ({sizes})")
    return zip(*cols, strict=True)


def _unsplittable(batch: Any, index: int, why: str) -> RecordError:
    return RecordError(
        f"batch {index:,} of the DataLoader cannot be split into records: {why}. Give the "
        "DataLoader a collate_fn that returns tensors, lists or dicts of one entry per "
        "record, or pass the dataset itself as data= (data=loader.dataset)."
    )
