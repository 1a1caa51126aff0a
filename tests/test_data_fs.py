"""data= on any pyarrow.fs filesystem: a file:// URI and an fsspec memory:// filesystem
give the frame and data_sha256 of the same records as a list; files are streamed (an
inspection capped by max_records reads only the row groups and bytes it needs); a part
names its files by a string a worker resolves again; an unknown scheme or a missing
path is a DNIError at once."""

from __future__ import annotations

import pickle
import time
from typing import ClassVar

import fsspec  # torch requires it: always installed with dni_lab
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import VOCAB, paren, random_records
from fsspec.implementations.memory import MemoryFile, MemoryFileSystem
from test_sources import _model, _run, write_files

import dni_lab as dl
from dni_lab.backend.engine import filesystems, readers, sources


class CountingFile(MemoryFile):
    def read(self, *args):
        out = super().read(*args)
        CountingMemory.bytes_read += len(out)
        return out


class CountingMemory(MemoryFileSystem):
    """An fsspec memory filesystem of its own that counts the bytes read from its files."""

    protocol = "countmem"
    store: ClassVar[dict] = {}  # its own files, apart from memory://'s
    pseudo_dirs: ClassVar[list] = [""]
    bytes_read = 0

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.removeprefix("countmem://"))

    def _open(self, path, mode="rb", **kw):
        f = super()._open(path, mode, **kw)
        if "r" in mode and type(f) is MemoryFile:
            f.__class__ = CountingFile
        return f


fsspec.register_implementation("countmem", CountingMemory, clobber=True)


@pytest.fixture
def memory():
    """fsspec's memory filesystem, emptied after the test; files here read as memory://."""
    fs = fsspec.filesystem("memory")
    yield fs
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


def test_file_uris_and_an_fsspec_filesystem_read_the_records_of_local_files(tmp_path, memory):
    recs = random_records(150)
    base, meta = _run(recs)
    files = write_files(tmp_path, recs)
    cases = {}
    for kind, path in files.items():
        column = "text" if kind == "parquet" else None
        cases[f"file:// {kind}"] = (f"file://{path}", column)
        name = path.rsplit("/", 1)[1]
        memory.put(path, f"/data/{name}", recursive=True)
        cases[f"memory:// {kind}"] = (f"memory://data/{name}", column)
    for name, (data, column) in cases.items():
        frame, prov = _run(data, column=column)
        assert frame.equals(base), name
        assert prov["data_sha256"] == meta["data_sha256"], name
        assert prov["records_read"] == prov["total_records"] == 150, name
    src = sources.as_source("memory://data/dir")  # a directory: its files in name order
    wheres = [where for p in src.parts(50) for _k, where, *_ in p.pieces]
    assert sorted(set(wheres)) == ["memory://data/dir/a.parquet", "memory://data/dir/b.txt"]
    local = sources.as_source(f"file://{files['parquet']}", column="text")
    assert {where for p in local.parts(50) for _k, where, *_ in p.pieces} == {files["parquet"]}


def test_a_part_names_its_files_by_a_string_a_worker_opens_again(tmp_path, memory):
    recs = random_records(120, seed=3)
    files = write_files(tmp_path, recs)
    memory.put(files["dir"], "/w/dir", recursive=True)
    parts = list(sources.as_source("memory://w/dir").parts(50))
    shipped = pickle.loads(pickle.dumps(parts))  # as the driver sends them to a worker
    filesystems.resolve.cache_clear()  # a worker resolves each where itself
    readers.segment.cache_clear()
    assert [r for p in shipped for r in p.read()] == recs


@pytest.fixture
def counting():
    """countmem://, its byte count at 0, emptied after the test."""
    fs = fsspec.filesystem("countmem")
    CountingMemory.bytes_read = 0
    readers.segment.cache_clear()  # no segment of an earlier test's file of the same name
    yield fs
    fs.store.clear()
    fs.pseudo_dirs[:] = [""]


def _counting_dataset(fs, files: int, groups: int, rows: int) -> list[str]:
    """Parquet files of ``groups`` row groups of ``rows`` records on countmem://."""
    codes = np.random.default_rng(11).integers(0, len(VOCAB), (files * groups * rows, 12))
    chars = np.frombuffer(VOCAB.encode(), dtype=np.uint8)[codes]  # 12 random symbols each
    recs = [b.decode() for b in chars.view("S12").ravel()]
    for f in range(files):
        chunk = recs[f * groups * rows : (f + 1) * groups * rows]
        with fs.open(f"/ds/part-{f}.parquet", "wb") as out:
            pq.write_table(pa.table({"text": chunk}), out, row_group_size=rows)
    return recs


def test_a_capped_inspection_reads_only_the_row_groups_and_bytes_it_needs(counting, monkeypatch):
    # row groups larger than the 64 KiB Parquet reads at a file's end for its footer
    recs = _counting_dataset(counting, files=4, groups=4, rows=20_000)  # 16 row groups
    total_bytes = sum(f["size"] for f in counting.ls("/ds", detail=True))
    pulled: list[tuple[str, int]] = []
    read = readers._READ["parquet"]

    def counted(where, seg, column):
        pulled.append((where, seg))
        return read(where, seg, column)

    monkeypatch.setitem(readers._READ, "parquet", counted)
    src = sources.as_source("countmem://ds", column="text")
    assert src.total == len(recs) and pulled == []  # footers only: no row group read yet
    footers = CountingMemory.bytes_read
    frame, prov = _run(src, max_records=60)
    assert prov["records_read"] == 60
    assert pulled == [("countmem://ds/part-0.parquet", 0)]  # 60 records: the first group
    assert CountingMemory.bytes_read - footers < total_bytes / 8, (footers, total_bytes)
    _same_scores_left_open(frame, _run(recs[:60])[0], "max_records=60")


def test_a_text_file_is_scanned_only_as_far_as_the_records_read(counting):
    recs = random_records(40, seed=2)
    body = "\n".join(recs + ["x" * 100] * 40_000) + "\n"  # ~4 MiB: scanned 1 MiB at a time
    counting.pipe("/big.txt", body.encode())
    frame, prov = _run("countmem://big.txt", max_records=40)
    assert prov["records_read"] == 40
    assert CountingMemory.bytes_read < len(body) / 2, (CountingMemory.bytes_read, len(body))
    _same_scores_left_open(frame, _run(recs)[0], "max_records=40")


def _same_scores_left_open(capped: pl.DataFrame, whole: pl.DataFrame, budget: str) -> None:
    """A budget over longer data gives the scores of the records it read, every pair left
    open with the budget named (a limit ends reading, it settles no score), where the
    same records as the whole data end naturally, converged."""
    scores = [c for c in whole.columns if c not in ("converged", "reason")]
    assert capped.select(scores).equals(whole.select(scores))
    assert whole["converged"].all() and not capped["converged"].any()
    assert capped["reason"].str.contains(budget, literal=True).all(), capped["reason"][0]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("foo://bucket/x.parquet", r"'foo://bucket/x\.parquet': no filesystem reads foo://.*s3://"),
        ("memory://nowhere/x.parquet", r"'memory://nowhere/x\.parquet': no such file or dir"),
        ("file:///nowhere/at/all.parquet", r"'/nowhere/at/all\.parquet': no such file or dir"),
    ],
)
def test_an_unknown_scheme_or_a_missing_path_is_an_error_at_once(data, message):
    start = time.perf_counter()
    with pytest.raises(dl.DNIError, match=message):
        dl.inspect(_model(), [paren], ["corr"], data, cache=False)
    assert time.perf_counter() - start < 0.5
