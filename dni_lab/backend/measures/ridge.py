"""Ridge probe: a unit group's linear fit of each hypothesis, in closed form.

The state holds mergeable centered sufficient statistics: the symbol count,
the means of units and hypotheses, the centered co-moments ``Cuu`` (units ×
units) and ``Cuh`` (units × hypotheses) and each hypothesis' centered sum of
squares ``Shh``. A block's statistics are one float32 GEMM on the block's
device after centering; blocks fold into the float64 running state with the
pairwise update of Chan et al., which is also :meth:`Ridge.merge`.

From the statistics, ``β = (Cuu + αI)⁻¹ Cuh`` is exactly scikit-learn's
``Ridge(alpha, fit_intercept=True)`` (the intercept absorbs the means), and the
in-sample residual sum of squares follows without revisiting the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..hypothesis.hypotheses import HypothesisInfo
from ._common import F64, SymbolMeasure, finish, is_constant, opening_reasons, set_reason
from .base import MeasureResult, StateShape

#: Eigenvalues below this fraction of the largest are float32 rounding, not signal.
_PINV_RTOL = 1e-6


@dataclass
class RidgeState:
    """Centered sufficient statistics of one unit group against all hypotheses."""

    n: float
    mean_u: torch.Tensor  # (U,)
    mean_h: torch.Tensor  # (H,)
    cuu: torch.Tensor  # (U, U) centered co-moment of the units
    cuh: torch.Tensor  # (U, H) centered co-moment units × hypotheses
    shh: torch.Tensor  # (H,) centered sum of squares of each hypothesis
    info: list[HypothesisInfo] | None
    n_records: int = 0


def _combine(a: RidgeState, b: tuple) -> RidgeState:
    """Chan's pairwise update of ``a`` with block statistics ``b`` (also used by merge)."""
    nb, mub, mhb, cuub, cuhb, shhb = b
    n = a.n + nb
    if n == 0:
        return a
    du = mub - a.mean_u
    dh = mhb - a.mean_h
    f = a.n * nb / n
    a.cuu = a.cuu + cuub + torch.outer(du, du) * f
    a.cuh = a.cuh + cuhb + torch.outer(du, dh) * f
    a.shh = a.shh + shhb + dh * dh * f
    a.mean_u = a.mean_u + du * (nb / n)
    a.mean_h = a.mean_h + dh * (nb / n)
    a.n = n
    return a


def _solve(A: torch.Tensor, B: torch.Tensor, alpha: float) -> torch.Tensor:
    """``A⁻¹B`` for symmetric PSD ``A``, or the minimum-norm solution when it is singular."""
    if alpha > 0:
        L, info = torch.linalg.cholesky_ex(A)
        if int(info) == 0:
            return torch.cholesky_solve(B, L)
    # Without a penalty, collinear units make A singular up to the float32 noise of the
    # block GEMMs; directions below that noise are dropped, as least squares would.
    return torch.linalg.pinv(A, rtol=_PINV_RTOL, hermitian=True) @ B


class Ridge(SymbolMeasure):
    """Ridge regression of each hypothesis on a unit group (a joint measure).

    Parameters
    ----------
    alpha : float
        L2 penalty, as in :class:`sklearn.linear_model.Ridge`. ``alpha=0`` is
        ordinary least squares (minimum-norm solution if units are collinear).

    Notes
    -----
    ``unit_score`` is the coefficient of each unit, ``group_score`` the
    in-sample R² of the group broadcast over its units; there is no error
    estimate (``err`` is NaN). Units constant over the symbols read are left
    out of the fit (their coefficient would be 0 in scikit-learn as well) and
    get a null unit score; a constant hypothesis gets null scores.
    """

    name = "ridge"
    joint = True
    kinds = ("continuous", "binary")

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    def empty_state(self, shape: StateShape) -> RidgeState:
        return RidgeState(
            n=0.0,
            mean_u=shape.per_unit(),
            mean_h=shape.per_hyp(),
            cuu=shape.zeros(shape.n_units, shape.n_units),
            cuh=shape.per_pair(),
            shh=shape.per_hyp(),
            info=shape.info,
        )

    def fold(self, state: RidgeState, Uf: torch.Tensor, Hf: torch.Tensor) -> RidgeState:
        n = Uf.shape[0]
        # Centering before the float32 GEMM keeps its digits; the float32 mean is
        # not exact, so its residual is removed in float64 (Σ(x-m)(y-m') = C + n·rx·ry).
        mu = Uf.mean(0)
        mh = Hf.mean(0)
        Uc = Uf - mu
        Hc = Hf - mh
        # float32 reductions of centered values are exact enough; float64 ones copy the block.
        ru = Uc.sum(0).to(F64) / n
        rh = Hc.sum(0).to(F64) / n
        dev = state.mean_u.device
        blk = (
            float(n),
            (mu.to(F64) + ru).to(dev),
            (mh.to(F64) + rh).to(dev),
            ((Uc.T @ Uc).to(F64) - n * torch.outer(ru, ru)).to(dev),
            ((Uc.T @ Hc).to(F64) - n * torch.outer(ru, rh)).to(dev),
            ((Hc * Hc).sum(0).to(F64) - n * rh * rh).to(dev),
        )
        return _combine(state, blk)

    def merge(self, a: RidgeState, b: RidgeState) -> RidgeState:
        out = RidgeState(
            a.n, a.mean_u, a.mean_h, a.cuu, a.cuh, a.shh, a.info, a.n_records + b.n_records
        )
        dev = a.mean_u.device
        blk = (b.n, *(t.to(dev) for t in (b.mean_u, b.mean_h, b.cuu, b.cuh, b.shh)))
        return _combine(out, blk)

    def coefficients(self, state: RidgeState) -> tuple[torch.Tensor, torch.Tensor]:
        """Coefficients ``β`` (units × hypotheses) and the unit-constancy mask.

        Constant units are dropped from the system: their centered column is
        zero, so they decouple and their coefficient is exactly 0.
        """
        n_units, n_hyps = state.cuh.shape
        const_u = torch.as_tensor(is_constant(state.cuu.diagonal(), state.n, state.mean_u))
        keep = torch.nonzero(~const_u).flatten().to(state.cuu.device)
        beta = torch.zeros(n_units, n_hyps, dtype=F64, device=state.cuu.device)
        if len(keep):
            A = state.cuu[keep][:, keep]
            A = A + self.alpha * torch.eye(len(keep), dtype=F64, device=A.device)
            beta[keep] = _solve(A, state.cuh[keep], self.alpha)
        return beta, const_u

    def result(self, state: RidgeState, confidence: float = 0.95) -> MeasureResult:
        reason = opening_reasons(self, *state.cuh.shape, state.info, state.n, min_read=2)
        const_h = is_constant(state.shh, state.n, state.mean_h)
        set_reason(reason, const_h[None, :], "hypothesis is constant over the symbols read")
        beta, const_u = self.coefficients(state)
        # SSE = Σ(hc - ucᵀβ)² expanded over the statistics; clamped against rounding.
        sse = state.shh - 2 * (beta * state.cuh).sum(0) + (beta * (state.cuu @ beta)).sum(0)
        sse = sse.clamp_min(0.0)
        r2 = (1.0 - sse / state.shh.clamp_min(1e-300)).cpu().numpy()
        group = np.where(reason == None, np.broadcast_to(r2, reason.shape), np.nan)  # noqa: E711
        set_reason(reason, const_u.numpy()[:, None], "unit is constant over the symbols read")
        return finish(beta.cpu().numpy(), reason, group=group)
