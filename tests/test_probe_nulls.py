"""Nulls beside a probe (``Probe.nulls``): a probe of a real concept beats a control task
per symbol type and random directions, a probe of noise does not; the control task is at
the model's own symbol level (token ids on a transformer, ``dl.verify.control_task`` too)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import paren, random_records
from test_probe_fit import planted_model

import dni_lab as dl
from dni_lab.backend.hypothesis.hypotheses import for_model
from dni_lab.backend.verify.controls import binary_control_table, symbol_types


@pytest.fixture(scope="module")
def data():
    model = planted_model()
    train, test = random_records(150), random_records(80, seed=7)
    return model, train, test, dl.Probe("lstm", folds=None).fit(model, train, paren)


def rows(frame: pl.DataFrame) -> dict[str, dict]:
    return {r["null"]: r for r in frame.iter_rows(named=True)}


def noise(records: list[str], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2, len(r)).astype(float) for r in records]


def test_a_real_concept_beats_its_nulls(data):
    model, train, test, probe = data
    base = dl.verify.untrained_copy(model, seed=1)
    frame = probe.nulls(model, test, paren, train=train, untrained=base, n_directions=8)
    assert frame.columns == ["null", "auroc", "sd", "lo", "hi", "n", "difference", "scored"]
    r = rows(frame)
    assert list(r) == ["task", "control_task", "random_direction", "untrained_model"]
    assert r["task"]["auroc"] == pytest.approx(probe.score(model, test, paren), abs=1e-12)
    assert r["control_task"]["n"] == 3 and r["random_direction"]["n"] == 8
    assert r["control_task"]["difference"] > 0.05  # selectivity
    assert r["task"]["auroc"] > r["random_direction"]["hi"]
    assert r["untrained_model"]["auroc"] > 0.5
    assert set(frame["scored"]) == {"held_out"}
    for k in r:
        assert r[k]["difference"] == pytest.approx(r["task"]["auroc"] - r[k]["auroc"])


def test_out_of_fold_without_training_records(data):
    model, _, test, probe = data
    r = rows(probe.nulls(model, test, paren, n_controls=2, n_directions=4))
    assert r["task"]["scored"] == "out_of_fold_5"  # the probe has folds=None: 5 folds
    assert r["task"]["auroc"] > 0.95 and r["control_task"]["difference"] > 0.05
    assert r["task"]["auroc"] > r["random_direction"]["hi"]


def test_noise_labels_do_not_beat_their_nulls(data):
    model, train, test, _ = data
    tr, te = noise(train, 1), noise(test, 2)
    probe = dl.Probe("lstm", folds=None).fit(model, train, labels=tr)
    r = rows(probe.nulls(model, test, labels=te, train=train, train_labels=tr, n_directions=8))
    assert abs(r["task"]["auroc"] - 0.5) < 0.06
    assert r["control_task"]["difference"] < 0  # identity is learnable, noise is not
    assert r["random_direction"]["difference"] < 0.06


def test_the_control_task_is_per_symbol_type_at_the_base_rate():
    rng = np.random.default_rng(0)
    types = rng.choice(list("abcdefghijklmn"), 5000)
    table = binary_control_table(types, 0.2, seed=3)
    assert set(table) == set(types.tolist()) and set(table.values()) == {0.0, 1.0}
    share = np.mean([table[t] for t in types])
    assert abs(share - 0.2) < 1 / 14  # within one type's share of the target
    assert table == binary_control_table(types, 0.2, seed=3)
    assert table != binary_control_table(types, 0.2, seed=4)
    assert sum(binary_control_table(types, 0.0, 0).values()) == 1  # never one class only
    assert sum(binary_control_table(types, 1.0, 0).values()) == 13
    assert symbol_types(planted_model(), "ab(") == ["a", "b", "("]  # a character model


def test_bad_input_is_named(data):
    model, train, test, probe = data
    with pytest.raises(dl.DNIError, match="n_directions=0: pass a positive count"):
        probe.nulls(model, test, paren, n_directions=0)
    with pytest.raises(dl.DNIError, match="exactly one of them"):
        probe.nulls(model, test)
    with pytest.raises(dl.DNIError, match="pass train_labels="):
        probe.nulls(model, test, labels=noise(test, 0), train=train)
    with pytest.raises(dl.DNIError, match="not fitted"):
        dl.Probe("lstm").nulls(model, test, paren)
    other = dl.verify.untrained_copy(model)
    with pytest.raises(dl.DNIError, match="allow_other_model=True"):
        probe.nulls(other, test, paren)


# -- a token model: the control task per token type -------------------------------------
@pytest.fixture(scope="module")
def hf():
    """A tiny GPT-2 (no download) as a dl.Model, and the HF tests' corpus and hypothesis."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from hf_workload import corpus, keyword, tiny_gpt2

    module, tok = tiny_gpt2(corpus(200, seed=1), n_layer=2)
    return dl.Model.from_hf(module, tok, name="g"), corpus, keyword


def test_a_token_models_symbol_types_are_its_token_ids(hf):
    gpt2, _, _ = hf
    text = "select a from tab where x1 = 1"
    ids = list(gpt2.tokenizer(text)["input_ids"])
    types = symbol_types(gpt2, text)
    assert types == ids[: gpt2.symbols(text)] and len(types) == gpt2.symbols(text)
    assert symbol_types(gpt2, ids) == types  # a token-id record: the same types
    assert symbol_types(None, text) == list(text)  # no model: the characters, as before


def test_the_control_task_of_a_token_model_is_per_token(hf):
    gpt2, corpus, keyword = hf
    recs = corpus(60, seed=4)
    ctrl = dl.verify.control_task(keyword, recs, seed=0, model=gpt2)
    assert ctrl.level == "token"
    (read,) = for_model([ctrl], gpt2)
    for r in recs[:10]:
        values = np.asarray(read.evaluate(r))[:, 0]
        ids = symbol_types(gpt2, r)
        assert len(values) == gpt2.symbols(r)  # one value per token, none pooled
        for t, v in zip(ids, values, strict=True):
            assert v == ctrl.table[t]  # one label per token id
    # selectivity runs the control at the token level too
    sel = dl.verify.selectivity(gpt2, [keyword], recs, units=[("transformer.h.1", "*")])
    assert sel["control_score"].is_not_null().all()


def test_a_probe_on_a_token_model_has_its_nulls(hf):
    gpt2, corpus, keyword = hf
    train, test = corpus(120, seed=5), corpus(60, seed=6)
    probe = dl.Probe("transformer.h.1", folds=None, C=0.1).fit(gpt2, train, keyword)
    r = rows(probe.nulls(gpt2, test, keyword, train=train, n_directions=4))
    assert r["control_task"]["n"] >= 1 and np.isfinite(r["control_task"]["auroc"])
    assert r["task"]["auroc"] > r["random_direction"]["auroc"]
