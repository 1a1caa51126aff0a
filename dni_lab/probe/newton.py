"""The L2 probe's numbers on the training rows: standardisation, logits, Newton's method.

A probe reads tens of thousands of symbols and a few hundred units, so its L2 fit is a
small convex problem on a tall matrix: the Hessian is ``units × units`` and cheap to
factor, and Newton's method reaches a gradient of ``1e-8`` in a handful of steps where
L-BFGS takes a hundred (each step a pass over the rows). What costs is passing over the
rows, so the code here keeps those passes few, in float32 where rounding only slows
convergence, and never allocates a float64 copy of the matrix:

* :func:`standardise` computes each unit's mean and scale in float64, chunk by chunk, and
  keeps one float32 standardised copy ``Z`` (the Newton steps read it; so does the L1
  solver);
* :func:`newton_l2` takes Newton steps on ``Z`` in float32 (one matrix product for the
  Hessian, none far from the optimum, and two matrix-vector products; a Hessian is
  reused while the steps it gives still cut the gradient tenfold) until float32's
  rounding is what is left, then
  polishes in float64: the exact gradient from the raw rows, chunk by chunk, with the
  standardisation folded into the coefficients (``x @ (w / scale) + b - mean · (w /
  scale)``), and a step with the last Hessian. The gradient that decides stopping is
  float64's, so the optimum is float64's;
* :func:`logits` scores raw rows the same way, chunk by chunk.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch.nn.functional import softplus

_F64 = torch.float64
CHUNK = 8192  # rows per chunk: a chunk's float64 temporaries stay far below the matrix
POLISH = 1e-5  # float32 steps stop at this gradient (their rounding is near 1e-7)
REFRESH = 0.1  # a new Hessian where the last step cut the gradient less than this
FAR = 1e-2  # above this gradient a step's Hessian is the Gram matrix's (_hessian_factor)
TRACE: list | None = None  # a list records each step's largest gradient and "H" per Hessian


class Rows(NamedTuple):
    """Training rows as the solvers read them."""

    X: torch.Tensor  # (n, d) the raw activations, float32 or float64
    mean: torch.Tensor  # (d,) float64
    scale: torch.Tensor  # (d,) float64, a constant unit's is 1
    Z: torch.Tensor  # (n, d) float32, (X - mean) / scale


def standardise(X: torch.Tensor) -> Rows:
    """Each unit's mean and standard deviation (``ddof=0``) and the standardised rows.

    Parameters
    ----------
    X : torch.Tensor
        ``(n, d)`` raw rows.

    Returns
    -------
    Rows
        The rows, their mean and scale (1 for a constant unit) in float64, and the
        float32 standardised copy.
    """
    X = X.contiguous()
    n, d = X.shape
    mean, ss, seen = torch.zeros(d, dtype=_F64), torch.zeros(d, dtype=_F64), 0
    for i in range(0, n, CHUNK):  # one pass: each chunk's mean and squares, merged (Chan)
        c = X[i : i + CHUNK].to(_F64)
        k = len(c)
        m = c.mean(0)
        c = c - m  # not in place: c may be a view of X
        delta = m - mean
        ss += (c * c).sum(0) + delta * delta * (seen * k / (seen + k))
        mean += delta * (k / (seen + k))
        seen += k
    scale = (ss / n).sqrt()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant unit
    if X.dtype == torch.float32:  # float32 rows: the standardised copy straight in float32
        # the mean in two float32 parts: x - hi is exact near the mean, so a unit far from
        # zero keeps its digits (one float32 mean would shift the unit by its rounding)
        hi = mean.float()
        inv = 1 / scale
        Z = torch.sub(X, hi)
        Z *= inv.float()
        Z -= ((mean - hi.double()) * inv).float()
    else:
        Z = torch.empty(n, d, dtype=torch.float32)
        for i in range(0, n, CHUNK):
            Z[i : i + CHUNK] = (X[i : i + CHUNK] - mean) / scale
    return Rows(X, mean, scale, Z)


def raw_slopes(
    mean: torch.Tensor, scale: torch.Tensor, coef: torch.Tensor, intercept: float
) -> tuple[torch.Tensor, float]:
    """The slopes and intercept on raw rows of a probe on standardised ones."""
    u = coef.to(_F64) / scale
    return u, float(intercept) - float(mean @ u)


def logits(
    X: torch.Tensor, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float
) -> np.ndarray:
    """``((X - mean) / scale) @ coef + intercept`` in float64, chunk by chunk, as
    ``X @ (coef / scale) + (intercept - mean · coef / scale)``: no standardised copy."""
    u, c = raw_slopes(
        torch.from_numpy(np.asarray(mean, dtype=np.float64)),
        torch.from_numpy(np.asarray(scale, dtype=np.float64)),
        torch.from_numpy(np.ascontiguousarray(coef, dtype=np.float64)),
        intercept,
    )
    n = X.shape[0]
    out = torch.empty(n, dtype=_F64)
    for i in range(0, n, CHUNK):
        out[i : i + CHUNK] = X[i : i + CHUNK].to(_F64) @ u
    return (out + c).numpy()


def newton_l2(
    rows: Rows,
    y: torch.Tensor,
    C: float,
    tol: float,
    max_iter: int,
    start: tuple[np.ndarray, float] | None = None,
) -> tuple[np.ndarray, float, int, bool]:
    """Minimise ``mean log-loss + ||w||² / (2 C n)`` over standardised slopes ``w`` and an
    unpenalised intercept by Newton's method: float32 steps with a backtracking (Armijo)
    line search, then float64 polishing steps.

    Parameters
    ----------
    rows : Rows
        From :func:`standardise`.
    y : torch.Tensor
        ``(n,)`` 0/1 targets, both present.
    C, tol, max_iter : float, float, int
        scikit-learn's ``C``; the largest entry of the float64 gradient at which it stops
        (scikit-learn's ``lbfgs`` stops on the same quantity of the same objective); the
        most steps, both kinds counted.
    start : (coef, intercept), optional
        A warm start on the standardised units (a fold's fit starts at the full fit).

    Returns
    -------
    coef, intercept, steps, converged
    """
    n, d = rows.Z.shape
    y = y.to(_F64)
    lam = 1.0 / (C * n)
    if start is None:
        rate = float(y.mean())  # the intercept's own optimum at w = 0
        w, b = torch.zeros(d, dtype=_F64), float(np.log(rate / (1 - rate)))
    else:
        w, b = torch.as_tensor(start[0], dtype=_F64).clone(), float(start[1])
    w, b, steps, L = _float32_steps(rows, y, lam, w, b, max(tol, POLISH), max_iter)
    gmax, fresh = float("inf"), False
    for steps in range(steps, max_iter + 1):  # noqa: B020  (the count goes on)
        g = _exact_gradient(rows, y, w, b, lam)
        previous, gmax = gmax, float(g.abs().max())
        if TRACE is not None:
            TRACE.append(gmax)
        if gmax <= tol:
            return w.numpy(), b, steps, True
        if steps == max_iter:
            break
        if L is None or not gmax < previous:  # no Hessian yet, or a stale one stalled
            if fresh:
                break  # a Hessian of this point did not help either: float64's floor
            p = torch.sigmoid((rows.Z @ w.float()).double() + b)
            L, fresh = _hessian_factor(rows.Z, p, lam), True
        step = -torch.cholesky_solve(g[:, None], L)[:, 0] if L is not None else -g
        w, b = w + step[1:], b + float(step[0])
    return w.numpy(), b, steps, gmax <= 10 * tol


def _float32_steps(
    rows: Rows, y: torch.Tensor, lam: float, w: torch.Tensor, b: float, tol: float, budget: int
) -> tuple[torch.Tensor, float, int, torch.Tensor | None]:
    """Newton steps on the float32 standardised rows until the (float32) gradient is within
    ``tol``; returns the point, the steps taken and the last Hessian's Cholesky factor.

    A Hessian is recomputed only where the last step cut the gradient less than tenfold:
    near the optimum the one before serves (a chord step costs no matrix product)."""
    Z = rows.Z
    n, d = Z.shape
    sign = 1 - 2 * y  # log(1 + e^{-z}) for a positive row, log(1 + e^{z}) for a negative

    def objective(z: torch.Tensor, w: torch.Tensor) -> float:
        return float(softplus(z * sign).mean() + 0.5 * lam * (w @ w))

    z = (Z @ w.float()).double() + b
    f = objective(z, w)
    Zs = torch.empty_like(Z)  # the weighted rows, one buffer for every step
    L, previous, G = None, float("inf"), None
    for step_no in range(budget):
        p = torch.sigmoid(z)
        r = (p - y) / n
        g = torch.empty(d + 1, dtype=_F64)
        g[0] = r.sum()
        g[1:] = (Z.T @ r.float()).double() + lam * w
        gmax = float(g.abs().max())
        if TRACE is not None:
            TRACE.append(gmax)
        if gmax <= tol:
            return w, b, step_no, L
        if L is None or gmax > REFRESH * previous:
            if gmax > FAR:  # far: the rows' curvatures by their mean, on one Gram matrix
                G = (Z.T @ Z).double() / n if G is None else G
                L = _hessian_factor(Z, p, lam, gram=G)
            else:
                L = _hessian_factor(Z, p, lam, out=Zs)
        previous = gmax
        step = -torch.cholesky_solve(g[:, None], L)[:, 0] if L is not None else -g
        dz = (Z @ step[1:].float()).double() + float(step[0])
        slope = float(g @ step)
        t = 1.0
        for _ in range(50):
            w_t, z_t = w + t * step[1:], z + t * dz
            f_t = objective(z_t, w_t)
            # Armijo, with the objective's rounding allowed: near the optimum a step's
            # decrease is below what float32 products can show
            if f_t <= f + 1e-4 * t * slope + 1e-12 * abs(f):
                break
            t *= 0.5
        else:  # no decrease along a descent direction: float32's floor, polish in float64
            return w, b, step_no, L
        w, z, f, b = w_t, z_t, f_t, b + t * float(step[0])
    return w, b, budget, L


def _exact_gradient(
    rows: Rows, y: torch.Tensor, w: torch.Tensor, b: float, lam: float
) -> torch.Tensor:
    """The float64 gradient (intercept first) from the raw rows, one pass, chunk by chunk."""
    X, mean, scale, _ = rows
    n, d = X.shape
    u, c = raw_slopes(mean, scale, w, b)
    gx, rs = torch.zeros(d, dtype=_F64), 0.0
    for i in range(0, n, CHUNK):
        Xc = X[i : i + CHUNK].to(_F64)
        rc = torch.sigmoid(Xc @ u + c) - y[i : i + CHUNK]
        gx += Xc.T @ rc
        rs += float(rc.sum())
    g = torch.empty(d + 1, dtype=_F64)
    g[0] = rs / n
    g[1:] = (gx / n - mean * (rs / n)) / scale + lam * w
    return g


def _hessian_factor(
    Z: torch.Tensor,
    p: torch.Tensor,
    lam: float,
    out: torch.Tensor | None = None,
    gram: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The Cholesky factor of the objective's Hessian (intercept first) where the rows'
    probabilities are ``p``: one float32 matrix product (``out``: its weighted rows).

    With ``gram`` (``Z.T @ Z / n``) the slopes' block is the Gram matrix times the rows'
    summed curvature instead: no matrix product. Far from the optimum it steers about as
    well as the exact block (at the start, where every row's probability is the base rate,
    it *is* the exact block), and one Gram matrix serves every such step."""
    n, d = Z.shape
    s = p * (1 - p) / n
    s32 = s.float()
    H = torch.empty(d + 1, d + 1, dtype=_F64)
    eye = lam * torch.eye(d, dtype=_F64)
    H[1:, 1:] = (Z.T @ torch.mul(Z, s32[:, None], out=out)).double() + eye \
        if gram is None else float(s.sum()) * gram + eye  # fmt: skip
    H[0, 1:] = H[1:, 0] = (Z.T @ s32).double()
    H[0, 0] = float(s.sum())
    if TRACE is not None:
        TRACE.append("H" if gram is None else "G")
    return _cholesky(H)


def _cholesky(H: torch.Tensor) -> torch.Tensor | None:
    """``H``'s Cholesky factor; a float32 Hessian that rounds to indefinite gets a ridge."""
    ridge = 0.0
    for _ in range(8):
        L, info = torch.linalg.cholesky_ex(H + ridge * torch.eye(len(H), dtype=_F64))
        if int(info) == 0:
            return L
        ridge = max(ridge * 100, 1e-10 * float(H.diagonal().abs().max()))
    return None  # gradient steps: the line search still decreases the objective
