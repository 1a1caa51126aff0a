"""The behavior memo: a repeated query skips the forward pass, and nothing that changes
the computation (weights, hooks, units, records) is ever served stale behaviors."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars

import dni_lab as dl
from dni_lab.backend.extraction.behavior_memo import BehaviorMemo, memo_bytes


class Counting(CharLM):
    """Counts forward passes."""

    calls = 0

    def forward(self, x):
        type(self).calls += 1
        return super().forward(x)


@pytest.fixture
def counted():
    torch.manual_seed(0)
    Counting.calls = 0
    return dl.Model(Counting(), encode=encode_chars, name="counted")


def _scores(model, hyps, records, units=("lstm", "*")):
    frame = dl.inspect([model], hyps, ["corr"], records, units=[units], eps=None, block_size=64)
    return frame.sort("hid", "unit")["unit_score"].to_numpy()


def test_repeated_query_skips_the_forward_pass_and_scores_the_same(counted, records, hyps):
    first = _scores(counted, hyps, records)
    calls = Counting.calls
    assert counted.behavior_memo.hits == 0 and len(counted.behavior_memo) == 5
    again = _scores(counted, hyps, records)
    assert Counting.calls == calls  # every block served from the memo
    assert counted.behavior_memo.hits == 5
    np.testing.assert_array_equal(first, again)
    other = dl.hypothesis(lambda r: [float(c == "a") for c in r], name="is_a")
    _scores(counted, [other], records)  # another hypothesis: the same behaviors
    assert Counting.calls == calls


def test_weights_written_in_place_are_never_served_stale(counted, records, hyps):
    before = _scores(counted, hyps, records)
    with torch.no_grad():
        counted.module.lstm.weight_hh_l0.mul_(-1.0)
    after = _scores(counted, hyps, records)
    fresh = dl.Model(copy.deepcopy(counted.module), encode=encode_chars, name="fresh")
    np.testing.assert_allclose(after, _scores(fresh, hyps, records), atol=1e-6)
    assert not np.allclose(before, after, equal_nan=True)
    counted.module.load_state_dict(fresh.module.state_dict())  # copy_ bumps versions too
    calls = Counting.calls
    _scores(counted, hyps, records)
    assert Counting.calls > calls


def test_a_hook_that_changes_behaviors_is_part_of_the_key(counted, records, hyps):
    before = _scores(counted, hyps, records)
    handle = counted.module.lstm.register_forward_hook(
        lambda m, i, o: (o[0] * 0.0 + torch.randn_like(o[0]), o[1])
    )
    try:
        hooked = _scores(counted, hyps, records)
    finally:
        handle.remove()
    assert not np.allclose(before, hooked, equal_nan=True)
    np.testing.assert_array_equal(before, _scores(counted, hyps, records))


def test_other_units_and_other_records_miss(counted, records, hyps):
    _scores(counted, hyps, records)
    calls = Counting.calls
    _scores(counted, hyps, records, units=("lstm", [0, 1]))
    assert Counting.calls > calls
    calls = Counting.calls
    _scores(counted, hyps, records[::-1])
    assert Counting.calls > calls


def test_budget_evicts_oldest_and_never_keeps_a_block_too_big():
    memo = BehaviorMemo(max_bytes=3 * 400)
    block = {"l": torch.zeros(10, 10)}  # 400 bytes
    for k in range(5):
        memo.put(k, block)
    assert len(memo) == 3 and memo.nbytes == 1200
    assert memo.get(0) is None and memo.get(4) is not None
    memo.put("big", {"l": torch.zeros(40, 10)})
    assert memo.get("big") is None and len(memo) == 3


def test_memo_off_by_environment(monkeypatch, records, hyps):
    monkeypatch.setenv("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    Counting.calls = 0
    model = dl.Model(Counting(), encode=encode_chars, name="no-memo")
    _scores(model, hyps, records)
    calls = Counting.calls
    _scores(model, hyps, records)
    assert Counting.calls - calls == 5 and len(model.behavior_memo) == 0  # 5 blocks of 64
    monkeypatch.setenv("DNI_LAB_BEHAVIOR_MEMO_MB", "lots")
    with pytest.raises(ValueError, match="DNI_LAB_BEHAVIOR_MEMO_MB='lots'"):
        memo_bytes()


def test_model_travels_and_copies_without_its_memo(counted, records, hyps):
    _scores(counted, hyps, records)
    assert counted.behavior_memo.nbytes > 0
    back = pickle.loads(pickle.dumps(counted))
    assert len(back.behavior_memo) == 0
    clone = counted.with_module(copy.deepcopy(counted.module))
    assert clone.behavior_memo is not counted.behavior_memo and len(clone.behavior_memo) == 0
    frame = dl.inspect([clone], hyps, ["corr"], records, units=[("lstm", "*")], eps=None)
    assert isinstance(frame, pl.DataFrame)
