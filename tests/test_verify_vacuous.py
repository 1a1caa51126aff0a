"""Verifications whose answer is fixed before they run: one possible random set, a tap layer."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError
from dni_lab.backend.verify.vacuous import VacuousComparisonWarning, possible_sets

HIDDEN = 12
RECORDS = random_records(40, seed=5)


def model_of(lm: nn.Module) -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(lm.eval(), encode=encode_chars, name="lm")


class Tapped(CharLM):
    """A char LSTM with a tap on the LSTM's output whose return value is discarded."""

    def __init__(self) -> None:
        super().__init__(hidden=HIDDEN, layers=1)
        self.tap = nn.Identity()

    def forward(self, x):
        out = self.lstm(self.embed(x))[0]
        self.tap(out)  # read by hooks, never used
        return self.head(out)


def test_possible_sets_counts_the_pool_the_draw_uses():
    assert possible_sets(64, 32, 32) == 1  # 32 of 64 outside the top 32: the complement
    assert possible_sets(12, 12, 12) == 1  # the whole layer (falls back to every unit)
    assert possible_sets(12, 7, 7) == math.comb(12, 7)  # too few left: the whole layer
    assert possible_sets(12, 2, 2) == math.comb(10, 2)


@pytest.mark.parametrize("exclude,k", [(True, 6), (True, HIDDEN), (False, HIDDEN)])
def test_random_sets_that_are_all_one_set_null_the_p_value(exclude, k):
    torch.manual_seed(1)
    model = model_of(CharLM(hidden=HIDDEN, layers=1))
    units = list(range(k))
    with pytest.warns(VacuousComparisonWarning, match=rf"k={k}: only C\(\d+, {k}\) = 1"):
        v = dl.verify.ablation(model, RECORDS, "lstm", units, ks=[1, k], n_random=4,
                               exclude=exclude, device="cpu")  # fmt: skip
    rows = {r["k"]: r for r in v.summary["per_k"].iter_rows(named=True)}
    assert rows[k]["p_value"] is None and rows[k]["possible_sets"] == 1
    assert "all 4 random sets are the same set" in rows[k]["reason"]
    assert rows[k]["random_std"] == 0.0  # what the p-value would have hidden
    # k = 1 still has many sets to draw from: a p-value and no reason
    assert rows[1]["p_value"] is not None and rows[1]["reason"] is None
    assert rows[1]["possible_sets"] == (HIDDEN - 1 if exclude else HIDDEN)


def test_a_perturbation_of_one_possible_random_set_says_so():
    torch.manual_seed(1)
    model = model_of(CharLM(hidden=4, layers=1))
    is_a = dl.hypothesis(kind="binary")(lambda r: [c == "a" for c in r])
    swaps = lambda r, i: [(r[:i] + c + r[i + 1 :], None) for c in "ab" if c != r[i]]  # noqa: E731
    rules = dl.verify.RecordRules(swaps, name="a <-> b")
    with pytest.warns(VacuousComparisonWarning, match=r"k=2: only C\(2, 2\) = 1"):
        v = dl.verify.perturbation(model, RECORDS, "lstm", [0, 1], is_a, rules, n_random=3,
                                   device="cpu")  # fmt: skip
    assert v.summary["p_value"] is None and v.summary["possible_sets"] == 1


def test_a_healthy_ablation_warns_nothing():
    torch.manual_seed(1)
    model = model_of(CharLM(hidden=HIDDEN, layers=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", VacuousComparisonWarning)
        v = dl.verify.ablation(model, RECORDS, "lstm", [0, 1], ks=[2], n_random=3, device="cpu")
    assert v.summary["per_k"]["possible_sets"][0] == math.comb(HIDDEN - 2, 2)


def test_ablating_a_tap_raises_and_names_the_layer_it_reads():
    lm = Tapped()
    model = model_of(lm)
    state = {k: v.clone() for k, v in lm.state_dict().items()}
    with pytest.raises(LayerError, match=r"'tap'.*does not feed.*'lstm'"):
        dl.verify.ablation(model, RECORDS, "tap", [0, 1], n_random=3, device="cpu")
    with pytest.raises(LayerError, match="does not feed"):
        dl.verify.oracle(model, RECORDS, "tap", [0],
                         dl.hypothesis(kind="binary")(lambda r: [c == "a" for c in r]),
                         n_random=2, device="cpu")  # fmt: skip
    assert not lm._forward_hooks and not lm.tap._forward_hooks and not lm.lstm._forward_hooks
    assert all(torch.equal(v, state[k]) for k, v in lm.state_dict().items())
    # the tap reads what the LSTM outputs: ablating the LSTM works
    v = dl.verify.ablation(model, RECORDS, "lstm", [0, 1], ks=[2], n_random=3, device="cpu")
    assert v.summary["per_k"]["top"][0] != v.summary["baseline"]


def test_a_permutation_test_that_can_move_nothing_raises():
    """Records shuffle only among records of their length: all lengths distinct, no shuffle."""
    model = model_of(CharLM(hidden=4, layers=1))
    def cut(seed: int) -> list[str]:  # lengths 4..23, one record each
        return [r[:n] for n, r in zip(range(4, 24), random_records(20, seed, 24, 25), strict=True)]

    lengths = cut(2)
    is_a = dl.hypothesis(kind="binary")(lambda r: [c == "a" for c in r])
    with pytest.raises(DNIError, match="none of the 20 records shares its symbol count"):
        dl.verify.permutation_test(model, [is_a], lengths, units=[("lstm", "*")],
                                   n_permutations=9)  # fmt: skip
    pairs = lengths + cut(3)  # every length twice: each pair can swap
    f = dl.verify.permutation_test(model, [is_a], pairs, units=[("lstm", "*")], n_permutations=9)
    assert f["p_value"].drop_nulls().len() > 0


def test_set_counts_past_64_bits_fit_a_frame():
    import math

    import polars as pl

    from dni_lab.backend.verify.vacuous import possible_sets

    n = possible_sets(256, 12, 12)
    assert isinstance(n, float) and n == float(math.comb(244, 12))
    assert pl.DataFrame([{"k": 1, "possible_sets": possible_sets(256, 1, 1)},
                         {"k": 12, "possible_sets": n}])["possible_sets"].dtype == pl.Float64
