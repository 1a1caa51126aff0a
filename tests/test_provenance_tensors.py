"""The weights hash takes any tensor a module can hold, and is computed before any data is read.

0-dim buffers (BatchNorm's ``num_batches_tracked``), parameters whose last stride is not 1,
half-precision, bool and complex tensors, tied weights: ``dl.inspect`` and ``dl.export``
hash them all; the hash says which values, shapes and dtypes a model had, not how they
were laid out in memory.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.engine import provenance as prov
from dni_lab.backend.engine.provenance import tensor_bytes, weights_sha256


class Odd(nn.Module):
    """Every awkward tensor at once."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.row = nn.Parameter(torch.randn(1, 3).t())  # shape (3, 1), strides (1, 3)
        self.tr = nn.Parameter(torch.randn(3, 4).t())  # transposed: not contiguous
        self.h16 = nn.Parameter(torch.randn(4, dtype=torch.float16))
        self.bf = nn.Parameter(torch.randn(2, 2, dtype=torch.bfloat16), requires_grad=False)
        self.register_buffer("count", torch.tensor(7))  # 0-dim, as BatchNorm's
        self.register_buffer("ignore", torch.tensor(-1e5))  # 0-dim float, as TransformerLens's
        self.register_buffer("mask", torch.ones(2, 3, dtype=torch.bool))
        self.register_buffer("phase", torch.randn(3, dtype=torch.complex64).conj())


def contiguous_twin(module: nn.Module) -> nn.Module:
    """The same values in plain row-major storage."""
    twin = copy.deepcopy(module)
    for mod in twin.modules():
        for name, p in list(mod.named_parameters(recurse=False)):
            setattr(mod, name, nn.Parameter(p.detach().clone(memory_format=torch.contiguous_format),
                                            requires_grad=p.requires_grad))  # fmt: skip
        for name, b in list(mod.named_buffers(recurse=False)):
            mod.register_buffer(name, b.resolve_conj().clone(memory_format=torch.contiguous_format))
    return twin


def test_every_awkward_tensor_hashes_and_layout_does_not_matter():
    odd = Odd()
    assert odd.row.stride() == (1, 3) and not odd.tr.is_contiguous() and odd.count.dim() == 0
    assert odd.phase.is_conj()
    digest = weights_sha256(odd)
    assert len(digest) == 64
    twin = contiguous_twin(odd)
    assert twin.tr.is_contiguous() and not twin.phase.is_conj()
    assert weights_sha256(twin) == digest  # the same values: the same hash
    for t in (odd.row, odd.tr, odd.count, odd.phase):  # the bytes are row-major values
        want = t.detach().resolve_conj().contiguous().numpy().tobytes()
        assert tensor_bytes(t) == want


def test_one_changed_weight_changes_the_hash():
    odd = Odd()
    before = weights_sha256(odd)
    with torch.no_grad():
        odd.tr[2, 1] += 1  # in place: the memo sees the version counter move
    assert weights_sha256(odd) != before
    odd2 = Odd()
    odd2.count.fill_(8)  # a 0-dim buffer counts too
    assert weights_sha256(odd2) != before


def test_equal_bytes_in_another_shape_or_dtype_hash_apart():
    data = torch.arange(6, dtype=torch.float32)
    shapes = [nn.ParameterDict({"w": nn.Parameter(data.reshape(s))}) for s in [(2, 3), (3, 2)]]
    as_int = nn.ParameterDict({"w": nn.Parameter(data.view(torch.int32).reshape(2, 3),
                                                 requires_grad=False)})  # fmt: skip
    hashes = {weights_sha256(m) for m in (*shapes, as_int)}
    assert len(hashes) == 3
    assert tensor_bytes(shapes[0]["w"]) == tensor_bytes(shapes[1]["w"])  # the bytes alone agree


def test_tied_weights_hash_once_and_survive_a_copy():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight  # tied, as a language model's

    tied = Tied()
    assert [n for n, _ in tied.named_parameters()] == ["embed.weight"]
    assert weights_sha256(copy.deepcopy(tied)) == weights_sha256(tied)
    untied = copy.deepcopy(tied)
    untied.head.weight = nn.Parameter(tied.embed.weight.detach().clone())
    assert weights_sha256(untied) != weights_sha256(tied)  # two weights now, by name


def test_an_offloaded_weight_without_its_value_still_hashes():
    m = nn.Linear(3, 2)
    m.weight = nn.Parameter(torch.empty(2, 3, device="meta"))  # no accelerate hook holds it
    assert len(weights_sha256(m)) == 64


def batchnorm_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3),
    )  # fmt: skip


IMAGES = [np.random.default_rng(i).random((6, 6)).astype(np.float32) for i in range(40)]


def cnn_model(net: nn.Module) -> dl.Model:
    return dl.Model(net, encode=lambda rs: torch.as_tensor(np.stack(rs))[:, None],
                    symbols=lambda r: 1, name="cnn")  # fmt: skip


@dl.hypothesis(kind="continuous")
def brightness(record) -> list[float]:
    return [float(record.mean())]


def test_a_batchnorm_cnn_inspects_and_exports(tmp_path):
    net = batchnorm_cnn().eval()
    assert net[1].num_batches_tracked.dim() == 0
    state = {k: v.clone() for k, v in net.state_dict().items()}
    f = dl.inspect(cnn_model(net), [brightness], data=IMAGES, units=[("4", "*"), ("5", "*")],
                   eps=None, cache=False)  # fmt: skip
    assert f.height == 4 + 3 and f["unit_score"].is_not_null().all()
    record = dl.provenance(f)
    assert record["weights_sha256"] == {"cnn": weights_sha256(net)}
    path = dl.export(f, tmp_path / "cnn.parquet")
    meta = json.loads(pq.read_schema(path).metadata[b"dni_lab"])
    assert meta["weights_sha256"] == {"cnn": weights_sha256(net)}
    assert meta["records_read"] == len(IMAGES)
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())  # bitwise


def test_a_model_that_cannot_be_hashed_fails_before_any_data_is_read(monkeypatch):
    net = batchnorm_cnn().eval()
    calls = []
    net.register_forward_hook(lambda *_: calls.append(1))

    def unhashable(module):
        raise RuntimeError("cannot hash this module")

    monkeypatch.setattr(prov, "_hash_weights", unhashable)
    with pytest.raises(RuntimeError, match="cannot hash"):
        dl.inspect(cnn_model(net), [brightness], data=IMAGES, units=[("5", "*")], eps=None,
                   cache=False)  # fmt: skip
    assert calls == []  # the model never ran on a record
