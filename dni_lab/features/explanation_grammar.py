"""A small, explicit grammar that turns simple explanations into binary hypotheses.

An explanation is read after dropping a leading verb phrase (``fires on``, ``fires at``,
``activates on``, ``active on``, ``responds to``, ``detects``) and, except in a regex,
one final period. What is left must be one of (``docs/features.md`` has this table):

* a **regex**, ``/\\d+px/`` or ``regex: [A-Z]{2,}``: char level, true on every
  character of a match;
* **tokens**, ``the token 'def'``, ``tokens: if, else, elif``: on a model with a
  tokenizer (``model.offsets``) token level, true on a token whose text, spaces
  stripped, is in the set; on a model without one (characters are its symbols) char
  level, the tokens' whole-word occurrences;
* **words**, ``the word 'return'``, ``the words for and while``: char level, whole-word
  occurrences in any case;
* **quoted strings**, ``'=='``, ``"self" or "cls"``, ``the string 'ab'``: char level,
  exact occurrences, case kept;
* **character classes**, ``digits``, ``opening parentheses``, ``uppercase letters or
  punctuation``: char level, the pattern ``[...]+`` of the classes' characters.

Lists are separated by commas, ``and``, ``or`` or ``/``; items of a token or word list
may be quoted (needed for a token holding a comma, a space or a final period). The
character classes are :data:`CLASSES` (ASCII): ``digits``, ``letters``, ``uppercase
letters``, ``lowercase letters``, ``punctuation``, ``whitespace``, ``newlines``,
``brackets``, ``opening brackets``, ``closing brackets``, ``parentheses``, ``opening
parentheses``, ``closing parentheses``, ``square brackets``, ``curly braces``,
``quotes``, with the singular and synonyms of :data:`SYNONYMS`; an item may start with
``the``, ``a``, ``an``, ``any`` or ``all`` and end with ``characters``. The level is
the form's, declared on the hypothesis, never guessed from lengths.

Anything else is not compiled: :attr:`Compiled.reason` says ``"could not parse: ..."``.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backend.errors import DNIError
from ..backend.hypothesis.hypotheses import hypothesis

#: class name -> the body of a regex character class (ASCII)
CLASSES: dict[str, str] = {
    "digits": "0-9",
    "letters": "A-Za-z",
    "uppercase letters": "A-Z",
    "lowercase letters": "a-z",
    "punctuation": re.escape(string.punctuation),
    "whitespace": r"\s",
    "newlines": r"\n",
    "brackets": r"()\[\]{}",
    "opening brackets": r"(\[{",
    "closing brackets": r")\]}",
    "parentheses": r"()",
    "opening parentheses": r"(",
    "closing parentheses": r")",
    "square brackets": r"\[\]",
    "curly braces": r"{}",
    "quotes": "'\"",
}
#: other names of the classes (a singular is also read as its plural: ``digit``)
SYNONYMS: dict[str, str] = {
    "numbers": "digits", "numerals": "digits", "alphabetic": "letters",
    "uppercase": "uppercase letters", "capital letters": "uppercase letters",
    "capitals": "uppercase letters", "lowercase": "lowercase letters",
    "punctuation marks": "punctuation", "spaces": "whitespace", "line breaks": "newlines",
    "open brackets": "opening brackets", "close brackets": "closing brackets",
    "parenthesis": "parentheses", "open parentheses": "opening parentheses",
    "opening parenthesis": "opening parentheses", "open parenthesis": "opening parentheses",
    "close parentheses": "closing parentheses", "closing parenthesis": "closing parentheses",
    "close parenthesis": "closing parentheses", "braces": "curly braces",
    "quotation marks": "quotes",
}  # fmt: skip
LEADS = ("fires on", "fires at", "activates on", "active on", "responds to", "detects")

_LEAD = re.compile(r"^(?:" + "|".join(LEADS) + r")\b\s*", re.IGNORECASE)
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"|`([^`]*)`")
_SEP = re.compile(r"\s*(?:,|/|\band\b|\bor\b)\s*", re.IGNORECASE)
_ONLY_SEPS = re.compile(r"^(?:\s|,|/|\band\b|\bor\b)*$", re.IGNORECASE)
_TOKENS = re.compile(r"^(?:the\s+)?tokens?\b\s*:?\s*(?P<rest>.*)$", re.IGNORECASE | re.DOTALL)
_WORDS = re.compile(r"^(?:the\s+)?words?\b\s*:?\s*(?P<rest>.*)$", re.IGNORECASE | re.DOTALL)
_STRINGS = re.compile(r"^(?:the\s+)?strings?\b\s*:?\s*", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an|any|all)\s+")
_WORD = re.compile(r"^\w[\w'-]*$")
_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
FORMS = ("regex", "tokens", "words", "strings", "chars")


@dataclass(frozen=True)
class Compiled:
    """An explanation compiled (or not) into a binary hypothesis.

    Attributes
    ----------
    text : str
        The explanation as given.
    form : str or None
        One of :data:`FORMS`, None when not compiled.
    level : str or None
        ``"char"`` (``pattern`` over the record's characters) or ``"token"`` (``tokens``).
    pattern : str or None
        The regex whose matches' characters are true (char level).
    tokens : tuple of str or None
        The token set (token level).
    reason : str or None
        Why it was not compiled; None when it was.
    """

    text: str
    form: str | None = None
    level: str | None = None
    pattern: str | None = None
    tokens: tuple[str, ...] | None = None
    reason: str | None = None
    offsets: Callable[[str], list[tuple[int, int]]] | None = field(
        default=None, repr=False, compare=False
    )
    space: str = field(default="", repr=False)  # the tokenizer's symbol space (token level)

    def __fingerprint__(self) -> str:
        # the hypothesis cache's key: this grammar's code, the compiled form, the tokenizer
        return hashlib.sha256(f"{_SOURCE}|{self.key}|{self.space}".encode()).hexdigest()

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def key(self) -> str | None:
        """Equal for explanations that compile to the same hypothesis."""
        if not self.ok:
            return None
        if self.level == "token":
            return "token|" + "\x1f".join(sorted(self.tokens or ()))
        return f"char|{self.pattern}"

    def values(self, record: str) -> np.ndarray:
        """One 0/1 value per character (char level) or per token of the model (token)."""
        if not isinstance(record, str):
            raise DNIError(
                f"explanation {self.text!r} reads text records; got {type(record).__name__}."
            )
        if self.level == "token":
            spans = self.offsets(record)  # type: ignore[misc]
            words = self.tokens or ()
            return np.asarray(
                [record[s:e] in words or record[s:e].strip() in words for s, e in spans],
                dtype=np.float32,
            )
        out = np.zeros(len(record), dtype=np.float32)
        for m in _regex(self.pattern).finditer(record):
            out[m.start() : m.end()] = 1.0
        return out

    def hypothesis(self, name: str | None = None) -> Any:
        """The binary ``dl.hypothesis`` at :attr:`level`; a DNIError if not compiled."""
        if not self.ok:
            raise DNIError(f"explanation {self.text!r} was not compiled: {self.reason}")

        def explained(record: str) -> np.ndarray:
            return self.values(record)

        return hypothesis(explained, name=name or self.text, kind="binary", level=self.level)


_REGEX_CACHE: dict[str, re.Pattern] = {}


def _regex(pattern: str | None) -> re.Pattern:
    rx = _REGEX_CACHE.get(pattern or "")
    if rx is None:
        rx = _REGEX_CACHE[pattern or ""] = re.compile(pattern or "")
    return rx


def compile_explanation(text: str, model: Any = None) -> Compiled:
    """Compile one explanation with the module's grammar.

    Parameters
    ----------
    text : str
        The explanation.
    model : Model, optional
        The model the hypothesis will be read on: with a tokenizer (``offsets``),
        token sets are token level; otherwise (None, a character model) char level.

    Returns
    -------
    Compiled
        ``reason`` is None where it compiled, else ``"could not parse: ..."``.
    """
    offsets = getattr(model, "offsets", None)
    if not isinstance(text, str) or not text.strip():
        return Compiled(str(text), reason="could not parse: empty explanation")
    body = _LEAD.sub("", text.strip()).strip()
    if body.lower().startswith("regex:") or (len(body) > 2 and body[0] == body[-1] == "/"):
        pattern = body[6:].strip() if body.lower().startswith("regex:") else body[1:-1]
        try:
            re.compile(pattern)
        except re.error as exc:
            return Compiled(text, reason=f"could not parse: invalid regex {pattern!r} ({exc})")
        if not pattern:
            return Compiled(text, reason="could not parse: empty regex")
        return Compiled(text, "regex", "char", pattern)
    body = body[:-1].rstrip() if body.endswith(".") else body
    if m := _TOKENS.match(body):
        items, why = _items(m["rest"], word=False)
        if why:
            return Compiled(text, reason=f"could not parse: tokens {why}")
        if offsets is not None:
            space = str(getattr(model, "symbol_space", ""))
            return Compiled(
                text, "tokens", "token", tokens=tuple(items), offsets=offsets, space=space
            )
        return Compiled(text, "tokens", "char", _alternation(items, bounded=True))
    if m := _WORDS.match(body):
        items, why = _items(m["rest"], word=True)
        if why:
            return Compiled(text, reason=f"could not parse: words {why}")
        return Compiled(text, "words", "char", "(?i:" + _alternation(items, bounded=True) + ")")
    if _QUOTED.search(body):
        rest = _STRINGS.sub("", body)
        items, why = _items(rest, word=False)
        if why or not _QUOTED.search(rest):
            return Compiled(text, reason=f"could not parse: {body!r} mixes quoted and bare text")
        return Compiled(text, "strings", "char", _alternation(items, bounded=False))
    classes = [_class(part) for part in _SEP.split(body.lower()) if part.strip()]
    if classes and all(classes):
        chars = "".join(CLASSES[c] for c in sorted(set(classes)))  # type: ignore[index]
        return Compiled(text, "chars", "char", f"[{chars}]+")
    return Compiled(
        text,
        reason=f"could not parse: {body!r} is no regex, token or word list, quoted string or "
        f"character class ({', '.join(CLASSES)})",
    )


def _items(rest: str, word: bool) -> tuple[list[str], str | None]:
    """The listed items, all quoted or all bare (separated by commas, ``and``, ``or``,
    ``/``); a bare item has no space (``word``: is one word). Returns ``(items, why not)``."""
    quoted = [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(rest)]
    if quoted:
        if not _ONLY_SEPS.match(_QUOTED.sub(",", rest)):
            return [], f"{rest!r}: quote every item or none"
        items = [q for q in quoted if q]
        return (items, None) if items else ([], "are empty quotes")
    items = [p for p in _SEP.split(rest.strip()) if p]
    if not items:
        return [], "list nothing"
    bad = [p for p in items if (not _WORD.match(p) if word else re.search(r"\s", p))]
    if bad:
        return (
            [],
            f"{rest!r}: an unquoted item is one {'word' if word else 'token'}; quote {bad[0]!r}",
        )
    return items, None


def _alternation(items: list[str], bounded: bool) -> str:
    """A regex matching any item; ``bounded``: not inside a longer word."""
    parts = []
    for it in sorted(set(items), key=lambda s: (-len(s), s)):
        rx = re.escape(it)
        if bounded and re.match(r"\w", it):
            rx = r"(?<!\w)" + rx
        if bounded and re.search(r"\w$", it):
            rx = rx + r"(?!\w)"
        parts.append(rx)
    return "(?:" + "|".join(parts) + ")"


def _class(phrase: str) -> str | None:
    """The class a phrase names (``"the opening parentheses"``), or None."""
    p = _ARTICLE.sub("", " ".join(phrase.split()))
    p = re.sub(r"\s+(?:characters?|chars?)$", "", p)
    for cand in (p, p + "s", p + "es"):
        name = SYNONYMS.get(cand, cand)
        if name in CLASSES:
            return name
    return None
