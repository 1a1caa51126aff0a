"""iou and local_iou: numpy and per-record references, merge, chunking, nulls."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from measure_blocks import fold, make_blocks

import dni_lab.backend.measures.iou as iou_mod
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures.iou import IoU, LocalIoU

NU = 5
NH = 3


def padded_blocks(rng, n_blocks, R, T):
    """Units that fire where some hypotheses hold; NaN garbage in the padding."""

    def signals():
        H = (rng.random((R, T, NH)) < [0.05, 0.2, 0.5]).astype(float)
        U = rng.normal(0, 1, (R, T, NU)) + 3.0 * H[..., [0, 1, 2, 0, 1]] * [1, 1, 1, 0, 0.3]
        return U, H

    # padding garbage that must never reach a count
    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.nan, h_pad=1.0)


def run(measure, blocks, info=None, state=None):
    return fold(measure, blocks, NU, NH, info, state)


def iou_reference(blocks, q):
    t = np.quantile(blocks[0][0][blocks[0][2]].numpy(), q, axis=0)  # first block calibrates
    Uf = np.concatenate([U[m].numpy() for U, _, m in blocks])
    Bf = np.concatenate([H[m].numpy() for _, H, m in blocks]) > 0.5
    A = Uf > t
    inter = A.astype(float).T @ Bf
    union = A.sum(0)[:, None] + Bf.sum(0)[None, :] - inter
    return inter / union


def local_reference(blocks, q):
    total, count = np.zeros((NU, NH)), np.zeros(NH)
    for U, H, mask in blocks:
        for r in range(U.shape[0]):
            m = mask[r].numpy()
            u, b = U[r].numpy()[m], H[r].numpy()[m] > 0.5
            for j in range(NH):
                if not b[:, j].any():
                    continue
                count[j] += 1
                for i in range(NU):
                    a = u[:, i] > np.quantile(u[:, i], q)
                    total[i, j] += (a & b[:, j]).sum() / (a | b[:, j]).sum()
    return total / count


def test_iou_matches_numpy_with_first_block_threshold():
    blocks = padded_blocks(np.random.default_rng(0), 3, 60, 20)
    m = IoU(quantile=0.9)
    res = m.result(run(m, blocks))
    ref = iou_reference(blocks, 0.9)
    np.testing.assert_allclose(res.unit_score, ref, rtol=1e-12)
    assert ref[0, 0] > 0.2 and (res.reason == None).all()  # noqa: E711


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 0.995, 1.0])
def test_quantile_rows_matches_numpy(q):
    X = np.random.default_rng(7).normal(0, 1, (201, 4)).astype(np.float32)
    X[:50, 0] = 0.25  # ties
    got = iou_mod.quantile_rows(torch.as_tensor(X), q).numpy()
    np.testing.assert_allclose(got, np.quantile(X, q, axis=0), rtol=1e-6, atol=1e-7)


def test_iou_merge_equals_union_and_needs_same_threshold():
    blocks = padded_blocks(np.random.default_rng(1), 4, 40, 12)
    m = IoU(quantile=0.95)
    calibrated = run(m, blocks[:1])
    a = run(m, blocks[1:2], state=copy.deepcopy(calibrated))
    b = run(m, blocks[2:], state=copy.deepcopy(calibrated))
    merged, whole = m.merge(a, b), run(m, [blocks[0], *blocks])
    for name in ("inter", "a", "b"):
        assert torch.equal(getattr(merged, name), getattr(whole, name))
    assert torch.equal(m.merge(m.start(NU, NH), a).threshold, a.threshold)
    with pytest.raises(ValueError, match="same first block"):
        m.merge(a, run(m, blocks[3:]))


def test_iou_nulls_have_reasons():
    blocks = padded_blocks(np.random.default_rng(2), 2, 30, 10)
    for U, H, _ in blocks:
        H[..., 0], H[..., 1] = 0.0, 1.0
        U[..., 4] = 1.0
    info = [HypothesisInfo("a", "binary"), HypothesisInfo("b", "binary"), HypothesisInfo("c")]
    res = IoU().result(run(IoU(), blocks, info))
    assert all("never true" in r for r in res.reason[:, 0])
    assert all("always true" in r for r in res.reason[:, 1])
    assert all("cannot score continuous" in r for r in res.reason[:, 2])
    assert np.isnan(res.unit_score).all()  # every hypothesis column is null here
    info[2] = HypothesisInfo("c", "binary")
    res = IoU().result(run(IoU(), blocks, info))
    assert "never exceeds" in res.reason[4, 2] and np.isfinite(res.unit_score[:4, 2]).all()


@pytest.mark.parametrize("q", [0.9, 0.75])
def test_local_iou_matches_per_record_loop(q):
    blocks = padded_blocks(np.random.default_rng(3), 2, 25, 14)
    m = LocalIoU(quantile=q)
    res = m.result(run(m, blocks))
    np.testing.assert_allclose(res.unit_score, local_reference(blocks, q), rtol=1e-6)
    assert (res.reason == None).all()  # noqa: E711


def test_local_iou_chunked_merge_equals_union(monkeypatch):
    blocks = padded_blocks(np.random.default_rng(4), 4, 20, 10)
    m = LocalIoU()
    whole = run(m, blocks)
    monkeypatch.setattr(iou_mod, "CHUNK_BYTES", 1)  # one record per chunk
    merged = m.merge(run(m, blocks[:1]), run(m, blocks[1:]))
    for name in ("iou_sum", "n_valid", "n_partial", "fired"):
        np.testing.assert_allclose(getattr(merged, name), getattr(whole, name), rtol=1e-6)
    assert merged.n_records == whole.n_records == 80


def test_local_iou_nulls_have_reasons():
    blocks = padded_blocks(np.random.default_rng(5), 2, 20, 10)
    for U, H, _ in blocks:
        H[..., 0], H[..., 1] = 0.0, 1.0
        U[..., 3] = 0.5
    res = LocalIoU().result(run(LocalIoU(), blocks))
    assert all("empty in every record" in r for r in res.reason[:, 0])
    assert all("covers every symbol" in r for r in res.reason[:, 1])
    assert "never exceeds" in res.reason[3, 2] and np.isnan(res.unit_score[3, 2])
    assert np.isfinite(res.unit_score[[0, 1, 2, 4], 2]).all()
    wrong = [HypothesisInfo(str(j), "categorical", 3) for j in range(NH)]
    res = LocalIoU().result(run(LocalIoU(), blocks, wrong))
    assert all("cannot score categorical" in r for r in res.reason.ravel())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    blocks = padded_blocks(np.random.default_rng(6), 2, 30, 10)
    for m in (IoU(quantile=0.9), LocalIoU()):
        s = m.start(NU, NH, device="cuda")
        for U, H, mk in blocks:
            s = m.update(s, U.cuda(), H.cuda(), mk.cuda())
        np.testing.assert_allclose(
            m.result(s).unit_score, m.result(run(m, blocks)).unit_score, rtol=1e-5
        )
