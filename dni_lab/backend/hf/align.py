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
categorical → first by default). NaN ("undefined here") is left out of a
span's pool; a token all of whose characters are undefined is undefined.

A token-id record (:mod:`.token_records`) has no characters: the hypothesis reads its
decoded tokens and gives one value per token (or per record), nothing is pooled.

The level is the hypothesis's declaration (``level="char" | "word" | "token" |
"symbol" | "record"``; ``"symbol"`` is the token here, ``"record"`` one value
read at every token). Undeclared, a run decides it once, before its first block
(:meth:`AlignedFamily.decide`, :mod:`..hypothesis.levels`): the one level whose count
equals the output's length on every record of the data's start whose counts differ.
A record whose characters, words and tokens coincide in number (``'9'``; ``'🤖xy'``:
3 characters and 3 tokens) is no evidence, and once the level is decided it is read
at that level; a record whose length fits another level is an error naming the
record, the level and its evidence. Read outside a run (no decision), the level is
the one whose count equals the length on the record at hand, and a
:class:`HypothesisError` asks for ``level=`` where counts coincide.
The tokenizer and the pooling enter the family's fingerprint, so the
hypothesis cache never serves character values to tokens or one tokenizer's
tokens to another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import HypothesisError
from ..hypothesis import levels
from ..hypothesis.hypotheses import HypothesisFamily, evaluate_family, wrapped_fingerprint

POOLS = ("first", "last", "mean", "any")
#: the count a level's length is checked against (``"symbol"``: the model's, its tokens)
_COUNTED = {"symbol": "token"}
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
    if np.isnan(values).any():
        _pool_defined(values, spans, how, out, covered)
    if how != "any" and covered.any() and not covered.all():
        # index of the last covered token at or before each token; leading empties
        # (no covered token before them) take the first covered one
        last = np.maximum.accumulate(np.where(covered, np.arange(len(spans)), -1))
        out = out[np.where(last < 0, int(np.argmax(covered)), last)]
    return out


def _pool_defined(
    values: np.ndarray,
    spans: list[tuple[int, int]],
    how: str,
    out: np.ndarray,
    covered: np.ndarray,
) -> None:
    """Re-pool, in place, the spans that hold an undefined (NaN) value over the defined ones.

    ``"first"``/``"last"`` take the first/last *defined* character; a span whose every
    character is undefined is undefined (NaN). Only rows with a NaN are touched, so a
    hypothesis without NaN pools exactly as before.
    """
    n = len(values)
    for j, (s, e) in enumerate(spans):
        s, e = max(s, 0), min(e, n)
        if e <= s or not covered[j]:
            continue
        seg = values[s:e]
        bad = np.isnan(seg)
        if not bad.any():
            continue
        for k in np.flatnonzero(bad.any(0)):
            col = seg[~bad[:, k], k]
            if not len(col):
                out[j, k] = np.nan
            elif how == "first":
                out[j, k] = col[0]
            elif how == "last":
                out[j, k] = col[-1]
            elif how == "mean":
                out[j, k] = col.mean()
            else:
                out[j, k] = col.max()


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
        self.level = "token"  # what it returns; the family's own level is read in _evaluate
        #: the family's level as a run decided it before reading (:meth:`decide`), if it did
        self.decision: levels.LevelDecision | None = None

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
        if not isinstance(record, str):  # token ids: the symbols are the tokens, no spans
            return self._evaluate_tokens(record)
        spans = self.model.offsets(record)
        if not spans:  # a record the model skips (too long) holds no symbol to read at
            return np.zeros((0, len(self.signals())), np.float32)
        declared = getattr(self.family, "level", None)
        if declared == "record":  # one value, read at every token
            return evaluate_family(self.family, record, len(spans), -1)
        raw = self.family.evaluate(record)
        n = _length(raw)
        words = word_spans(record)
        level = declared or (self.decision.level if self.decision is not None else None)
        if level is None:  # read outside a run: this record's counts alone
            level = self._level(record, n, len(words), len(spans))
        counts = {"char": len(record), "word": len(words), "token": len(spans)}
        if n != counts[_COUNTED.get(level, level)]:
            raise self._mismatch(record, n, counts, level)
        if level in ("token", "symbol"):
            return evaluate_family(_Given(self.family, raw), record, len(spans), -1)
        values = evaluate_family(
            _Given(self.family, raw), record, len(record) if level == "char" else len(words), -1
        )
        if level == "word" and getattr(self.model, "record_pool", None):
            spans = [(0, len(words))]  # one record-level symbol: every word
        elif level == "word":
            # a token belongs to the word its first character falls in; an empty
            # span stays empty (it covers no character, so no word either)
            starts = np.asarray([s for s, _ in words])
            at = np.maximum(np.searchsorted(starts, [s for s, _ in spans], "right") - 1, 0)
            spans = [(int(w), int(w) + int(e > s)) for w, (s, e) in zip(at, spans, strict=True)]
        cols = []
        # a one-vs-rest indicator pools as its categorical parent does (OneVsRest.pool_kind)
        kind_of = getattr(self.family, "pool_kind", self.family.kind_of)
        for k, sig in enumerate(self.signals()):
            how = self.model.pool[kind_of(sig)]
            cols.append(pool_spans(values[:, k : k + 1], spans, how))
        return np.concatenate(cols, axis=1)

    def _evaluate_tokens(self, record: Any) -> np.ndarray:
        """A token-id record: the family reads its :class:`.token_records.TokenRecord`."""
        declared = getattr(self.family, "level", None)
        if declared in ("char", "word"):
            raise HypothesisError(
                f"hypothesis {self.name!r} is {declared}-level, but record {record!r:.40} is "
                f"token ids: model {self.model.name!r} reads no {declared}s of it. Pass the "
                "texts as data (tokenizer.batch_decode(ids)), or give one value per token of "
                "the TokenRecord it gets (record.tokens) and declare level='token'."
            )
        tokens = self.model.token_record(record)
        return evaluate_family(self.family, tokens, self.model.symbols(record), -1)

    def counts(self, record: Any) -> dict[str, int] | None:
        """``record``'s characters, words and tokens, or None where it has no symbol (a
        record too long and skipped): what a level's length is compared with."""
        spans = self.model.offsets(record)
        if not spans:
            return None
        return {"char": len(record), "word": len(word_spans(record)), "token": len(spans)}

    def decide(self, records: list[tuple[int, Any]]) -> levels.LevelDecision:
        """Decide the family's level once, from the data's first ``(position, record)``s.

        A declared level is obeyed; token-id records have tokens only; otherwise the
        level is proved from the records whose counts differ
        (:func:`~..hypothesis.levels.decide`). A decided level is kept for
        :meth:`evaluate`; an undecided one is a question the caller asks before reading.
        """
        declared = getattr(self.family, "level", None)
        ids = bool(records) and not isinstance(records[0][1], str)
        if ids and declared in ("char", "word"):  # asked up front, not on the first record
            decision = levels.LevelDecision(self.name, self.model.name, None, "no characters",
                                            ("token", "record"), declared=declared)  # fmt: skip
        elif declared is not None:
            decision = levels.LevelDecision(self.name, self.model.name, declared, "declared")
        elif ids:
            decision = levels.LevelDecision(self.name, self.model.name, "token", "token ids")
        else:
            decision = levels.decide(self.name, self.model.name, records, self.counts,
                                     self._length_at)  # fmt: skip
        self.decision = decision if decision.decided and declared is None else None
        return decision

    def _length_at(self, index: int, record: str) -> int:
        """The number of values the family returns for the record at ``index``."""
        try:
            return _length(self.family.evaluate(record))
        except HypothesisError:
            raise
        except Exception as exc:  # as evaluate_family words it, with the record's position
            raise HypothesisError(f"hypothesis {self.name!r} raised {type(exc).__name__} on "
                                  f"record {index}: {exc}") from exc  # fmt: skip

    def _mismatch(self, record: str, n: int, counts: dict[str, int], level: str) -> Exception:
        """A record whose length does not fit the family's level (declared or decided)."""
        said = f"{counts['char']} characters, {counts['word']} words and {counts['token']} tokens"
        if self.decision is not None and getattr(self.family, "level", None) is None:
            why = f"{self.decision.how_text()}: {self.decision.evidence()}"
        else:
            why = "declared"
        return HypothesisError(
            f"hypothesis {self.name!r} returned {n} values for record {record[:40]!r}, which "
            f"has {said} of model {self.model.name!r}; its level is {level!r} ({why}), so "
            f"it must return {counts[_COUNTED.get(level, level)]} values there."
        )

    def _level(self, record: str, n: int, n_words: int, n_tokens: int) -> str:
        """The one level whose count is ``n``; a HypothesisError if none or several are."""
        counts = {"char": len(record), "word": n_words, "token": n_tokens}
        fits = [lvl for lvl, c in counts.items() if c == n]
        if len(fits) == 1:
            return fits[0]
        said = f"{len(record)} characters, {n_words} words and {n_tokens} tokens"
        if not fits:
            raise HypothesisError(
                f"hypothesis {self.name!r} returned {n} values for a record of {said} of "
                f"model {self.model.name!r}: {record[:40]!r}; return one value per character, "
                "word or token (and declare which with level=...)."
            )
        raise HypothesisError(
            f"hypothesis {self.name!r} returned {n} values for record {record[:40]!r}, which "
            f"has {said} of model {self.model.name!r}: its values could be per "
            f"{' or per '.join(fits)}, and equal counts do not say which. Declare it: "
            f"@dl.hypothesis(..., level={fits[0]!r}) (one of {', '.join(map(repr, fits))}), "
            "or level= on the hypothesis family."
        )

    def get_params(self) -> dict[str, Any]:
        return {"family": self.family.get_params(), "space": self.model.symbol_space}

    def fingerprint(self) -> str | None:
        # a decided level changes what a record whose counts coincide reads
        decided = f"|level={self.decision.level}" if self.decision is not None else ""
        return wrapped_fingerprint(self.family, f"aligned|{self.model.symbol_space}{decided}")

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
    """Values in ``raw`` (its first signal's, for a mapping); 0 for one value, no sequence."""
    if isinstance(raw, Mapping):
        raw = next(iter(raw.values()), None)
        if raw is None:
            return 0
    return int(np.shape(raw)[0]) if np.ndim(raw) else 0
