"""Pieces shared by the verification checks: results, unit sets, activations, signals.

Every check compares the unit set under test with *random unit sets of the same
size* drawn from the same layer: a check that the real set passes but random
sets pass as well says nothing about the hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import numpy as np
import polars as pl
import torch

from ..errors import HypothesisError
from ..extraction.behaviors import (  # noqa: F401  re-exported: verify's modules import them from here
    address_and_width,
    batches,
    check_units,
    layer_plan,
    symbol_activations,
)
from ..extraction.extract import to_device
from ..extraction.models import Model, _first_tensor
from ..hypothesis.hypotheses import HypothesisFamily, as_family, evaluate_family


class RandomSetOptions(TypedDict, total=False):
    """Keyword options of the checks that compare the units with random unit sets.

    :func:`ablation`, :func:`oracle` and :func:`perturbation` take them as
    ``**options``; unknown keywords raise ``TypeError``.

    Attributes
    ----------
    n_random : int
        Random unit sets of the same size (default 10).
    exclude : bool
        Draw them from the layer's units outside the set under test (default True).
    seed : int
        Seeds every random draw of the check (default 0).
    device : str or torch.device
        Where the model runs (default ``"auto"``).
    batch_size : int
        Records per forward pass (default 256).
    """

    n_random: int
    exclude: bool
    seed: int
    device: str | torch.device
    batch_size: int


@dataclass(frozen=True)
class RandomSets:
    """:class:`RandomSetOptions` resolved, with their defaults (see there)."""

    n_random: int = 10
    exclude: bool = True
    seed: int = 0
    device: str | torch.device = "auto"
    batch_size: int = 256


class Verification(NamedTuple):
    """What a verification check returns: the detail and the verdict.

    Attributes
    ----------
    frame : polars.DataFrame
        One row per measurement (a perturbation, an evaluated unit set, a sample).
    summary : dict
        The numbers a person reads first (scores of the unit set under test, of the
        random sets, and how they compare); tables in it are Polars frames.
    """

    frame: pl.DataFrame
    summary: dict[str, Any]


def random_unit_sets(
    width: int, size: int, n: int, exclude: Sequence[int], rng: np.random.Generator
) -> list[np.ndarray]:
    """``n`` random sets of ``size`` units, drawn from the units not in ``exclude``.

    Excluding the set under test keeps the contrast clean; when too few units
    remain (a narrow layer) the draw falls back to the whole layer.
    """
    pool = np.setdiff1d(np.arange(width), np.asarray(exclude, dtype=np.int64))
    if len(pool) < size:
        pool = np.arange(width)
    return [np.sort(rng.choice(pool, size, replace=False)) for _ in range(n)]


def forward_output(model: Model, records: Sequence[Any], device: torch.device) -> torch.Tensor:
    """The module's (first) output tensor for ``records``; hooks in force apply."""
    batch = to_device(model.encode(list(records)), device)
    return _first_tensor(model.forward(batch))


def single_signal(hypothesis: Any) -> HypothesisFamily:
    """A hypothesis (or a family of one signal) as a family; several signals are ambiguous."""
    fam = as_family(hypothesis)
    if len(fam.signals()) != 1:
        raise HypothesisError(
            f"hypothesis {fam.name!r} has {len(fam.signals())} signals; verification checks one. "
            "Wrap the signal you mean in a function, e.g. lambda r: fam(r)['signal']."
        )
    return fam


def signal_of(fam: HypothesisFamily, record: Any, n_symbols: int, index: int) -> np.ndarray:
    """One record's values of a one-signal family, validated by the engine's rules."""
    return evaluate_family(fam, record, n_symbols, index)[:, 0]


def symbols_of(record: Any) -> list[Any]:
    """A record's symbols as a list: characters of a string, items of a sequence."""
    return list(record)


def replace_symbol(record: Any, k: int, symbol: Any) -> Any:
    """``record`` with symbol ``k`` replaced; strings stay strings, sequences lists."""
    if isinstance(record, str):
        return record[:k] + str(symbol) + record[k + 1 :]
    out = list(record)
    out[k] = symbol
    return type(record)(out) if isinstance(record, tuple) else out


def empirical_p(value: float, null: np.ndarray, greater: bool = True) -> float:
    """``(1 + #null at least as extreme) / (n + 1)``: never 0, valid for any n."""
    null = np.asarray(null, dtype=float)
    null = null[np.isfinite(null)]
    if not np.isfinite(value) or null.size == 0:
        return float("nan")
    hits = (null >= value) if greater else (null <= value)
    return float((1 + hits.sum()) / (null.size + 1))


def compare_sets(
    k: int,
    top: float,
    random: Sequence[float],
    greater: bool,
    possible: int | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """One ``per_k`` summary row: the top set's score against its random sets' scores.

    ``greater`` says which direction counts as extreme for the empirical p-value
    (a higher firing rate; a lower accuracy after ablation). ``possible`` is how many
    distinct random sets the draw could give; ``reason`` says why the p-value is void
    (:func:`~.vacuous.one_set_reason`), and nulls it.
    """
    rand = np.asarray(random, dtype=float)
    rand = rand[np.isfinite(rand)]
    return {
        "k": k,
        "top": top,
        "random_mean": float(rand.mean()) if rand.size else None,
        "random_std": float(rand.std()) if rand.size else None,
        "p_value": None if reason else empirical_p(top, rand, greater),
        "possible_sets": possible,
        "reason": reason,
    }
