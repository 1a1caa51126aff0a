"""Reading a block's pieces where they live: file segments and Ray Dataset blocks.

A :class:`~.sources.Part` names its records as pieces, ``(kind, where, segment, lo,
hi)``: rows ``lo:hi`` of one segment of a file or a Dataset. This module finds a
file's segments (a Parquet row group, an Arrow IPC record batch, a run of
``TEXT_LINES`` lines found by scanning for line ends) and reads one segment, keeping
the last ones read for the next part (:func:`segment`); sources.py cuts the parts.
A file's ``where`` is a local path or a URI; filesystems.py opens it, on any
``pyarrow.fs`` filesystem, for random access or as a stream.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

from ..errors import DNIError
from . import filesystems as fsys

#: Lines per segment of a text file: a part reads whole segments and slices them.
TEXT_LINES = 256
_CHUNK = 1 << 20  # bytes scanned at a time for line ends
ARROW = (".arrow", ".feather", ".ipc")


def file_kind(where: str) -> str:
    """``"parquet"``, ``"arrow"`` (an IPC file) or ``"text"``, by the file's suffix."""
    suffix = os.path.splitext(where)[1].lower()
    return "parquet" if suffix == ".parquet" else "arrow" if suffix in ARROW else "text"


def schema(where: str) -> list[str]:
    """The column names of a Parquet or Arrow IPC file (read from its footer)."""
    if file_kind(where) == "parquet":
        return list(_parquet(where).schema_arrow.names)
    return list(_ipc(where).schema.names)


def _parquet(where: str) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetFile(fsys.open_random(where))  # reads the footer, then what is asked


def _ipc(where: str) -> Any:
    import pyarrow as pa

    try:
        return pa.ipc.open_file(fsys.open_random(where))
    except pa.ArrowInvalid as exc:
        raise DNIError(
            f"data file {where!r} is not an Arrow IPC file ({exc}); write it "
            "with pyarrow.ipc.new_file (or name a text file .txt)."
        ) from None


def table_segments(where: str) -> Iterator[tuple[int, str, str, int]]:
    """A table file's segments as ``(rows, kind, where, segment)``: row groups, batches."""
    if file_kind(where) == "parquet":
        meta = _parquet(where).metadata
        for g in range(meta.num_row_groups):
            yield meta.row_group(g).num_rows, "parquet", where, g
    else:
        # a local file is memory-mapped: a batch's length costs no read of its data; a
        # remote one is read a batch at a time to learn them
        reader = _ipc(where)
        for b in range(reader.num_record_batches):
            yield reader.get_batch(b).num_rows, "arrow", where, b


def file_segments(files: list[str]) -> Iterator[tuple[int, str, Any, Any]]:
    """The segments of ``files``, in order, whatever their kinds."""
    for p in files:
        if file_kind(p) == "text":
            yield from _text_segments(p)
        else:
            yield from table_segments(p)


def _text_segments(where: str) -> Iterator[tuple[int, str, str, tuple[int, int]]]:
    """Runs of ``TEXT_LINES`` lines as byte ranges, found by scanning for line ends."""
    start = pos = lines = 0
    with fsys.open_stream(where) as f:
        while chunk := f.read(_CHUNK):
            at = 0
            while (nl := chunk.find(b"\n", at)) >= 0:
                at = nl + 1
                lines += 1
                if lines == TEXT_LINES:
                    yield lines, "text", where, (start, pos + at)
                    start, lines = pos + at, 0
            pos += len(chunk)
    if pos > start:  # the rest; a last line without its newline counts too
        tail = _read_range(where, start, pos)
        n = tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1)
        yield n, "text", where, (start, pos)


def _read_range(where: str, lo: int, hi: int) -> bytes:
    with fsys.open_random(where) as f:
        return f.read_at(hi - lo, lo)


@functools.lru_cache(maxsize=2)
def segment(kind: str, where: Any, seg: Any, column: str | None, stamp: Any) -> Any:
    """One segment's records (a list, or an Arrow array sliced lazily), kept for the next
    part: consecutive parts often share a row group, and a row group reads whole."""
    return _READ[kind](where, seg, column)


def stamp(kind: str, where: Any) -> Any:
    """A file's size and time of change: a rewritten file is read again, not from the cache."""
    return None if kind == "ray" else fsys.stamp(where)


def _read_text(where: str, seg: tuple[int, int], column: str | None) -> list[str]:
    lines = _read_range(where, *seg).decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_parquet(where: str, seg: int, column: str | None) -> Any:
    return _parquet(where).read_row_group(seg, columns=[column]).column(0)


def _read_arrow(where: str, seg: int, column: str | None) -> Any:
    return _ipc(where).get_batch(seg).column(column)


# -- a Ray Dataset -------------------------------------------------------------
def is_ray_dataset(data: Any) -> bool:
    """Whether ``data`` is a ``ray.data.Dataset`` (told without importing Ray)."""
    return type(data).__module__.startswith("ray.data") and hasattr(data, "materialize")


def ray_segment(entry: Any) -> tuple[int, str, Any, None]:
    """A materialised Dataset block as a segment: ``(rows, "ray", its reference, None)``."""
    # Ray < 2.55 gives (ref, metadata) pairs, later a BlockEntry with both as fields
    ref, meta = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
    return int(meta.num_rows), "ray", ref, None


def _read_ray(where: Any, seg: Any, column: str | None) -> Any:
    import ray
    from ray.data.block import BlockAccessor

    return BlockAccessor.for_block(ray.get(where)).to_arrow().column(column)


_READ = {"text": _read_text, "parquet": _read_parquet, "arrow": _read_arrow, "ray": _read_ray}
