"""A byte budget for the hypothesis cache's disk store: least recently used entries go first.

Fingerprints change whenever a hypothesis's code or what it reads changes, so a
store that only grows keeps every superseded version of every hypothesis. Each
entry's ``.npy`` file records its last use in its modification time (a read
touches it), and a writer that has added enough bytes since its last check sums
the store and removes the oldest entries until the store is back under 90% of
its budget. Files in flight (``*.tmp``) are never counted or removed here, and
an entry another process removes meanwhile is simply recomputed by whoever
needs it next.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Default budget of the disk store: ``$DNI_LAB_CACHE_MAX_GB`` or 4 GiB.
DEFAULT_DISK_BYTES = int(float(os.environ.get("DNI_LAB_CACHE_MAX_GB", "4")) * 2**30)

#: After an eviction the store is brought down to this share of its budget, so
#: that the next writes do not each trigger a scan.
LOW_WATER = 0.9


def touch(path: Path) -> None:
    """Mark an entry as just used (best effort: a read-only store keeps its order)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _entries(directory: Path) -> list[tuple[float, int, Path]]:
    """``(last use, bytes of data and sidecar, data path)`` of every complete entry."""
    out = []
    for data in directory.glob("*/*.npy"):
        try:
            st = data.stat()
        except OSError:  # removed by another process meanwhile
            continue
        try:
            meta_size = data.with_suffix(".json").stat().st_size
        except OSError:  # a sidecar not yet written, or already removed
            meta_size = 0
        out.append((st.st_mtime, st.st_size + meta_size, data))
    return out


def enforce(directory: Path, max_bytes: int) -> int:
    """Remove least recently used entries until the store holds at most ``max_bytes``.

    Returns the bytes the store holds afterwards.
    """
    entries = _entries(directory)
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return total
    target = int(max_bytes * LOW_WATER)
    for _, size, data in sorted(entries, key=lambda e: e[0]):
        if total <= target:
            break
        for p in (data, data.with_suffix(".json")):
            try:
                p.unlink(missing_ok=True)
            except OSError:  # not ours to remove
                break
        else:
            total -= size
    return total
