"""Measure states: one measure's accumulator over one unit set of one model.

The engine keeps one :class:`MeasureState` per (model, measure, unit set): an
independent measure has one over all of a model's units, a joint measure one per
unit group. Besides the measure's own accumulator, a state records which
(unit, hypothesis) pairs converged and freezes their scores at that moment, so
later blocks never move a score that early stopping already reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..measures import Measure, MeasureResult
from .frames import UnitLabels, score_rows
from .resolve import ModelUnits

#: Records after which a pair whose score is still null (constant so far) counts as settled,
#: at eps 0.025; :func:`null_settle_records` scales it as ``1 / eps``. A hypothesis that
#: first fires after that many records is missed under early stopping; ``eps=None`` reads
#: everything.
NULL_SETTLE_RECORDS = 2048


def null_settle_records(eps: float) -> int:
    """Records after which a pair still null (constant so far) settles, at ``eps``.

    The wait grows as eps shrinks (a tighter promise waits longer for rare hypotheses to
    fire): 512 records at eps 0.1, 1,024 at 0.05, 2,048 at 0.025, 5,120 at 0.01. A fixed
    2,048 made every eps above 0.01 read the same 2,048 records on the SQL workload
    (191 hypotheses, several of them rare), whatever the errors said.
    """
    return max(1, round(NULL_SETTLE_RECORDS * 0.025 / eps))

#: A pair of an independent measure whose interval lies wholly below the lower bound of its
#: hypothesis's TOP_K-th best unit is *decided*: the ranking a user reads cannot change.
TOP_K = 3


@dataclass
class MeasureState:
    """A measure state (docs/architecture.md's vocabulary), with the convergence of its pairs.

    Attributes
    ----------
    model_units : ModelUnits
        The model's resolved units (the union every column position refers to).
    measure : Measure
        The measure that owns ``accumulator``.
    group : str
        The unit group's name for a joint measure; ``""`` for an independent one.
    columns : np.ndarray
        Positions of this state's units in ``model_units``' union of units.
    accumulator : Any
        What ``measure.start`` returned, folded through every ``measure.update``.
    converged : np.ndarray
        ``(n_units, n_hyps)`` bool: pairs whose error reached eps (or that settled null).
    frozen : MeasureResult or None
        Scores of converged pairs as they were when each converged.
    frozen_records : np.ndarray or None
        Records read when each pair converged.
    """

    model_units: ModelUnits
    measure: Measure
    group: str
    columns: np.ndarray
    accumulator: Any
    converged: np.ndarray
    frozen: MeasureResult | None = field(default=None)
    frozen_records: np.ndarray | None = field(default=None)
    decided: np.ndarray = field(default=None)  # type: ignore[assignment]
    open_reason: np.ndarray | None = field(default=None)
    #: why a decided pair was left open, written by whichever rule decided it
    decided_why: str = ""
    #: records read when this state stopped reading while others read on (its measure
    #: settled; another, without an error estimate, cannot stop early); None: reading
    stopped_at: int | None = field(default=None)
    #: why reading more cannot settle the open pairs (``Measure.saturated``), if that
    #: is why the state stopped
    saturated: str | None = field(default=None)
    #: the eps of the last convergence check (None: none ran, as with ``eps=None``)
    eps: float | None = field(default=None)

    def __post_init__(self) -> None:
        if self.decided is None:
            self.decided = np.zeros(self.converged.shape, dtype=bool)

    @property
    def model_name(self) -> str:
        return self.model_units.model.name

    def labels(self) -> UnitLabels:
        """Score-frame labels of this state's units."""
        return self.model_units.labels(self.columns, self.group)

    def freeze(self, current: MeasureResult, new: np.ndarray, records_read: int) -> None:
        """Mark the pairs ``new`` converged and keep their ``current`` scores."""
        if self.frozen is None:
            shape = self.converged.shape
            self.frozen = MeasureResult(
                unit_score=np.full(shape, np.nan),
                group_score=np.full(shape, np.nan),
                err=np.full(shape, np.nan),
                reason=np.full(shape, None, dtype=object),
            )
            self.frozen_records = np.zeros(shape, dtype=np.int64)
        for name in ("unit_score", "group_score", "err", "reason"):
            getattr(self.frozen, name)[new] = getattr(current, name)[new]
        if current.n_undefined is not None:  # counted up to where each pair converged
            if self.frozen.n_undefined is None:
                self.frozen.n_undefined = np.zeros(self.converged.shape)
            self.frozen.n_undefined[new] = current.n_undefined[new]
        assert self.frozen_records is not None
        self.frozen_records[new] = records_read
        self.converged |= new

    def check(self, eps: float, confidence: float, records_read: int) -> None:
        """After a block: freeze the pairs whose error reached ``eps``, mark the decided.

        The one convergence check of a run, wherever the state lives: the single-process
        loop calls it on its states, a cluster's holder actor on the states it merges.
        A state without an error estimate, settled or stopped is left alone.
        """
        self.eps = eps
        if not self.measure.has_error or self.converged.all() or self.stopped_at is not None:
            return
        res = self.measure.peek(self.accumulator, confidence)
        new = (res.err <= eps) & ~self.converged
        if records_read >= null_settle_records(eps):
            # Still null with a reason (a hypothesis or unit constant so far): no error
            # estimate will ever come, so waiting for one would defeat early stopping.
            new |= np.isnan(res.unit_score) & (res.reason != None) & ~self.converged  # noqa: E711
        if new.any():
            self.freeze(res, new, records_read)
            self.measure.retire(self.accumulator, self.converged)
        if self.measure.joint:
            self.settle_groups(res, eps)
        else:
            self.decide(res, TOP_K)
        self.measure.plan(self.accumulator, res, eps, ~(self.converged | self.decided))
        why = self.measure.saturated(self.accumulator)
        if why is not None:  # reading on cannot settle the open pairs: stop here
            self.stop(eps, records_read, why)

    def decide(self, current: MeasureResult, top_k: int) -> None:
        """Mark open pairs that cannot enter their hypothesis's ``top_k`` units.

        A pair is decided when ``|score| + err`` lies below the ``top_k``-th largest
        ``|score| - err`` of its hypothesis column: at least ``top_k`` units' intervals
        lie wholly above its own, so (as far as each interval covers the full-data
        value, 95% each at the default confidence, not simultaneously) it is not among
        its hypothesis's ``top_k`` units on the full data. That is all it promises: the
        order *within* the top ``top_k`` (top-1 included) is only known to within the
        units' errors (at most eps for converged pairs), so near-ties within eps may
        swap ranks against a full scan. Pairs without an error stay undecided; a pair
        decided after one block may be undecided after the next.
        """
        score = np.abs(current.unit_score)
        lo = np.where(np.isfinite(current.err), score - current.err, -np.inf)
        hi = score + current.err
        k = min(top_k, score.shape[0])
        if k < 1 or score.shape[0] <= k:
            return
        kth = -np.partition(-np.nan_to_num(lo, nan=-np.inf), k - 1, axis=0)[k - 1]
        with np.errstate(invalid="ignore"):
            self.decided = ~self.converged & (hi < kth[None, :])
        self.decided_why = f"left open: outside its hypothesis's top {k} units"

    def settle_groups(self, current: MeasureResult, eps: float) -> None:
        """A joint measure's open pairs whose *group* score has settled (error ≤ eps).

        Reading on would refine such a unit's own score (a probe coefficient), not its
        group's; the pair counts as decided for stopping and, if reading stops, is left
        open with that reason. Without a ``group_err`` nothing is decided.
        """
        if current.group_err is None:
            return
        with np.errstate(invalid="ignore"):
            self.decided = ~self.converged & (current.group_err <= eps)
        self.decided_why = (
            f"left open: the group's score settled, this unit's did not (error above eps={eps})"
        )

    def stop(self, eps: float | None, records_read: int, saturated: str | None = None) -> None:
        """Stop reading here while the run reads on for other states.

        The state keeps what it holds now, as if reading had stopped for it alone: its
        rows report ``records_read`` and its open pairs say why they were left open
        (``saturated``: why more records could not settle them, if that is why).
        """
        self.stopped_at = records_read
        self.saturated = saturated
        self.leave_open(eps)

    def leave_open(self, eps: float | None, rest: bool = True) -> None:
        """Name why each pair still open when reading stopped early was left open.

        ``rest=False``: only the decided pairs; a limit that ended the reading names the
        others, with their error (:func:`.stopping.limit_reasons`).
        """
        if eps is None:
            return
        why = np.full(self.converged.shape, None, dtype=object)
        why[self.decided] = self.decided_why
        if not rest:
            self.open_reason = why
            return
        others = ~self.converged & ~self.decided
        if self.saturated is not None:
            why[others] = f"left open: {self.saturated}"
        else:
            why[others] = f"left open: error above eps={eps} when reading stopped (rare signal)"
        self.open_reason = why

    def _sample_at_end(self, result: MeasureResult, why: str) -> tuple[MeasureResult, np.ndarray]:
        """Converged pairs of a sampled state read to the end: those within eps only."""
        eps = -np.inf if self.eps is None else self.eps
        err = np.nan_to_num(np.asarray(result.err, dtype=float), nan=np.inf)
        converged = self.converged | (err <= eps)
        tail = "" if self.eps is None else f", error above eps={self.eps}"
        has = ~converged & (result.reason == None)  # noqa: E711
        reason = np.where(has, f"not converged: {why}{tail}", result.reason)
        return MeasureResult(result.unit_score, result.group_score, result.err, reason,
                             n_undefined=result.n_undefined), converged  # fmt: skip

    def rows(
        self, current: MeasureResult, hids: list[str], records_read: int, complete: bool
    ) -> pl.DataFrame:
        """Score-frame rows: converged pairs frozen, the rest at ``current``.

        ``complete`` says the data was read to its end, so every pair holds its
        full-data value and counts as converged.
        """
        if self.stopped_at is not None:  # reading went on for other states, not this one
            records_read, complete = self.stopped_at, False
        result = current
        n_records: np.ndarray | int = records_read
        if self.frozen is not None:
            keep = self.converged
            und = current.n_undefined
            if und is not None and self.frozen.n_undefined is not None:
                und = np.where(keep, self.frozen.n_undefined, und)
            result = MeasureResult(
                unit_score=np.where(keep, self.frozen.unit_score, current.unit_score),
                group_score=np.where(keep, self.frozen.group_score, current.group_score),
                err=np.where(keep, self.frozen.err, current.err),
                reason=np.where(keep, self.frozen.reason, current.reason),
                n_undefined=und,
            )
            n_records = np.where(keep, self.frozen_records, records_read)
        if self.open_reason is not None and not complete:
            has = (self.open_reason != None) & (result.reason == None)  # noqa: E711
            result = MeasureResult(
                unit_score=result.unit_score,
                group_score=result.group_score,
                err=result.err,
                reason=np.where(has, self.open_reason, result.reason),
                n_undefined=result.n_undefined,
            )
        converged = self.converged | complete
        sample = self.measure.sampled(self.accumulator) if complete else None
        if sample is not None:  # the end of the data settles nothing a sample scores
            result, converged = self._sample_at_end(result, sample)
        return score_rows(self.labels(), hids, self.measure.name, result, n_records, converged)
