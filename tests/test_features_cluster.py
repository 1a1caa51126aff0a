"""Feature sets on a local Ray: dl.inspect(..., units=[fs], cluster="local") gives the frame
of one process (the set travels to the workers with the units, pickled)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from tolerances import assert_close_f32

import dni_lab as dl
from dni_lab import features as F

ray = pytest.importorskip("ray")

KEYS = ["mid", "uid", "hid", "measure"]
DATA = random_records(150)
SYMBOLS = sum(map(len, DATA))  # what the scores sum over


@pytest.fixture(scope="module", autouse=True)
def _one_ray_per_module():
    # ray.init() without an address joins the newest Ray another process on this machine
    # recorded in /tmp/ray (a parallel test run's, which may shut down mid-run and leave
    # this one waiting on its GCS): RAY_ADDRESS=local makes cluster="local" start its own.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "local")
        yield
        from dni_lab.backend.cluster import shutdown

        shutdown()


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def _set(cls, d_sae: int, name: str, seed: int, **kw):
    g = torch.Generator().manual_seed(seed)
    fs = cls(8, d_sae, "lstm", name=name, **kw)
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return fs


def _both(units, measures, **kw):
    data = DATA
    one = dl.inspect(_model(), [paren, position], measures, data, units=units, **kw)
    many = dl.inspect(_model(), [paren, position], measures, data, units=units,
                      cluster="local", workers=2, **kw)  # fmt: skip
    return one.sort(KEYS), many.sort(KEYS)


def _assert_same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.height == b.height > 0
    assert a.select(KEYS, "layer", "unit", "group").equals(b.select(KEYS, "layer", "unit", "group"))
    for col in ("reason", "converged", "n_records"):
        assert a[col].to_list() == b[col].to_list(), col
    for col in ("unit_score", "group_score", "err"):
        x, y = a[col].to_numpy(), b[col].to_numpy()
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=col)
        # workers fold their blocks with their own thread counts: float32 sums in
        # another order over the records' symbols
        assert_close_f32(x, y, reduction=SYMBOLS, equal_nan=True, msg=col)


def test_a_sparse_set_alone_scores_as_in_one_process():
    # one TopK set as the model's only unit set: the workers take the sparse path
    topk = _set(F.TopKSAE, 48, "topk", 0, k=6)
    a, b = _both([topk], ["corr", "diffmeans"], eps=None, block_size=20, cache=False)
    assert set(a["layer"]) == {"lstm:topk"} and a.height == 48 * 2 * 2
    assert np.isfinite(a["unit_score"].to_numpy()).sum() > 20
    _assert_same(a, b)


def test_sets_beside_neurons_with_early_stopping_score_as_in_one_process():
    relu = _set(F.StandardSAE, 16, "relu", 1)
    jump = _set(F.JumpReLUSAE, 12, "jump", 2)
    units = [("lstm", "*"), relu, (jump, [0, 3, 5])]
    a, b = _both(units, ["corr", "diffmeans"], eps=0.2, block_size=16, cache=False)
    assert set(a["layer"]) == {"lstm", "lstm:relu", "lstm:jump"}
    _assert_same(a, b)
