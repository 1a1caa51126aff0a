"""The *NoMerge* baseline of DeepBase §6.3: one scikit-learn L1 probe per hypothesis.

The merged ``logreg`` measure trains every hypothesis and every fold as one
model. The baseline fits scikit-learn's ``LogisticRegression`` with an L1
penalty separately for each hypothesis and each fold, on exactly what the
merged measure trained on: the same rows (its bounded uniform sample), the
same standardisation, the same record-level folds and the same objective
(``||w||_1 + C * sum(logloss)``, intercept unpenalised with ``saga``), and
scores it the same way (pooled out-of-fold F1). Equal F1 is then a check
that both solved the same problem, and the time ratio is the price of not
merging.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np


def _l1_logreg(C: float, solver: str, max_iter: int, tol: float) -> Any:
    import sklearn
    from sklearn.linear_model import LogisticRegression

    major, minor = (int(x) for x in sklearn.__version__.split(".")[:2])
    # scikit-learn 1.8 deprecated ``penalty`` in favour of ``l1_ratio``; older
    # versions ignore ``l1_ratio`` unless penalty="elasticnet".
    if (major, minor) >= (1, 8):
        kw: dict[str, Any] = {"l1_ratio": 1.0}
    else:
        kw = {"penalty": "l1"}
    if solver == "liblinear":
        # liblinear penalises the intercept like a weight; a large scaling makes
        # that penalty negligible, as in the merged probe.
        kw["intercept_scaling"] = 100.0
    return LogisticRegression(C=C, solver=solver, max_iter=max_iter, tol=tol, **kw)


def standardize(X: np.ndarray) -> np.ndarray:
    """Columns to zero mean and unit variance over all rows, as the merged probe does."""
    mu = X.mean(0)
    sd = X.std(0)
    return (X - mu) / np.where(sd > 1e-8, sd, 1.0)


def pooled_f1(pred: np.ndarray, y: np.ndarray) -> float:
    """F1 of out-of-fold predictions pooled over the folds (NaN if undefined)."""
    tp = float(np.sum(pred & y))
    den = 2 * tp + float(np.sum(pred & ~y)) + float(np.sum(~pred & y))
    return 2 * tp / den if den > 0 else float("nan")


def sklearn_probe_f1(
    X: np.ndarray,
    Y: np.ndarray,
    fold: np.ndarray,
    C: float = 1.0,
    solver: str = "saga",
    max_iter: int = 1000,
    tol: float = 1e-4,
) -> dict[str, Any]:
    """Fit one L1 logistic regression per hypothesis column of ``Y`` and per fold.

    Parameters
    ----------
    X : ndarray (n, units)
        Raw unit behaviors of the training rows (standardised here).
    Y : ndarray (n, hyps)
        Binary targets, one column per hypothesis.
    fold : ndarray (n,)
        Fold of each row (records are never split across folds).
    C, solver, max_iter, tol
        scikit-learn's parameters; ``saga`` minimises the same objective as the
        merged probe (unpenalised intercept).

    Returns
    -------
    dict
        ``f1`` (per hypothesis), ``seconds`` (all fits and predictions, not the
        standardisation, which the merged probe also pays once) and ``params``.
    """
    from sklearn.exceptions import ConvergenceWarning

    Xs = standardize(np.asarray(X, dtype=np.float64))
    Y = np.asarray(Y) > 0.5
    fold = np.asarray(fold)
    folds = np.unique(fold)
    f1 = []
    t0 = time.perf_counter()
    n_not_converged = 0
    for j in range(Y.shape[1]):
        y = Y[:, j]
        pred = np.zeros(len(y), dtype=bool)
        for f in folds:
            train, test = fold != f, fold == f
            yt = y[train]
            if yt.all() or not yt.any():  # one class: predict it
                pred[test] = bool(yt.all())
                continue
            clf = _l1_logreg(C, solver, max_iter, tol)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                clf.fit(Xs[train], yt)
            n_not_converged += any(issubclass(w.category, ConvergenceWarning) for w in caught)
            pred[test] = clf.decision_function(Xs[test]) > 0
        f1.append(pooled_f1(pred, y))
    seconds = time.perf_counter() - t0
    return {
        "f1": f1,
        "seconds": seconds,
        "params": {
            "C": C,
            "solver": solver,
            "max_iter": max_iter,
            "tol": tol,
            "fits": int(Y.shape[1] * len(folds)),
            "fits_not_converged": int(n_not_converged),
            "rows": len(y) if Y.shape[1] else 0,
        },
    }
