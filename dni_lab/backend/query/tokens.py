"""The tokenizer: SQL words, literals and operators, each with its character offsets."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import QueryError

# Order matters: longer operators before their prefixes, numbers before '.'.
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z_0-9$]*)
  | (?P<qident>"(?:[^"]|"")*")
  | (?P<string>'(?:[^']|'')*')
  | (?P<op><=|>=|<>|!=|==|\|\||::|[=<>+\-*/%])
  | (?P<punct>[(),.;\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    """One lexical unit of a query.

    Attributes
    ----------
    kind : {"ident", "number", "string", "op", "punct", "end"}
        Quoted identifiers (``"Col"``) are ``"ident"`` with ``quoted=True``.
    text : str
        The token as written in the query.
    value : Any
        Identifier name (unquoted), number (int or float) or decoded string.
    start, end : int
        Character offsets in the query.
    """

    kind: str
    text: str
    value: Any
    start: int
    end: int
    quoted: bool = False

    def is_kw(self, *words: str) -> bool:
        """Whether this is an unquoted identifier equal to one of ``words`` (any case)."""
        return self.kind == "ident" and not self.quoted and self.text.upper() in words

    def is_punct(self, *chars: str) -> bool:
        return self.kind in ("punct", "op") and self.text in chars


def tokenize(query: str) -> list[Token]:
    """Split ``query`` into tokens, the last one of kind ``"end"``.

    Raises
    ------
    QueryError
        On an unterminated string or quoted identifier, or a character SQL
        does not use; the caret points at it.
    """
    out: list[Token] = []
    pos, n = 0, len(query)
    while pos < n:
        m = _TOKEN.match(query, pos)
        if m is None:
            ch = query[pos]
            if ch in "'\"":
                what = "string" if ch == "'" else "quoted identifier"
                raise QueryError(f"unterminated {what}: add the closing {ch}", query, pos)
            raise QueryError(f"unexpected character {ch!r}", query, pos)
        kind, text = m.lastgroup, m.group()
        assert kind is not None
        if kind == "number":
            value: Any = float(text) if any(c in text for c in ".eE") else int(text)
            out.append(Token("number", text, value, pos, m.end()))
        elif kind == "ident":
            out.append(Token("ident", text, text, pos, m.end()))
        elif kind == "qident":
            out.append(Token("ident", text, text[1:-1].replace('""', '"'), pos, m.end(), True))
        elif kind == "string":
            out.append(Token("string", text, text[1:-1].replace("''", "'"), pos, m.end()))
        elif kind in ("op", "punct"):
            out.append(Token(kind, text, text, pos, m.end()))
        pos = m.end()
    out.append(Token("end", "", None, n, n))
    return out


def render(query: str, tokens: list[Token], subs: dict[int, str] | None = None) -> str:
    """Source text of ``tokens`` (a contiguous run), with token ``i`` replaced by ``subs[i]``.

    Gaps between tokens are copied from ``query``, so the user's spacing and
    comments survive; ``subs`` is keyed by the token's position in ``tokens``.
    """
    subs = subs or {}
    parts: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.kind == "end":
            break
        if i:
            parts.append(query[tokens[i - 1].end : tok.start])
        parts.append(subs.get(i, tok.text))
    return "".join(parts)


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (always quoted: it may be a keyword)."""
    return '"' + name.replace('"', '""') + '"'
