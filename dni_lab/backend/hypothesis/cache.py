"""Hypothesis-behavior cache: an in-memory LRU bounded in bytes plus an on-disk store.

An entry holds one hypothesis family's signals over one block of records,
keyed by the family's fingerprint (its code and everything that code reads,
see :mod:`~dni_lab.backend.hypothesis.fingerprint`) and a content hash of the block.
Re-running the same hypotheses over the same data with another model (another
checkpoint, an untrained copy) reads the entries instead of calling the
hypothesis functions again.

On disk an entry is a ``.npy`` file (never pickled) and a JSON sidecar with its
SHA-256; files are written to a temporary name and renamed, so a crash never
leaves half an entry. A corrupt entry (any form: bad sidecar, checksum, shape,
dtype, a directory where a file belongs) is dropped with a warning and
recomputed. A directory that cannot be written or read (read-only, another
user's files, a path under a file) turns the cache into a memory-only one with
one warning; it never fails a run. ``clear(disk=True)`` leaves other processes'
files in flight alone.

The memory LRU is bounded (64 MiB by default) so that a long run's memory stays
flat: the disk store, not memory, is what makes a second run fast.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import cache_budget


def default_cache_dir() -> Path:
    """``$DNI_LAB_CACHE`` or ``~/.cache/dni_lab/hypotheses``."""
    env = os.environ.get("DNI_LAB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dni_lab" / "hypotheses"


def block_key(records: Sequence[Any]) -> str:
    """Content hash of a block of records (strings, arrays, or objects with a stable repr)."""
    h = hashlib.sha256()
    seen: dict[int, int] = {}
    for r in records:
        if isinstance(r, str):
            h.update(b"s%d:" % len(r))
            h.update(r.encode("utf-8", "surrogatepass"))
            extra = getattr(r, "__dict__", None)
            if extra:  # str subclasses such as windows carry their source
                h.update(_attributes(extra, seen))
        elif hasattr(r, "__array__") or hasattr(r, "shape"):
            a = np.ascontiguousarray(np.asarray(r))
            h.update(f"a{a.dtype}{a.shape}:".encode())
            h.update(a.tobytes())
            extra = getattr(r, "__dict__", None)
            if extra:  # array subclasses (grid frames) carry their episode and step
                h.update(repr(sorted((k, repr(v)) for k, v in extra.items())).encode())
        else:
            h.update(b"r:" + repr(r).encode())
    return h.hexdigest()[:32]


def _attributes(extra: dict[str, Any], seen: dict[int, int]) -> bytes:
    """A record's attributes as bytes; a string already hashed in this block (the
    query that many windows share) enters as a back-reference, not again in full.

    The reference names the earlier string's position in the stream, whose content
    is already in the hash, so equal keys still mean equal content.
    """
    out = []
    for k in sorted(extra):
        v = extra[k]
        if isinstance(v, str):
            ref = seen.get(id(v))
            if ref is None:
                seen[id(v)] = len(seen)
                out.append(f"{k}=s{len(v)}:{v}".encode("utf-8", "surrogatepass"))
            else:
                out.append(f"{k}=@{ref}".encode())
        else:
            out.append(f"{k}={v!r}".encode())
    return b"\x00".join(out) + b"\x01"


MEMORY_BYTES = 64 << 20
STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died
_MAX_SIDECAR = 1 << 16
_WARNED_DIRS: set[str] = set()


class CacheWarning(UserWarning):
    """The hypothesis cache dropped a corrupt entry or fell back to memory."""


class _Corrupt(Exception):
    pass


class HypothesisCache:
    """Memory LRU plus optional disk store for hypothesis behaviors.

    Parameters
    ----------
    directory : path, None or False
        Disk store location; ``None`` uses :func:`default_cache_dir`, ``False``
        keeps the cache in memory only.
    max_bytes : int
        Bound on the in-memory LRU (64 MiB by default).
    max_disk_bytes : int
        Bound on the disk store (4 GiB, or ``$DNI_LAB_CACHE_MAX_GB``); least recently
        used entries are removed past it (see :mod:`~dni_lab.backend.hypothesis.cache_budget`).

    Attributes
    ----------
    hits, misses : int
        Counters, for tests and progress reports.
    directory : Path or None
        The disk store; None when memory-only, including after a fallback.
    """

    def __init__(
        self,
        directory: str | os.PathLike | bool | None = None,
        max_bytes: int = MEMORY_BYTES,
        max_disk_bytes: int = cache_budget.DEFAULT_DISK_BYTES,
    ):
        self.directory = None if directory is False else Path(directory or default_cache_dir())
        self.max_bytes = max_bytes
        self.max_disk_bytes = max_disk_bytes
        self._unchecked = max_disk_bytes  # bytes written since the store was last summed
        self._mem: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, family_fp: str, key: str) -> np.ndarray | None:
        """The cached values ``(n_symbols_in_block, n_signals)`` (read-only) or None."""
        k = (family_fp, key)
        with self._lock:
            if k in self._mem:
                self._mem.move_to_end(k)
                self.hits += 1
                return self._mem[k]
        arr = self._load(family_fp, key)
        with self._lock:
            if arr is None:
                self.misses += 1
                return None
            self.hits += 1
        return self._remember(k, arr)

    def put(self, family_fp: str, key: str, values: np.ndarray) -> None:
        """Store ``values`` in memory and, if enabled, on disk."""
        values = self._remember((family_fp, key), np.ascontiguousarray(values, np.float32))
        if self.directory is not None:
            try:
                self._store(family_fp, key, values)
            except OSError as exc:
                self._fall_back(exc, "written")

    def clear(self, disk: bool = False) -> None:
        """Empty the memory LRU (and the disk store's entries with ``disk=True``).

        Temporary files of writers still at work (other processes) are left
        alone; only those older than an hour, whose writer died, go.
        """
        with self._lock:
            self._mem.clear()
            self._bytes = 0
        if not disk or self.directory is None:
            return
        old = time.time() - STALE_TMP_S
        try:
            for p in self.directory.glob("*/*"):
                if p.suffix in (".npy", ".json") or _mtime(p) < old:
                    _remove(p)
        except OSError as exc:
            self._fall_back(exc, "cleared")

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return self._bytes

    # -- internals --------------------------------------------------------------
    def _remember(self, k: tuple[str, str], arr: np.ndarray) -> np.ndarray:
        arr = arr.view()
        arr.flags.writeable = False  # a reader must not change what the next one gets
        if arr.nbytes > self.max_bytes:
            return arr
        with self._lock:
            if k in self._mem:
                self._bytes -= self._mem.pop(k).nbytes
            self._mem[k] = arr
            self._bytes += arr.nbytes
            while self._bytes > self.max_bytes:
                _, old = self._mem.popitem(last=False)
                self._bytes -= old.nbytes
        return arr

    def _fall_back(self, exc: OSError, action: str) -> None:
        directory, self.directory = self.directory, None
        if str(directory) in _WARNED_DIRS:
            return
        _WARNED_DIRS.add(str(directory))
        warnings.warn(
            f"the hypothesis cache directory {directory} cannot be {action} "
            f"({type(exc).__name__}: {exc}); hypothesis values are kept in memory only. "
            "Set DNI_LAB_CACHE to a directory you can write, or pass cache=False.",
            CacheWarning,
            stacklevel=4,
        )

    def _paths(self, fp: str, key: str) -> tuple[Path, Path]:
        assert self.directory is not None
        d = self.directory / fp
        return d / f"{key}.npy", d / f"{key}.json"

    def _store(self, fp: str, key: str, values: np.ndarray) -> None:
        data_path, meta_path = self._paths(fp, key)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, values, allow_pickle=False)
        blob = buf.getvalue()
        meta = {"sha256": hashlib.sha256(blob).hexdigest(), "shape": list(values.shape)}
        _atomic_write(data_path, blob)
        _atomic_write(meta_path, json.dumps(meta).encode())
        # Summing the store costs a directory scan: do it on the first write, then
        # whenever this cache alone may have filled a tenth of the budget.
        self._unchecked += len(blob)
        if self._unchecked >= self.max_disk_bytes // 10:
            self._unchecked = 0
            cache_budget.enforce(self.directory, self.max_disk_bytes)

    def _load(self, fp: str, key: str) -> np.ndarray | None:
        if self.directory is None:
            return None
        data_path, meta_path = self._paths(fp, key)
        try:
            arr = _read_entry(data_path, meta_path)
            cache_budget.touch(data_path)
            return arr
        except FileNotFoundError:  # no entry, or another process cleared it mid-read
            return None
        except PermissionError as exc:
            self._fall_back(exc, "read")
            return None
        except (_Corrupt, OSError) as exc:
            warnings.warn(
                f"hypothesis cache entry {data_path} is corrupt ({exc}); recomputing it.",
                CacheWarning,
                stacklevel=4,
            )
            for p in (data_path, meta_path):
                _remove(p)
            return None


def _read_entry(data_path: Path, meta_path: Path) -> np.ndarray:
    """One entry, checked: every way it can be wrong raises :class:`_Corrupt` or OSError."""
    if not data_path.exists() and not meta_path.exists():
        raise FileNotFoundError(data_path)
    for p, limit in ((meta_path, _MAX_SIDECAR), (data_path, None)):
        st = p.lstat()
        if not stat.S_ISREG(st.st_mode):  # a directory, a link, a device
            raise _Corrupt(f"{p.name} is not a regular file")
        if limit is not None and st.st_size > limit:
            raise _Corrupt(f"{p.name} is {st.st_size} bytes")
    try:
        meta = json.loads(meta_path.read_bytes())
    except ValueError as exc:
        raise _Corrupt(f"unreadable sidecar: {exc}") from None
    if not (
        isinstance(meta, dict)
        and isinstance(meta.get("sha256"), str)
        and isinstance(meta.get("shape"), list)
    ):
        raise _Corrupt("the sidecar is not {sha256, shape}")
    blob = data_path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
        raise _Corrupt("checksum mismatch")
    try:
        arr = np.load(io.BytesIO(blob), allow_pickle=False)
    except Exception as exc:  # numpy reports a bad header in many ways
        raise _Corrupt(f"unreadable array: {type(exc).__name__}: {exc}") from None
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.ndim != 2:
        raise _Corrupt("not a 2-D float32 array")
    if list(arr.shape) != meta["shape"]:
        raise _Corrupt("shape mismatch")
    if np.isinf(arr).any():  # stored values are finite or NaN ("undefined here"), never inf
        raise _Corrupt("infinite values")
    return arr


def _mtime(p: Path) -> float:
    try:
        return p.lstat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _remove(p: Path) -> None:
    """Remove a file or a directory in the cache's place, if this process may."""
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    except OSError:
        pass  # not ours to remove: the entry is recomputed and rewritten if possible


def _atomic_write(path: Path, blob: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# The process-wide cache used when ``dl.inspect(cache=None)``; created on first use.
DEFAULT: HypothesisCache | None = None

_AT: dict[str, HypothesisCache] = {}


def cache_at(directory: str | os.PathLike) -> HypothesisCache:
    """The process's cache stored in ``directory``: one per directory, so that its
    memory layer serves every later call naming it, not just one."""
    key = str(Path(directory).expanduser().resolve())
    cache = _AT.get(key)
    if cache is None or cache.directory is None:  # new, or fell back to memory: try the disk
        cache = _AT[key] = HypothesisCache(directory=key)
    return cache
