"""Arithmetic-expression char-LSTM (DNI workshop paper §5.2).

Records are single-digit arithmetic expressions such as ``(3+4)*2`` from
:mod:`hypotheses.grammars.arith`; the model predicts the next character. The
paper inspects it with the grammar's parse-tree hypotheses (digits,
parentheses, each binary operator, as range and impulse signals).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from . import charlm
from .recipe import XY, Recipe, Records

NAME = "arith-lstm"
MAX_DEPTH = 3


def records(n: int, seed: int = 0, max_depth: int = MAX_DEPTH) -> list[str]:
    """``n`` expressions from the arithmetic grammar."""
    from hypotheses.grammars import arith as grammar

    return grammar.generate(n, seed=seed, max_depth=max_depth)


@torch.no_grad()
def type_accuracy(
    module: nn.Module, vocab: charlm.Vocab, x: torch.Tensor, y: torch.Tensor
) -> float:
    """Accuracy of the predicted *type* of the next character: digit, operator, ``(`` or ``)``.

    The DNI paper's end-to-end measure (its Figure 5): the exact next digit or
    operator is mostly a coin toss, its type is what the grammar determines.
    The predicted type is the one with the most probability mass (summed over
    its characters), not the type of the single most likely character.
    """
    kinds = torch.zeros(len(vocab), dtype=torch.long)  # 0: any other character
    for kind, chars in enumerate(("0123456789", "+-*/", "(", ")"), start=1):
        kinds[torch.tensor(vocab.ids(chars))] = kind
    with charlm.using_threads(charlm.THREADS):
        probs = module(x).softmax(-1)
    mass = torch.zeros(*probs.shape[:2], 5).index_add_(2, kinds, probs)
    scored = y != charlm.IGNORE
    return float((mass.argmax(-1)[scored] == kinds[y[scored]]).float().mean())


def _records(quick: bool, seed: int) -> Records:
    return Records(records(3000 if quick else 20000, seed=seed), records(1000, seed=seed + 7919))


def _type_accuracy(module: nn.Module, _data: Records, test_xy: XY) -> dict[str, Any]:
    return {"type_accuracy": round(type_accuracy(module, charlm.Vocab(), *test_xy), 4)}


#: 128 units as in the DNI paper; quick: 3,000 expressions and 6 epochs, full: 20,000 and 12.
#: ``meta`` adds the next character's ``type_accuracy`` (see :func:`type_accuracy`).
RECIPE = Recipe(
    NAME,
    _records,
    hidden=128,
    embed=16,
    epochs=(6, 12),
    settings={"max_depth": MAX_DEPTH},
    report=_type_accuracy,
)
load = RECIPE.load
