"""mi: equality with sklearn's mutual_info_score on the same bins, chunking, merge, nulls."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from measure_blocks import fold, make_blocks
from sklearn.metrics import mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

import dni_lab.backend.measures.mi as mi_mod
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures.mi import MutualInformation

NU = 5
INFO = [
    HypothesisInfo("bin", "binary"),
    HypothesisInfo("cont", "continuous"),
    HypothesisInfo("cat", "categorical", n_categories=5),
    HypothesisInfo("cat_inferred", "categorical"),
]
NH = len(INFO)


def padded_blocks(rng, n_blocks, R, T, spread=1.0):
    """Blocks whose hypotheses depend on the units; garbage in the padding."""

    def signals():
        U = rng.normal(0, spread, (R, T, NU))
        H = np.stack(
            [
                U[..., 0] + rng.normal(0, 1, (R, T)) > 0.5,
                U[..., 1] + rng.normal(0, 1, (R, T)),
                np.clip(np.round(U[..., 2] + 2), 0, 4),
                rng.integers(0, 3, (R, T)) + (U[..., 3] > 1),
            ],
            -1,
        )
        return U, H

    # padding garbage that must never reach a count
    return make_blocks(rng, n_blocks, R, T, signals, u_pad=1e6, h_pad=-7.0)


def run(measure, blocks, info=INFO, nh=NH):
    return fold(measure, blocks, NU, nh, info)


def equal_width(x, first, bins):
    """The documented binning, in numpy float32: edges from the first block, clipped."""
    lo, hi = first.min(), first.max()
    scale = np.float32(bins) / (hi - lo)
    return np.clip(np.floor((x - lo) * scale), 0, bins - 1).astype(int)


def reference(blocks, bins):
    real = [(U[m].numpy(), H[m].numpy()) for U, H, m in blocks]
    Uf = np.concatenate([u for u, _ in real])
    Hf = np.concatenate([h for _, h in real])
    U0, H0 = real[0]
    hyp_codes = [
        (Hf[:, 0] > 0.5).astype(int),
        equal_width(Hf[:, 1], H0[:, 1], bins),
        np.clip(np.round(Hf[:, 2]), 0, 4).astype(int),
        np.clip(np.round(Hf[:, 3]), 0, H0[:, 3].max()).astype(int),  # inferred: max + 1 codes
    ]
    out = np.zeros((NU, NH))
    for i in range(NU):
        ub = equal_width(Uf[:, i], U0[:, i], bins)
        for j, hb in enumerate(hyp_codes):
            out[i, j] = mutual_info_score(ub, hb)
    return out


def test_matches_sklearn_on_same_bins():
    rng = np.random.default_rng(0)
    # Later blocks spread wider than the first: their values are clipped into edge bins.
    blocks = padded_blocks(rng, 1, 40, 20) + padded_blocks(rng, 3, 40, 20, spread=1.5)
    res = MutualInformation(bins=8).result(run(MutualInformation(bins=8), blocks))
    ref = reference(blocks, 8)
    np.testing.assert_allclose(res.unit_score, ref, rtol=1e-9, atol=1e-12)
    assert ref[0, 0] > 0.05 and ref[1, 1] > 0.05  # the test data carries information
    assert np.array_equal(res.group_score, res.unit_score) and (res.reason == None).all()  # noqa: E711
    # The stored counts are the contingency table sklearn builds from the same labels.
    state = run(MutualInformation(bins=8), blocks)
    Uf = np.concatenate([U[m].numpy() for U, _, m in blocks])
    Hf = np.concatenate([H[m].numpy() for _, H, m in blocks])
    first_u = blocks[0][0][blocks[0][2]].numpy()
    unit_bins = equal_width(Uf[:, 2], first_u[:, 2], 8)
    table = contingency_matrix(unit_bins, np.clip(np.round(Hf[:, 2]), 0, 4).astype(int))
    got = MutualInformation(bins=8).contingency(state, 2)[2].numpy()
    np.testing.assert_array_equal(got[got.sum(1) > 0][:, got.sum(0) > 0], table)


def test_chunked_counts_equal_unchunked(monkeypatch):
    # A tiny memory budget forces row, unit and hypothesis chunks through every loop.
    blocks = padded_blocks(np.random.default_rng(1), 2, 30, 15)
    full = run(MutualInformation(bins=6), blocks)
    monkeypatch.setattr(mi_mod, "CHUNK_BYTES", 2000)
    small = run(MutualInformation(bins=6), blocks)
    assert torch.equal(full.joint, small.joint) and torch.equal(full.u_count, small.u_count)
    np.testing.assert_allclose(
        MutualInformation(bins=6).result(small).unit_score, reference(blocks, 6), atol=1e-12
    )


def test_merge_equals_union_and_needs_same_calibration():
    rng = np.random.default_rng(2)
    blocks = padded_blocks(rng, 5, 30, 12)
    m = MutualInformation(bins=8)
    calibrated = run(m, blocks[:1])
    # Workers start from copies of one calibrated state; the union then holds block 0 twice.
    a, b = copy.deepcopy(calibrated), copy.deepcopy(calibrated)
    for U, H, mk in blocks[1:3]:
        a = m.update(a, U, H, mk)
    for U, H, mk in blocks[3:]:
        b = m.update(b, U, H, mk)
    merged = m.merge(a, b)
    whole = run(m, [blocks[0], *blocks[:3], *blocks[3:]])
    assert torch.equal(merged.joint, whole.joint) and merged.n == whole.n
    np.testing.assert_allclose(m.result(merged).unit_score, m.result(whole).unit_score)
    # An uncalibrated (empty) state adopts the other's edges and counts.
    for adopted in (m.merge(m.start(NU, NH, info=INFO), a), m.merge(a, m.start(NU, NH, info=INFO))):
        assert torch.equal(adopted.joint, a.joint) and adopted.joint is not a.joint
    with pytest.raises(ValueError, match="same first block"):
        m.merge(a, run(m, blocks[2:3]))


def test_nulls_have_reasons():
    blocks = padded_blocks(np.random.default_rng(3), 2, 30, 10)
    for U, H, _ in blocks:
        U[..., 4] = 2.0
        H[..., 0] = 0.0
    res = MutualInformation().result(run(MutualInformation(), blocks))
    assert np.isnan(res.unit_score[:, 0]).all()
    assert all("hypothesis is constant" in r for r in res.reason[:, 0])
    assert np.isnan(res.unit_score[4, 1:]).all()
    assert all("unit is constant" in r for r in res.reason[4, 1:])
    assert np.isfinite(res.unit_score[:4, 1:]).all()
    empty = MutualInformation().result(MutualInformation().start(NU, NH))
    assert (empty.reason == "no symbols read").all() and np.isnan(empty.unit_score).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    blocks = padded_blocks(np.random.default_rng(4), 2, 30, 10)
    m = MutualInformation()
    s = m.start(NU, NH, device="cuda", info=INFO)
    for U, H, mk in blocks:
        s = m.update(s, U.cuda(), H.cuda(), mk.cuda())
    np.testing.assert_allclose(m.result(s).unit_score, m.result(run(m, blocks)).unit_score)
