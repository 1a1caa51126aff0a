"""Boolean-expression LSTM with 4 units (Luigi, footnote 1).

Records are Boolean expressions over ``T``/``F`` with ``&`` and ``|`` under
left-to-right precedence, left-padded with ``X`` to a fixed length, e.g.
``XXXT|F&T&T`` (:mod:`hypotheses.grammars.boolean`). As in Luigi, the model
reads the whole record and predicts its value at the end; the 4-unit LSTM
layer (``"lstm"``) is what Luigi inspects with its finite-state hypotheses
(current value, pending operator). Luigi's model: 4 LSTM units, a dense
sigmoid output, binary cross-entropy with L2 activity regularisation on the
LSTM, 5,000 training and 5,000 held-out sequences, 5 epochs of Adam. Here
the output is a 2-way softmax (the same model as a sigmoid on a logit
difference), which lets the shared trainer serve it.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from . import charlm
from .store import cached_model

NAME = "boolean-lstm"
#: Record length. Longer than the generator's default of 10, which admits only
#: 682 distinct expressions: 5,000 held-out sequences would repeat training ones.
LENGTH = 15
FALSE, TRUE = 0, 1


def records(n: int, seed: int = 0, length: int = LENGTH) -> list[str]:
    """``n`` padded expressions of ``length`` characters."""
    from hypotheses.grammars import boolean as grammar

    return grammar.generate(n, seed=seed, length=length)


def value_targets(recs: list[str], encode: charlm.Vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets: the expression's value at its last symbol, nothing elsewhere."""
    from hypotheses.grammars import boolean as grammar

    x = encode(recs)
    y = torch.full_like(x, charlm.IGNORE)
    for i, r in enumerate(recs):
        y[i, len(r) - 1] = TRUE if grammar.evaluate(r) else FALSE
    return x, y


def load(
    quick: bool = False,
    hidden: int = 4,
    epochs: int | None = None,
    seed: int = 0,
    directory: str | os.PathLike | None = None,
) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
    """Luigi's Boolean-expression LSTM, trained on first use and cached.

    Parameters
    ----------
    quick : bool
        Fewer sequences (seconds; for tests and tours).
    hidden : int
        LSTM units (Luigi: 4).
    epochs : int, optional
        Overrides the quick/full default.
    seed : int
        Seeds data, initialisation and data order.
    directory : path, optional
        Model store directory (default ``$DNI_LAB_MODELS``).

    Returns
    -------
    module, encode, meta
        The model (eval mode; ``module(x)[:, -1].argmax(-1)`` is the predicted
        value, 1 for true), its encoder, and the store metadata: ``accuracy`` on
        held-out expressions none of which occurs in the training set, the
        majority-class and last-symbol (``baseline_bigram``) baselines.
    """
    vocab = charlm.Vocab()
    train_recs = records(1000 if quick else 5000, seed=seed)
    seen = set(train_recs)
    test_recs = [r for r in records(5000, seed=seed + 7919) if r not in seen]
    config = {
        "hidden": hidden,
        "embed": 8,
        "epochs": charlm.default(epochs, quick, 8, 10),
        "batch_size": 32,
        "lr": 1e-2,
        "activity_l2": 1e-3,
        "length": LENGTH,
        "seed": seed,
        "quick": quick,
        "data": charlm.data_digest(train_recs),
        "trainer": charlm.TRAINER_VERSION,
        "threads": charlm.THREADS,
    }

    def fit(module: nn.Module) -> dict[str, Any]:
        train_xy, test_xy = value_targets(train_recs, vocab), value_targets(test_recs, vocab)
        stats = charlm.train(
            module,
            *train_xy,
            epochs=config["epochs"],
            batch_size=config["batch_size"],
            lr=config["lr"],
            seed=seed,
            activity_l2=config["activity_l2"],
        )
        return {**stats, **charlm.evaluate(module, train_xy, test_xy), "length": LENGTH}

    build = charlm.seeded(lambda: charlm.CharLSTM(vocab, hidden, embed=8, n_out=2), seed)
    module, meta = cached_model(NAME, config, build, fit, directory)
    return module, vocab, meta
