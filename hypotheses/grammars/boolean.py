"""Boolean expressions under left-to-right precedence, left-padded with ``X`` (Luigi).

Operands are ``T`` and ``F``, operators ``&`` and ``|``; ``F|T&F`` means
``(F|T)&F``. Every record is padded on the left with ``X`` to a fixed
length, e.g. ``XXXT|F&T&T`` (length 10), and a model reads it to predict
the value. The grammar is left-recursive, so its parse tree *is* the
left-to-right evaluation order::

    S       -> Expr | Pad Expr
    Pad     -> 'X' | 'X' Pad
    Expr    -> Operand | Expr Op Operand
    Operand -> 'T' | 'F'
    Op      -> '&' | '|'

The finite-state views of the same task (current value, last operator) are
in :mod:`hypotheses.fsm`.
"""

from __future__ import annotations

import random

from nltk.grammar import PCFG

from ..parse_tree import ParseTreeFamily
from .pcfg import build_pcfg, parse_rules

__all__ = ["evaluate", "family", "generate", "grammar"]

_RULES = """
S       -> Expr | Pad Expr
Pad     -> 'X' | 'X' Pad
Expr    -> Operand | Expr Op Operand
Operand -> 'T' | 'F'
Op      -> '&' | '|'
"""


def grammar() -> PCFG:
    """The padded Boolean-expression grammar as an NLTK PCFG (start symbol ``S``)."""
    return build_pcfg(parse_rules(_RULES), start="S")


def generate(n: int, seed: int = 0, length: int = 10) -> list[str]:
    """Sample ``n`` expressions, each left-padded with ``X`` to exactly ``length`` characters.

    The number of operands is uniform between 1 and ``(length + 1) // 2``
    (drawn directly rather than from PCFG weights, so short and long
    expressions are equally common); operands and operators are uniform.
    Deterministic under ``seed``.

    Examples
    --------
    >>> generate(1, seed=3, length=7)[0].__len__()
    7
    """
    if length < 1:
        raise ValueError(f"length={length}: an expression needs at least one character.")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, (length + 1) // 2)
        parts = [rng.choice("TF")]
        for _ in range(k - 1):
            parts += [rng.choice("&|"), rng.choice("TF")]
        out.append("".join(parts).rjust(length, "X"))
    return out


def evaluate(expr: str) -> bool:
    """Value of ``expr`` under left-to-right evaluation (padding ``X`` ignored).

    Raises
    ------
    ValueError
        If ``expr`` is not ``X* operand (operator operand)*``.

    Examples
    --------
    >>> evaluate("XXF|T&F"), evaluate("T&T|F")
    (False, True)
    """
    body = expr.lstrip("X")
    ok = len(body) % 2 == 1 and all(c in ("TF" if i % 2 == 0 else "&|") for i, c in enumerate(body))
    if not ok:
        raise ValueError(
            f"{expr!r} is not a padded Boolean expression: expected X* then T/F "
            "alternating with & or |."
        )
    value = body[0] == "T"
    for op, operand in zip(body[1::2], body[2::2], strict=True):
        rhs = operand == "T"
        value = (value and rhs) if op == "&" else (value or rhs)
    return value


def family(name: str = "bool") -> ParseTreeFamily:
    """A parse-tree family over this grammar whose ``depth`` counts open ``Expr`` nodes."""
    return ParseTreeFamily(grammar(), name=name, depth_labels=["Expr"])
