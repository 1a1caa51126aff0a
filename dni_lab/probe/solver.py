"""The numbers behind :class:`~dni_lab.probe.Probe`: a logistic fit, its threshold, AUROC.

The objective is scikit-learn's, divided by ``C · n`` so that its scale does not grow
with the symbols read::

    L2:  mean log-loss + ||w||² / (2 C n)        L1:  mean log-loss + ||w||₁ / (C n)

(intercept unpenalised), so a fit here and ``LogisticRegression(C=C, penalty=...)`` on the
same standardised rows have one optimum. L2 is smooth: Newton's method in float64
(:mod:`.newton`; the Hessian is units × units) solves it in a few passes over the rows,
and stops on the gradient as scikit-learn's ``lbfgs`` does. L1 is not smooth: it
goes to the projected Newton solver of the ``logreg`` measure
(:func:`dni_lab.backend.measures._newton.newton`), as one column trained on every row,
so a probe and the measure's probe zero the same coefficients.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import torch

from ..backend.measures._newton import Problem, initial_weights, newton
from ..backend.measures._roc import auroc as roc_auroc
from .newton import Rows, newton_l2

_F64 = torch.float64


class LogisticFit(NamedTuple):
    """Slopes (on the standardised units), intercept, steps taken and whether it converged."""

    coef: np.ndarray  # (d,) float64
    intercept: float
    n_iter: int
    converged: bool


def fit_logistic(
    rows: Rows,
    y: torch.Tensor,
    C: float,
    penalty: str,
    tol: float,
    max_iter: int,
    start: tuple[np.ndarray, float] | None = None,
) -> LogisticFit:
    """A penalised logistic regression of ``y`` (0/1) on the standardised rows.

    Parameters
    ----------
    rows : Rows
        The training rows and their standardisation (:func:`.newton.standardise`).
    y : torch.Tensor
        ``(n,)`` 0/1 targets, both present.
    C : float
        Inverse regularisation strength, scikit-learn's.
    penalty : {"l2", "l1"}
        The penalty on the slopes.
    tol : float
        L2: the largest gradient entry at which Newton's method stops (what
        scikit-learn's ``lbfgs`` stops on, for the same objective); L1: the largest
        Newton step (on standardised units) at which the ``logreg`` solver stops.
    max_iter : int
        The most solver steps.
    start : (coef, intercept), optional
        L2 only: a warm start on the standardised units.

    Returns
    -------
    LogisticFit
        A fit that did not reach ``tol`` within ``max_iter`` has ``converged=False`` (and
        the caller warns).
    """
    if penalty == "l1":
        return _fit_l1(rows.Z, y, C, tol, max_iter)
    coef, intercept, steps, converged = newton_l2(rows, y, C, tol, max_iter, start)
    return LogisticFit(coef.copy(), intercept, steps, converged)


def _fit_l1(X: torch.Tensor, y: torch.Tensor, C: float, tol: float, max_iter: int) -> LogisticFit:
    # the logreg measure's solver, float32 as it runs there: one column, one output,
    # every row in fold 1 and the column leaving out fold 0, which is empty (the
    # solver's Hessians subtract the left-out fold's part, so all rows train it)
    n = X.shape[0]
    X1 = torch.cat([torch.ones(n, 1), X.float()], dim=1)
    p = Problem(
        X=X1,
        Y=y.float()[None],
        w_row=torch.full((1, n), 1.0 / n),
        lam=torch.tensor([1 / (C * n)]),
        col_out=torch.zeros(1, dtype=torch.long),
        col_fold=torch.zeros(1, dtype=torch.long),
        row_fold=torch.ones(n, dtype=torch.long),
        outputs=1,
    )
    # float32 Newton steps bottom out near 1e-6 on O(1) coefficients
    fit = newton(p, initial_weights(p), iters=max_iter, tol=max(tol, 1e-5))
    W = fit.W[:, 0].double()
    return LogisticFit(W[1:].numpy().copy(), float(W[0]), max_iter, not bool(fit.open[0]))


def fit_intercept(z: torch.Tensor, y: torch.Tensor, iters: int = 50) -> float:
    """The intercept ``b`` minimising the mean log-loss of ``z + b`` (slopes held fixed).

    Newton's method on one convex variable, from the base rate's log-odds less the mean
    score: the intercept a probe fitted on these rows has, since it is unpenalised.
    """
    z, y = z.to(_F64), y.to(_F64)
    rate = float(y.mean())
    b = float(np.log(rate / (1 - rate))) - float(z.mean())
    for _ in range(iters):
        p = torch.sigmoid(z + b)
        g, h = float((p - y).mean()), float((p * (1 - p)).mean())
        step = g / max(h, 1e-12)
        b -= float(np.clip(step, -5.0, 5.0))  # bounded: a flat curvature far from 0
        if abs(step) < 1e-12:
            break
    return b


def f1_threshold(prob: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The probability threshold (predict 1 where ``prob >= t``) of the highest F1 on ``y``.

    Every distinct probability is a candidate (ties fall on one side together); the
    threshold is that probability itself, so these rows' predictions at it give the F1
    returned exactly. Among equal F1s the highest threshold wins (fewer positives).
    """
    order = np.argsort(-prob, kind="stable")
    p, t = prob[order], y[order].astype(np.float64)
    tp = np.cumsum(t)
    k = np.arange(1, len(p) + 1)
    last = np.r_[p[1:] != p[:-1], True]  # the end of each run of tied probabilities
    f1 = np.where(last, 2 * tp / (k + t.sum()), -1.0)
    best = int(np.argmax(f1))  # the first maximum: the highest threshold
    return float(p[best]), float(f1[best])


def auroc(scores: np.ndarray, y: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for 0/1 ``y``; ties count half.

    The measures' code (:func:`dni_lab.backend.measures._roc.auroc`): what
    ``sklearn.metrics.roc_auc_score`` computes, to rounding.
    """
    return roc_auroc(scores, np.asarray(y, dtype=np.float64))


def warn_unconverged(fit: LogisticFit, penalty: str, tol: float, max_iter: int) -> None:
    """Say that a fit stopped on its step budget, and how to let it go on."""
    if not fit.converged:
        warnings.warn(
            f"the {penalty} logistic fit did not reach tol={tol:g} within max_iter={max_iter}; "
            "its coefficients are approximate. Pass a larger max_iter (or a smaller C).",
            RuntimeWarning,
            stacklevel=3,
        )
