"""Hypotheses and hypothesis families, their fingerprints and their alignment to symbols.

A *hypothesis* maps one record to one value per symbol. A *hypothesis family*
maps one record to many named signals at once, so an expensive pass (a parse,
an FSM run) serves every signal. Internally everything is a family: a plain
hypothesis is a family of one signal.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import HypothesisError
from .fingerprint import family_fingerprint

KINDS = ("binary", "continuous", "categorical")

#: What one value of a hypothesis stands for. ``"char"``, ``"word"`` and ``"token"``:
#: one value per character, whitespace-separated word or tokenizer token of a text
#: record; ``"symbol"``: one per symbol of the model that reads it (its own units of
#: input); ``"record"``: one value per record, read at each of its symbols. A model
#: whose symbols are the records' own elements (a plain ``dl.Model``) reads every
#: level but ``"record"`` as its symbols; a tokenizer's model pools ``"char"`` and
#: ``"word"`` values onto its tokens (:mod:`dni_lab.backend.hf.align`).
LEVELS = ("char", "word", "token", "symbol", "record")


@dataclass(frozen=True)
class HypothesisInfo:
    """What a measure may know about one hypothesis column.

    Parameters
    ----------
    name : str
        The hypothesis id (``hid``) shown in the score frame.
    kind : {"binary", "continuous", "categorical"}
        Binary signals are 0/1; categorical signals hold integer codes.
    n_categories : int or None
        Number of categories of a categorical hypothesis (codes ``0..n-1``).
    parent : str or None
        For a category's one-vs-rest indicator (``"{parent}={value}"``, see
        :mod:`.one_vs_rest`): the categorical hypothesis it comes from.
    value : int or None
        That indicator's category code.
    """

    name: str
    kind: str = "continuous"
    n_categories: int | None = None
    parent: str | None = None
    value: int | None = None


class HypothesisFamily:
    """Many named signals computed from one pass over a record.

    Subclass and implement :meth:`evaluate`, or wrap a function with
    :func:`hypothesis_family`. Constructors store parameters only; the
    parameters enter the cache fingerprint through :meth:`get_params`.

    Attributes
    ----------
    name : str
        Family name; signal ids are ``"{name}.{signal}"`` unless the family has
        a single signal whose name equals the family's.
    kind : str or dict
        One kind for all signals or a ``{signal: kind}`` mapping.
    level : str or None
        What one value stands for, one of :data:`LEVELS`; None leaves it to the
        model, which reads it only where exactly one level fits the output's length.
    """

    name: str = "family"
    kind: str | Mapping[str, str] = "binary"
    categories: Mapping[str, int] | None = None
    level: str | None = None

    def signals(self) -> list[str]:
        """Names of the signals, known before any record is read."""
        raise NotImplementedError

    def evaluate(self, record: Any) -> Mapping[str, Sequence[float]] | np.ndarray:
        """Signals of one record: ``{name: values}`` or an array ``(n_symbols, n_signals)``."""
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        """Parameters that change the family's output (part of its fingerprint)."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    # -- derived -----------------------------------------------------------------
    def hids(self) -> list[str]:
        """Hypothesis ids, one per signal, as they appear in the score frame."""
        sigs = self.signals()
        if len(sigs) == 1 and sigs[0] == self.name:
            return [self.name]
        return [f"{self.name}.{s}" for s in sigs]

    def kind_of(self, signal: str) -> str:
        k = self.kind if isinstance(self.kind, str) else self.kind.get(signal, "continuous")
        if k not in KINDS:
            raise HypothesisError(
                f"hypothesis {self.name!r} declares kind {k!r} for signal {signal!r}; "
                f"use one of {KINDS}."
            )
        return k

    def info(self) -> list[HypothesisInfo]:
        cats = self.categories or {}
        return [
            HypothesisInfo(hid, self.kind_of(sig), cats.get(sig))
            for hid, sig in zip(self.hids(), self.signals(), strict=True)
        ]

    def fingerprint(self) -> str | None:
        """Hash of what determines the output, or None (run uncached) when it cannot be known.

        Covers the class's code and what it reads (module globals, helpers, the
        modules it imports) and :meth:`get_params` by value; see
        :mod:`~dni_lab.backend.hypothesis.fingerprint`.
        """
        return family_fingerprint(self)

    def __fingerprint__(self) -> str | None:
        # the fingerprint module's hook: a family inside another, or read by a
        # function, hashes by its own fingerprint (subclasses override fingerprint)
        return self.fingerprint()

    def __call__(self, record: Any) -> Mapping[str, Sequence[float]] | np.ndarray:
        return self.evaluate(record)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {len(self.signals())} signals>"


class Hypothesis(HypothesisFamily):
    """One function ``record -> one value per symbol``, with a name and a kind."""

    def __init__(
        self,
        fn: Callable[[Any], Sequence[float]],
        name: str | None = None,
        kind: str = "binary",
        categories: int | None = None,
        level: str | None = None,
    ) -> None:
        if not callable(fn):
            raise HypothesisError(
                f"hypothesis {fn!r} is not callable; pass a function record -> values."
            )
        self.fn = fn
        self.name = name or _callable_name(fn)
        self.kind = kind
        self.categories = {self.name: categories} if categories is not None else None
        self.level = check_level(self.name, level)
        functools.update_wrapper(self, fn, updated=())
        self.kind_of(self.name)

    def signals(self) -> list[str]:
        return [self.name]

    def evaluate(self, record: Any) -> dict[str, Sequence[float]]:
        return {self.name: self.fn(record)}

    def get_params(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "categories": self.categories}
        if self.level is not None:  # only then: undeclared hypotheses keep their cache keys
            out["level"] = self.level
        return out

    def fingerprint(self) -> str | None:
        return family_fingerprint(self, self.fn)

    def __call__(self, record: Any) -> Sequence[float]:
        return self.fn(record)

    def __repr__(self) -> str:
        return f"<Hypothesis {self.name!r} ({self.kind})>"


class FunctionFamily(HypothesisFamily):
    """A family from a function ``record -> {signal: values}`` with declared signal names."""

    def __init__(
        self,
        fn: Callable[[Any], Mapping[str, Sequence[float]] | np.ndarray],
        signals: Sequence[str],
        name: str | None = None,
        kind: str | Mapping[str, str] = "binary",
        categories: Mapping[str, int] | None = None,
        level: str | None = None,
    ) -> None:
        self.fn = fn
        self.signal_names = list(signals)
        self.name = name or _callable_name(fn)
        self.kind = kind
        self.categories = dict(categories) if categories else None
        self.level = check_level(self.name, level)
        for s in self.signal_names:
            self.kind_of(s)

    def signals(self) -> list[str]:
        return list(self.signal_names)

    def evaluate(self, record: Any) -> Mapping[str, Sequence[float]] | np.ndarray:
        return self.fn(record)

    def get_params(self) -> dict[str, Any]:
        out = {
            "signals": self.signal_names,
            "name": self.name,
            "kind": self.kind,
            "categories": self.categories,
        }
        if self.level is not None:
            out["level"] = self.level
        return out

    def fingerprint(self) -> str | None:
        return family_fingerprint(self, self.fn)


def hypothesis(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    kind: str = "binary",
    categories: int | None = None,
    level: str | None = None,
) -> Any:
    """Declare a hypothesis: ``record -> one value per symbol``.

    Usable bare (``@dl.hypothesis``) or with arguments
    (``@dl.hypothesis(kind="continuous", level="token")``). Plain callables work
    without it; the decorator adds a name, a kind, (for categorical signals) the
    number of categories and the level: what one value stands for, one of
    :data:`LEVELS` (``"char"``, ``"word"``, ``"token"``, ``"symbol"``, ``"record"``).
    Without a level, a model reads the values at the one level whose count equals
    their number, and raises when several levels have that count. A value NaN or
    None means "undefined at this symbol": every measure leaves it out.

    Examples
    --------
    >>> @hypothesis(kind="binary")
    ... def is_digit(record):
    ...     return [c.isdigit() for c in record]
    >>> is_digit("a1")
    [False, True]
    """
    if fn is not None:
        return Hypothesis(fn, name=name, kind=kind, categories=categories, level=level)
    return lambda f: Hypothesis(f, name=name, kind=kind, categories=categories, level=level)


def hypothesis_family(
    *,
    signals: Sequence[str],
    name: str | None = None,
    kind: str | Mapping[str, str] = "binary",
    categories: Mapping[str, int] | None = None,
    level: str | None = None,
) -> Callable[[Callable], FunctionFamily]:
    """Declare a family: ``record -> {signal: values}`` (one expensive pass, many signals).

    ``level`` is what one value stands for, as in :func:`hypothesis`.
    """
    return lambda f: FunctionFamily(
        f, signals, name=name, kind=kind, categories=categories, level=level
    )


def wrapped_fingerprint(inner: HypothesisFamily, how: str) -> str | None:
    """The fingerprint of a family that reads ``inner`` and changes it by ``how`` (a text
    naming the change and its parameters), or None where ``inner`` has none."""
    fp = inner.fingerprint()
    return None if fp is None else hashlib.sha256(f"{fp}|{how}".encode()).hexdigest()


def check_level(name: str, level: str | None) -> str | None:
    """``level`` if it is one of :data:`LEVELS` (or None); else a HypothesisError."""
    if level is not None and level not in LEVELS:
        raise HypothesisError(
            f"hypothesis {name!r} declares level {level!r}; use one of {LEVELS} "
            "(or leave level=None where only one level fits its values' count)."
        )
    return level


def as_family(obj: Any) -> HypothesisFamily:
    """Turn a hypothesis, family or plain callable into a :class:`HypothesisFamily`."""
    if isinstance(obj, HypothesisFamily):
        return obj
    if callable(obj):
        return Hypothesis(obj, kind="continuous" if _looks_continuous(obj) else "binary")
    raise HypothesisError(
        f"{obj!r} is not a hypothesis: pass a function record -> values, a dl.hypothesis, "
        "or a HypothesisFamily."
    )


def for_model(families: list[HypothesisFamily], model: Any) -> list[HypothesisFamily]:
    """The families as ``model`` reads them: aligned to its symbols if they are not the
    records' own (a transformer's tokens, see :meth:`dni_lab.backend.hf.HFModel.align`)."""
    align = getattr(model, "align", None)
    return align(families) if align is not None else families


def evaluate_family(
    family: HypothesisFamily, record: Any, n_symbols: int, record_index: int
) -> np.ndarray:
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


def _per_record(fam: HypothesisFamily, out: Any, n: int, idx: int) -> Any:
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


def _one_value(fam: HypothesisFamily, sig: str, value: Any, idx: int) -> np.ndarray:
    label = fam.name if sig == fam.name else f"{fam.name}.{sig}"
    arr = _numeric(fam, label, [value] if np.ndim(value) == 0 else value, idx).reshape(-1)
    if arr.size != 1:
        raise HypothesisError(
            f"hypothesis {label!r} has level='record' but returned {arr.size} values on "
            f"record {idx}; return one value for the record."
        )
    return arr


def _as_vector(fam: HypothesisFamily, sig: str, values: Any, n: int, idx: int) -> np.ndarray:
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


def _numeric(fam: HypothesisFamily, label: str, values: Any, idx: int) -> np.ndarray:
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


def _check_values(fam: HypothesisFamily, label: str, arr: np.ndarray, n: int, idx: int) -> None:
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


def _callable_name(fn: Callable) -> str:
    if isinstance(fn, functools.partial):
        return _callable_name(fn.func)
    return getattr(fn, "__name__", None) or type(fn).__name__


def _looks_continuous(fn: Callable) -> bool:
    return getattr(fn, "kind", None) == "continuous"


class BlockCancelled(Exception):
    """:func:`hypothesis_block` stopped early because its run was cancelled."""


def hypothesis_block(
    families: list[HypothesisFamily],
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
