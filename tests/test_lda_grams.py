"""lda's fused statistics: the folds' and the groups' moments from one product per
(fold, group) cell, the folds' models from prefix and suffix unions, the jackknife's
loadings alone; and the answer they give equals the one before they were fused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from measure_blocks import fold, padded_block

from dni_lab.backend.measures import _lda_fit as lf
from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.lda import LDA

NU, NH, T = 8, 3, 12
INFO = [HypothesisInfo(f"h{j}", "binary") for j in range(NH)]

# The previous implementation's answer on blocks(seed, offset) (one Gram pass per
# partition, centred per part; sequential unions; full fits for the jackknife)
REF0_F1 = [0.729984301413, 0.683522231909, 0.708818635607]
REF0_UNIT = [
    [0.9965383491, 0.0453056549, 0.0522058114],
    [-0.0012685042, 0.9973580946, 0.0101890367],
    [-0.0014211229, 0.0523736628, 0.9947468212],
    [0.0336184799, -0.000389902, 0.0531174669],
    [-0.0091605834, -0.0512026017, 0.016541671],
    [-0.0594204564, 0.0175802511, -0.016522803],
    [0.0193997415, -0.0377469296, -0.0167117992],
    [0.0291633136, 0.0663250106, 0.0487504396],
]
REF0_ERR = [
    [0.0249843857, 0.051774651, 0.0732279126],
    [0.0824212344, 0.0384698886, 0.0637029918],
    [0.1049625202, 0.0611730014, 0.0275859292],
    [0.067779849, 0.0732544117, 0.0557500692],
    [0.0877944964, 0.0855408322, 0.0881178656],
    [0.0944568305, 0.0762491948, 0.0566813885],
    [0.0830622633, 0.0869741029, 0.1171236456],
    [0.0724444975, 0.0880576585, 0.0692161593],
]
REF1_F1 = [0.699203187251, 0.682839173405, 0.685288640596]
REF1_UNIT = [
    [0.9952513235, 0.0234792811, -0.0014565105],
    [0.0072136206, 0.9978747752, -0.0121163882],
    [0.0213056561, 0.0140032704, 0.998563934],
    [-0.0995449994, -0.0286838534, -0.0223109611],
    [-0.0555028768, -0.0803473794, -0.0707665874],
    [0.0125230112, 0.0067723822, -0.0384502397],
    [-0.0221450739, 0.0547655436, -0.0429059987],
    [-0.0444083027, -0.0287467768, 0.0281696101],
]
REF1_ERR = [
    [0.0302551346, 0.0984143212, 0.0815598985],
    [0.086966682, 0.0332058784, 0.0773989124],
    [0.0916878325, 0.0657642324, 0.0353687817],
    [0.0716649966, 0.1081972936, 0.080726374],
    [0.0928159799, 0.0834717373, 0.0807683566],
    [0.0700767598, 0.0779174509, 0.0686652848],
    [0.1084979266, 0.0664666027, 0.0701887935],
    [0.0818434078, 0.1009553765, 0.0894900382],
]


def blocks(seed: int, n_blocks: int = 4, R: int = 60, offset: float = 0.0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_blocks):
        mask = np.arange(T)[None, :] < rng.integers(1, T + 1, R)[:, None]
        U = rng.normal(0, 1, (R, T, NU))
        H = (U[..., :NH] @ np.eye(NH) + 0.8 * rng.normal(0, 1, (R, T, NH)) > 0.4).astype(float)
        out.append(padded_block(U + offset, H, mask, u_pad=np.nan, h_pad=1e9))
    return out


@pytest.mark.parametrize(("seed", "offset"), [(0, 0.0), (1, 50.0)])
def test_the_answer_equals_the_previous_implementations(seed, offset):
    ref = {0: (REF0_F1, REF0_UNIT, REF0_ERR), 1: (REF1_F1, REF1_UNIT, REF1_ERR)}[seed]
    m = LDA()
    res = m.result(fold(m, blocks(seed, offset=offset), NU, NH, INFO))
    np.testing.assert_allclose(res.group_score[0], ref[0], atol=1e-11)  # same rows predicted
    np.testing.assert_allclose(res.unit_score, ref[1], atol=1e-6)  # float32 products
    np.testing.assert_allclose(res.err, ref[2], atol=1e-6)


def _truth(X: torch.Tensor, Y: torch.Tensor, part: torch.Tensor, P: int) -> lf.Gram:
    """float64 moments of each part, directly from the rows."""
    X, Y = X.double(), Y.double()
    out = lf.Gram.zeros((P,), X.shape[1], Y.shape[1], "cpu")
    for p in range(P):
        r = part == p
        if r.any():
            Xp, Yp = X[r], Y[r]
            mu, my = Xp.mean(0), Yp.mean(0)
            out.n[p], out.mean_u[p], out.mean_y[p] = float(r.sum()), mu, my
            out.cuu[p], out.cuy[p] = (Xp - mu).T @ (Xp - mu), (Xp - mu).T @ (Yp - my)
    return out


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_one_pass_gives_both_partitions_moments(offset):
    g = torch.Generator().manual_seed(0)
    n = 900
    X = torch.randn(n, 7, generator=g) * 3 + offset
    Y = torch.rand(n, 4, generator=g) < 0.3
    part = torch.randint(0, 5, (n,), generator=g)
    part[part == 3] = 4  # an empty part
    other = torch.randint(0, 11, (n,), generator=g)
    a, b = lf.row_grams2(X, Y, part, 5, other, 11)
    for got, want in ((a, _truth(X, Y, part, 5)), (b, _truth(X, Y, other, 11)),
                      (lf.row_grams(X, Y, part, 5), _truth(X, Y, part, 5))):  # fmt: skip
        np.testing.assert_array_equal(got.n, want.n)
        scale = float(want.cuu.abs().max())
        for name in ("mean_u", "mean_y"):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name),
                                       atol=1e-6 * (1 + offset))  # fmt: skip
        np.testing.assert_allclose(got.cuu, want.cuu, atol=2e-6 * scale)
        np.testing.assert_allclose(got.cuy, want.cuy, atol=2e-6 * scale)
    assert float(a.cuu[3].abs().max()) == 0.0 and float(a.mean_u[3].abs().max()) == 0.0


def test_each_folds_model_is_the_union_of_the_other_folds():
    X = torch.randn(500, 5) + 2
    Y = torch.rand(500, 2) < 0.4
    for P in (2, 3, 5):
        g = lf.row_grams(X, Y, torch.arange(500) % P, P)
        loo = g.leave_one_out()
        assert int(loo.n.shape[0]) == P + 1
        for p in range(P + 1):
            rest = [i for i in range(P) if i != p]
            want = g.part(rest[0])
            for i in rest[1:]:
                want = want.combine(g.part(i))
            for name in ("n", "mean_u", "mean_y", "cuu", "cuy"):
                np.testing.assert_allclose(getattr(loo.part(p), name), getattr(want, name),
                                           rtol=1e-12, atol=1e-10)  # fmt: skip


def test_loadings_alone_equal_the_full_fits():
    X = torch.randn(400, 6)
    X[:, 5] = 1.0  # a constant unit
    Y = X[:, :2] + torch.randn(400, 2) > 0.5
    g = lf.row_grams(X, Y, torch.arange(400) % 7, 7)
    full, alone = lf.fit(g, 1e-4, 1e-10), lf.fit(g, 1e-4, 1e-10, full=False)
    assert alone.w is None and alone.off is None
    np.testing.assert_array_equal(alone.loading.isnan(), full.loading.isnan())
    np.testing.assert_allclose(alone.loading.nan_to_num(), full.loading.nan_to_num(), atol=0)
    assert full.loading[:, 5].isnan().all()
