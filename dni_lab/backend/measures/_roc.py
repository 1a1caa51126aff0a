"""The ROC statistics, one piece of code for the ``roc_auc`` and ``recall_at_fpr`` measures,
the ``auroc`` measure's binned counts and ``dl.Probe``'s reports (``dni_lab.probe.metrics``).

Everything is read from *class counts per distinct value*: for each distinct score, in
ascending order, the (weighted) number of positives and of negatives holding it.

* :func:`auc_of_counts`: the area under the ROC curve, ties counting half (the
  Mann-Whitney statistic, which is ``sklearn.metrics.roc_auc_score``'s trapezoids).
* :func:`recall_of_counts`: the highest true-positive rate among the ROC curve's points
  whose false-positive rate is at most ``fpr``.
* :func:`record_draws`: the bootstrap's draws of *records* with replacement, as weights;
  :func:`bootstrap` a percentile interval of any statistic of row weights.

Counts carry leading batch axes (bootstrap replicates) and a trailing hypothesis axis, so
one sort of a unit's values serves every replicate and hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..errors import DNIError

FPRS = (0.01, 0.001)
# a float64 rate such as 3/300 can exceed 0.01 by an ulp: compare with a margin
_FPR_MARGIN = 1 + 1e-12


def check_fpr(fpr: float) -> None:
    """An FPR outside (0, 1) is refused, naming the argument."""
    if not (isinstance(fpr, (int, float)) and not isinstance(fpr, bool) and 0 < fpr < 1):
        raise DNIError(f"fpr={fpr!r}: pass a false-positive rate strictly between 0 and 1.")


def tie_groups(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(order, group, n_groups)``: the ascending order of ``values`` ``(N,)`` and, in that
    order, each value's index among the distinct values."""
    v, order = values.sort(stable=True)
    new = torch.ones_like(v, dtype=torch.bool)
    new[1:] = v[1:] != v[:-1]
    group = new.long().cumsum(0) - 1
    return order, group, int(group[-1]) + 1 if len(group) else 0


def group_sum(x: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Sum ``x`` ``(B, N, H)`` (rows in sorted order) over each tie group: ``(B, G, H)``."""
    out = x.new_zeros(x.shape[0], n_groups, x.shape[2])
    return out.index_add_(1, group, x)


def auc_of_counts(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """AUROC over the value axis (-2) of ``(..., G, H)`` ascending class counts; ties count
    half; NaN where a class is absent."""
    below = neg.cumsum(-2) - neg
    wins = (pos * (below + 0.5 * neg)).sum(-2)
    pairs = pos.sum(-2) * neg.sum(-2)
    return torch.where(pairs > 0, wins / torch.where(pairs > 0, pairs, 1.0), torch.nan)


def recall_of_counts(pos: torch.Tensor, neg: torch.Tensor, fpr: float) -> torch.Tensor:
    """The highest recall at a false-positive rate of at most ``fpr``, from ``(..., G, H)``
    ascending class counts (a threshold at each distinct value, predicting at or above it);
    NaN where a class is absent."""
    # predicting 1 at or above value g: its positives and negatives from g to the top
    tp = pos.flip(-2).cumsum(-2).flip(-2)
    fp = neg.flip(-2).cumsum(-2).flip(-2)
    n_pos, n_neg = pos.sum(-2, keepdim=True), neg.sum(-2, keepdim=True)
    ok = fp <= fpr * _FPR_MARGIN * n_neg
    # the curve's first point, (0, 0), is always allowed: a recall of at least 0
    best = torch.where(ok, tp, 0.0).amax(-2) if tp.shape[-2] else tp.sum(-2)
    defined = (n_pos[..., 0, :] > 0) & (n_neg[..., 0, :] > 0)
    return torch.where(defined, best / torch.where(defined, n_pos[..., 0, :], 1.0), torch.nan)


def row_counts(
    scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(1, G, 1)`` weighted positive and negative counts of 1-D scores and 0/1 labels."""
    s = torch.as_tensor(np.asarray(scores, dtype=np.float64).ravel())
    y = torch.as_tensor(np.asarray(labels, dtype=np.float64).ravel())
    w = torch.ones_like(s) if weights is None else torch.as_tensor(
        np.asarray(weights, dtype=np.float64).ravel()
    )
    if not (len(s) == len(y) == len(w)):
        raise DNIError(
            f"scores ({len(s)}), labels ({len(y)}) and weights ({len(w)}) differ in length; "
            "pass one value per symbol in each."
        )
    order, group, n = tie_groups(s)
    w, y = w[order], y[order]
    both = torch.stack([w * y, w * (1 - y)], -1)[None]  # (1, N, 2)
    sums = group_sum(both, group, n)
    return sums[..., :1], sums[..., 1:]


def auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The area under the ROC curve of 1-D ``scores`` (ties count half); NaN for one class."""
    return float(auc_of_counts(*row_counts(scores, labels, weights)))


def recall_at_fpr(
    scores: np.ndarray, labels: np.ndarray, fpr: float, weights: np.ndarray | None = None
) -> float:
    """The highest recall of a threshold whose false-positive rate is at most ``fpr``."""
    check_fpr(fpr)
    return float(recall_of_counts(*row_counts(scores, labels, weights), fpr))


def record_draws(
    groups: np.ndarray, n_boot: int, seed: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, row_group)``: ``n_boot`` draws of as many records as there are, with
    replacement (``counts`` ``(n_boot, n_records)``, how often each was drawn), and each
    row's record index; a row's bootstrap weight is ``counts[:, row_group]``."""
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise DNIError(f"n_boot={n_boot!r}: pass a positive number of bootstrap replicates.")
    _, row_group = np.unique(np.asarray(groups), return_inverse=True)
    n = int(row_group.max()) + 1 if len(row_group) else 0
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / max(n, 1)), size=n_boot).astype(np.float64)
    return counts, row_group.ravel()


def bootstrap(
    statistic: Callable[[np.ndarray | None], float],
    groups: np.ndarray,
    n_boot: int = 1000,
    seed: int | None = 0,
    level: float = 0.95,
) -> tuple[float, float, float, np.ndarray]:
    """A percentile interval for ``statistic`` from resampling ``groups`` with replacement.

    Parameters
    ----------
    statistic : callable
        ``statistic(weights)``: the statistic over the rows, each row weighted by
        ``weights`` (None: the sample itself).
    groups : np.ndarray
        ``(n_rows,)``: each row's record id. Records are drawn with replacement, as
        many as there are; a record drawn twice weighs its rows twice. Pass
        ``np.arange(n_rows)`` to resample rows (symbols) instead.
    n_boot, seed, level : int, int or None, float
        Replicates, the generator's seed, the interval's coverage.

    Returns
    -------
    tuple
        ``(value, lo, hi, replicates)``; replicates where the statistic is undefined
        (one class drawn) are NaN and left out of the interval.
    """
    if not 0 < level < 1:
        raise DNIError(f"level={level!r}: pass an interval coverage strictly between 0 and 1.")
    counts, row_group = record_draws(groups, n_boot, seed)
    reps = np.array([statistic(c[row_group]) for c in counts])
    alpha = (1 - level) / 2
    ok = reps[~np.isnan(reps)]
    lo, hi = np.quantile(ok, [alpha, 1 - alpha]) if ok.size else (np.nan, np.nan)
    return float(statistic(None)), float(lo), float(hi), reps
