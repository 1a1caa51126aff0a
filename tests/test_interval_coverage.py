"""corr's intervals cover the full-data score: coverage measured over random record orders.

The quick parentheses LSTM (128 units, trained in seconds and kept in the model store)
reads 8,000 held-out records through the engine, once in full and in 6 random orders
with early stopping; ``benchmarks/bench_coverage.py`` runs the same at 20 orders and two
workloads. Halving ``err`` makes this fail (75% of converged pairs then lie
within their own interval).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

import dni_lab as dl
from benchmarks.bench_coverage import measure_coverage, parens_workload
from dni_lab.backend.measures.corr import Corr


@pytest.fixture(scope="module")
def parens():
    return parens_workload(8_000)


def test_corr_intervals_cover_the_full_data_score(parens):
    r = measure_coverage(parens, "corr", orders=6, eps=0.025, block=512, seed=1)
    assert r["pairs_converged"] >= 6 * 1000, r  # enough pairs for a share to mean something
    assert r["median_records_read"] < 8_000, "nothing stopped early: coverage would be trivial"
    assert r["within_err"] >= 0.95, f"only {r['within_err']:.1%} within their own interval"
    assert r["within_eps"] >= 0.95, f"only {r['within_eps']:.1%} within eps of the full data"


def _reads(wl, eps: float, orders: int = 3) -> list[int]:
    """Records ``corr`` reads at ``eps`` (blocks of 64) in each of ``orders`` random orders."""
    model, fam = wl.model(), wl.family()
    rng = np.random.default_rng(2)
    out = []
    for _ in range(orders):
        order = [int(i) for i in rng.permutation(len(wl.U))]
        f = dl.inspect([model], [fam], ["corr"], order, units=[("", "*")], cache=False,
                       eps=eps, block_size=64)  # fmt: skip
        assert (f.filter(pl.col("converged"))["err"] <= eps).all(), "converged above eps"
        out.append(int(f["n_records"].max()))
    return out


def test_records_read_grow_as_eps_shrinks(parens):
    """A 3x looser or tighter eps must read a different number of records: the first
    error comes early (a few hundred records) and the stopping point follows eps."""
    reads = {eps: _reads(parens, eps) for eps in (0.075, 0.025, 0.025 / 3)}
    med = {eps: float(np.median(r)) for eps, r in reads.items()}
    assert med[0.075] < med[0.025] < med[0.025 / 3] < 8_000, reads


def test_first_error_within_512_records(parens):
    """corr has an error for nearly every pair after at most 512 records."""
    m = Corr()
    s = m.start(parens.U[0].shape[1], len(parens.signals))
    for lo in range(0, 512, 64):
        U, H, mask = _block(parens, range(lo, lo + 64))
        s = m.update(s, U, H, mask)
    res = m.result(s)
    scored = np.isfinite(res.unit_score)
    assert scored.sum() > 0.9 * scored.size
    assert np.isfinite(res.err[scored]).all()


def _block(wl, idx) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    T = max(len(wl.U[i]) for i in idx)
    R, nu, nh = len(idx), wl.U[0].shape[1], wl.H[0].shape[1]
    U, H = torch.zeros(R, T, nu), torch.zeros(R, T, nh)
    mask = torch.zeros(R, T, dtype=torch.bool)
    for k, i in enumerate(idx):
        L = len(wl.U[i])
        U[k, :L], H[k, :L], mask[k, :L] = torch.from_numpy(wl.U[i]), torch.from_numpy(wl.H[i]), True
    return U, H, mask
