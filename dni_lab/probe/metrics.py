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

# the ROC statistics and the record bootstrap are the measures' (``roc_auc``,
# ``recall_at_fpr``): one piece of code, re-exported here for the probe's reports
from ..backend.measures._roc import FPRS, auroc, bootstrap, check_fpr, recall_at_fpr

__all__ = [
    "BINS",
    "FPRS",
    "auroc",
    "bin_index",
    "bootstrap",
    "check_fpr",
    "expected_calibration_error",
    "f1_at_threshold",
    "recall_at_fpr",
    "reliability_table",
    "summary",
]

BINS = ("equal_mass", "equal_width")


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
