"""Perturbation verification: swap rules, silhouette, and S vs random units (DeepBase §4.4)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import silhouette_score as sk_silhouette
from specialized import hypothesis, one_thread, records, specialized

import dni_lab as dl
from hypotheses.grammars import parens as grammar


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_silhouette_matches_scikit_learn(n_clusters):
    rng = np.random.default_rng(n_clusters)
    X = rng.normal(size=(2500, 5)) + rng.integers(0, 2, (2500, 1))  # more rows than one chunk
    labels = rng.integers(0, n_clusters, 2500)
    labels[0] = n_clusters  # a singleton cluster scores 0, as in scikit-learn
    assert dl.verify.silhouette_score(X, labels) == pytest.approx(
        sk_silhouette(X, labels), abs=1e-9
    )


def test_swap_rules_from_the_library_and_the_user():
    terms = dl.verify.grammar_terminals(grammar.grammar(2))
    assert sorted(terms.vocabulary) == ["(", ")", "0", "1", "2"]
    assert [s for s, _ in terms.candidates("0()", 1)] == [s for s in terms.vocabulary if s != "("]
    assert dl.verify.candidates(dl.verify.char_classes("digit"), "a1", 0) == []  # 'a' not a digit
    assert "9" in [s for s, _ in dl.verify.char_classes("digit").candidates("a1", 1)]
    words = dl.verify.word_classes("conjunction")
    assert ("or", None) in words.candidates(["rick", "and", "morty"], 1)
    explicit = {"(": {"baseline": ")", "treatment": "01"}}
    assert dl.verify.candidates(explicit, "0()", 1) == [
        (")", "baseline"), ("0", "treatment"), ("1", "treatment")
    ]  # fmt: skip
    assert dl.verify.candidates(lambda r, k: ["x"], "ab", 0) == [("x", None)]
    with pytest.raises(dl.DNIError, match="unknown character classes"):
        dl.verify.char_classes("digits")


def test_specialized_units_separate_from_random_units():
    model, S, _ = specialized()
    rules = dl.verify.grammar_terminals(grammar.grammar(4))
    v = dl.verify.perturbation(
        model, records(300, seed=5), "lstm", S, hypothesis(), rules, n_random=10, device="cpu"
    )
    s = v.summary
    # DeepBase Fig. 4b: selected units cluster baseline vs treatment; random sets overlap.
    assert s["silhouette"] > max(s["random_silhouettes"]) + 0.05
    assert s["silhouette"] > s["random_mean"] + 3 * s["random_std"]
    assert s["silhouette"] > 2 * s["random_mean"]
    assert s["p_value"] == pytest.approx(1 / 11)
    assert s["n_baseline"] == s["n_treatment"] > 100
    assert s["mean_change"]["treatment"] > 2 * s["mean_change"]["baseline"]
    f = v.frame
    assert set(f["kind"]) == {"baseline", "treatment"}
    # baseline swaps keep the hypothesis value, treatment swaps change it
    same = (f["h_original"] - f["h_perturbed"]).abs() < 1e-6
    assert (same == (f["kind"] == "baseline")).all()
    assert f["delta"].list.len().unique().to_list() == [len(S)]
    assert s["sets"].height == 11 and s["sets"]["units"][0].to_list() == S


def test_perturbation_is_deterministic_and_explains_impossible_rules():
    model, S, _ = specialized()
    recs = records(40, seed=6)
    rules = dl.verify.char_classes("digit", "bracket")
    a = dl.verify.perturbation(
        model, recs, "lstm", S, hypothesis(), rules, n_random=2, device="cpu"
    )
    b = dl.verify.perturbation(
        model, recs, "lstm", S, hypothesis(), rules, n_random=2, device="cpu"
    )
    assert a.frame.drop("delta").equals(b.frame.drop("delta"))
    assert a.summary["silhouette"] == b.summary["silhouette"]
    with pytest.raises(dl.DNIError, match="both a baseline and a treatment"):
        dl.verify.perturbation(model, recs, "lstm", S, hypothesis(), "xyz", device="cpu")
    with pytest.raises(dl.DNIError, match="not distinct indices"):
        dl.verify.perturbation(model, recs, "lstm", [0, 99], hypothesis(), rules, device="cpu")
    assert isinstance(a.frame, pl.DataFrame)
