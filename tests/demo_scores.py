"""A score frame shaped like the demo's (``dni-lab demo``): one model, one layer of 128
units, 157 parse-tree hypotheses named like the SQL grammar's, every score column."""

from __future__ import annotations

import numpy as np
import polars as pl


def demo_scores(units: int = 128, hyps: int = 157, mid: str = "sql-lstm") -> pl.DataFrame:
    rng = np.random.default_rng(3)
    n = units * hyps
    names = [f"sql.range:Rule{i}" if i % 2 else f"sql.impulse:Rule{i}" for i in range(hyps)]
    return pl.DataFrame(
        {
            "mid": mid, "uid": np.repeat(np.arange(units), hyps), "layer": "lstm",
            "unit": np.repeat(np.arange(units), hyps), "hid": np.tile(names, units),
            "measure": "corr", "unit_score": rng.uniform(-1, 1, n),
            "group_score": rng.uniform(0, 1, n), "err": 0.01, "n_records": 9000,
            "converged": True, "reason": "converged",
        }
    )  # fmt: skip
