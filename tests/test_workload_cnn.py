"""The grid-world CNN: trains (quick), beats the majority class, caches, checkpoints."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import assert_served_from_store

from hypotheses import gridworld as gw
from hypotheses.workloads import gridworld_cnn as cnn


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A private model store, through ``DNI_LAB_MODELS`` as users set it."""
    path = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DNI_LAB_MODELS", str(path))
        yield path


@pytest.fixture(scope="module")
def trained(store):
    start = time.perf_counter()
    module, encode, meta = cnn.load(quick=True)
    return module, encode, meta, time.perf_counter() - start


def _no_training(*args, **kwargs):
    raise AssertionError("the model store should have served this model")


def test_quick_model_beats_the_majority_class(trained) -> None:
    module, encode, meta, _ = trained
    # stated accuracy: >= 0.75 on held-out episodes, where always answering the
    # most frequent move scores about 0.27
    assert meta["majority_rate"] < 0.35
    assert meta["accuracy"] >= 0.75
    assert meta["accuracy"] >= meta["majority_rate"] + 0.4
    assert meta["history"][0] < meta["history"][-1]  # epoch 0 is the untrained network
    test = cnn.data(quick=True, split="test")
    with torch.no_grad():
        pred = module(encode(test.frames)).argmax(1).numpy()
    assert abs((pred == test.moves).mean() - meta["accuracy"]) < 1e-3


def test_second_load_hits_the_cache(trained, store, monkeypatch) -> None:
    module, _, meta, first_seconds = trained
    monkeypatch.setattr(cnn, "_train_all", _no_training)
    meta2 = assert_served_from_store(lambda: cnn.load(quick=True), module, first_seconds)
    assert meta2["accuracy"] == meta["accuracy"]
    assert len(list(store.glob("gridworld-cnn-*.pt"))) == cnn.QUICK["epochs"] + 1


def test_checkpoints_per_epoch_come_from_one_training_run(trained, monkeypatch) -> None:
    module = trained[0]
    monkeypatch.setattr(cnn, "_train_all", _no_training)  # all stored by load()
    ckpts = cnn.load_checkpoints(quick=True)
    assert [e for e, _ in ckpts] == list(range(cnn.QUICK["epochs"] + 1))
    last = ckpts[-1][1].state_dict()
    assert all(torch.equal(v, last[k]) for k, v in module.state_dict().items())
    first = ckpts[0][1].state_dict()
    assert not torch.equal(first["conv1.conv.weight"], last["conv1.conv.weight"])


def test_conv_layers_keep_the_grid(trained) -> None:
    module, encode, _, _ = trained
    maps = gw.generate(1, seed=99).frames[:5]
    shapes = {}
    hooks = [
        getattr(module, name).register_forward_hook(
            lambda m, i, o, name=name: shapes.__setitem__(name, tuple(o.shape))
        )
        for name in cnn.LAYERS
    ]
    with torch.no_grad():
        logits = module(encode(maps))
    for h in hooks:
        h.remove()
    assert logits.shape == (5, 4)
    assert all(s[0] == 5 and s[2:] == (15, 19) for s in shapes.values())
    assert set(shapes) == set(cnn.LAYERS)


def test_training_is_deterministic_under_seed(tmp_path) -> None:
    # two stores, two training runs: one through load(), one through load_checkpoints()
    a, _, meta_a = cnn.load(quick=True, epochs=1, directory=tmp_path / "a")
    ckpts = cnn.load_checkpoints(quick=True, epochs=1, directory=tmp_path / "b")
    assert [e for e, _ in ckpts] == [0, 1]
    b = ckpts[-1][1]
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y)
    assert len(list((tmp_path / "b").glob("*.pt"))) == 2
    assert (
        cnn.load(quick=True, epochs=1, directory=tmp_path / "b")[2]["accuracy"]
        == meta_a["accuracy"]
    )
