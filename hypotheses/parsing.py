"""Parse strings with an NLTK grammar into trees whose nodes carry character spans.

Shared by :class:`~hypotheses.parse_tree.ParseTreeFamily` and
:class:`~hypotheses.shift_reduce.ShiftReduceFamily`, so that one parse of a
record (or of a window's source) serves every family over the same grammar.

Tokenization
------------
NLTK parses a list of terminals. A *tokenizer* maps a string to
``(terminal, start, end)`` triples, so every tree leaf knows its characters.
The default, :func:`char_tokens`, makes each character a terminal (the
parentheses, arithmetic and Boolean grammars); the SQL grammar supplies a
word-level tokenizer. A node spans from its first token's first character to
its last token's last character, so the spaces between tokens inside a node
are inside its span.

Ambiguity
---------
For an ambiguous grammar one tree is chosen deterministically: at every node
the derivation whose children end furthest to the right first (looking
through unary nodes) wins, i.e. the *left-associative* reading, ``1+2*3`` as
``(1+2)*3`` — the left-to-right evaluation order of the Luigi and DNI tasks.
Trees are read off NLTK's chart directly instead of enumerating all parses,
which is exponential for ambiguous grammars.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from nltk.grammar import CFG, Nonterminal
from nltk.parse.chart import BottomUpLeftCornerChartParser, LeafEdge
from nltk.parse.earleychart import EarleyChartParser, IncrementalLeftCornerChartParser

from dni_lab.backend.errors import HypothesisError

__all__ = [
    "GrammarError",
    "GrammarParser",
    "Node",
    "Parse",
    "char_tokens",
    "get_parser",
    "grammar_text",
    "rule_name",
]

Token = tuple[str, int, int]
Tokenizer = Callable[[str], list[Token]]


class GrammarError(HypothesisError):
    """A record cannot be tokenized or parsed with the family's grammar."""


@dataclass(frozen=True, slots=True)
class Node:
    """One nonterminal node of a parse.

    Attributes
    ----------
    label : str
        The nonterminal.
    rule : str
        The production used, as :func:`rule_name` writes it.
    start, end : int
        Character span ``[start, end)``; ``start == end`` for an empty node.
    children : tuple of int
        Node indices (``>= 0``) and tokens (``~i`` for token ``i``), in order.
    """

    label: str
    rule: str
    start: int
    end: int
    children: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Parse:
    """A record's tokens and its tree, nodes listed children-first (post-order).

    The root is the last node.
    """

    text: str
    tokens: tuple[Token, ...]
    nodes: tuple[Node, ...]


def char_tokens(text: str) -> list[Token]:
    """Every character is a terminal: ``[(c, i, i + 1), ...]``."""
    return [(c, i, i + 1) for i, c in enumerate(text)]


def rule_name(lhs: Nonterminal | str, rhs: tuple) -> str:
    """A production as text: ``Paren -> '(' Expr ')'``; the empty production is ``A -> ''``."""
    items = [s.symbol() if isinstance(s, Nonterminal) else repr(s) for s in rhs]
    lhs = lhs.symbol() if isinstance(lhs, Nonterminal) else lhs
    return f"{lhs} -> {' '.join(items) if items else repr('')}"


@functools.lru_cache(maxsize=8192)
def _shared_rule_name(lhs: Nonterminal, rhs: tuple) -> str:
    # One string per production, shared by every cached node that uses it.
    return rule_name(lhs, rhs)


def grammar_text(grammar: CFG) -> str:
    """The grammar's start symbol and productions as text (probabilities left out)."""
    rules = "\n".join(rule_name(p.lhs(), p.rhs()) for p in grammar.productions())
    return f"start {grammar.start().symbol()}\n{rules}"


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


class GrammarParser:
    """Tokenize and chart-parse strings, keeping the latest parses in an LRU cache.

    Parameters
    ----------
    grammar : nltk.CFG
        The grammar (a PCFG works too; probabilities are ignored).
    tokenizer : callable, optional
        ``str -> [(terminal, start, end), ...]``; :func:`char_tokens` when None.
    cache_size : int
        Number of parses kept; windows of one query then share one parse.
    max_time : float or None
        NLTK's wall-clock limit per parse, in seconds.
    """

    def __init__(
        self,
        grammar: CFG,
        tokenizer: Tokenizer | None = None,
        cache_size: int = 2048,
        max_time: float | None = 5.0,
    ) -> None:
        self.grammar = grammar
        self.tokenizer = tokenizer or char_tokens
        self.name = f"the grammar (start {grammar.start().symbol()!r})"
        # The incremental left-corner parser is about twice as fast but cannot
        # handle empty productions; the bottom-up left-corner one can.
        cls = (
            IncrementalLeftCornerChartParser
            if grammar.is_nonempty()
            else BottomUpLeftCornerChartParser
        )
        self._parser = cls(grammar, max_time=max_time)
        self._max_time = max_time
        self._terminals = {s for p in grammar.productions() for s in p.rhs() if isinstance(s, str)}
        self._cache: OrderedDict[str, Parse] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def parse(self, text: str) -> Parse:
        """The parse of ``text`` (cached).

        Raises
        ------
        GrammarError
            If ``text`` cannot be tokenized, holds a token that is no terminal
            of the grammar, or has no parse; the message quotes the record and
            the offset where it goes wrong.
        """
        text = str(text)
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        result = self._parse(text)
        with self._lock:
            self._cache[text] = result
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    def _parse(self, text: str) -> Parse:
        try:
            tokens = [(str(t), int(s), int(e)) for t, s, e in self.tokenizer(text)]
        except ValueError as exc:
            raise GrammarError(f"{self.name} cannot tokenize record {_short(text)}: {exc}") from exc
        for t, s, _ in tokens:
            if t not in self._terminals:
                raise GrammarError(
                    f"{self.name} cannot parse record {_short(text)}: token {t!r} at offset {s} "
                    "is not a terminal of the grammar."
                )
        terms = [t for t, _, _ in tokens]
        chart = self._parser.chart_parse(terms)
        # A linear scan: chart.select() would build an index for this one query.
        start, n = self.grammar.start(), len(terms)
        roots = [
            e
            for e in chart.edges()
            if e.start() == 0 and e.end() == n and e.is_complete() and e.lhs() == start
        ]
        if not roots:
            # Earley charts are prefix-exact: edges reach position k only if the
            # first k tokens begin some sentence, so the furthest edge shows where
            # the record stops making sense. Only failures pay for this second parse.
            earley = EarleyChartParser(self.grammar, max_time=self._max_time).chart_parse(terms)
            reach = max((e.end() for e in earley.edges() if not isinstance(e, LeafEdge)), default=0)
            if reach >= len(tokens):
                why = "it ends before a derivation is complete"
            else:
                at = tokens[reach][1]
                why = f"no rule continues at offset {at} ({_short(text[at:], 30)})"
            raise GrammarError(f"{self.name} cannot parse record {_short(text)}: {why}.")
        return _TreeReader(chart, tokens, text).read(roots)


class _TreeReader:
    """Reads one (left-associative) tree off a chart, without enumerating all trees."""

    def __init__(self, chart, tokens: list[Token], text: str) -> None:
        self.chart = chart
        self.tokens = tokens
        self.text = text
        self.nodes: list[Node] = []
        self._keys: dict = {}

    def _key(self, edge, path: frozenset) -> tuple[int, ...]:
        """Preference key of an edge: children's ends, looking through unary nodes."""
        if isinstance(edge, LeafEdge):
            return (edge.end(),)
        if edge in self._keys:
            return self._keys[edge]
        best = max(
            (self._cpl_key(cpl, path | {edge}) for cpl in self._cpls(edge, path)), default=()
        )
        self._keys[edge] = best
        return best

    def _cpl_key(self, cpl: tuple, path: frozenset) -> tuple[int, ...]:
        if len(cpl) == 1 and not isinstance(cpl[0], LeafEdge):
            return self._key(cpl[0], path)
        return tuple(c.end() for c in cpl)

    def _cpls(self, edge, path: frozenset) -> list[tuple]:
        # Drop derivations through an edge already on the path (unary or empty cycles).
        return [tuple(c) for c in self.chart.child_pointer_lists(edge) if not path & set(c)]

    def read(self, roots: list) -> Parse:
        root = max(roots, key=lambda e: self._key(e, frozenset()))
        self._build(root, frozenset())
        return Parse(self.text, tuple(self.tokens), tuple(self.nodes))

    def _build(self, edge, path: frozenset) -> int:
        path = path | {edge}
        cpls = self._cpls(edge, path)
        if not cpls:
            raise GrammarError(f"the grammar's derivation of {edge} is cyclic; remove the cycle.")
        cpl = max(cpls, key=lambda c: self._cpl_key(c, path))
        children = tuple(
            ~c.start() if isinstance(c, LeafEdge) else self._build(c, path) for c in cpl
        )
        start, end = self._char_span(edge.start(), edge.end())
        self.nodes.append(
            Node(
                edge.lhs().symbol(), _shared_rule_name(edge.lhs(), edge.rhs()), start, end, children
            )
        )
        return len(self.nodes) - 1

    def _char_span(self, t0: int, t1: int) -> tuple[int, int]:
        if t0 == t1:  # empty node: a point before the next token
            pos = self.tokens[t0][1] if t0 < len(self.tokens) else len(self.text)
            return pos, pos
        return self.tokens[t0][1], self.tokens[t1 - 1][2]


_PARSERS: OrderedDict[Hashable, GrammarParser] = OrderedDict()
_PARSERS_LOCK = threading.Lock()
# Shared parsers only memoise parses: hypothesis fingerprints need not see them.
__fingerprint_ignore__ = ("_PARSERS",)


def get_parser(
    grammar: CFG, tokenizer: Tokenizer | None = None, max_time: float | None = 5.0
) -> GrammarParser:
    """A shared :class:`GrammarParser` for this grammar and tokenizer.

    Families over the same grammar get the same parser and thus share its
    parse cache; the last 16 parsers are kept.
    """
    key = (grammar_text(grammar), tokenizer, max_time)
    with _PARSERS_LOCK:
        parser = _PARSERS.get(key)
        if parser is None:
            parser = GrammarParser(grammar, tokenizer, max_time=max_time)
            _PARSERS[key] = parser
            if len(_PARSERS) > 16:
                _PARSERS.popitem(last=False)
        _PARSERS.move_to_end(key)
        return parser
