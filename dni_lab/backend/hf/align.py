"""Character- and word-level hypotheses read as token-level ones, through offsets.

A hypothesis written for characters (one value per character, as an LSTM over
characters reads them) or for words (one value per whitespace-separated word)
is evaluated as written, then pooled over each token's character span:

* ``"first"`` / ``"last"``: the value at the token's first / last character,
* ``"mean"``: the mean over its characters,
* ``"any"``: the maximum (for 0/1 signals: 1 if any character is 1).

A token whose span is empty (a whitespace token trimmed to nothing) takes no
character's value: 0 with ``"any"``, else the nearest preceding token's value
(:func:`pool_spans` says why and gives the edge cases).

The pooling is chosen per hypothesis kind (binary → any, continuous → mean,
categorical → first by default). Its level is read from the output's length:
as many values as characters, words, or tokens (already token-level, kept).
The tokenizer and the pooling enter the family's fingerprint, so the
hypothesis cache never serves character values to tokens or one tokenizer's
tokens to another.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import HypothesisError
from ..hypothesis.hypotheses import HypothesisFamily, evaluate_family

POOLS = ("first", "last", "mean", "any")
DEFAULT_POOL = {"binary": "any", "continuous": "mean", "categorical": "first"}
_WORD = re.compile(r"\S+")


def pool_spans(values: np.ndarray, spans: list[tuple[int, int]], how: str) -> np.ndarray:
    """Pool ``(n_chars, k)`` values over each span: ``(len(spans), k)``.

    Parameters
    ----------
    values : np.ndarray
        ``(n_chars, k)``: one row per character (or word) of the record.
    spans : list of (int, int)
        Each token's ``[start, end)`` span over those rows.
    how : {"first", "last", "mean", "any"}
        The pooling (see the module docstring).

    Returns
    -------
    np.ndarray
        ``(len(spans), k)`` float32, one row per token.

    Notes
    -----
    An *empty* span (a token that covers no character, e.g. a byte-level BPE's lone
    ``Ġ`` whose offset the tokenizer trimmed to ``(2, 2)``) takes no character's
    value. With ``"any"`` it is 0: any over nothing is false. With ``"first"``,
    ``"last"`` and ``"mean"`` there is no value to take; NaN ("no value") cannot
    flow, since hypothesis values must be finite and the measures mask symbols,
    not single values. So such a token repeats the pooled value of the nearest
    *preceding* non-empty token (the nearest following one when it opens the
    record), and is 0 when no token of the record covers a character.
    """
    n = len(values)
    out = np.zeros((len(spans), values.shape[1]), dtype=np.float32)
    covered = np.zeros(len(spans), dtype=bool)
    for j, (s, e) in enumerate(spans):
        s, e = max(s, 0), min(e, n)
        if e <= s:
            continue  # empty: filled below, never from the next character
        covered[j] = True
        seg = values[s:e]
        if how == "first":
            out[j] = seg[0]
        elif how == "last":
            out[j] = seg[-1]
        elif how == "mean":
            out[j] = seg.mean(0)
        else:
            out[j] = seg.max(0)
    if how != "any" and covered.any() and not covered.all():
        # index of the last covered token at or before each token; leading empties
        # (no covered token before them) take the first covered one
        last = np.maximum.accumulate(np.where(covered, np.arange(len(spans)), -1))
        out = out[np.where(last < 0, int(np.argmax(covered)), last)]
    return out


def word_spans(record: str) -> list[tuple[int, int]]:
    """Character span of each whitespace-separated word."""
    return [m.span() for m in _WORD.finditer(record)]


class AlignedFamily(HypothesisFamily):
    """``family`` evaluated on characters or words, read per token of ``model``."""

    def __init__(self, family: HypothesisFamily, model: Any) -> None:
        self.family = family
        self.model = model
        self.name = family.name
        self.kind = family.kind
        self.categories = family.categories

    def signals(self) -> list[str]:
        return self.family.signals()

    def hids(self) -> list[str]:
        return self.family.hids()

    def evaluate(self, record: Any) -> np.ndarray:
        try:
            return self._evaluate(record)
        except HypothesisError as exc:  # the record's index is not known here: show the record
            raise HypothesisError(str(exc).replace("record -1", f"record {record[:40]!r}")) from exc

    def _evaluate(self, record: Any) -> np.ndarray:
        raw = self.family.evaluate(record)
        spans = self.model.offsets(record)
        n = _length(raw)
        n_chars, words = len(record), None
        if n != n_chars:
            words = word_spans(record)
        if n == n_chars:
            level = "character"
        elif n == len(words):
            level = "word"
        elif n == len(spans):
            return evaluate_family(_Given(self.family, raw), record, n, -1)
        else:
            raise HypothesisError(
                f"hypothesis {self.name!r} returned {n} values for a record of {n_chars} "
                f"characters, {len(words)} words and {len(spans)} tokens of model "
                f"{self.model.name!r}: {record[:40]!r}; return one value per character or word."
            )
        values = evaluate_family(_Given(self.family, raw), record, n, -1)
        if level == "word" and getattr(self.model, "record_pool", None):
            spans = [(0, len(words))]  # one record-level symbol: every word
        elif level == "word":
            # a token belongs to the word its first character falls in; an empty
            # span stays empty (it covers no character, so no word either)
            starts = np.asarray([s for s, _ in words])
            at = np.maximum(np.searchsorted(starts, [s for s, _ in spans], "right") - 1, 0)
            spans = [(int(w), int(w) + int(e > s)) for w, (s, e) in zip(at, spans, strict=True)]
        cols = []
        for k, sig in enumerate(self.signals()):
            how = self.model.pool[self.family.kind_of(sig)]
            cols.append(pool_spans(values[:, k : k + 1], spans, how))
        return np.concatenate(cols, axis=1)

    def get_params(self) -> dict[str, Any]:
        return {"family": self.family.get_params(), "space": self.model.symbol_space}

    def fingerprint(self) -> str | None:
        inner = self.family.fingerprint()
        if inner is None:
            return None
        blob = f"{inner}|aligned|{self.model.symbol_space}".encode()
        return hashlib.sha256(blob).hexdigest()

    def __repr__(self) -> str:
        return f"<AlignedFamily {self.name!r} -> tokens of {self.model.name!r}>"


class _Given(HypothesisFamily):
    """A family whose output for the record at hand is already known (validation only)."""

    def __init__(self, family: HypothesisFamily, raw: Any) -> None:
        self.name, self.kind, self._family, self._raw = family.name, family.kind, family, raw

    def signals(self) -> list[str]:
        return self._family.signals()

    def evaluate(self, record: Any) -> Any:
        return self._raw


def _length(raw: Any) -> int:
    if isinstance(raw, Mapping):
        first = next(iter(raw.values()), None)
        return len(first) if first is not None else 0
    return int(np.shape(raw)[0]) if np.ndim(raw) else 0
