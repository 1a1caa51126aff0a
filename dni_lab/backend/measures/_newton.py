"""Projected Newton solver for many L1 logistic probes at once.

The merged probe fits one column of weights per (fold, output). Each column's
objective is its fold's mean log-loss plus ``lam * sum(|w_j|)`` (intercept
unpenalised). Each step is a Newton step on the column's free coordinates with the
penalty linearised in their orthant; slopes that would cross zero are pinned at exactly
zero and the step is solved again on the rest (``_face_step``).

Why second order: probes of correlated LSTM units are badly conditioned (the
global 1/L step of proximal gradient crawled, 400 steps for F1 still 0.02–0.05
below scikit-learn's). An earlier version took Newton steps on a smoothed absolute
value and stopped when the objective stopped decreasing: its steps stalled at the
kink, and two fits of the same rows in another order stopped 0.2% of the objective
apart with coefficients up to 1.0 apart. A column now stops on the size of its
Newton step (the model's distance to the optimum). Coordinate descent on the
penalised model (newGLMNET) was tried for the step: its d sequential updates per
sweep, for every column at once, took ~40 s per Newton step on 300 columns, against
~2 s for the batched Cholesky solves here.

The model needs a Hessian per column, ``Xᵀ diag(p(1−p)) X``; the columns of one output
differ only in the fold they leave out, so each output's curvature is gathered once per
fold and every column sums the folds it trains on (``hessians``), each fold's part from a
row sample drawn by curvature (``hessian_rows``), which keeps its cost independent of
the sample size.
Levenberg–Marquardt damping (``mu · sqrt(|g|)``, adapted per column) and a per-column
Armijo line search make every accepted step decrease the exact objective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.nn.functional import softplus

from .base import stop_requested

# Logits are clipped here: beyond it a row's loss is < 1e-13 and further growth changes
# nothing, while the losses and curvatures of separable rows would otherwise become
# subnormal floats, which the CPU handles ~20x slower.
CLIP = 30.0
_CHUNK = 32  # outputs per batched Hessian product (bounds peak memory)
_CHUNK_ELEMS = 2**21  # elements of one temporary in the row-chunked passes


@dataclass
class Problem:
    """One merged probe: design, targets and per-column weights and penalties."""

    X: torch.Tensor  # (n, d) standardised units, column 0 the intercept
    # Per-column quantities are stored one column per *row*: the active set is gathered
    # every step, and gathering rows of a contiguous matrix is a copy of whole rows,
    # where gathering its columns reads every cache line (it cost a third of a fit).
    Y: torch.Tensor  # (c, n) 0/1 targets of each column
    w_row: torch.Tensor  # (c, n) loss weight of each row in each column (0 off-fold)
    lam: torch.Tensor  # (c,) L1 strength per column
    col_out: torch.Tensor  # (c,) output (hypothesis class) of each column
    col_fold: torch.Tensor  # (c,) the fold each column leaves out
    row_fold: torch.Tensor  # (n,) the fold of each row
    # outputs of the whole probe (0: ``col_out.max() + 1``); a chunk of its columns keeps
    # the whole's count, so its Hessians draw the same rows (``hessians``)
    outputs: int = 0

    @property
    def n_outputs(self) -> int:
        return self.outputs or int(self.col_out.max()) + 1

    def columns(self, cols: torch.Tensor) -> Problem:
        """The problem of the columns ``cols`` (indices or a mask) alone, with the whole
        probe's output count."""
        return Problem(self.X, self.Y[cols], self.w_row[cols], self.lam[cols],
                       self.col_out[cols], self.col_fold[cols], self.row_fold,
                       self.n_outputs)  # fmt: skip


class Fit(NamedTuple):
    """What :func:`newton` ends with, to warm-start the next call and to score from."""

    W: torch.Tensor  # (d, c) weights
    mu: torch.Tensor  # (c,) per-column damping
    open: torch.Tensor  # (c,) bool: columns that had not reached the tolerance
    Z: torch.Tensor  # (c, n) logits (X @ W)ᵀ


def penalty(W: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """L1 of each column, intercept excluded (float64: see ``objective``)."""
    return lam.double() * W[1:].abs().sum(0, dtype=torch.float64)


def _spans(n: int, c: int) -> list[slice]:
    """Slices of the rows such that a ``(c, rows)`` temporary stays about 8 MiB.

    Whole-matrix temporaries of a large probe are hundreds of MiB: each one is mapped
    and unmapped by the allocator, and the page faults cost more than the arithmetic.
    """
    step = max(1024, _CHUNK_ELEMS // max(c, 1))
    return [slice(a, min(a + step, n)) for a in range(0, n, step)]


def objective(p: Problem, cols: torch.Tensor, Z: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Exact objective of ``cols`` given their logits ``Z`` ``(len(cols), n)`` and weights."""
    Y, w = _rows(p.Y, cols), _rows(p.w_row, cols)
    # summed in float64: near the optimum a step changes the objective by less than
    # float32's resolution, and the line search must still see whether it decreased
    total = torch.zeros(len(cols), dtype=torch.float64, device=Z.device)
    for sl in _spans(Z.shape[1], len(cols)):
        # log(1 + e^-z) for a positive row and log(1 + e^z) for a negative one, never
        # softplus(z) - y·z: that difference of two numbers near |z| loses float32's
        # digits (2e-6 a row at z = 30), more than a Newton step near the optimum gains
        z = Z[:, sl].clamp(-CLIP, CLIP) * (1 - 2 * Y[:, sl])
        total += (softplus(z) * w[:, sl]).sum(1, dtype=torch.float64)
    return total + penalty(W, p.lam[cols])


def _gradient(p: Problem, Z: torch.Tensor) -> torch.Tensor:
    """``(d, c)`` gradient of the mean log-loss of every column of ``p`` at logits ``Z``."""
    g = torch.zeros(p.X.shape[1], Z.shape[0], dtype=Z.dtype, device=Z.device)
    for sl in _spans(Z.shape[1], Z.shape[0]):
        r = (torch.sigmoid(Z[:, sl].clamp(-CLIP, CLIP)) - p.Y[:, sl]) * p.w_row[:, sl]
        g += (r @ p.X[sl]).T
    return g


def logits(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``(X @ W)ᵀ``, ``(c, n)``, as one product (BLAS reads the transposes in place)."""
    return W.T @ X.T


def _rows(M: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The rows ``cols`` of a per-column matrix; no copy while every column is active.

    ``cols`` is always sorted and unique here, so its length tells whether it is all.
    """
    return M if len(cols) == M.shape[0] else M[cols]


def _base_rate(p: Problem) -> torch.Tensor:
    rate = (p.Y * p.w_row).sum(1) / p.w_row.sum(1).clamp_min(1e-12)
    return rate.clamp(1e-4, 1 - 1e-4)


def initial_weights(p: Problem) -> torch.Tensor:
    """Zero slopes and the intercept at each column's base rate."""
    W = torch.zeros(p.X.shape[1], p.Y.shape[0], device=p.X.device)
    rate = _base_rate(p)
    W[0] = torch.log(rate / (1 - rate))
    return W


class Stopped(Exception):
    """A Stop came while the Hessians were being gathered: they are not used (the caller
    stops), so the gathering ends there instead of after every fold."""


def hessians(p: Problem, cols: torch.Tensor, Z: torch.Tensor, k: int, gen: torch.Generator):
    """``(len(cols), d, d)`` Hessian of each column's mean log-loss, from about ``k`` rows.

    ``Z`` holds the logits of ``cols``, ``(len(cols), n)``. The columns of one output
    differ only in the fold they leave out, so each output's curvature is gathered once
    per fold (``G[o, g]``, rows of fold ``g``) and column ``(o, f)`` takes the folds it
    trains on: every fold's model gets its own Hessian for the price of one. (One
    Hessian shared by the folds of an output cost twice the Newton steps: a fold's
    model, nearly separable on a rare hypothesis, curves unlike the average.) The
    curvature of a row is averaged over the folds training on it.

    With more than ``k`` rows, each fold's part is estimated from ``k / folds`` of its
    rows: the half of largest curvature counted exactly, and the rest from draws with
    probability half proportional to their curvature and half uniform, reweighted so the
    estimate is unbiased. A uniform sample misses the few rows that carry a rare
    hypothesis's curvature, and its Newton steps then overshot; drawing every row (with
    replacement) left the estimate noisy where a rare hypothesis's curvature sits on a
    few hundred rows, and its last Newton steps shrank by only a third each (on issue
    46's code workload an output with 68 positive rows took ten steps from a step of
    0.03 to the tolerance of 1e-3, three with those rows counted exactly). Each call
    draws the uniforms of every output of the probe (``p.outputs``) and an output takes
    its own row of them, so an output's draws do not depend on which other columns are
    in ``p``: a chunk of the columns solved alone follows the whole solve's steps.
    """
    outs, pos = torch.unique(p.col_out[cols], return_inverse=True)
    n, d = p.X.shape
    folds = int(p.row_fold.max()) + 1 if n else 1
    on = (_rows(p.w_row, cols) > 0).to(Z.dtype)
    P = torch.sigmoid(Z.clamp(-CLIP, CLIP))
    num = torch.zeros(len(outs), n, device=Z.device).index_add_(0, pos, P * (1 - P) * on)
    den = torch.zeros_like(num).index_add_(0, pos, on)
    D = num / den.clamp_min(1)
    G = torch.zeros(len(outs), folds, d, d, device=Z.device)
    kf = max(1, k // folds)
    for g in range(folds):
        if stop_requested():  # a fold's share takes a tenth of a second or more on wide runs
            raise Stopped
        rows = (p.row_fold == g).nonzero().squeeze(1)
        if len(rows) == 0:
            continue
        Dg = D[:, rows]
        if len(rows) <= kf:
            Xg = p.X[rows]
            for s in range(0, len(outs), _CHUNK):
                G[s : s + _CHUNK, g] = (Xg.T[None] * Dg[s : s + _CHUNK, None, :]) @ Xg
            continue
        m, top = len(rows), kf // 2
        k2 = kf - top
        # the rows of largest curvature exactly, the rest estimated from k2 draws
        heavy = torch.topk(Dg, top, dim=1).indices  # (outputs, top)
        rest = torch.ones_like(Dg).scatter_(1, heavy, 0.0)
        Dr = Dg * rest
        prob = 0.5 * Dr / Dr.sum(1, keepdim=True).clamp_min(1e-30) + 0.5 * rest / (m - top)
        u = torch.rand(p.n_outputs, k2, generator=gen, dtype=torch.float64)[outs.cpu()]
        u = u.to(Z.device)
        cdf = prob.double().cumsum(1)  # inverse CDF: k2 draws with replacement per output
        drawn = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_max(m - 1)
        pd = prob.gather(1, drawn)  # 0 only for a heavy row hit at a boundary: weight 0
        w2 = torch.where(pd > 0, Dg.gather(1, drawn) / (k2 * pd).clamp_min(1e-30), 0.0)
        idx = torch.cat([heavy, drawn], 1)
        wgt = torch.cat([Dg.gather(1, heavy), w2], 1)
        at = rows[idx]  # the sampled rows of X, gathered once: never the fold's whole copy
        for s in range(0, len(outs), _CHUNK):
            Xs = p.X[at[s : s + _CHUNK]]  # (chunk, kf, d)
            G[s : s + _CHUNK, g] = (Xs.transpose(1, 2) * wgt[s : s + _CHUNK, None, :]) @ Xs
    total = G.sum(1)
    out_of = p.col_fold[cols]
    n_f = on.sum(1).clamp_min(1)  # rows each column trains on
    return (total[pos] - G[pos, out_of]) / n_f[:, None, None]


def _orthant(W: torch.Tensor, g: torch.Tensor, lam: torch.Tensor):
    """Free coordinates, the orthant each moves in, and the objective's gradient there.

    ``W`` and ``g`` (the mean log-loss's gradient) are ``(d, c)``; row 0 is the intercept.
    A slope at zero is free only if the penalty cannot hold it there (``|g| > lam``);
    it then moves into the orthant its gradient points to (OWL-QN's pseudo-gradient).
    """
    s = torch.zeros_like(W)
    w, gs = W[1:], g[1:]
    s[1:] = torch.where(w != 0, torch.sign(w), -torch.sign(gs))
    free = torch.ones_like(W, dtype=torch.bool)
    free[1:] = (w != 0) | (gs.abs() > lam)
    pg = torch.where(free, g + s * torch.cat([torch.zeros_like(lam)[None], lam.expand_as(w)]), 0)
    return free, s, pg


def _project(Wn: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Slopes that left their orthant stop at zero: how L1 makes exact zeros."""
    return torch.where(Wn * s < 0, torch.zeros_like(Wn), Wn)


def _face_step(
    H: torch.Tensor,
    pg: torch.Tensor,
    W: torch.Tensor,
    free: torch.Tensor,
    s: torch.Tensor,
    rounds: int = 4,
) -> torch.Tensor:
    """``(d, c)`` Newton step of each column within its orthant.

    ``H`` is ``(c, d, d)`` (damped), ``pg`` the objective's gradient in the orthant
    ``s``. Slopes whose step would cross zero are pinned at zero and the step on the
    rest is solved again (an active-set solve of the quadratic model over the orthant):
    projecting the unconstrained step instead zig-zagged, with four in ten line searches
    cutting the step and fits taking a hundred steps.
    """
    pinned = torch.zeros_like(free)
    step = torch.empty_like(W)
    todo = torch.arange(W.shape[1], device=W.device)  # columns whose pinned set changed
    for r in range(rounds):
        if r and stop_requested():  # the caller stops before using the step
            break
        sel = slice(None) if len(todo) == W.shape[1] else todo  # all: views, no copies
        Ht, Wt, pt = H[sel], W[:, sel], pinned[:, sel]
        f = (free[:, sel] & ~pt).T.to(H.dtype)  # (c, d)
        d0 = torch.where(pt, -Wt, 0.0)  # pinned slopes go exactly to zero
        rhs = pg[:, sel] + torch.bmm(Ht, d0.T[:, :, None]).squeeze(2).T
        # fixed coordinates get an identity row and a zero right-hand side
        Hf = Ht * (f[:, :, None] * f[:, None, :]) + torch.diag_embed(1 - f)
        L, _ = torch.linalg.cholesky_ex(Hf)
        st = d0 - torch.cholesky_solve((rhs.T * f)[:, :, None], L).squeeze(2).T
        step[:, sel] = st
        cross = (Wt + st) * s[:, sel] < 0
        new = (cross & ~pt).any(0)
        if not bool(new.any()):
            break
        pinned[:, sel] = pt | cross
        todo = todo[new]  # the others' solve would not change
    return torch.where(pinned, -W, step)


def newton(
    p: Problem,
    W0: torch.Tensor,
    iters: int,
    tol: float,
    hessian_rows: int = 4096,
    mu: torch.Tensor | None = None,
    refresh: int = 1,
) -> Fit:
    """Up to ``iters`` projected Newton steps on every column, warm-started at ``W0``.

    Each step solves the Newton system on the column's free coordinates (slopes that
    are non-zero or that the penalty cannot hold at zero) with the L1 term linearised in
    their orthant, pinning slopes that would cross zero at zero. A column is
    converged when its Newton step moves no coefficient by more than ``tol`` (on
    standardised units): the step is the model's distance to the optimum, so this bounds
    the coefficients' error, where the objective's decrease did not (across correlated
    units the objective is flat, and a fit judged by it stopped where the order of its
    rows left it). Returns the weights, the per-column damping (to warm-start the next
    call), which columns are still open (budget spent, a Stop, or no further decrease
    possible before they reached ``tol``) and the logits. Hessians are rebuilt every
    ``refresh`` steps (default: every step; a stale one slowed convergence more than it
    saved), or sooner when a quarter of the steps found no decrease at all.
    """
    X = p.X
    n, d = X.shape
    c = W0.shape[1]
    mu = torch.full((c,), 1e-2, device=X.device) if mu is None else mu.clone()
    if c == 0 or n == 0 or iters == 0:
        return Fit(W0, mu, torch.ones(c, dtype=torch.bool, device=X.device), logits(X, W0))
    W = W0.clone()
    gen = torch.Generator().manual_seed(0)  # the Hessian's row sample: reproducible
    active = torch.arange(c, device=X.device)
    Z = logits(X, W)
    F = objective(p, active, Z, W)
    failed = torch.zeros(c, dtype=torch.bool, device=X.device)
    stale = refresh  # steps since the Hessians were built: build them first
    # ``q`` holds the active columns only, so a step gathers nothing: it shrinks with them
    q, Za, Fa = p, Z, F.clone()
    for _ in range(iters):
        if len(active) == 0 or stop_requested():  # a Stop acts within a step, not a block
            break
        every = torch.arange(len(active), device=X.device)
        Wa = W[:, active]
        g = _gradient(q, Za)
        free, s, pg = _orthant(Wa, g, q.lam)
        if stale >= refresh:
            try:
                H = hessians(q, every, Za, hessian_rows, gen)
            except Stopped:
                break
            stale = 0
        stale += 1
        if stop_requested():  # the Hessians took a while: check before the step
            break
        damp = mu[active] * pg.norm(dim=0).sqrt() + 1e-8
        step = _face_step(H + torch.diag_embed(damp[:, None].expand(-1, d)),
                          pg, Wa, free, s)  # fmt: skip
        if stop_requested():  # the step's solves took a while: stop before evaluating it
            break
        # the Newton estimate of the distance to the optimum, before any line search
        # (an intercept beyond ±10 predicts the same everywhere: a hypothesis that is
        # almost never true drifts it towards -inf by ever smaller objective gains)
        near = (step[1:].abs().amax(0) <= tol) & ((step[0].abs() <= tol) | (Wa[0].abs() >= 10))
        t = torch.ones(len(active), device=X.device)
        Wn = _project(Wa + step, s)
        Zn = logits(X, Wn)
        Fn = objective(q, every, Zn, Wn)
        for _ in range(6):  # Armijo, per column; only failing columns are recomputed
            slope = (pg * (Wn - Wa)).sum(0).double()
            bad = (~(Fn <= Fa + 1e-4 * slope)).nonzero().squeeze(1)  # NaN fails too
            if len(bad) == 0 or stop_requested():  # columns that got worse are undone below
                break
            t[bad] *= 0.25
            Wn[:, bad] = _project(Wa[:, bad] + t[bad] * step[:, bad], s[:, bad])
            Zn[bad] = logits(X, Wn[:, bad])
            Fn[bad] = objective(q, bad, Zn[bad], Wn[:, bad])
        worse = ~(Fn <= Fa)  # no decrease (or a NaN) even at the shortest step: keep the old
        t[worse] = 0
        Wn[:, worse], Zn[worse], Fn[worse] = Wa[:, worse], Za[worse], Fa[worse]
        mu[active] = torch.where(t < 1, mu[active] * 8, (mu[active] / 4).clamp_min(1e-6))
        if worse.float().mean() > 0.25:
            stale = refresh
        W[:, active], F[active] = Wn, Fn
        # a column that found no decrease retries with stronger damping, up to a point
        # (then it stays open: it never counts as converged)
        keep = ~near & (~worse | (mu[active] < 1e3))
        gave_up = ~near & worse & (mu[active] >= 1e3)
        if keep.all():
            Za, Fa = Zn, Fn
            continue
        Z[active[~keep]] = Zn[~keep]
        stuck = active[gave_up]
        active, Za, Fa = active[keep], Zn[keep], Fn[keep]
        q = q.columns(keep)
        if stale < refresh:
            H = H[keep]
        if len(stuck):
            failed[stuck] = True
    if len(active) and Za is not Z:  # (still Z itself when no step was taken)
        Z[active] = Za
    still = failed.clone()
    still[active] = True
    return Fit(W, mu, still, Z)
