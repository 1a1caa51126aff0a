"""ridge: coefficients and R² vs scikit-learn, merge, padding, nulls with reasons."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from measure_blocks import fold, make_blocks
from sklearn.linear_model import LinearRegression
from sklearn.linear_model import Ridge as SkRidge
from sklearn.metrics import r2_score

from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures.ridge import Ridge

NU = 6
NH = 4


def padded_blocks(rng, n_blocks, R, T, offset=0.0):
    """Blocks whose hypotheses depend linearly on the units; NaN garbage in the padding."""
    W = np.random.default_rng(99).normal(0, 1, (NU, NH))

    def signals():
        U = rng.normal(0, 1, (R, T, NU)) + offset
        H = (U - offset) @ W + rng.normal(0, 2, (R, T, NH))
        H[..., -1] = H[..., -1] > 0  # a binary hypothesis
        return U, H

    # padding garbage that must never reach a statistic
    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.nan, h_pad=1e9)


def real(blocks):
    Uf = np.concatenate([U[m].numpy() for U, _, m in blocks]).astype(np.float64)
    Hf = np.concatenate([H[m].numpy() for _, H, m in blocks]).astype(np.float64)
    return Uf, Hf


def run(measure, blocks, info=None, nu=NU, nh=NH):
    return fold(measure, blocks, nu, nh, info)


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_matches_sklearn_ridge(offset):
    # An offset of 1e3 checks that centering keeps float32 GEMMs accurate.
    rng = np.random.default_rng(0)
    blocks = padded_blocks(rng, 4, 60, 15, offset)
    Uf, Hf = real(blocks)
    res = Ridge(alpha=3.0).result(run(Ridge(alpha=3.0), blocks))
    sk = SkRidge(alpha=3.0).fit(Uf, Hf)
    np.testing.assert_allclose(res.unit_score, sk.coef_.T, rtol=1e-4, atol=1e-5)
    r2 = r2_score(Hf, sk.predict(Uf), multioutput="raw_values")
    np.testing.assert_allclose(res.group_score, np.broadcast_to(r2, (NU, NH)), atol=1e-5)
    assert np.isnan(res.err).all()
    assert (res.reason == None).all()  # noqa: E711


def test_alpha_zero_collinear_units_give_least_squares_r2():
    rng = np.random.default_rng(1)
    blocks = padded_blocks(rng, 2, 40, 12)
    for U, _, _ in blocks:
        U[..., 1] = U[..., 0]  # perfectly collinear: Cuu is singular
    Uf, Hf = real(blocks)
    res = Ridge(alpha=0.0).result(run(Ridge(alpha=0.0), blocks))
    lr = LinearRegression().fit(Uf, Hf)
    r2 = r2_score(Hf, lr.predict(Uf), multioutput="raw_values")
    np.testing.assert_allclose(res.group_score[0], r2, atol=1e-5)
    np.testing.assert_allclose(res.unit_score, lr.coef_.T, atol=1e-4)


def test_merge_equals_union_and_padding_invariance():
    rng = np.random.default_rng(2)
    blocks = padded_blocks(rng, 5, 30, 10)
    m = Ridge(alpha=0.5)
    merged = m.merge(run(m, blocks[:2]), run(m, blocks[2:]))
    whole = run(m, blocks)
    for name in ("mean_u", "mean_h", "cuu", "cuh", "shh"):
        np.testing.assert_allclose(
            getattr(merged, name), getattr(whole, name), rtol=1e-9, atol=1e-9
        )
    assert merged.n == whole.n

    # The same records padded to a longer T give the same result.
    def pad3(x, fill):
        return torch.cat([x, torch.full_like(x[:, :3], fill)], 1)

    longer = [(pad3(U, 7.0), pad3(H, -2.0), pad3(mk, False)) for U, H, mk in blocks]
    np.testing.assert_allclose(
        m.result(run(m, longer)).unit_score, m.result(whole).unit_score, rtol=1e-6
    )


def test_nulls_have_reasons():
    rng = np.random.default_rng(3)
    blocks = padded_blocks(rng, 2, 30, 10)
    for U, H, _ in blocks:
        U[..., 2] = 5.0  # constant unit
        H[..., 0] = 1.5  # constant hypothesis
    info = [
        HypothesisInfo("c"),
        HypothesisInfo("x"),
        HypothesisInfo("cat", "categorical", 3),
        HypothesisInfo("b", "binary"),
    ]
    res = Ridge().result(run(Ridge(), blocks, info=info))
    assert np.isnan(res.unit_score[:, 0]).all() and np.isnan(res.group_score[:, 0]).all()
    assert all("hypothesis is constant" in r for r in res.reason[:, 0])
    assert np.isnan(res.group_score[:, 2]).all()
    assert all("cannot score categorical" in r for r in res.reason[:, 2])
    # A constant unit has no coefficient, but the group's R² stays defined.
    assert np.isnan(res.unit_score[2, 1]) and "unit is constant" in res.reason[2, 1]
    assert np.isfinite(res.group_score[2, 1]) and np.isfinite(res.unit_score[[0, 1, 3], 1]).all()
    empty = Ridge().result(Ridge().start(NU, NH))
    assert np.isnan(empty.unit_score).all() and (empty.reason == "fewer than 2 symbols read").all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    blocks = padded_blocks(np.random.default_rng(4), 2, 30, 10)
    cpu = Ridge().result(run(Ridge(), blocks))
    s = Ridge().start(NU, NH, device="cuda")
    for U, H, mk in blocks:
        s = Ridge().update(s, U.cuda(), H.cuda(), mk.cuda())
    np.testing.assert_allclose(Ridge().result(s).unit_score, cpu.unit_score, rtol=1e-4, atol=1e-6)
