"""The streaming block loop: hypotheses and units per block, every measure updated,
convergence checked per (unit group, hypothesis, measure), early stop, cancel."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch

from .cache import HypothesisCache
from .errors import DNIError, HypothesisError
from .extract import Extractor, on_device, resolve_device
from .frames import block_frame, empty_frame
from .hypotheses import hypothesis_block
from .measures import Measure
from .resolve import ModelUnits, as_families, as_measures, as_models, normalize_units, resolve_units

#: Records after which a pair whose score is still null (constant so far) counts as settled.
#: A hypothesis that first fires after this many records is missed under early stopping;
#: ``eps=None`` reads everything.
NULL_SETTLE_RECORDS = 2048


@dataclass
class Progress:
    """Where a run stands; passed to per-block callbacks."""

    records_read: int = 0
    blocks: int = 0
    pairs_total: int = 0
    pairs_converged: int = 0
    elapsed_s: float = 0.0
    total_records: int | None = None
    done: bool = False
    cancelled: bool = False

    @property
    def share_converged(self) -> float:
        return self.pairs_converged / self.pairs_total if self.pairs_total else 0.0

    @property
    def time_left_s(self) -> float | None:
        """Upper bound from the read rate, if the data's length is known."""
        if self.done:
            return 0.0
        if not self.total_records or not self.records_read:
            return None
        rate = self.elapsed_s / self.records_read
        return rate * max(self.total_records - self.records_read, 0)


@dataclass
class Slot:
    """One measure state over one unit set of one model, with its convergence snapshot."""

    mp: ModelUnits
    measure: Measure
    group: str
    cols: np.ndarray
    state: Any
    converged: np.ndarray
    snap: dict[str, np.ndarray] = field(default_factory=dict)


class Inspection:
    """A prepared inspection; :meth:`run` executes it block by block."""

    def __init__(
        self,
        models: Any,
        hypotheses: Any,
        measures: Any = ("corr",),
        data: Iterable[Any] = (),
        units: Any = None,
        eps: float | None = 0.025,
        confidence: float = 0.95,
        block_size: int = 512,
        device: str | torch.device = "auto",
        behavior: Any = "activation",
        cache: HypothesisCache | str | bool | None = None,
        max_records: int | None = None,
        min_records: int = 0,
    ) -> None:
        if block_size < 1:
            raise DNIError(f"block_size must be a positive number of records, got {block_size}.")
        if eps is not None and not eps > 0:
            raise DNIError(f"eps must be positive (or None to read every record), got {eps}.")
        if not 0 < confidence < 1:
            raise DNIError(f"confidence must lie strictly between 0 and 1, got {confidence}.")
        self.models = as_models(models)
        self.families, self.info = as_families(hypotheses)
        self.measures = as_measures(measures)
        self.units = normalize_units(units)
        self.data, self.eps, self.confidence = as_records(data), eps, confidence
        self.block_size, self.behavior = block_size, behavior
        self.device = resolve_device(device)
        self.cache = _as_cache(cache)
        self.max_records, self.min_records = max_records, min_records
        self.hids = [i.name for i in self.info]
        self._fingerprints = [f.fingerprint() for f in self.families] if self.cache else None
        widths = [len(f.signals()) for f in self.families]
        self._family_cols = np.split(np.arange(sum(widths)), np.cumsum(widths)[:-1])
        self.slots: list[Slot] = []
        self.progress = Progress(total_records=_length(data, max_records))
        self._cancel = False

    def params(self) -> dict[str, Any]:
        """The query's parameters, stored with exported frames."""
        return {
            "models": [m.name for m in self.models],
            "hypotheses": self.hids,
            "measures": [m.name for m in self.measures],
            "units": repr(self.units),
            "eps": self.eps,
            "confidence": self.confidence,
            "block_size": self.block_size,
            "device": str(self.device),
            "behavior": self.behavior if isinstance(self.behavior, str) else "function",
        }

    def cancel(self) -> None:
        """Ask the loop to stop after the block in flight."""
        self._cancel = True

    # -- the loop ---------------------------------------------------------------
    def run(self, on_block: Callable[[Inspection], None] | None = None) -> pl.DataFrame:
        """Read blocks until every pair converged, the data ended, or a cancel."""
        start = time.perf_counter()
        nh = len(self.info)
        extractors: dict[str, Extractor] = {}
        for block_records, first in self._blocks():
            n_sym = self._symbol_counts(block_records, first)
            if not self.slots:
                self._prepare(block_records)
                extractors = {
                    s.mp.model.name: Extractor(
                        s.mp.model, s.mp.layer_units, self.behavior, self.device
                    )
                    for s in self.slots
                }
            H = torch.from_numpy(
                hypothesis_block(
                    self.families,
                    block_records,
                    n_sym,
                    first,
                    self.cache,
                    self._fingerprints,
                    self._finished_families(),
                )
            ).to(self.device)
            mask = (
                torch.arange(H.shape[1], device=self.device)[None, :]
                < torch.as_tensor(n_sym, device=self.device)[:, None]
            )
            for mp in self._active_models():
                with on_device(mp.model, self.device):
                    parts = extractors[mp.model.name](block_records, mask)
                U = torch.cat([parts[a] for a in mp.layer_units], dim=2)
                for s in self._slots_of(mp):
                    Ug = U if len(s.cols) == mp.n_units else U[..., torch.as_tensor(s.cols)]
                    s.state = s.measure.update(s.state, Ug, H, mask)
            self.progress.records_read = first + len(block_records)
            self.progress.blocks += 1
            self._check_convergence(nh)
            self.progress.elapsed_s = time.perf_counter() - start
            if on_block is not None:
                on_block(self)
            if self._cancel or (self.eps is not None and self._all_converged()):
                break
        self.progress.cancelled = self._cancel
        self.progress.done = True
        self.progress.elapsed_s = time.perf_counter() - start
        return self.frame(final=True)

    def _blocks(self) -> Iterator[tuple[list[Any], int]]:
        it = iter(self.data)
        if self.max_records is not None:
            it = itertools.islice(it, self.max_records)
        first = 0
        while True:
            block = list(itertools.islice(it, self.block_size))
            if not block:
                if first == 0:
                    raise DNIError("the data holds no records; pass a non-empty sequence.")
                return
            yield block, first
            first += len(block)

    def _symbol_counts(self, records: list[Any], first: int) -> list[int]:
        counts = [self.models[0].symbols(r) for r in records]
        for m in self.models[1:]:
            other = [m.symbols(r) for r in records]
            if other != counts:
                i = next(i for i, (a, b) in enumerate(zip(counts, other, strict=True)) if a != b)
                raise DNIError(
                    f"models {self.models[0].name!r} and {m.name!r} count different symbols for "
                    f"record {first + i} ({counts[i]} vs {other[i]}); give them the same symbols=."
                )
        if min(counts) < 1:
            i = counts.index(min(counts))
            raise HypothesisError(f"record {first + i} has no symbols; drop empty records.")
        return counts

    def _prepare(self, sample: list[Any]) -> None:
        nh = len(self.info)
        for model in self.models:
            with on_device(model, self.device):
                mp = resolve_units(model, self.units, sample, self.device)
            for meas in self.measures:
                sets = (
                    [(g.name, g.cols) for g in mp.groups]
                    if meas.joint
                    else [("", np.arange(mp.n_units))]
                )
                for name, cols in sets:
                    state = meas.start(len(cols), nh, self.device, self.info)
                    conv = np.zeros((len(cols), nh), dtype=bool)
                    self.slots.append(Slot(mp, meas, name, cols, state, conv))
        self.progress.pairs_total = sum(s.converged.size for s in self.slots)

    def _active_models(self) -> list[ModelUnits]:
        seen: dict[str, ModelUnits] = {}
        for s in self.slots:
            if not s.converged.all() or self.eps is None:
                seen.setdefault(s.mp.model.name, s.mp)
        return list(seen.values())

    def _slots_of(self, mp: ModelUnits) -> list[Slot]:
        return [s for s in self.slots if s.mp is mp]

    def _check_convergence(self, nh: int) -> None:
        if self.eps is None or self.progress.records_read < self.min_records:
            return
        for s in self.slots:
            if not s.measure.has_error or s.converged.all():
                continue
            res = s.measure.peek(s.state, self.confidence)
            new = (res.err <= self.eps) & ~s.converged
            if self.progress.records_read >= NULL_SETTLE_RECORDS:
                # Still null with a reason (a hypothesis or unit constant so far): no error
                # estimate will ever come, so waiting for one would defeat early stopping.
                new |= np.isnan(res.unit_score) & (res.reason != None) & ~s.converged  # noqa: E711
            if not new.any():
                continue
            _snapshot(s, res, new, self.progress.records_read)
        self.progress.pairs_converged = int(sum(s.converged.sum() for s in self.slots))

    def _finished_families(self) -> set[int]:
        """Families whose every score has converged in every slot: no need to run them."""
        if self.eps is None or not self.slots:
            return set()
        done = np.logical_and.reduce([s.converged.all(axis=0) for s in self.slots])
        return {j for j, cols in enumerate(self._family_cols) if done[cols].all()}

    def _all_converged(self) -> bool:
        return bool(self.slots) and all(s.converged.all() for s in self.slots)

    # -- results ----------------------------------------------------------------
    def frame(self, final: bool = False) -> pl.DataFrame:
        """The score frame now: converged pairs frozen, the rest at their current value."""
        if not self.slots:
            return empty_frame()
        complete = final and not self._cancel
        parts = []
        for s in self.slots:
            # A slot whose pairs all converged reports frozen snapshots: no final fit needed.
            exact = final and not s.converged.all()
            res = (
                s.measure.result(s.state, self.confidence)
                if exact
                else s.measure.peek(s.state, self.confidence)
            )
            arrs = {
                "unit_score": res.unit_score,
                "group_score": res.group_score,
                "err": res.err,
                "reason": res.reason,
                "n_records": np.full(s.converged.shape, self.progress.records_read),
            }
            if s.snap:
                for k, v in s.snap.items():
                    arrs[k] = np.where(s.converged, v, arrs[k])
            # A pair read to the end of the data holds its full-data value.
            converged = s.converged | complete
            mp = s.mp
            parts.append(
                block_frame(
                    mp.model.name,
                    mp.uids[s.cols],
                    mp.layers[s.cols],
                    mp.units[s.cols],
                    self.hids,
                    s.measure.name,
                    s.group if s.group else mp.layers[s.cols],
                    arrs["unit_score"],
                    arrs["group_score"],
                    arrs["err"],
                    arrs["n_records"],
                    converged,
                    arrs["reason"],
                )
            )
        return pl.concat(parts, how="vertical")


def _snapshot(s: Slot, res: Any, new: np.ndarray, n_records: int) -> None:
    if not s.snap:
        shape = s.converged.shape
        s.snap = {
            "unit_score": np.full(shape, np.nan),
            "group_score": np.full(shape, np.nan),
            "err": np.full(shape, np.nan),
            "reason": np.full(shape, None, dtype=object),
            "n_records": np.zeros(shape, dtype=np.int64),
        }
    s.snap["unit_score"][new] = res.unit_score[new]
    s.snap["group_score"][new] = res.group_score[new]
    s.snap["err"][new] = res.err[new]
    s.snap["reason"][new] = res.reason[new]
    s.snap["n_records"][new] = n_records
    s.converged |= new


def as_records(data: Any) -> Any:
    """Records from a sequence, an iterable, or a one-column table (``__arrow_c_stream__``)."""
    if isinstance(data, (pl.DataFrame, pl.Series)) or hasattr(data, "__arrow_c_stream__"):
        table = data if isinstance(data, (pl.DataFrame, pl.Series)) else pl.DataFrame(data)
        if isinstance(table, pl.DataFrame):
            if table.width != 1:
                raise DNIError(
                    f"data is a table with columns {table.columns}; pass one column, "
                    "e.g. data=frame['text']."
                )
            table = table.to_series()
        return table.to_list()
    return data


def _as_cache(cache: Any) -> HypothesisCache | None:
    if cache is False:
        return None
    if isinstance(cache, HypothesisCache):
        return cache
    if cache is None or cache is True:
        from . import cache as cache_mod

        if cache_mod.DEFAULT is None:
            cache_mod.DEFAULT = HypothesisCache()
        return cache_mod.DEFAULT
    return HypothesisCache(directory=cache)


def _length(data: Any, max_records: int | None) -> int | None:
    try:
        n = len(data)
    except TypeError:
        return max_records
    return min(n, max_records) if max_records is not None else n
