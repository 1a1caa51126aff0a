"""Forcing units (hooks, recurrence), ablation and oracle tests, generative verification."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from specialized import hypothesis, one_thread, records, specialized
from torch import nn

import dni_lab as dl
from dni_lab.backend.verify.force import force_units
from hypotheses.workloads import parens


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("batch_first", [True, False])
def test_forcing_nothing_changes_nothing_and_forcing_feeds_the_recurrence(cell, batch_first):
    torch.manual_seed(3)
    lm = CharLM(hidden=6, layers=2, cell=cell, batch_first=batch_first).eval()
    model = dl.Model(lm, encode=encode_chars)
    x = encode_chars(random_records(5, seed=3))
    with torch.no_grad():
        ref = lm(x)
        with force_units(model, "lstm", [], 0.0):
            same = lm(x)
        with force_units(model, "lstm", [1, 4], 0.5), model.capture(["lstm"]) as store:
            forced = lm(x)
        h = store["lstm"] if batch_first else store["lstm"].transpose(0, 1)
    torch.testing.assert_close(same, ref, atol=1e-5, rtol=0)
    assert torch.all(h[..., [1, 4]] == 0.5)  # the layer's output carries the forced values
    assert not torch.allclose(forced, ref)
    # Forcing layer 0 changes layer 1 only through the recurrence's input, step by step:
    with torch.no_grad(), force_units(model, "lstm.l0", [0], -1.0):
        via_l0 = lm(x)
    assert not torch.allclose(via_l0, ref)


def test_forcing_a_recurrent_unit_reaches_later_time_steps():
    """Zeroing h_t of a unit must change later steps of *other* units (the recurrence)."""
    torch.manual_seed(4)
    lm = CharLM(hidden=6, layers=1).eval()
    model = dl.Model(lm, encode=encode_chars)
    x = encode_chars(["abcabcab"])
    with torch.no_grad(), model.capture(["lstm"]) as s0:
        lm(x)
    with torch.no_grad(), force_units(model, "lstm", [2], 0.0), model.capture(["lstm"]) as s1:
        lm(x)
    other = [0, 1, 3, 4, 5]
    torch.testing.assert_close(s1["lstm"][:, 0, other], s0["lstm"][:, 0, other])  # t=0: no past
    assert (s1["lstm"][:, 1:, other] - s0["lstm"][:, 1:, other]).abs().max() > 1e-4


def test_forcing_a_plain_layer_and_bad_values():
    model = dl.Model(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), name="mlp")
    x = torch.randn(5, 3)
    with force_units(model, "0", [1, 2], torch.ones(5, 1, 2) * 3), model.capture(["0"]) as s:
        model.module(x)
    assert torch.all(s["0"][:, [1, 2]] == 3)
    with (
        pytest.raises(dl.LayerError, match="do not fit"),
        force_units(model, "0", [1], torch.ones(2, 2)),
    ):
        model.module(x)


@pytest.fixture(scope="module")
def depth_model():
    model, S, _ = specialized("depth")
    # The DNI paper's measure: accuracy of predicting the value of the nesting digit.
    digit_value = dl.verify.next_symbol_accuracy(model, target=str.isdigit, among="01234")
    return model, S, records(300, seed=7), digit_value


@pytest.fixture(scope="module")
def ablated(depth_model):
    model, S, recs, digit_value = depth_model
    with one_thread():
        return dl.verify.ablation(
            model, recs, "lstm", S, ks=[2, 4], n_random=8, evaluate=digit_value, device="cpu"
        )


def test_ablating_specialized_units_hurts_more_than_random_units(depth_model, ablated):
    model, S, recs, _ = depth_model
    v = ablated
    assert v.summary["baseline"] > 0.9
    full = v.summary["per_k"].sort("k").row(1, named=True)
    assert full["k"] == 4
    random4 = v.frame.filter((pl.col("set") == "random") & (pl.col("k") == 4))["score"]
    assert full["top"] < full["random_mean"] - 2 * full["random_std"]
    assert full["top"] < random4.median() - 0.15
    assert full["p_value"] <= 2 / 9  # at most one random set of 8 hurts as much
    assert set(v.frame.columns) >= {
        "test",
        "k",
        "set",
        "draw",
        "units",
        "score",
        "baseline",
        "drop",
    }
    assert v.frame.filter(pl.col("set") == "top")["units"].to_list() == [S[:2], S]
    # the log-likelihood view agrees, and plain next-symbol accuracy is a probability
    ll = dl.verify.next_symbol_accuracy(model, str.isdigit, "01234", score="log_likelihood")
    v = dl.verify.ablation(model, recs[:100], "lstm", S, n_random=3, evaluate=ll, device="cpu")
    assert v.summary["per_k"]["top"][0] < v.summary["per_k"]["random_mean"][0]
    plain = dl.verify.ablation(model, recs[:50], "lstm", S, n_random=1, device="cpu")
    assert 0 < plain.summary["baseline"] <= 1
    with pytest.raises(dl.DNIError, match="k must lie"):
        dl.verify.ablation(model, recs, "lstm", S, ks=[5], device="cpu")


def test_oracle_restores_what_ablation_removed(depth_model, ablated):
    model, S, recs, digit_value = depth_model
    v = dl.verify.oracle(
        model, recs, "lstm", S, hypothesis("depth"), n_random=2, evaluate=digit_value, device="cpu"
    )
    oracle_top = v.summary["per_k"]["top"][0]
    ablated_top = ablated.summary["per_k"].sort("k")["top"][1]
    # S encodes the depth: given the depth pattern in place of S's own values, the model
    # predicts the digits nearly as well as unchanged, far better than with S removed.
    assert oracle_top > ablated_top + 0.15
    assert oracle_top > v.summary["baseline"] - 0.1
    assert v.frame["test"].unique().to_list() == ["oracle"]
    with pytest.raises(dl.DNIError, match="constant"):
        dl.verify.oracle(model, recs, "lstm", S, lambda r: [0.0] * len(r), device="cpu")


def test_generative_forcing_changes_what_the_model_writes():
    model, S, _ = specialized()
    decode = parens.charlm.Vocab().decode
    fires = dl.hypothesis(lambda r: [c in "()" for c in r], name="is_paren")
    kw = dict(prompt="0", n_samples=24, length=20, n_random=3, device="cpu", seed=1)
    v = dl.verify.generative(model, "lstm", S, fires, decode, value=1.0, **kw)
    again = dl.verify.generative(model, "lstm", S, fires, decode, value=1.0, **kw)
    assert v.frame.equals(again.frame)  # seeded sampling
    assert v.summary["failed"] == 0
    assert set(v.frame["condition"]) == {"none", "top", "random"}
    none, top = v.summary["none"], v.summary["per_k"]["top"][0]
    assert 0 <= none <= 1 and 0 <= top <= 1
    assert v.frame.filter(v.frame["condition"] == "none")["text"].to_list() != (
        v.frame.filter(v.frame["condition"] == "top")["text"].to_list()
    )
    with pytest.raises(dl.DNIError, match="prompt"):
        dl.verify.generative(model, "lstm", S, fires, decode, prompt="")


def test_a_mistyped_option_is_refused_not_defaulted(depth_model):
    model, S, recs, _ = depth_model
    with pytest.raises(TypeError, match=r"ablation\(\) .* 'n_randon'.*n_random"):
        dl.verify.ablation(model, recs, "lstm", S, n_randon=3)
    with pytest.raises(TypeError, match=r"oracle\(\) .* 'sed'"):
        dl.verify.oracle(model, recs, "lstm", S, hypothesis("depth"), sed=1)
    with pytest.raises(TypeError, match=r"perturbation\(\) .* 'batchsize'"):
        dl.verify.perturbation(model, recs, "lstm", S, hypothesis("depth"), "()", batchsize=8)
    with pytest.raises(TypeError):  # options are keyword-only: nothing shifts silently
        dl.verify.ablation(model, recs, "lstm", S, [2], 10)


def test_random_unit_sets_exclude_the_tested_units():
    sets = dl.verify.random_unit_sets(16, 4, 20, [0, 1, 2, 3], np.random.default_rng(0))
    assert all(len(s) == 4 and not set(s) & {0, 1, 2, 3} for s in sets)
    narrow = dl.verify.random_unit_sets(5, 4, 3, [0, 1, 2, 3], np.random.default_rng(0))
    assert all(len(set(s)) == 4 for s in narrow)  # too few others: the whole layer


def test_oracle_forces_no_nan_where_the_hypothesis_is_undefined(depth_model):
    model, S, recs, digit_value = depth_model
    depth = hypothesis("depth")

    def depth_or_undefined(r):  # undefined on every other symbol
        return [float("nan") if i % 2 else v for i, v in enumerate(depth(r))]

    seen = []
    h = model._module("lstm").register_forward_hook(
        lambda _m, _i, o: seen.append(bool(torch.isnan(o[0]).any()))
    )
    try:
        v = dl.verify.oracle(model, recs[:40], "lstm", S[:2], depth_or_undefined, n_random=2,
                             evaluate=digit_value, device="cpu")
    finally:
        h.remove()
    assert seen and not any(seen)
    assert np.isfinite(v.summary["per_k"]["top"][0])
