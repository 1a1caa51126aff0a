"""auroc and prf1: sklearn and brute-force references, merge, early stopping, ties, nulls;
iou's tied top values; the token-selective latent that corr ranks below noisier units."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from measure_blocks import fold, make_blocks
from sklearn.metrics import roc_auc_score

import dni_lab as dl
from dni_lab.backend.cluster.shards import fork, forkable, merges_exactly, moved
from dni_lab.backend.errors import MeasureError
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures import get_measure
from dni_lab.backend.measures.auroc import AUROC
from dni_lab.backend.measures.iou import IoU
from dni_lab.backend.measures.prf1 import PRF1

NU, NH = 5, 3


def blocks_of(rng, n_blocks, R, T, discrete=False):
    """Units that rise or fall with some hypotheses; NaN garbage in the padding.

    ``discrete``: integers -2..2, all of them in the first block, so every value is an edge.
    """

    def signals():
        H = (rng.random((R, T, NH)) < [0.05, 0.3, 0.6]).astype(float)
        U = rng.normal(0, 1, (R, T, NU)) + H[..., [0, 1, 2, 0, 1]] * [2.0, 1.0, -1.5, 0.0, 0.3]
        return (np.clip(np.round(U), -2, 2) if discrete else U), H

    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.nan, h_pad=1.0)


def flat(blocks):
    U = np.concatenate([U[m].numpy() for U, _, m in blocks])
    H = np.concatenate([H[m].numpy() for _, H, m in blocks])
    return U.astype(np.float64), H > 0.5


def sklearn_score(blocks):
    U, B = flat(blocks)
    return np.array([[2 * roc_auc_score(B[:, j], U[:, i]) - 1 for j in range(NH)]
                     for i in range(NU)])  # fmt: skip


def brute_f1(u, b):
    """Best F1 over every threshold the data allows, both directions (u > t, u < t)."""
    best = 0.0
    for t in np.unique(u):
        for on in (u >= t, u <= t):
            tp = (on & b).sum()
            best = max(best, 2 * tp / (on.sum() + b.sum()))
    return best


def test_auroc_equals_sklearn_exactly_with_ties():
    # integers: every value is an edge, ties abound and get half credit as sklearn gives
    blocks = blocks_of(np.random.default_rng(0), 3, 40, 12, discrete=True)
    m = AUROC()
    s = fold(m, blocks, NU, NH)
    np.testing.assert_allclose(m.result(s).unit_score, sklearn_score(blocks), rtol=0, atol=1e-12)
    assert (m.binning_bound(s) == 0).all()


def test_auroc_within_its_binning_bound_of_sklearn_on_continuous_data():
    blocks = blocks_of(np.random.default_rng(1), 4, 50, 16)
    m = AUROC()
    s = fold(m, blocks, NU, NH)
    res, bound = m.result(s), m.binning_bound(s)
    gap = np.abs(res.unit_score - sklearn_score(blocks))
    assert (gap <= bound + 1e-12).all() and bound.max() < 0.01  # 128 bins: ~1/128 or less
    assert gap.max() < 2e-3  # the bound is a worst case; the real gap is smaller
    assert res.unit_score[0, 0] > 0.7 and res.unit_score[2, 2] < -0.6  # rises / falls


def test_prf1_equals_brute_force_best_threshold():
    blocks = blocks_of(np.random.default_rng(2), 3, 40, 12, discrete=True)
    m = PRF1()
    s = fold(m, blocks, NU, NH)
    res = m.result(s)
    U, B = flat(blocks)
    ref = np.array([[brute_f1(U[:, i], B[:, j]) for j in range(NH)] for i in range(NU)])
    np.testing.assert_allclose(res.unit_score, ref, rtol=0, atol=1e-12)
    assert (m.binning_bound(s) == 0).all()
    rules = m.operating_point(s)["rule"].to_numpy().reshape(NU, NH)
    assert rules[0, 0] == ">" and rules[2, 2] == "<"  # unit 2 falls on hypothesis 2


def test_prf1_operating_point_reproduces_its_counts_on_continuous_data():
    blocks = blocks_of(np.random.default_rng(3), 3, 40, 12)
    m = PRF1()
    s = fold(m, blocks, NU, NH)
    op = m.operating_point(s)
    U, B = flat(blocks)
    U = U.astype(np.float32)  # the rule is exact for the float32 values the measure reads
    bound = m.binning_bound(s)
    for row in op.iter_rows(named=True):
        i, j = row["unit"], int(row["hid"])
        u, b = U[:, i], B[:, j]
        on = u > row["threshold"] if row["rule"] == ">" else u < row["threshold"]
        tp = (on & b).sum()
        assert row["precision"] == pytest.approx(tp / on.sum(), abs=1e-12)
        assert row["recall"] == pytest.approx(tp / b.sum(), abs=1e-12)
        assert row["f1"] == pytest.approx(2 * tp / (on.sum() + b.sum()), abs=1e-12)
        exact = brute_f1(u, b)
        assert row["f1"] - 1e-12 <= exact <= row["f1"] + bound[i, j] + 1e-12
    assert bound.max() < 0.05  # largest for the rare hypothesis (5% of symbols)


@pytest.mark.parametrize("name", ["auroc", "prf1"])
def test_shard_merge_equals_one_pass(name):
    rng = np.random.default_rng(4)
    blocks = blocks_of(rng, 6, 30, 10)
    for _, H, _ in blocks[2:4]:  # undefined hypothesis values in some blocks
        H[..., 1][torch.as_tensor(rng.random(H.shape[:2]) < 0.2)] = torch.nan
    m = AUROC(buckets=7) if name == "auroc" else PRF1(buckets=7)  # a block starts mid-cycle
    assert forkable(m) and merges_exactly(m)
    one = fold(m, blocks, NU, NH)
    first = fold(m, blocks[:1], NU, NH)
    merged = moved(first, "cpu")
    for blk in blocks[1:]:  # the cluster driver's order: fork of block 0, merged in order
        merged = m.merge(merged, moved(fold(m, [blk], NU, NH, state=fork(m, first)), "cpu"))
    for field in ("edges", "total", "pos", "lo", "hi", "undef", "n_undef"):
        assert torch.equal(getattr(one, field), getattr(merged, field)), field
    assert (one.n_groups, one.n_records) == (merged.n_groups, merged.n_records)
    a, b = m.result(one), m.result(merged)
    assert np.isfinite(a.err).all()
    for field in ("unit_score", "err", "n_undefined"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    with pytest.raises(MeasureError, match="different cell edges"):
        m.merge(one, fold(m, blocks[1:2], NU, NH))


def _token_selective(rng, binary=False):
    """412 symbols (103 records of 4), 99 of them the token; unit 0 fires on the token only.

    Units 1-24 rise with the token under Gaussian noise (separating it partly), 25-127
    are noise. Unit 0's size on the token is heavy-tailed, unless ``binary`` (1.0 there).
    """
    y = np.zeros(412)
    y[rng.choice(412, 99, replace=False)] = 1.0
    U = rng.normal(0, 1, (412, 128))
    U[:, 1:25] += y[:, None] * np.linspace(0.5, 2.5, 24)
    U[:, 0] = y * (1.0 if binary else np.exp(rng.normal(0, 1.5, 412)))
    shape = (103, 4)
    return (torch.as_tensor(U.reshape(*shape, 128), dtype=torch.float32),
            torch.as_tensor(y.reshape(*shape, 1), dtype=torch.float32),
            torch.ones(shape, dtype=torch.bool))  # fmt: skip


def _rank_of_unit_0(measure, block):
    res = measure.result(measure.update(measure.start(128, 1), *block))
    score = np.abs(res.unit_score[:, 0])
    return int((score > score[0]).sum()) + 1, res.unit_score[:, 0]


def test_token_selective_unit_ranks_first_by_auroc_and_prf1_not_by_corr():
    block = _token_selective(np.random.default_rng(5))
    rank, score = _rank_of_unit_0(AUROC(), block)
    assert rank == 1 and score[0] == 1.0 and np.abs(score[1:]).max() < 1.0
    rank, score = _rank_of_unit_0(PRF1(), block)
    assert rank == 1 and score[0] == 1.0 and np.abs(score[1:]).max() < 1.0
    rank, score = _rank_of_unit_0(get_measure("corr"), block)
    assert rank > 10 and score[0] < 0.5  # its size on the token varies: r is far from 1


def test_tied_selective_unit_scores_and_iou_no_longer_calls_it_constant():
    # the brief's latent: exactly 1.0 on the token, 0 elsewhere (ties in both classes)
    block = _token_selective(np.random.default_rng(6), binary=True)
    for m in (AUROC(), PRF1(), IoU()):
        res = m.result(m.update(m.start(128, 1), *block))
        assert res.reason[0, 0] is None, (m.name, res.reason[0, 0])
        assert res.unit_score[0, 0] == 1.0, m.name  # IoU: on at its maximum, the token
    op = PRF1().operating_point(PRF1().update(PRF1().start(128, 1), *block))
    assert op["rule"][0] == ">" and 0.0 <= op["threshold"][0] < 1.0


def test_constant_unit_is_null_with_a_reason_and_tied_unit_is_a_number():
    rng = np.random.default_rng(7)
    blocks = blocks_of(rng, 2, 30, 10)
    for U, _, _ in blocks:
        U[..., 3] = 2.5  # constant
        U[..., 4] = torch.as_tensor(rng.random(U.shape[:2]) < 0.5).float()  # ties everywhere
    info = [HypothesisInfo("a", "binary"), HypothesisInfo("b", "binary"), HypothesisInfo("c")]
    for m in (AUROC(), PRF1()):
        res = m.result(fold(m, blocks, NU, NH, info))
        assert all(r == "unit is constant over the symbols read" for r in res.reason[3, :2])
        assert np.isnan(res.unit_score[3]).all()
        assert np.isfinite(res.unit_score[4, :2]).all() and (res.reason[4, :2] == None).all()  # noqa: E711
        assert all("cannot score continuous" in r for r in res.reason[:, 2])
    res = IoU().result(fold(IoU(), blocks, NU, NH, info))
    assert "constant over the first block" in res.reason[3, 0]
    assert np.isfinite(res.unit_score[4, :2]).all()


def test_never_true_and_nothing_read_reasons():
    m = AUROC()
    assert m.result(m.start(2, 1)).reason[0, 0] == "no symbols read"
    blocks = blocks_of(np.random.default_rng(8), 1, 20, 8)
    blocks[0][1][..., 0] = 0.0
    res = PRF1().result(fold(PRF1(), blocks, NU, NH))
    assert all("never true" in r for r in res.reason[:, 0])


def _stream(rng, n_blocks):
    """Long stream: records of 8 symbols whose units drift within a record (AR noise)."""

    def signals():
        H = (rng.random((64, 8, 2)) < [0.1, 0.4]).astype(float)
        noise = np.cumsum(rng.normal(0, 0.5, (64, 8, 4)), axis=1)
        U = noise + H[..., [0, 1, 0, 1]] * [1.5, 0.8, 0.3, -1.0]
        return U, H

    return make_blocks(rng, n_blocks, 64, 8, signals, u_pad=np.nan, h_pad=0.0)


def _stop_early(measure, blocks, eps):
    """The engine's check after each block: a pair freezes once its err is within eps;
    reading stops when every pair has. Returns the frozen scores and blocks read."""
    state = measure.start(4, 2)
    frozen = np.full((4, 2), np.nan)
    for k, blk in enumerate(blocks):
        state = measure.update(state, *blk)
        res = measure.result(state)
        new = (res.err <= eps) & np.isnan(frozen)
        frozen[new] = res.unit_score[new]
        if np.isfinite(frozen).all():
            return frozen, k + 1
    return frozen, len(blocks)


@pytest.mark.parametrize("measure", [AUROC(), PRF1()], ids=["auroc", "prf1"])
def test_early_stopping_stops_before_the_end_within_eps(measure):
    # err is a 95% interval per pair, each pair frozen the first time it is within eps:
    # over 6 streams (48 pairs) nearly all land within eps of the full read, none far out
    eps, gaps = 0.05, []
    for seed in range(6):
        blocks = _stream(np.random.default_rng(seed), 150)  # 9,600 records
        frozen, read = _stop_early(measure, blocks, eps)
        assert read < len(blocks) // 2
        full = measure.result(fold(measure, blocks, 4, 2)).unit_score
        gaps.append(np.abs(frozen - full))
    gaps = np.concatenate(gaps)
    assert (gaps <= eps).mean() >= 0.9 and gaps.max() <= 2 * eps


def test_report_names_and_bad_parameters():
    assert [PRF1(report=r).name for r in ("f1", "precision", "recall")] == [
        "prf1", "prf1_precision", "prf1_recall"]  # fmt: skip
    blocks = blocks_of(np.random.default_rng(10), 1, 20, 8)
    s = fold(PRF1(), blocks, NU, NH)
    op = PRF1().operating_point(s)
    for report in ("precision", "recall"):
        got = PRF1(report=report).result(copy.deepcopy(s)).unit_score.reshape(-1)
        np.testing.assert_allclose(got, op[report].to_numpy())
    with pytest.raises(MeasureError, match="report must be one of"):
        PRF1(report="auc").result(s)
    with pytest.raises(MeasureError, match="at least 2"):
        AUROC(bins=1).start(2, 1)


def test_inspect_runs_auroc_and_prf1_by_name():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")
    data = random_records(300, seed=3)
    frame = dl.inspect(model, [paren, position], ["auroc", "prf1", "corr"], data,
                       eps=0.05, block_size=40, cache=False)  # fmt: skip
    for name in ("auroc", "prf1"):
        rows = frame.filter((frame["measure"] == name) & (frame["hid"] == "paren"))
        assert len(rows) > 0 and rows["unit_score"].is_not_null().all()
        assert rows["unit_score"].abs().max() <= 1.0
        pos = frame.filter((frame["measure"] == name) & (frame["hid"] == "position"))
        assert pos["reason"].str.contains("cannot score continuous").all()
