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
written to a temporary file and renamed, so a crash never leaves half an index
(see :mod:`.index_file`).

An index answers for the model it was fitted on: it keeps the model's name and a
hash of its weights, and a query with another checkpoint is refused (its top-k
would silently come from the wrong weights).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.params import check_workers
from ..engine.provenance import weights_sha256
from ..errors import DNIError
from ..extraction.models import Model
from ..hypothesis.cache import block_key
from .acts import Activations
from .index_file import ARRAYS, LEARNED, PARAMS, load_index, save_index


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
        if len(records) == 0:
            raise DNIError("no records to index; pass the dataset the queries will search.")
        check_workers(cluster, workers)
        weights = weights_sha256(model.module)
        if cluster is not None and cluster is not False:
            from ..cluster.tasks import sharded_activations

            acts, address = sharded_activations(
                model, records, self.layer, self.symbol_agg, self.batch_size, self.device,
                cluster, workers,
            )  # fmt: skip
            return self.fit_activations(acts, address, model.name, block_key(records), weights)
        ev = Activations(
            model, records, self.layer, None, self.symbol_agg, self.batch_size, self.device
        )
        acts = ev(np.arange(len(records)))
        return self.fit_activations(acts, ev.address_, model.name, block_key(records), weights)

    def fit_activations(
        self, acts: np.ndarray, address: str, model_name: str, digest: str, weights: str
    ) -> NeuronIndex:
        """Build from precomputed ``(records, units)`` activations (what :meth:`fit` extracts).

        ``weights`` is the :func:`~dni_lab.backend.engine.provenance.weights_sha256` of the
        model that computed ``acts``; queries with other weights are refused.
        """
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
        self.address_ = address
        self.model_name_ = model_name
        self.digest_ = digest
        self.weights_sha256_ = weights
        return self

    def _check_built(self) -> None:
        if not hasattr(self, "digest_"):
            raise DNIError("the index is not built; call NeuronIndex(...).fit(model, records).")

    def partition_ids(self, unit: int) -> np.ndarray:
        """Partition id (0 = lowest activations) of every record for ``unit``."""
        return unpack_ids(self.partitions_[unit], self.n_records_, self.bits_)

    def check(
        self,
        model: Model,
        records: Sequence[Any],
        address: str,
        width: int | None,
        symbol_agg: str,
    ) -> None:
        """Raise unless the index was fitted on this model, layer, aggregation and dataset.

        The model must be the same checkpoint: same name and same weights (hashed
        now and at fit time), so that an index never answers for other weights.
        """
        self._check_built()
        problems = []
        weights = weights_sha256(model.module)
        if model.name != self.model_name_ or weights != self.weights_sha256_:
            why = (
                "the same weights under another name, which may encode records differently"
                if weights == self.weights_sha256_
                else "another checkpoint: its answers would come from other weights"
            )
            problems.append(
                f"model {model.name!r} with weights {weights[:12]} (index: fitted on model "
                f"{self.model_name_!r} with weights {self.weights_sha256_[:12]}; {why})"
            )
        if address != self.address_:
            problems.append(f"layer {address!r} (index: {self.address_!r})")
        if width is not None and width != self.width_:
            problems.append(f"{width} units in the layer (index: {self.width_})")
        if symbol_agg != self.symbol_agg:
            problems.append(f"symbol_agg {symbol_agg!r} (index: {self.symbol_agg!r})")
        if len(records) != self.n_records_ or block_key(records) != self.digest_:
            problems.append(f"records ({len(records)} given; the index holds {self.n_records_})")
        if problems:
            raise DNIError(
                f"the index does not match the query: {'; '.join(problems)}. Re-fit it on "
                f"this model and records: NeuronIndex({self.layer!r}, ...).fit(model, records)."
            )

    # -- persistence (the file format and its checks live in .index_file) ------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index to ``path`` (``.npz`` of plain arrays) atomically."""
        self._check_built()
        return save_index({k: getattr(self, k) for k in (*PARAMS, *LEARNED, *ARRAYS)}, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> NeuronIndex:
        """Read an index written by :meth:`save`, checking every field (no pickle involved).

        Raises
        ------
        DNIError
            The file is truncated or corrupt, holds pickled data, another format
            version, an unknown field or arrays that disagree with its fields.
        """
        fields = load_index(path)
        index = cls(*(fields[k] for k in PARAMS))
        for k in (*LEARNED, *ARRAYS):  # the names the file's checks allowed, nothing else
            setattr(index, k, fields[k])
        return index

    def __repr__(self) -> str:
        built = (
            f", {self.n_records_} records × {self.width_} units" if hasattr(self, "digest_") else ""
        )
        params = f"ratio={self.ratio}, n_partitions={self.n_partitions}"
        return f"NeuronIndex({self.layer!r}, {params}{built})"
