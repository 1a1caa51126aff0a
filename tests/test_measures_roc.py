"""roc_auc and recall_at_fpr: scikit-learn's values on a full read (ties, padding garbage,
undefined cells), exact shard merges, record-bootstrap errors that are the probe report's
draws, and both asked for by dl.inspect and by a query."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records
from measure_blocks import fold, make_blocks
from scipy.special import ndtri
from sklearn.metrics import roc_auc_score, roc_curve

import dni_lab as dl
from dni_lab.backend.cluster.shards import merges_exactly
from dni_lab.backend.errors import MeasureError
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures import get_measure
from dni_lab.backend.measures.roc import ROCAUC, RecallAtFPR
from dni_lab.probe import metrics

NU, NH = 4, 3


def blocks_of(rng, n_blocks, R=30, T=10, ties=False):
    """Units that rise or fall with some hypotheses; NaN garbage in the padding."""

    def signals():
        H = (rng.random((R, T, NH)) < [0.05, 0.3, 0.6]).astype(float)
        U = rng.normal(0, 1, (R, T, NU)) + H[..., [0, 1, 2, 0]] * [2.0, 1.0, -1.5, 0.3]
        return (np.round(U, 1) if ties else U), H

    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.nan, h_pad=1.0)


def flat(blocks):
    U = np.concatenate([U[m].numpy() for U, _, m in blocks]).astype(np.float64)
    H = np.concatenate([H[m].numpy() for _, H, m in blocks]).astype(np.float64)
    return U, H


@pytest.mark.parametrize("ties", [False, True])
def test_roc_auc_is_scikit_learns_on_a_full_read(ties):
    blocks = blocks_of(np.random.default_rng(1), 5, ties=ties)
    blocks[2][1][..., 1][torch.as_tensor(np.random.default_rng(2).random((30, 10)) < 0.3)] = (
        torch.nan  # undefined cells: in neither class
    )
    res = ROCAUC(n_boot=0).result(fold(ROCAUC(n_boot=0), blocks, NU, NH))
    U, H = flat(blocks)
    for i in range(NU):
        for j in range(NH):
            ok = ~np.isnan(H[:, j])
            want = roc_auc_score(H[ok, j] > 0.5, U[ok, i])
            assert res.unit_score[i, j] == pytest.approx(want, abs=1e-9)
    assert res.n_undefined[0, 1] == np.isnan(H[:, 1]).sum() > 0
    assert np.isnan(res.err).all()  # n_boot=0: no error asked for
    assert res.unit_score[0, 0] > 0.8 and res.unit_score[2, 2] < 0.2  # rises, falls


@pytest.mark.parametrize("fpr", [0.001, 0.01, 0.2])
def test_recall_at_fpr_is_read_off_scikit_learns_roc_curve(fpr):
    blocks = blocks_of(np.random.default_rng(3), 6, ties=True)
    m = RecallAtFPR(fpr, n_boot=0)
    res = m.result(fold(m, blocks, NU, NH))
    U, H = flat(blocks)
    for i in range(NU):
        for j in range(NH):
            f, t, _ = roc_curve(H[:, j] > 0.5, U[:, i], drop_intermediate=False)
            assert res.unit_score[i, j] == pytest.approx(t[f <= fpr].max(), abs=1e-12)
    assert m.null_score == fpr


def test_shard_merge_equals_one_pass_error_included():
    blocks = blocks_of(np.random.default_rng(4), 6)
    for m in (ROCAUC(n_boot=50), RecallAtFPR(0.05, n_boot=50)):
        assert merges_exactly(m)
        one = fold(m, blocks, NU, NH)
        merged = fold(m, blocks[:1], NU, NH)
        for blk in blocks[1:]:  # fresh per-block states merged in order, as the cluster does
            merged = m.merge(merged, fold(m, [blk], NU, NH))
        a, b = m.result(one), m.result(merged)
        assert np.isfinite(a.err).all()
        for field in ("unit_score", "err"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_err_is_the_probe_reports_record_bootstrap():
    """One unit: err is z times the SD of metrics.bootstrap's replicates (same draws)."""
    blocks = blocks_of(np.random.default_rng(5), 3)
    m = ROCAUC(n_boot=100, seed=7)
    res = m.result(fold(m, blocks, NU, NH))
    U, H = flat(blocks)
    record = np.concatenate([np.repeat(np.arange(30) + 30 * k, m_.sum(1).numpy())
                             for k, (_, _, m_) in enumerate(blocks)])  # fmt: skip
    value, lo, hi, reps = metrics.bootstrap(
        lambda w: metrics.auroc(U[:, 1], H[:, 1], w), record, 100, seed=7
    )
    assert res.unit_score[1, 1] == pytest.approx(value, abs=1e-12)
    # the replicates are summed in float32: equal to its rounding
    assert res.err[1, 1] == pytest.approx(np.nanstd(reps) * ndtri(0.975), rel=1e-6)
    assert res.unit_score[1, 1] - res.err[1, 1] < hi and res.unit_score[1, 1] + res.err[1, 1] > lo


def test_records_that_share_their_label_widen_the_error():
    """Symbols of a record share label and score: the record bootstrap sees few records."""
    rng = np.random.default_rng(6)
    R, T = 40, 25
    y = np.repeat(rng.random((R, 1)) < 0.5, T, 1).astype(float)
    shared = np.repeat(rng.normal(0, 1, (R, 1)), T, 1) + 0.7 * y
    indep = rng.normal(0, 1, (R, T)) + 0.7 * rng.permuted(y.ravel()).reshape(R, T)
    mask = torch.ones(R, T, dtype=torch.bool)
    m = ROCAUC(n_boot=200)
    err = []
    for u in (shared, indep):
        state = m.update(m.start(1, 1), torch.tensor(u[..., None]).float(),
                         torch.tensor(y[..., None]).float(), mask)  # fmt: skip
        err.append(m.result(state).err[0, 0])
    assert err[0] > 3 * err[1]


def test_reasons_and_bad_parameters():
    blocks = blocks_of(np.random.default_rng(7), 2)
    for U, _, _ in blocks:
        U[..., 3] = 2.5
    info = [HypothesisInfo("a", "binary"), HypothesisInfo("b", "binary"), HypothesisInfo("c")]
    res = ROCAUC(n_boot=10).result(fold(ROCAUC(n_boot=10), blocks, NU, NH, info))
    assert res.reason[3, 0] == "unit is constant over the symbols read"
    assert "cannot score continuous" in res.reason[0, 2] and np.isnan(res.unit_score[:, 2]).all()
    with pytest.raises(MeasureError, match="fpr=1.5"):
        RecallAtFPR(1.5).start(1, 1)
    with pytest.raises(MeasureError, match="n_boot=-1"):
        ROCAUC(n_boot=-1).start(1, 1)
    assert isinstance(get_measure("roc_auc"), ROCAUC)


def test_inspect_and_a_query_ask_for_them():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=6), encode_chars, name="toy")
    recs = random_records(60, seed=1)
    frame = dl.inspect([model], [paren], ["roc_auc", RecallAtFPR(0.01, n_boot=20)], recs,
                       units=[("lstm", "*")], eps=None)  # fmt: skip
    auc = frame.filter(measure="roc_auc").sort("uid")
    assert set(frame["measure"]) == {"roc_auc", "recall_at_fpr"} and len(auc) == 6
    assert auc["unit_score"].is_between(0, 1).all() and (auc["err"] > 0).all()
    cat = dl.Catalog()
    cat.add_model(model)
    cat.add_inputs(recs, "chars")
    cat.add_hypothesis(paren)
    got = dl.query(
        "SELECT * INSPECT U.uid AND H.h USING recall_at_fpr(fpr = 0.05, n_boot = 0) "
        "OVER D.seq AS S FROM models M, units U, hypotheses H, inputs D "
        "WHERE U.layer = 'lstm'",
        catalog=cat,
    )
    assert set(got["measure"]) == {"recall_at_fpr"}
    assert got["unit_score"].is_between(0, 1).all() and got["err"].is_null().all()
