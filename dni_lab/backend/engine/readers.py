"""Reading a block's pieces where they live: file segments and Ray Dataset blocks.

A :class:`~.sources.Part` names its records as pieces, ``(kind, where, segment, lo,
hi)``: rows ``lo:hi`` of one segment of a file or a Dataset. This module finds a
file's segments (a Parquet row group, an Arrow IPC record batch, a run of
``TEXT_LINES`` lines found by scanning for line ends) and reads one segment, keeping
the last ones read for the next part (:func:`segment`); sources.py cuts the parts.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DNIError

#: Lines per segment of a text file: a part reads whole segments and slices them.
TEXT_LINES = 256
_CHUNK = 1 << 20  # bytes scanned at a time for line ends
ARROW = (".arrow", ".feather", ".ipc")


def file_kind(path: Path) -> str:
    """``"parquet"``, ``"arrow"`` (an IPC file) or ``"text"``, by the file's suffix."""
    suffix = path.suffix.lower()
    return "parquet" if suffix == ".parquet" else "arrow" if suffix in ARROW else "text"


def schema(path: Path) -> list[str]:
    """The column names of a Parquet or Arrow IPC file."""
    if file_kind(path) == "parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    return list(_ipc(path).schema.names)


def _ipc(path: Path) -> Any:
    import pyarrow as pa

    try:
        return pa.ipc.open_file(pa.memory_map(str(path)))
    except pa.ArrowInvalid as exc:
        raise DNIError(
            f"data file {str(path)!r} is not an Arrow IPC file ({exc}); write it "
            "with pyarrow.ipc.new_file (or name a text file .txt)."
        ) from None


def table_segments(path: Path) -> Iterator[tuple[int, str, str, int]]:
    """A table file's segments as ``(rows, kind, where, segment)``: row groups, batches."""
    if file_kind(path) == "parquet":
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            yield meta.row_group(g).num_rows, "parquet", str(path), g
    else:
        reader = _ipc(path)  # memory-mapped: a batch's length costs no read of its data
        for b in range(reader.num_record_batches):
            yield reader.get_batch(b).num_rows, "arrow", str(path), b


def file_segments(files: list[Path]) -> Iterator[tuple[int, str, Any, Any]]:
    """The segments of ``files``, in order, whatever their kinds."""
    for p in files:
        if file_kind(p) == "text":
            yield from _text_segments(p)
        else:
            yield from table_segments(p)


def _text_segments(path: Path) -> Iterator[tuple[int, str, str, tuple[int, int]]]:
    """Runs of ``TEXT_LINES`` lines as byte ranges, found by scanning for line ends."""
    start = pos = lines = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            at = 0
            while (nl := chunk.find(b"\n", at)) >= 0:
                at = nl + 1
                lines += 1
                if lines == TEXT_LINES:
                    yield lines, "text", str(path), (start, pos + at)
                    start, lines = pos + at, 0
            pos += len(chunk)
    if pos > start:  # the rest; a last line without its newline counts too
        with open(path, "rb") as f:
            f.seek(start)
            tail = f.read()
        n = tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1)
        yield n, "text", str(path), (start, pos)


@functools.lru_cache(maxsize=2)
def segment(kind: str, where: Any, seg: Any, column: str | None, stamp: Any) -> Any:
    """One segment's records (a list, or an Arrow array sliced lazily), kept for the next
    part: consecutive parts often share a row group, and a row group reads whole."""
    return _READ[kind](where, seg, column)


def stamp(kind: str, where: Any) -> Any:
    """A file's size and time of change: a rewritten file is read again, not from the cache."""
    if kind == "ray":
        return None
    st = os.stat(where)
    return (st.st_size, st.st_mtime_ns)


def _read_text(where: str, seg: tuple[int, int], column: str | None) -> list[str]:
    with open(where, "rb") as f:
        f.seek(seg[0])
        data = f.read(seg[1] - seg[0])
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_parquet(where: str, seg: int, column: str | None) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetFile(where).read_row_group(seg, columns=[column]).column(0)


def _read_arrow(where: str, seg: int, column: str | None) -> Any:
    return _ipc(Path(where)).get_batch(seg).column(column)


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
