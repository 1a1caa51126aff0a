"""A ``Sequential`` block addressable as one layer; ModuleList/ModuleDict refused by name.

:func:`named_sequential` says whether a path names a Sequential (its output is the
block's) and raises for containers without a forward pass; the listing
(``model.layers``) leaves containers out, so default units and unit positions of
existing models do not change.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.errors import LayerError
from dni_lab.backend.extraction.module_names import layer_names, named_sequential


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Sequential(nn.Linear(5, 4)))
        self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 2)])
        self.named = nn.ModuleDict({"a": nn.Linear(4, 1)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        return self.heads[0](h) + self.heads[1](h) + self.named["a"](h)


def test_sequentials_are_named_not_listed():
    net = Net()
    assert named_sequential(net, "features") == "features"
    assert named_sequential(net, "features.2") == "features.2"  # nested
    assert named_sequential(net, "features.0") is None  # a leaf: listed already
    assert named_sequential(net, "nope") is None and named_sequential(net, "") is None
    names = layer_names(net)
    assert "features" not in names and "features.2" not in names
    assert names == ["features.0", "features.1", "features.2.0", "heads.0", "heads.1", "named.a"]


def test_lists_and_dicts_say_what_to_address():
    net = Net()
    with pytest.raises(LayerError, match=r"ModuleList.*no forward pass.*'heads\.0', 'heads\.1'"):
        named_sequential(net, "heads")
    with pytest.raises(LayerError, match=r"ModuleDict.*'named\.a'"):
        named_sequential(net, "named")


def test_a_sequential_output_is_its_last_entry():
    """What addressing 'features' reads: the block's output, the last entry's output."""
    net, x = Net(), torch.randn(2, 3)
    got = {}
    hooks = [
        net.features.register_forward_hook(lambda _m, _a, o: got.setdefault("block", o)),
        net.features[2][0].register_forward_hook(lambda _m, _a, o: got.setdefault("last", o)),
    ]
    net(x)
    for h in hooks:
        h.remove()
    assert torch.equal(got["block"], got["last"])


def test_model_resolves_a_sequential_by_path():
    model = dl.Model(Net(), name="seq")
    assert model.resolve_layer("features") == "features"
