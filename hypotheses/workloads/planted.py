"""DeepBase §6.1 at the paper's grid: are planted units found, and by which selection rule?

A specialized parentheses LSTM (:func:`parens.load_specialized`) plants a known
set S of units that are trained to output "is a parenthesis". A measure finds
units through its own *selection rule*; comparing the selection with S gives a
precision and a recall that can differ (unlike top-|S| ranking, where both are
the same number):

* ``logreg`` — the support of an L1 probe (DeepBase returns units whose
  coefficient passes a threshold). Our probe standardizes units, so a fixed
  coefficient threshold has no meaning across models; instead the rule walks a
  regularization path and keeps the non-zero units of the *sparsest* probe whose
  cross-validated F1 is within ``f1_tol`` of the path's best (the "one standard
  error" idea of choosing the strongest penalty that costs no accuracy).
* ``corr`` — units whose Pearson r is significant: permutation q ≤ 0.05
  (:func:`dl.verify.permutation_test`, records shuffled, Benjamini–Hochberg).
* ``corr |r|>=0.9`` — an effect-size rule instead, as a sensitivity check.
* ``logreg top-|S|`` / ``corr top-|S|`` — the |S| units of largest |score|,
  which needs the answer's size and so is only a comparison.

Power of the perturbation check lives in :mod:`.planted_power`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

import dni_lab as dl
from dni_lab.backend.measures.logreg import LogReg
from hypotheses.workloads import parens

#: The L1 probe's inverse penalties, strongest last (scikit-learn's C).
C_PATH = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
#: Selection rules, in the order the study reports them.
RULES = ("logreg", "corr", "corr |r|>=0.9", "logreg top-|S|", "corr top-|S|")


@dl.hypothesis(kind="binary", name="paren")
def paren(record: str) -> list[bool]:
    """The symbol is a parenthesis: the signal S was trained on (there as ±1)."""
    return [c in "()" for c in record]


@dataclass(frozen=True)
class Planted:
    """A specialized model and its ground truth.

    Attributes
    ----------
    model : dl.Model
        The LSTM (layer ``"lstm"``, ``width`` units).
    units : list of int
        The planted set S.
    n_s, weight, seed : int, float, int
        |S|, the auxiliary-loss weight w and the training seed (which also draws S).
    accuracy : float
        Held-out next-character accuracy.
    width : int
        Units of layer ``"lstm"``.
    """

    model: dl.Model
    units: list[int]
    n_s: int
    weight: float
    seed: int
    accuracy: float
    width: int


def grid(
    sizes: Iterable[int], weights: Iterable[float], seeds: Iterable[int],
    size: int = 4, weight: float = 0.5,
) -> list[tuple[int, float, int]]:  # fmt: skip
    """``(|S|, w, seed)`` cells: every |S| at ``weight`` and every w at ``size``."""
    cells = {(n, weight) for n in sizes} | {(size, w) for w in weights}
    return [(n, w, s) for (n, w), s in itertools.product(sorted(cells), seeds)]


def load(n_s: int, weight: float, seed: int, epochs: int, hidden: int = 16) -> Planted:
    """The specialized model of one cell, trained on first use (quick data, ``epochs`` epochs)."""
    module, encode, meta = parens.load_specialized(
        n_s, weight, "paren", quick=True, seed=seed, hidden=hidden, epochs=epochs
    )
    model = dl.Model(module, encode=encode, name=f"S{n_s}-w{weight}-seed{seed}")
    return Planted(
        model, list(meta["specialized_units"]), n_s, weight, seed, meta["accuracy"], hidden
    )


def precision_recall(selected: Iterable[int], planted: Iterable[int]) -> tuple[float, float]:
    """``(|sel ∩ S| / |sel|, |sel ∩ S| / |S|)``; precision is NaN when nothing is selected."""
    sel, S = set(selected), set(planted)
    if not S:
        raise ValueError("the planted set is empty; precision and recall need at least one unit")
    hit = len(sel & S)
    return (hit / len(sel) if sel else float("nan"), hit / len(S))


def top_units(scores: Sequence[float], k: int) -> list[int]:
    """The ``k`` units of largest ``|score|`` (NaN scores last)."""
    mag = np.nan_to_num(np.abs(np.asarray(scores, dtype=float)), nan=-1.0)
    return sorted(int(u) for u in np.argsort(-mag, kind="stable")[:k])


def logreg_selection(
    p: Planted, records: Sequence[str], c_path: Sequence[float] = C_PATH, f1_tol: float = 0.01
) -> dict:
    """Non-zero units of the sparsest L1 probe within ``f1_tol`` of the path's best F1.

    Returns
    -------
    dict
        ``selected`` (units), ``C`` and ``f1`` of the chosen probe, and ``coef``: the
        coefficients at the weakest penalty (C = ``c_path[0]``), for top-|S| ranking.
    """
    path = []
    for C in c_path:
        frame = dl.inspect(
            [p.model], [paren], [LogReg(C=C, unit_score="coef")], records,
            units=[("lstm", "*")], eps=None,
        ).sort("unit")
        f1 = frame["group_score"][0]
        # a probe with no F1 (nothing scored) never counts as good enough
        path.append(
            (C, -1.0 if f1 is None or np.isnan(f1) else float(f1), frame["unit_score"].to_numpy())
        )
    best = max(f1 for _, f1, _ in path)
    C, f1, coef = [step for step in path if step[1] >= best - f1_tol][-1]
    return {
        "selected": [int(u) for u in np.flatnonzero(np.nan_to_num(coef) != 0)],
        "C": C,
        "f1": f1,
        "coef": path[0][2],
    }


def corr_selection(
    p: Planted, records: Sequence[str], q: float = 0.05, n_permutations: int = 999, seed: int = 0
) -> pl.DataFrame:
    """One row per unit: ``r``, permutation ``p_value`` and BH ``q_value``, and ``significant``."""
    frame = dl.verify.permutation_test(
        p.model, paren, records, units=[("lstm", "*")], n_permutations=n_permutations,
        seed=seed, device="cpu",
    )  # fmt: skip
    return frame.sort("unit").select(
        "unit", r="unit_score", p_value="p_value", q_value="q_value",
        significant=pl.col("q_value").fill_null(1.0) <= q,
    )  # fmt: skip


def selections(p: Planted, records: Sequence[str], r_min: float = 0.9) -> dict[str, list[int]]:
    """Units each rule of :data:`RULES` selects in one model (``r_min``: the |r| rule's bar)."""
    lr = logreg_selection(p, records)
    corr = corr_selection(p, records)
    r = corr["r"].to_numpy()
    return {
        "logreg": lr["selected"],
        "corr": corr.filter("significant")["unit"].to_list(),
        "corr |r|>=0.9": [int(u) for u in np.flatnonzero(np.abs(np.nan_to_num(r)) >= r_min)],
        "logreg top-|S|": top_units(lr["coef"], p.n_s),
        "corr top-|S|": top_units(r, p.n_s),
    }


def selection_study(
    cells: Iterable[tuple[int, float, int]], records: Sequence[str], epochs: int
) -> pl.DataFrame:
    """Precision and recall of every rule on every cell's model.

    Returns
    -------
    polars.DataFrame
        One row per (|S|, w, seed, rule): ``accuracy`` of the model, ``n_selected``,
        ``precision`` (null when nothing is selected), ``recall``, ``selected`` and ``S``.
    """
    rows = []
    for n_s, weight, seed in cells:
        p = load(n_s, weight, seed, epochs)
        for rule, sel in selections(p, records).items():
            prec, rec = precision_recall(sel, p.units)
            rows.append(
                {"|S|": n_s, "w": weight, "seed": seed, "accuracy": p.accuracy, "rule": rule,
                 "n_selected": len(sel), "precision": prec, "recall": rec,
                 "selected": sel, "S": p.units}
            )  # fmt: skip
    return pl.DataFrame(rows).with_columns(pl.col("precision").fill_nan(None))


def summarize(study: pl.DataFrame) -> pl.DataFrame:
    """Mean, min and max of precision and recall over seeds, per (|S|, w, rule)."""
    stats = [
        agg(pl.col(c)).alias(f"{c}_{name}")
        for c in ("precision", "recall")
        for name, agg in (("mean", pl.Expr.mean), ("min", pl.Expr.min), ("max", pl.Expr.max))
    ]
    order = pl.col("rule").replace_strict(RULES, list(range(len(RULES))))
    return (
        study.group_by("|S|", "w", "rule")
        .agg(pl.len().alias("seeds"), pl.col("n_selected").mean(), *stats)
        .sort("|S|", "w", order)
    )
