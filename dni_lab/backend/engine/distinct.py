"""Distinct records of a stream, counted as they pass: a stream that only repeats itself
(``itertools.cycle(records)``) adds no information, so reading it on cannot settle a pair.

Each record is reduced to an 8-byte BLAKE2b digest of its content: the characters of a
string (and, for a window of a longer text, its offset and source), the dtype, shape and
bytes of an array or tensor, and the same recursively for the items of a list, tuple or
mapping. A record of any other kind (an object whose content its ``repr`` does not spell
out) cannot be counted, and the counter switches itself off for the run: nothing is then
said about repeats, and nothing ends the run for them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

#: Digests kept at most (about 20 MiB); a stream with more distinct records than this is
#: not one that repeats a few of them, and the counter switches off.
MAX_DISTINCT = 1 << 18

#: The stream repeats itself once this many blocks in a row brought no new record, and
#: at least as many records were read since the last new one as before it.
REPEAT_BLOCKS = 4

_ATOMS = (bool, int, float, complex, type(None))


class Uncountable(Exception):
    """A record whose content cannot be hashed cheaply and exactly."""


def record_bytes(record: Any, depth: int = 0) -> bytes:
    """The bytes that say what ``record`` holds; raises :class:`Uncountable` for a kind
    whose content they cannot say (an arbitrary object, a structure nested too deep)."""
    if isinstance(record, str):
        source = getattr(record, "source", None)  # a window of a longer text: where it is
        extra = f"\x01{getattr(record, 'start', None)}\x01{source}" if source is not None else ""
        return b"s" + (str(record) + extra).encode("utf-8", "surrogatepass")
    if isinstance(record, (bytes, bytearray)):
        return b"b" + bytes(record)
    if isinstance(record, _ATOMS) or isinstance(record, np.generic):
        return repr(record).encode()
    if isinstance(record, torch.Tensor):
        record = record.detach().cpu().numpy()
    if isinstance(record, np.ndarray):
        if record.dtype.hasobject:
            return b"o" + record_bytes(record.tolist(), depth + 1)
        head = f"a{record.dtype}{record.shape}".encode()
        return head + np.ascontiguousarray(record).tobytes()
    if depth > 8:
        raise Uncountable("nested too deep")
    if isinstance(record, (list, tuple)):
        if all(type(x) in (int, str) for x in record):  # token lists: their repr is exact
            return repr(record).encode("utf-8", "surrogatepass")
        parts = [record_bytes(x, depth + 1) for x in record]
        return b"l" + b"".join(len(p).to_bytes(8, "little") + p for p in parts)
    if isinstance(record, Mapping):
        items = sorted((record_bytes(k, depth + 1), record_bytes(v, depth + 1))
                       for k, v in record.items())  # fmt: skip
        return b"m" + b"".join(len(k).to_bytes(8, "little") + k + len(v).to_bytes(8, "little")
                               + v for k, v in items)  # fmt: skip
    raise Uncountable(type(record).__name__)


class DistinctRecords:
    """How many distinct records a stream brought, and since when none was new.

    ``on`` turns False for good at the first record that cannot be counted, or past
    :data:`MAX_DISTINCT` distinct records.
    """

    def __init__(self) -> None:
        self.on = True
        self.count = 0
        self.read = 0  # records seen
        self.last_new = 0  # records seen up to the end of the last block with a new one
        self.stale_blocks = 0  # blocks in a row with no new record
        self._seen: set[bytes] = set()

    def update(self, records: list[Any]) -> None:
        """Count one block of records."""
        if not self.on:
            return
        before = self.count
        try:
            for r in records:
                d = hashlib.blake2b(record_bytes(r), digest_size=8).digest()
                if d not in self._seen:
                    self._seen.add(d)
                    self.count += 1
        except Uncountable:
            self._off()
            return
        if self.count > MAX_DISTINCT:
            self._off()
            return
        self.read += len(records)
        if self.count > before:
            self.last_new, self.stale_blocks = self.read, 0
        else:
            self.stale_blocks += 1

    def repeats(self) -> bool:
        """Whether the stream only repeats records it brought before: no new one for
        :data:`REPEAT_BLOCKS` blocks in a row and for at least as many records as were read
        up to the last new one (reading doubled without a new record)."""
        return (self.on and self.count > 0 and self.stale_blocks >= REPEAT_BLOCKS
                and self.read >= 2 * self.last_new)  # fmt: skip

    def _off(self) -> None:
        self.on = False
        self._seen = set()
