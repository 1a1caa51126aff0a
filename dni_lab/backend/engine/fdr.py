"""False discovery rate control over an inspection's pairs: p-values, q-values, discoveries.

``dl.inspect(..., fdr=0.05)`` and ``INSPECT ... WITH FDR 0.05`` test every (unit,
hypothesis) pair against "no relation" and control the false discovery rate over them.

**p-values.** A measure gives them when it names its score of no relation
(:attr:`Measure.null_score`) and its ``err`` is the half-width of a t interval,
``err = t_{df, (1 + confidence) / 2} * SE`` with ``df = Measure.error_df()`` (a normal
quantile where that is None). The SE is read back from ``err`` and a pair's p-value is the
two-sided test of its ``unit_score``: ``p = 2 * P(T_df > |score - null_score| / SE)``.
``corr``'s err is a grouped jackknife over ``buckets`` buckets of records, so its df is
``buckets - 1`` and the test inherits the jackknife's robustness to symbols that are not
independent within a record.

**q-values.** Benjamini–Hochberg over every pair of the run that has a p-value, one family
per measure (:func:`dni_lab.verify.with_qvalues`); ``significant`` is ``q_value <= fdr``.
A pair without a p-value has null ``p_value`` and ``q_value``, is not significant and is
not counted among the tests: its measure has no ``null_score`` (of the built-in measures
only ``corr`` has one; ``diffmeans`` has no error estimate to test with), or it has no
error yet (too few records read for the jackknife), or its score is null (a constant unit
or hypothesis, see ``reason``).

**Early stopping.** A pair stops reading once its error is within eps: a rule that reads
the error, never the score (a correlation's error depends on its score only through about
``1 - r**2``, close to 1 under no relation), so the score at the stop is tested as a run
that read that many records would test it. One thing the rule does select: the *error*
it stopped on. The first check at which a pair's estimated error dips to eps tends to catch
the estimate below the true one, and a t-test dividing by it would be too confident (a
stop at the first check, where the error may be far below eps, most of all). With ``eps``
set, a pair is therefore tested with its error raised to eps, ``SE = max(err, eps) / t``:
eps is what the stop promised, and what the error was, give or take one block, when the
pair crossed it. That is conservative at the first check and nearly exact when a pair
crosses eps between checks. ``tests/test_fdr.py`` measures the false discovery proportion
and recall on planted data, read to the end and stopped early.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
from scipy.special import ndtr, ndtri, stdtr, stdtrit

from ..measures.base import Measure
from .frames import FDR_SCHEMA
from .inspection import Inspection
from .qvalues import with_qvalues

#: How a p-value is computed, as provenance states it.
P_VALUE_METHOD = (
    "two-sided t-test of unit_score against the measure's null_score with "
    "SE = max(err, eps) / t_{df,(1+confidence)/2} (df: Measure.error_df(); normal when "
    "None; eps only with early stopping); "
    "Benjamini-Hochberg q-values per measure over the pairs with a p-value"
)


def p_values(
    score: np.ndarray,
    err: np.ndarray,
    measure: Measure,
    confidence: float,
    eps: float | None = None,
) -> np.ndarray:
    """Two-sided p-values of scores against ``measure.null_score``, from their ``err``.

    Parameters
    ----------
    score, err : np.ndarray
        Scores and their error half-widths at ``confidence`` (NaN where undefined).
    measure : Measure
        Gives ``null_score`` and ``error_df()``.
    confidence : float
        The confidence level ``err`` was computed at.
    eps : float or None
        The run's early-stopping eps: errors below it count as eps (see the module).

    Returns
    -------
    np.ndarray
        p-values in [0, 1]; NaN where the score or its error is undefined, or where the
        measure has no ``null_score``.
    """
    score = np.asarray(score, dtype=float)
    err = np.asarray(err, dtype=float)
    p = np.full(score.shape, np.nan)
    if measure.null_score is None:
        return p
    if eps is not None:  # np.maximum keeps NaN: no error yet stays untested
        err = np.maximum(err, eps)
    df = measure.error_df()
    level = 0.5 + confidence / 2
    quantile = float(ndtri(level) if df is None else stdtrit(df, level))
    diff = np.abs(score - measure.null_score)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(diff == 0, 0.0, diff / (err / quantile))  # err 0 off the null: p = 0
    ok = np.isfinite(score) & np.isfinite(err) & (err >= 0)
    tail = ndtr(-z[ok]) if df is None else stdtr(df, -z[ok])
    p[ok] = np.minimum(1.0, 2 * tail)
    return p


def with_fdr(
    frame: pl.DataFrame,
    measures: Sequence[Measure],
    confidence: float,
    fdr: float,
    eps: float | None = None,
) -> pl.DataFrame:
    """``frame`` with ``p_value``, ``q_value`` and ``significant`` (``q_value <= fdr``).

    Parameters
    ----------
    frame : polars.DataFrame
        Score-frame rows (``measure``, ``unit_score``, ``err``), any number of runs' worth.
    measures : sequence of Measure
        The measures the ``measure`` column names.
    confidence : float
        The run's confidence level (that of ``err``).
    fdr : float
        The false discovery rate to control, per measure.
    eps : float or None
        The run's early-stopping eps (:func:`p_values`).

    Returns
    -------
    polars.DataFrame
        The rows in their order, with the three :data:`~.frames.FDR_SCHEMA` columns.
    """
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, t).alias(c) for c, t in FDR_SCHEMA.items())
    score = frame["unit_score"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    err = frame["err"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    names = frame["measure"].to_numpy()
    p = np.full(frame.height, np.nan)
    for m in measures:
        rows = names == m.name
        if rows.any():
            p[rows] = p_values(score[rows], err[rows], m, confidence, eps)
    out = frame.with_columns(pl.Series("p_value", p, pl.Float64).fill_nan(None))
    out = with_qvalues(out, "p_value", by="measure")
    return out.with_columns(significant=(pl.col("q_value") <= fdr).fill_null(False))


def fdr_record(frame: pl.DataFrame, measures: Sequence[Measure], fdr: float) -> dict[str, Any]:
    """The provenance of a frame's FDR columns: level, method, tests and discoveries per measure.

    ``frame`` is what :func:`with_fdr` returned; a measure that gives no p-values is named
    under ``no_p_values``.
    """
    tested = frame.group_by("measure").agg(
        pl.col("p_value").is_not_null().sum().alias("tested"),
        pl.col("significant").sum().alias("discoveries"),
    )
    counts = {r["measure"]: r for r in tested.iter_rows(named=True)}
    with_p = [m.name for m in measures if m.null_score is not None]
    return {
        "fdr_control": {
            "fdr": fdr,
            "method": P_VALUE_METHOD,
            "tested": {n: int(counts.get(n, {}).get("tested") or 0) for n in with_p},
            "discoveries": {n: int(counts.get(n, {}).get("discoveries") or 0) for n in with_p},
            "no_p_values": [m.name for m in measures if m.null_score is None],
        }
    }


class FDRInspection(Inspection):
    """An :class:`Inspection` whose frames carry p-values, q-values and ``significant``.

    ``dl.inspect(..., fdr=)`` runs one; its ``params.fdr`` is the level. The q-values of a
    frame taken mid-run (a live table) are those of the scores so far; the final frame's
    are over every pair as it stopped.
    """

    _fdr_record: dict[str, Any] | None = None

    def frame(self, final: bool = False) -> pl.DataFrame:
        frame = super().frame(final)
        fdr = self.params.fdr
        if fdr is None:
            return frame
        frame = with_fdr(frame, self.measures, self.params.confidence, fdr, self.params.eps)
        self._fdr_record = fdr_record(frame, self.measures, fdr)
        return frame

    def provenance(self) -> dict[str, Any]:
        """:meth:`Inspection.provenance` and the last frame's ``fdr_control`` record."""
        return {**super().provenance(), **(self._fdr_record or {})}
