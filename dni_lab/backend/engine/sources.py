"""Where records come from: a sequence in memory, files read in blocks, a Ray Dataset.

A source cuts its data into :class:`Part` objects, one per block of the run: records
``first .. first + count - 1`` and where they are. One process reads each part as
it reaches it (a file is never read whole into memory); on a cluster the driver deals
the parts and each worker reads its own — a Parquet row group's rows, an Arrow IPC
file's record batches, a text file's byte range, a Ray Dataset's blocks from the
object store — so records never pass through the driver. Both paths cut the same
parts, so they read the same blocks: the same frame and the same ``data_sha256``.

``data=`` may be a list or iterable of records (read in memory, as before), a table
(see :func:`~.resolve.as_records`), a path to a Parquet file (``.parquet``), an Arrow
IPC file (``.arrow``, ``.feather``, ``.ipc``), a text file (one record per line,
anything else) or a directory of them (its files in name order), or a
``ray.data.Dataset``, or a PyTorch ``DataLoader`` (its batches split back into
records, loaders.py). A path may be local or a URI of any ``pyarrow.fs`` filesystem
(``file://``, ``s3://``, ``gs://``, an fsspec one such as ``memory://``; see
filesystems.py). ``column=`` names the column that holds the records; a table of one
column needs none. readers.py finds a file's segments and reads them.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DNIError
from .filesystems import list_files, locate, uri_scheme
from .loaders import Unbatched, is_loader, loader_total
from .readers import (
    ARROW,
    file_kind,
    file_segments,
    is_ray_dataset,
    ray_segment,
    schema,
    segment,
    stamp,
    table_segments,
)
from .resolve import as_records


@dataclass
class Part:
    """One block of records: where it starts in the data, how many, and how to read them.

    ``records`` holds them when they live in memory (a list, a generator's block); else
    ``pieces`` says where: ``(kind, where, segment, lo, hi)``, rows ``lo:hi`` of one
    segment (a row group, a record batch, a run of lines, a Dataset block).
    """

    first: int
    count: int
    records: list[Any] | None = None
    pieces: list[tuple[str, Any, Any, int, int]] = field(default_factory=list)
    column: str | None = None

    def read(self) -> list[Any]:
        """The part's records, read where they live."""
        if self.records is not None:
            return self.records
        out: list[Any] = []
        for kind, where, seg, lo, hi in self.pieces:
            rows = segment(kind, where, seg, self.column, stamp(kind, where))
            is_list = isinstance(rows, list)  # text lines; else an Arrow array, sliced first
            out.extend(rows[lo:hi] if is_list else rows.slice(lo, hi - lo).to_pylist())
        return out

    def __repr__(self) -> str:  # an error that shows a part must not print its records
        return f"Part(first={self.first}, count={self.count})"


class Source:
    """Records of ``data=`` cut into parts of ``block_size`` (at most ``limit`` records)."""

    def __init__(self, segments: Callable[[], Iterable[tuple[int, str, Any, Any]]] | None = None,
                 total: int | None = None, column: str | None = None,
                 records: Iterable[Any] | None = None) -> None:  # fmt: skip
        self._segments = segments  # a new iterator of (rows, kind, where, segment), in order
        self._records = records
        self.total = total
        self.column = column

    @property
    def in_memory(self) -> Sequence[Any] | None:
        """The records, where ``data=`` was a sequence in memory (panels show them); else None."""
        return self._records if isinstance(self._records, Sequence) else None

    def parts(self, block_size: int, limit: int | None = None) -> Iterator[Part]:
        """The parts in order; the last may be short."""
        if self._records is not None:
            yield from self._memory_parts(block_size, limit)
            return
        assert self._segments is not None
        first, part = 0, Part(0, 0, column=self.column)
        for rows, kind, where, seg in self._segments():
            lo = 0
            while lo < rows:
                room = block_size - part.count
                if limit is not None:
                    room = min(room, limit - first - part.count)
                if room <= 0:
                    break
                hi = min(rows, lo + room)
                part.pieces.append((kind, where, seg, lo, hi))
                part.count += hi - lo
                lo = hi
                if part.count == block_size:
                    yield part
                    first += part.count
                    part = Part(first, 0, column=self.column)
            if limit is not None and first + part.count >= limit:
                break
        if part.count:
            yield part

    def _memory_parts(self, block_size: int, limit: int | None) -> Iterator[Part]:
        it = iter(self._records)  # type: ignore[arg-type]
        if limit is not None:
            it = itertools.islice(it, limit)
        first = 0
        while block := list(itertools.islice(it, block_size)):
            yield Part(first, len(block), records=block)
            first += len(block)


def as_source(data: Any, column: str | None = None) -> Source:
    """The :class:`Source` of what ``data=`` names (see the module docstring).

    Raises
    ------
    DNIError
        A path that does not exist, a column that is not there, a table of several
        columns without ``column=``.
    """
    if isinstance(data, Source):
        return data
    if isinstance(data, (str, os.PathLike)) and _looks_like_path(data):
        return _file_source(locate(data), column)
    if is_ray_dataset(data):
        return _dataset_source(data, column)
    if is_loader(data):  # its batches split back into records (loaders.py)
        if column is not None:
            raise DNIError(f"column={column!r}: a DataLoader's records have no columns to "
                           "choose from; leave column= out.")  # fmt: skip
        return Source(records=Unbatched(data), total=loader_total(data))
    if column is not None:
        data = _pick_column(data, column)
    records = as_records(data)
    try:
        total = len(records)
    except TypeError:
        total = None
    return Source(records=records, total=total)


def _looks_like_path(data: Any) -> bool:
    if isinstance(data, os.PathLike):
        return True
    # a string is a path when it is a URI, names a file, or ends in a data file's suffix (a
    # missing file or an unknown scheme then gets the error it needs, not a run over its
    # characters)
    text = str(data)
    if "\n" in text or len(text) > 4096:
        return False
    if uri_scheme(text) is not None:
        return True
    return Path(text).exists() or Path(text).suffix.lower() in {".parquet", ".txt", *ARROW}


def _pick_column(data: Any, column: str) -> Any:
    names = _columns(data)
    if names is None:
        raise DNIError(
            f"column={column!r} names a column, but data has no columns "
            f"({type(data).__name__}); pass column= with a table or a file."
        )
    if column not in names:
        raise DNIError(f"data has no column {column!r}; its columns are {names}.")
    if hasattr(data, "select_columns"):  # a HF Dataset
        return data[column]
    if hasattr(data, "__arrow_c_stream__") and not hasattr(data, "iloc"):
        import polars as pl

        return (data if isinstance(data, pl.DataFrame) else pl.DataFrame(data))[column]
    return data[column]


def _columns(data: Any) -> list[str] | None:
    for attr in ("column_names", "columns"):
        names = getattr(data, attr, None)
        if names is not None and not callable(names):
            return [str(c) for c in names]
    if isinstance(data, dict):
        return [str(c) for c in data]
    if hasattr(data, "__arrow_c_stream__"):
        import polars as pl

        return pl.DataFrame(data).columns
    return None


def choose_column(names: list[str], column: str | None, what: str) -> str:
    """The column that holds the records: ``column``, or the only one."""
    if column is not None:
        if column not in names:
            raise DNIError(f"{what} has no column {column!r}; its columns are {names}.")
        return column
    if not names:
        raise DNIError(f"{what} has no columns.")
    if len(names) != 1:
        raise DNIError(
            f"{what} has columns {names}; pass column= naming the one column that holds "
            f"the records, e.g. column={names[0]!r}."
        )
    return names[0]


# -- files ---------------------------------------------------------------------
def _file_source(where: str, column: str | None) -> Source:
    """A file's or directory's segments; only footers are read here (and, for an Arrow
    IPC file not on the local disk, each batch's length)."""
    files = list_files(where)
    kinds = {file_kind(f) for f in files}
    if "text" in kinds and column is not None:
        raise DNIError(f"column={column!r}: {where!r} holds text files (one record per "
                       "line), which have no columns; leave column= out.")  # fmt: skip
    total: int | None = 0
    chosen: str | None = None
    for f in files:
        if file_kind(f) == "text":
            total = None
            continue
        names = schema(f)
        chosen = choose_column(names, column, f"data file {os.path.basename(f)!r}")
        if total is not None:
            total += sum(n for n, *_ in table_segments(f))
    return Source(segments=functools.partial(file_segments, files), total=total,
                  column=chosen)  # fmt: skip


# -- a Ray Dataset -------------------------------------------------------------
def _dataset_source(ds: Any, column: str | None) -> Source:
    """A Ray Dataset's blocks, materialised in the object store, read where they are."""
    names = list(ds.schema().names)
    chosen = choose_column(names, column, "the Ray Dataset")
    done = ds.materialize()  # blocks in the object store, in the dataset's order
    segments = [ray_segment(entry) for bundle in done.iter_internal_ref_bundles()
                for entry in bundle.blocks]  # fmt: skip
    src = Source(segments=functools.partial(iter, segments), total=sum(s[0] for s in segments),
                 column=chosen)  # fmt: skip
    src._dataset = done  # type: ignore[attr-defined]  # keeps the blocks alive for the run
    return src
