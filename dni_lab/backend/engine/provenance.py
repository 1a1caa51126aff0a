"""What a score frame came from: the query's parameters, versions, weights and data.

Every frame that :func:`dni_lab.inspect` returns carries this record, so that
``dl.export(frame, path)`` writes a reproducible file without being told the
parameters again. Polars frames hold no metadata of their own; the record is kept
beside the frame object for as long as it lives (a filtered or sorted copy is a new
frame, and exporting it needs ``params=`` or ``dl.provenance(original)``).

The record also says how reading ended (:func:`ending`): records read out of the
total, ``stopped_early`` when every pair settled before the data's end, and
``partial`` when a Stop, ``cancel()`` or Ctrl-C ended the run first, and under
``levels`` how each hypothesis's level was decided before reading
(:mod:`.levels`: declared, proved from which records, or the model's own symbols),
and under ``layouts`` how each layer read was laid out (:func:`layouts_record`:
declared, a rule, or proved by a second probe, with what the probes saw).
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

from ..._version import __version__
from ..extraction.behavior_memo import model_state

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


class PartialResultWarning(UserWarning):
    """A frame holds the scores of a run stopped before it finished (Stop, cancel, Ctrl-C)."""


def ending(
    records_read: int, total_records: int | None, cancelled: bool, stopped_early: bool
) -> dict[str, Any]:
    """How reading ended, as a provenance record states it.

    Parameters
    ----------
    records_read, total_records : int
        Records read, and the data's length (None when a generator's length is unknown).
    cancelled : bool
        A Stop, ``cancel()`` or Ctrl-C ended the run: its frame is a partial result.
    stopped_early : bool
        Early stopping ended the run before the data's end (every pair settled): the
        frame is complete for its ``eps``, not partial.

    Returns
    -------
    dict
        ``records_read``, ``total_records``, ``partial``, ``partial_reason`` (None unless
        partial) and ``stopped_early``.
    """
    of = f" of {total_records:,}" if total_records else ""
    return {
        "records_read": records_read,
        "total_records": total_records,
        "partial": bool(cancelled),
        "partial_reason": f"stopped by the user after {records_read:,}{of} records"
        if cancelled
        else None,
        "stopped_early": bool(stopped_early) and not cancelled,
    }


def partial_note(record: dict[str, Any] | None) -> str | None:
    """The one line that tells a person a frame is partial, or None for a finished run.

    Examples
    --------
    >>> partial_note(ending(1536, 78662, cancelled=True, stopped_early=False)).split(";")[0]
    'partial result: stopped by the user after 1,536 of 78,662 records'
    """
    if not record or not record.get("partial"):
        return None
    return (
        f"partial result: {record.get('partial_reason') or 'stopped by the user'}; "
        "pairs not converged have converged=False and say why in reason"
    )


def merge_records(parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """One record for several inspections that make one result (a query's steps).

    ``fields`` (the query, its options, :func:`ending`) come first; then the versions,
    every model's weights hash, every feature set's, one data hash over the steps' own,
    and each step's record.
    """
    weights: dict[str, str] = {}
    features: dict[str, dict[str, str]] = {}
    data = hashlib.sha256()
    for part in parts:
        weights.update(part.get("weights_sha256", {}))
        for mid, sets in part.get("features_sha256", {}).items():
            features.setdefault(mid, {}).update(sets)
        data.update(str(part.get("data_sha256", "")).encode())
    return {
        **fields,
        "versions": versions(),
        "weights_sha256": weights,
        "features_sha256": features,
        "data_sha256": data.hexdigest(),
        "steps": [{k: v for k, v in p.items() if k != "versions"} for p in parts],
    }


def layouts_record(states: Iterable[Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """How the layers a run read were laid out, per model and layer.

    Parameters
    ----------
    states : iterable of MeasureState
        The run's states; each names its model and the layers it reads.

    Returns
    -------
    dict
        ``{model: {layer: {"layout", "how", "evidence"}}}``: ``how`` is ``"declared"``,
        ``"rule"`` (the module's kind or the data flow), ``"probe"`` (a second probe
        moved each axis with the records or their length; ``evidence`` says what each
        pass saw) or ``"model"`` (a model whose capture returns symbols itself). A model
        that names the per-symbol layers its default units leave out (a vision
        transformer's patch embedding and embeddings: ``model.left_out()``) adds each one
        it did not read with ``how`` ``"left out"``, so a frame says what it did not score.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for state in states:
        units = state.model_units
        report = getattr(units.model, "layout_report", None)
        if report is not None:  # a layer of latents has no layout of its own
            out.setdefault(units.model.name, {}).update(report(list(units.layer_units)))
    for state in states:
        units = state.model_units
        left_out = getattr(units.model, "left_out", None)
        if left_out is None:
            continue
        rows = out.setdefault(units.model.name, {})
        for layer, what in left_out().items():
            if layer not in rows:
                rows[layer] = {"layout": None, "how": "left out", "evidence": (
                    f"the {what}: not among the default units (the blocks); name it in "
                    f"units=[({layer!r}, '*')] to read it")}  # fmt: skip
    return out


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


def features_sha256(fs: nn.Module) -> str:
    """Hash of a feature set (``dl.features``): its weights, as :func:`weights_sha256`
    hashes them, and its configuration (architecture, ``k``, normalization, hook), which
    change its latents as much as a weight does. Two sets with one name and different
    weights hash apart."""
    config = getattr(fs, "config", None)
    described = repr(sorted(config().items())) if callable(config) else repr(fs)
    return hashlib.sha256(f"{described}\x00{weights_sha256(fs)}".encode()).hexdigest()


_SHA256: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[int, ...], str]] = (
    weakref.WeakKeyDictionary()
)


def _hash_weights(module: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        # name, shape and dtype first: equal bytes in another shape or dtype hash apart
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        if t.device.type == "meta":  # offloaded by accelerate: its value is elsewhere
            t = _offloaded(module, name)
            if t is None:
                continue
        h.update(tensor_bytes(t))
    return h.hexdigest()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The bytes of any tensor a module can hold, in row-major order.

    0-dim buffers (BatchNorm's ``num_batches_tracked``), transposed or otherwise strided
    parameters (a last stride other than 1, which ``view(torch.uint8)`` refuses), sparse
    and quantized tensors, conjugate and negative views, every dtype: the same values give
    the same bytes however they are laid out in memory.
    """
    t = t.detach()
    if t.layout != torch.strided:  # sparse: its dense values (a module's are small)
        t = t.to_dense()
    if t.is_quantized:  # the stored integers, then what they mean
        scale = (t.q_per_channel_scales() if t.qscheme() in _PER_CHANNEL else t.q_scale())
        zero = (t.q_per_channel_zero_points() if t.qscheme() in _PER_CHANNEL
                else t.q_zero_point())  # fmt: skip
        extra = f"{t.qscheme()}:{torch.as_tensor(scale).tolist()}:"
        extra += f"{torch.as_tensor(zero).tolist()}"
        return extra.encode() + tensor_bytes(t.int_repr())
    t = t.to("cpu").resolve_conj().resolve_neg().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()


_PER_CHANNEL = (
    torch.per_channel_affine,
    torch.per_channel_symmetric,
    torch.per_channel_affine_float_qparams,
)


def _offloaded(module: nn.Module, name: str) -> torch.Tensor | None:
    """An offloaded weight's value, from accelerate's hook on the module holding it."""
    owner, _, leaf = name.rpartition(".")
    sub = module.get_submodule(owner) if owner else module
    weights = getattr(getattr(sub, "_hf_hook", None), "weights_map", None)
    try:
        return torch.as_tensor(weights[leaf]) if weights is not None else None
    except (KeyError, TypeError):
        return None


class RecordsHash:
    """Hash of the records a run read, the same however they were cut into blocks.

    Each record's SHA-256 is a coefficient of a polynomial evaluated at a fixed point
    modulo the prime 2**255 - 19 (Horner's rule, in record order); a block's value
    (:func:`block_digest`) is computed wherever the block was read, and blocks join as
    ``acc * B**len(block) + block`` in block order. So one process, a cluster whose workers
    read their own parts of a file, and any ``block_size`` give the same ``data_sha256``
    for the same records in the same order; another order or another record changes it.
    ``data_sha256`` is the SHA-256 of that value and the record count. Frames exported
    before 2026-11-26 hash their data differently (one running SHA-256 over the records).
    """

    def __init__(self) -> None:
        self._acc = 0
        self.count = 0

    def update(self, records: list[Any]) -> None:
        """Add a block of records read here."""
        self.add(block_digest(records), len(records))

    def add(self, digest: str, count: int) -> None:
        """Add a block's value (:func:`block_digest`), computed wherever the block was read."""
        self._acc = (self._acc * pow(_BASE, count, _PRIME) + int(digest, 16)) % _PRIME
        self.count += count

    def hexdigest(self) -> str:
        return hashlib.sha256(f"{self._acc:064x}:{self.count}".encode()).hexdigest()


_PRIME = 2**255 - 19
_BASE = int.from_bytes(hashlib.sha256(b"dni_lab records").digest(), "big") % _PRIME


def block_digest(records: Iterable[Any]) -> str:
    """One block's value for :class:`RecordsHash`: its records' SHA-256s, in order."""
    acc = 0
    for r in records:
        d = int.from_bytes(hashlib.sha256(_record_bytes(r)).digest(), "big")
        acc = (acc * _BASE + d) % _PRIME
    return f"{acc:064x}"


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
