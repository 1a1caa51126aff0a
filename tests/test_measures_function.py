"""FunctionMeasure: a plain f(u, h) on the real symbols, errors as reasons, row limit, merge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from measure_blocks import fold, make_blocks

from dni_lab.backend.errors import MeasureError
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo
from dni_lab.backend.measures._common import SymbolMeasure
from dni_lab.backend.measures.base import Measure, StateShape
from dni_lab.backend.measures.function import FunctionMeasure

NU = 3
NH = 2


def padded_blocks(rng, n_blocks, R, T):

    def signals():
        U = rng.normal(0, 1, (R, T, NU))
        H = np.stack([U[..., 0] + rng.normal(0, 1, (R, T)), rng.random((R, T)) < 0.5], -1)
        return U, H

    # padding garbage that must never reach the function
    return make_blocks(rng, n_blocks, R, T, signals, u_pad=np.nan, h_pad=np.inf)


def run(measure, blocks, info=None):
    return fold(measure, blocks, NU, NH, info)


def pearson(u: np.ndarray, h: np.ndarray) -> float:
    return float(np.corrcoef(u, h)[0, 1])


def test_function_sees_real_symbols_only():
    blocks = padded_blocks(np.random.default_rng(0), 3, 20, 12)
    n_real = sum(int(m.sum()) for _, _, m in blocks)
    seen = []

    def corr_checked(u, h):
        assert np.isfinite(u).all() and np.isfinite(h).all() and len(u) == len(h) == n_real
        seen.append(u.dtype)
        return pearson(u, h)

    m = FunctionMeasure(corr_checked)
    res = m.result(run(m, blocks))
    Uf = np.concatenate([U[mk].numpy() for U, _, mk in blocks]).astype(np.float64)
    Hf = np.concatenate([H[mk].numpy() for _, H, mk in blocks]).astype(np.float64)
    ref = np.corrcoef(Uf.T, Hf.T)[:NU, NU:]
    np.testing.assert_allclose(res.unit_score, ref, rtol=1e-10)
    assert (res.reason == None).all() and len(seen) == NU * NH  # noqa: E711
    assert seen[0] == np.float64 and m.name == "corr_checked"
    assert FunctionMeasure(pearson, name="r").name == "r"


def test_exceptions_and_non_finite_results_become_reasons():
    blocks = padded_blocks(np.random.default_rng(1), 1, 10, 8)

    def picky(u, h):
        if h.max() <= 1.0:  # the binary hypothesis
            raise RuntimeError("binary not supported")
        return np.nan if u.mean() > 10 else float(u.std())

    def mutate(u, h):
        u[0] = 0.0  # read-only: must not leak into other pairs
        return 1.0

    res = FunctionMeasure(picky).result(run(FunctionMeasure(picky), blocks))
    assert all(r == "picky raised RuntimeError: binary not supported" for r in res.reason[:, 1])
    assert np.isnan(res.unit_score[:, 1]).all() and np.isfinite(res.unit_score[:, 0]).all()
    for U, _, _ in blocks:
        U[..., 2] = 50.0
    res = FunctionMeasure(picky).result(run(FunctionMeasure(picky), blocks))
    assert res.reason[2, 0] == "picky returned nan" and np.isnan(res.unit_score[2, 0])
    res = FunctionMeasure(mutate).result(run(FunctionMeasure(mutate), blocks))
    assert "mutate raised ValueError" in res.reason[0, 0]


def test_max_rows_and_merge():
    blocks = padded_blocks(np.random.default_rng(2), 4, 10, 8)
    sizes = [int(m.sum()) for _, _, m in blocks]
    m = FunctionMeasure(pearson, max_rows=sum(sizes))
    merged = m.merge(run(m, blocks[:2]), run(m, blocks[2:]))
    np.testing.assert_array_equal(m.result(merged).unit_score, m.result(run(m, blocks)).unit_score)
    small = FunctionMeasure(pearson, max_rows=sum(sizes) - 1)
    with pytest.raises(MeasureError, match="max_rows"):
        run(small, blocks)
    with pytest.raises(MeasureError, match="implement the Measure protocol"):
        small.merge(run(small, blocks[:2]), run(small, blocks[2:]))


def test_empty_state_and_kinds():
    m = FunctionMeasure(pearson)
    res = m.result(m.start(NU, NH))
    assert (res.reason == "no symbols read").all() and np.isnan(res.unit_score).all()
    info = [HypothesisInfo("x"), HypothesisInfo("c", "categorical", 2)]
    res = m.result(run(m, padded_blocks(np.random.default_rng(3), 1, 10, 8), info))
    assert np.isfinite(res.unit_score).all()  # a user function accepts every kind
    # Live tables peek after every block: the function is not called there.
    calls = []
    counted = FunctionMeasure(lambda u, h: calls.append(1) or 1.0)
    live = counted.peek(run(counted, padded_blocks(np.random.default_rng(4), 1, 10, 8)))
    assert (
        not calls and np.isnan(live.unit_score).all() and "when the run ends" in live.reason[0, 0]
    )



@dataclass
class CountState:
    n: torch.Tensor
    n_records: int = 0


def test_symbol_measure_folds_real_symbols_and_start_names_the_missing_method():
    class Count(SymbolMeasure):
        name = "count"

        def empty_state(self, shape: StateShape) -> CountState:
            assert shape.per_pair().shape == (NU, NH) and shape.per_pair().dtype == torch.float64
            return CountState(shape.per_unit())

        def fold(self, state: CountState, Uf, Hf) -> CountState:
            state.n += Uf.shape[0]
            return state

    class Nothing(Measure):
        name = "nothing"

    blocks = padded_blocks(np.random.default_rng(3), 3, 6, 5)
    state = fold(Count(), blocks, NU, NH)
    assert state.n_records == 18  # every record, empty ones included
    real = float(sum(int(mask.sum()) for *_, mask in blocks))
    assert torch.equal(state.n, torch.full((NU,), real, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="Nothing implements neither empty_state"):
        Nothing().start(NU, NH)
