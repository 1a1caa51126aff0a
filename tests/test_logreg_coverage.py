"""logreg's converged pairs are the full-data fit: coverage over random record orders.

A planted workload (units drawn at random, binary hypotheses drawn from logistic models
of a few units, of decreasing strength) is read through the engine once in full and in
several random orders with early stopping. Every pair marked converged must show a
group F1 and a coefficient within eps of the full read's. The old solver (Newton on a
smoothed |w|, stopped on the objective's decrease) left fits whose coefficients
depended on the order the rows came in.
"""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.bench_coverage import Replayed, measure_coverage
from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.logreg import LogReg

N_UNITS, N_RECORDS = 16, 1_500


def planted(seed: int = 0) -> Replayed:
    rng = np.random.default_rng(seed)
    W = np.zeros((N_UNITS, 3))
    W[:3, 0], W[3:6, 1], W[6, 2] = (2.0, -1.5, 1.0), (1.0, 0.8, -0.6), 0.7
    U, H = [], []
    for _ in range(N_RECORDS):
        L = int(rng.integers(30, 60))
        u = rng.normal(size=(L, N_UNITS)).astype(np.float32)
        # near-copies of the planted units: the L1 optimum is flat along their differences
        u[:, 8:11] = u[:, :3] + 0.1 * u[:, 8:11]
        p = 1 / (1 + np.exp(-(u @ W - 0.5)))
        U.append(u)
        H.append((rng.random(p.shape) < p).astype(np.float32))
    names = ["strong", "medium", "weak"]
    return Replayed("planted", U, H, names, dict.fromkeys(names, "binary"))


def _padded(wl: Replayed, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first ``n`` records of ``wl`` as one padded block."""
    T = max(len(u) for u in wl.U[:n])
    U, H = torch.zeros(n, T, N_UNITS), torch.zeros(n, T, 3)
    mask = torch.zeros(n, T, dtype=torch.bool)
    for i in range(n):
        L = len(wl.U[i])
        U[i, :L], H[i, :L], mask[i, :L] = torch.from_numpy(wl.U[i]), torch.from_numpy(wl.H[i]), True
    return U, H, mask


def test_converged_logreg_pairs_are_within_eps_of_the_full_data_fit():
    r = measure_coverage(planted(), "logreg", orders=4, eps=0.1, block=128, seed=3)
    assert r["pairs_converged"] >= 4 * N_UNITS, r  # enough pairs for a share to mean something
    assert r["median_records_read"] < N_RECORDS, "nothing stopped early: coverage is trivial"
    assert r["within_eps"] >= 0.95, f"only {r['within_eps']:.1%} within eps of the full data"


def test_the_full_data_fit_does_not_depend_on_the_order_of_the_records():
    wl = planted(seed=1)
    n = 400
    U, H, mask = _padded(wl, n)
    info = [HypothesisInfo(s, "binary") for s in wl.signals]
    fits = []
    for perm in (torch.arange(n), torch.randperm(n, generator=torch.Generator().manual_seed(0))):
        m = LogReg()
        s = m.start(N_UNITS, 3, info=info)
        for b in range(0, n, 100):  # four blocks: checkpoints, then the final fit
            sl = perm[b : b + 100]
            s = m.update(s, U[sl], H[sl], mask[sl])
        fits.append(m.result(s))
    a, b = fits
    assert np.isfinite(a.unit_score).all()
    # the solver stops within its tolerance (1e-3) of the optimum, in any order
    gap = np.abs(a.unit_score - b.unit_score).max()
    assert gap < 0.01, gap
    assert np.abs(a.group_score - b.group_score).max() < 0.005


def test_loading_unit_scores_settle_before_half_the_data_within_eps():
    """``unit_score="loading"``: each unit's correlation with the probe's predicted
    probability is identifiable, so its pairs settle; the coefficients of the near-copies
    planted here never do. Coverage counts only non-empty pairs settled before the end."""
    r = measure_coverage(planted(), "logreg-loading", orders=1, eps=0.05, block=128, seed=3)
    assert r["groups_settled"] == r["groups"] == 3, r  # every group F1 settled
    assert r["median_records_read"] <= N_RECORDS // 2, r
    assert r["settled_by_half_the_data"] >= 0.5 * r["nonempty_pairs"], r
    assert r["pairs_converged"] >= 0.5 * r["nonempty_pairs"], r
    assert r["within_eps"] >= 0.95, f"only {r['within_eps']:.1%} within eps of the full data"


def test_near_copies_share_a_loading():
    wl = planted(seed=2)
    U, H, mask = _padded(wl, 300)
    info = [HypothesisInfo(s, "binary") for s in wl.signals]
    m = LogReg(unit_score="loading")
    res = m.result(m.update(m.start(N_UNITS, 3, info=info), U, H, mask))
    # units 8-10 are units 0-2 plus a little noise: twins, whatever weight L1 gave each
    gap = np.abs(res.unit_score[:3, 0] - res.unit_score[8:11, 0])
    assert (gap < 0.05).all(), gap
    assert np.abs(res.unit_score[:3, 0]).min() > 0.3  # the planted units load on "strong"
    assert np.isfinite(res.err[:, 0]).sum() == 0  # one fit, no half-way checkpoint: no error
