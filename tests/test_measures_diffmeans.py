"""diffmeans: class-mean differences vs numpy (plain and standardized), merge, nulls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from measure_blocks import fold, make_blocks

from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures.diffmeans import DiffMeans

NU = 5
NH = 4


def padded_blocks(rng, n_blocks, R, T, offset=0.0):
    """Binary hypotheses that shift some units' means; garbage in the padding."""

    def signals():
        H = (rng.random((R, T, NH)) < [0.3, 0.5, 0.1, 0.7]).astype(float)
        U = rng.normal(offset, 1.0, (R, T, NU)) + 0.8 * H[..., [0, 1, 2, 3, 0]]
        return U, H

    # padding garbage that must never reach a sum
    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.inf, h_pad=1.0)


def run(measure, blocks, info=None):
    return fold(measure, blocks, NU, NH, info)


def reference(blocks, standardize):
    Uf = np.concatenate([U[m].numpy() for U, _, m in blocks]).astype(np.float64)
    Bf = np.concatenate([H[m].numpy() for _, H, m in blocks]) > 0.5
    out = np.zeros((NU, NH))
    for i in range(NU):
        for j in range(NH):
            x1, x0 = Uf[Bf[:, j], i], Uf[~Bf[:, j], i]
            out[i, j] = x1.mean() - x0.mean()
            if standardize:
                ss = ((x1 - x1.mean()) ** 2).sum() + ((x0 - x0.mean()) ** 2).sum()
                out[i, j] /= np.sqrt(ss / (len(x1) + len(x0) - 2))
    return out


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_matches_numpy(standardize, offset):
    blocks = padded_blocks(np.random.default_rng(0), 3, 40, 15, offset)
    m = DiffMeans(standardize=standardize)
    res = m.result(run(m, blocks))
    ref = reference(blocks, standardize)
    np.testing.assert_allclose(res.unit_score, ref, rtol=1e-5, atol=1e-6)
    assert ref[0, 0] > 0.5 and (res.reason == None).all()  # noqa: E711
    assert np.array_equal(res.group_score, res.unit_score)


@pytest.mark.parametrize("standardize", [False, True])
def test_merge_equals_union(standardize):
    blocks = padded_blocks(np.random.default_rng(1), 5, 30, 10)
    m = DiffMeans(standardize=standardize)
    merged = m.merge(run(m, blocks[:2]), run(m, blocks[2:]))
    whole = run(m, blocks)
    names = ["n1", "n0", "mean1", "mean0", "mean_u", "m2_u"]
    names += ["m2_1", "m2_0"] if standardize else []
    for name in names:
        np.testing.assert_allclose(
            getattr(merged, name), getattr(whole, name), rtol=1e-10, atol=1e-9
        )
    np.testing.assert_allclose(m.result(merged).unit_score, m.result(whole).unit_score, rtol=1e-9)


def test_nulls_have_reasons():
    blocks = padded_blocks(np.random.default_rng(2), 2, 30, 10)
    for U, H, _ in blocks:
        H[..., 0], H[..., 1] = 0.0, 1.0
        U[..., 4] = -3.0
    info = [HypothesisInfo(str(j), "binary") for j in range(3)]
    info.append(HypothesisInfo("c", "continuous"))
    res = DiffMeans(standardize=True).result(run(DiffMeans(standardize=True), blocks, info))
    assert all("never true" in r for r in res.reason[:, 0])
    assert all("always true" in r for r in res.reason[:, 1])
    assert all("cannot score continuous" in r for r in res.reason[:, 3])
    assert "unit is constant" in res.reason[4, 2]
    assert np.isnan(res.unit_score[:, [0, 1, 3]]).all() and np.isnan(res.unit_score[4]).all()
    assert np.isfinite(res.unit_score[:4, 2]).all()
    # A unit constant within each class separates perfectly: no pooled std to divide by.
    for U, H, _ in blocks:
        U[..., 0] = H[..., 2] * 2.0
    res = DiffMeans(standardize=True).result(run(DiffMeans(standardize=True), blocks, info))
    assert "pooled std is 0" in res.reason[0, 2] and np.isnan(res.unit_score[0, 2])
    assert DiffMeans().result(run(DiffMeans(), blocks, info)).unit_score[0, 2] == pytest.approx(2.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    blocks = padded_blocks(np.random.default_rng(3), 2, 30, 10)
    m = DiffMeans(standardize=True)
    s = m.start(NU, NH, device="cuda")
    for U, H, mk in blocks:
        s = m.update(s, U.cuda(), H.cuda(), mk.cuda())
    np.testing.assert_allclose(
        m.result(s).unit_score, m.result(run(m, blocks)).unit_score, rtol=1e-6
    )
