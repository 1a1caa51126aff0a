"""Source-code hypotheses, one value per character of a Python source string.

:class:`CodeFamily` lexes a record once (with :mod:`tokenize`) and parses it once
(with :mod:`ast`) and derives every signal from that single pass:

==============  ==========  ================================================
signal          kind        value on a character
==============  ==========  ================================================
comment         binary      inside a ``#`` comment
string          binary      inside a string literal, quotes and prefix included
bracket_depth   continuous  nesting depth of ``()[]{}``; brackets count as inside
indent          continuous  indentation level of the character's logical line
keyword         binary      inside a (hard) keyword such as ``def`` or ``return``
identifier      binary      inside a name that is not a keyword
def             binary      inside a function definition (``def`` .. last statement)
class           binary      inside a class definition (``class`` .. last statement)
==============  ==========  ================================================

Windows of a longer file (``str`` subclasses carrying ``.source`` and ``.start``,
such as :class:`hypotheses.windows.Window`) take their signals from the full source, then slice,
so a window that opens inside a string still knows it is inside a string.

Incomplete code is tolerated. :func:`lex` keeps every token that :mod:`tokenize`
produced before an error (an unterminated string, a dedent that matches no outer
level) and lexes the rest with a small regular-expression lexer that treats an
unterminated string as running to the end of its line (or of the text, for
triple quotes). Indentation levels are computed from those tokens with the same
stack rule as the interpreter, but never fail. When :func:`ast.parse` rejects the
text, ``def``/``class`` spans come from the indentation structure instead: a
header line opens a span that covers the following lines indented deeper.
"""

from __future__ import annotations

import ast
import bisect
import io
import itertools
import keyword
import re
import tokenize
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .windows import SourceFamily

SIGNALS = ("comment", "string", "bracket_depth", "indent", "keyword", "identifier", "def", "class")
_CONTINUOUS = {"bracket_depth", "indent"}
_OPEN, _CLOSE = "([{", ")]}"
# f-strings are one STRING token up to 3.11 and FSTRING_START..END from 3.12 on;
# treating the whole f-string as one string keeps the signals version-independent.
_FSTART = getattr(tokenize, "FSTRING_START", -1)
_FEND = getattr(tokenize, "FSTRING_END", -1)
_TSTART = getattr(tokenize, "TSTRING_START", -1)
_TEND = getattr(tokenize, "TSTRING_END", -1)

_FALLBACK = re.compile(
    r"""
    (?P<comment>\#[^\n]*)
  | (?P<string>[rRbBuUfF]{0,2}(?:'''[\s\S]*?(?:'''|\Z)|\"\"\"[\s\S]*?(?:\"\"\"|\Z)
        |'(?:\\.|[^'\\\n])*(?:'|(?=\n)|\Z)|"(?:\\.|[^"\\\n])*(?:"|(?=\n)|\Z)))
  | (?P<name>[^\W\d]\w*)
  | (?P<number>\d[\w.]*)
  | (?P<op>[^\s\w])
    """,
    re.VERBOSE,
)


class Token(NamedTuple):
    """One lexical token with absolute character offsets ``[start, end)``."""

    kind: str  # comment | string | name | number | op
    start: int
    end: int
    text: str


def lex(text: str) -> list[Token]:
    """Tokens of ``text``: :mod:`tokenize` while it can, the fallback lexer after."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def offset(pos: tuple[int, int]) -> int:
        row, col = pos
        return min(starts[row - 1] + col, len(text)) if row <= len(starts) else len(text)

    out: list[Token] = []
    resume, fstart, fdepth = 0, 0, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            s, e = offset(tok.start), offset(tok.end)
            if tok.type in (_FSTART, _TSTART):
                fstart, fdepth = (s if fdepth == 0 else fstart), fdepth + 1
                continue
            if tok.type in (_FEND, _TEND):
                fdepth -= 1
                if fdepth == 0:
                    out.append(Token("string", fstart, e, text[fstart:e]))
                    resume = e
                continue
            if fdepth:
                continue
            if tok.type == tokenize.ERRORTOKEN and tok.string.strip():
                # 3.11 reports an unterminated quote as a one-character error token.
                resume = s
                break
            kind = _KINDS.get(tok.type)
            if kind:
                out.append(Token(kind, s, e, tok.string))
            if tok.type not in (tokenize.DEDENT, tokenize.ENDMARKER):
                resume = max(resume, e)
        else:
            return out
    except (tokenize.TokenError, SyntaxError):
        if fdepth:
            resume = fstart
    return out + _fallback(text, resume)


_KINDS = {
    tokenize.COMMENT: "comment",
    tokenize.STRING: "string",
    tokenize.NAME: "name",
    tokenize.NUMBER: "number",
    tokenize.OP: "op",
}


def _fallback(text: str, pos: int) -> list[Token]:
    return [
        Token(m.lastgroup, m.start(), m.end(), m.group()) for m in _FALLBACK.finditer(text, pos)
    ]


class Line(NamedTuple):
    """One physical line ``[start, end)`` (newline included) and its indentation."""

    start: int
    end: int
    level: int
    opens: bool  # starts a logical line that holds code (not blank, not a comment)


def code_signals(text: str, toks: Sequence[Token] | None = None) -> dict[str, np.ndarray]:
    """Every signal of :data:`SIGNALS` for ``text``, as float32 arrays of ``len(text)``."""
    n = len(text)
    toks = lex(text) if toks is None else toks
    sig = {s: np.zeros(n, np.float32) for s in SIGNALS}
    depth = np.zeros(n + 1, np.float32)
    stack: list[int] = []
    for t in toks:
        if t.kind == "name":
            sig["keyword" if keyword.iskeyword(t.text) else "identifier"][t.start : t.end] = 1
        elif t.kind in ("comment", "string"):
            sig[t.kind][t.start : t.end] = 1
        elif t.text in _OPEN:
            stack.append(t.start)
        elif t.text in _CLOSE and stack:  # an unmatched closer (window) opens nothing
            depth[stack.pop()] += 1
            depth[t.end] -= 1
    for s in stack:  # unclosed brackets stay open to the end
        depth[s] += 1
    sig["bracket_depth"] = np.cumsum(depth)[:n].astype(np.float32)
    lines = line_levels(text, toks, sig["bracket_depth"])
    for line in lines:
        sig["indent"][line.start : line.end] = line.level
    for kind, spans in definition_spans(text, toks, lines).items():
        for a, b in spans:
            sig[kind][a:b] = 1
    return sig


def line_levels(text: str, toks: Sequence[Token], depth: np.ndarray) -> list[Line]:
    """Indentation level of every physical line.

    A line opens a logical line when it starts outside brackets and strings, the
    previous line did not end in a backslash, and it holds code; its level
    follows the interpreter's stack of indentation widths (tabs to multiples of
    8), popping to the nearest outer width where a dedent matches none (no
    error). Continuation lines, blank lines and comment-only lines keep the
    current level, as :mod:`tokenize` does.
    """
    covered = np.zeros(n := len(text) + 1, bool)  # inside a string or a comment
    for t in toks:
        if t.kind in ("string", "comment"):
            covered[t.start + (t.kind == "string") : t.end] = True
    bounds = [0, *(m.end() for m in re.finditer("\n", text))]
    if bounds[-1] != n - 1:
        bounds.append(n - 1)
    tok_starts = [t.start for t in toks]
    widths, level, out, continued = [0], 0, [], False
    for a, b in itertools.pairwise(bounds):
        i = bisect.bisect_left(tok_starts, a)
        tok = toks[i] if i < len(toks) and toks[i].start < b else None
        opens = (
            not continued
            and not covered[a]
            and (a == 0 or depth[a - 1] == 0)
            and tok is not None
            and tok.kind != "comment"
        )
        if opens:
            width = len(text[a : tok.start].expandtabs(8))
            if width > widths[-1]:
                widths.append(width)
            while width < widths[-1]:
                widths.pop()
            level = len(widths) - 1
        body = text[a:b].rstrip("\r\n")
        continued = body.endswith("\\") and not covered[a + len(body) - 1]
        out.append(Line(a, b, level, opens))
    return out


def definition_spans(
    text: str, toks: Sequence[Token], lines: Sequence[Line]
) -> dict[str, list[tuple[int, int]]]:
    """Character spans of function and class definitions: from :mod:`ast` if it parses."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return _spans_by_indent(toks, lines)

    def offset(row: int, byte_col: int) -> int:
        # ast columns count UTF-8 bytes; convert to characters of that line.
        line = lines[row - 1]
        chars = text[line.start : line.end].encode()[:byte_col].decode(errors="ignore")
        return line.start + len(chars)

    spans: dict[str, list[tuple[int, int]]] = {"def": [], "class": []}
    for node in ast.walk(tree):
        kind = _DEF_NODES.get(type(node))
        if kind:
            a = offset(node.lineno, node.col_offset)
            spans[kind].append((a, offset(node.end_lineno, node.end_col_offset)))
    return spans


_DEF_NODES = {ast.FunctionDef: "def", ast.AsyncFunctionDef: "def", ast.ClassDef: "class"}


def _spans_by_indent(
    toks: Sequence[Token], lines: Sequence[Line]
) -> dict[str, list[tuple[int, int]]]:
    """Definition spans for code that does not parse: a ``def``/``class`` (or
    ``async def``) opening its logical line runs to the last code token before
    the next logical line indented no deeper than the header."""
    line_starts = [line.start for line in lines]
    row_of = [bisect.bisect_right(line_starts, t.start) - 1 for t in toks]
    first = {}
    for i, r in enumerate(row_of):
        first.setdefault(r, i)
    spans: dict[str, list[tuple[int, int]]] = {"def": [], "class": []}
    for r, i in first.items():
        if not lines[r].opens:
            continue
        j = i + 1 if toks[i].text == "async" and i + 1 < len(toks) else i
        if toks[j].kind != "name" or toks[j].text not in spans:
            continue
        end = toks[j].end
        for k in range(j + 1, len(toks)):
            line = lines[row_of[k]]
            if row_of[k] > r and line.opens and line.level <= lines[r].level:
                break
            if toks[k].kind != "comment":
                end = toks[k].end
        spans[toks[j].text].append((toks[i].start, end))
    return spans


class CodeFamily(SourceFamily):
    """Comment, string, bracket, indentation, keyword, name and definition signals.

    Records are source strings, or windows of a longer source (a ``str`` with
    ``.source`` and ``.start``, such as :class:`hypotheses.windows.Window`):
    a window's signals are those of its full source, sliced, and the full
    source is lexed once for all its windows.

    Parameters
    ----------
    name : str
        Family name; hypothesis ids are ``"{name}.{signal}"``.
    select : sequence of str, optional
        Subset of :data:`SIGNALS` to emit (all by default).
    keywords : sequence of str
        Extra binary signals ``kw_<word>``, one per listed keyword or name
        (Luigi's "common keywords such as ``return``").

    Examples
    --------
    >>> fam = CodeFamily(select=["comment"])
    >>> fam.evaluate("x  # c")["comment"].tolist()
    [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    """

    def __init__(
        self, name: str = "code", select: Sequence[str] | None = None, keywords: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.select = select
        self.keywords = keywords

    @property
    def kind(self) -> dict[str, str]:  # type: ignore[override]
        return {s: "continuous" if s in _CONTINUOUS else "binary" for s in self.signals()}

    def signals(self) -> list[str]:
        chosen = list(SIGNALS) if self.select is None else list(self.select)
        unknown = [s for s in chosen if s not in SIGNALS]
        if unknown:
            raise ValueError(f"CodeFamily: unknown signals {unknown}; choose from {SIGNALS}.")
        return chosen + [f"kw_{k}" for k in self.keywords]

    def get_params(self) -> dict[str, Any]:
        select = None if self.select is None else list(self.select)
        return {"name": self.name, "select": select, "keywords": list(self.keywords)}

    def evaluate(self, record: str) -> dict[str, np.ndarray]:
        source, start = getattr(record, "source", None), getattr(record, "start", None)
        if not isinstance(source, str) or start is None:  # not a window: the record itself
            source, start = str(record), 0
        part = self._cached(source)[start : start + len(record)]
        return {s: part[:, i].copy() for i, s in enumerate(self.signals())}

    def evaluate_source(self, source: str) -> np.ndarray:
        """All signals of a whole source, shape ``(len(source), n_signals)``."""
        toks = lex(source)
        sig = code_signals(source, toks)
        for k in self.keywords:
            sig[f"kw_{k}"] = np.zeros(len(source), np.float32)
            for t in toks:
                if t.kind == "name" and t.text == k:
                    sig[f"kw_{k}"][t.start : t.end] = 1
        cols = [sig[s] for s in self.signals()]
        return np.stack(cols, 1) if cols else np.zeros((len(source), 0), np.float32)
