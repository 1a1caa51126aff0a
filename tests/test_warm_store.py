"""``make test`` trains the reference models ahead, two at once: the store then holds
bit for bit the weights a test would have trained itself."""

from __future__ import annotations

import torch

from hypotheses.workloads import boolean, warm_store


def _models(directory) -> tuple:
    # the smallest reference model, two seeds: two trainings to run side by side
    return tuple(
        ("hypotheses.workloads.boolean", {"quick": True, "seed": s, "directory": str(directory)})
        for s in (0, 1)
    )


def test_warmed_models_equal_those_trained_inline(tmp_path):
    ahead, inline = tmp_path / "ahead", tmp_path / "inline"
    lines = warm_store.warm(_models(ahead), jobs=2)
    assert sorted(lines)[0].startswith("boolean quick=True seed=0") and len(lines) == 2
    assert len(list(ahead.glob("*.pt"))) == 2
    states = []
    for seed in (0, 1):
        warmed = boolean.load(quick=True, seed=seed, directory=ahead)[0].state_dict()
        trained = boolean.load(quick=True, seed=seed, directory=inline)[0].state_dict()
        assert warmed.keys() == trained.keys()
        assert all(torch.equal(warmed[k], trained[k]) for k in warmed)
        states.append(warmed)
    assert not all(torch.equal(states[0][k], states[1][k]) for k in states[0])  # two runs


def test_a_second_warm_trains_nothing(tmp_path):
    warm_store.warm(_models(tmp_path)[:1], jobs=1)
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.pt")}
    assert len(stamps) == 1
    warm_store.warm(_models(tmp_path)[:1], jobs=1)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.pt")} == stamps
