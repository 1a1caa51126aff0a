"""corr: exactness vs numpy, precision at 10^6 symbols, merge, nulls with reasons."""

from __future__ import annotations

import numpy as np
import torch

from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.corr import Corr


def padded_blocks(rng, n_blocks, R, T, nu, nh, offset=0.0):
    """Random blocks with random lengths and garbage in the padding."""
    blocks = []
    for _ in range(n_blocks):
        lengths = rng.integers(1, T + 1, R)
        mask = torch.as_tensor(np.arange(T)[None, :] < lengths[:, None])
        U = torch.as_tensor(rng.normal(offset, 1.0, (R, T, nu)), dtype=torch.float32)
        H = torch.as_tensor(rng.random((R, T, nh)) < 0.3, dtype=torch.float32)
        H[..., 0] = U[..., 0] * 0.5 + torch.as_tensor(rng.normal(0, 1, (R, T)), dtype=torch.float32)
        U[~mask] = 1e6  # garbage that must never reach a statistic
        H[~mask] = -1e6
        blocks.append((U, H, mask))
    return blocks


def reference(blocks):
    Uf = np.concatenate([U[m].numpy() for U, _, m in blocks]).astype(np.float64)
    Hf = np.concatenate([H[m].numpy() for _, H, m in blocks]).astype(np.float64)
    nu = Uf.shape[1]
    return np.corrcoef(Uf.T, Hf.T)[:nu, nu:]


def run(measure, blocks, nu, nh):
    s = measure.start(nu, nh)
    for U, H, m in blocks:
        s = measure.update(s, U, H, m)
    return s


def test_matches_numpy_corrcoef_with_padding():
    rng = np.random.default_rng(0)
    blocks = padded_blocks(rng, 3, 50, 20, 7, 5)
    res = Corr().result(run(Corr(), blocks, 7, 5))
    np.testing.assert_allclose(res.unit_score, reference(blocks), atol=1e-5)
    assert np.array_equal(res.group_score, res.unit_score)


def test_million_symbols_far_from_zero_lose_no_precision():
    # 10^6 symbols with means of 1e3 and unit variance: raw sums of squares in float32
    # would lose every digit; centered, shifted co-moments must not.
    rng = np.random.default_rng(1)
    R, T, nu, nh = 1000, 100, 4, 3
    m = Corr()
    s = m.start(nu, nh)
    Us, Hs = [], []
    for _ in range(10):
        base = rng.normal(0, 1, (R, T, 1))
        U = 1000.0 + base + 0.5 * rng.normal(0, 1, (R, T, nu))
        H = 500.0 + base * np.array([1.0, 0.1, 0.0]) + rng.normal(0, 1, (R, T, nh))
        mask = torch.ones(R, T, dtype=torch.bool)
        s = m.update(
            s, torch.tensor(U, dtype=torch.float32), torch.tensor(H, dtype=torch.float32), mask
        )
        Us.append(U.astype(np.float32).reshape(-1, nu))
        Hs.append(H.astype(np.float32).reshape(-1, nh))
    Uf = np.concatenate(Us).astype(np.float64)
    Hf = np.concatenate(Hs).astype(np.float64)
    ref = np.corrcoef(Uf.T, Hf.T)[:nu, nu:]
    assert float(s.n) == 1e6
    np.testing.assert_allclose(m.result(s).unit_score, ref, atol=1e-6)


def test_merge_equals_union():
    rng = np.random.default_rng(2)
    blocks = padded_blocks(rng, 4, 30, 15, 6, 4)
    m = Corr(group_records=8)
    whole = run(m, blocks, 6, 4)
    merged = m.merge(run(m, blocks[:1], 6, 4), run(m, blocks[1:], 6, 4))
    a, b = m.result(whole), m.result(merged)
    # float32 products under different shifts: equal to float32 precision
    np.testing.assert_allclose(a.unit_score, b.unit_score, atol=1e-7)
    np.testing.assert_allclose(a.err, b.err, atol=1e-6, equal_nan=True)
    assert merged.n_records == whole.n_records


def test_constant_unit_and_hypothesis_are_null_with_reason():
    R, T = 40, 10
    rng = np.random.default_rng(3)
    U = torch.as_tensor(rng.normal(size=(R, T, 3)), dtype=torch.float32)
    U[..., 1] = 2.5
    H = torch.as_tensor(rng.random((R, T, 2)) < 0.5, dtype=torch.float32)
    H[..., 1] = 1.0
    mask = torch.ones(R, T, dtype=torch.bool)
    m = Corr()
    res = m.result(m.update(m.start(3, 2), U, H, mask))
    assert np.isnan(res.unit_score[:, 1]).all() and np.isnan(res.unit_score[1]).all()
    assert res.reason[0, 1] == "hypothesis is constant over the symbols read"
    assert res.reason[1, 0] == "unit is constant over the symbols read"
    assert res.reason[0, 0] is None and np.isfinite(res.unit_score[0, 0])


def test_error_shrinks_and_is_null_before_enough_groups():
    rng = np.random.default_rng(4)
    m = Corr(group_records=10, buckets=20, min_bucket_groups=3)
    s = m.start(2, 1, info=[HypothesisInfo("h", "binary")])
    errs = []
    for U, H, mask in padded_blocks(rng, 24, 50, 12, 2, 1):
        s = m.update(s, U, H, mask)
        err = m.result(s).err
        errs.append(err.max() if np.isfinite(err).all() else np.nan)
    # 5 groups a block: not trusted before three groups per bucket (60 groups, block 12)
    assert np.isnan(errs[0]) and np.isnan(errs[6]) and np.isnan(errs[10])
    assert errs[11] > errs[23] > 0  # 60 groups, then 120


def test_rarely_active_units_match_float64_over_whole_groups():
    # Groups of 64 records × 48 symbols, units that fire on ~1% of symbols: a float32
    # product accumulated over a whole group put such units' correlations 1e-6 off.
    rng = np.random.default_rng(5)
    R, T, nu, nh = 64, 48, 512, 4
    blocks = []
    for _ in range(2):
        mask = torch.as_tensor(np.arange(T)[None, :] < rng.integers(T // 2, T + 1, R)[:, None])
        U = rng.gamma(2.0, 0.5, (R, T, nu)) * (rng.random((R, T, nu)) < 0.01)
        H = np.concatenate([rng.random((R, T, 2)) < 0.1, rng.normal(size=(R, T, 2))], axis=2)
        U[..., 0] += 2.0 * H[..., 0]
        blocks.append((torch.tensor(U, dtype=torch.float32),
                       torch.tensor(H, dtype=torch.float32), mask))  # fmt: skip
    res = Corr().result(run(Corr(), blocks, nu, nh))
    ref = reference(blocks)
    ok = np.isfinite(res.unit_score)
    assert ok.sum() > 0.9 * ok.size
    assert np.abs(res.unit_score - ref)[ok].max() < 2e-7
