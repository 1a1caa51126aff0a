"""How far a merged probe's scores may still move: the error ``logreg`` stops on.

A probe's scores at ``n`` records differ from their full-data values for two
reasons, and the error bounds both:

* **sampling**: the records read are one draw. For the cross-validated F1 a grouped
  jackknife over record groups (symbols of one record are not independent; copies of a
  record are separate draws, ``logreg.record_groups``) of the out-of-fold confusion
  counts, each fold model refitted without the group (``f1_refit_se``: the F1
  thresholds the logits, and rows near the threshold flip as the fit moves), gives its
  standard error; for a coefficient the fold models *are* a delete-a-group jackknife
  (fold ``f``'s model is the fit without fold ``f``'s records), so their spread gives
  its standard error at no extra fit. Five folds make that error itself noisy, and a
  pair marked converged is one whose error came out small, so the coefficient's error
  is also the record-group infinitesimal jackknife's (``influence``: 20 groups, no
  refit). Each becomes a half-width with Student's t at the confidence asked for.
* **learning**: with more records the fit itself changes (the L1 penalty weakens as
  ``1/n`` and the probe learns more), which no sampling interval sees. The change
  since the checkpoint at half the records read bounds what is left of a drift that
  shrinks like ``1/n``: ``|s(n) - s(n/2)|`` is at least ``|s(n) - s(N)|``.

The error is the larger of the two, and it is NaN (not yet known) until a fit has
reached its tolerance, a checkpoint at half the records exists and each class of the
hypothesis occurred in ``min_class_records`` records; the error reported is the larger
of the last two checkpoints' (one small error is chance).

With ``LogReg(unit_score="loading")`` a unit's score is its correlation with the probe's
predicted probability (``refit_loadings``) and its error that correlation's record-group
jackknife with the fit refitted without each group: the coefficients of correlated units
are not identifiable (two record orders can swap weight between near-copies), the
predictions are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import stdtrit

from ._newton import Stopped
from .base import stop_requested


@dataclass
class Checkpoint:
    """A probe's scores after one block, with their sampling errors (standard errors)."""

    n_records: int
    f1: np.ndarray  # (n_hyps,) pooled out-of-fold F1
    f1_se: np.ndarray  # (n_hyps,) grouped-jackknife standard error
    coef: np.ndarray  # (n_units, n_hyps) mean coefficient over folds (the unit score)
    coef_se: np.ndarray  # (n_units, n_hyps) fold-jackknife standard error
    done: np.ndarray  # (n_hyps,) every column of the hypothesis reached its tolerance
    folds: int
    groups: int
    coef_ij: np.ndarray | None = None  # (n_units, n_hyps) record-group jackknife error
    enough: np.ndarray | None = None  # (n_hyps,) each class in enough records for an error


def confusion_by_group(
    pred: torch.Tensor, y: torch.Tensor, group: torch.Tensor, n_groups: int
) -> np.ndarray:
    """``(3, n_groups, outputs)`` true positive, false positive and false negative counts."""
    out = torch.zeros(3, n_groups, pred.shape[1], dtype=torch.float64, device=pred.device)
    for i, hit in enumerate((pred & y, pred & ~y, ~pred & y)):
        out[i].index_add_(0, group, hit.double())
    return out.cpu().numpy()


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    den = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 2 * tp / np.where(den > 0, den, 1), np.nan)


def _per_hyp(vals: np.ndarray, out_hyp: np.ndarray, n_hyps: int) -> np.ndarray:
    """Macro mean over each hypothesis's outputs along the last axis (NaN-aware)."""
    res = np.full((*vals.shape[:-1], n_hyps), np.nan)
    for j in np.unique(out_hyp):
        v = vals[..., out_hyp == j]
        ok = np.isfinite(v)
        with np.errstate(invalid="ignore"):
            res[..., j] = np.where(ok.any(-1), np.where(ok, v, 0).sum(-1) / ok.sum(-1), np.nan)
    return res


def f1_and_se(counts: np.ndarray, out_hyp: np.ndarray, n_hyps: int) -> tuple[np.ndarray, ...]:
    """Pooled F1 per hypothesis and its grouped-jackknife standard error."""
    tp, fp, fn = counts
    f1 = _per_hyp(_f1(tp.sum(0), fp.sum(0), fn.sum(0)), out_hyp, n_hyps)
    g = tp.shape[0]
    loo = _per_hyp(_f1(tp.sum(0) - tp, fp.sum(0) - fp, fn.sum(0) - fn), out_hyp, n_hyps)
    with np.errstate(invalid="ignore"):  # a hypothesis without an F1 stays NaN
        var = (g - 1) / g * ((loo - loo.mean(0)) ** 2).sum(0)
    return f1, np.sqrt(var)


def f1_refit_se(
    X: torch.Tensor,
    own: torch.Tensor,
    delta: torch.Tensor,
    fold: torch.Tensor,
    Y: torch.Tensor,
    defined: torch.Tensor | None,
    group: torch.Tensor,
    n_groups: int,
    out_hyp: np.ndarray,
    n_hyps: int,
) -> np.ndarray:
    """``(n_hyps,)`` grouped-jackknife standard error of the pooled out-of-fold F1, each
    fold model refitted without the group.

    The counts' jackknife (:func:`f1_and_se`) holds the predictions fixed; but a probe's
    F1 thresholds its logits, and the fit moves with the records: rows near the threshold
    flip, and a rare hypothesis's F1 jumps by more than eps between checkpoints whose
    counts' errors were small. Leaving group ``g`` out here also moves every fold model by
    its infinitesimal-jackknife change (``delta[..., g]``, :func:`influence`) before its
    held-out rows are scored. ``X`` ``(n, d)`` with the intercept, ``own`` ``(n, outputs)``
    each row's logit under the model of its held-out fold, ``delta`` ``(d, folds · outputs,
    groups)``, ``Y``/``defined`` ``(n, outputs)``.
    """
    d = X.shape[1]
    n_out = len(out_hyp)
    folds = delta.shape[1] // max(n_out, 1)
    y = Y > 0.5
    by_fold = [(fold == f).nonzero().squeeze(1) for f in range(folds)]
    loo = np.full((n_groups, n_hyps), np.nan)
    for g in range(n_groups):
        if stop_requested():  # a pass over every row read per group
            raise Stopped
        D = delta[:, :, g].view(d, folds, n_out).to(X.dtype)
        shift = torch.empty_like(own)
        for f, idx in enumerate(by_fold):
            shift[idx] = X[idx] @ D[:, f, :]
        pred = own + shift > 0
        if defined is not None:
            pred = pred & defined
        keep = (group != g)[:, None]
        tp = (pred & y & keep).sum(0).double().cpu().numpy()
        fp = (pred & ~y & keep).sum(0).double().cpu().numpy()
        fn = (~pred & y & keep).sum(0).double().cpu().numpy()
        loo[g] = _per_hyp(_f1(tp, fp, fn), out_hyp, n_hyps)
    with np.errstate(invalid="ignore"):  # a hypothesis without an F1 stays NaN
        var = (n_groups - 1) / n_groups * ((loo - loo.mean(0)) ** 2).sum(0)
    return np.sqrt(var)


def influence(
    X: torch.Tensor,
    W: torch.Tensor,
    Z: torch.Tensor,
    Y: torch.Tensor,
    w_row: torch.Tensor,
    H: torch.Tensor,
    group: torch.Tensor,
    n_groups: int,
    free: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(d, c, groups)`` change of each column's weights when a record group is left out.

    The infinitesimal jackknife: leaving group ``g`` out removes its rows' gradient
    ``s_g`` from the optimality condition, which moves the weights by ``H⁻¹ s_g``.
    Every coordinate counts as free, also the slopes L1 holds at zero: which of two
    near-copies of a unit L1 keeps can flip with more records, and a zero held by the
    penalty alone would otherwise claim no error at all (on planted near-copies, five
    of six such pairs marked converged were 0.1 off the full data).
    ``X`` ``(n, d)``, ``W`` ``(d, c)``, ``Z``/``Y``/``w_row`` ``(c, n)``, ``H`` ``(c, d, d)``.
    No refit: it costs one pass over the rows and a solve per column.

    ``free`` ``(d, c)`` bool instead moves only the coordinates it marks (the L1 fit's
    active set): what the fit's predictions do when a group is left out. With every
    coordinate free, a rare hypothesis's nearly flat directions move its logits far
    more than a refit does (the F1's error of :func:`f1_refit_se` came out near 0.35 at
    every size on the SQL workload, where the F1 moved by 0.04).
    """
    return solve_influence(H, group_gradients(X, Z, Y, w_row, group, n_groups), free)


def group_gradients(X: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor, w_row: torch.Tensor,
                    group: torch.Tensor, n_groups: int) -> torch.Tensor:  # fmt: skip
    """``(groups, c, d)`` each record group's share of each column's loss gradient."""
    r = (torch.sigmoid(Z) - Y) * w_row  # (c, n)
    S = torch.zeros(n_groups, Z.shape[0], X.shape[1], dtype=torch.float64, device=X.device)
    for g in range(n_groups):
        if stop_requested():  # a pass over every row read: after a Stop no error is kept
            raise Stopped
        rows = (group == g).nonzero().squeeze(1)
        if len(rows):
            S[g] = (r[:, rows] @ X[rows]).double()
    return S


def solve_influence(H: torch.Tensor, S: torch.Tensor,
                    free: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``(d, c, groups)``: :func:`influence` from the groups' gradients ``S``
    (:func:`group_gradients`), so two solves (every coordinate free, the active set) share
    one pass over the rows."""
    # a whisper of ridge: a constant (zero) unit column would make H singular
    eye = torch.eye(S.shape[2], dtype=torch.float64, device=S.device)
    H = H.double()
    rhs = S.permute(1, 2, 0)  # (c, d, groups)
    if free is not None:  # fixed coordinates: identity rows and columns, no gradient
        m = free.T.double()  # (c, d)
        H = H * m[:, :, None] * m[:, None, :] + torch.diag_embed(1 - m)
        rhs = rhs * m[:, :, None]
    L, _ = torch.linalg.cholesky_ex(H + 1e-9 * eye)
    return torch.cholesky_solve(rhs, L).permute(1, 0, 2)  # (d, c, groups)


def coef_and_se(
    W: torch.Tensor,
    n_units: int,
    folds: int,
    out_hyp: np.ndarray,
    n_hyps: int,
    delta: torch.Tensor | None = None,
) -> tuple[np.ndarray, ...]:
    """Mean coefficient over folds per (unit, hypothesis) and its jackknife errors.

    The first error is the fold jackknife's (the fold models are delete-a-fold fits);
    the second, when ``delta`` (:func:`influence`) is given, the record-group jackknife's
    of the same mean: with 20 groups it is itself far less noisy than the five folds',
    whose small values a pair marked converged was selected for. A categorical
    hypothesis shows, per unit, the class whose mean coefficient is largest in magnitude.
    """
    Wf = W[1:].view(n_units, folds, len(out_hyp)).double().cpu().numpy()
    mean = Wf.mean(1)
    se = np.sqrt((folds - 1) / folds * ((Wf - mean[:, None, :]) ** 2).sum(1))
    ij = np.full_like(se, np.nan)
    if delta is not None:
        g = delta.shape[2]
        D = delta[1:].view(n_units, folds, len(out_hyp), g).mean(1).cpu().numpy()
        ij = np.sqrt((g - 1) / g * ((D - D.mean(2, keepdims=True)) ** 2).sum(2))
    unit = np.full((n_units, n_hyps), np.nan)
    unit_se = np.full((n_units, n_hyps), np.nan)
    unit_ij = np.full((n_units, n_hyps), np.nan)
    rows = np.arange(n_units)
    for j in np.unique(out_hyp):
        sel = np.flatnonzero(out_hyp == j)
        pick = sel[np.abs(mean[:, sel]).argmax(1)]
        unit[:, j], unit_se[:, j] = mean[rows, pick], se[rows, pick]
        unit_ij[:, j] = ij[rows, pick]
    return unit, unit_se, unit_ij


def _corr_from_sums(n, sx, sxx, sz, szz, sxz) -> np.ndarray:
    """Correlations from raw sums (leading dimensions broadcast), NaN without variance."""
    nn = np.maximum(n, 1.0)
    cov = sxz - sx * sz / nn
    vx, vz = sxx - sx * sx / nn, szz - sz * sz / nn
    den = np.sqrt(np.clip(vx * vz, 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12 * np.maximum(np.abs(sxx * szz), 1.0), cov / den, np.nan)


def loadings(
    X: torch.Tensor,
    Z: torch.Tensor,
    defined: torch.Tensor | None,
    group: torch.Tensor,
    n_groups: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(units, outputs)`` correlation of each unit with each output's logit, and its
    record-group jackknife standard error.

    The probe's logit ``z`` is identifiable where its coefficients are not: the L1 fit's
    predictions are unique even when near-copies of a unit share their weight one way
    or another, so each unit's correlation with ``z`` (its *loading*, the structure
    coefficient of discriminant analysis) settles as records come, like ``corr``, and
    twins get the same loading. ``X`` ``(n, units)``, ``Z`` ``(outputs, n)`` (the mean
    of the fold models' logits), ``defined`` ``(n, outputs)`` or None.
    """
    n_out = Z.shape[0]
    S = np.zeros((6, n_groups, X.shape[1], n_out))  # n, sx, sxx, sz, szz, sxz per group
    for g in range(n_groups):
        rows = (group == g).nonzero().squeeze(1)
        if not len(rows):
            continue
        x = X[rows].double()
        d = (torch.ones(len(rows), n_out, dtype=torch.float64, device=X.device)
             if defined is None else defined[rows].double())  # fmt: skip
        z = Z[:, rows].T.double() * d
        S[0, g] = d.sum(0).cpu().numpy()[None, :]
        S[1, g] = (x.T @ d).cpu().numpy()
        S[2, g] = ((x * x).T @ d).cpu().numpy()
        S[3, g] = z.sum(0).cpu().numpy()[None, :]
        S[4, g] = (z * z).sum(0).cpu().numpy()[None, :]  # d is 0/1: z·d squared is z²·d
        S[5, g] = (x.T @ z).cpu().numpy()
    tot = S.sum(1)
    load = _corr_from_sums(*tot)
    loo = _corr_from_sums(*(tot[:, None] - S))  # (groups, units, outputs)
    with np.errstate(invalid="ignore"):
        var = (n_groups - 1) / n_groups * ((loo - loo.mean(0)) ** 2).sum(0)
    return load, np.sqrt(var)


def refit_loadings(
    X: torch.Tensor,
    W: torch.Tensor,
    delta: torch.Tensor | None,
    folds: int,
    defined: torch.Tensor | None,
    group: torch.Tensor,
    n_groups: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(units, outputs)`` correlation of each unit with each output's predicted
    probability (of the fold models' mean weights), and its grouped jackknife standard
    error with the fit refitted without each group.

    Leaving group ``g`` out drops its rows and moves the mean weights by the group's
    infinitesimal-jackknife change (``delta``, :func:`influence`), which moves every
    row's probability: the error sees the fit move, not only the rows. Held fixed, the
    fit's own variability went unseen: where the probe predicts almost no positive (SQL's
    ``SelectStmt -> SelectCore``, F1 0) the loadings followed the few rows of largest
    probability and settled after 1,024 records up to 0.1 from their full-data values.
    (The probability, not the logit: on a nearly separable hypothesis the logit's
    direction turns as the penalty weakens with more records, the predictions do not.)
    ``X`` ``(n, d)`` with the intercept in column 0, ``W`` ``(d, folds · outputs)``,
    ``delta`` ``(d, folds · outputs, groups)`` or None (the fit held fixed).
    """
    d = X.shape[1]
    mean_w = lambda V: V.view(d, folds, -1).mean(1)  # noqa: E731
    w = mean_w(W)
    z = torch.sigmoid(X @ w)  # (n, outputs)
    if delta is None:
        return loadings(X[:, 1:], z.T, defined, group, n_groups)
    x = X[:, 1:].double()
    x2 = x * x
    dm = (torch.ones_like(z) if defined is None else defined.to(z.dtype)).double()
    # the units' sums over the rows each output keeps: every row's, less a group's below
    # (the units do not move with the fit; only the probabilities need a pass per group)
    units = (dm.sum(0)[None, :], x.T @ dm, x2.T @ dm)

    def corr(unit_sums: tuple, zk: torch.Tensor) -> np.ndarray:  # zk: 0 off the kept rows
        sums = (*unit_sums, zk.sum(0)[None, :], (zk * zk).sum(0)[None, :], x.T @ zk)
        return _corr_from_sums(*(v.cpu().numpy() for v in sums))

    load = corr(units, z.double() * dm)
    loo = np.full((n_groups, *load.shape), np.nan)
    for g in range(n_groups):
        if stop_requested():  # a pass over every row read per group
            raise Stopped
        rows = (group == g).nonzero().squeeze(1)
        out = dm[rows]  # (rows, outputs): the group's rows each output would have kept
        kept = (units[0] - out.sum(0)[None, :], units[1] - x[rows].T @ out,
                units[2] - x2[rows].T @ out)  # fmt: skip
        zg = torch.sigmoid(X @ (w + mean_w(delta[:, :, g]).to(X.dtype))).double() * dm
        zg[rows] = 0
        loo[g] = corr(kept, zg)
    with np.errstate(invalid="ignore"):
        var = (n_groups - 1) / n_groups * ((loo - loo.mean(0)) ** 2).sum(0)
    return load, np.sqrt(var)


def pick_per_unit(vals: np.ndarray, se: np.ndarray, out_hyp: np.ndarray, n_hyps: int):
    """Per (unit, hypothesis): a categorical hypothesis shows the class largest in magnitude."""
    n_units = vals.shape[0]
    unit = np.full((n_units, n_hyps), np.nan)
    unit_se = np.full((n_units, n_hyps), np.nan)
    rows = np.arange(n_units)
    for j in np.unique(out_hyp):
        sel = np.flatnonzero(out_hyp == j)
        pick = sel[np.nan_to_num(np.abs(vals[:, sel]), nan=-1.0).argmax(1)]
        unit[:, j], unit_se[:, j] = vals[rows, pick], se[rows, pick]
    return unit, unit_se


def halfway(checks: list[Checkpoint]) -> Checkpoint | None:
    """The last checkpoint at or before half the records of the latest one: what the
    drift is measured against (None: no such checkpoint, so no error estimate yet)."""
    now = checks[-1]
    half = [c for c in checks[:-1] if 2 * c.n_records <= now.n_records]
    return half[-1] if half else None


def error(checks: list[Checkpoint], confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """How far the last checkpoint's scores may move: per row, and of the group F1 alone.

    Each is the larger of the sampling half-width and the drift since the checkpoint at
    half the records read. The first, ``(n_units, n_hyps)``, bounds both scores a row
    shows (the group F1 and the unit's coefficient); the second, ``(n_hyps,)``, the F1
    only. NaN where the fit has not reached its tolerance or no such checkpoint exists.

    The error reported is the larger of the last two checkpoints' (NaN until both have
    one): a jackknife error is itself an estimate, and a pair marked converged is one
    whose error came out small. Once is chance; SQL's ``SelectList -> SelectItem`` F1
    settled on an error of 0.0495 after 1,024 records, 0.064 from its full-data value,
    and its error rose above eps at the next checkpoint.
    """
    if len(checks) < 2:
        now = checks[-1]
        return np.full(now.coef.shape, np.nan), np.full(now.coef.shape[1], np.nan)
    err, f1_err = _error_at(checks, confidence)
    before, f1_before = _error_at(checks[:-1], confidence)
    return np.maximum(err, before), np.maximum(f1_err, f1_before)  # NaN stays NaN


def _error_at(checks: list[Checkpoint], confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`error` of the last checkpoint alone."""
    now = checks[-1]
    shape = now.coef.shape
    then = halfway(checks)
    if then is None:
        return np.full(shape, np.nan), np.full(shape[1], np.nan)
    q = 0.5 + confidence / 2
    with np.errstate(invalid="ignore"):
        f1_err = np.fmax(stdtrit(now.groups - 1, q) * now.f1_se, np.abs(now.f1 - then.f1))
        coef_err = np.fmax(stdtrit(now.folds - 1, q) * now.coef_se, np.abs(now.coef - then.coef))
        if now.coef_ij is not None:  # NaN (no estimate) must not pass: fmax would skip it
            coef_err = np.maximum(coef_err, stdtrit(now.groups - 1, q) * now.coef_ij)
        err = np.maximum(f1_err[None, :], coef_err)
    settled = now.done & then.done
    if now.enough is not None:
        settled &= now.enough
    err[:, ~settled] = np.nan
    f1_err[~settled] = np.nan
    return err, f1_err
