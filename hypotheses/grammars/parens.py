"""Balanced parentheses with nesting digits (DNI workshop paper §5.1, DeepBase §6).

A digit before each parenthesised group shows the nesting level at which the
group opens, e.g. ``0(1()1(2()))0()``; at the deepest level only the level's
digit may repeat: ``…3(44)…``. To predict a digit a model must track the
current depth, which is what the hypotheses of this grammar test.

The grammar gives each nesting level its own nonterminals, so one parse
yields level-specific signals (it has no empty productions, which keeps
NLTK's left-corner chart parser fast)::

    Seq0   -> '0' Paren1 | '0' Paren1 Seq0     (one Seq_i, Paren_i+1 per level i < D)
    Paren1 -> '(' ')' | '(' Seq1 ')'
    ...
    SeqD   -> 'D' | 'D' SeqD                   (D = max_depth)

``range:Paren2`` is 1 on every character of a level-2 group (its parentheses
included), ``impulse:Paren2`` on its two parentheses, and the ``depth`` of
:func:`family` counts the enclosing groups — on a digit it equals the digit.
"""

from __future__ import annotations

import random

from nltk.grammar import PCFG

from ..parse_tree import ParseTreeFamily
from .pcfg import Sampler, build_pcfg, parse_rules

__all__ = ["family", "generate", "grammar"]

# Probability that a group has content, per level: lower at deeper levels so
# strings stay short but still reach the deepest level.
_FILL = (0.75, 0.6, 0.55, 0.5, 0.45, 0.45, 0.45, 0.45, 0.45)
# Probability that a sequence continues with another group.
_MORE = 0.4


def _rules_text(max_depth: int) -> str:
    if not 1 <= max_depth <= 9:
        raise ValueError(f"max_depth={max_depth}: nesting digits allow 1 to 9 levels.")
    lines = []
    for i in range(max_depth):
        lines.append(
            f"Seq{i} -> '{i}' Paren{i + 1} [{1 - _MORE}] | '{i}' Paren{i + 1} Seq{i} [{_MORE}]"
        )
        p = _FILL[i]
        lines.append(f"Paren{i + 1} -> '(' ')' [{1 - p}] | '(' Seq{i + 1} ')' [{p}]")
    d = max_depth
    lines.append(f"Seq{d} -> '{d}' [{1 - _MORE}] | '{d}' Seq{d} [{_MORE}]")
    return "\n".join(lines)


def grammar(max_depth: int = 4) -> PCFG:
    """The parentheses grammar with ``max_depth`` nesting levels, as an NLTK PCFG.

    Examples
    --------
    >>> len(grammar(4).productions())
    18
    """
    return build_pcfg(parse_rules(_rules_text(max_depth)), start="Seq0")


def generate(n: int, seed: int = 0, max_depth: int = 4, max_len: int = 40) -> list[str]:
    """Sample ``n`` strings of at most ``max_len`` characters.

    Deterministic under ``seed``. Strings longer than ``max_len`` are
    rejected and redrawn, so every output is in :func:`grammar`'s language.

    Examples
    --------
    >>> generate(3, seed=1) == generate(3, seed=1)
    True
    """
    if max_len < 3:
        raise ValueError(f"max_len={max_len}: the shortest string, '0()', has 3 characters.")
    # Nesting is bounded by the grammar's levels and length by rejection, not by tree depth.
    sampler = Sampler(grammar(max_depth), max_depth=10**6)
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        tokens = sampler.draw(rng, max_tokens=max_len)
        if tokens is not None:
            out.append("".join(tokens))
    return out


def family(max_depth: int = 4, name: str = "parens") -> ParseTreeFamily:
    """A parse-tree family over this grammar.

    ``depth`` counts the enclosing ``Paren*`` groups (the nesting level).
    """
    labels = [f"Paren{i}" for i in range(1, max_depth + 1)]
    return ParseTreeFamily(grammar(max_depth), name=name, depth_labels=labels)
