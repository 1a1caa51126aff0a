"""The streaming block loop: hypotheses and units per block, every measure updated,
convergence checked per (unit group, hypothesis, measure), early stop, cancel."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError, HypothesisError
from ..extraction.extract import Extractor, Padding, on_device, resolve_device
from ..extraction.sparse_block import SparseBlock
from ..hypothesis.cache import block_key
from ..hypothesis.hypotheses import BlockCancelled, for_model, hypothesis_block
from ..measures.base import stop_check
from .frames import empty_frame
from .params import InspectParams
from .provenance import RecordsHash, attach, ending, features_sha256, versions, weights_sha256
from .resolve import (
    ModelUnits,
    as_cache,
    as_families,
    as_measures,
    as_models,
    is_feature_set,
    normalize_units,
    resolve_units,
    units_of,
)
from .sources import Part, as_source
from .states import MeasureState

#: Once every other pair has converged or is decided, reading stops even if this share of
#: pairs (rare hypotheses whose interval shrinks slowly) is still open; the frame names
#: each of them in ``reason`` with its current error.
LEAVE_OPEN = 0.005


# The cluster package installs its runner here when it is imported (dni_lab imports
# it): the runner builds Inspections itself, so the engine must not import it back.
sharded_run: Callable[..., pl.DataFrame] | None = None


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
    #: a Stop, ``cancel()`` or Ctrl-C ended the run: its frame is a partial result
    cancelled: bool = False
    #: early stopping ended the run before the data's end (every pair settled): not partial
    stopped_early: bool = False

    @property
    def share_converged(self) -> float:
        return self.pairs_converged / self.pairs_total if self.pairs_total else 0.0

    pairs_decided: int = 0
    #: a sharded run's cluster (:class:`~dni_lab.backend.cluster.view.ClusterView`):
    #: nodes, workers, shards dealt again, nodes lost, holders rebuilt, Ray's log file
    cluster: dict[str, Any] | None = None
    # (elapsed_s, time left) at the last block; private, so not in the repr
    _estimate: tuple[float, float] | None = field(default=None, repr=False)

    @property
    def records_per_s(self) -> float | None:
        """Records read per second so far."""
        if not self.records_read or self.elapsed_s <= 0:
            return None
        return self.records_read / self.elapsed_s

    @property
    def time_left_s(self) -> float | None:
        """Seconds left at most (reading to the end of the data), never above the last estimate.

        ``None`` while the data's length is unknown (a generator without ``max_records``).
        """
        if self.done:
            return 0.0
        if not self.total_records or not self.records_read:
            return None
        left = self.elapsed_s / self.records_read * max(self.total_records - self.records_read, 0)
        if self._estimate is not None:
            at, before = self._estimate
            still = before - (self.elapsed_s - at)
            if still > 0:  # the earlier promise still holds: never raise it
                left = min(left, still)
        return left

    @property
    def ending(self) -> str:
        """Why reading ended before the data's end, in a header's words; "" otherwise."""
        if self.cancelled:
            return "stopped by the user (partial result)"
        if not (self.done and self.stopped_early):
            return ""
        left = self.pairs_total - self.pairs_converged - self.pairs_decided
        if left > 0:  # LEAVE_OPEN: rare hypotheses, each named in its rows' reason
            return f"early stopping, {left:,} pairs left open (see reason)"
        return "every pair settled (early stopping)"

    @property
    def cluster_text(self) -> str:
        """A sharded run's cluster in a header's words, e.g. ``"Ray: 3 nodes, 2 workers,
        1 shard dealt again, 1 node lost"``; "" for a run in one process."""
        c = self.cluster
        if not c:
            return ""

        def n(k: int, word: str) -> str:
            return f"{k:,} {word}" + ("" if k == 1 else "s")

        parts = [f"Ray: {n(c['nodes'], 'node')}, {n(c['workers'], 'worker')}"]
        if c.get("shards_redealt"):
            parts.append(f"{n(c['shards_redealt'], 'shard')} dealt again")
        if c.get("lost_nodes"):
            parts.append(f"{n(c['lost_nodes'], 'node')} lost")
        if c.get("holder_restarts"):
            parts.append(f"{n(c['holder_restarts'], 'probe holder')} rebuilt")
        return ", ".join(parts)

    def read_text(self) -> str:
        """E.g. ``"1,536 of 78,662 records read — every pair settled (early stopping)"``."""
        of = f" of {self.total_records:,}" if self.total_records else ""
        text = f"{self.records_read:,}{of} records read"
        return f"{text} — {self.ending}" if self.ending else text

    def mark(self, elapsed_s: float) -> None:
        """Record the time at the end of a block and pin the estimate made then."""
        self.elapsed_s = elapsed_s
        left = self.time_left_s
        self._estimate = None if left is None else (elapsed_s, left)


class Inspection:
    """A prepared inspection; :meth:`run` executes it block by block.

    Parameters
    ----------
    models, hypotheses, measures, data, units
        As in :func:`dni_lab.inspect`.
    params : InspectParams, optional
        How to read: early stopping, block size, device, behavior, cache, limits.
    """

    def __init__(
        self,
        models: Any,
        hypotheses: Any,
        measures: Any = ("corr",),
        data: Iterable[Any] = (),
        units: Any = None,
        params: InspectParams | None = None,
        column: str | None = None,
    ) -> None:
        self.params = params if params is not None else InspectParams()
        self.models = as_models(models)
        self.measures = as_measures(measures)
        self.families, self.info = as_families(hypotheses, self.measures)
        self.units = normalize_units(units, self.models)
        self.data = as_source(data, column)  # records in memory, files, a Ray Dataset
        self.device = resolve_device(self.params.device)
        self.cache = as_cache(self.params.cache)
        self.hids = [i.name for i in self.info]
        self._spaces = _symbol_spaces(self.models, self.families, self.cache is not None)
        widths = [len(f.signals()) for f in self.families]
        self._family_cols = np.split(np.arange(sum(widths)), np.cumsum(widths)[:-1])
        self.states: list[MeasureState] = []
        self.progress = Progress(total_records=_length(self.data.total, self.params.max_records))
        self._cancel = False
        self._read_to_end = False
        self._padding: dict[str, Padding] = {}  # forward passes' padding, per model
        self._skipped: dict[str, int] = {}  # records a model skipped (too long), per model
        self._records_hash = RecordsHash()

    def metadata(self) -> dict[str, Any]:
        """The query's parameters, as stored with an exported frame (``dl.export``)."""
        return {
            "models": [m.name for m in self.models],
            "hypotheses": self.hids,
            "measures": [m.name for m in self.measures],
            # a sample, a cap or a solver budget is part of what a score means
            "measure_params": {m.name: _plain(m.get_params()) for m in self.measures},
            "units": repr(self.units),
            **self.params.to_metadata(),
            "device": str(self.device),
        }

    def provenance(self) -> dict[str, Any]:
        """The parameters plus versions, each model's weights hash and the data read."""
        return {
            **self.metadata(),
            "versions": versions(),
            "weights_sha256": {m.name: weights_sha256(m.module) for m in self.models},
            "features_sha256": self._features_sha256(),
            "data_sha256": self._records_hash.hexdigest(),
            # padded symbol slots / all slots of the forward passes, per model
            "padding_waste": {m: p.waste for m, p in self._padding.items()},
            "skipped_records": dict(self._skipped),
            **ending(
                self._records_hash.count,
                self.progress.total_records,
                self.progress.cancelled,
                self.progress.stopped_early,
            ),
            **self._measure_stops(),
            # a sharded run: its cluster and what failures cost (cluster/view.py)
            **({"cluster": dict(stats)} if (stats := getattr(self, "cluster_stats", None)) else {}),
        }

    def _measure_stops(self) -> dict[str, Any]:
        """Which measures stopped early while others, without an error estimate, read on."""
        why: dict[str, str] = {}
        for s in self.states:
            if s.stopped_at is None:
                continue
            at = f"{s.stopped_at:,} records"
            why[s.measure.name] = (f"stopped early at {at} (settled)" if s.saturated is None
                                   else f"stopped at {at}: {s.saturated}")  # fmt: skip
        if not why:
            return {}
        for s in self.states:
            if not s.measure.has_error:
                why[s.measure.name] = "no error estimate: cannot stop early, read on"
        return {"measure_stops": why}

    def _features_sha256(self) -> dict[str, dict[str, str]]:
        """``{model: {"{hook}:{name}": hash}}`` of the feature sets among the units: a set's
        repr names it, the hash says which weights it had."""
        out: dict[str, dict[str, str]] = {}
        for model in self.models:
            for group in units_of(self.units, model):
                for layer, _sel in group:
                    if is_feature_set(layer):
                        out.setdefault(model.name, {})[layer.address] = features_sha256(layer)
        return out

    def cancel(self) -> None:
        """Ask the loop to stop after the block in flight (probe fits stop at their next step)."""
        self._cancel = True

    # -- the loop ---------------------------------------------------------------
    def run(self, on_block: Callable[[Inspection], None] | None = None) -> pl.DataFrame:
        """Read blocks until every pair converged, the data ended, or a cancel."""
        # The provenance's hashes need no data: computed (and remembered) before the first
        # block, a model they cannot hash fails here, not after the whole read.
        self._features_sha256()
        for model in self.models:
            weights_sha256(model.module)
        if self.params.cluster is not None:  # the same loop, blocks dealt to Ray workers
            if sharded_run is None:
                raise DNIError(
                    "cluster= needs the Ray runner: import dni_lab (or dni_lab.backend.cluster)"
                    " before running an Inspection on a cluster."
                )
            return sharded_run(self, on_block)
        with contextlib.ExitStack() as placed:
            for model in self.models:  # once per run, not per block
                placed.enter_context(on_device(model, self.device))
            return self._loop(on_block)

    def _loop(self, on_block: Callable[[Inspection], None] | None) -> pl.DataFrame:
        start = time.perf_counter()
        extractors: dict[str, Extractor] = {}
        for block_records, first in self._blocks():
            pre = None
            if not self.states:
                # a record without symbols is named before a model sees any (counting runs
                # no model); then units: the probe pass on the first records names a layer
                # that cannot be read before any hypothesis runs; then a hypothesis whose
                # level its length cannot tell, before the model reads a block
                for sp in self._spaces.values():
                    self._symbol_counts(sp.models, block_records, first)
                units = self._resolve_units(block_records)
                try:
                    pre = self._first_hypotheses(block_records, first)
                except BlockCancelled:
                    pass  # the states are still laid out: a Stop now returns their empty rows
                self._prepare(units)
                extractors = self._extractors()
            if not self._read(block_records, first, extractors, pre):
                break  # a Stop mid-block: no state saw this block, drop it
            self._records_hash.update(block_records)  # provenance: only blocks that counted
            self.progress.records_read = first + len(block_records)
            self.progress.blocks += 1
            self._check_convergence()
            self.progress.mark(time.perf_counter() - start)
            if on_block is not None:
                on_block(self)
            if self._cancel or (self.params.eps is not None and self._settled()):
                break
        return self._finish(start)

    def _finish(self, start: float) -> pl.DataFrame:
        """Name the pairs left open, close the progress and return the final frame."""
        if not self._cancel and not self._read_to_end:
            for s in self.states:
                s.leave_open(self.params.eps)
        with stop_check(lambda: self._cancel):  # a Stop during the final probe fits
            frame = self.frame(final=True)
        p, cancelled = self.progress, self._cancel  # one answer, though a Stop may come now
        if cancelled:  # before or during the final fits: each open pair says why
            frame = _stopped_reasons(frame, p.records_read)
        p.cancelled = cancelled
        p.stopped_early = not cancelled and not self._read_to_end
        if self._read_to_end:  # a generator's length is known once it ended
            p.total_records = p.records_read
        p.done = True
        p.elapsed_s = time.perf_counter() - start
        return attach(frame, self.provenance())

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

    def _blocks(self) -> Iterator[tuple[list[Any], int]]:
        for part in self._parts():
            yield part.read(), part.first

    def _parts(self) -> Iterator[Part]:
        """The data's blocks as :class:`~.sources.Part` objects (a cluster's workers read
        a file's parts themselves); sets ``_read_to_end`` once the data ended."""
        any_part = False
        for part in self.data.parts(self.params.block_size, self.params.max_records):
            any_part = True
            yield part
        self._read_to_end = True
        if not any_part:
            raise DNIError("the data holds no records; pass a non-empty sequence.")

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

    def _resolve_units(self, sample: list[Any]) -> list[Any]:
        """Every model's units, from one probe pass on the first records of ``sample``."""
        out = []
        for model in self.models:
            with on_device(model, self.device):
                out.append(resolve_units(model, units_of(self.units, model), sample, self.device))
        return out

    def _prepare(self, units: list[Any]) -> None:
        """One measure state per (model, measure, unit set), all pairs unconverged."""
        nh = len(self.info)
        states: list[MeasureState] = []  # published whole: a live view reads self.states meanwhile
        for mu in units:
            for meas in self.measures:
                if meas.joint:
                    sets = [(g.name, g.cols) for g in mu.groups]
                else:
                    sets = [("", np.arange(mu.n_units))]
                for group, cols in sets:
                    states.append(
                        MeasureState(
                            model_units=mu,
                            measure=meas,
                            group=group,
                            columns=cols,
                            accumulator=meas.start(len(cols), nh, self.device, self.info),
                            converged=np.zeros((len(cols), nh), dtype=bool),
                        )
                    )
        self.progress.pairs_total = sum(s.converged.size for s in states)
        self.states = states

    def _active_models(self) -> list[ModelUnits]:
        """Models with a pair still to converge (all of them when reading everything)."""
        seen: dict[str, ModelUnits] = {}
        for s in self.states:
            if not s.converged.all() or self.params.eps is None:
                seen.setdefault(s.model_name, s.model_units)
        return list(seen.values())

    def _states_of(self, mu: ModelUnits) -> list[MeasureState]:
        return [s for s in self.states if s.model_units is mu]

    def _checks(self) -> bool:
        """Whether convergence is checked after this block (early stopping, enough read)."""
        return self.params.eps is not None and self.progress.records_read >= self.params.min_records

    def _check_convergence(self, states: list[MeasureState] | None = None) -> None:
        """Check ``states`` (default: all; a cluster's holder checks the ones it merges)
        after a block, then count the settled pairs of every state."""
        if not self._checks():
            return
        assert self.params.eps is not None
        for s in self.states if states is None else states:
            s.check(self.params.eps, self.params.confidence, self.progress.records_read)
        self.progress.pairs_converged = int(sum(s.converged.sum() for s in self.states))
        self.progress.pairs_decided = int(sum(s.decided.sum() for s in self.states))

    def _settled(self) -> bool:
        """Every pair converged or decided, but for at most LEAVE_OPEN of them.

        A measure without an error estimate (``diffmeans``, ``mi``, ...) never settles and
        reads every record; the states of the measures that have one still stop at the
        point they would stop without it (:meth:`MeasureState.stop`), and reading goes on
        for the others only.
        """
        if not self.states:
            return False
        endless = [s for s in self.states if not s.measure.has_error and not s.converged.all()]
        settling = [s for s in self.states if s.measure.has_error and s.stopped_at is None]
        if settling and _few_open(settling) and endless:
            for s in settling:
                s.stop(self.params.eps, self.progress.records_read)
        return not endless and _few_open(self.states)

    def _finished_families(self) -> set[int]:
        """Families whose every score has converged in every state: no need to run them."""
        if self.params.eps is None or not self.states:
            return set()
        done = np.logical_and.reduce([s.converged.all(axis=0) for s in self.states])
        return {j for j, cols in enumerate(self._family_cols) if done[cols].all()}

    def _all_converged(self) -> bool:
        return bool(self.states) and all(s.converged.all() for s in self.states)

    # -- results ----------------------------------------------------------------
    def frame(self, final: bool = False) -> pl.DataFrame:
        """The score frame now: converged pairs frozen, the rest at their current value."""
        states = self.states  # one list throughout: the run's thread may publish it meanwhile
        if not states:
            return empty_frame()
        confidence = self.params.confidence
        currents = []
        for s in states:
            # A state whose pairs all converged reports frozen scores: no final fit needed.
            # Neither after a Stop: the person wants the scores as they stand, now (a final
            # probe fit took longer than the block in flight; one under way stops early).
            if final and not self._cancel and not s.converged.all():
                currents.append(s.measure.result(s.accumulator, confidence))
            else:
                currents.append(s.measure.peek(s.accumulator, confidence))
        complete = final and self._read_to_end and not self._cancel  # after: a Stop may come
        parts = [
            s.rows(current, self.hids, self.progress.records_read, complete)
            for s, current in zip(states, currents, strict=True)
        ]
        return pl.concat(parts, how="vertical")


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


def _few_open(states: list[MeasureState]) -> bool:
    """At most LEAVE_OPEN of ``states``' pairs are neither converged nor decided.

    A saturated state's open pairs count as settled: reading on cannot settle them.
    """
    open_pairs = sum(int((~(s.converged | s.decided)).sum()) for s in states
                     if s.saturated is None)  # fmt: skip
    return open_pairs <= LEAVE_OPEN * sum(s.converged.size for s in states)


def _stopped_reasons(frame: pl.DataFrame, records_read: int) -> pl.DataFrame:
    """A Stop, not its error, ended the reading of each open pair: its reason says so."""
    why = f"not converged: stopped by the user after {records_read:,} records"
    open_ = ~pl.col("converged") & pl.col("reason").is_null()
    return frame.with_columns(reason=pl.when(open_).then(pl.lit(why)).otherwise(pl.col("reason")))


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as JSON-ready values (anything else as its repr)."""
    ok = (str, int, float, bool, type(None))
    return {k: v if isinstance(v, ok) else repr(v) for k, v in params.items()}


def _length(total: int | None, max_records: int | None) -> int | None:
    if total is None:
        return max_records
    return min(total, max_records) if max_records is not None else total
