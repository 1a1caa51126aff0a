"""A reliability battery: bad input, faults and tampering, as a careless or hostile user.

Each case either gives the right answer or raises a *named* dni_lab error (a
``DNIError`` subclass whose message names the offending object), never a raw
crash, a hang or a wrong result. ``pytest`` prints the battery's counts in its
summary (see ``pytest_terminal_summary`` in conftest.py).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn

import dni_lab as dl

OUTCOMES: dict[str, list[tuple[str, bool]]] = {"bad input": [], "fault": [], "tampering": []}


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=6), encode_chars, name="toy")


RECS = random_records(48, seed=3)


@dl.hypothesis(kind="binary")
def paren(r):
    return [c in "()" for c in r]


def _inspect(**kw):
    args = {"models": [_model()], "hypotheses": [paren], "measures": ["corr"], "data": RECS,
            "units": [("lstm", "*")], "eps": None, "block_size": 16}
    args.update(kw)
    return dl.inspect(**args)


def _raises(error: type[Exception], match: str, **kw) -> Callable[[], None]:
    def case():
        with pytest.raises(error, match=match):
            _inspect(**kw)
    return case


def _wrong_length():
    bad = dl.hypothesis(lambda r: [0.0] * (len(r) + 1), name="too_long")
    with pytest.raises(dl.HypothesisError, match="too_long"):
        _inspect(hypotheses=[bad])


def _constant_is_null_with_reason():
    const = dl.hypothesis(lambda r: [1.0] * len(r), name="const")
    f = _inspect(hypotheses=[const])
    assert f["unit_score"].null_count() == f.height
    assert f["reason"].str.contains("constant").all()


def _nan_hypothesis():
    nan = dl.hypothesis(lambda r: [float("nan")] * len(r), name="nan_h")
    with pytest.raises(dl.HypothesisError, match="nan_h"):
        _inspect(hypotheses=[nan])


def _arrow_array_data():
    ref = _inspect()
    assert _inspect(data=pa.chunked_array([RECS[:20], RECS[20:]])).equals(ref)


def _cancel_keeps_partial_frame():
    run = _inspect(background=True, data=RECS * 40, block_size=8)
    run.cancel()
    frame = run.result()
    assert frame.height > 0 and run.progress.cancelled


def _exception_in_callback_is_reraised_with_its_type():
    def boom(_):
        raise RuntimeError("callback failed")
    with pytest.raises(RuntimeError, match="callback failed"):
        _inspect(on_block=boom)


def _model_store_pickle(tmp_path):
    from hypotheses.workloads.store import cached_model, config_key

    def build():
        return nn.Linear(2, 1)

    def train(m):
        return {"accuracy": 1.0}

    cached_model("t", {}, build, train, tmp_path)
    weights = tmp_path / f"{config_key('t', {})}.pt"
    weights.write_bytes(pickle.dumps({"x": np.arange(3)}))
    sidecar = weights.with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    import hashlib

    meta["sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    sidecar.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="corrupt"):
        cached_model("t", {}, build, train, tmp_path)


def _sql_reads_no_file(tmp_path):
    secret = tmp_path / "s.csv"
    secret.write_text("a\nsecret\n")
    cat = dl.Catalog()
    cat.add_model(_model())
    with pytest.raises(dl.QueryError) as e:
        dl.query(f"SELECT (SELECT count(*) FROM read_csv('{secret}')) AS n FROM models",
                 catalog=cat, namespace={})
    assert "secret" not in str(e.value).split("\n")[0]


def _typo_in_query():
    cat = dl.Catalog()
    cat.add_model(_model())
    with pytest.raises(dl.QueryError, match="(?i)did you mean .models."):
        dl.query("SELECT mid FROM modles", catalog=cat, namespace={})


CASES: list[tuple[str, str, Callable]] = [
    ("bad input", "wrong-length hypothesis", _wrong_length),
    ("bad input", "NaN hypothesis", _nan_hypothesis),
    ("bad input", "constant hypothesis", _constant_is_null_with_reason),
    ("bad input", "unknown layer", _raises(dl.LayerError, "lstmm", units=[("lstmm", "*")])),
    ("bad input", "unknown measure", _raises(dl.DNIError, "corrr", measures=["corrr"])),
    ("bad input", "eps as a string", _raises(dl.DNIError, "eps", eps="0.1")),
    ("bad input", "zero block size", _raises(dl.DNIError, "block_size", block_size=0)),
    ("bad input", "empty data", _raises(dl.DNIError, "no records", data=[])),
    ("bad input", "two-column table", _raises(dl.DNIError, "one column",
                                              data=pl.DataFrame({"a": RECS, "b": RECS}))),
    ("bad input", "arrow array data", _arrow_array_data),
    ("bad input", "typo in a query", _typo_in_query),
    ("fault", "cancel keeps the partial frame", _cancel_keeps_partial_frame),
    ("fault", "error in a callback", _exception_in_callback_is_reraised_with_its_type),
    ("tampering", "pickle payload in the model store", _model_store_pickle),
    ("tampering", "SQL reading a file", _sql_reads_no_file),
]


@pytest.mark.parametrize(("group", "name", "case"), CASES, ids=[c[1] for c in CASES])
def test_battery(group, name, case, tmp_path):
    ok = False
    try:
        if case.__code__.co_argcount:
            case(tmp_path)
        else:
            case()
        ok = True
    finally:
        OUTCOMES[group].append((name, ok))
