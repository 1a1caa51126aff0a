"""The model store never unpickles code and treats every damaged entry as 'retrain'."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest
import torch
from torch import nn

from hypotheses.workloads.store import cached_model, config_key

CONFIG = {"width": 3}


class Boom:
    """Would run code on unpickling if the store ever allowed it."""

    def __reduce__(self):
        return (exec, ("raise SystemExit('unpickled code ran')",))


def _train(calls: list):
    def train(module: nn.Module) -> dict:
        calls.append(1)
        with torch.no_grad():
            module.weight.fill_(0.5)
        return {"accuracy": 1.0}

    return train


def _entry(tmp_path):
    stem = config_key("toy", CONFIG)
    return tmp_path / f"{stem}.pt", tmp_path / f"{stem}.json"


def test_second_load_is_served_from_the_store(tmp_path):
    calls: list = []
    cached_model("toy", CONFIG, lambda: nn.Linear(3, 1), _train(calls), tmp_path)
    m, meta = cached_model("toy", CONFIG, lambda: nn.Linear(3, 1), _train(calls), tmp_path)
    assert calls == [1] and meta["accuracy"] == 1.0
    assert torch.all(m.weight == 0.5)


@pytest.mark.parametrize("damage", ["pickle_payload", "sidecar_list", "sidecar_garbage", "shape"])
def test_damaged_entries_are_retrained_with_a_warning(tmp_path, damage):
    calls: list = []
    cached_model("toy", CONFIG, lambda: nn.Linear(3, 1), _train(calls), tmp_path)
    weights, sidecar = _entry(tmp_path)
    if damage == "pickle_payload":  # checksum made to match: only the payload is hostile
        weights.write_bytes(pickle.dumps(Boom()))
        meta = json.loads(sidecar.read_text())
        meta["sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
        sidecar.write_text(json.dumps(meta))
    elif damage == "sidecar_list":
        sidecar.write_text("[]")
    elif damage == "sidecar_garbage":
        sidecar.write_text("{not json")
    else:  # tensors of another architecture, checksum matching
        torch.save(nn.Linear(5, 2).state_dict(), weights)
        meta = json.loads(sidecar.read_text())
        meta["sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
        sidecar.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="corrupt"):
        m, _ = cached_model("toy", CONFIG, lambda: nn.Linear(3, 1), _train(calls), tmp_path)
    assert calls == [1, 1] and torch.all(m.weight == 0.5)
    # the retrained entry is whole again
    cached_model("toy", CONFIG, lambda: nn.Linear(3, 1), _train(calls), tmp_path)
    assert calls == [1, 1]
