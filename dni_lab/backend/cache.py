"""Hypothesis-behavior cache: an in-memory LRU bounded in bytes plus an on-disk store.

An entry holds one hypothesis family's signals over one block of records,
keyed by the family's fingerprint (qualified name, source, parameters) and a
content hash of the block. Re-running the same hypotheses over the same data
with another model (another checkpoint, an untrained copy) reads the entries
instead of calling the hypothesis functions again.

On disk an entry is a ``.npy`` file (never pickled) and a JSON sidecar with its
SHA-256; files are written to a temporary name and renamed, so a crash never
leaves half an entry. A corrupt entry is dropped with a warning and recomputed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def default_cache_dir() -> Path:
    """``$DNI_LAB_CACHE`` or ``~/.cache/dni_lab/hypotheses``."""
    env = os.environ.get("DNI_LAB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dni_lab" / "hypotheses"


def block_key(records: Sequence[Any]) -> str:
    """Content hash of a block of records (strings, arrays, or objects with a stable repr)."""
    h = hashlib.sha256()
    for r in records:
        if isinstance(r, str):
            h.update(b"s%d:" % len(r))
            h.update(r.encode("utf-8", "surrogatepass"))
            extra = getattr(r, "__dict__", None)
            if extra:  # str subclasses such as windows carry their source
                h.update(repr(sorted(extra.items())).encode())
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


class HypothesisCache:
    """Memory LRU plus optional disk store for hypothesis behaviors.

    Parameters
    ----------
    directory : path, None or False
        Disk store location; ``None`` uses :func:`default_cache_dir`, ``False``
        keeps the cache in memory only.
    max_bytes : int
        Bound on the in-memory LRU.

    Attributes
    ----------
    hits, misses : int
        Counters, for tests and progress reports.
    """

    def __init__(
        self, directory: str | os.PathLike | bool | None = None, max_bytes: int = 512 << 20
    ):
        self.directory = None if directory is False else Path(directory or default_cache_dir())
        self.max_bytes = max_bytes
        self._mem: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, family_fp: str, key: str) -> np.ndarray | None:
        """The cached values ``(n_symbols_in_block, n_signals)`` or None."""
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
        self._remember(k, arr)
        return arr

    def put(self, family_fp: str, key: str, values: np.ndarray) -> None:
        """Store ``values`` in memory and, if enabled, on disk."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        self._remember((family_fp, key), values)
        if self.directory is not None:
            self._store(family_fp, key, values)

    def clear(self, disk: bool = False) -> None:
        """Empty the memory LRU (and the disk store with ``disk=True``)."""
        with self._lock:
            self._mem.clear()
            self._bytes = 0
        if disk and self.directory is not None and self.directory.exists():
            for p in self.directory.glob("*/*"):
                p.unlink(missing_ok=True)

    @property
    def nbytes(self) -> int:
        """Bytes held in memory."""
        return self._bytes

    # -- internals --------------------------------------------------------------
    def _remember(self, k: tuple[str, str], arr: np.ndarray) -> None:
        if arr.nbytes > self.max_bytes:
            return
        with self._lock:
            if k in self._mem:
                self._bytes -= self._mem.pop(k).nbytes
            self._mem[k] = arr
            self._bytes += arr.nbytes
            while self._bytes > self.max_bytes:
                _, old = self._mem.popitem(last=False)
                self._bytes -= old.nbytes

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

    def _load(self, fp: str, key: str) -> np.ndarray | None:
        if self.directory is None:
            return None
        data_path, meta_path = self._paths(fp, key)
        if not data_path.exists() or not meta_path.exists():
            return None
        try:
            blob = data_path.read_bytes()
            meta = json.loads(meta_path.read_text())
            if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
                raise ValueError("checksum mismatch")
            arr = np.load(io.BytesIO(blob), allow_pickle=False)
            if list(arr.shape) != meta["shape"]:
                raise ValueError("shape mismatch")
            return arr
        except (OSError, ValueError, KeyError) as exc:
            warnings.warn(
                f"hypothesis cache entry {data_path} is corrupt ({exc}); recomputing it.",
                stacklevel=3,
            )
            data_path.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            return None


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
