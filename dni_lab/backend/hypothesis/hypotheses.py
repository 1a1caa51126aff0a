"""Hypotheses and hypothesis families: kinds, levels, fingerprints.

A *hypothesis* maps one record to one value per symbol. A *hypothesis family*
maps one record to many named signals at once, so an expensive pass (a parse,
an FSM run) serves every signal. Internally everything is a family: a plain
hypothesis is a family of one signal. Its values are validated and laid out as
blocks in :mod:`.values` (``evaluate_family`` and ``hypothesis_block``, re-exported).
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
from .values import BlockCancelled as BlockCancelled
from .values import evaluate_family as evaluate_family
from .values import hypothesis_block as hypothesis_block

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
        run, which proves it before reading from records where the levels' counts
        differ (:mod:`.levels`).
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
    Without a level, a run decides it once, before reading, from the data's first
    records whose counts of characters, words and tokens differ (:mod:`.levels`), and
    asks for ``level=`` up front where they never differ. A value NaN or
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


def _callable_name(fn: Callable) -> str:
    if isinstance(fn, functools.partial):
        return _callable_name(fn.func)
    return getattr(fn, "__name__", None) or type(fn).__name__


def _looks_continuous(fn: Callable) -> bool:
    return getattr(fn, "kind", None) == "continuous"
