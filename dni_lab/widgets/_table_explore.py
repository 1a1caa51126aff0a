"""What makes the score table worth exploring in, computed in Python: the best unit of each
hypothesis, a small histogram per numeric column, and row windows for the scrolled table.

Pure functions of their arguments (:class:`~.table.ScoreTable` holds the state). Only the
rows in sight travel: the browser asks for a window (start, count) and gets those rows'
cell texts, never the frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ._format import cell_text
from ._paging import cells, kind_of

#: One best row per model (and checkpoint), hypothesis and measure: the strongest unit
#: that explains each hypothesis, by each measure (probe and correlation are not on one
#: scale, so each keeps its own best).
BEST_KEYS = ("mid", "epoch", "hid", "measure")
BINS = 20
#: Rows a window request may ask for (a screen or two with some ahead; a request for more
#: is cut, so a message stays a few tens of kilobytes).
MAX_WINDOW = 500
#: Columns the browser hides by itself on a narrow table until the person chooses: the
#: unit id repeats what layer and unit say.
AUTO_HIDE = ("uid",)
#: Id columns a narrow table also hides when every row of the frame has one value (one
#: model, one layer, one measure): the header says the value once instead ("every row:").
CONSTANT_IDS = ("mid", "epoch", "layer", "measure")


def constant_columns(frame: pl.DataFrame, cols: list[str]) -> dict[str, str]:
    """``{column: value}`` for the columns of :data:`CONSTANT_IDS` among ``cols`` whose
    every row of ``frame`` holds one non-null value (a frame of one row says nothing)."""
    if frame.height < 2:
        return {}
    out = {}
    for c in CONSTANT_IDS:
        if c in cols and c in frame.columns:
            s = frame[c]
            if s.null_count() == 0 and s.n_unique() == 1:
                out[c] = cell_text(s[0])
    return out


def best_per_hypothesis(frame: pl.DataFrame, score: str = "unit_score") -> pl.DataFrame:
    """The row with the largest ``|score|`` of each (model, checkpoint, hypothesis, measure)
    present in ``frame`` (nulls last: a group whose scores are all null keeps one null row),
    in the order the groups first appear.

    Raises
    ------
    ValueError
        If ``frame`` has no ``score`` column.
    """
    if score not in frame.columns:
        raise ValueError(
            f"the best unit per hypothesis needs a {score!r} column; this frame has "
            f"{frame.columns}. Turn the view off or show a score frame."
        )
    keys = [k for k in BEST_KEYS if k in frame.columns]
    if frame.height == 0:
        return frame
    order = frame.with_row_index("__dl_row")
    ranked = order.sort(pl.col(score).abs(), descending=True, nulls_last=True,
                        maintain_order=True)  # fmt: skip
    rank = pl.int_range(pl.len())
    first = ranked.filter((rank.over(keys) if keys else rank) == 0)
    return first.sort("__dl_row").drop("__dl_row")


def histograms(view: pl.DataFrame, cols: list[str], bins: int = BINS) -> dict[str, Any]:
    """``{column: {counts, lo, hi, lo_text, hi_text, n, nulls}}`` for each numeric column of
    ``cols``: ``bins`` equal bins from the least to the largest finite value (one bin where
    they are equal; no counts where there is no value)."""
    out: dict[str, Any] = {}
    for c in cols:
        if c not in view.columns or kind_of(view.schema[c]) not in ("int", "float"):
            continue
        s = view[c]
        values = s.drop_nulls().cast(pl.Float64).to_numpy()
        values = values[np.isfinite(values)]
        entry: dict[str, Any] = {"n": int(values.size), "nulls": view.height - int(values.size)}
        if values.size:
            lo, hi = float(values.min()), float(values.max())
            counts, _ = np.histogram(values, bins=bins if hi > lo else 1, range=(lo, hi))
            exact = s.dtype.is_integer()  # the range as the cells say it
            entry.update(counts=counts.tolist(), lo=lo, hi=hi,
                         lo_text=cell_text(int(lo) if exact else lo),
                         hi_text=cell_text(int(hi) if exact else hi))  # fmt: skip
        else:
            entry.update(counts=[], lo=None, hi=None, lo_text="—", hi_text="—")
        out[c] = entry
    return out


def window(view: pl.DataFrame, start: int, count: int, cols: list[str], seq: int) -> dict:
    """The answer to a window request: rows ``start`` to ``start + count`` of ``view`` (at
    most :data:`MAX_WINDOW`), for the view numbered ``seq``."""
    start = max(0, min(int(start), view.height))
    part = view.slice(start, max(0, min(int(count), MAX_WINDOW)))
    return {"type": "rows", "seq": seq, "start": start, **cells(part, cols)}
