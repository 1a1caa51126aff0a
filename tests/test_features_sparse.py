"""Sparse-aware scoring: corr and diffmeans fold a SparseBlock to the dense path's scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars
from measure_blocks import padding_mask
from tolerances import assert_close_f32

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.extraction.sparse_block import SparseBlock
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures.corr import Corr
from dni_lab.backend.measures.diffmeans import DiffMeans

D, K, NH = 200, 6, 3
INFO = [HypothesisInfo("b0", "binary"), HypothesisInfo("b1", "binary"),
        HypothesisInfo("c", "continuous")]  # fmt: skip


#: records and symbols per block: the dense path's float32 GEMMs sum over R x T rows
R_BLOCK, T_BLOCK = 150, 9


def sparse_blocks(seed: int, n_blocks: int = 3, R: int = R_BLOCK, T: int = T_BLOCK):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_blocks):
        mask = torch.as_tensor(padding_mask(rng, R, T))
        idx = np.stack([
            np.stack([rng.choice(D - 1, K, replace=False) for _ in range(T)]) for _ in range(R)
        ])  # fmt: skip
        idx = torch.as_tensor(idx + (idx >= 17))  # latent 17 is left for slot 0 below
        vals = torch.as_tensor(rng.gamma(2.0, 1.0, (R, T, K)), dtype=torch.float32)
        vals[torch.as_tensor(rng.random((R, T, K)) < 0.3)] = 0.0  # JumpReLU: fewer than K fire
        vals[~mask] = 1e6  # garbage in the padding
        H = torch.as_tensor(np.concatenate([
            rng.random((R, T, 2)) < [0.2, 0.05], rng.normal(size=(R, T, 1))], axis=2),
            dtype=torch.float32)  # fmt: skip
        H[~mask] = 7.0
        # a latent that tracks b0, so some scores are far from zero
        vals[..., 0] = torch.where(H[..., 0] > 0.5, 3.0, vals[..., 0])
        idx[..., 0] = 17
        out.append((SparseBlock(vals, idx, D), H, mask))
    return out


def dense_of(Z: SparseBlock, mask: torch.Tensor) -> torch.Tensor:
    U = Z.masked(mask).dense()
    U[~mask] = 1e6  # the dense path must ignore padding on its own
    return U


@pytest.mark.parametrize(
    "measure", [Corr(), DiffMeans(), DiffMeans(standardize=True)], ids=["corr", "dm", "dm-std"]
)
def test_sparse_update_equals_dense_update(measure):
    blocks = sparse_blocks(0)
    a = measure.start(D, NH, info=INFO)
    b = measure.start(D, NH, info=INFO)
    for Z, H, m in blocks:
        a = measure.update_sparse(a, Z, H, m)
        b = measure.update(b, dense_of(Z, m), H, m)
    ra, rb = measure.result(a), measure.result(b)
    np.testing.assert_array_equal(np.isnan(ra.unit_score), np.isnan(rb.unit_score))
    assert np.isfinite(ra.unit_score).sum() > D  # most pairs are scored
    # the sparse path sums in float64, the dense one in float32 GEMMs over a block's rows
    assert_close_f32(ra.unit_score, rb.unit_score, reduction=R_BLOCK * T_BLOCK, equal_nan=True)
    if isinstance(measure, Corr):
        assert np.nanmax(np.abs(ra.unit_score[17])) > 0.3
    np.testing.assert_array_equal(ra.reason, rb.reason)
    # a state that read sparse blocks merges with one that read dense blocks
    c = measure.start(D, NH, info=INFO)
    c = measure.update_sparse(c, *blocks[0])
    d = measure.start(D, NH, info=INFO)
    for Z, H, m in blocks[1:]:
        d = measure.update(d, dense_of(Z, m), H, m)
    merged = measure.result(measure.merge(c, d))
    assert_close_f32(merged.unit_score, rb.unit_score, reduction=R_BLOCK * T_BLOCK,
                     equal_nan=True)


def char_model_and_topk_set():
    """The toy char-LSTM and a TopK set of 64 latents on its LSTM, random weights."""
    torch.manual_seed(0)
    model = dl.Model(CharLM(), encode=encode_chars, name="m")
    fs = F.TopKSAE(12, 64, "lstm", name="sae", k=4)
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    return model, fs


def test_engine_scores_a_topk_set_through_the_sparse_path(monkeypatch, records, hyps):
    calls = {"corr": 0, "diffmeans": 0}
    for cls in (Corr, DiffMeans):
        orig = cls.update_sparse

        def counted(self, *a, _orig=orig, **kw):
            calls[self.name] += 1
            return _orig(self, *a, **kw)

        monkeypatch.setattr(cls, "update_sparse", counted)
    model, fs = char_model_and_topk_set()
    f = dl.inspect(model, hyps, ["corr", "diffmeans", "mi"], records[:100], units=[fs],
                   eps=None, block_size=50)  # fmt: skip
    assert calls == {"corr": 2, "diffmeans": 2}  # mi read the dense block
    assert f.height == 64 * 2 * 3
    dense = F.StandardSAE(12, 64, "lstm", name="dense")
    dl.inspect(model, hyps, ["corr"], records[:50], units=[dense], eps=None)
    assert calls["corr"] == 2  # a dense set stays on the dense path


def test_forward_batches_reassemble_a_sparse_block(records, hyps):
    # a block run as several forward batches of unequal length gives the same latents
    model, fs = char_model_and_topk_set()
    kw = dict(eps=None, block_size=50, units=[fs])
    one = dl.inspect(model, hyps, ["corr", "mi"], records[:100], **kw)
    split = dl.inspect(model, hyps, ["corr", "mi"], records[:100], forward_batch=7, **kw)
    key = ["layer", "unit", "hid", "measure"]
    a, b = one.sort(key), split.sort(key)
    assert a["n_records"].to_list() == b["n_records"].to_list()
    # other batch shapes, other GEMM blockings: float32 scores summed over every symbol
    symbols = sum(len(r) for r in records[:100])
    assert_close_f32(a["unit_score"], b["unit_score"], reduction=symbols, equal_nan=True)
