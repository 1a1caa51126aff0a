"""corr's intervals cover the full-data score: coverage measured over random record orders.

The quick parentheses LSTM (128 units, trained in seconds and kept in the model store)
reads 8,000 held-out records through the engine, once in full and in 6 random orders
with early stopping; ``benchmarks/bench_coverage.py`` runs the same at 20 orders and two
workloads. Halving ``err`` makes this fail (75% of converged pairs then lie
within their own interval).
"""

from __future__ import annotations

import pytest

from benchmarks.bench_coverage import measure_coverage, parens_workload


@pytest.fixture(scope="module")
def parens():
    return parens_workload(8_000)


def test_corr_intervals_cover_the_full_data_score(parens):
    r = measure_coverage(parens, "corr", orders=6, eps=0.025, block=512, seed=1)
    assert r["pairs_converged"] >= 6 * 1000, r  # enough pairs for a share to mean something
    assert r["median_records_read"] < 8_000, "nothing stopped early: coverage would be trivial"
    assert r["within_err"] >= 0.95, f"only {r['within_err']:.1%} within their own interval"
    assert r["within_eps"] >= 0.95, f"only {r['within_eps']:.1%} within eps of the full data"
