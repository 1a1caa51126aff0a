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

from .frames import UnitLabels, score_rows
from .measures import Measure, MeasureResult
from .resolve import ModelUnits


@dataclass
class MeasureState:
    """DESIGN's measure state, with the convergence of its pairs.

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
        assert self.frozen_records is not None
        self.frozen_records[new] = records_read
        self.converged |= new

    def rows(
        self, current: MeasureResult, hids: list[str], records_read: int, complete: bool
    ) -> pl.DataFrame:
        """Score-frame rows: converged pairs frozen, the rest at ``current``.

        ``complete`` says the data was read to its end, so every pair holds its
        full-data value and counts as converged.
        """
        result = current
        n_records: np.ndarray | int = records_read
        if self.frozen is not None:
            keep = self.converged
            result = MeasureResult(
                unit_score=np.where(keep, self.frozen.unit_score, current.unit_score),
                group_score=np.where(keep, self.frozen.group_score, current.group_score),
                err=np.where(keep, self.frozen.err, current.err),
                reason=np.where(keep, self.frozen.reason, current.reason),
            )
            n_records = np.where(keep, self.frozen_records, records_read)
        converged = self.converged | complete
        return score_rows(self.labels(), hids, self.measure.name, result, n_records, converged)
