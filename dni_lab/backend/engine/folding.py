"""One block of records folded into every measure state: the symbols each model reads,
the hypotheses of each symbol space (once, through the cache), the units' behaviors and
the measures' updates; a block of records of another kind than the first is refused
before anything reads it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import DNIError, HypothesisError, RecordError
from ..extraction.extract import Extractor, Padding
from ..extraction.sparse_block import SparseBlock
from ..hypothesis.cache import HypothesisCache, block_key
from ..hypothesis.hypotheses import BlockCancelled, for_model, hypothesis_block
from ..measures.base import stop_check
from .params import InspectParams
from .resolve import ModelUnits
from .states import MeasureState


def record_kind(record: Any) -> str:
    """What kind of record ``record`` is, in words: records of one run share one kind."""
    if isinstance(record, str):
        return "text (str)"
    if isinstance(record, (list, tuple)):
        return "sequence (list or tuple)"
    if isinstance(record, torch.Tensor):
        return "tensor"
    if isinstance(record, np.ndarray):
        return "array (numpy)"
    if isinstance(record, Mapping):
        return "mapping (dict)"
    return type(record).__name__


class BlockFolding:
    """The part of :class:`~.inspection.Inspection` that reads one block into its states."""

    params: InspectParams
    device: torch.device
    cache: HypothesisCache | None
    states: list[MeasureState]
    _cancel: bool
    _spaces: dict[str, _Space]
    _family_cols: list[np.ndarray]
    _padding: dict[str, Padding]
    _skipped: dict[str, int]
    _touched: bool
    #: the first record's kind and the record types seen of that kind (:meth:`_check_kinds`)
    _kind: tuple[str, set[type]] | None = None

    def _check_kinds(self, records: Sequence[Any], first: int) -> None:
        """Refuse a record of another kind than the first one, naming its position."""
        if self._kind is None and records:
            self._kind = (record_kind(records[0]), {type(records[0])})
        assert self._kind is not None
        kind, types = self._kind
        for i, r in enumerate(records):
            if type(r) in types:
                continue
            if record_kind(r) != kind:
                raise RecordError(
                    f"record {first + i:,} of the data is {_shown(r)} ({record_kind(r)}), but the "
                    f"records before it are {kind}; drop or convert it where the records are "
                    "made (the frame of the records read before it is the error's "
                    "partial_frame)."
                )
            types.add(type(r))

    def _extractors(self) -> dict[str, Extractor]:
        return {
            mu.model.name: Extractor(
                mu.model, mu.layer_units, self.params.behavior, self.device,
                features=mu.features, sparse=True,
                forward_batch=self.params.forward_batch,
                padding=self._padding.setdefault(mu.model.name, Padding()),
            )
            for mu in self._active_models()
        }

    def _first_hypotheses(
        self, records: list[Any], first: int
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The first block's hypothesis blocks of every symbol space, before any model runs."""
        rkey = block_key(records)
        return {
            key: self._hypothesis_block(
                key, records, self._symbol_counts(sp.models, records, first), first, set(), rkey
            )
            for key, sp in self._spaces.items()
        }

    def _read(
        self,
        block_records: list[Any],
        first: int,
        extractors: dict[str, Extractor],
        pre: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> bool:
        """Fold one block (records ``first``, ``first + 1``, ...) into every active state.

        ``pre``: hypothesis blocks already computed for it, by symbol space.
        False when a cancel arrived before any state saw the block.
        """
        counts = {
            key: self._symbol_counts(sp.models, block_records, first)
            for key, sp in self._spaces.items()
        }
        for sp in self._spaces.values():  # provenance: records a model skipped, per model
            for m in sp.models:
                if getattr(m, "skips", None) is not None:
                    n = sum(1 for r in block_records if m.skips(r))
                    self._skipped[m.name] = self._skipped.get(m.name, 0) + n
        skip = self._finished_families()
        rkey = block_key(block_records)  # once: the hypothesis cache and the behavior memo
        blocks: dict[str, tuple[torch.Tensor, torch.Tensor]] = dict(pre or {})
        try:  # every symbol space's hypotheses first: a Stop leaves no state half-updated
            for mu in self._active_models():
                key = _space_key(mu.model)
                if key not in blocks:  # one hypothesis block per symbol space, shared
                    blocks[key] = self._hypothesis_block(
                        key, block_records, counts[key], first, skip, rkey
                    )
        except BlockCancelled:
            return False
        if self._cancel:
            return False
        with stop_check(lambda: self._cancel):  # probes stop optimising on a Stop
            for mu in self._active_models():
                H, mask = blocks[_space_key(mu.model)]
                parts = extractors[mu.model.name](block_records, mask, first, rkey)
                U = _units_block([parts[a] for a in mu.layer_units])
                self._touched = True  # from here on a failure leaves states half-updated
                for s in self._states_of(mu):
                    if s.stopped_at is not None:  # settled while others read on
                        continue
                    cols = s.columns
                    if isinstance(U, SparseBlock):  # one sparse feature set: its latents
                        if len(cols) == mu.n_units and hasattr(s.measure, "update_sparse"):
                            s.accumulator = s.measure.update_sparse(s.accumulator, U, H, mask)
                            continue
                        U = U.dense()  # once per block, for the measures that need it
                    Ug = U if len(cols) == mu.n_units else U[..., torch.as_tensor(cols)]
                    s.accumulator = s.measure.update(s.accumulator, Ug, H, mask)
        return True

    def _hypothesis_block(
        self,
        key: str,
        records: list[Any],
        n_sym: list[int],
        first: int,
        skip: set[int],
        records_key: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Hypotheses ``(R, T, n_hyps)`` of one symbol space and its ``(R, T)`` mask."""
        space = self._spaces[key]
        H = torch.from_numpy(
            hypothesis_block(
                space.families, records, n_sym, first, self.cache, space.fingerprints, skip,
                cancelled=lambda: self._cancel, records_key=records_key,
            )
        ).to(self.device)
        mask = (
            torch.arange(H.shape[1], device=self.device)[None, :]
            < torch.as_tensor(n_sym, device=self.device)[:, None]
        )
        return H, mask

    def _symbol_counts(self, models: list[Any], records: list[Any], first: int) -> list[int]:
        counts = [models[0].symbols(r) for r in records]
        for m in models[1:]:
            other = [m.symbols(r) for r in records]
            if other != counts:
                i = next(i for i, (a, b) in enumerate(zip(counts, other, strict=True)) if a != b)
                raise DNIError(
                    f"models {models[0].name!r} and {m.name!r} count different symbols for "
                    f"record {first + i} ({counts[i]} vs {other[i]}); give them the same symbols=."
                )
        skips = getattr(models[0], "skips", None)  # a model may skip some records (too long)
        empty = [i for i, n in enumerate(counts) if n < 1 and not (skips and skips(records[i]))]
        if empty:
            raise HypothesisError(f"record {first + empty[0]} has no symbols; drop empty records.")
        return counts

    def _active_models(self) -> list[ModelUnits]:
        """Models with a pair still to converge (all of them when reading everything)."""
        seen: dict[str, ModelUnits] = {}
        for s in self.states:
            if not s.converged.all() or self.params.eps is None:
                seen.setdefault(s.model_name, s.model_units)
        return list(seen.values())

    def _states_of(self, mu: ModelUnits) -> list[MeasureState]:
        return [s for s in self.states if s.model_units is mu]

    def _finished_families(self) -> set[int]:
        """Families whose every score has converged in every state: no need to run them."""
        if self.params.eps is None or not self.states:
            return set()
        done = np.logical_and.reduce([s.converged.all(axis=0) for s in self.states])
        return {j for j, cols in enumerate(self._family_cols) if done[cols].all()}


@dataclass
class _Space:
    """Models that read the same symbols, and the hypothesis families as they read them."""

    models: list[Any]
    families: list[Any]
    fingerprints: list[str | None] | None


def _space_key(model: Any) -> str:
    # a model whose symbols are not the records' own (tokens) names its space and aligns
    return getattr(model, "symbol_space", "records")


def _symbol_spaces(models: list[Any], families: list[Any], cached: bool) -> dict[str, _Space]:
    spaces: dict[str, _Space] = {}
    for m in models:
        key = _space_key(m)
        if key not in spaces:
            fams = for_model(families, m)
            fps = [f.fingerprint() for f in fams] if cached else None
            spaces[key] = _Space([], fams, fps)
        spaces[key].models.append(m)
    return spaces


def _units_block(parts: list[Any]) -> Any:
    """A model's behaviors of one block: one tensor, or the sparse block of a lone sparse set."""
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p.dense() if isinstance(p, SparseBlock) else p for p in parts], dim=2)




def _shown(record: Any) -> str:
    text = repr(record)
    return text if len(text) <= 60 else text[:57] + "..."
