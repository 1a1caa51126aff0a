"""lda: the closed-form probe vs scikit-learn's LDA on the same rows and folds, merge,
order, undefined values, nulls with reasons, early stopping end to end."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from measure_blocks import fold, padded_block
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.metrics import f1_score
from torch import nn

import dni_lab as dl
from dni_lab.backend.measures import get_measure
from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.lda import LDA
from dni_lab.backend.measures.logreg import record_codes

NU, NH, T = 8, 4, 12
INFO = [HypothesisInfo(f"h{j}", "binary") for j in range(NH)]
W = np.random.default_rng(99).normal(0, 1, (NU, NH))


def planted(seed: int, n_blocks: int = 4, R: int = 60, offset: float = 0.0, min_len: int = 0):
    """Blocks whose binary hypotheses are thresholds of linear signals of (correlated)
    units; NaN and 1e9 garbage in the padding. Records of ``min_len`` to ``T`` symbols."""
    rng = np.random.default_rng(seed)

    def block():
        mask = np.arange(T)[None, :] < rng.integers(min_len, T + 1, R)[:, None]
        U = rng.normal(0, 1, (R, T, NU))
        U[..., 1] += 0.5 * U[..., 0]
        H = U @ W + rng.normal(0, 1.5, (R, T, NH)) > np.array([0.0, 1.0, 2.0, -1.0])
        return padded_block(U + offset, H.astype(float), mask, u_pad=np.nan, h_pad=1e9)

    return [block() for _ in range(n_blocks)]


def rows(blocks):
    """Real symbols as float64 arrays, with each row's fold (the probe's: by record)."""
    X = np.concatenate([U[m].numpy() for U, _, m in blocks]).astype(np.float64)
    Y = np.concatenate([H[m].numpy() for _, H, m in blocks]).astype(np.float64)
    code = [record_codes(H, m)[:, None].expand(m.shape)[m] for _, H, m in blocks]
    return X, Y, torch.cat(code).numpy()


def sklearn_logits(X, y, fold, folds=5):
    """Each row's LDA log-odds under scikit-learn's model fitted without its fold."""
    z = np.zeros(len(X))
    for f in range(folds):
        tr = fold != f
        lda = LinearDiscriminantAnalysis(solver="lsqr").fit(X[tr], y[tr])
        z[~tr] = lda.decision_function(X[~tr])
    return z


def test_held_out_logits_and_f1_match_sklearn_lda_on_the_same_folds():
    blocks = planted(0)
    X, Y, code = rows(blocks)
    m = LDA(alpha=1e-12, threshold="gaussian")
    state = fold(m, blocks, NU, NH, INFO)
    res = m.result(state)
    from dni_lab.backend.measures import _lda_fit as lf
    from dni_lab.backend.measures.lda import _complement

    fit = lf.fit(_complement(state.folds, True), m.alpha, m.rel_tol)
    z = lf.predict(state.X, state.fold, fit, 5, state.X.mean(0)).numpy()
    for j in range(NH):
        ref = sklearn_logits(X, Y[:, j] > 0.5, code % 5)
        np.testing.assert_allclose(z[:, j], ref, atol=1e-3 * max(1.0, np.abs(ref).max()))
        f1 = f1_score(Y[:, j] > 0.5, ref > 0)
        assert abs(res.group_score[0, j] - f1) <= 2e-3, (j, res.group_score[0, j], f1)
    assert res.group_score[0, 0] > 0.7
    # the loading: each unit's correlation with the full-data discriminant
    lda = LinearDiscriminantAnalysis(solver="lsqr").fit(X, Y[:, 0] > 0.5)
    s = lda.decision_function(X)
    ref = [np.corrcoef(X[:, i], s)[0, 1] for i in range(NU)]
    np.testing.assert_allclose(res.unit_score[:, 0], ref, atol=1e-5)
    assert np.isfinite(res.err).all() and (res.err > 0).all()


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_merge_equals_one_pass(offset):
    blocks = planted(1, n_blocks=5, offset=offset)
    m = LDA()
    whole = fold(m, blocks, NU, NH, INFO)
    merged = m.merge(fold(m, blocks[:2], NU, NH, INFO), fold(m, blocks[2:], NU, NH, INFO))
    # float32 products per (fold, group) cell: a shard's groups differ, so its sums do
    # by float32 rounding of the matrix's scale (the float64 unions themselves are exact)
    for name in ("n", "mean_u", "mean_y", "cuu", "cuy"):
        want = getattr(whole.folds, name)
        tol = 1e-9 * (1 + offset**2) + 1e-7 * float(want.abs().max())
        np.testing.assert_allclose(getattr(merged.folds, name), want, rtol=0, atol=tol)
    a, b = m.result(whole), m.result(merged)
    np.testing.assert_array_equal(a.group_score, b.group_score)
    np.testing.assert_allclose(a.unit_score, b.unit_score, atol=1e-7)
    np.testing.assert_allclose(a.err, b.err, atol=1e-7)


def test_the_answer_does_not_depend_on_the_record_order():
    # records of 6+ symbols: no two share their hypothesis values, so none shares a
    # jackknife group by content (records that do are grouped in reading order)
    blocks = planted(2, n_blocks=4, min_len=6)
    U = torch.cat([b[0] for b in blocks])
    H = torch.cat([b[1] for b in blocks])
    M = torch.cat([b[2] for b in blocks])
    perm = torch.as_tensor(np.random.default_rng(5).permutation(len(U)))
    shuffled = [(U[perm][i : i + 48], H[perm][i : i + 48], M[perm][i : i + 48])
                for i in range(0, len(U), 48)]  # fmt: skip
    m = LDA()
    a = m.result(fold(m, blocks, NU, NH, INFO))
    b = m.result(fold(m, shuffled, NU, NH, INFO))
    np.testing.assert_allclose(a.group_score, b.group_score, atol=1e-12)
    np.testing.assert_allclose(a.unit_score, b.unit_score, atol=1e-5)
    np.testing.assert_allclose(a.err, b.err, atol=1e-4)


def test_undefined_values_are_left_out_of_their_hypothesis_only():
    blocks = planted(3)
    cut = []
    for U, H, m in blocks:
        H = H.clone()
        H[..., 2][U[..., 3] > 0.8] = float("nan")  # undefined where a unit is high
        cut.append((U, H, m))
    m = LDA(alpha=1e-12, threshold="gaussian")
    res = m.result(fold(m, cut, NU, NH, INFO))
    X, Y, code = rows(cut)
    d = ~np.isnan(Y[:, 2])
    ref = sklearn_logits(X[d], Y[d, 2] > 0.5, code[d] % 5)
    assert abs(res.group_score[0, 2] - f1_score(Y[d, 2] > 0.5, ref > 0)) <= 2e-3
    assert res.n_undefined[0, 2] == (~d).sum() and res.n_undefined[0, 0] == 0
    full = m.result(fold(m, blocks, NU, NH, INFO))  # the other hypotheses: as without NaN
    f1_0 = f1_score(Y[:, 0] > 0.5, sklearn_logits(X, Y[:, 0] > 0.5, code % 5) > 0)
    assert abs(res.group_score[0, 0] - f1_0) <= 2e-3
    assert np.isfinite(full.group_score).all()


def test_constant_hypothesis_kinds_and_empty_state_are_null_with_reasons():
    blocks = planted(4)
    for _, H, _ in blocks:
        H[..., 1] = 0.0
    info = [*INFO[:3], HypothesisInfo("x", "continuous")]
    m = get_measure("lda")
    assert isinstance(m, LDA)
    res = m.result(fold(m, blocks, NU, NH, info))
    assert np.isnan(res.group_score[:, 1]).all()
    assert res.reason[0, 1] == "hypothesis is constant over the symbols read"
    assert "lda cannot score continuous" in res.reason[0, 3]
    assert np.isfinite(res.group_score[:, 0]).all()
    empty = m.result(m.start(NU, NH, info=info))
    assert np.isnan(empty.unit_score).all() and empty.reason[0, 0] == "no symbols read"


def test_categorical_one_vs_rest_and_constant_unit():
    blocks = planted(5)
    cat = [(U, (H[..., :1] + 2 * H[..., 1:2]), m) for U, H, m in blocks]  # 4 classes
    for U, _, _ in cat:
        U[..., 5] = 3.0  # a constant unit (padding too: it must not matter)
    info = [HypothesisInfo("cls", "categorical", 4)]
    m = LDA()
    res = m.result(fold(m, cat, NU, 1, info))
    assert 0.3 < res.group_score[0, 0] <= 1.0
    assert res.reason[5, 0] == "unit is constant over the symbols read"
    assert np.isfinite(np.delete(res.unit_score, 5, axis=0)).all()


class Replay(nn.Module):
    def forward(self, x):
        return x


def test_inspect_end_to_end_stops_early_within_eps():
    rng = np.random.default_rng(6)
    n_rec, L = 3000, 20
    acts = rng.normal(0, 1, (n_rec, L, NU)).astype(np.float32)
    hyp = (acts @ W[:, :2] + rng.normal(0, 0.5, (n_rec, L, 2)) > 0).astype(float)
    model = dl.Model(Replay(), encode=lambda idx: torch.as_tensor(acts[list(idx)]),
                     symbols=lambda i: L, name="replay", layouts={"": "n s u"})  # fmt: skip
    fam = dl.hypothesis_family(signals=["a", "b"], name="fam", kind="binary")(lambda i: hyp[i])
    kw = {"units": [("", "*")], "block_size": 100, "cache": False}
    early = dl.inspect([model], [fam], [LDA()], list(range(n_rec)), eps=0.05, **kw)
    full = dl.inspect([model], [fam], [LDA()], list(range(n_rec)), eps=None, **kw)
    assert early["converged"].all()
    assert early["n_records"].max() < n_rec  # stopped early
    keys = ["uid", "hid"]
    e, f = early.sort(keys), full.sort(keys)
    assert (e["err"] <= 0.05).all()
    assert (abs(e["group_score"] - f["group_score"]) <= 0.05).all()
    assert (abs(e["unit_score"] - f["unit_score"]) <= 0.05).all()
    assert f.filter(pl.col("n_records") == n_rec).height == f.height
    assert (f["group_score"] > 0.8).all()


@pytest.mark.parametrize("with_defined", [False, True])
@pytest.mark.parametrize("rule", ["accuracy", "f1"])
def test_thresholds_match_a_per_fold_histogram_by_hand(rule, with_defined):
    """Each fold's threshold maximises the rule over the other folds' held-out logits,
    binned; the int32 in-place histogram equals numpy's, row by row."""
    from dni_lab.backend.measures._lda_fit import thresholds

    g = torch.Generator().manual_seed(3)
    n, O, k, bins, span = 3000, 4, 5, 64, 8.0
    z = torch.randn(n, O, generator=g) * 4
    y = (torch.rand(n, O, generator=g) < torch.sigmoid(z)) & (torch.rand(n, O, generator=g) < 0.5)
    folds = torch.randint(0, k, (n,), generator=g)
    defined = torch.rand(n, O, generator=g) < 0.9 if with_defined else None
    pred = thresholds(z, y, folds, defined, k, rule, bins, span).numpy()
    b = np.clip(((np.clip(z.numpy(), -span, span) + span) * (bins / (2 * span))).astype(int),
                0, bins - 1)  # fmt: skip
    w = np.ones((n, O)) if defined is None else defined.numpy().astype(float)
    hist = np.zeros((k, O, 2, bins))
    for o in range(O):
        np.add.at(hist, (folds.numpy(), o, y.numpy()[:, o].astype(int), b[:, o]), w[:, o])
    other = hist.sum(0, keepdims=True) - hist
    above = np.concatenate([np.cumsum(other[..., ::-1], -1)[..., ::-1],
                            np.zeros((*other.shape[:-1], 1))], -1)  # fmt: skip
    tp, fp = above[:, :, 1], above[:, :, 0]
    pos, neg = other[:, :, 1].sum(-1, keepdims=True), other[:, :, 0].sum(-1, keepdims=True)
    score = tp + (neg - fp) if rule == "accuracy" else 2 * tp / np.maximum(tp + fp + pos, 1e-300)
    near = -np.abs(np.arange(bins + 1) - bins // 2) * 1e-12
    score = score / np.maximum(np.abs(score).max(-1, keepdims=True), 1e-300) + near
    edge = score.argmax(-1)
    assert pred.dtype == bool and pred.shape == (n, O)
    assert np.array_equal(pred, b >= edge[folds.numpy()])
