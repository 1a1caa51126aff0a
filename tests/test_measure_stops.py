"""A measure that cannot stop early (no error estimate) no longer keeps the others reading.

``corr`` alone stops on this workload after a few hundred of 1,500 records; with
``diffmeans`` beside it, ``corr``'s states stop at that same point (rows identical to
``corr`` alone: scores, records read, reasons, converged) while ``diffmeans`` reads every
record, and the provenance says which measure stopped where and which read on.
"""

from __future__ import annotations

import polars as pl
import torch
from conftest import CharLM, encode_chars, paren, position, random_records

import dni_lab as dl
from dni_lab.backend.measures.corr import Corr

N = 1500
COLS = ["unit_score", "err", "n_records", "reason", "converged"]


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def _run(measures):
    return dl.inspect(_model(), [paren, position], measures, random_records(N, seed=3),
                      eps=0.05, block_size=40, cache=False)  # fmt: skip


def test_corr_stops_at_its_own_point_while_diffmeans_reads_on():
    corr = lambda: Corr(group_records=4, buckets=8)  # noqa: E731  (an error after 32 records)
    alone = _run([corr()])
    both = _run([corr(), "diffmeans"])
    assert alone["n_records"].max() < N  # corr alone stops early on this workload
    keys = ["uid", "hid"]
    with_dm = both.filter(pl.col("measure") == "corr").sort(keys).select(COLS)
    assert with_dm.equals(alone.sort(keys).select(COLS))
    dm = both.filter(pl.col("measure") == "diffmeans")
    assert (dm["n_records"] == N).all() and dm["converged"].all()
    stops = dl.provenance(both)["measure_stops"]
    stopped_at = alone["n_records"].max()
    assert stops["corr"] == f"stopped early at {stopped_at:,} records (settled)"
    assert stops["diffmeans"].startswith("no error estimate")
    assert "measure_stops" not in dl.provenance(alone)  # nothing to explain there
