"""A reliability battery: bad input, faults and tampering, as a careless or hostile user.

Each case either gives the right answer or raises a *named* dni_lab error (a
``DNIError`` subclass whose message names the offending object), never a raw
crash, a hang or a wrong result. A case that fails is counted as a *crash* when an
unexpected exception escaped, and as a *wrong result* when an answer or an expected
error was wrong (or a valid input was refused). ``pytest`` prints the counts in its
summary (``summary()``, called by ``pytest_terminal_summary`` in conftest.py).
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn

import dni_lab as dl

#: group -> (case, "held" | "crash" | "wrong") as the cases ran
OUTCOMES: dict[str, list[tuple[str, str]]] = {"bad input": [], "fault": [], "tampering": []}


def summary() -> str:
    """One line of counts, or "" when no case ran."""
    rows = [outcome for outcomes in OUTCOMES.values() for _, outcome in outcomes]
    if not rows:
        return ""
    n = Counter(rows)
    groups = ", ".join(
        f"{g} {sum(o == 'held' for _, o in outs)}/{len(outs)}" for g, outs in OUTCOMES.items()
    )
    return (
        f"reliability battery: {len(rows)} cases, {n['crash']} crashes, "
        f"{n['wrong']} wrong results ({groups})"
    )


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


def _inf_hypothesis():
    # NaN means "undefined here" (tests/test_undefined_values.py); an infinity is a bug
    inf = dl.hypothesis(lambda r: [float("inf")] * len(r), name="inf_h")
    with pytest.raises(dl.HypothesisError, match="inf_h"):
        _inspect(hypotheses=[inf])


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


# -- bad input -----------------------------------------------------------------------
class _FakeSeries:
    """What pandas.Series offers the data resolver (pandas is not installed here)."""

    dtype = object

    def __init__(self, values):
        self.values = list(values)

    def to_frame(self):
        raise NotImplementedError

    def tolist(self):
        return list(self.values)


class _FakeDataset:
    """What a Hugging Face Dataset offers the data resolver."""

    def __init__(self, columns):
        self.columns = columns
        self.column_names = list(columns)

    def select_columns(self, names):
        return _FakeDataset({n: self.columns[n] for n in names})

    def __getitem__(self, name):
        return self.columns[name]


def _same_as_list(data):
    def case():
        assert _inspect(data=data).equals(_inspect())

    return case


def _hypothesis_error_names_the_dataset_position():
    def h(r):
        return [0.0] if r == RECS[37] else [float(c == "(") for c in r]

    with pytest.raises(dl.HypothesisError, match="record 37"):
        _inspect(hypotheses=[dl.hypothesis(h, name="bad37")])


def _behavior_error_names_the_dataset_position():
    def nan_at_37(acts, recs):
        bad = torch.tensor([r == RECS[37] for r in recs])[:, None, None]
        return torch.where(bad, float("nan"), acts)

    with pytest.raises(dl.BehaviorError, match="record 37 of the data"):
        _inspect(behavior=nan_at_37)


def _hypothesis_raising_is_named():
    def boom(r):
        raise ValueError("parser failed")

    with pytest.raises(dl.HypothesisError, match="'boom' raised ValueError on record 0"):
        _inspect(hypotheses=[dl.hypothesis(boom)])


IDENTITY = dl.Model(nn.Identity(), symbols=lambda r: 1, name="identity")
VECTORS = list(np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32))


def _topk_negative_k():
    with pytest.raises(dl.DNIError, match="k must be a positive"):
        dl.examples.topk(IDENTITY, VECTORS, "", [0], k=-1, device="cpu")


def _knn_target_outside():
    for target in (-1, 50):
        with pytest.raises(dl.DNIError, match=f"target {target} is not a position"):
            dl.examples.knn(IDENTITY, VECTORS, "", [0], target, device="cpu")


def _index_of_no_records():
    with pytest.raises(dl.DNIError, match="no records"):
        dl.examples.NeuronIndex("", device="cpu").fit(IDENTITY, [])


def _mistyped_option():
    with pytest.raises(TypeError, match="'symbol_ag'"):
        dl.examples.topk(IDENTITY, VECTORS, "", [0], symbol_ag="mean")


def _rules_not_rules():
    with pytest.raises(dl.DNIError, match="not swap rules"):
        dl.verify.perturbation(_model(), RECS, "lstm", [0], paren, 5, device="cpu")


def _p_values_outside_0_1():
    with pytest.raises(dl.DNIError, match=r"\[0, 1\]; got 2.0 at position 2"):
        dl.verify.bh_qvalues([0.1, float("nan"), 2.0])


def _query_not_text():
    with pytest.raises(dl.QueryError, match="not NoneType"):
        dl.query(None, catalog=dl.Catalog(), namespace={})


# -- faults --------------------------------------------------------------------------
def _interrupt_leaves_the_cache_sound(tmp_path):
    calls = {"n": 0, "armed": True}

    def flaky(r):
        calls["n"] += 1
        if calls["armed"] and calls["n"] == 20:  # Ctrl-C in the middle of the second block
            calls["armed"] = False
            raise KeyboardInterrupt
        return [float(c == "(") for c in r]

    h = dl.hypothesis(flaky, name="flaky")
    with pytest.raises(KeyboardInterrupt):
        _inspect(hypotheses=[h], cache=tmp_path)
    _cache_agrees(h, tmp_path)


def _corrupt_entries_are_recomputed(tmp_path):
    ref = _inspect(cache=tmp_path)
    metas = sorted(tmp_path.glob("*/*.json"))
    assert metas
    metas[0].write_text("[]")  # once a TypeError on every rerun
    npy = metas[-1].with_suffix(".npy")
    npy.unlink()
    npy.mkdir()  # once an IsADirectoryError on every rerun
    # a new process: cache=tmp_path again would be served by this process's memory layer
    with pytest.warns(UserWarning, match="(?i)corrupt|recomput|remov"):
        again = _inspect(cache=dl.HypothesisCache(tmp_path))
    assert again.equals(ref)


def _unwritable_cache_falls_back(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="memory"):
        frame = _inspect(cache=blocker / "cache")
    assert frame.equals(_inspect(cache=False))


def _clear_leaves_in_flight_files(tmp_path):
    cache = dl.HypothesisCache(tmp_path)
    _inspect(cache=cache)
    in_flight = next(tmp_path.glob("*/")) / "k.npy.123.tmp"
    in_flight.write_bytes(b"another process is writing")
    cache.clear(disk=True)
    assert in_flight.exists() and not list(tmp_path.glob("*/*.npy"))


def _model_error_keeps_its_type():
    class Broken(CharLM):
        def forward(self, x):
            raise RuntimeError("CUDA out of memory (simulated)")

    with pytest.raises(RuntimeError, match="simulated"):
        _inspect(models=[dl.Model(Broken(hidden=6), encode_chars, name="broken")])


# -- the cache may never change a result -----------------------------------------------
LEVEL = 1.0


def _cache_agrees(h, directory) -> None:
    """A run served from ``directory``'s cache equals an uncached run."""
    assert _inspect(hypotheses=[h], cache=directory).equals(_inspect(hypotheses=[h], cache=False))


def _reads_a_global(r):
    return [float(c == "(") * LEVEL + float(c == ")") for c in r]


def _stale_after_a_global_changes(tmp_path):
    global LEVEL
    h = dl.hypothesis(_reads_a_global, name="global", kind="continuous")
    try:
        LEVEL = 1.0
        _inspect(hypotheses=[h], cache=tmp_path)
        LEVEL = -3.0
        _cache_agrees(h, tmp_path)
    finally:
        LEVEL = 1.0


def _stale_after_exec_source_changes(tmp_path):
    for ch in "()":
        ns: dict = {}
        exec(f"def h(r):\n    return [float(c == {ch!r}) for c in r]", ns)  # no source file
        _cache_agrees(dl.hypothesis(ns["h"], name="execd"), tmp_path)


def _stale_closure_over_a_tensor(tmp_path):
    def make(table):
        return dl.hypothesis(lambda r: [float(table[ord(c) % 5000]) for c in r], name="lut")

    for ch in "()":
        table = torch.zeros(5000)  # its repr is summarised: "...", not its values
        table[ord(ch)] = 1.0
        _cache_agrees(make(table), tmp_path)


def _export_keeps_the_parameters(tmp_path):
    path = tmp_path / "f.parquet"
    dl.export(_inspect(block_size=8), path)
    meta = dl.read_params(path)
    assert meta["block_size"] == 8 and meta["eps"] is None and meta["models"] == ["toy"]


# -- tampering -------------------------------------------------------------------------
def _index_file(tmp_path):
    index = dl.examples.NeuronIndex("", device="cpu").fit(IDENTITY, VECTORS)
    return index, index.save(tmp_path / "i.npz")


def _index_tampered(change, match):
    def case(tmp_path):
        _, path = _index_file(tmp_path)
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {k: z[k] for k in z.files if k != "meta"}
        change(path, meta, arrays)
        with pytest.raises(dl.DNIError, match=match):
            dl.examples.NeuronIndex.load(path)

    return case


def _rewrite(path, meta, arrays):
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


def _index_other_checkpoint(tmp_path):
    torch.manual_seed(1)
    first = dl.Model(CharLM(hidden=6, layers=1), encode_chars, name="lm")
    later = dl.Model(CharLM(hidden=6, layers=1), encode_chars, name="lm")  # other weights
    index = dl.examples.NeuronIndex("lstm", device="cpu").fit(first, RECS)
    with pytest.raises(dl.DNIError, match="another checkpoint"):
        dl.examples.topk(later, RECS, "lstm", [0, 1], k=10, index=index, device="cpu")


def _sql_quoted_name_hides_no_call(tmp_path):
    secret = tmp_path / "s.csv"
    secret.write_text("a\nsecret\n")
    cat = dl.Catalog()
    cat.add_model(_model())
    sql = f"""SELECT 1 AS "x'", (SELECT max(a) FROM read_csv('{secret}')) AS n FROM models"""
    with pytest.raises(dl.QueryError, match="reads files"):
        dl.query(sql, catalog=cat, namespace={})




def _feature_set_of_another_width():
    fs = dl.features.TopKSAE(9, 16, "lstm", name="wide", k=2)
    with pytest.raises(dl.LayerError, match="'wide' encodes 9-wide activations.*6 wide"):
        _inspect(units=[fs])


def _feature_weights_pickled(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"trainer": {"layer": 0}}))
    torch.save({"encoder.weight": _Payload()}, tmp_path / "ae.pt")
    with pytest.raises(dl.DNIError, match="weights_only=True refused it"):
        dl.features.load(tmp_path)


class _Payload:
    def __reduce__(self):
        return (print, ("pwned",))


def _feature_weights_truncated(tmp_path):
    fs = dl.features.StandardSAE(6, 8, "lstm", name="cut")
    dl.features.save(fs, tmp_path / "cut")
    w = tmp_path / "cut" / "sae_weights.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    with pytest.raises(dl.DNIError, match="truncated or not safetensors"):
        dl.features.load(tmp_path / "cut")


def _refused_before_reading(match: str, **kw) -> Callable[[], None]:
    """A bad parameter is named before the data yields a single record."""
    def case():
        read = []

        def watched():
            for r in RECS:
                read.append(r)
                yield r

        with pytest.raises(dl.DNIError, match=match):
            _inspect(data=watched(), **kw)
        assert read == [], f"{len(read)} records read before the error"
    return case


def _wrong_kind_record_keeps_the_frame():
    from dni_lab.backend.errors import RecordError

    def stream():
        yield from RECS[:40]
        yield ["not", "a", "string"]

    with pytest.raises(RecordError, match=r"record 40 of the data is .*list or tuple") as e:
        _inspect(data=stream())
    frame = e.value.partial_frame
    assert frame is not None and (frame["n_records"] == 32).all()
    assert dl.provenance(frame)["partial"]


CASES: list[tuple[str, str, Callable]] = [
    ("bad input", "wrong-length hypothesis", _wrong_length),
    ("bad input", "inf hypothesis", _inf_hypothesis),
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
    ("bad input", "data None", _raises(dl.DNIError, "data is None", data=None)),
    ("bad input", "mapping of one column", _same_as_list({"text": RECS})),
    ("bad input", "mapping of two columns", _raises(dl.DNIError, "one column",
                                                   data={"a": RECS, "b": RECS})),
    ("bad input", "pandas-like series", _same_as_list(_FakeSeries(RECS))),
    ("bad input", "HF-like dataset, one column", _same_as_list(_FakeDataset({"text": RECS}))),
    ("bad input", "HF-like dataset, two columns", _raises(
        dl.DNIError, "one column", data=_FakeDataset({"a": RECS, "b": RECS}))),
    ("bad input", "3-D token-id tensor", _raises(dl.TokenIdsError, r"3-D tensor.*one row per",
                                                data=torch.ones(2, 3, 4, dtype=torch.long))),
    ("bad input", "float input_ids", _raises(dl.TokenIdsError, "float32 values; token ids",
                                            data={"input_ids": torch.ones(2, 3)})),
    ("bad input", "attention mask of another shape", _raises(
        dl.TokenIdsError, "must mark each id",
        data={"input_ids": torch.ones(2, 3, dtype=torch.long),
              "attention_mask": torch.ones(3, 3, dtype=torch.long)})),
    ("bad input", "records without a length", _raises(dl.DNIError, "symbols=",
                                                     data=list(range(40)))),
    ("bad input", "unknown device", _raises(dl.DNIError, "unknown device 'tpu'", device="tpu")),
    ("bad input", "absent CUDA device", _raises(dl.DNIError, "not available", device="cuda:99")),
    ("bad input", "no measures", _raises(dl.MeasureError, "no measures", measures=[])),
    ("bad input", "unit out of range", _raises(dl.LayerError, "999", units=[("lstm", [999])])),
    ("bad input", "hypothesis raises", _hypothesis_raising_is_named),
    ("bad input", "hypothesis error position", _hypothesis_error_names_the_dataset_position),
    ("bad input", "behavior error position", _behavior_error_names_the_dataset_position),
    ("bad input", "top-k with k=-1", _topk_negative_k),
    ("bad input", "kNN target outside the data", _knn_target_outside),
    ("bad input", "index of no records", _index_of_no_records),
    ("bad input", "mistyped option", _mistyped_option),
    ("bad input", "swap rules of the wrong type", _rules_not_rules),
    ("bad input", "p-values outside [0, 1]", _p_values_outside_0_1),
    ("bad input", "query that is not text", _query_not_text),
    ("bad input", "feature set of another width", _feature_set_of_another_width),
    ("bad input", "workers= without cluster=", _raises(dl.DNIError, "workers=2 needs cluster=",
                                                      workers=2)),
    ("bad input", "eps of 0", _refused_before_reading(r"^eps must be a positive number or "
                                                      r"NULL \(None: read every record\)", eps=0)),
    ("bad input", "confidence of 1.5", _refused_before_reading(r"^confidence must be",
                                                               confidence=1.5)),
    ("bad input", "max_records of 0", _refused_before_reading(r"^max_records must be",
                                                              max_records=0)),
    ("bad input", "max_seconds of 0", _refused_before_reading(r"^max_seconds must be",
                                                              max_seconds=0)),
    ("bad input", "a record of the wrong kind mid-stream", _wrong_kind_record_keeps_the_frame),
    ("fault", "cancel keeps the partial frame", _cancel_keeps_partial_frame),
    ("fault", "error in a callback", _exception_in_callback_is_reraised_with_its_type),
    ("fault", "error in the model", _model_error_keeps_its_type),
    ("fault", "interrupt mid-run, then rerun", _interrupt_leaves_the_cache_sound),
    ("fault", "corrupt cache entries", _corrupt_entries_are_recomputed),
    ("fault", "unwritable cache directory", _unwritable_cache_falls_back),
    ("fault", "clear beside a writer", _clear_leaves_in_flight_files),
    ("fault", "cache after a global changed", _stale_after_a_global_changes),
    ("fault", "cache of exec-defined functions", _stale_after_exec_source_changes),
    ("fault", "cache of a closure over a tensor", _stale_closure_over_a_tensor),
    ("fault", "export keeps the parameters", _export_keeps_the_parameters),
    ("tampering", "pickle payload in the model store", _model_store_pickle),
    ("tampering", "SQL reading a file", _sql_reads_no_file),
    ("tampering", "pickle payload in a dictionary's ae.pt", _feature_weights_pickled),
    ("tampering", "feature weights truncated", _feature_weights_truncated),
    ("tampering", "SQL file call behind a quoted name", _sql_quoted_name_hides_no_call),
    ("tampering", "index of another checkpoint", _index_other_checkpoint),
    ("tampering", "index file truncated", _index_tampered(
        lambda p, m, a: p.write_bytes(p.read_bytes()[:300]), "truncated or corrupt")),
    ("tampering", "index meta pickled", _index_tampered(
        lambda p, m, a: np.savez(p, meta=np.array([m], dtype=object), **a), "pickled data")),
    ("tampering", "index meta key __class__", _index_tampered(
        lambda p, m, a: _rewrite(p, {**m, "__class__": "x"}, a), "__class__")),
    ("tampering", "index of an older format", _index_tampered(
        lambda p, m, a: _rewrite(p, {**m, "format": 1}, a), "format 1")),
    ("tampering", "index value changed", _index_tampered(
        lambda p, m, a: _rewrite(p, m, {**a, "upper_": a["upper_"] + 1}), "checksum")),
]


@pytest.mark.parametrize(("group", "name", "case"), CASES, ids=[c[1] for c in CASES])
def test_battery(group, name, case, tmp_path):
    outcome = "crash"
    try:
        if case.__code__.co_argcount:
            case(tmp_path)
        else:
            case()
        outcome = "held"
    except (AssertionError, pytest.fail.Exception, dl.DNIError):
        outcome = "wrong"  # a wrong answer, a missing error, or a valid input refused
        raise
    finally:
        OUTCOMES[group].append((name, outcome))
