"""A record's hypothesis values: evaluated, validated, laid out as a block of symbols.

:func:`evaluate_family` runs one family on one record and checks what came back (one
value per symbol and signal, numbers, no infinity; NaN/None kept as "undefined here";
a ``"record"``-level value repeated at every symbol); :func:`hypothesis_block` lays a
block of records out as the ``(R, T, n_signals)`` array the measures read, through the
hypothesis cache. Families are duck-typed here (``name``, ``signals()``,
``evaluate()``, ``level``, ``fingerprint()``): :mod:`.hypotheses` defines them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import HypothesisError


def evaluate_family(family: Any, record: Any, n_symbols: int, record_index: int) -> np.ndarray:
    """Run ``family`` on one record and validate: returns float32 ``(n_symbols, n_signals)``.

    A family of level ``"record"`` returns one value per signal, which every symbol
    of the record reads. NaN (or None) stays NaN: "undefined at this symbol", which
    the measures leave out.

    Raises
    ------
    HypothesisError
        On wrong length, non-numeric values, inf, or missing/unknown signals;
        the message names the hypothesis, the record index and both lengths.
    """
    sigs = family.signals()
    try:
        out = family.evaluate(record)
    except HypothesisError:
        raise
    except Exception as exc:
        raise HypothesisError(
            f"hypothesis {family.name!r} raised {type(exc).__name__} on record {record_index}: "
            f"{exc}"
        ) from exc
    if getattr(family, "level", None) == "record":
        out = _per_record(family, out, n_symbols, record_index)
    if isinstance(out, Mapping):
        missing = [s for s in sigs if s not in out]
        if missing:
            raise HypothesisError(
                f"hypothesis family {family.name!r} returned no values for signals {missing} "
                f"on record {record_index}; its signals() are {sigs}."
            )
        cols = [_as_vector(family, s, out[s], n_symbols, record_index) for s in sigs]
        return np.stack(cols, axis=1) if cols else np.zeros((n_symbols, 0), np.float32)
    arr = _numeric(family, family.name, out, record_index)
    if arr.ndim == 1 and len(sigs) == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] != len(sigs):
        raise HypothesisError(
            f"hypothesis {family.name!r} returned shape {arr.shape} on record {record_index}; "
            f"expected ({n_symbols}, {len(sigs)}): one row per symbol, one column per signal."
        )
    _check_values(family, family.name, arr, n_symbols, record_index)
    return arr


def _per_record(fam: Any, out: Any, n: int, idx: int) -> Any:
    """A record-level output (one value per signal) repeated at each of ``n`` symbols."""
    sigs = fam.signals()
    if isinstance(out, Mapping):
        return {s: np.repeat(_one_value(fam, s, out[s], idx), n) for s in sigs if s in out}
    arr = _numeric(fam, fam.name, out, idx).reshape(-1)
    if arr.size != len(sigs):
        raise HypothesisError(
            f"hypothesis {fam.name!r} has level='record' but returned {arr.size} values on "
            f"record {idx}; return one value per signal ({len(sigs)}), not one per symbol."
        )
    return np.repeat(arr[None, :], n, axis=0)


def _one_value(fam: Any, sig: str, value: Any, idx: int) -> np.ndarray:
    label = fam.name if sig == fam.name else f"{fam.name}.{sig}"
    arr = _numeric(fam, label, [value] if np.ndim(value) == 0 else value, idx).reshape(-1)
    if arr.size != 1:
        raise HypothesisError(
            f"hypothesis {label!r} has level='record' but returned {arr.size} values on "
            f"record {idx}; return one value for the record."
        )
    return arr


def _as_vector(fam: Any, sig: str, values: Any, n: int, idx: int) -> np.ndarray:
    label = fam.name if sig == fam.name else f"{fam.name}.{sig}"
    arr = _numeric(fam, label, values, idx)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        arr = arr.reshape(-1) if arr.size == n else arr
    if arr.ndim != 1:
        raise HypothesisError(
            f"hypothesis {label!r} returned an array of shape {arr.shape} on record {idx}; "
            f"expected {n} values, one per symbol."
        )
    _check_values(fam, label, arr, n, idx)
    return arr


def _numeric(fam: Any, label: str, values: Any, idx: int) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        sample = repr(values)[:60]
        raise HypothesisError(
            f"hypothesis {label!r} returned non-numeric values on record {idx} ({sample}); "
            "return numbers or booleans, one per symbol."
        ) from exc
    return arr


def _check_values(fam: Any, label: str, arr: np.ndarray, n: int, idx: int) -> None:
    if arr.shape[0] != n:
        raise HypothesisError(
            f"hypothesis {label!r} returned {arr.shape[0]} values for record {idx}, "
            f"which has {n} symbols; return exactly one value per symbol."
        )
    if np.isinf(arr).any():  # NaN is "undefined here"; an infinity is a bug
        bad = int(np.argwhere(np.isinf(arr))[0][0])
        raise HypothesisError(
            f"hypothesis {label!r} returned inf at symbol {bad} of record {idx}; "
            "return a finite value, or NaN/None where the hypothesis is undefined."
        )


class BlockCancelled(Exception):
    """:func:`hypothesis_block` stopped early because its run was cancelled."""


def hypothesis_block(
    families: list[Any],
    records: list[Any],
    n_symbols: list[int],
    first_index: int,
    cache: Any,
    fingerprints: list[str] | None = None,
    skip: set[int] | frozenset[int] = frozenset(),
    cancelled: Callable[[], bool] | None = None,
    records_key: str | None = None,
) -> np.ndarray:
    """Hypothesis behaviors of a block: float32 ``(R, T, n_signals)``, zero-padded.

    ``cancelled()`` is asked between records; when it says True the block is abandoned
    with :class:`BlockCancelled` (slow hypotheses would otherwise delay a Stop by a block).

    Each family is looked up in ``cache`` (a :class:`~.cache.HypothesisCache` or
    None) by its fingerprint and the block's content hash; missing entries are
    computed record by record and validated. Families whose index is in ``skip``
    (every score of theirs has converged) are not evaluated: their columns stay 0.
    ``records_key`` is the block's :func:`~.cache.block_key` when the caller has it.
    """
    from .cache import block_key

    R = len(records)
    T = max(n_symbols, default=0)
    offsets = np.concatenate([[0], np.cumsum(n_symbols)])
    key = "" if cache is None else records_key or block_key(records)
    cols = []
    for j, fam in enumerate(families):
        n_sig = len(fam.signals())
        if j in skip:
            cols.append(np.zeros((offsets[-1], n_sig), np.float32))
            continue
        # None: no cache, or a family that cannot be fingerprinted (it runs uncached)
        fp = None if cache is None else fingerprints[j] if fingerprints else fam.fingerprint()
        flat = cache.get(fp, key) if fp is not None else None
        if flat is None or flat.shape != (offsets[-1], n_sig):
            parts = []
            for i, (rec, n) in enumerate(zip(records, n_symbols, strict=True)):
                if cancelled is not None and cancelled():  # a Stop acts between records
                    raise BlockCancelled
                parts.append(evaluate_family(fam, rec, n, first_index + i))
            flat = np.concatenate(parts) if parts else np.zeros((0, n_sig), np.float32)
            if fp is not None:
                cache.put(fp, key, flat)
        cols.append(flat)
    flat = np.concatenate(cols, axis=1) if cols else np.zeros((offsets[-1], 0), np.float32)
    out = np.zeros((R, T, flat.shape[1]), dtype=np.float32)
    rows = np.repeat(np.arange(R), n_symbols)
    pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], n_symbols)
    out[rows, pos] = flat
    return out
