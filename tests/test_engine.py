"""dl.inspect end to end: padding, several models, generators, runs, errors, export."""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn

import dni_lab as dl
from dni_lab.backend.engine.frames import SCHEMA
from dni_lab.backend.engine.inspection import Inspection
from dni_lab.backend.engine.params import InspectParams
from dni_lab.backend.measures.logreg import LogReg


def test_frame_schema_and_rows(char_model, records, hyps):
    f = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", "*")], eps=None)
    assert f.schema == pl.Schema(SCHEMA)
    assert f.height == 12 * 2
    assert set(f["hid"]) == {"paren", "position"}
    assert f["uid"].n_unique() == 12 and f["converged"].all()
    assert f["n_records"].unique().to_list() == [len(records)]
    assert not f["unit_score"].is_nan().any()


def test_padding_does_not_change_scores(records, hyps):
    torch.manual_seed(5)
    lm = CharLM()
    a = dl.Model(lm, encode=encode_chars, name="a")
    b = dl.Model(lm, encode=lambda r: encode_chars(r, pad_to=40), name="b", padded=True)
    fa = dl.inspect([a], hyps, ["corr"], records, units=[("lstm.l0", "*")], eps=None, block_size=7)
    fb = dl.inspect([b], hyps, ["corr"], records, units=[("lstm.l0", "*")], eps=None, block_size=64)
    np.testing.assert_allclose(fa["unit_score"].to_numpy(), fb["unit_score"].to_numpy(), atol=1e-5)


def test_several_models_of_different_architectures_and_generator_data(records, hyps):
    torch.manual_seed(6)
    lstm = dl.Model(CharLM(hidden=8), encode=encode_chars, name="lstm8")
    gru = dl.Model(CharLM(hidden=5, layers=1, cell=nn.GRU), encode=encode_chars, name="gru5")
    gen = (r for r in records)
    f = dl.inspect([lstm, gru], hyps, ["corr"], gen, units=[("lstm", "*")], eps=None)
    counts = f.group_by("mid").len().sort("mid")
    assert counts["len"].to_list() == [5 * 2, 8 * 2]


CALLS = {"n": 0}  # a call counter: the fingerprint would see it change, so it is ignored
__fingerprint_ignore__ = ("CALLS",)


def test_hypothesis_cache_spares_calls_across_models(records, tmp_path):
    calls = CALLS
    calls["n"] = 0

    @dl.hypothesis
    def counted(r):
        CALLS["n"] += 1
        return [c == "a" for c in r]

    cache = dl.HypothesisCache(tmp_path / "c")
    m1 = dl.Model(CharLM(), encode=encode_chars, name="epoch1")
    m2 = dl.Model(CharLM(), encode=encode_chars, name="epoch2")
    dl.inspect([m1], [counted], ["corr"], records, units=[("lstm", "*")], eps=None, cache=cache)
    assert calls["n"] == len(records)
    dl.inspect([m2], [counted], ["corr"], records, units=[("lstm", "*")], eps=None, cache=cache)
    assert calls["n"] == len(records)  # memory hit
    fresh = dl.HypothesisCache(tmp_path / "c")  # a new process: disk hit
    dl.inspect([m2], [counted], ["corr"], records, units=[("lstm", "*")], eps=None, cache=fresh)
    assert calls["n"] == len(records) and fresh.hits > 0


def test_wrong_length_names_hypothesis_record_and_lengths(char_model, records):
    def short(r):
        return [0.0] * (len(r) - 1)

    with pytest.raises(dl.HypothesisError) as e:
        dl.inspect([char_model], [short], ["corr"], records, units=[("lstm", "*")])
    msg = str(e.value)
    assert "'short'" in msg and "record 0" in msg
    assert (
        f"returned {len(records[0]) - 1} values" in msg and f"has {len(records[0])} symbols" in msg
    )


def test_inf_and_non_numeric_hypotheses(char_model, records):
    # NaN is "undefined here", not an error (tests/test_undefined_values.py)
    def inf_hyp(r):
        return [float("inf")] * len(r)

    def words(r):
        return ["x"] * len(r)

    with pytest.raises(dl.HypothesisError, match="'inf_hyp'.*inf"):
        dl.inspect([char_model], [inf_hyp], ["corr"], records, units=[("lstm", "*")])
    with pytest.raises(dl.HypothesisError, match="'words'.*non-numeric"):
        dl.inspect([char_model], [words], ["corr"], records, units=[("lstm", "*")])


def test_constant_hypothesis_is_null_with_reason(char_model, records):
    def never(r):
        return [0] * len(r)

    f = dl.inspect([char_model], [never], ["corr"], records, units=[("lstm", "*")], eps=None)
    assert f["unit_score"].is_null().all()
    assert f["reason"].unique().to_list() == ["hypothesis is constant over the symbols read"]


def test_unknown_layer_and_measure(char_model, records, hyps):
    with pytest.raises(dl.LayerError, match="(?i)did you mean 'lstm'"):
        dl.inspect([char_model], hyps, ["corr"], records, units=[("lstn", "*")])
    with pytest.raises(dl.MeasureError, match="(?i)did you mean 'corr'"):
        dl.inspect([char_model], hyps, ["cor"], records, units=[("lstm", "*")])
    with pytest.raises(dl.LayerError, match="unit index 99"):
        dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", [0, 99])])


def test_positional_layers_as_in_the_blog(char_model, records, hyps):
    f = dl.inspect([char_model], hyps, ["corr"], records, units=[(1, "*"), (2, [0, 3])], eps=None)
    assert set(f["layer"]) == {"lstm", "head"}
    assert sorted(f.filter(pl.col("layer") == "head")["unit"].unique()) == [0, 3]


def test_uids_are_stable_across_queries(char_model, records, hyps):
    a = dl.inspect([char_model], hyps, ["corr"], records, units=[("head", [2])], eps=None)
    b = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", "*"), ("head", "*")])
    uid_a = a["uid"][0]
    assert b.filter((pl.col("layer") == "head") & (pl.col("unit") == 2))["uid"][0] == uid_a


def test_background_run_streams_and_cancels(char_model, hyps):
    data = random_records(3000, seed=9)
    seen = []
    gate = threading.Event()

    def on_block(run):
        seen.append(run.progress.records_read)
        if len(seen) == 2:
            gate.set()

    run = dl.inspect(
        [char_model], hyps, ["corr"], data, units=[("lstm", "*")], eps=None, block_size=100,
        background=True, on_block=on_block,
    )  # fmt: skip
    assert gate.wait(60), "no blocks arrived"
    live = run.frame
    assert live.height == 24 and live["n_records"].max() >= 100
    run.cancel()
    final = run.result(timeout=60)
    assert run.progress.cancelled and run.done
    assert final.height == 24 and not final["converged"].any()
    assert final["n_records"].max() < 3000
    assert seen == sorted(seen)
    with pytest.raises(dl.CancelledError):
        run.result(partial=False)


def test_background_error_is_reraised(char_model):
    def bad(r):
        return [1.0]

    run = dl.inspect([char_model], [bad], ["corr"], ["abc"], units=[("lstm", "*")], background=True)
    with pytest.raises(dl.HypothesisError):
        run.result(timeout=30)


def test_export_formats_with_query_metadata(char_model, records, hyps, tmp_path):
    f = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", "*")], eps=None)
    params = {"eps": None, "measures": ["corr"]}
    for name in ("s.parquet", "s.csv", "s.arrow", "s.json"):
        dl.export(f, tmp_path / name, params)
    back = pl.read_parquet(tmp_path / "s.parquet")
    assert back.equals(f)
    assert dl.read_params(tmp_path / "s.parquet") == params
    assert pl.read_ipc(tmp_path / "s.arrow").equals(f)
    assert pl.read_csv(tmp_path / "s.csv").height == f.height
    with pytest.raises(ValueError, match="parquet"):
        dl.export(f, tmp_path / "s.xlsx")


def test_user_function_measure_slow_path(char_model, records, hyps):
    def absdiff(u, h):
        return float(np.mean(np.abs(u - h)))

    f = dl.inspect([char_model], hyps, ["corr", absdiff], records, units=[("lstm", [0])], eps=None)
    assert set(f["measure"]) == {"corr", "absdiff"}
    assert f.filter(pl.col("measure") == "absdiff")["unit_score"].is_not_null().all()


def test_empty_data_and_bad_parameters(char_model, hyps):
    with pytest.raises(dl.DNIError, match="no records"):
        dl.inspect([char_model], hyps, ["corr"], [], units=[("lstm", "*")])
    with pytest.raises(dl.DNIError, match="eps"):
        dl.inspect([char_model], hyps, ["corr"], ["ab"], eps=-1)


def test_inspect_params_validate_and_travel_to_export(char_model, records, hyps, tmp_path):
    for bad, word in (
        (dict(block_size=0), "block_size"),
        (dict(confidence=1.0), "confidence"),
        (dict(max_records=-2), "max_records"),
        (dict(behavior=3), "behavior"),
    ):
        with pytest.raises(dl.DNIError, match=f"^{word} must be .*got") as e:
            InspectParams(**bad)
        assert "(the default)" in str(e.value)
    p = InspectParams(eps=None, device="cpu", behavior=lambda a, r: a)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.eps = 0.1  # type: ignore[misc]
    meta = p.replace(block_size=64).to_metadata()
    assert meta["block_size"] == 64 and meta["behavior"] == "function" and meta["eps"] is None
    assert p.block_size == 512  # replace() copies
    insp = Inspection([char_model], hyps, ["corr"], records[:40], [("lstm", [0])], p)
    f = insp.run()
    full = insp.metadata()
    assert full["models"] == ["toy"] and full["hypotheses"] == ["paren", "position"]
    dl.export(f, tmp_path / "s.parquet", p)
    assert dl.read_params(tmp_path / "s.parquet")["behavior"] == "function"
    # dl.inspect and the engine read the same object
    same = dl.inspect(
        [char_model],
        hyps,
        ["corr"],
        records[:40],
        units=[("lstm", [0])],
        eps=None,
        device="cpu",
        behavior=p.behavior,
    )
    assert same.equals(f)


def test_data_from_arrow_tables(char_model, records, hyps):
    import pyarrow as pa

    ref = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", [0])], eps=None)
    for data in (
        pl.Series("text", records),
        pa.table({"text": records}),
        pl.DataFrame({"t": records}),
        pa.array(records),
        pa.chunked_array([records[:5], records[5:]]),
    ):
        f = dl.inspect([char_model], hyps, ["corr"], data, units=[("lstm", [0])], eps=None)
        assert f.equals(ref)
    for two in (pl.DataFrame({"a": records, "b": records}), pa.table({"a": records, "b": records})):
        with pytest.raises(dl.DNIError, match="one column"):
            dl.inspect([char_model], hyps, ["corr"], two)


def test_data_from_pandas_series():
    pd = pytest.importorskip("pandas")
    from dni_lab.backend.engine.resolve import as_records

    assert as_records(pd.Series(["ab", "cd"])) == ["ab", "cd"]
    assert as_records(pd.DataFrame({"t": ["ab", "cd"]})) == ["ab", "cd"]
    with pytest.raises(dl.DNIError, match="one column"):
        as_records(pd.DataFrame({"a": ["x"], "b": ["y"]}))


class Replay(nn.Module):
    def forward(self, x):
        return x


def _signals(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    strong = rng.random(20)
    return strong, (rng.random(20) < 0.5).astype(float)


def test_converged_hypotheses_stop_being_evaluated():
    calls = {"strong": 0, "weak": 0}

    def encode(seeds):  # the unit follows `strong` closely and ignores `weak`
        s = np.stack([_signals(x)[0] for x in seeds])
        noise = np.random.default_rng(len(seeds)).normal(0, 0.05, s.shape)
        return torch.tensor(s + noise, dtype=torch.float32)[..., None]

    @dl.hypothesis(kind="continuous")
    def strong(seed):
        calls["strong"] += 1
        return _signals(seed)[0]

    @dl.hypothesis
    def weak(seed):
        calls["weak"] += 1
        return _signals(seed)[1]

    model = dl.Model(
        Replay(), layouts={"": "n s u"},  # a stand-in: its output is declared
        encode=encode, symbols=lambda s: 20, name="replay")
    f = dl.inspect([model], [strong, weak], ["corr"], range(20_000), units=[("", "*")],
                   eps=0.005, block_size=256, cache=False)  # fmt: skip
    n = dict(zip(f["hid"], f["n_records"], strict=True))
    assert n["strong"] < n["weak"] < 20_000
    assert calls["strong"] == n["strong"] and calls["weak"] == n["weak"]


def test_joint_measure_scores_each_unit_group(char_model, records, hyps):
    f = dl.inspect(
        [char_model], hyps, ["logreg", "corr"], records,
        units=[("lstm.l0", "*"), ("lstm", "*")], eps=None,
    )  # fmt: skip
    lr = f.filter(pl.col("measure") == "logreg")
    assert sorted(lr["group"].unique()) == ["lstm.l0[*]", "lstm[*]"]
    paren = lr.filter(pl.col("hid") == "paren")
    # one F1 per (group, hypothesis), broadcast over the group's units
    assert paren.group_by("group").agg(pl.col("group_score").n_unique())["group_score"].max() == 1
    assert paren["group_score"].min() > 0.5  # parentheses are easy to read off an LSTM
    pos = lr.filter(pl.col("hid") == "position")
    assert pos["unit_score"].is_null().all() and "logreg" in pos["reason"][0]


def test_constant_hypothesis_does_not_block_early_stopping():
    model = dl.Model(
        Replay(), layouts={"": "n s u"},  # a stand-in: its output is declared
        encode=lambda seeds: torch.tensor(
        np.stack([_signals(x)[0] for x in seeds]), dtype=torch.float32)[..., None],
        symbols=lambda s: 20, name="replay")  # fmt: skip

    @dl.hypothesis(kind="continuous")
    def strong(seed):
        return _signals(seed)[0]

    @dl.hypothesis
    def never(seed):
        return [0] * 20

    f = dl.inspect([model], [strong, never], ["corr"], range(20_000), units=[("", "*")],
                   eps=0.05, block_size=512, cache=False)  # fmt: skip
    n = dict(zip(f["hid"], f["n_records"], strict=True))
    assert n["never"] < 20_000 and n["strong"] < 20_000
    assert f.filter(pl.col("hid") == "never")["reason"][0].startswith("hypothesis is constant")


def test_model_moved_once_per_run_not_per_block(char_model, records, hyps, monkeypatch):
    calls = []
    orig = nn.Module.to

    def counting_to(self, *args, **kwargs):
        calls.append(args)
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "to", counting_to)
    dl.inspect([char_model], hyps, ["corr"], records, eps=None, block_size=8, device="cpu")
    # the module already lives on the CPU: nothing is moved at all, whatever the blocks
    assert calls == []


def test_progress_rate_and_time_left_never_grow():
    p = dl.Progress(total_records=1000)
    p.records_read = 100
    p.mark(1.0)  # 100 records/s: 9 s left
    assert p.records_per_s == pytest.approx(100.0)
    assert p.time_left_s == pytest.approx(9.0)
    p.records_read = 150
    p.mark(3.0)  # slower now (8.5 * 2 = 17 s at the average rate), but the promise was 7 s
    assert p.time_left_s == pytest.approx(7.0)
    p.done = True
    assert p.time_left_s == 0.0


def test_nan_behavior_names_the_record_position_in_the_data():
    def encode(records):
        x = torch.ones(len(records), 4, 3)
        for i, r in enumerate(records):
            if r == 37:
                x[i, 2, 1] = float("nan")
        return x

    model = dl.Model(
        Replay(), layouts={"": "n s u"},  # a stand-in: its output is declared
        encode=encode, symbols=lambda r: 4, name="nan-at-37")
    hyp = dl.hypothesis(lambda r: [float(r % 3 == 0), 0.0, 1.0, 0.5], name="h")
    with pytest.raises(dl.BehaviorError, match="record 37 of the data"):
        dl.inspect([model], [hyp], ["corr"], list(range(64)), units=[("", "*")], block_size=16)


def test_export_without_params_is_reproducible(char_model, records, hyps, tmp_path):
    frame = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", [0])], eps=None)
    meta = dl.read_params(dl.export(frame, tmp_path / "s.parquet"))
    assert meta["measures"] == ["corr"] and meta["eps"] is None
    assert meta["versions"]["torch"] == torch.__version__
    assert meta["records_read"] == len(records)
    assert len(meta["weights_sha256"][char_model.name]) == 64
    other = dl.inspect([char_model], hyps, ["corr"], records[::-1], units=[("lstm", [0])], eps=None)
    assert dl.provenance(other)["data_sha256"] != meta["data_sha256"]
    for size in (3, 64):  # the same records cut into other blocks: the same data hash
        again = dl.inspect([char_model], hyps, ["corr"], records, units=[("lstm", [0])], eps=None,
                           block_size=size)  # fmt: skip
        assert dl.provenance(again)["data_sha256"] == meta["data_sha256"], size
    moved = dl.Model(copy.deepcopy(char_model.module), encode_chars, name=char_model.name)
    with torch.no_grad():
        next(moved.module.parameters()).add_(1.0)
    changed = dl.inspect([moved], hyps, ["corr"], records, units=[("lstm", [0])], eps=None)
    assert dl.provenance(changed)["weights_sha256"] != meta["weights_sha256"]
    assert dl.provenance(frame.head(3)) is None  # a derived frame is a new object
    assert dl.provenance(changed)["data_sha256"] == meta["data_sha256"]


def test_progress_bar_in_scripts(char_model, records, hyps, capsys):
    pytest.importorskip("tqdm")
    dl.inspect([char_model], hyps, ["corr"], records, eps=None, block_size=8, progress=True)
    err = capsys.readouterr().err
    assert "dni_lab" in err and f"{len(records)}/{len(records)}" in err and "settled" in err



def stop_in_probe_fit(monkeypatch, after_blocks: int) -> tuple[dict, Callable]:
    """Press Stop in the first Newton objective evaluated after ``after_blocks`` blocks.

    Returns the record of what happened (``after_stop`` counts later evaluations) and
    the ``on_block`` callback that gives it the inspection.
    """
    from dni_lab.backend.measures import _newton

    seen: dict = {"blocks": 0, "after_stop": 0}
    real = _newton.objective

    def objective(*args, **kwargs):
        if seen["blocks"] == after_blocks and "stopped" not in seen:
            seen["stopped"] = True
            seen["insp"].cancel()
        elif "stopped" in seen:
            seen["after_stop"] += 1
        return real(*args, **kwargs)

    def on_block(insp):
        seen["insp"] = insp
        seen["blocks"] += 1

    monkeypatch.setattr(_newton, "objective", objective)
    return seen, on_block


def test_a_stop_during_a_probe_fit_ends_the_run_within_that_step(char_model, hyps, monkeypatch):
    seen, on_block = stop_in_probe_fit(monkeypatch, after_blocks=1)  # during block 2's fit
    frame = dl.inspect(
        [char_model], hyps, [LogReg(steps_per_block=50)], random_records(600, seed=2),
        units=[("lstm", "*")], eps=None, block_size=200, on_block=on_block,
    )  # fmt: skip
    p = seen["insp"].progress
    assert p.cancelled and p.records_read == 400  # the block in flight counts, no more
    assert seen["after_stop"] <= 1  # the step's trial point at most, not 50 steps or a final fit
    probe = frame.filter(pl.col("hid") == "paren")
    assert probe.height == 12 and not probe["converged"].any()
    assert probe["group_score"].is_finite().all()  # block 1's F1 stands


def test_a_stop_during_the_final_probe_fit_returns_the_fit_so_far(char_model, hyps, monkeypatch):
    seen, on_block = stop_in_probe_fit(monkeypatch, after_blocks=1)  # one block: the final fit
    frame = dl.inspect(
        [char_model], hyps, [LogReg(steps_per_block=1, tol=0.0)], random_records(300, seed=3),
        units=[("lstm", "*")], eps=None, block_size=300, on_block=on_block,
    )  # fmt: skip
    assert seen["insp"].progress.cancelled and seen["after_stop"] <= 1
    probe = frame.filter(pl.col("hid") == "paren")
    assert probe.height == 12 and not probe["converged"].any()  # cut short: not "complete"
    assert probe["group_score"].is_finite().all()


def test_provenance_records_each_measures_parameters(char_model, hyps, tmp_path):
    # a probe's sample size changes what its scores mean: it travels with the frame
    frame = dl.inspect(
        [char_model], hyps, ["corr", LogReg(max_rows=500)], random_records(60, seed=5),
        units=[("lstm", "*")], eps=None,
    )  # fmt: skip
    params = dl.provenance(frame)["measure_params"]
    assert params["logreg"]["max_rows"] == 500 and params["logreg"]["C"] == 1.0
    assert "corr" in params
    path = dl.export(frame, tmp_path / "s.parquet")
    assert dl.read_params(path)["measure_params"]["logreg"]["max_rows"] == 500
