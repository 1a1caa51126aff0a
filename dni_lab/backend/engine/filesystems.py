"""Where a data path lives: a ``pyarrow.fs`` filesystem and the path on it.

``data=`` may name its files by a local path, a ``file://`` URI, a URI that
``pyarrow.fs.FileSystem.from_uri`` opens (``s3://``, ``gs://``, ``hdfs://``, …) or one
of an `fsspec <https://filesystem-spec.readthedocs.io>`_ filesystem (``memory://``,
``az://``, …, wrapped in ``pyarrow.fs.PyFileSystem``). A file is named by a string,
*where*: a local absolute path, or the URI itself, so a cluster's worker opens the
same file from the same string (:func:`resolve`, cached per process). readers.py
reads files only through this module: random access (a row group, a byte range) or a
stream, never a whole file.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import pyarrow.fs as pafs

from ..errors import DNIError

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://\S*$")
_LOCAL = pafs.LocalFileSystem(use_mmap=True)  # IPC batches' lengths cost no read of their data
SUPPORTED = (
    "a local path or file:// URI, a URI pyarrow.fs opens (s3://, gs://, hdfs://, abfs://), "
    "or one of an installed fsspec filesystem (memory://, az://, ...)"
)


def uri_scheme(text: str) -> str | None:
    """The scheme of a URI (``"s3"`` of ``"s3://bucket/key"``); None for a plain path."""
    m = _URI.match(text)
    return m.group(1).lower() if m else None


def locate(data: str | os.PathLike[str]) -> str:
    """The *where* of what ``data=`` names: an absolute local path, or the URI as given."""
    text = os.fspath(data)
    scheme = uri_scheme(text) if isinstance(data, str) else None
    if scheme is None:
        return os.path.abspath(os.path.expanduser(text))
    if scheme == "file":
        return os.path.abspath(_open_uri(text)[1])
    head = text[: len(scheme) + 3]  # "scheme://": a directory's trailing slashes go, not it
    return head + text[len(head) :].rstrip("/")


def join(where: str, name: str) -> str:
    """The *where* of ``name`` in the directory ``where``."""
    return os.path.join(where, name) if uri_scheme(where) is None else f"{where}/{name}"


@functools.lru_cache(maxsize=512)
def resolve(where: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``where`` and the path on it (a worker resolves it again).

    Raises
    ------
    DNIError
        A scheme no filesystem reads, or one whose filesystem cannot be opened.
    """
    if uri_scheme(where) is None:
        return _LOCAL, where
    return _open_uri(where)


def _open_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow as pa

    try:  # pyarrow's own filesystems first: local, S3, GCS, HDFS, Azure
        return pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid:  # a scheme pyarrow does not know: fsspec's, or none
        pass
    except (OSError, pa.ArrowException) as exc:  # e.g. no credentials, no libhdfs
        first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise DNIError(
            f"data={uri!r}: pyarrow.fs could not open its filesystem ({first})."
        ) from None
    return _fsspec(uri)


def _fsspec(uri: str) -> tuple[pafs.FileSystem, str]:
    scheme = uri_scheme(uri)
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError:
        raise DNIError(f"data={uri!r}: no filesystem reads {scheme}:// here; pass {SUPPORTED} "
                       "(pip install fsspec for its filesystems).") from None  # fmt: skip
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise DNIError(
            f"data={uri!r}: no filesystem reads {scheme}://; pass {SUPPORTED}."
        ) from None
    except ImportError as exc:  # fsspec knows the scheme; its package is not installed
        raise DNIError(f"data={uri!r}: {exc}") from None
    fs, path = url_to_fs(uri)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def info(where: str) -> pafs.FileInfo:
    """What ``where`` is (a file, a directory, nothing), from its filesystem."""
    fs, path = resolve(where)
    return fs.get_file_info(path)


def list_files(where: str) -> list[str]:
    """The files ``where`` names: itself, or a directory's files in name order (names
    starting with ``.`` or ``_`` skipped, as Parquet datasets' metadata files are).

    Raises
    ------
    DNIError
        Nothing at ``where``, or a directory with no files.
    """
    found = info(where)
    if found.type == pafs.FileType.NotFound:
        raise DNIError(f"data={where!r}: no such file or directory; pass an existing Parquet, "
                       f"Arrow IPC or text file, or a directory of them: {SUPPORTED}.")  # fmt: skip
    if found.type != pafs.FileType.Directory:
        return [where]
    fs, path = resolve(where)
    entries = fs.get_file_info(pafs.FileSelector(path))
    hidden = (".", "_")
    names = sorted(
        f.base_name
        for f in entries
        if f.type == pafs.FileType.File and not f.base_name.startswith(hidden)
    )
    if not names:
        raise DNIError(f"data={where!r} is a directory with no files.")
    return [join(where, n) for n in names]


def open_random(where: str) -> Any:
    """``where`` opened for random access (a ``pyarrow.NativeFile``): reads what is asked."""
    fs, path = resolve(where)
    return fs.open_input_file(path)


def open_stream(where: str) -> Any:
    """``where`` opened to read in order, a chunk at a time."""
    fs, path = resolve(where)
    return fs.open_input_stream(path)


def stamp(where: str) -> tuple[int | None, int | None]:
    """A file's size and time of change (where its filesystem keeps one): a rewritten
    file is read again, not from the cache."""
    found = info(where)
    mtime = found.mtime_ns if found.mtime is not None else None
    return found.size, mtime
