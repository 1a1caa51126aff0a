"""data= from files, tables and directories in one process: the frame and data_sha256 of
the same records as a list; block parts cut across row groups, batches and files; the
errors for a missing file, an unknown column and a table of several columns."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records

import dni_lab as dl
from dni_lab.backend.engine import sources
from dni_lab.backend.engine.provenance import RecordsHash

N = 150


def write_files(d, recs: list[str]) -> dict[str, str]:
    """The records as a Parquet file (row groups of 70), an Arrow IPC file (batches of 45),
    a text file and a directory split over a Parquet and a text file."""
    pq.write_table(pa.table({"text": recs, "n": list(range(len(recs)))}), d / "r.parquet",
                   row_group_size=70)  # fmt: skip
    with pa.ipc.new_file(d / "r.arrow", pa.schema([("text", pa.string())])) as w:
        for i in range(0, len(recs), 45):
            w.write_batch(pa.record_batch([pa.array(recs[i : i + 45])], names=["text"]))
    (d / "r.txt").write_text("\n".join(recs) + "\n")
    (d / "dir").mkdir()
    pq.write_table(pa.table({"text": recs[:61]}), d / "dir" / "a.parquet", row_group_size=25)
    (d / "dir" / "b.txt").write_text("\r\n".join(recs[61:]))  # CRLF, no last newline
    return {"parquet": str(d / "r.parquet"), "arrow": str(d / "r.arrow"),
            "text": str(d / "r.txt"), "dir": str(d / "dir")}  # fmt: skip


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def _run(data, **kw):
    frame = dl.inspect(_model(), [paren, position], ["corr"], data, eps=None, block_size=32,
                       cache=False, **kw)  # fmt: skip
    return frame.sort(["uid", "hid"]), dl.provenance(frame)


def test_every_file_kind_gives_the_frame_and_hash_of_the_same_records_as_a_list(tmp_path):
    recs = random_records(N)
    base, meta = _run(recs)
    files = write_files(tmp_path, recs)
    tables = {"arrow table": pa.table({"text": recs, "n": list(range(N))})}
    for kind, data in {**files, **tables}.items():
        column = "text" if kind in ("parquet", "arrow table") else None
        frame, prov = _run(data, column=column)
        assert frame.equals(base), kind
        assert prov["data_sha256"] == meta["data_sha256"], kind
        assert prov["records_read"] == prov["total_records"] == N, kind
    # fewer records, another hash; a changed record, another hash
    assert _run(files["text"], max_records=40)[1]["data_sha256"] != meta["data_sha256"]
    assert _run(["a" + recs[0], *recs[1:]])[1]["data_sha256"] != meta["data_sha256"]


def test_parts_cut_blocks_across_row_groups_and_files_without_reading_them(tmp_path):
    recs = random_records(N)
    files = write_files(tmp_path, recs)
    src = sources.as_source(files["dir"])
    parts = list(src.parts(50, limit=None))
    assert [p.count for p in parts] == [50, 50, 50]
    assert all(p.records is None for p in parts)  # descriptions: workers read them
    assert {k for p in parts for k, *_ in p.pieces} == {"parquet", "text"}
    assert [r for p in parts for r in p.read()] == recs
    assert [p.count for p in src.parts(64, limit=100)] == [64, 36]
    h = RecordsHash()
    for p in parts:
        h.update(p.read())
    assert h.count == N


def test_a_missing_file_an_unknown_column_and_an_ambiguous_table_say_what_to_pass(tmp_path):
    files = write_files(tmp_path, random_records(20))
    with pytest.raises(dl.DNIError, match="no such file or directory"):
        _run(str(tmp_path / "gone.parquet"))
    with pytest.raises(dl.DNIError, match=r"has no column 'body'; its columns are \['text', 'n'\]"):
        _run(files["parquet"], column="body")
    with pytest.raises(dl.DNIError, match=r"columns \['text', 'n'\]; pass column=.*column='text'"):
        _run(files["parquet"])
    with pytest.raises(dl.DNIError, match=r"columns \['a', 'b'\]; pass column=.*column='a'"):
        _run(pa.table({"a": ["ab"], "b": ["cd"]}))
    with pytest.raises(dl.DNIError, match="text files .* have no columns"):
        _run(files["text"], column="text")
    (tmp_path / "bad.arrow").write_bytes(b"not arrow")
    with pytest.raises(dl.DNIError, match="is not an Arrow IPC file"):
        _run(str(tmp_path / "bad.arrow"))
