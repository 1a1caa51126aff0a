"""NaN or None in a hypothesis means "undefined at this symbol": left out, counted, no error.

Each measure's score with undefined values equals its score on the symbols where the
hypothesis is defined, taken by hand: the same blocks with the undefined cells turned
into padding, one hypothesis at a time.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from measure_blocks import padded_block, padding_mask

import dni_lab as dl
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures import get_measure
from dni_lab.backend.measures.corr import Corr
from dni_lab.backend.measures.function import FunctionMeasure

R, T, NU = 160, 10, 4
INFO = [HypothesisInfo("cont", "continuous"), HypothesisInfo("bin", "binary")]


def _blocks(seed: int, rates: list[tuple[float, float]]) -> list:
    """Blocks of 2 hypotheses (continuous, binary) tied to units 0 and 1; ``rates[b]`` is
    the share of undefined cells of each hypothesis in block ``b``."""
    rng = np.random.default_rng(seed)
    out = []
    for rate in rates:
        m = padding_mask(rng, R, T)
        U = rng.normal(size=(R, T, NU)) + 2.0
        H = np.stack([U[..., 0] + rng.normal(size=(R, T)),
                      (U[..., 1] + 0.5 * rng.normal(size=(R, T)) > 2.0) * 1.0], -1)  # fmt: skip
        und = (rng.random((R, T, 2)) < np.asarray(rate)) & m[..., None]
        # what the undefined cells would have said: a value that would show if it leaked
        H[und] = np.nan
        out.append((U, H, m))
    return out


def _score(measure, blocks, n_hyps=2, info=INFO):
    s = measure.start(blocks[0][0].shape[-1], n_hyps, info=info)
    for U, H, m in blocks:
        s = measure.update(s, *padded_block(U, H, m, 1e6, -7.0))
    return s, measure.result(s)


def _subset(blocks, j):
    """Hypothesis ``j`` alone, its undefined cells made padding: the hand-taken subset."""
    return [(U, np.nan_to_num(H[..., j : j + 1]), m & ~np.isnan(H[..., j])) for U, H, m in blocks]


# the first block fully defined: iou's threshold and mi's bin edges calibrate on the
# first block's real symbols, which the subset must share
RATES = [(0.0, 0.0), (0.3, 0.2), (0.5, 0.1), (0.1, 0.4)]
MEASURES = ["corr", "ridge", "diffmeans", "mi", "iou", "function"]


def _measure(name):
    if name == "function":
        return FunctionMeasure(lambda u, h: float(np.corrcoef(u, h)[0, 1]), name="fcorr")
    return get_measure(name)


@pytest.mark.parametrize("name", MEASURES)
def test_undefined_cells_are_left_out_as_by_hand(name):
    blocks = _blocks(0, RATES)
    _, full = _score(_measure(name), blocks)
    n_undef = sum(np.isnan(H[m]).sum(0) for _, H, m in blocks)
    assert n_undef.min() > 100
    assert (full.n_undefined == n_undef[None, :]).all()
    for j, info in enumerate(INFO):
        if info.kind not in _measure(name).kinds:
            continue
        _, ref = _score(_measure(name), _subset(blocks, j), 1, [info])
        want = ref.unit_score[:, 0]
        assert np.isfinite(want).all()
        np.testing.assert_allclose(full.unit_score[:, j], want, rtol=1e-6, atol=1e-7)
        if name == "ridge":
            np.testing.assert_allclose(full.group_score[0, j], ref.group_score[0, 0], rtol=1e-6)


def test_corr_error_and_merge_leave_them_out_too():
    # enough groups for the jackknife (3 per bucket); a merged pair of states as one
    blocks = _blocks(1, [(0.3, 0.2)] * 6)
    corr = Corr(buckets=5)
    _, full = _score(corr, blocks)
    for j in range(2):
        _, ref = _score(Corr(buckets=5), _subset(blocks, j), 1, [INFO[j]])
        assert np.isfinite(ref.err).all()
        np.testing.assert_allclose(full.err[:, j], ref.err[:, 0], rtol=1e-5, atol=1e-8)
    a, _ = _score(corr, blocks[:2])
    b, _ = _score(corr, blocks[2:])
    merged = corr.result(corr.merge(a, b))
    np.testing.assert_allclose(merged.unit_score, full.unit_score, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(merged.err, full.err, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(merged.n_undefined, full.n_undefined)


def test_local_iou_reads_each_pair_on_its_defined_symbols():
    blocks = _blocks(2, [(0.0, 0.3)])
    q = get_measure("local_iou").quantile
    _, res = _score(get_measure("local_iou"), blocks)
    U, H, m = blocks[0]
    ious = []
    for r in range(R):
        real = m[r]
        if not real.any():
            continue
        t = np.quantile(U[r][real], q, axis=0)  # the unit's region: every real symbol
        d = real & ~np.isnan(H[r, :, 1])
        B = H[r, d, 1] > 0.5
        if not B.any():
            continue
        A = U[r][d] > t
        inter = (A & B[:, None]).sum(0)
        ious.append(inter / np.maximum(A.sum(0) + B.sum() - inter, 1))
    np.testing.assert_allclose(res.unit_score[:, 1], np.mean(ious, axis=0), rtol=1e-5)


def test_logreg_neither_trains_nor_scores_on_undefined_rows():
    # the defined cells follow unit 0; the undefined ones would contradict it if read as 0
    rng = np.random.default_rng(3)
    U = rng.normal(size=(400, 8, 3)).astype(np.float32)
    H = (U[..., :1] > 0.8).astype(np.float64)
    und = U[..., :1] > 0.8
    und &= rng.random(und.shape) < 0.5
    H[und] = np.nan
    m = np.ones((400, 8), bool)
    _, res = _score(get_measure("logreg"), [(U, H, m)], 1, [HypothesisInfo("h", "binary")])
    assert res.n_undefined[0, 0] == und.sum()
    assert res.group_score[0, 0] > 0.95
    filled = np.nan_to_num(H)  # the same data with the undefined cells read as "false"
    _, worse = _score(get_measure("logreg"), [(U, filled, m)], 1, [HypothesisInfo("h", "binary")])
    assert worse.group_score[0, 0] < res.group_score[0, 0] - 0.1


def test_an_inspection_counts_and_skips_undefined_symbols():
    torch.manual_seed(0)
    module = CharLM(hidden=5)
    model = dl.Model(module, encode_chars, name="toy")
    recs = random_records(60, seed=4)

    @dl.hypothesis(kind="continuous")
    def depth_or_none(r):  # undefined after the first ')'
        out, d, closed = [], 0, False
        for c in r:
            d += (c == "(") - (c == ")")
            closed |= c == ")"
            out.append(None if closed else float(d))
        return out

    f = dl.inspect(model, [depth_or_none], data=recs, units=[("lstm", "*")], eps=None,
                   cache=False)  # fmt: skip
    values = [np.asarray(depth_or_none(r), dtype=float) for r in recs]
    n_undef = int(sum(np.isnan(v).sum() for v in values))
    assert n_undef > 50
    assert f["n_undefined"].to_list() == [n_undef] * f.height
    with torch.no_grad():
        acts = [module.lstm(module.embed(encode_chars([r])))[0][0].numpy() for r in recs]
    A, h = np.concatenate(acts), np.concatenate(values)
    ok = ~np.isnan(h)
    want = [np.corrcoef(A[ok, i], h[ok])[0, 1] for i in range(A.shape[1])]
    got = f.sort("unit")["unit_score"].to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_hypothesis_never_defined_is_null_with_a_reason_not_an_error():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=3), encode_chars, name="toy")
    never = dl.hypothesis(lambda r: [None] * len(r), name="never", kind="continuous")
    f = dl.inspect(model, [never], measures=["corr", "diffmeans", "mi"],
                   data=random_records(20, seed=5), units=[("lstm", "*")], eps=None,
                   cache=False)  # fmt: skip
    assert f["unit_score"].null_count() == f.height
    assert f.filter(pl.col("reason").is_null()).height == 0
    assert (f["n_undefined"] > 0).all()


@pytest.mark.parametrize("name", ["iou", "mi", "corr", "ridge", "diffmeans"])
def test_shards_forked_from_the_first_block_merge_to_one_pass(name):
    # a cluster's workers start from a fork of the state after block 0 (its calibration,
    # counts emptied): block 0's undefined counts must not come back once per shard
    from dni_lab.backend.cluster.shards import fork, forkable

    blocks = [tuple(padded_block(U, H, m, 1e6, -7.0)) for U, H, m in _blocks(5, [(0.2, 0.3)] * 4)]
    meas = get_measure(name)
    one = meas.start(NU, 2, info=INFO)
    for b in blocks:
        one = meas.update(one, *b)
    first = meas.update(meas.start(NU, 2, info=INFO), *blocks[0])
    merged = first
    for b in blocks[1:]:
        shard = fork(meas, first) if forkable(meas) else meas.start(NU, 2, info=INFO)
        merged = meas.merge(merged, meas.update(shard, *b))
    want, got = meas.result(one), meas.result(merged)
    np.testing.assert_array_equal(got.n_undefined, want.n_undefined)
    np.testing.assert_allclose(got.unit_score, want.unit_score, rtol=1e-9, atol=1e-12)
