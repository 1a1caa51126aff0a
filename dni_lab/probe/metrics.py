"""The statistics probe users report, as small pure functions of scores, labels and records.

Every statistic takes optional ``weights`` (one non-negative number per symbol, as
scikit-learn's ``sample_weight``): a bootstrap replicate is the same rows weighted by how
often their record was drawn, so a replicate copies no rows. Bins depend on the
probabilities only, never on the weights, so equal-mass edges stay those of the sample.

* :func:`auroc`: the area under the ROC curve (not ``2·AUROC − 1``); ties count half.
* :func:`recall_at_fpr`: the highest true-positive rate among the ROC curve's points
  whose false-positive rate is at most ``fpr`` (with fewer than ``1 / fpr`` negatives
  that is the recall at no false positive at all).
* :func:`expected_calibration_error` and :func:`reliability_table`: per bin of predicted
  probability, the gap between the mean prediction and the observed rate, weighted by
  the bin's share of the symbols. ``bins="equal_mass"`` cuts the sorted probabilities
  into ``n_bins`` runs of (nearly) equal count; ``"equal_width"`` cuts ``[0, 1]`` into
  ``n_bins`` intervals of equal width (the last one closed).
* :func:`f1_at_threshold`: the F1 of predicting the concept where ``prob >= threshold``.
* :func:`bootstrap`: percentile intervals from resampling *records* (``groups``), not
  symbols: a record's symbols are correlated, and resampling them one by one would
  pretend there are more independent observations than there are.
* :func:`summary`: all of them with intervals, one row per statistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
from scipy.special import expit

from ..backend.errors import DNIError

BINS = ("equal_mass", "equal_width")
FPRS = (0.01, 0.001)


def _arrays(
    scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    w = np.ones_like(s) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    if not (len(s) == len(y) == len(w)):
        raise DNIError(
            f"scores ({len(s)}), labels ({len(y)}) and weights ({len(w)}) differ in length; "
            "pass one value per symbol in each."
        )
    return s, y, w


def roc_points(
    scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The ROC curve's (false-positive rate, true-positive rate) at every distinct score.

    Starts at ``(0, 0)``; tied scores are one point. NaN arrays where a class is absent.
    """
    s, y, w = _arrays(scores, labels, weights)
    order = np.argsort(-s, kind="stable")
    s, y, w = s[order], y[order], w[order]
    last = np.r_[s[1:] != s[:-1], True]  # the end of each run of tied scores
    tp = np.r_[0.0, np.cumsum(w * y)[last]]
    fp = np.r_[0.0, np.cumsum(w * (1 - y))[last]]
    if tp[-1] <= 0 or fp[-1] <= 0:
        return np.full(len(tp), np.nan), np.full(len(tp), np.nan)
    return fp / fp[-1], tp / tp[-1]


def auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The area under the ROC curve (trapezoids, so ties count half); NaN for one class."""
    fpr, tpr = roc_points(scores, labels, weights)
    return float(np.trapezoid(tpr, fpr))


def recall_at_fpr(
    scores: np.ndarray, labels: np.ndarray, fpr: float, weights: np.ndarray | None = None
) -> float:
    """The highest recall of a threshold whose false-positive rate is at most ``fpr``."""
    check_fpr(fpr)
    x, tpr = roc_points(scores, labels, weights)
    if np.isnan(tpr).all():
        return float("nan")
    # a float64 rate such as 3/300 can exceed 0.01 by an ulp: compare with a margin
    return float(tpr[x <= fpr * (1 + 1e-12)].max())


def check_fpr(fpr: float) -> None:
    """An FPR outside (0, 1) is refused, naming the argument."""
    if not (isinstance(fpr, (int, float)) and 0 < fpr < 1):
        raise DNIError(f"fpr={fpr!r}: pass a false-positive rate strictly between 0 and 1.")


def bin_index(prob: np.ndarray, n_bins: int, bins: str) -> np.ndarray:
    """Each probability's bin, ``0..n_bins-1`` (see the module's note on the two kinds)."""
    if bins not in BINS:
        raise DNIError(f"bins={bins!r}: use one of {BINS}.")
    if not (isinstance(n_bins, int) and n_bins >= 1):
        raise DNIError(f"n_bins={n_bins!r}: pass a positive number of bins.")
    p = np.asarray(prob, dtype=np.float64).ravel()
    if bins == "equal_width":
        return np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    out = np.empty(len(p), dtype=np.int64)
    # rank k of n falls in bin floor(k · n_bins / n): runs whose sizes differ by at most one
    out[np.argsort(p, kind="stable")] = np.arange(len(p)) * n_bins // max(len(p), 1)
    return out


def reliability_table(
    prob: np.ndarray,
    labels: np.ndarray,
    n_bins: int = 10,
    bins: str = "equal_mass",
    weights: np.ndarray | None = None,
) -> pl.DataFrame:
    """The reliability plot's table: ``bin, mean_predicted, observed_rate, count``.

    One row per bin that holds symbols (``count`` is their weight: their number when
    unweighted); the diagonal ``observed_rate == mean_predicted`` is perfect calibration.
    """
    p, y, w = _arrays(prob, labels, weights)
    k = bin_index(p, n_bins, bins)
    count = np.bincount(k, w, n_bins)
    held = count > 0
    safe = np.where(held, count, 1.0)
    return pl.DataFrame(
        {
            "bin": np.flatnonzero(held).astype(np.int64),
            "mean_predicted": (np.bincount(k, w * p, n_bins) / safe)[held],
            "observed_rate": (np.bincount(k, w * y, n_bins) / safe)[held],
            "count": count[held],
        }
    )


def expected_calibration_error(
    prob: np.ndarray,
    labels: np.ndarray,
    n_bins: int = 10,
    bins: str = "equal_mass",
    weights: np.ndarray | None = None,
) -> float:
    """``Σ_bins share · |observed rate − mean predicted|`` over :func:`reliability_table`."""
    t = reliability_table(prob, labels, n_bins, bins, weights)
    share = t["count"] / t["count"].sum()
    return float((share * (t["observed_rate"] - t["mean_predicted"]).abs()).sum())


def f1_at_threshold(
    prob: np.ndarray, labels: np.ndarray, threshold: float, weights: np.ndarray | None = None
) -> float:
    """The F1 of predicting 1 where ``prob >= threshold`` (0 when nothing is positive)."""
    p, y, w = _arrays(prob, labels, weights)
    hit = p >= threshold
    tp = float((w * y)[hit].sum())
    denom = float(w[hit].sum() + (w * y).sum())
    return 2 * tp / denom if denom > 0 else 0.0


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
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise DNIError(f"n_boot={n_boot!r}: pass a positive number of bootstrap replicates.")
    if not 0 < level < 1:
        raise DNIError(f"level={level!r}: pass an interval coverage strictly between 0 and 1.")
    _, row_group = np.unique(np.asarray(groups), return_inverse=True)
    n = int(row_group.max()) + 1 if len(row_group) else 0
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(np.float64)
    reps = np.array([statistic(c[row_group]) for c in counts])
    alpha = (1 - level) / 2
    ok = reps[~np.isnan(reps)]
    lo, hi = np.quantile(ok, [alpha, 1 - alpha]) if ok.size else (np.nan, np.nan)
    return float(statistic(None)), float(lo), float(hi), reps


def summary(
    scores: np.ndarray,
    labels: np.ndarray,
    groups: np.ndarray,
    threshold: float,
    *,
    fprs: Sequence[float] = FPRS,
    n_bins: int = 10,
    bins: str = "equal_mass",
    n_boot: int = 1000,
    seed: int | None = 0,
    level: float = 0.95,
) -> pl.DataFrame:
    """AUROC, recall at each FPR, ECE and F1 at ``threshold``, with record-bootstrap intervals.

    ``scores`` are logits (their sigmoid is the probability calibration and F1 read),
    ``labels`` 0/1 and ``groups`` each symbol's record. Returns ``name, value, lo, hi,
    se`` (``se``: the replicates' standard deviation), one row per statistic.
    """
    for f in fprs:
        check_fpr(f)
    z, y, _ = _arrays(scores, labels, None)
    # rows in descending score order: each replicate's stable sort then meets sorted input
    order = np.argsort(-z, kind="stable")
    z, y, groups = z[order], y[order], np.asarray(groups)[order]
    prob = expit(z)
    bin_index(prob, n_bins, bins)  # bad bins refused before any replicate
    stats: list[tuple[str, Callable[[np.ndarray | None], float]]] = [
        ("auroc", lambda w: auroc(z, y, w)),
        *((f"recall_at_fpr_{f:g}", lambda w, f=f: recall_at_fpr(z, y, f, w)) for f in fprs),
        (f"ece_{bins}_{n_bins}", lambda w: expected_calibration_error(prob, y, n_bins, bins, w)),
        ("f1_at_threshold", lambda w: f1_at_threshold(prob, y, threshold, w)),
    ]
    rows = []
    for name, fn in stats:
        value, lo, hi, reps = bootstrap(fn, groups, n_boot, seed, level)
        rows.append((name, value, lo, hi, float(np.nanstd(reps))))
    return pl.DataFrame(rows, schema=["name", "value", "lo", "hi", "se"], orient="row")
