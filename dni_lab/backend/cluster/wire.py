"""What a probe holder sends the driver, compactly: results, settled pairs, frozen scores.

A holder (probes.py) keeps the states of a run and, with early stopping, checks their
convergence itself; the driver then needs per block only which pairs converged or are
decided (:func:`settled`: two bits a pair, and nothing for a state whose bits did not
change), and the scores frozen when pairs converged only when it shows a frame
(:func:`frozen_since`: each pair's once). A result is sent as arrays, a group's
broadcast rows once and reasons as byte codes, and not at all when it equals the one
the driver has (:func:`encode`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..engine.states import MeasureState
from ..measures.base import MeasureResult

#: What the driver is sent per state when its bits changed: converged and decided pairs,
#: each bit-packed, why the decided ones are decided, and, for a state that stopped
#: reading because more records cannot settle it, where it stopped and why.
Bits = tuple[np.ndarray, np.ndarray, str, "tuple[int, str] | None"]


def settled(state: MeasureState) -> Bits:
    """``state``'s converged and decided pairs, a bit each, its ``decided_why`` and stop."""
    stop = None if state.saturated is None else (state.stopped_at, state.saturated)
    return np.packbits(state.converged), np.packbits(state.decided), state.decided_why, stop


def apply_settled(state: MeasureState, bits: Bits, eps: float | None = None) -> None:
    """Set the driver's copy of a held state to the holder's converged and decided pairs."""
    conv, dec, why, stop = bits
    shape, n = state.converged.shape, state.converged.size
    state.converged = np.unpackbits(conv, count=n).reshape(shape).astype(bool)
    state.decided = np.unpackbits(dec, count=n).reshape(shape).astype(bool)
    state.decided_why = why
    if stop is not None and state.stopped_at is None:  # saturated on the holder
        state.stop(eps, *stop)


def frozen_since(state: MeasureState, sent: np.ndarray) -> dict[str, Any] | None:
    """The frozen scores of the pairs converged since ``sent`` (updated in place)."""
    fresh = state.converged & ~sent
    if state.frozen is None or state.frozen_records is None or not fresh.any():
        return None
    sent |= fresh
    idx = np.flatnonzero(fresh)
    f = state.frozen
    part = MeasureResult(*(np.asarray(getattr(f, k)).ravel()[idx]
                           for k in ("unit_score", "group_score", "err", "reason")))  # fmt: skip
    return {"at": idx.astype(np.int32), "records": state.frozen_records.ravel()[idx],
            "scores": encode(part, None)[1]}  # fmt: skip


def apply_frozen(state: MeasureState, delta: dict[str, Any]) -> None:
    """Put frozen scores the holder sent into the driver's copy of the state."""
    part = decode(delta["scores"])
    shape, idx = state.converged.shape, delta["at"]
    new = np.zeros(state.converged.size, bool)
    new[idx] = True
    new = new.reshape(shape)

    def spread(v: np.ndarray, fill: Any) -> np.ndarray:
        out = np.full(state.converged.size, fill, dtype=v.dtype)
        out[idx] = v
        return out.reshape(shape)

    full = MeasureResult(spread(part.unit_score, np.nan), spread(part.group_score, np.nan),
                         spread(part.err, np.nan), spread(part.reason, None))  # fmt: skip
    state.freeze(full, new, 0)  # MeasureState's own bookkeeping, then each pair's records
    assert state.frozen_records is not None
    state.frozen_records[new] = delta["records"]


def nbytes(obj: Any) -> int:
    """The array bytes in a (nested) payload: what :attr:`ProbeLink.received` counts."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


def encode(res: MeasureResult, known: str | None) -> tuple[str, dict[str, Any] | None]:
    """``res`` as arrays, a group's broadcast rows once and reasons as codes; no payload
    when its digest is ``known`` (a probe's result changes at its checkpoints only)."""
    out: dict[str, Any] = {"unit_score": np.ascontiguousarray(res.unit_score),
                           "err": np.ascontiguousarray(res.err)}  # fmt: skip
    for name in ("group_score", "group_err"):
        v = getattr(res, name)
        if v is None:
            continue
        v = np.asarray(v)
        same = (
            v.ndim == 2
            and len(v) > 0
            and np.array_equal(v, np.broadcast_to(v[:1], v.shape), equal_nan=True)
        )
        out[name] = np.ascontiguousarray(v[:1] if same else v)
        out[name + "_rows"] = v.shape[0] if same else 0
    texts: dict[Any, int] = {}
    codes = [texts.setdefault(r, len(texts)) for r in res.reason.ravel()]
    small = np.uint8 if len(texts) <= 256 else np.int32  # a handful of reasons: a byte each
    out["reason_codes"] = np.array(codes, small).reshape(res.reason.shape)
    out["reason_texts"] = list(texts)
    if res.n_undefined is not None:  # undefined hypothesis values left out, per pair
        out["n_undefined"] = np.ascontiguousarray(res.n_undefined)
    h = hashlib.sha256()
    for k in sorted(out):
        v = out[k]
        h.update(k.encode() + (v.tobytes() if isinstance(v, np.ndarray) else repr(v).encode()))
    digest = h.hexdigest()
    return digest, (None if digest == known else out)


def decode(p: dict[str, Any]) -> MeasureResult:
    """The result :func:`encode` shipped."""

    def rows(name: str) -> np.ndarray | None:
        if name not in p:
            return None
        n = p[name + "_rows"]
        return np.repeat(p[name], n, axis=0) if n else p[name]

    texts = np.empty(len(p["reason_texts"]), dtype=object)
    texts[:] = p["reason_texts"]
    return MeasureResult(p["unit_score"], rows("group_score"), p["err"],
                         texts[p["reason_codes"]], rows("group_err"),
                         p.get("n_undefined"))  # fmt: skip


def no_result(state: Any) -> MeasureResult:
    """No result yet (a Stop before the first): every score null, saying so."""
    shape = state.converged.shape
    nan = np.full(shape, np.nan)
    return MeasureResult(nan, nan.copy(), nan.copy(), np.full(shape, "no score yet", object))
