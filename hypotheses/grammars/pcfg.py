"""Weighted grammar text → NLTK PCFG, and a seedable top-down PCFG sampler.

The grammars of this package are written in a small text format close to
NLTK's own::

    Expr  -> Digit [3] | Paren [1] | Expr '+' Expr [1]
    Digit -> '0' | '1'

Alternatives are separated by ``|``; a bracketed number is the alternative's
*weight* (default 1); quoted items (``'…'`` or ``"…"``) are terminals and bare
items are nonterminals; an alternative written ``''`` (or left empty) is the
empty production. Weights, not probabilities, are stored so that a subset of
the rules (the SQL grammar's nested tiers) can be renormalised into a valid
PCFG; :func:`build_pcfg` divides each left-hand side's weights by their sum.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nltk.grammar import PCFG, Nonterminal, ProbabilisticProduction

__all__ = ["Rule", "Sampler", "build_pcfg", "parse_rules"]

# One lexical item of the rule format: a quoted terminal, a weight, a bar or a name.
_ITEM = re.compile(r"""'[^']*'|"[^"]*"|\[[^\]]*\]|\||[^\s|\[]+""")


@dataclass(frozen=True)
class Rule:
    """One production with a sampling weight.

    Attributes
    ----------
    lhs : str
        Left-hand side nonterminal.
    rhs : tuple of str
        Right-hand side; terminals keep their quotes (``"'+'"``) so that they
        cannot be confused with nonterminal names.
    weight : float
        Relative sampling weight among the productions of ``lhs``.
    """

    lhs: str
    rhs: tuple[str, ...]
    weight: float = 1.0


def parse_rules(text: str) -> list[Rule]:
    """Read rules in the weighted format described in the module docstring.

    Lines starting with ``#`` are comments. A line whose left-hand side was
    already defined adds alternatives to it.

    Raises
    ------
    ValueError
        On a line without ``->`` or an unreadable weight; the message quotes it.
    """
    rules: list[Rule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        lhs, arrow, body = line.partition("->")
        if not arrow or not lhs.strip():
            raise ValueError(f"grammar line {line!r} has no 'LHS ->'.")
        alt: list[str] = []
        weight = 1.0
        for item in [*_ITEM.findall(body), "|"]:
            if item == "|":
                rhs = tuple(a for a in alt if a not in ("''", '""'))
                rules.append(Rule(lhs.strip(), rhs, weight))
                alt, weight = [], 1.0
            elif item.startswith("["):
                try:
                    weight = float(item[1:-1])
                except ValueError:
                    raise ValueError(f"bad weight {item!r} in grammar line {line!r}.") from None
            else:
                alt.append(item)
    return rules


def build_pcfg(rules: Iterable[Rule], start: str | None = None) -> PCFG:
    """Build an NLTK PCFG from weighted rules, normalising weights per left-hand side.

    Parameters
    ----------
    rules : iterable of Rule
        The productions; the first rule's left-hand side is the default start.
    start : str, optional
        Start symbol.

    Raises
    ------
    ValueError
        If a bare right-hand-side name has no productions (a typo would
        otherwise silently become an unreachable nonterminal).
    """
    rules = list(rules)
    lhs_names = {r.lhs for r in rules}
    totals: dict[str, float] = {}
    for r in rules:
        totals[r.lhs] = totals.get(r.lhs, 0.0) + r.weight
    prods = []
    for r in rules:
        rhs: list[str | Nonterminal] = []
        for item in r.rhs:
            if item[0] in "'\"":
                rhs.append(item[1:-1])
            elif item in lhs_names:
                rhs.append(Nonterminal(item))
            else:
                raise ValueError(
                    f"rule {r.lhs} -> {' '.join(r.rhs)} uses {item!r}, which has no productions; "
                    "quote it if it is a terminal."
                )
        prods.append(
            ProbabilisticProduction(Nonterminal(r.lhs), rhs, prob=r.weight / totals[r.lhs])
        )
    return PCFG(Nonterminal(start or rules[0].lhs), prods)


def _min_heights(grammar: PCFG, counted: frozenset[str] | None) -> dict[Nonterminal, float]:
    """Smallest counted depth of a complete derivation from each nonterminal (fixpoint)."""
    inf = float("inf")
    height: dict[Nonterminal, float] = {p.lhs(): inf for p in grammar.productions()}
    changed = True
    while changed:
        changed = False
        for p in grammar.productions():
            h = _production_height(p, height) + _counts(p.lhs(), counted)
            if h < height[p.lhs()]:
                height[p.lhs()] = h
                changed = True
    return height


def _production_height(p: ProbabilisticProduction, height: dict[Nonterminal, float]) -> float:
    return max((height[s] for s in p.rhs() if isinstance(s, Nonterminal)), default=0.0)


def _counts(nt: Nonterminal, counted: frozenset[str] | None) -> int:
    return 1 if counted is None or nt.symbol() in counted else 0


class Sampler:
    """Draws sentences top-down from a PCFG under a depth limit.

    At each nonterminal a production is drawn with its probability, among
    those that can still finish within ``max_depth`` (the probabilities of
    the allowed ones are renormalised), so every draw terminates.

    Parameters
    ----------
    grammar : PCFG
        The grammar to sample.
    max_depth : int
        Largest number of nested nodes whose label is in ``depth_labels``
        (every nonterminal when None) on any root-to-leaf path.
    depth_labels : sequence of str, optional
        Nonterminals that count towards the depth.

    Raises
    ------
    ValueError
        If no sentence fits within ``max_depth``.
    """

    def __init__(
        self, grammar: PCFG, max_depth: int, depth_labels: Sequence[str] | None = None
    ) -> None:
        self.counted = frozenset(depth_labels) if depth_labels is not None else None
        self.max_depth = max_depth
        # Precomputed once: the least depth each production still needs to finish.
        heights = _min_heights(grammar, self.counted)
        self.start = grammar.start()
        if heights[self.start] > max_depth:
            raise ValueError(
                f"max_depth={max_depth} is too small: the shortest derivation needs "
                f"{heights[self.start]:g}."
            )
        self.options: dict[Nonterminal, list[tuple[ProbabilisticProduction, float]]] = {}
        for p in grammar.productions():
            self.options.setdefault(p.lhs(), []).append((p, _production_height(p, heights)))

    def draw(self, rng: random.Random, max_tokens: int | None = None) -> list[str] | None:
        """One sentence as a list of terminals.

        Parameters
        ----------
        rng : random.Random
            Source of randomness (the caller seeds it, so draws are reproducible).
        max_tokens : int, optional
            Give up (return None) as soon as the sentence exceeds this many
            terminals, so callers can reject long samples cheaply.
        """
        out: list[str] = []
        # Explicit stack of (symbol, depth above it): long sentences need no recursion.
        stack: list[tuple[str | Nonterminal, int]] = [(self.start, 0)]
        while stack:
            sym, depth = stack.pop()
            if not isinstance(sym, Nonterminal):
                out.append(sym)
                if max_tokens is not None and len(out) > max_tokens:
                    return None
                continue
            depth += _counts(sym, self.counted)
            allowed = [p for p, h in self.options[sym] if depth + h <= self.max_depth]
            prod = rng.choices(allowed, weights=[p.prob() for p in allowed])[0]
            stack.extend((s, depth) for s in reversed(prod.rhs()))
        return out
