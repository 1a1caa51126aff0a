"""When reading ends, and what each pair still open then says about it.

Reading ends for one of four reasons, each told apart in the frame and its provenance:

* every pair settled (converged, decided, or among the share ``leave_open``, the
  engine's ``LEAVE_OPEN``, left open): early stopping, the frame is complete for its eps;
* the data ended: every score is its full-data value and counts as converged;
* a *limit* ended it first (:class:`Limit`): ``max_records``, ``max_seconds``, or a
  stream that only repeats records it brought before (:mod:`.distinct`). A limit ends
  reading, it does not settle a score: a pair open then stays open
  (``converged=False``), its reason naming the limit and its error;
* a Stop, ``cancel()`` or Ctrl-C: a partial result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from .distinct import DistinctRecords
from .params import InspectParams
from .states import MeasureState


@dataclass(frozen=True)
class Limit:
    """A limit that ended the reading before the data's end.

    ``kind`` is what provenance records (``"max_records"``, ``"max_seconds"``,
    ``"repeats"``); ``text`` says it in a header's words.
    """

    kind: str
    text: str

    def reason(self, err: float | None, eps: float | None) -> str:
        """An open pair's reason: the limit and where its error stood."""
        if err is None or not math.isfinite(err):
            return f"left open: {self.text} (no error estimate)"
        if eps is None:
            return f"left open: {self.text} (err {err:.3f}; eps=None reads everything)"
        if self.kind == "repeats":
            return f"left open: {self.text} (err {err:.3f} > eps {eps:g})"
        return f"left open: {self.text} at err {err:.3f} > eps {eps:g}"


def record_limit(max_records: int) -> Limit:
    return Limit("max_records", f"max_records={max_records:,} ended the reading")


def limit_now(
    params: InspectParams, elapsed_s: float, distinct: DistinctRecords, stream: bool
) -> Limit | None:
    """A limit reached after this block (``max_seconds``, a repeating stream), or None.

    ``stream``: the data's length is unknown; only then can repeats end a run (a list
    ends by itself), and only under early stopping (``eps=None`` reads everything).
    """
    if params.max_seconds is not None and elapsed_s >= params.max_seconds:
        return Limit("max_seconds", f"max_seconds={params.max_seconds:g} ended the reading")
    if stream and params.eps is not None and distinct.repeats():
        return Limit("repeats", f"the stream repeats its {distinct.count:,} distinct records: "
                                "reading more adds no information")  # fmt: skip
    return None


def settled(
    states: list[MeasureState], eps: float | None, records_read: int, leave_open: float
) -> bool:
    """Every pair converged or decided, but for at most a share ``leave_open`` of them.

    A measure without an error estimate (``diffmeans``, ``mi``, ...) never settles and
    reads every record; the states of the measures that have one still stop at the
    point they would stop without it (:meth:`MeasureState.stop`), and reading goes on
    for the others only.
    """
    if not states:
        return False
    endless = [s for s in states if not s.measure.has_error and not s.converged.all()]
    settling = [s for s in states if s.measure.has_error and s.stopped_at is None]
    if settling and few_open(settling, leave_open) and endless:
        for s in settling:
            s.stop(eps, records_read)
    return not endless and few_open(states, leave_open)


def few_open(states: list[MeasureState], leave_open: float) -> bool:
    """At most a share ``leave_open`` of ``states``' pairs are neither converged nor decided.

    A saturated state's open pairs count as settled: reading on cannot settle them.
    """
    open_pairs = sum(int((~(s.converged | s.decided)).sum()) for s in states
                     if s.saturated is None)  # fmt: skip
    return open_pairs <= leave_open * sum(s.converged.size for s in states)


def _fill_open(frame: pl.DataFrame, why: pl.Expr) -> pl.DataFrame:
    open_ = ~pl.col("converged") & pl.col("reason").is_null()
    return frame.with_columns(reason=pl.when(open_).then(why).otherwise(pl.col("reason")))


def stopped_reasons(frame: pl.DataFrame, records_read: int) -> pl.DataFrame:
    """A Stop, not its error, ended the reading of each open pair: its reason says so."""
    return _fill_open(frame, pl.lit(f"not converged: stopped by the user after {records_read:,} "
                                    "records"))  # fmt: skip


def limit_reasons(frame: pl.DataFrame, limit: Limit, eps: float | None) -> pl.DataFrame:
    """Each pair open when ``limit`` ended the reading names it, with its error."""
    if frame.is_empty():
        return frame
    why = pl.col("err").map_elements(lambda e: limit.reason(e, eps), return_dtype=pl.String,
                                     skip_nulls=False)  # fmt: skip
    return _fill_open(frame, why)


def failed_reasons(frame: pl.DataFrame, position: int) -> pl.DataFrame:
    """The run failed at record ``position``: each open pair of the frame so far says so."""
    return _fill_open(frame, pl.lit(f"not converged: the run failed at record {position:,}"))
