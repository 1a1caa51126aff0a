"""Benjamini–Hochberg q-values: the engine's FDR control (``fdr=``) and ``dl.verify`` share them.

They live in the engine because the engine's frames need them and the engine never
imports the verification package (which reaches the Ray adapter).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ..errors import DNIError


def bh_qvalues(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values); NaN stays NaN and is not counted.

    ``q_(i) = min_{j >= i} min(1, m p_(j) / j)`` over the sorted p-values, the
    smallest false discovery rate at which each test would be rejected.
    """
    p = np.asarray(p, dtype=float)
    q = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    bad = ok & ((p < 0) | (p > 1))
    if bad.any():  # a score or a -log p passed by mistake would give plausible q-values
        i = int(np.flatnonzero(bad.ravel())[0])
        value = float(p.ravel()[i])
        raise DNIError(f"p-values must lie in [0, 1]; got {value!r} at position {i}.")
    m = int(ok.sum())
    if m == 0:
        return q
    order = np.argsort(p[ok], kind="stable")
    scaled = p[ok][order] * m / np.arange(1, m + 1)
    scaled = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(m)
    out[order] = scaled
    q[ok] = out
    return q


def with_qvalues(
    frame: pl.DataFrame,
    p: str = "p_value",
    by: str | Sequence[str] | None = None,
    name: str = "q_value",
) -> pl.DataFrame:
    """``frame`` with a BH q-value column computed from column ``p`` (per group of ``by``)."""
    add = lambda df: df.with_columns(  # noqa: E731
        pl.Series(name, bh_qvalues(df[p].to_numpy()), pl.Float64).fill_nan(None)
    )
    if by is None:
        return add(frame)
    by = [by] if isinstance(by, str) else list(by)
    parts = frame.with_row_index("__row").partition_by(by, maintain_order=True)
    return pl.concat([add(part) for part in parts]).sort("__row").drop("__row")
