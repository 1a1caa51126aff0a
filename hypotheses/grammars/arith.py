"""Single-digit arithmetic expressions (DNI workshop paper §4–5.2).

The paper's grammar is ``e → digit | (e) | e+e | e−e | e*e | e/e`` (ASCII
``-`` here). It is written with one nonterminal per production so that node
*types* name the paper's rules and a parse yields one range and one impulse
signal per rule::

    Expr  -> Digit | Paren | Add | Sub | Mul | Div
    Paren -> '(' Expr ')'
    Add   -> Expr '+' Expr          (Sub, Mul, Div alike)
    Digit -> '0' | … | '9'

The language is the paper's. The grammar is ambiguous (``1+2*3``); the parse
families resolve ambiguity left-associatively (see :mod:`hypotheses.parsing`).
"""

from __future__ import annotations

import random

from nltk.grammar import PCFG

from ..parse_tree import ParseTreeFamily
from .pcfg import Sampler, build_pcfg, parse_rules

__all__ = ["family", "generate", "grammar"]

_RULES = """
Expr  -> Digit [4] | Paren [2] | Add [1] | Sub [1] | Mul [1] | Div [1]
Paren -> '(' Expr ')'
Add   -> Expr '+' Expr
Sub   -> Expr '-' Expr
Mul   -> Expr '*' Expr
Div   -> Expr '/' Expr
Digit -> '0' | '1' | '2' | '3' | '4' | '5' | '6' | '7' | '8' | '9'
"""


def grammar() -> PCFG:
    """The arithmetic grammar as an NLTK PCFG (start symbol ``Expr``)."""
    return build_pcfg(parse_rules(_RULES), start="Expr")


def generate(n: int, seed: int = 0, max_depth: int = 3) -> list[str]:
    """Sample ``n`` expressions with at most ``max_depth`` nested ``Expr`` nodes below the root.

    ``max_depth=0`` gives single digits; ``max_depth=1`` adds ``(d)`` and
    ``d+d``; every extra level allows one more level of nesting. Draws that
    are a bare digit are kept only when ``max_depth`` is 0, so the data are
    expressions. Deterministic under ``seed``.

    Examples
    --------
    >>> generate(2, seed=0, max_depth=0)[0].isdigit()
    True
    """
    if max_depth < 0:
        raise ValueError(f"max_depth={max_depth} must be >= 0.")
    sampler = Sampler(grammar(), max_depth=max_depth + 1, depth_labels=["Expr"])
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        s = "".join(sampler.draw(rng) or [])
        if max_depth == 0 or len(s) > 1:
            out.append(s)
    return out


def family(name: str = "arith") -> ParseTreeFamily:
    """A parse-tree family over this grammar whose ``depth`` counts ``Paren`` nesting."""
    return ParseTreeFamily(grammar(), name=name, depth_labels=["Paren"])
