"""Parentheses LSTM (DNI workshop paper §5.1) and its specialized-units variant (DeepBase §6.1).

Records are balanced-parentheses strings in which a digit gives the nesting
level before each parenthesis, e.g. ``0(1()1(2()))0()``; the model predicts the
next character. To predict the digits it must track the nesting depth.

The *specialized* variant adds DeepBase's auxiliary loss: a chosen subset S of
the LSTM's units is pushed to output a hypothesis signal, so ``w * MSE(h_S, hyp)
+ (1 - w) * CE``. S is drawn from the seed and stored in ``meta``, which makes the
model a ground truth for inspection: a good measure ranks S first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from . import charlm
from .recipe import XY, Recipe, Records

NAME = "parens-lstm"
SPECIALIZED_NAME = "parens-specialized"
MAX_DEPTH = 4
MAX_LEN = 40


def depth(record: str) -> np.ndarray:
    """Nesting depth of each symbol: the number of parenthesis spans that contain it.

    Both parentheses of a pair belong to their span (as in the parse-tree *range*
    signal), so in ``0(1())`` the depths are ``0 1 1 2 2 1``; a digit's depth
    equals its value in well-formed records. Causal: symbol t's depth depends on
    symbols ≤ t only, so an LSTM can follow it.
    """
    out, level = np.zeros(len(record)), 0
    for t, ch in enumerate(record):
        if ch == "(":
            level += 1
        out[t] = level
        if ch == ")":
            level = max(level - 1, 0)
    return out


def _depth_signal(record: str) -> np.ndarray:
    return depth(record) / MAX_DEPTH * 2 - 1


def _inside_signal(record: str) -> np.ndarray:
    return np.where(depth(record) > 0, 1.0, -1.0)


def _paren_signal(record: str) -> np.ndarray:
    return np.array([1.0 if ch in "()" else -1.0 for ch in record])


#: Hypotheses a specialized model can be trained on; each maps a record to [-1, 1] per symbol.
HYPOTHESES: dict[str, Callable[[str], np.ndarray]] = {
    "depth": _depth_signal,  # nesting depth, 0..MAX_DEPTH scaled to [-1, 1]
    "inside": _inside_signal,  # inside at least one pair of parentheses
    "paren": _paren_signal,  # the symbol is a parenthesis
}


def records(n: int, seed: int = 0) -> list[str]:
    """``n`` records from the parentheses grammar (non-empty ones only)."""
    from hypotheses.grammars import parens as grammar

    out = [r for r in grammar.generate(n, seed=seed, max_depth=MAX_DEPTH, max_len=MAX_LEN) if r]
    if not out:
        raise RuntimeError("the parentheses generator returned no non-empty records")
    return out


def _records(quick: bool, seed: int) -> Records:
    # A different generator seed for held-out records; overlap of short common
    # strings is part of the language's distribution, not leakage.
    return Records(records(1500 if quick else 8000, seed=seed), records(1000, seed=seed + 7919))


#: 128 units as in the DNI paper; quick: 1,500 records and 6 epochs, full: 8,000 and 15.
RECIPE = Recipe(
    NAME,
    _records,
    hidden=128,
    embed=16,
    epochs=(6, 15),
    settings={"max_depth": MAX_DEPTH, "max_len": MAX_LEN},
)
load = RECIPE.load


def load_specialized(
    n_units_s: int = 4,
    weight: float = 0.5,
    hypothesis: str = "depth",
    quick: bool = False,
    seed: int = 0,
    hidden: int = 16,
    epochs: int | None = None,
    directory: str | os.PathLike | None = None,
) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
    """A parentheses LSTM whose units S are trained to follow ``hypothesis``.

    Parameters
    ----------
    n_units_s : int
        |S|, the number of specialized units (DeepBase default 4).
    weight : float
        w in ``w * aux + (1 - w) * next-char loss`` (DeepBase default 0.5).
    hypothesis : {"depth", "inside", "paren"}
        The signal S follows (see :data:`HYPOTHESES`).
    quick, seed, hidden, epochs, directory
        As in :func:`load`; ``hidden`` defaults to DeepBase's 16 units, and the
        quick and full variants train 15 and 30 epochs.

    Returns
    -------
    module, encode, meta
        As :func:`load`; ``meta["specialized_units"]`` is the ground-truth S
        (indices into layer ``"lstm"``), ``meta["hypothesis"]`` its signal, and
        ``meta["unit_r"]`` each unit's held-out Pearson r with that signal.
    """
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"unknown hypothesis {hypothesis!r}; choose from {sorted(HYPOTHESES)}")
    if not 0 < n_units_s <= hidden:
        raise ValueError(f"n_units_s must be in 1..{hidden}, got {n_units_s}")
    spec = {
        "hypothesis": hypothesis,
        "weight": float(weight),
        "units": specialized_units(hidden, n_units_s, seed),
    }

    def aux_loss(data: Records, train_xy: XY) -> dict[str, Any]:
        width = train_xy[0].shape[1]
        return {
            "aux": _aux_targets(data.train, hypothesis, width, n_units_s),
            "aux_units": spec["units"],
            "aux_weight": spec["weight"],
        }

    def report(module: nn.Module, data: Records, _test_xy: XY) -> dict[str, Any]:
        r = unit_correlations(module, charlm.Vocab(), data.test, hypothesis)
        return {
            "specialized_units": spec["units"],
            "hypothesis": hypothesis,
            "weight": spec["weight"],
            "unit_r": [round(float(x), 4) for x in r],
        }

    recipe = replace(
        RECIPE,
        name=SPECIALIZED_NAME,
        # 16 units are cheap per step and need more epochs to settle on the hypothesis
        # as well as on the task.
        epochs=(15, 30),
        settings={**RECIPE.settings, "specialized": spec},
        train_options=aux_loss,
        report=report,
    )
    return recipe.load(quick, hidden, epochs, seed, directory)


def specialized_units(hidden: int, n_units_s: int, seed: int) -> list[int]:
    """The ground-truth subset S: ``n_units_s`` of ``hidden`` unit indices drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    return sorted(int(u) for u in rng.choice(hidden, n_units_s, replace=False))


def _aux_targets(recs: list[str], hypothesis: str, width: int, n_units: int) -> torch.Tensor:
    out = torch.zeros(len(recs), width, n_units)
    for i, r in enumerate(recs):
        out[i, : len(r)] = torch.as_tensor(HYPOTHESES[hypothesis](r), dtype=torch.float32)[:, None]
    return out


@torch.no_grad()
def unit_correlations(
    module: nn.Module, encode: charlm.Vocab, recs: list[str], hypothesis: str
) -> list[float]:
    """Pearson r of every LSTM unit's activation with a hypothesis, over all symbols of ``recs``."""
    x = encode(recs)
    with charlm.using_threads(charlm.THREADS):
        _, h = module.run(x)
    mask = x != charlm.Vocab.pad_id
    acts = h[mask].double().numpy()  # (symbols, units)
    sig = np.concatenate([HYPOTHESES[hypothesis](r) for r in recs])
    acts_c, sig_c = acts - acts.mean(0), sig - sig.mean()
    denom = np.sqrt((acts_c**2).sum(0) * (sig_c**2).sum()) + 1e-12
    return [float(r) for r in (acts_c * sig_c[:, None]).sum(0) / denom]
