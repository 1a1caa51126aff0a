"""Swap rules for perturbation verification: which symbols may replace which.

Rules only propose *candidates*, a vocabulary that keeps perturbed inputs
plausible (digits and parentheses, conjunctions, a grammar's terminals); the
hypothesis itself then labels each candidate a baseline swap (its value at the
position stays) or a treatment swap (it changes), unless a rule gives the label.

Records whose symbols are not their items (an image's pixels, a map's cells)
cannot be edited one item at a time; :class:`RecordRules` proposes whole
perturbed records instead (move the ghost to cell k, toggle a dot at cell k).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import DNIError
from .common import symbols_of

CHAR_CLASSES: dict[str, str] = {
    "digit": string.digits,
    "lower": string.ascii_lowercase,
    "upper": string.ascii_uppercase,
    "space": " \t\n",
    "bracket": "()[]{}",
    "operator": "+-*/%=<>!&|^~",
    "punct": ".,;:?'\"`@#$_\\",
}

#: Small closed classes of English words (and a few open-class fillers for treatments).
WORD_CLASSES: dict[str, tuple[str, ...]] = {
    "conjunction": ("and", "or", "but", "nor", "yet", "so"),
    "determiner": ("the", "a", "an", "this", "that", "these", "those", "every", "some"),
    "preposition": ("in", "on", "at", "by", "with", "from", "of", "to", "for", "under"),
    "pronoun": ("he", "she", "it", "they", "we", "you", "i", "him", "her", "them"),
    "auxiliary": ("is", "are", "was", "were", "be", "been", "has", "have", "had", "will"),
    "noun": ("chicken", "table", "city", "dog", "idea", "river", "car", "house"),
    "verb": ("runs", "eats", "sees", "takes", "makes", "walks", "writes"),
    "adjective": ("red", "big", "small", "happy", "old", "green", "quick"),
}


class SwapRules:
    """A vocabulary of interchangeable symbols: any member may replace any other.

    Parameters
    ----------
    vocabulary : iterable
        Symbols (characters for string records, tokens for token lists).
    name : str
        Shown in summaries.
    """

    def __init__(self, vocabulary: Iterable[Any], name: str = "rules") -> None:
        self.vocabulary = list(dict.fromkeys(vocabulary))
        self.name = name

    def candidates(self, record: Any, k: int) -> list[tuple[Any, str | None]]:
        """Replacements for symbol ``k`` of ``record``, each with no fixed label."""
        sym = symbols_of(record)[k]
        if sym not in self.vocabulary:
            return []
        return [(s, None) for s in self.vocabulary if s != sym]

    def __repr__(self) -> str:
        return f"SwapRules({self.name!r}, {len(self.vocabulary)} symbols)"


class RecordRules:
    """Perturbations that rewrite a whole record around symbol ``k`` (images, maps, ...).

    Parameters
    ----------
    propose : callable
        ``propose(record, k) -> iterable of (perturbed record, label)`` pairs, the
        label ``"baseline"``, ``"treatment"`` or None (the hypothesis decides, as
        for symbol swaps). A perturbed record has the same number of symbols as
        ``record`` and differs from it at ``k`` (and wherever else the edit needs:
        moving an object to ``k`` also empties its old place); the units'
        activations are compared at ``k``.
    name : str
        Shown in summaries.
    """

    def __init__(self, propose: Callable[[Any, int], Iterable[tuple[Any, str | None]]],
                 name: str = "record rules") -> None:  # fmt: skip
        if not callable(propose):
            raise DNIError(
                f"RecordRules needs a function (record, k) -> [(perturbed record, label)], "
                f"not {propose!r}."
            )
        self.propose, self.name = propose, name

    def candidates(self, record: Any, k: int) -> list[tuple[Any, str | None]]:
        """``(perturbed record, label or None)`` pairs for symbol ``k`` of ``record``."""
        out = []
        for item in self.propose(record, k):
            if not (isinstance(item, tuple) and len(item) == 2):
                raise DNIError(
                    f"{self!r}: propose(record, {k}) must yield (perturbed record, label) "
                    f"pairs, not {type(item).__name__}; use label None to let the "
                    "hypothesis decide."
                )
            if item[1] not in (None, "baseline", "treatment"):
                raise DNIError(
                    f"{self!r}: label {item[1]!r} is not 'baseline', 'treatment' or None."
                )
            out.append(item)
        return out

    def __repr__(self) -> str:
        return f"RecordRules({self.name!r})"


def char_classes(*names: str) -> SwapRules:
    """Swap rules over character classes (:data:`CHAR_CLASSES`; all when none named)."""
    names = names or tuple(CHAR_CLASSES)
    bad = [n for n in names if n not in CHAR_CLASSES]
    if bad:
        raise DNIError(f"unknown character classes {bad}; choose from {sorted(CHAR_CLASSES)}.")
    return SwapRules("".join(CHAR_CLASSES[n] for n in names), name="+".join(names))


def word_classes(*names: str) -> SwapRules:
    """Swap rules over word classes (:data:`WORD_CLASSES`; all when none named)."""
    names = names or tuple(WORD_CLASSES)
    bad = [n for n in names if n not in WORD_CLASSES]
    if bad:
        raise DNIError(f"unknown word classes {bad}; choose from {sorted(WORD_CLASSES)}.")
    return SwapRules([w for n in names for w in WORD_CLASSES[n]], name="+".join(names))


def grammar_terminals(grammar: Any) -> SwapRules:
    """Swap rules over the terminals of a grammar (anything with NLTK's ``productions()``)."""
    terms = sorted({t for p in grammar.productions() for t in p.rhs() if isinstance(t, str)})
    if not terms:
        raise DNIError("the grammar has no terminal symbols to swap.")
    return SwapRules(terms, name="grammar terminals")


Rules = (
    SwapRules | RecordRules | Mapping[Any, Any] | Callable[[Any, int], Iterable[Any]]
    | str | Sequence[Any]
)  # fmt: skip


def candidates(rules: Rules, record: Any, k: int) -> list[tuple[Any, str | None]]:
    """``(replacement, label or None)`` pairs proposed by ``rules`` for symbol ``k``.

    ``rules`` is a :class:`SwapRules`, a :class:`RecordRules` (whose "replacements"
    are whole perturbed records), a vocabulary (string or list), a mapping
    ``symbol -> replacements`` or ``symbol -> {"baseline": [...], "treatment": [...]}``
    (labels given explicitly), or a function ``(record, k) -> replacements`` whose
    items may be ``(replacement, label)`` pairs.
    """
    if isinstance(rules, (SwapRules, RecordRules)):
        return rules.candidates(record, k)
    if isinstance(rules, Mapping):
        v = rules.get(symbols_of(record)[k], ())
        if isinstance(v, Mapping):
            return [(s, lab) for lab in ("baseline", "treatment") for s in v.get(lab, ())]
        return [(s, None) for s in v]
    if callable(rules):
        return [c if isinstance(c, tuple) else (c, None) for c in rules(record, k)]
    if isinstance(rules, (str, Sequence, set, frozenset)):
        return SwapRules(rules).candidates(record, k)
    raise DNIError(
        f"rules {rules!r} are not swap rules; pass SwapRules (e.g. char_classes('digit')), a "
        "vocabulary (str or list), a mapping symbol -> replacements, or a function "
        "(record, k) -> replacements."
    )
