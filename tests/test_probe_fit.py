"""``dl.Probe``: fitted on a known concept, it agrees with scikit-learn on the same
activations; its threshold, frames and parameters; bad input gives clear errors."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import sklearn
import torch
from conftest import VOCAB, CharLM, encode_chars, paren, random_records
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score, roc_auc_score

import dni_lab as dl

# scikit-learn 1.8 names the penalty by l1_ratio (penalty= warns), older ones by penalty=
_SK18 = tuple(int(v) for v in sklearn.__version__.split(".")[:2]) >= (1, 8)


def planted_model() -> dl.Model:
    """A CharLM whose embedding unit 0 is 3 on '(' and ')' and small elsewhere: the concept
    "this character is a parenthesis" is planted in one unit of ``embed``."""
    torch.manual_seed(0)
    lm = CharLM()
    with torch.no_grad():
        lm.embed.weight[:, 0] = 0.1 * torch.randn(len(VOCAB) + 1)
        for c in "()":
            lm.embed.weight[VOCAB.index(c) + 1, 0] = 3.0
    return dl.Model(lm, encode=encode_chars, name="planted")


@pytest.fixture(scope="module")
def lm() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture(scope="module")
def train() -> list[str]:
    return random_records(200)


def rows(model: dl.Model, records: list[str], layer: str) -> tuple[np.ndarray, np.ndarray]:
    """The layer's activations one row per symbol (as dl.activations reads them) and the
    paren labels: the matrix scikit-learn is given."""
    cache = dl.activations(model, records, [layer])
    X = np.concatenate([cache.record(i, layer).numpy() for i in range(len(records))])
    y = np.concatenate([[c in "()" for c in r] for r in records]).astype(np.int64)
    return X.astype(np.float64), y


def test_a_planted_concept_is_found():
    model, recs = planted_model(), random_records(200)
    probe = dl.Probe("embed", folds=3).fit(model, recs, paren)
    assert probe.train_auroc_ > 0.999 and probe.cv_auroc_ > 0.999
    assert probe.score(model, random_records(60, seed=7), paren) > 0.999
    assert int(np.abs(probe.coef_[0]).argmax()) == 0  # the planted unit weighs most


@pytest.mark.parametrize(("penalty", "C"), [("l2", 1.0), ("l2", 0.05), ("l1", 0.2)])
def test_it_is_scikit_learns_logistic_regression(lm, train, penalty, C):
    X, y = rows(lm, train, "lstm")
    probe = dl.Probe("lstm", C=C, penalty=penalty, folds=None).fit(lm, train, paren)
    np.testing.assert_allclose(probe.mean_, X.mean(0), atol=1e-9)
    np.testing.assert_allclose(probe.scale_, X.std(0), rtol=1e-9)
    Xs = (X - X.mean(0)) / X.std(0)
    solver = "liblinear" if penalty == "l1" else "lbfgs"
    # liblinear penalises the intercept: a large intercept_scaling makes that negligible
    kind = {"l1_ratio": float(penalty == "l1")} if _SK18 else {"penalty": penalty}
    sk = LogisticRegression(C=C, solver=solver, tol=1e-10, max_iter=100_000,
                            intercept_scaling=1e3 if penalty == "l1" else 1, **kind)
    sk.fit(Xs, y)
    auc_sk = roc_auc_score(y, sk.decision_function(Xs))
    assert probe.train_auroc_ > 0.85
    assert probe.train_auroc_ == pytest.approx(auc_sk, abs=1e-4)
    assert probe.score(lm, train, paren) == pytest.approx(probe.train_auroc_, abs=1e-12)
    # the coefficients themselves: tight for L2 (float64 L-BFGS), looser for L1 (float32
    # Newton, the logreg measure's solver) against liblinear
    atol = 1e-4 if penalty == "l2" else 1e-2
    np.testing.assert_allclose(probe.coef_, sk.coef_, atol=atol)
    if penalty == "l1":
        assert (probe.coef_ == 0).any()  # L1 zeroes coefficients exactly


def test_the_threshold_maximises_training_f1(lm, train):
    probe = dl.Probe("lstm", folds=None).fit(lm, train, paren)
    _, y = rows(lm, train, "lstm")
    p = probe.predict_proba(lm, train)[:, 1]
    best = max(f1_score(y, p >= t) for t in np.unique(p))
    assert probe.train_f1_ == pytest.approx(best, abs=1e-12)
    assert f1_score(y, probe.predict(lm, train)) == pytest.approx(best, abs=1e-12)
    np.testing.assert_allclose(probe.predict_proba(lm, train).sum(1), 1.0)


def test_labels_fit_the_same_probe_as_the_hypothesis(lm, train):
    a = dl.Probe("lstm", folds=None).fit(lm, train, paren)
    labels = [[float(c in "()") for c in r] for r in train]
    b = dl.Probe("lstm", folds=None).fit(lm, train, labels=labels)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.threshold_ == b.threshold_
    assert b.score(lm, train, labels=labels) == a.train_auroc_


def test_undefined_labels_are_left_out(lm, train):
    labels = [[float(c in "()") if i % 2 else np.nan for i, c in enumerate(r)] for r in train]
    probe = dl.Probe("lstm", folds=None).fit(lm, train, labels=labels)
    assert probe.training_["symbols"] == sum(len(r) // 2 for r in train)


def test_record_labels_and_scores(lm, train):
    labels = [int("(" in r) for r in train]  # one label per record, read at every symbol
    probe = dl.Probe("lstm", folds=None, record_pool="max").fit(lm, train, labels=labels)
    per_record = probe.apply(lm, train[:5], per="record")
    assert per_record.columns == ["record", "symbols", "score", "probability", "predicted"]
    per_symbol = probe.apply(lm, train[:5])
    assert per_symbol.columns == ["record", "symbol", "score", "probability", "predicted",
                                  "record_score"]  # fmt: skip
    assert per_symbol.height == sum(len(r) for r in train[:5])
    top = per_symbol.group_by("record", maintain_order=True).agg(pl.col("score").max())
    np.testing.assert_array_equal(top["score"], per_record["score"])
    assert per_record["symbols"].to_list() == [len(r) for r in train[:5]]
    np.testing.assert_array_equal(per_symbol["score"], probe.decision_function(lm, train[:5]))


def test_scikit_learns_parameter_protocol():
    probe = dl.Probe("lstm", C=0.5)
    assert probe.get_params()["C"] == 0.5 and probe.get_params()["layer"] == "lstm"
    assert probe.set_params(C=2.0, folds=None).C == 2.0
    assert not any(k.endswith("_") for k in vars(probe))  # __init__ learns nothing
    with pytest.raises(dl.DNIError, match="no parameter 'lambda_'"):
        probe.set_params(lambda_=1)


def test_bad_input_is_named(lm, train):
    probe = dl.Probe("lstm", folds=None)
    with pytest.raises(dl.DNIError, match="labels holds 3 entries for 200 records"):
        probe.fit(lm, train, labels=[1, 0, 1])
    bad = [[0.0] * len(r) for r in train]
    bad[4] = [0.0]
    with pytest.raises(dl.DNIError, match=r"labels\[4\] holds 1 values, but record 4 has"):
        probe.fit(lm, train, labels=bad)
    with pytest.raises(dl.DNIError, match="only 1s on these records; a probe needs both"):
        probe.fit(lm, train, labels=[1] * len(train))
    with pytest.raises(dl.DNIError, match="binary concept"):
        probe.fit(lm, train, labels=[[2.0] * len(r) for r in train])
    with pytest.raises(dl.LayerError, match="nope"):
        dl.Probe("nope").fit(lm, train, paren)
    with pytest.raises(dl.DNIError, match="exactly one of them"):
        probe.fit(lm, train)
    with pytest.raises(dl.DNIError, match="not fitted"):
        probe.predict_proba(lm, train)
    with pytest.raises(dl.DNIError, match="penalty='l3'"):
        dl.Probe("lstm", penalty="l3").fit(lm, train, paren)
    with pytest.raises(dl.DNIError, match="folds=5 needs at least 5 records"):
        dl.Probe("lstm").fit(lm, train[:3], paren)


def test_another_models_weights_are_refused_in_memory_too(lm, train):
    probe = dl.Probe("lstm", folds=None).fit(lm, train, paren)
    torch.manual_seed(1)
    other = dl.Model(CharLM(), encode=encode_chars, name="other")
    with pytest.raises(dl.DNIError, match="bound to model 'toy'.*allow_other_model=True"):
        probe.predict_proba(other, train)
    assert probe.predict_proba(other, train, allow_other_model=True).shape[1] == 2
    narrow = dl.Model(CharLM(hidden=8), encode=encode_chars, name="narrow")
    with pytest.raises(dl.LayerError, match="reads 8 units here, the probe weighs 12"):
        probe.predict_proba(narrow, train, allow_other_model=True)
