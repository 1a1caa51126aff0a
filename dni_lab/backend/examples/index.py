"""DeepEverest's per-layer index: Maximum Activation Index and Neural Partition Index.

Built once from one pass over the dataset, the index keeps, per unit (neuron):

* **MAI** — the top ``ratio`` of the records by activation, sorted, with their
  exact activations (``mai_ids_``, ``mai_values_``: ``(units, m)``);
* **NPI** — the records cut into ``n_partitions`` equal-count partitions by
  activation; per partition its lower and upper bound (``lower_``, ``upper_``:
  ``(units, partitions)``), and per record its partition id in
  ``ceil(log2 n_partitions)`` bits (``partitions_``: bit-packed, ``(units, bytes)``).

The index does not keep every activation: a query gets exact values by running
the model on candidate records (see :mod:`.nta`). It is saved as one
``.npz`` of plain arrays (read with ``allow_pickle=False``; never pickle),
written to a temporary file and renamed, so a crash never leaves half an index.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import block_key
from ..errors import DNIError
from ..models import Model
from .acts import Activations

FORMAT = 1


def pack_ids(ids: np.ndarray, bits: int) -> np.ndarray:
    """Non-negative ints ``(N,)`` → ``bits`` bits each, big-endian, packed into uint8."""
    shifts = np.arange(bits - 1, -1, -1, dtype=np.int64)
    return np.packbits(((ids.astype(np.int64)[:, None] >> shifts) & 1).astype(np.uint8).ravel())


def unpack_ids(packed: np.ndarray, n: int, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_ids`: ``(n,)`` int64."""
    b = np.unpackbits(packed)[: n * bits].reshape(n, bits).astype(np.int64)
    return b @ (1 << np.arange(bits - 1, -1, -1, dtype=np.int64))


class NeuronIndex:
    """MAI + NPI of one layer over one dataset (DeepEverest).

    Parameters
    ----------
    layer : str or int
        The layer to index (all its units).
    ratio : float
        Share of records the MAI keeps per unit (DeepEverest's default 0.05).
    n_partitions : int
        NPI partitions per unit (DeepEverest's default 32).
    symbol_agg : {"max", "mean", "last"}
        How a record's activation aggregates its symbols (see :mod:`.examples`).
    batch_size : int
    device : str or torch.device
        Used while building; the saved index is device-free.
    """

    def __init__(
        self,
        layer: str | int,
        ratio: float = 0.05,
        n_partitions: int = 32,
        symbol_agg: str = "max",
        batch_size: int = 256,
        device: Any = "auto",
    ) -> None:
        self.layer = layer
        self.ratio = ratio
        self.n_partitions = n_partitions
        self.symbol_agg = symbol_agg
        self.batch_size = batch_size
        self.device = device

    def fit(
        self,
        model: Model,
        records: Sequence[Any],
        cluster: str | int | bool | None = None,
        workers: int | None = None,
    ) -> NeuronIndex:
        """Run the model once over ``records`` and build both indexes.

        ``cluster``/``workers`` (as in :func:`dl.inspect`) run the pass as Ray tasks over
        shards of records; the index is the one this process would build.
        """
        if not 0 <= self.ratio <= 1 or self.n_partitions < 1:
            raise DNIError("ratio must lie in [0, 1] and n_partitions be at least 1.")
        if cluster is not None and cluster is not False:
            from ..cluster.tasks import sharded_activations

            acts, address = sharded_activations(
                model, records, self.layer, self.symbol_agg, self.batch_size, self.device,
                cluster, workers,
            )  # fmt: skip
            return self.fit_activations(acts, address, model.name, block_key(records))
        ev = Activations(
            model, records, self.layer, None, self.symbol_agg, self.batch_size, self.device
        )
        acts = ev(np.arange(len(records)))
        return self.fit_activations(acts, ev.address_, model.name, block_key(records))

    def fit_activations(
        self, acts: np.ndarray, address: str, model_name: str, digest: str
    ) -> NeuronIndex:
        """Build from precomputed ``(records, units)`` activations (what :meth:`fit` extracts)."""
        N, D = acts.shape
        P = max(1, min(self.n_partitions, N))
        m = min(N, math.ceil(self.ratio * N))
        desc = np.argsort(-acts, axis=0, kind="stable")[:m]  # ties: lower record id first
        self.mai_ids_ = np.ascontiguousarray(desc.T.astype(np.int32))
        self.mai_values_ = np.ascontiguousarray(
            np.take_along_axis(acts, desc, 0).T.astype(np.float32)
        )
        asc = np.argsort(acts, axis=0, kind="stable")
        edges = np.linspace(0, N, P + 1).round().astype(np.int64)  # equal-count partitions
        self.lower_ = np.take_along_axis(acts, asc[edges[:-1]], 0).T.astype(np.float32)
        self.upper_ = np.take_along_axis(acts, asc[edges[1:] - 1], 0).T.astype(np.float32)
        self.bits_ = max(1, math.ceil(math.log2(P)))
        rank = np.empty(N, dtype=np.int64)
        packed = []
        for u in range(D):
            rank[asc[:, u]] = np.arange(N)
            packed.append(pack_ids(np.searchsorted(edges, rank, side="right") - 1, self.bits_))
        self.partitions_ = np.stack(packed) if packed else np.zeros((0, 0), np.uint8)
        self.n_records_, self.width_, self.n_partitions_ = N, D, P
        self.address_, self.model_name_, self.digest_ = address, model_name, digest
        return self

    def partition_ids(self, unit: int) -> np.ndarray:
        """Partition id (0 = lowest activations) of every record for ``unit``."""
        return unpack_ids(self.partitions_[unit], self.n_records_, self.bits_)

    def check(self, model: Model, records: Sequence[Any], address: str, symbol_agg: str) -> None:
        """Raise if the index was not built for this layer, aggregation and dataset."""
        if not hasattr(self, "digest_"):
            raise DNIError("the index is not built; call NeuronIndex(...).fit(model, records).")
        problems = []
        if address != self.address_:
            problems.append(f"layer {address!r} (index: {self.address_!r})")
        if symbol_agg != self.symbol_agg:
            problems.append(f"symbol_agg {symbol_agg!r} (index: {self.symbol_agg!r})")
        if len(records) != self.n_records_ or block_key(records) != self.digest_:
            problems.append(f"records ({len(records)} given; the index holds {self.n_records_})")
        if problems:
            raise DNIError(
                f"the index does not match the query: {'; '.join(problems)}. Rebuild it."
            )

    # -- persistence ---------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        keys = ("layer", "ratio", "n_partitions", "symbol_agg", "batch_size")
        learned = (
            "n_records_",
            "width_",
            "n_partitions_",
            "bits_",
            "address_",
            "model_name_",
            "digest_",
        )
        return {"format": FORMAT, **{k: getattr(self, k) for k in keys + learned}}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the index to ``path`` (``.npz``) atomically."""
        path = Path(path)
        arrays = {
            k: getattr(self, k)
            for k in ("mai_ids_", "mai_values_", "lower_", "upper_", "partitions_")
        }
        arrays["meta"] = np.array(json.dumps(self._meta()))
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> NeuronIndex:
        """Read an index written by :meth:`save` (no pickle involved)."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FORMAT:
                raise DNIError(f"{path} holds index format {meta.get('format')}, not {FORMAT}.")
            idx = cls(
                meta["layer"],
                meta["ratio"],
                meta["n_partitions"],
                meta["symbol_agg"],
                meta["batch_size"],
            )
            for k in ("mai_ids_", "mai_values_", "lower_", "upper_", "partitions_"):
                setattr(idx, k, z[k])
        for k, v in meta.items():
            if k.endswith("_"):
                setattr(idx, k, v)
        return idx

    def __repr__(self) -> str:
        built = (
            f", {self.n_records_} records × {self.width_} units" if hasattr(self, "digest_") else ""
        )
        params = f"ratio={self.ratio}, n_partitions={self.n_partitions}"
        return f"NeuronIndex({self.layer!r}, {params}{built})"
