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

A hypothesis undefined (NaN) at some symbols is fitted on the others alone: the
statistics above read it as 0 there, and for such a hypothesis only the state also
keeps the raw sums of the units over its undefined symbols (count, sum, Gram
matrix, float64); :func:`_defined` takes them back out before its own solve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    F64,
    SymbolMeasure,
    add_counts,
    finish,
    is_constant,
    opening_reasons,
    set_reason,
)
from .base import MeasureResult, StateShape, any_nan

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
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined
    x_sum: torch.Tensor | None = None  # (U, H) raw sum of the units where h is undefined
    x_gram: dict[int, torch.Tensor] | None = None  # h -> (U, U) raw Gram where it is undefined


def _defined(state: RidgeState, j: int) -> tuple[float, torch.Tensor, torch.Tensor, ...]:
    """``(n, mean_u, cuu, cuh, shh, mean_h)`` of hypothesis ``j`` over its defined symbols.

    The state's statistics read ``j`` as 0 where it is undefined; Chan's union taken
    back (by the raw sums over those symbols) leaves the defined ones.
    """
    n, m = state.n, state.mean_u
    nx = float(state.n_undef[j])
    sx, gx = state.x_sum[:, j], state.x_gram[j]
    nd = n - nx
    md = (n * m - sx) / max(nd, 1.0)
    dm = md - m
    sxx = gx - torch.outer(m, sx) - torch.outer(sx, m) + nx * torch.outer(m, m)
    cuu = state.cuu - sxx - nd * torch.outer(dm, dm)
    mh = state.mean_h[j]
    mhd = n * mh / max(nd, 1.0)
    shh = state.shh[j] - nx * mh * mh - nd * (mhd - mh) ** 2
    cuh = state.cuh[:, j] + mh * (sx - nx * m) - nd * dm * (mhd - mh)
    return nd, md, cuu, cuh, shh, mhd


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
    one_vs_rest = True

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
        if any_nan(Hf):  # keep the units' raw sums where each hypothesis is undefined
            nan = torch.isnan(Hf)
            Hf = torch.nan_to_num(Hf, nan=0.0)
            U64 = Uf.to(F64)
            part = (U64.T @ nan.to(F64)).to(state.mean_u.device)
            state.x_sum = part if state.x_sum is None else state.x_sum + part
            state.x_gram = {} if state.x_gram is None else state.x_gram
            for j in torch.nonzero(nan.any(0)).flatten().tolist():
                Ux = U64[nan[:, j]]
                g = (Ux.T @ Ux).to(state.mean_u.device)
                state.x_gram[j] = state.x_gram[j] + g if j in state.x_gram else g
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
        dev = a.mean_u.device
        gram = dict(a.x_gram or {})
        for j, g in (b.x_gram or {}).items():
            gram[j] = gram[j] + g.to(dev) if j in gram else g.to(dev)
        out = RidgeState(
            a.n, a.mean_u, a.mean_h, a.cuu, a.cuh, a.shh, a.info, a.n_records + b.n_records,
            add_counts(a.n_undef, b.n_undef), add_counts(a.x_sum, b.x_sum), gram or None,
        )  # fmt: skip
        blk = (b.n, *(t.to(dev) for t in (b.mean_u, b.mean_h, b.cuu, b.cuh, b.shh)))
        return _combine(out, blk)

    def coefficients(self, state: RidgeState) -> tuple[torch.Tensor, torch.Tensor]:
        """Coefficients ``β`` (units × hypotheses) and the unit-constancy mask.

        Constant units are dropped from the system: their centered column is
        zero, so they decouple and their coefficient is exactly 0.
        """
        return self._coefficients(state.n, state.mean_u, state.cuu, state.cuh)

    def _coefficients(self, n, mean_u, cuu, cuh) -> tuple[torch.Tensor, torch.Tensor]:
        n_units, n_hyps = cuh.shape
        const_u = torch.as_tensor(is_constant(cuu.diagonal(), n, mean_u))
        keep = torch.nonzero(~const_u).flatten().to(cuu.device)
        beta = torch.zeros(n_units, n_hyps, dtype=F64, device=cuu.device)
        if len(keep):
            A = cuu[keep][:, keep]
            A = A + self.alpha * torch.eye(len(keep), dtype=F64, device=A.device)
            beta[keep] = _solve(A, cuh[keep], self.alpha)
        return beta, const_u

    def result(self, state: RidgeState, confidence: float = 0.95) -> MeasureResult:
        n_units, n_hyps = state.cuh.shape
        reason = opening_reasons(self, n_units, n_hyps, state.info, state.n, min_read=2)
        const_h = is_constant(state.shh, state.n, state.mean_h)
        beta, const_u = self.coefficients(state)
        # SSE = Σ(hc - ucᵀβ)² expanded over the statistics; clamped against rounding.
        sse = state.shh - 2 * (beta * state.cuh).sum(0) + (beta * (state.cuu @ beta)).sum(0)
        shh = state.shh.clone()
        const_u = np.broadcast_to(const_u.numpy()[:, None], (n_units, n_hyps)).copy()
        for j in sorted(state.x_gram or {}):  # fitted again on its defined symbols alone
            nd, md, cuu, cuh, shh[j], mhd = _defined(state, j)
            if nd < 2:
                set_reason(reason, (np.arange(n_hyps) == j)[None, :], "fewer than 2 symbols "
                           "read where the hypothesis is defined")  # fmt: skip
                continue
            b, cu = self._coefficients(nd, md, cuu, cuh[:, None])
            beta[:, j] = b[:, 0]
            sse[j] = shh[j] - 2 * (b[:, 0] * cuh).sum() + (b[:, 0] * (cuu @ b[:, 0])).sum()
            const_h[j] = is_constant(shh[j : j + 1], nd, mhd[None])[0]
            const_u[:, j] = cu.numpy()
        set_reason(reason, const_h[None, :], "hypothesis is constant over the symbols read")
        sse = sse.clamp_min(0.0)
        r2 = (1.0 - sse / shh.clamp_min(1e-300)).cpu().numpy()
        group = np.where(reason == None, np.broadcast_to(r2, reason.shape), np.nan)  # noqa: E711
        set_reason(reason, const_u, "unit is constant over the symbols read")
        return finish(beta.cpu().numpy(), reason, group=group, state=state)
