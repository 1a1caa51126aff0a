"""The streaming block loop: blocks read (:mod:`.folding`) until every pair settled
(:mod:`.stopping`), the data ended, a limit ended it (``max_records``, ``max_seconds``, a
stream that repeats itself: :mod:`.distinct`) or a cancel; progress in :mod:`.progress`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import polars as pl

from ..errors import DNIError
from ..extraction.extract import Extractor, Padding, on_device, resolve_device
from ..hypothesis.hypotheses import BlockCancelled
from ..measures.base import stop_check
from .declarations import ask_declarations, layout_questions
from .distinct import DistinctRecords
from .folding import BlockFolding, _symbol_spaces
from .frames import empty_frame
from .levels import decide_levels
from .params import InspectParams
from .progress import Progress
from .provenance import (
    RecordsHash,
    attach,
    ending,
    features_sha256,
    layouts_record,
    versions,
    weights_sha256,
)
from .resolve import (
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
from .stopping import (
    Limit,
    failed_reasons,
    limit_now,
    limit_reasons,
    record_limit,
    settled,
    stopped_reasons,
)
from .token_ids import check_records

__all__ = ["LEAVE_OPEN", "Inspection", "Progress"]

#: Once every other pair has converged or is decided, reading stops even if this share of
#: pairs (rare hypotheses whose interval shrinks slowly) is still open; the frame names
#: each of them in ``reason`` with its current error.
LEAVE_OPEN = 0.005


# The cluster package installs its runner here when it is imported (dni_lab imports
# it): the runner builds Inspections itself, so the engine must not import it back.
sharded_run: Callable[..., pl.DataFrame] | None = None


class Inspection(BlockFolding):
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
        check_records(self.models, self.data.in_memory)  # token ids, before any block
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
        self._distinct = DistinctRecords()  # a stream that repeats itself (stopping.py)
        self._limit: Limit | None = None  # what ended the reading first, if a limit did
        self._touched = False  # a state saw the block in flight (no partial frame then)
        self._levels: list[Any] = []  # each hypothesis's level, decided before reading

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
            "levels": [d.row() for d in self._levels],  # how each level was decided
            "layouts": layouts_record(self.states),  # how each read layer's axes were found
            **ending(
                self._records_hash.count,
                self.progress.total_records,
                self.progress.cancelled,
                self.progress.stopped_early,
            ),
            **self._ended_by(),
            **self._measure_stops(),
            # a sharded run: its cluster and what failures cost (cluster/view.py)
            **({"cluster": dict(stats)} if (stats := getattr(self, "cluster_stats", None)) else {}),
        }

    def _ended_by(self) -> dict[str, Any]:
        """What ended the reading: ``"end of data"``, ``"early stopping"``, a limit
        (``"max_records"``, ``"max_seconds"``, ``"repeats"``, with ``limit_reason``) or
        ``"stop"``; None while the run reads."""
        p = self.progress
        if not p.done:
            return {"ended_by": None}
        if p.cancelled:
            return {"ended_by": "stop"}
        if p.ended_by is not None and self._limit is not None:
            return {"ended_by": self._limit.kind, "limit_reason": self._limit.text}
        return {"ended_by": "early stopping" if p.stopped_early else "end of data"}

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
            try:
                if not self._block(block_records, first, extractors):
                    break  # a Stop mid-block: no state saw this block, drop it
            except DNIError as exc:  # the frame so far goes with it, if no state saw the block
                self._keep_partial(exc, start)
                raise
            self._records_hash.update(block_records)  # provenance: only blocks that counted
            self._distinct.update(block_records)
            self.progress.records_read = first + len(block_records)
            self.progress.blocks += 1
            self._check_convergence()
            self.progress.mark(time.perf_counter() - start)
            if on_block is not None:
                on_block(self)
            if self._cancel or self._settled():
                break
        return self._finish(start)

    def _block(self, block_records: list[Any], first: int,
               extractors: dict[str, Extractor]) -> bool:  # fmt: skip
        """Fold one block, laying out the states at the first; False after a Stop."""
        self._touched = False
        self._check_kinds(block_records, first)
        pre = None
        if not self.states:
            # a record without symbols is named before a model sees any (counting runs
            # no model); then every hypothesis's level, decided from the first records
            # before any model runs; then units: the probe pass on the first records
            # names a layer that cannot be read before any hypothesis block is laid out
            for sp in self._spaces.values():
                self._symbol_counts(sp.models, block_records, first)
            units = self._resolve_units(block_records)
            try:
                pre = self._first_hypotheses(block_records, first)
            except BlockCancelled:
                pass  # the states are still laid out: a Stop now returns their empty rows
            self._prepare(units)
            extractors.update(self._extractors())
        return self._read(block_records, first, extractors, pre)

    def _keep_partial(self, exc: DNIError, start: float) -> None:
        """Give ``exc`` the frame of the blocks read before it (``partial_frame``), marked
        partial; only where blocks were read and no state saw the one at fault."""
        read = self.progress.records_read
        if not self.states or not read or self._touched or exc.partial_frame is not None:
            return
        frame = failed_reasons(self.frame(final=False), read)
        self.progress.elapsed_s = time.perf_counter() - start
        record = {**self.provenance(), "partial": True, "ended_by": "error",
                  "partial_reason": f"the run failed after {read:,} records: {exc}"}  # fmt: skip
        exc.partial_frame = attach(frame, record)

    def _finish(self, start: float) -> pl.DataFrame:
        """Name the pairs left open, close the progress and return the final frame."""
        limit, eps = self._limit, self.params.eps
        if not self._cancel and not self._complete():
            for s in self.states:  # a limit's open pairs name it with their error (below)
                s.leave_open(eps, rest=limit is None or s.stopped_at is not None)
        with stop_check(lambda: self._cancel):  # a Stop during the final probe fits
            frame = self.frame(final=True)
        p, cancelled = self.progress, self._cancel  # one answer, though a Stop may come now
        if cancelled:  # before or during the final fits: each open pair says why
            frame = stopped_reasons(frame, p.records_read)
        elif limit is not None:  # a limit ends reading, it settles no score
            frame = limit_reasons(frame, limit, eps)
        p.cancelled = cancelled
        p.ended_by = limit.text if limit is not None and not cancelled else None
        p.stopped_early = not cancelled and not self._read_to_end and limit is None
        if self._complete():  # a generator's length is known once it ended
            p.total_records = p.records_read
        p.done = True
        p.elapsed_s = time.perf_counter() - start
        return attach(frame, self.provenance())

    def _blocks(self) -> Iterator[tuple[list[Any], int]]:
        for part in self._parts():
            yield part.read(), part.first

    def _parts(self) -> Iterator[Part]:
        """The data's blocks as :class:`~.sources.Part` objects (a cluster's workers read
        a file's parts themselves); sets ``_read_to_end`` once the data ended, or
        ``_limit`` when ``max_records`` ended it first (a stream of unknown length that
        reached it counts as cut: whether more would have come is not known)."""
        read, limit, total = 0, self.params.max_records, self.data.total
        for part in self.data.parts(self.params.block_size, limit):
            read += part.count
            yield part
        if not read:
            raise DNIError("the data holds no records; pass a non-empty sequence.")
        if limit is not None and read >= limit and (total is None or total > limit):
            self._limit = record_limit(limit)
        self._read_to_end = True

    def _complete(self) -> bool:
        """The data was read to its end, no limit cut it and no Stop came: every score is
        its full-data value."""
        return self._read_to_end and self._limit is None and not self._cancel

    def _resolve_units(self, sample: list[Any]) -> list[Any]:
        """Every model's units, from one probe pass on the first records of ``sample``.

        Before it, every hypothesis's level is decided from ``sample`` (one ``LevelError``
        asks all that cannot be), so no model runs on a question (a run, a cluster's
        driver and each of its workers all come here first, with the same records)."""
        self._levels = decide_levels(self._spaces, sample, ask_now=False)
        layouts = []
        for model in self.models:  # one error for every level and layout to declare
            with on_device(model, self.device):
                layouts.append(layout_questions(model, units_of(self.units, model), sample,
                                                self.device))  # fmt: skip
        ask_declarations(self._levels, layouts)
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
        """Whether reading ends after this block: every pair converged or decided but for
        at most LEAVE_OPEN of them (:func:`.stopping.settled`), or a limit was reached
        (``max_seconds``, a repeating stream: then ``_limit`` says which)."""
        eps, read = self.params.eps, self.progress.records_read
        if eps is not None and settled(self.states, eps, read, LEAVE_OPEN):
            return True
        self._limit = limit_now(self.params, self.progress.elapsed_s, self._distinct,
                                stream=self.data.total is None)  # fmt: skip
        return self._limit is not None

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
        complete = final and self._complete()  # after the fits: a Stop may come
        parts = [
            s.rows(current, self.hids, self.progress.records_read, complete)
            for s, current in zip(states, currents, strict=True)
        ]
        return pl.concat(parts, how="vertical")


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as JSON-ready values (anything else as its repr)."""
    ok = (str, int, float, bool, type(None))
    return {k: v if isinstance(v, ok) else repr(v) for k, v in params.items()}


def _length(total: int | None, max_records: int | None) -> int | None:
    if total is None:
        return max_records
    return min(total, max_records) if max_records is not None else total
