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

from collections.abc import Sequence

import torch

from . import charlm
from .recipe import XY, Recipe, Records

NAME = "boolean-lstm"
#: Record length. Longer than the generator's default of 10, which admits only
#: 682 distinct expressions: 5,000 held-out sequences would repeat training ones.
LENGTH = 15
FALSE = 0
TRUE = 1
#: L2 penalty on the LSTM's activations (Luigi regularises its model's activity).
ACTIVITY_L2 = 1e-3


def records(n: int, seed: int = 0, length: int = LENGTH) -> list[str]:
    """``n`` padded expressions of ``length`` characters."""
    from hypotheses.grammars import boolean as grammar

    return grammar.generate(n, seed=seed, length=length)


def value_targets(vocab: charlm.Vocab, recs: Sequence[str]) -> XY:
    """Inputs and targets: the expression's value at its last symbol, nothing elsewhere."""
    from hypotheses.grammars import boolean as grammar

    x = vocab(recs)
    y = torch.full_like(x, charlm.IGNORE)
    for i, r in enumerate(recs):
        y[i, len(r) - 1] = TRUE if grammar.evaluate(r) else FALSE
    return x, y


def _records(quick: bool, seed: int) -> Records:
    train = records(1000 if quick else 5000, seed=seed)
    seen = set(train)
    return Records(train, [r for r in records(5000, seed=seed + 7919) if r not in seen])


#: Luigi's 4 units; quick: 1,000 sequences and 8 epochs, full: 5,000 and 10. The model
#: predicts the value at the end (``module(x)[:, -1].argmax(-1)``, 1 for true); its held-out
#: ``accuracy`` is on expressions none of which occurs in the training set.
RECIPE = Recipe(
    NAME,
    _records,
    hidden=4,
    embed=8,
    epochs=(8, 10),
    batch_size=32,
    lr=1e-2,
    settings={"activity_l2": ACTIVITY_L2, "length": LENGTH},
    n_out=2,
    targets=value_targets,
    train_options=lambda _data, _xy: {"activity_l2": ACTIVITY_L2},
    report=lambda *_: {"length": LENGTH},
)
load = RECIPE.load
