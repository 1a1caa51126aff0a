"""Generic hypotheses over strings (or token lists): keywords, regexes, classes, n-grams.

These need no grammar: keyword and regex spans, character classes, a
position counter, an n-gram detector and "inside quotes / brackets" with
bracket depth. Every family here except :class:`PositionFamily` is computed
on a window's full source and sliced (see :mod:`hypotheses.windows`), so a
keyword cut by a window edge is still marked.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dni_lab.backend.errors import HypothesisError
from dni_lab.backend.hypothesis.hypotheses import HypothesisFamily

from .windows import SourceFamily, source_span

__all__ = [
    "CharClassFamily",
    "InsideFamily",
    "KeywordFamily",
    "NgramFamily",
    "PositionFamily",
    "RegexFamily",
    "frequent_ngrams",
    "keyword_family",
    "regex",
]

_CLASSES: dict[str, Callable[[str], bool]] = {
    "letter": str.isalpha,
    "digit": str.isdigit,
    "space": str.isspace,
    "upper": str.isupper,
    "lower": str.islower,
    "punct": lambda c: not c.isalnum() and not c.isspace(),
}


class RegexFamily(SourceFamily):
    """1 on every symbol inside a match of each pattern (a string's characters).

    Parameters
    ----------
    patterns : mapping
        ``{signal name: regular expression}``.
    name : str
        Family name.
    flags : int
        ``re`` flags for every pattern.
    group : int or str
        Mark only this group of each match (0: the whole match).
    """

    def __init__(
        self, patterns: Mapping[str, str], name: str = "regex", flags: int = 0, group: int | str = 0
    ) -> None:
        self.patterns = dict(patterns)
        self.name = name
        self.flags = flags
        self.group = group

    def signals(self) -> list[str]:
        return list(self.patterns)

    def evaluate_source(self, source: str) -> np.ndarray:
        if not isinstance(source, str):
            raise HypothesisError(
                f"regex family {self.name!r} reads strings, not {type(source).__name__}."
            )
        out = np.zeros((len(source), len(self.patterns)), dtype=np.float32)
        for j, pattern in enumerate(self.patterns.values()):
            for m in re.finditer(pattern, source, self.flags):
                s, e = m.span(self.group)
                out[s:e, j] = 1.0
        return out


def regex(
    pattern: str, name: str | None = None, flags: int = 0, group: int | str = 0
) -> RegexFamily:
    """One hypothesis: 1 inside matches of ``pattern``.

    Examples
    --------
    >>> regex(r"\\d+", name="number").evaluate("ab12c3")[:, 0].tolist()
    [0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    """
    name = name or f"regex:{pattern}"
    return RegexFamily({name: pattern}, name=name, flags=flags, group=group)


class KeywordFamily(SourceFamily):
    """One signal per keyword: 1 on each symbol of each occurrence.

    On strings a keyword is matched as a substring (as a whole word when
    ``whole_word``); on token lists, a token equal to the keyword is marked.

    Parameters
    ----------
    words : sequence of str
        The keywords; each is also its signal's name.
    name : str
        Family name.
    case_sensitive : bool
        Match case exactly.
    whole_word : bool
        On strings, require no word character right before or after.
    """

    def __init__(
        self,
        words: Sequence[str],
        name: str = "keyword",
        case_sensitive: bool = True,
        whole_word: bool = True,
    ) -> None:
        self.words = list(words)
        self.name = name
        self.case_sensitive = case_sensitive
        self.whole_word = whole_word

    def signals(self) -> list[str]:
        return list(dict.fromkeys(self.words))

    def evaluate_source(self, source: Any) -> np.ndarray:
        words = self.signals()
        out = np.zeros((len(source), len(words)), dtype=np.float32)
        if isinstance(source, str):
            flags = 0 if self.case_sensitive else re.IGNORECASE
            for j, w in enumerate(words):
                pat = rf"(?<!\w){re.escape(w)}(?!\w)" if self.whole_word else re.escape(w)
                for m in re.finditer(pat, source, flags):
                    out[m.start() : m.end(), j] = 1.0
            return out
        fold = (lambda t: t) if self.case_sensitive else (lambda t: str(t).lower())
        index = {fold(w): j for j, w in enumerate(words)}
        for i, tok in enumerate(source):
            j = index.get(fold(tok))
            if j is not None:
                out[i, j] = 1.0
        return out


def keyword_family(words: Sequence[str], name: str = "keyword", **options: Any) -> KeywordFamily:
    """A :class:`KeywordFamily` (``case_sensitive=``, ``whole_word=`` as options).

    Examples
    --------
    >>> keyword_family(["FROM"]).evaluate("SELECT a FROM t")[:, 0].tolist()[7:14]
    [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    """
    return KeywordFamily(words, name=name, **options)


class CharClassFamily(SourceFamily):
    """One signal per character class: 1 on the characters in the class.

    Parameters
    ----------
    classes : mapping, optional
        ``{name: characters or predicate}``: a string lists the class's
        characters, a callable decides per character. Default: ``letter``,
        ``digit``, ``space``, ``upper``, ``lower``, ``punct``.
    name : str
        Family name.
    """

    def __init__(
        self, classes: Mapping[str, str | Callable[[str], bool]] | None = None, name: str = "char"
    ) -> None:
        self.classes = dict(classes) if classes is not None else None
        self.name = name

    def _classes(self) -> dict[str, Callable[[str], bool]]:
        given = self.classes if self.classes is not None else _CLASSES
        return {k: (v if callable(v) else frozenset(v).__contains__) for k, v in given.items()}

    def signals(self) -> list[str]:
        return list(self._classes())

    def evaluate_source(self, source: str) -> np.ndarray:
        preds = list(self._classes().values())
        return np.array([[bool(p(c)) for p in preds] for c in source], dtype=np.float32).reshape(
            len(source), len(preds)
        )


class PositionFamily(HypothesisFamily):
    """Position counters: ``index`` (0, 1, ...), ``relative`` (0 to 1) and ``from_end``.

    Parameters
    ----------
    of : {"record", "source"}
        Count within the record itself, or within a window's source.
    name : str
        Family name.
    """

    kind = "continuous"

    def __init__(self, of: str = "record", name: str = "position") -> None:
        self.of = of
        self.name = name

    def signals(self) -> list[str]:
        return ["index", "relative", "from_end"]

    def evaluate(self, record: Any) -> np.ndarray:
        if self.of not in ("record", "source"):
            raise HypothesisError(
                f"position family {self.name!r}: of={self.of!r}; use 'record' or 'source'."
            )
        source, start, n = source_span(record)
        total = len(source) if self.of == "source" else n
        idx = np.arange(n, dtype=np.float32) + (start if self.of == "source" else 0)
        rel = idx / max(total - 1, 1)
        return np.stack([idx, rel, total - 1 - idx], axis=1)


class NgramFamily(SourceFamily):
    """An n-gram detector: one signal per n-gram, 1 where it occurs.

    Parameters
    ----------
    grams : sequence
        N-grams: strings (character n-grams) or tuples of tokens.
    name : str
        Family name.
    mark : {"end", "span", "start"}
        Mark the symbol that completes an occurrence (a detector fires once
        the n-gram has been read), every symbol of it, or its first symbol.
    """

    def __init__(self, grams: Sequence[Any], name: str = "ngram", mark: str = "end") -> None:
        self.grams = [g if isinstance(g, str) else tuple(g) for g in grams]
        self.name = name
        self.mark = mark

    def signals(self) -> list[str]:
        return [g if isinstance(g, str) else " ".join(map(str, g)) for g in self.grams]

    def evaluate_source(self, source: Any) -> np.ndarray:
        if self.mark not in ("end", "span", "start"):
            raise HypothesisError(
                f"n-gram family {self.name!r}: mark={self.mark!r}; use end, span or start."
            )
        seq = source if isinstance(source, str) else tuple(source)
        out = np.zeros((len(seq), len(self.grams)), dtype=np.float32)
        for j, g in enumerate(self.grams):
            k = len(g)
            for i in range(len(seq) - k + 1):
                if seq[i : i + k] == (g if isinstance(seq, str) else tuple(g)):
                    s, e = {"end": (i + k - 1, i + k), "start": (i, i + 1), "span": (i, i + k)}[
                        self.mark
                    ]
                    out[s:e, j] = 1.0
        return out


def frequent_ngrams(records: Iterable[Any], n: int = 3, top: int = 20) -> list[Any]:
    """The ``top`` most frequent n-grams of ``records`` (ties broken by first appearance).

    Windows count once per window; pass the full strings to count each occurrence once.
    """
    counts: Counter = Counter()
    for r in records:
        seq = r if isinstance(r, str) else tuple(r)
        counts.update(seq[i : i + n] for i in range(len(seq) - n + 1))
    return [g for g, _ in counts.most_common(top)]


_PAIRS = {
    "double_quotes": ('"', '"'),
    "single_quotes": ("'", "'"),
    "parens": ("(", ")"),
    "brackets": ("[", "]"),
    "braces": ("{", "}"),
}


class InsideFamily(SourceFamily):
    """Inside quotes or brackets, delimiters included; bracket pairs also give their depth.

    Brackets inside quotes are text, not brackets; a backslash escapes the
    next character inside quotes; an unmatched closer is ignored.

    Parameters
    ----------
    pairs : mapping, optional
        ``{name: (open, close)}`` single characters; equal open and close
        make a quote. Default: double and single quotes, parentheses,
        square brackets and braces.
    name : str
        Family name. Signals are ``in:NAME`` and, for brackets, ``depth:NAME``.
    """

    def __init__(
        self, pairs: Mapping[str, tuple[str, str]] | None = None, name: str = "inside"
    ) -> None:
        self.pairs = dict(pairs) if pairs is not None else None
        self.name = name

    def _pairs(self) -> dict[str, tuple[str, str]]:
        return dict(self.pairs) if self.pairs is not None else dict(_PAIRS)

    def signals(self) -> list[str]:
        pairs = self._pairs()
        brackets = [k for k, (o, c) in pairs.items() if o != c]
        return [f"in:{k}" for k in pairs] + [f"depth:{k}" for k in brackets]

    @property
    def kind(self) -> dict[str, str]:
        return {s: ("binary" if s.startswith("in:") else "continuous") for s in self.signals()}

    def evaluate_source(self, source: str) -> np.ndarray:
        pairs = self._pairs()
        quotes = {o: k for k, (o, c) in pairs.items() if o == c}
        opens = {o: k for k, (o, c) in pairs.items() if o != c}
        closes = {c: k for k, (o, c) in pairs.items() if o != c}
        depth = dict.fromkeys(opens.values(), 0)
        col = {s: j for j, s in enumerate(self.signals())}
        out = np.zeros((len(source), len(col)), dtype=np.float32)
        quote: str | None = None  # the open quote character, if inside one
        escaped = False
        for i, ch in enumerate(source):
            closing: str | None = None
            if quote is not None:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    closing, quote = quotes[ch], None
            elif ch in quotes:
                quote = ch
            elif ch in opens:
                depth[opens[ch]] += 1
            elif ch in closes and depth[closes[ch]] > 0:
                closing = closes[ch]
            for k, d in depth.items():
                out[i, col[f"depth:{k}"]] = d
                out[i, col[f"in:{k}"]] = d > 0
            if quote is not None:
                out[i, col[f"in:{quotes[quote]}"]] = 1.0
            if closing is not None:
                if closing in depth:
                    depth[closing] -= 1
                else:
                    out[i, col[f"in:{closing}"]] = 1.0
        return out
