"""Arithmetic-expression char-LSTM (DNI workshop paper §5.2).

Records are single-digit arithmetic expressions such as ``(3+4)*2`` from
:mod:`hypotheses.grammars.arith`; the model predicts the next character. The
paper inspects it with the grammar's parse-tree hypotheses (digits,
parentheses, each binary operator, as range and impulse signals).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from . import charlm
from .store import cached_model

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


def load(
    quick: bool = False,
    hidden: int = 128,
    epochs: int | None = None,
    seed: int = 0,
    directory: str | os.PathLike | None = None,
) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
    """The arithmetic next-character LSTM, trained on first use and cached.

    Parameters
    ----------
    quick : bool
        Fewer expressions and epochs (seconds; for tests and tours).
    hidden : int
        LSTM units (128 in the DNI paper).
    epochs : int, optional
        Overrides the quick/full default.
    seed : int
        Seeds data, initialisation and data order.
    directory : path, optional
        Model store directory (default ``$DNI_LAB_MODELS``).

    Returns
    -------
    module, encode, meta
        The model (eval mode), its encoder and the store metadata with the
        held-out next-character ``accuracy``, the next character's
        ``type_accuracy`` (see :func:`type_accuracy`) and the baselines.
    """
    vocab = charlm.Vocab()
    train_recs = records(3000 if quick else 20000, seed=seed)
    test_recs = records(1000, seed=seed + 7919)
    config = {
        "hidden": hidden,
        "embed": 16,
        "epochs": charlm.default(epochs, quick, 6, 12),
        "batch_size": 64,
        "lr": 5e-3,
        "seed": seed,
        "quick": quick,
        "max_depth": MAX_DEPTH,
        "data": charlm.data_digest(train_recs),
        "trainer": charlm.TRAINER_VERSION,
        "threads": charlm.THREADS,
    }

    def fit(module: nn.Module) -> dict[str, Any]:
        train_xy = charlm.next_char_data(vocab, train_recs)
        test_xy = charlm.next_char_data(vocab, test_recs)
        stats = charlm.train(
            module, *train_xy, epochs=config["epochs"], batch_size=64, lr=5e-3, seed=seed
        )
        return {
            **stats,
            **charlm.evaluate(module, train_xy, test_xy),
            "type_accuracy": round(type_accuracy(module, vocab, *test_xy), 4),
        }

    build = charlm.seeded(lambda: charlm.CharLSTM(vocab, hidden, embed=16), seed)
    module, meta = cached_model(NAME, config, build, fit, directory)
    return module, vocab, meta
