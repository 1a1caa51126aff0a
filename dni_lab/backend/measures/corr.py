"""Pearson correlation from mergeable centered sufficient statistics.

Each block is split into groups of consecutive records. A group's centered
co-moment is one float32 GEMM; groups fold into the float64 running state with
the pairwise update of Chan et al., which is also ``merge``. Fisher-z values of
the groups give a batch-means error estimate: symbols inside a record are not
independent, so counting symbols (the textbook Fisher interval) would be far
too narrow, while groups of records are close to independent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import stdtrit

from .base import HypothesisInfo, Measure, MeasureResult, kind_mask

_F64 = torch.float64


@dataclass
class CorrState:
    n: torch.Tensor  # () symbols read
    mean_u: torch.Tensor  # (U,)
    mean_h: torch.Tensor  # (H,)
    m2_u: torch.Tensor  # (U,) centered sum of squares
    m2_h: torch.Tensor  # (H,)
    c_uh: torch.Tensor  # (U, H) centered co-moment
    z_sum: torch.Tensor  # (U, H) sum of group Fisher-z values
    z_sq: torch.Tensor  # (U, H) sum of their squares
    z_n: torch.Tensor  # (U, H) groups with a defined correlation
    n_records: int
    scorable: np.ndarray  # (H,) hypothesis kinds this measure accepts


def _grouped(X: torch.Tensor, g: int) -> torch.Tensor:
    """Cut ``(R, T, D)`` into groups of ``g`` consecutive records: ``(G, g*T, D)``."""
    R, T, D = X.shape
    if R % g:
        X = torch.cat([X, X.new_zeros((-R) % g, T, D)])
    return X.reshape(-1, g * T, D)


def _chan(a: tuple, b: tuple) -> tuple:
    """Pairwise combination of (n, mean_u, mean_h, m2_u, m2_h, c_uh) tuples."""
    na, mua, mha, m2ua, m2ha, ca = a
    nb, mub, mhb, m2ub, m2hb, cb = b
    n = na + nb
    if float(n) == 0:
        return a
    du, dh = mub - mua, mhb - mha
    f = na * nb / n
    return (
        n,
        mua + du * (nb / n),
        mha + dh * (nb / n),
        m2ua + m2ub + du * du * f,
        m2ha + m2hb + dh * dh * f,
        ca + cb + torch.outer(du, dh) * f,
    )


def _r(m2u: torch.Tensor, m2h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    den = torch.sqrt(torch.outer(m2u, m2h))
    return torch.where(den > 0, c / den.clamp_min(1e-300), torch.full_like(c, float("nan")))


class Corr(Measure):
    """Pearson correlation between each unit and each hypothesis.

    Parameters
    ----------
    group_records : int
        Records per group for the batch-means error estimate.
    min_groups : int
        Groups needed before the error estimate is trusted (``err`` is NaN before).
    rel_tol : float
        Relative variance below which a unit or hypothesis counts as constant.
    """

    name = "corr"
    joint = False
    kinds = ("binary", "continuous", "categorical")
    has_error = True

    def __init__(self, group_records: int = 64, min_groups: int = 20, rel_tol: float = 1e-10):
        self.group_records = group_records
        self.min_groups = min_groups
        self.rel_tol = rel_tol

    def start(self, n_units, n_hyps, device="cpu", info: list[HypothesisInfo] | None = None):
        z = lambda *s: torch.zeros(*s, dtype=_F64, device=device)  # noqa: E731
        return CorrState(
            z(()), z(n_units), z(n_hyps), z(n_units), z(n_hyps), z(n_units, n_hyps),
            z(n_units, n_hyps), z(n_units, n_hyps), z(n_units, n_hyps), 0,
            kind_mask(info, n_hyps, self.kinds),
        )  # fmt: skip

    def update(self, state: CorrState, U, H, mask):
        n_b = float(mask.sum())
        if n_b == 0:
            return state
        # Shifting by a running mean keeps float32 products as accurate as centered ones.
        if float(state.n) > 0:
            su, sh = state.mean_u, state.mean_h
        else:
            su, sh = U[mask].mean(0).to(_F64), H[mask].to(U.dtype).mean(0).to(_F64)
        m = mask[..., None].to(U.dtype)
        Ud = U - su.to(U.dtype)
        if not bool(mask.all()):
            Ud.mul_(m)
        # The mask column makes the one product also return the units' sums.
        Hd = torch.cat([(H.to(U.dtype) - sh.to(U.dtype)) * m, m], dim=2)
        g = self.group_records
        Ug, Hg = _grouped(Ud, g), _grouped(Hd, g)
        S = torch.bmm(Ug.transpose(1, 2), Hg)  # (G, U, H+1): the one product per block
        s_h_all = Hg.sum(1)
        cnt, s_h, s_u, S = s_h_all[:, -1], s_h_all[:, :-1], S[:, :, -1], S[:, :, :-1]
        q_u = torch.linalg.vector_norm(Ug, dim=1).square()
        q_h = Hg[:, :, :-1].square().sum(1)
        self._group_z(state, S, s_u, s_h, q_u, q_h, cnt)
        n = torch.tensor(n_b, dtype=_F64, device=U.device)
        su_t, sh_t = s_u.sum(0, dtype=_F64), s_h.sum(0, dtype=_F64)
        blk = (
            n,
            su + su_t / n,
            sh + sh_t / n,
            q_u.sum(0, dtype=_F64) - su_t * su_t / n,
            q_h.sum(0, dtype=_F64) - sh_t * sh_t / n,
            S.sum(0, dtype=_F64) - torch.outer(su_t, sh_t) / n,
        )
        acc = _chan((state.n, state.mean_u, state.mean_h, state.m2_u, state.m2_h, state.c_uh), blk)
        state.n, state.mean_u, state.mean_h, state.m2_u, state.m2_h, state.c_uh = acc
        state.n_records += int(U.shape[0])
        return state

    def _group_z(self, state, S, s_u, s_h, q_u, q_h, cnt) -> None:
        """Accumulate the Fisher-z of every non-empty group (float32 is ample here)."""
        keep = cnt > 1
        if not bool(keep.any()):
            return
        S, s_u, s_h, q_u, q_h, c = S[keep], s_u[keep], s_h[keep], q_u[keep], q_h[keep], cnt[keep]
        c = c[:, None]
        m2u = (q_u - s_u * s_u / c).clamp_min(0)
        m2h = (q_h - s_h * s_h / c).clamp_min(0)
        cov = S - s_u[:, :, None] * (s_h / c)[:, None, :]
        den = torch.sqrt(m2u[:, :, None] * m2h[:, None, :])
        ok = den > 1e-12 * (1 + den.amax())
        z = torch.atanh((cov / den.clamp_min(1e-30)).clamp(-0.999999, 0.999999))
        z = torch.where(ok, z, torch.zeros_like(z))
        state.z_sum += z.sum(0, dtype=_F64)
        state.z_sq += (z * z).sum(0, dtype=_F64)
        state.z_n += ok.sum(0).to(_F64)

    def merge(self, a: CorrState, b: CorrState) -> CorrState:
        acc = _chan(
            (a.n, a.mean_u, a.mean_h, a.m2_u, a.m2_h, a.c_uh),
            (b.n, b.mean_u, b.mean_h, b.m2_u, b.m2_h, b.c_uh),
        )
        return CorrState(
            *acc, a.z_sum + b.z_sum, a.z_sq + b.z_sq, a.z_n + b.z_n,
            a.n_records + b.n_records, a.scorable,
        )  # fmt: skip

    def result(self, state: CorrState, confidence: float = 0.95) -> MeasureResult:
        n = float(state.n)
        r = _r(state.m2_u, state.m2_h, state.c_uh).clamp(-1, 1).cpu().numpy()
        var_u = (state.m2_u / max(n, 1)).cpu().numpy()
        var_h = (state.m2_h / max(n, 1)).cpu().numpy()
        mean_u2 = (state.mean_u**2).cpu().numpy()
        mean_h2 = (state.mean_h**2).cpu().numpy()
        reason = np.full(r.shape, None, dtype=object)
        const_u = var_u <= self.rel_tol * np.maximum(mean_u2, 1.0)
        const_h = var_h <= self.rel_tol * np.maximum(mean_h2, 1.0)
        reason[:, const_h] = "hypothesis is constant over the symbols read"
        reason[const_u, :] = "unit is constant over the symbols read"
        reason[:, ~state.scorable] = "corr cannot score this hypothesis kind"
        if n < 3:
            reason[:] = "fewer than 3 symbols read"
        r = np.where(reason == None, r, np.nan)  # noqa: E711
        err = self._error(state, r, confidence)
        return MeasureResult(r, r.copy(), err, reason)

    def _error(self, state: CorrState, r: np.ndarray, confidence: float) -> np.ndarray:
        """Batch-means half-width of the confidence interval, mapped back to r."""
        g = state.z_n.cpu().numpy()
        zs, zq = state.z_sum.cpu().numpy(), state.z_sq.cpu().numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            var = np.maximum(zq - zs * zs / g, 0.0) / (g - 1)
            t = stdtrit(np.maximum(g - 1, 1), 0.5 + confidence / 2)
            half = t * np.sqrt(var / g)
            z = np.arctanh(np.clip(r, -0.999999, 0.999999))
            err = np.maximum(np.tanh(z + half) - r, r - np.tanh(z - half))
        err[(g < self.min_groups) | ~np.isfinite(r)] = np.nan
        return err
