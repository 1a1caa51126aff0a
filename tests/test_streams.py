"""Streams and limits (issue 46): a budget ends reading but settles no score, a stream that
repeats itself ends, max_seconds=, a DataLoader read as its records, a record of the wrong
kind named at its position with the frame so far kept, a Stop on an endless run, and errors
that keep shrinking like 1/sqrt(n) on a fresh stream."""

from __future__ import annotations

import itertools
import random
import time

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dni_lab as dl
from dni_lab.backend.engine.distinct import DistinctRecords, Uncountable, record_bytes
from dni_lab.backend.engine.loaders import split_batch
from dni_lab.backend.errors import RecordError

UNITS = [("lstm", "*")]


@pytest.fixture
def model():
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=6), encode=encode_chars, name="toy")


@dl.hypothesis(kind="binary")
def paren(r):
    return [c in "()" for c in r]


@dl.hypothesis(kind="binary")
def never(r):
    return [0] * len(r)


def endless(seed: int = 0):
    """Fresh random records, forever."""
    rng = random.Random(seed)
    while True:
        yield "".join(rng.choice("ab()+*") for _ in range(rng.randint(4, 24)))


def _inspect(model, data, **kw):
    args = dict(units=UNITS, block_size=64, cache=False)
    args.update(kw)
    return dl.inspect(model, [paren], ["corr"], data, **args)


def test_a_budget_leaves_open_pairs_open_and_names_itself(model):
    data = random_records(1200, seed=5)
    frame = _inspect(model, data, eps=0.005, max_records=400)
    rec = dl.provenance(frame)
    assert rec["records_read"] == 400 and rec["ended_by"] == "max_records"
    assert rec["limit_reason"] == "max_records=400 ended the reading"
    assert not rec["stopped_early"] and not rec["partial"] and rec["max_records"] == 400
    open_ = frame.filter(~pl.col("converged"))
    assert open_.height > 0  # eps 0.005 is far out of reach at 400 records
    budget = open_.filter(pl.col("reason").str.contains("max_records=400 ended the reading"))
    assert budget.height > 0
    for err, why in zip(budget["err"], budget["reason"], strict=True):
        assert f"at err {err:.3f} > eps 0.005" in why and err > 0.005
    # a converged pair reached eps before the budget, or settled null with a reason
    done = frame.filter(pl.col("converged"))
    assert ((done["err"] <= 0.005) | done["err"].is_null()).all()


def test_the_data_ending_at_the_budget_is_the_full_data(model):
    data = random_records(300, seed=5)
    frame = _inspect(model, data, eps=0.005, max_records=300)
    rec = dl.provenance(frame)
    assert rec["ended_by"] == "end of data" and "limit_reason" not in rec
    assert frame["converged"].all()  # every score is its full-data value


def test_max_seconds_ends_an_endless_stream(model):
    t0 = time.perf_counter()
    frame = _inspect(model, endless(), eps=1e-4, max_seconds=0.5)
    took = time.perf_counter() - t0
    rec = dl.provenance(frame)
    assert rec["ended_by"] == "max_seconds" and rec["max_seconds"] == 0.5
    assert took < 30, took
    open_ = frame.filter(~pl.col("converged") & pl.col("reason").str.contains("max_seconds"))
    assert open_.height > 0
    assert open_["reason"].str.starts_with("left open: max_seconds=0.5 ended the reading").all()


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "10"])
def test_max_seconds_is_validated_before_anything_is_read(model, value):
    read = []

    def watched():
        for r in endless():
            read.append(r)
            yield r

    with pytest.raises(dl.DNIError, match=r"^max_seconds must be a positive number of seconds"):
        _inspect(model, watched(), max_seconds=value)
    assert read == []


def test_a_repeating_stream_ends_and_says_why(model):
    frame = _inspect(model, itertools.cycle(random_records(300, seed=2)), eps=0.002)
    rec = dl.provenance(frame)
    assert rec["ended_by"] == "repeats"
    assert rec["records_read"] < 3000  # not forever: reading doubled with nothing new
    why = "left open: the stream repeats its 300 distinct records: reading more adds no"
    open_ = frame.filter(~pl.col("converged") & pl.col("reason").str.starts_with(why))
    assert open_.height > 0 and open_["reason"].str.contains(r"\(err 0\.\d{3} > eps 0.002\)").all()


def test_a_fresh_stream_is_not_taken_for_a_repeating_one():
    d = DistinctRecords()
    gen = endless(3)
    for _ in range(40):
        d.update([next(gen) for _ in range(64)])
    assert d.on and not d.repeats()
    d2 = DistinctRecords()
    recs = random_records(100, seed=1)
    for _ in range(10):
        d2.update(recs)
    assert d2.count == 100 and d2.repeats()


def test_record_bytes_say_what_a_record_holds():
    big = np.zeros(5000)
    other = big.copy()
    other[2500] = 1.0  # the same truncated repr, other content
    assert repr(big) == repr(other)
    assert record_bytes(big) != record_bytes(other)
    assert record_bytes(torch.ones(3)) == record_bytes(torch.ones(3))
    assert record_bytes([1, "a"]) != record_bytes(["1", "a"])
    assert record_bytes({"a": np.ones(2), "b": [1]}) == record_bytes({"b": [1], "a": np.ones(2)})
    assert record_bytes([big]) != record_bytes([other])
    with pytest.raises(Uncountable):
        record_bytes(object())
    d = DistinctRecords()
    d.update(["a", object()])
    assert not d.on and not d.repeats()  # an uncountable kind switches the counter off


def test_an_endless_stream_with_a_constant_hypothesis_ends(model):
    frame = dl.inspect(model, [paren, never], ["corr"], endless(), units=UNITS, eps=0.05,
                       block_size=256, cache=False, max_seconds=120)  # fmt: skip
    rec = dl.provenance(frame)
    assert rec["ended_by"] == "early stopping", rec["ended_by"]
    constant = frame.filter(pl.col("hid") == "never")
    assert constant["unit_score"].is_null().all()
    assert constant["reason"].str.contains("constant").all()


class _Texts(Dataset):
    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return {"text": self.records[i], "label": i % 3}


def test_a_dataloader_is_read_as_the_records_it_batches(model):
    records = random_records(200, seed=4)
    texts = dl.Model(model.module, encode=lambda rs: encode_chars([r["text"] for r in rs]),
                     symbols=lambda r: len(r["text"]), name="toy")  # fmt: skip

    @dl.hypothesis(kind="binary", name="paren")
    def paren_of(r):
        return [c in "()" for c in r["text"]]

    loader = DataLoader(_Texts(records), batch_size=16)
    seen = []
    run = dl.inspect(texts, [paren_of], ["corr"], loader, units=UNITS, eps=None, block_size=64,
                     cache=False, background=True)  # fmt: skip
    run.on_block(lambda r: seen.append(r.progress.total_records))
    assert run.wait(120)
    got = run.result()
    want = _inspect(model, records, eps=None)
    assert seen and seen[0] == 200  # the total was known from the start
    assert got["unit_score"].to_list() == pytest.approx(want["unit_score"].to_list(), abs=1e-6)
    assert dl.provenance(got)["records_read"] == 200


def test_split_batch_undoes_default_collate():
    class Pairs(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return torch.arange(3) + i, i

    batch = next(iter(DataLoader(Pairs(), batch_size=5)))
    rows = split_batch(batch)
    assert len(rows) == 5 and rows[2][1] == 2 and torch.equal(rows[2][0], torch.arange(3) + 2)
    assert split_batch(["ab", "c"]) == ["ab", "c"]
    with pytest.raises(RecordError, match=r"batch 3 of the DataLoader .*different counts"):
        split_batch({"a": torch.zeros(2), "b": [1, 2, 3]}, 3)
    with pytest.raises(RecordError, match="collate_fn"):
        split_batch(object(), 0)


def _good_then_bad(n: int):
    yield from random_records(n, seed=7)
    yield 12345  # a record of another kind
    yield from random_records(100, seed=8)


def test_a_record_of_the_wrong_kind_names_its_position_and_keeps_the_frame(model):
    with pytest.raises(RecordError, match=r"record 3,000 of the data is 12345 \(int\)") as e:
        _inspect(model, _good_then_bad(3000), eps=None)
    assert "text (str)" in str(e.value)
    frame = e.value.partial_frame
    assert frame is not None and frame.height > 0
    assert (frame["n_records"] == 2944).all() and not frame["converged"].any()  # 46 blocks
    assert frame["reason"].str.contains("the run failed at record 2,944").all()
    rec = dl.provenance(frame)
    assert rec["partial"] and rec["ended_by"] == "error" and rec["records_read"] == 2944
    assert rec["partial_reason"].startswith("the run failed after 2,944 records: record 3,000")


def test_a_wrong_record_in_the_background_keeps_its_frame(model):
    run = _inspect(model, _good_then_bad(200), eps=None, background=True)
    assert run.wait(120)
    with pytest.raises(RecordError, match="record 200 of the data") as e:
        run.result()
    assert e.value.partial_frame is not None and (e.value.partial_frame["n_records"] == 192).all()


def test_a_stop_during_an_endless_run_returns_promptly_with_every_pair(model):
    run = dl.inspect(model, [paren, never], ["corr"], endless(), units=UNITS, eps=None,
                     block_size=64, cache=False, background=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while run.progress.blocks < 3:
        assert time.monotonic() < deadline, "the run read no blocks within a minute"
        assert not run.done, run.error
        time.sleep(0.01)
    t0 = time.perf_counter()
    run.cancel()
    assert run.wait(5), "a Stop took more than 5 s"
    took = time.perf_counter() - t0
    print(f"Stop -> run ended in {took:.3f} s")
    with pytest.warns(dl.PartialResultWarning):
        frame = run.result()
    assert frame.height == 6 * 2 and set(frame["hid"]) == {"paren", "never"}
    assert not frame["converged"].any() and frame["reason"].is_not_null().all()
    assert dl.provenance(frame)["ended_by"] == "stop"


class _Replay(nn.Module):
    def forward(self, x):
        return x


def test_errors_shrink_like_one_over_root_n_on_a_fresh_stream():
    """10^7 symbols: 20,000 fresh records of 500 symbols; corr's error per block against
    records read, on a log-log scale, has slope -1/2."""
    n_records, length, width = 20_000, 500, 4

    def fresh():
        rng = np.random.default_rng(0)
        for _ in range(n_records):
            u = rng.standard_normal((length, width), dtype=np.float32)
            h = 0.3 * u[:, 0] + rng.standard_normal(length, dtype=np.float32)
            yield np.concatenate([u, h[:, None]], axis=1)

    model = dl.Model(_Replay(), layouts={"": "n s u"}, name="replay", symbols=len,
                     encode=lambda rs: torch.from_numpy(np.stack(rs)[..., :width]))  # fmt: skip
    h = dl.hypothesis(lambda r: r[:, width], kind="continuous", name="h")
    points: list[tuple[int, float]] = []

    def record(insp):
        err = insp.frame().filter(pl.col("unit") == 0)["err"][0]
        if err is not None:
            points.append((insp.progress.records_read, err))

    t0 = time.perf_counter()
    frame = dl.inspect(model, [h], ["corr"], fresh(), units=[("", "*")], eps=None,
                       block_size=100, cache=False, on_block=record)  # fmt: skip
    took = time.perf_counter() - t0
    assert dl.provenance(frame)["records_read"] == n_records
    n, err = np.array(points).T
    slope = np.polyfit(np.log(n), np.log(err), 1)[0]
    print(f"{n_records * length:,} symbols in {took:.1f} s: slope {slope:.3f} over "
          f"{len(n)} blocks, err {err[0]:.4f} -> {err[-1]:.5f}")
    assert n[-1] / n[0] >= 50  # the fit spans two decades of records
    assert -0.6 <= slope <= -0.4
