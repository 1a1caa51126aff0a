"""The grid-world CNNs: train (quick), beat the majority class, cache, checkpoint; the fleeing
agent's CNN uses the ghost and has a ghost unit that its untrained copy lacks."""

from __future__ import annotations

import os
import time

import numpy as np
import polars as pl
import pytest
import torch
from conftest import assert_served_from_store

import dni_lab as dl
from hypotheses import gridworld as gw
from hypotheses.workloads import gridworld_cnn as cnn
from hypotheses.workloads import gridworld_flee as flee

#: the store the session was started with (CI's, which warm_store filled), before this
#: module's ``store`` fixture points DNI_LAB_MODELS at a private one
DEFAULT_STORE = os.environ.get("DNI_LAB_MODELS")


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


@pytest.fixture(scope="module")
def flee_trained():
    # The full variant (about a minute to train), from the default store that notebook 06
    # reads too and `make test`'s warm_store fills, so CI trains it once: the quick variant
    # never learns to use the ghost. The module's private store (``store``, still set when
    # this runs) would train both again (~200 s).
    with pytest.MonkeyPatch.context() as mp:
        if DEFAULT_STORE is None:
            mp.delenv("DNI_LAB_MODELS", raising=False)
        else:
            mp.setenv("DNI_LAB_MODELS", DEFAULT_STORE)
        return flee.load(), flee.load(blind=True)


@pytest.fixture(scope="module")
def flee_maps() -> list[gw.Frame]:
    return flee.data().frames[:400]


def test_the_policy_needs_the_ghost(flee_trained, flee_maps) -> None:
    (module, _, meta), (blind, _, blind_meta) = flee_trained
    assert meta["accuracy"] >= meta["majority_rate"] + 0.4
    assert blind_meta["config"]["blind"] and not meta["config"]["blind"]
    decides = flee.ghost_decides(flee_maps)
    assert 0.05 < decides.mean() < 0.5  # the ghost changes the agent's move in some maps
    hard = [m for m, d in zip(flee_maps, decides, strict=True) if d]
    # where the ghost decides, the seeing net is right far more often than the blind one,
    # and erasing the ghost from its input takes that away
    assert flee.accuracy(module, hard) > flee.accuracy(blind, hard) + 0.15
    assert flee.accuracy(module, hard) > flee.accuracy(module, hard, blind=True) + 0.2
    # the blind net cannot see the ghost move
    some = [m for m in flee_maps if (m == gw.EMPTY).any()][:20]
    x = flee.encode(some)
    free = [int(np.flatnonzero(m == gw.EMPTY)[0]) for m in some]  # an empty cell: no dot eaten
    moved = [flee.cell_edits(m, k)[0][0] for m, k in zip(some, free, strict=True)]
    assert not torch.equal(module(x), module(flee.encode(moved)))  # the seeing net does
    with torch.no_grad():
        assert torch.equal(blind(x), blind(flee.encode(moved)))


def test_a_ghost_unit_beats_the_untrained_copy(flee_trained, flee_maps) -> None:
    (module, encode, _), _ = flee_trained
    model = dl.Model(module, encode=encode, name="flee-cnn")
    check = dl.verify.untrained_baseline(
        model, [gw.ghost(radius=1)], flee_maps[:200],
        units=[(layer, "*") for layer in flee.LAYERS], measures=["local_iou", "corr"],
        eps=None, device="cpu",
    )  # fmt: skip
    rows = {r["measure"]: r for r in check.summary["by_hypothesis"].iter_rows(named=True)}
    # the ghost's 3x3 neighbourhood: the untrained copy's best unit stays near chance
    assert rows["corr"]["trained_best"] > max(0.5, 4 * rows["corr"]["untrained_best"])
    assert rows["local_iou"]["trained_best"] > max(0.2, 3 * rows["local_iou"]["untrained_best"])
    best = (check.frame.filter(pl.col("measure") == "corr")
            .sort("unit_score", descending=True, nulls_last=True).row(0, named=True))  # fmt: skip
    assert best["above_untrained"] and best["layer"] == "conv1"


def test_cell_edits_move_the_ghost_or_toggle_a_dot(flee_maps) -> None:
    m = flee_maps[3]
    assert flee.cell_edits(m, int(np.flatnonzero(m.reshape(-1) == gw.WALL)[0])) == []
    k = int(np.flatnonzero(m.reshape(-1) == gw.DOT)[0])
    (moved, a), (toggled, b) = flee.cell_edits(m, k)
    assert a is b is None and type(moved) is np.ndarray  # plain maps, no recorded episode
    assert (moved == gw.GHOST).sum() == 1 and moved.reshape(-1)[k] == gw.GHOST
    assert ((moved != m).sum()) == 2  # the ghost's old cell and cell k
    assert toggled.reshape(-1)[k] == gw.EMPTY and (toggled != m).sum() == 1
    near = flee.ghost_distance(flee_maps)
    ep = flee_maps[0].episode
    maze = gw.build_maze(ep.walls)
    assert near[0] == maze.dist[maze.index[ep.ghost[0]], maze.index[ep.pacman[0]]]
