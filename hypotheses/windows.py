"""Records that are windows of a longer string, and how families see them.

DeepBase's SQL model reads windows of 30 characters cut every 5 characters
from each query. A hypothesis about a window must still be computed from the
*whole* query: a window that starts inside a WHERE clause is inside it from
its first character, which the window alone cannot show. A :class:`Window`
is therefore an ordinary ``str`` (models encode it as they would any string)
that also remembers its source and offset; the families of this package
compute their signals on ``record.source`` and slice them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from dni_lab.backend.hypothesis.hypotheses import HypothesisFamily

__all__ = ["SourceFamily", "Window", "sliding_windows", "source_span"]


class Window(str):
    """A substring that remembers where it came from.

    Parameters
    ----------
    source : str
        The full string (for example a whole SQL query).
    start : int
        Offset of the window's first character in ``source``.
    width : int
        Number of characters (fewer when ``source`` ends first).

    Notes
    -----
    Equality and hashing are those of ``str``: two windows with the same
    characters compare equal even when their sources differ. Code that
    caches per record must key on ``(source, start)`` for windows.

    Examples
    --------
    >>> w = Window("SELECT id FROM t", 7, 5)
    >>> str(w), w.source, w.start
    ('id FR', 'SELECT id FROM t', 7)
    """

    source: str
    start: int

    def __new__(cls, source: str, start: int, width: int) -> Window:
        if not 0 <= start <= len(source):
            raise ValueError(f"window start {start} is outside its source of length {len(source)}.")
        self = super().__new__(cls, source[start : start + width])
        self.source = str(source)
        self.start = int(start)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle as (source, start, width) so windows survive worker processes.
        return (Window, (self.source, self.start, len(self)))

    def __repr__(self) -> str:
        return f"Window({str.__repr__(self)}, start={self.start})"


def sliding_windows(text: str, width: int = 30, stride: int = 5) -> list[Window]:
    """Windows of ``width`` characters starting every ``stride`` characters.

    Only full windows are cut, except that a text shorter than ``width``
    gives one window holding all of it.

    Examples
    --------
    >>> [str(w) for w in sliding_windows("abcdefg", width=4, stride=2)]
    ['abcd', 'cdef']
    """
    if width < 1 or stride < 1:
        raise ValueError(f"width={width} and stride={stride} must both be >= 1.")
    if len(text) <= width:
        return [Window(text, 0, width)]
    return [Window(text, s, width) for s in range(0, len(text) - width + 1, stride)]


def source_span(record: Any) -> tuple[Any, int, int]:
    """``(full record, start, length)`` of a record: the source for a window, else itself.

    Families compute on the full record and keep ``[start, start + length)``.
    """
    if isinstance(record, Window):
        return record.source, record.start, len(record)
    n = len(record) if isinstance(record, (str, Sequence)) else 0
    return record, 0, n


class SourceFamily(HypothesisFamily):
    """A family computed on whole records, sliced for windows, with a small LRU cache.

    Subclasses implement :meth:`evaluate_source`, returning the float32 matrix
    ``(len(source), len(self.signals()))``. :meth:`evaluate` computes it for
    the window's source (or the record itself) once and slices it, so the
    windows of a query reuse one computation while they arrive together.
    """

    #: Number of whole-record results kept per family instance.
    source_cache_size: int = 64

    def evaluate_source(self, source: Any) -> np.ndarray:
        """Signals of a whole record, shape ``(n_symbols, n_signals)``."""
        raise NotImplementedError

    def evaluate(self, record: Any) -> np.ndarray:
        source, start, n = source_span(record)
        full = self._cached(source)
        return full[start : start + n].copy()

    def _cached(self, source: Any) -> np.ndarray:
        # Created lazily: constructors store parameters only, and pickles stay small.
        if "_lru" not in self.__dict__:
            self._lru: OrderedDict[Any, np.ndarray] = OrderedDict()
            self._lru_lock = threading.Lock()
        key = source if isinstance(source, str) else tuple(source)
        try:
            hash(key)
        except TypeError:  # symbols that cannot be keys (arrays): compute every time
            return np.asarray(self.evaluate_source(source), dtype=np.float32)
        with self._lru_lock:
            hit = self._lru.get(key)
            if hit is not None:
                self._lru.move_to_end(key)
                return hit
        full = np.asarray(self.evaluate_source(source), dtype=np.float32)
        with self._lru_lock:
            self._lru[key] = full
            if len(self._lru) > self.source_cache_size:
                self._lru.popitem(last=False)
        return full

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
