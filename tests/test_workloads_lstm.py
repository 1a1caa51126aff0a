"""Reference char-LSTMs: quick variants train, beat their baselines, are deterministic and cached.

All tests share one model store (``DNI_LAB_MODELS`` points to a session temp
dir), so each quick model trains once per session.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from conftest import weights_equal

from hypotheses.grammars import boolean as grammar
from hypotheses.workloads import arith, boolean, charlm, parens, pysource, sql


@pytest.fixture(scope="session", autouse=True)
def model_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("models")
    old = os.environ.get("DNI_LAB_MODELS")
    os.environ["DNI_LAB_MODELS"] = str(path)
    yield path
    if old is None:
        os.environ.pop("DNI_LAB_MODELS", None)
    else:
        os.environ["DNI_LAB_MODELS"] = old


@pytest.fixture(scope="session")
def sql_checkpoints(model_store):
    # One training run yields the per-epoch models and the final one.
    module, encode, meta = sql.load(quick=True, checkpoints=True)
    checkpoints = meta.pop("checkpoints")
    return (module, encode, meta), checkpoints


@pytest.fixture(scope="session")
def sql_model(sql_checkpoints):
    return sql_checkpoints[0]


@pytest.fixture(scope="session")
def parens_model(model_store):
    return parens.load(quick=True)


@pytest.fixture(scope="session")
def specialized_model(model_store):
    return parens.load_specialized(n_units_s=4, weight=0.5, hypothesis="depth", quick=True)


@pytest.fixture(scope="session")
def boolean_model(model_store):
    return boolean.load(quick=True)


@pytest.fixture(scope="session")
def arith_model(model_store):
    return arith.load(quick=True)


@pytest.fixture(scope="session")
def pysource_model(model_store):
    return pysource.load(quick=True)


# -- shared pieces ----------------------------------------------------------------


def test_vocab_encodes_one_position_per_character():
    vocab = charlm.Vocab()
    x = vocab(["SELECT a", "(1)", "é"])
    assert x.shape == (3, 8) and x.dtype == torch.long
    assert (x[1, 3:] == vocab.pad_id).all()  # right padding
    assert x[2, 0] == vocab.unk_id  # outside the alphabet
    assert vocab.decode(x[0].tolist()) == "SELECT a"
    assert vocab("ab").shape == (1, 2)


def test_char_lstm_layout():
    model = charlm.CharLSTM(charlm.Vocab(), hidden=8, embed=4)
    names = dict(model.named_children())
    assert set(names) == {"embed", "lstm", "head"} and names["lstm"].batch_first
    logits, h = model.run(charlm.Vocab()(["abc", "a"]))
    assert logits.shape == (2, 3, len(charlm.Vocab())) and h.shape == (2, 3, 8)


def test_next_char_targets_skip_last_character_and_padding():
    x = charlm.Vocab()(["abc", "a"])
    y = charlm.next_char_targets(x)
    assert y[0].tolist() == [x[0, 1], x[0, 2], charlm.IGNORE]
    assert y[1].tolist() == [charlm.IGNORE] * 3


def test_trainer_is_deterministic_under_seed():
    recs = sql.records(30, seed=5)[:128]
    xy = charlm.next_char_data(charlm.Vocab(), recs)
    build = charlm.seeded(lambda: charlm.CharLSTM(charlm.Vocab(), 32), seed=3)
    runs = []
    for _ in range(2):
        model = build()
        charlm.train(model, *xy, epochs=1, batch_size=16, seed=3)
        runs.append(model)
    assert weights_equal(*runs)
    other = build()
    charlm.train(other, *xy, epochs=1, batch_size=16, seed=4)  # another data order
    assert not weights_equal(runs[0], other)


# -- each workload beats its baselines --------------------------------------------


def _check_meta(meta, floor):
    for key in ("accuracy", "baseline_majority", "baseline_bigram", "train_seconds", "config"):
        assert key in meta, key
    assert meta["accuracy"] > floor, meta
    assert meta["accuracy"] > meta["baseline_majority"] + 0.1, meta


def test_sql_model(sql_model):
    module, encode, meta = sql_model
    _check_meta(meta, 0.55)
    assert meta["accuracy"] > meta["baseline_bigram"] + 0.1
    assert meta["last_char_accuracy"] > 0.5
    assert module.lstm.hidden_size == 128
    assert encode(sql.records(3, seed=1)).shape[1] == sql.WIDTH


def test_parens_model(parens_model):
    _, _, meta = parens_model
    _check_meta(meta, 0.65)
    assert meta["accuracy"] > meta["baseline_bigram"]


def test_boolean_model(boolean_model):
    module, encode, meta = boolean_model
    _check_meta(meta, 0.97)
    assert module.lstm.hidden_size == 4
    # The value is read at the last symbol: 1 for true.
    recs = ["XXXXXXXXXXT|F&F", "XXXXXXXXXXF&T|T", "XXXXXXXXXXXXXXT", *boolean.records(300, seed=77)]
    pred = module(encode(recs))[:, -1].argmax(-1).tolist()
    assert pred[:3] == [0, 1, 1]
    truth = [int(grammar.evaluate(r)) for r in recs]
    assert np.mean(np.equal(pred, truth)) > 0.97


def test_arith_model(arith_model):
    _, _, meta = arith_model
    _check_meta(meta, 0.28)  # next digit/operator are near-uniform: the ceiling is low
    assert meta["accuracy"] > meta["baseline_bigram"]
    assert meta["type_accuracy"] > 0.8


def test_pysource_model(pysource_model):
    _, _, meta = pysource_model
    _check_meta(meta, 0.45)
    assert meta["accuracy"] > meta["baseline_bigram"]
    assert meta["files"] and len(pysource.records(quick=True)) > 10


# -- specialized units ------------------------------------------------------------


def test_specialized_units_follow_their_hypothesis(specialized_model):
    module, encode, meta = specialized_model
    s = meta["specialized_units"]
    assert meta["hypothesis"] == "depth" and len(s) == 4 and module.lstm.hidden_size == 16
    assert meta["accuracy"] > meta["baseline_majority"] + 0.2  # it still does its task
    fresh = parens.records(300, seed=12345)  # records the model never saw
    r = np.abs(parens.unit_correlations(module, encode, fresh, "depth"))
    others = np.delete(r, s)
    assert (r[s] > 0.8).all(), r
    assert r[s].min() > others.max() + 0.15, r


def test_specialized_units_are_drawn_from_the_seed(specialized_model):
    assert parens.specialized_units(16, 4, seed=0) == specialized_model[2]["specialized_units"]
    assert parens.specialized_units(16, 4, seed=0) != parens.specialized_units(16, 4, seed=1)


def test_specialized_arguments_are_validated(model_store):
    with pytest.raises(ValueError, match="unknown hypothesis"):
        parens.load_specialized(hypothesis="nope", quick=True)
    with pytest.raises(ValueError, match="n_units_s"):
        parens.load_specialized(n_units_s=17, quick=True)


def test_depth_hypothesis():
    assert parens.depth("0(1())").tolist() == [0, 1, 1, 2, 2, 1]
    assert parens.HYPOTHESES["depth"]("0(1())").tolist() == [-1, -0.5, -0.5, 0, 0, -0.5]


# -- determinism, cache, checkpoints ----------------------------------------------


def test_quick_training_is_deterministic(boolean_model, tmp_path):
    again, _, meta = boolean.load(quick=True, directory=tmp_path)
    assert weights_equal(boolean_model[0], again)
    assert meta["accuracy"] == boolean_model[2]["accuracy"]


def test_second_load_hits_the_cache(
    monkeypatch, sql_model, parens_model, specialized_model, boolean_model, arith_model,
    pysource_model,
):  # fmt: skip
    def no_training(*args, **kwargs):
        raise AssertionError("a cached model was retrained")

    monkeypatch.setattr(charlm, "train", no_training)
    loads = {
        sql.load: sql_model,
        parens.load: parens_model,
        boolean.load: boolean_model,
        arith.load: arith_model,
        pysource.load: pysource_model,
        lambda quick: parens.load_specialized(quick=quick): specialized_model,
    }
    for load, (module, _, meta) in loads.items():
        again, _, meta_again = load(quick=True)
        assert weights_equal(module, again) and meta_again == meta
        assert not again.training


def test_sql_checkpoints(sql_model, sql_checkpoints, monkeypatch):
    models = sql_checkpoints[1]
    epochs = [e for e, _ in models]
    assert epochs == list(range(sql_model[2]["config"]["epochs"] + 1))
    assert weights_equal(models[-1][1], sql_model[0])  # the last one is the final model
    assert not weights_equal(models[0][1], models[1][1])
    xy = charlm.next_char_data(charlm.Vocab(), sql.records(40, seed=99))
    acc = [charlm.accuracy(m, *xy) for _, m in models]
    assert acc[0] < 0.1 < acc[-1] and acc[-1] > acc[1]
    # Every checkpoint is cached: no training on the second request.
    monkeypatch.setattr(charlm, "train", None)
    again = sql.load_checkpoints(quick=True)
    assert all(weights_equal(a, b) for (_, a), (_, b) in zip(again, models, strict=True))
