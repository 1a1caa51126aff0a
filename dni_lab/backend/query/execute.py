"""Running a grouping: one engine inspection per step, S assembled, the final statement applied.

:class:`QueryInspection` has the shape :class:`~dni_lab.Run` drives (``run``,
``frame``, ``progress``, ``cancel``), so a query runs in the background with
the same handle, callbacks and live frame as ``dl.inspect``.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from ..engine.fdr import fdr_record, with_fdr
from ..engine.frames import SCHEMA, empty_frame
from ..engine.inspection import Inspection, Progress
from ..engine.provenance import attach, ending, merge_records, provenance
from ..engine.run import Run
from ..hypothesis.hypotheses import HypothesisFamily
from .final import Final
from .grouping import Grouping, Step
from .sql import RelationalEngine
from .subset import select_signals

#: ``__dl_hp``: the hypothesis a row belongs to in the query's relations: its own hid, or
#: for a category's indicator row (``"h=c"``, added for corr/ridge/diffmeans) its parent's
_INTERNAL = {"__dl_m": pl.Int64, "__dl_g": pl.Int64, "__dl_hp": pl.String}


class QueryInspection:
    """Runs a grouping's steps in order; ``frame()`` is S so far, ``run()`` returns the result."""

    def __init__(self, grouping: Grouping, final: Final, engine: RelationalEngine) -> None:
        self.grouping = grouping
        self.final = final
        self.engine = engine
        self.progress = Progress(total_records=sum(len(s.records) for s in grouping.steps))
        self.current: Inspection | None = None
        self.step_index = 0
        self._names: dict[str, int] = {}
        self._parents: dict[str, str] = {}  # indicator hid -> its categorical hypothesis
        self._done: list[pl.DataFrame] = []  # finished steps' S rows (with group ids)
        self._base = Progress()  # totals of finished steps
        self._records: list[dict[str, Any]] = []  # finished steps' provenance
        self._cancel = False
        self._lock = threading.Lock()
        self._fdr: dict[str, Any] = {}  # provenance of S's FDR columns (WITH FDR)

    @property
    def steps(self) -> list[Step]:
        return self.grouping.steps

    def cancel(self) -> None:
        """Stop after the block in flight; later steps do not start."""
        self._cancel = True
        if self.current is not None:
            self.current.cancel()

    def run(self, on_block: Callable[[Any], None] | None = None) -> pl.DataFrame:
        start = time.perf_counter()
        for k, step in enumerate(self.steps):
            if self._cancel:
                break
            insp = self._inspection(step)
            with self._lock:
                self.current = insp
                self.step_index = k
            frame = insp.run(on_block=lambda _i: self._after_block(start, on_block))
            rows = self._rows(step, frame)
            with self._lock:
                self._done.append(rows)
                self.current = None
                p = insp.progress
                b = self._base
                # the records it read, not its length: early stopping reads fewer
                b.records_read += p.records_read
                b.blocks += p.blocks
                b.pairs_total += p.pairs_total
                b.pairs_converged += p.pairs_converged
                b.pairs_decided += p.pairs_decided
                b.stopped_early |= p.stopped_early
                self._records.append(provenance(frame) or insp.provenance())
            self._cancel |= insp.progress.cancelled
        self._sync(start, done=True)
        s = self.scores(internal=True)
        fdr = self.grouping.options.fdr
        if fdr is not None:
            self._fdr = fdr_record(s, self.grouping.measures, fdr)
        out = self.final.run(self.grouping.query, self.engine, s)
        return attach(out, self.provenance())

    def provenance(self) -> dict[str, Any]:
        """The query, its options, how reading ended and each finished step's record."""
        p = self.progress
        return merge_records(
            self._records,
            query=self.grouping.query.text,
            **self.grouping.options.to_metadata(),
            **ending(p.records_read, p.total_records, p.cancelled, p.stopped_early),
            **self._fdr,
        )

    # -- S -----------------------------------------------------------------------
    def frame(self, final: bool = False, epochs: bool = False) -> pl.DataFrame:
        """S so far (score-frame columns): finished steps and the step in flight; with
        ``epochs`` also the checkpoint's ``epoch`` after ``mid`` (checkpoints of a model
        share its ``mid``), as the live table shows it."""
        if not epochs:
            return self.scores(internal=False)
        s = self.scores(internal=False, checkpoints=True)
        epochs = {i: e.meta.get("epoch") for i, e in enumerate(self.grouping.scope.models)}
        if all(v is None for v in epochs.values()):
            return s.drop("__dl_m")
        dtype: Any = pl.Int64
        if not all(v is None or isinstance(v, int) for v in epochs.values()):
            dtype, epochs = pl.String, {k: None if v is None else str(v) for k, v in epochs.items()}
        epoch = pl.col("__dl_m").replace_strict(epochs, default=None, return_dtype=dtype)
        s = s.with_columns(epoch=epoch).drop("__dl_m")
        return s.select("mid", "epoch", *[c for c in s.columns if c not in ("mid", "epoch")])

    def scores(self, internal: bool = False, checkpoints: bool = False) -> pl.DataFrame:
        with self._lock:
            parts = list(self._done)
            cur = self.current
        if cur is not None and not internal:
            parts.append(self._rename(cur.frame(final=False)))
        schema = {**SCHEMA, **_INTERNAL} if internal else SCHEMA
        if checkpoints and not internal:
            schema = {**SCHEMA, "__dl_m": pl.Int64}
        if not parts:
            s = pl.DataFrame(schema=schema)
        else:
            s = pl.concat([f.select(list(schema)) for f in parts], how="vertical")
        opts = self.grouping.options
        if opts.fdr is not None:  # one BH over all of S (every group, step and model), per measure
            s = with_fdr(s, self.grouping.measures, opts.confidence, opts.fdr, opts.eps)
        if internal:  # the row order S keeps when the query has no ORDER BY
            s = s.with_row_index("__dl_i").with_columns(pl.col("__dl_i").cast(pl.Int64))
        return s

    def _inspection(self, step: Step) -> Inspection:
        scope = self.grouping.scope
        models: list[Any] = []
        self._names = {}
        names = [scope.models[m].mid for m in step.ckpts]
        for m in step.ckpts:
            model = scope.models[m].model
            if names.count(model.name) > 1:
                # Checkpoints share their model's name; the engine needs distinct ones.
                model = copy.copy(model)
                model.name = f"{model.name}#{m}"
            self._names[model.name] = m
            models.append(model)
        records = [scope.datasets[d].records[r] for d, r in step.records]
        families = _families(self.grouping, step)
        insp = Inspection(
            models,
            families,
            self.grouping.measures,
            records,
            units=step.units,
            params=self.grouping.options,
        )
        self._parents = {i.name: i.parent for i in insp.info if i.parent is not None}
        return insp

    def _rename(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Engine model names back to checkpoint ids (``__dl_m``) and the models' own names."""
        mids = {n: self.grouping.scope.models[m].mid for n, m in self._names.items()}
        frame = frame.with_columns(
            __dl_m=pl.col("mid").replace_strict(self._names, return_dtype=pl.Int64, default=None),
            mid=pl.col("mid").replace_strict(mids, return_dtype=pl.String, default=None),
            __dl_hp=pl.col("hid").replace(self._parents),
        )
        ub = self.grouping.units
        if ub.kind != "features":
            return frame
        # A latent's uid depends on the sets one engine call holds; its fid does not.
        fids = ub.frame.select(  # type: ignore[union-attr]
            "mid", pl.col("__dl_layer").alias("layer"), pl.col("latent").alias("unit"), "fid"
        ).unique(["mid", "layer", "unit"])
        cols = frame.columns
        frame = frame.join(fids, on=["mid", "layer", "unit"], how="left", maintain_order="left")
        return frame.with_columns(uid=pl.coalesce("fid", "uid")).select(cols)

    def _rows(self, step: Step, frame: pl.DataFrame) -> pl.DataFrame:
        """Each group's own rows of a (possibly shared) step's frame, tagged with the group."""
        frame = self._rename(frame)
        parts = []
        for gi in step.groups:
            g = self.grouping.groups[gi]
            rows = frame.filter(pl.col("__dl_hp").is_in([h for _, _, h in g.hyps]))
            explicit = {m: u for m, u in g.units.items() if u is not None}
            if explicit:
                pairs = pl.DataFrame(
                    {
                        "__dl_m": np.concatenate([np.full(len(u), m) for m, u in explicit.items()]),
                        "uid": np.concatenate(list(explicit.values())),
                    },
                    schema={"__dl_m": pl.Int64, "uid": pl.Int64},
                )
                rows = rows.join(pairs, on=["__dl_m", "uid"], how="semi")
            else:
                rows = rows.filter(pl.col("__dl_m").is_in(list(g.units)))
            parts.append(rows.with_columns(__dl_g=pl.lit(gi, dtype=pl.Int64)))
        return (
            pl.concat(parts)
            if parts
            else empty_frame().with_columns(
                __dl_m=pl.lit(None, pl.Int64),
                __dl_g=pl.lit(None, pl.Int64),
                __dl_hp=pl.lit(None, pl.String),
            )
        )

    def _after_block(self, start: float, on_block: Callable[[Any], None] | None) -> None:
        self._sync(start)
        if on_block is not None:
            on_block(self)

    def _sync(self, start: float, done: bool = False) -> None:
        p = self.progress
        b = self._base
        c = self.current.progress if self.current is not None else Progress()
        p.records_read = b.records_read + c.records_read
        p.blocks = b.blocks + c.blocks
        p.pairs_total = b.pairs_total + c.pairs_total
        p.pairs_converged = b.pairs_converged + c.pairs_converged
        p.pairs_decided = b.pairs_decided + c.pairs_decided
        p.cancelled = self._cancel
        p.stopped_early = done and b.stopped_early and not self._cancel
        p.done = done
        # mark() pins the time-left estimate, so the one shown never grows between blocks
        p.mark(time.perf_counter() - start)


class QueryRun(Run):
    """A query in the background: ``frame`` is S as it fills, ``result()`` the query's frame."""

    @property
    def frame(self) -> pl.DataFrame:  # type: ignore[override]
        return self.inspection.frame()

    def live_frame(self) -> pl.DataFrame:
        """S so far with each checkpoint's ``epoch`` (what the live table shows)."""
        return self.inspection.frame(epochs=True)

    def __repr__(self) -> str:
        p = self.progress
        state = "cancelled" if p.cancelled else "done" if self.done else "running"
        steps = len(self.inspection.steps)
        return f"<QueryRun {state}: {steps} steps, {p.read_text()}, {p.blocks} blocks>"


def _families(grouping: Grouping, step: Step) -> list[HypothesisFamily]:
    by_entry: dict[int, list[str]] = {}
    for entry, sig, _ in step.hyps:
        by_entry.setdefault(entry, []).append(sig)
    out = []
    for entry, sigs in by_entry.items():
        fam = grouping.scope.hyps[entry].family
        out.append(select_signals(fam, sigs))
    return out
