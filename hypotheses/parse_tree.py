"""Parse-tree hypotheses: range and impulse signals per node type (DNI paper §4, DeepBase §4.2).

One parse of a record yields, for every nonterminal of the grammar,

* ``range:X`` — 1 on every symbol inside some ``X`` node's span (the paper's
  time-domain representation),
* ``impulse:X`` — 1 on the first and the last symbol of every ``X`` node
  (the signal representation),

and a composite ``depth``: the number of nested nodes (of the chosen
labels) covering each symbol. For ``((1+2))`` with the arithmetic grammar,
``range:Paren`` is ``1111111``, ``impulse:Paren`` is ``1100011`` and the
``Paren`` depth is ``1222221`` — Figure 1's f3|f2, f5|f4 and f1.

Windows (:class:`~hypotheses.windows.Window`) are evaluated on the parse of
their full source and sliced; parses are cached per grammar, so every window
of a query and every family over the same grammar share one parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nltk.grammar import CFG

from dni_lab.backend.errors import HypothesisError, did_you_mean

from .parsing import GrammarError, Parse, Tokenizer, get_parser, grammar_text, rule_name
from .windows import SourceFamily

__all__ = ["ParseTreeFamily", "resolve_grammar"]


def resolve_grammar(grammar: CFG | str) -> CFG:
    """An NLTK grammar, or grammar text in NLTK's format (``CFG.fromstring``)."""
    if isinstance(grammar, CFG):
        return grammar
    if isinstance(grammar, str):
        return CFG.fromstring(grammar)
    raise HypothesisError(f"grammar {grammar!r} is neither an nltk CFG nor grammar text.")


def grammar_units(grammar: CFG, by: str) -> list[str]:
    """Node types (``by="label"``) or production names (``by="rule"``), in grammar order."""
    if by == "label":
        return list(dict.fromkeys(p.lhs().symbol() for p in grammar.productions()))
    if by == "rule":
        return list(dict.fromkeys(rule_name(p.lhs(), p.rhs()) for p in grammar.productions()))
    raise HypothesisError(f"by={by!r}: use 'label' (one signal per node type) or 'rule'.")


class ParseTreeFamily(SourceFamily):
    """Range and impulse signals for every node type of a grammar, plus nesting depth.

    Parameters
    ----------
    grammar : nltk.CFG or str
        The grammar (a PCFG works; text is read with ``nltk.CFG.fromstring``).
    name : str
        Family name; hypothesis ids are ``"{name}.range:Expr"`` etc.
    tokenizer : callable, optional
        ``str -> [(terminal, start, end), ...]``; every character is a
        terminal when None (see :mod:`hypotheses.parsing`).
    by : {"label", "rule"}
        One pair of signals per nonterminal, or per production
        (``range:Paren -> '(' Expr ')'``).
    depth_labels : sequence of str, optional
        Node labels counted by ``depth``; every nonterminal when None.
    labels : sequence of str, optional
        Keep only these labels (or rule names) out of the grammar's.
    max_time : float or None
        Per-parse time limit handed to NLTK's chart parser.

    Examples
    --------
    >>> from hypotheses.grammars import arith
    >>> fam = ParseTreeFamily(arith.grammar(), name="arith", depth_labels=["Paren"])
    >>> sig = fam.evaluate("((1+2))")
    >>> sig[:, fam.signals().index("impulse:Paren")].tolist()
    [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    """

    def __init__(
        self,
        grammar: CFG | str,
        name: str = "parse_tree",
        tokenizer: Tokenizer | None = None,
        by: str = "label",
        depth_labels: Sequence[str] | None = None,
        labels: Sequence[str] | None = None,
        max_time: float | None = 5.0,
    ) -> None:
        self.grammar = grammar
        self.name = name
        self.tokenizer = tokenizer
        self.by = by
        self.depth_labels = list(depth_labels) if depth_labels is not None else None
        self.labels = list(labels) if labels is not None else None
        self.max_time = max_time

    # -- protocol ------------------------------------------------------------------
    @property
    def kind(self) -> dict[str, str]:
        return {s: ("continuous" if s == "depth" else "binary") for s in self.signals()}

    def units(self) -> list[str]:
        """The node types (or rules) that get a range and an impulse signal."""
        if "_units" not in self.__dict__:
            g = resolve_grammar(self.grammar)
            units = grammar_units(g, self.by)
            names = grammar_units(g, "label")
            for given, choices in ((self.labels, units), (self.depth_labels, names)):
                unknown = [u for u in given or () if u not in choices]
                if unknown:
                    raise HypothesisError(
                        f"family {self.name!r}: {unknown} are not in the grammar."
                        + did_you_mean(unknown[0], choices)
                    )
            self._units = units if self.labels is None else [u for u in units if u in self.labels]
        return list(self._units)

    def signals(self) -> list[str]:
        units = self.units()
        return [f"range:{u}" for u in units] + [f"impulse:{u}" for u in units] + ["depth"]

    def get_params(self) -> dict[str, Any]:
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        # The grammar object's repr only counts productions; fingerprint its text.
        params["grammar"] = grammar_text(resolve_grammar(self.grammar))
        return params

    # -- computation -----------------------------------------------------------------
    def parse(self, text: str) -> Parse:
        """The :class:`~hypotheses.parsing.Parse` of ``text`` (shared, cached)."""
        if not isinstance(text, str):
            raise HypothesisError(
                f"family {self.name!r} parses strings; got {type(text).__name__}."
            )
        if "_parser" not in self.__dict__:
            self._parser = get_parser(resolve_grammar(self.grammar), self.tokenizer, self.max_time)
        try:
            return self._parser.parse(text)
        except GrammarError as exc:
            raise GrammarError(f"hypothesis family {self.name!r}: {exc}") from None

    def evaluate_source(self, source: str) -> np.ndarray:
        parse = self.parse(source)
        units = self.units()
        col = {u: i for i, u in enumerate(units)}
        n, k = len(source), len(units)
        key = (lambda node: node.label) if self.by == "label" else (lambda node: node.rule)
        spans = np.array(
            [
                (d.start, d.end, col[key(d)])
                for d in parse.nodes
                if d.end > d.start and key(d) in col
            ],
            dtype=np.int64,
        ).reshape(-1, 3)
        starts, ends, cols = spans[:, 0], spans[:, 1], spans[:, 2]
        # Coverage counts via a difference array: +1 where a node opens, -1 where it closes.
        diff = np.zeros((n + 1, k), dtype=np.int32)
        np.add.at(diff, (starts, cols), 1)
        np.add.at(diff, (ends, cols), -1)
        cover = np.cumsum(diff[:n], axis=0)
        impulse = np.zeros((n, k), dtype=np.float32)
        impulse[starts, cols] = 1.0
        impulse[ends - 1, cols] = 1.0
        depth = self._depth(parse, n)
        return np.concatenate([(cover > 0).astype(np.float32), impulse, depth[:, None]], axis=1)

    def _depth(self, parse: Parse, n: int) -> np.ndarray:
        wanted = set(self.depth_labels) if self.depth_labels is not None else None
        diff = np.zeros(n + 1, dtype=np.float32)
        for node in parse.nodes:
            if node.end > node.start and (wanted is None or node.label in wanted):
                diff[node.start] += 1
                diff[node.end] -= 1
        return np.cumsum(diff[:n])
