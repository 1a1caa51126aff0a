"""Pearson correlation from mergeable centered sufficient statistics.

Each block is split into groups of consecutive records. A group's shifted
co-moment is a float32 GEMM over short runs of records whose results add up in
float64; groups fold into the float64 running state with the pairwise update of
Chan et al., which is also ``merge``.

The error estimate is a grouped jackknife. Symbols inside a record are not
independent (an RNN's state is smooth in time, and sliding windows overlap), so
the textbook Fisher interval, which counts symbols, is far too narrow. Groups of
consecutive records are close to independent; they are dealt round-robin into
``buckets`` partial states, and the spread of the correlation computed with one
bucket left out gives the variance of the pooled correlation. Unlike averaging
per-group correlations, it stays right for rare hypotheses that most groups
never see.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import stdtrit

from ..extraction.sparse_block import SparseBlock
from .base import HypothesisInfo, Measure, MeasureResult, kind_mask
from .moments import Moments, block_mean, fold, index, rolled, sum_groups

_F64 = torch.float64


@dataclass
class CorrState:
    total: Moments  # every symbol read
    buckets: Moments  # (K, ...) groups of records dealt round-robin, for the jackknife
    n_groups: int  # groups of records folded so far (decides the next bucket)
    n_records: int
    scorable: np.ndarray  # (H,) hypothesis kinds this measure accepts

    @property
    def n(self) -> torch.Tensor:
        return self.total.n


def _run_records(g: int, T: int, rows: int) -> int:
    """Records per run of the product: at most about ``rows`` symbols (at least one record).

    A divisor of the group size ``g``, so that no run straddles two groups.
    """
    want = max(1, rows // max(T, 1))
    return max(d for d in range(1, min(want, g) + 1) if g % d == 0)


def _runs(R: int, sub: int):
    """``(lo, hi, n)``: records ``lo:hi`` cut into ``n`` runs of ``sub`` (the rest: one run)."""
    full = R - R % sub
    if full:
        yield 0, full, full // sub
    if full < R:
        yield full, R, 1


class Corr(Measure):
    """Pearson correlation between each unit and each hypothesis.

    Parameters
    ----------
    group_records : int
        Consecutive records per group (a group is the jackknife's unit of independence).
    buckets : int
        Jackknife buckets.
    rel_tol : float
        Relative variance below which a unit or hypothesis counts as constant.
    min_bucket_groups : int
        Groups every bucket must hold before ``err`` is defined (see ``_error``).
    """

    name = "corr"
    joint = False
    kinds = ("binary", "continuous", "categorical")
    has_error = True

    def __init__(
        self,
        group_records: int = 64,
        buckets: int = 20,
        rel_tol: float = 1e-10,
        min_bucket_groups: int = 3,
    ):
        self.group_records = group_records
        self.buckets = buckets
        self.min_bucket_groups = min_bucket_groups
        self.rel_tol = rel_tol

    def start(self, n_units, n_hyps, device="cpu", info: list[HypothesisInfo] | None = None):
        return CorrState(
            total=Moments.zeros((), n_units, n_hyps, device),
            buckets=Moments.zeros((self.buckets,), n_units, n_hyps, device),
            n_groups=0,
            n_records=0,
            scorable=kind_mask(info, n_hyps, self.kinds),
        )

    def update(self, state: CorrState, U, H, mask):
        if not bool(mask.any()):
            return state
        # Shifting by an approximate mean keeps float32 products as accurate as centered
        # ones. The shift is the block's own mean, never the running one: the float32
        # rounding of a block's moments then depends on the block alone, so states that
        # read blocks apart (cluster shards) merge to what one state reading them gives,
        # to float64 rounding (a running-mean shift made them differ by up to 1e-5).
        su, sh = block_mean(U, mask), block_mean(H.to(U.dtype), mask)
        m = mask[..., None].to(U.dtype)
        Ud = U - su.to(U.dtype)
        if not bool(mask.all()):
            Ud.mul_(m)
        # The mask column makes the one product also return the units' sums.
        Hd = torch.cat([(H.to(U.dtype) - sh.to(U.dtype)) * m, m], dim=2)
        R, T = int(U.shape[0]), int(U.shape[1])
        g = self.group_records
        G = -(-R // g)
        grp = torch.arange(R, device=U.device) // g
        # The product runs over short runs of records whose float32 results add up in
        # float64: a float32 GEMM's error grows with the length it accumulates over. Over
        # a whole group (3,072 symbols) it put a rarely active unit's correlation 4.5e-7
        # off float64; over about 64 symbols, 5e-8 (benchmarks/bench_features_sparse.py,
        # d_sae 16,384 at k 32, and tests/test_measures_corr.py). A run is at least twice as long
        # as the hypotheses are many, so that its (U, H+1) result stays smaller than the
        # run's own (symbols, U) block: with many hypotheses, the float64 sums of short
        # runs' results cost more than the product.
        sub = _run_records(g, T, max(64, 2 * int(Hd.shape[2])))
        S = torch.zeros(G, U.shape[2], Hd.shape[2], dtype=_F64, device=U.device)
        for lo, hi, n in _runs(R, sub):
            P = torch.bmm(
                Ud[lo:hi].reshape(n, -1, Ud.shape[2]).transpose(1, 2),
                Hd[lo:hi].reshape(n, -1, Hd.shape[2]),
            )  # (n, U, H+1): the one product, run by run
            S.index_add_(0, grp[lo:hi:sub], P.to(_F64))
        Hd64 = Hd.to(_F64)
        zero = torch.zeros(G, Hd.shape[2], dtype=_F64, device=U.device)
        s_h_all = zero.index_add(0, grp, Hd64.sum(1))
        q_h = zero[:, :-1].index_add(0, grp, Hd64[..., :-1].square().sum(1))
        cnt, s_h, s_u, S = s_h_all[:, -1], s_h_all[:, :-1], S[:, :, -1], S[:, :, :-1]
        # Squared in place once the product has read it (no second block-sized tensor).
        # torch sums a dimension in cascade, so the float32 per-record sums lose nothing
        # measurable; the float32 ``vector_norm`` this replaces cost up to 1e-6 in the
        # correlation of a rarely active unit, and took most of the update's time.
        q_u = torch.zeros(G, U.shape[2], dtype=_F64, device=U.device)
        q_u.index_add_(0, grp, Ud.square_().sum(1).to(_F64))
        return self._fold_groups(state, int(U.shape[0]), su, sh, cnt, s_u, s_h, q_u, q_h, S)

    def update_sparse(self, state: CorrState, Z: SparseBlock, H, mask):
        """:meth:`update` for latents given as their nonzeros (a TopK or JumpReLU set).

        The groups' sums come from sparse × dense products in float64: each of the
        ``k`` active latents of a symbol adds its value times the symbol's hypotheses
        to its row, so a block costs ``R·T·k·H`` instead of ``R·T·n_units·H``. The
        moments are then the dense path's, from unshifted sums.
        """
        if not bool(mask.any()):
            return state
        R, T, k = Z.values.shape
        g, D, dev = self.group_records, Z.width, Z.values.device
        G = -(-R // g)
        m = mask.to(_F64)
        Hm = H.to(_F64) * m[..., None]  # (R, T, H), padding zeroed
        grp = torch.arange(R, device=dev) // g
        cnt = torch.zeros(G, dtype=_F64, device=dev).index_add_(0, grp, m.sum(1))
        s_h = torch.zeros(G, H.shape[2], dtype=_F64, device=dev).index_add_(0, grp, Hm.sum(1))
        q_h = torch.zeros_like(s_h).index_add_(0, grp, (Hm * Hm).sum(1))
        v = (Z.values.to(_F64) * m[..., None]).reshape(-1)  # (R·T·k,)
        row = (grp[:, None, None] * D + Z.indices).reshape(-1)  # group-major latent slot
        s_u = torch.zeros(G * D, dtype=_F64, device=dev).index_add_(0, row, v).view(G, D)
        q_u = torch.zeros(G * D, dtype=_F64, device=dev).index_add_(0, row, v * v).view(G, D)
        Hk = Hm.reshape(R * T, 1, -1).expand(-1, k, -1).reshape(R * T * k, -1)
        S = torch.zeros(G * D, H.shape[2], dtype=_F64, device=dev)
        S = S.index_add_(0, row, Hk * v[:, None]).view(G, D, -1)
        zero_u = torch.zeros(D, dtype=_F64, device=dev)
        zero_h = torch.zeros(H.shape[2], dtype=_F64, device=dev)
        return self._fold_groups(state, R, zero_u, zero_h, cnt, s_u, s_h, q_u, q_h, S)

    def _fold_groups(self, state: CorrState, n_records: int, su, sh, cnt, s_u, s_h, q_u, q_h, S):
        """Fold the groups' sums (shifted by ``su``, ``sh``) into the total and buckets."""
        keep = cnt > 0
        if not bool(keep.all()):
            cnt, s_u, s_h, q_u, q_h, S = (x[keep] for x in (cnt, s_u, s_h, q_u, q_h, S))
        c = cnt.clamp_min(1.0)[:, None]
        block = sum_groups(cnt, su, sh, s_u, s_h, q_u, q_h, S)  # reads S before it turns
        # The groups' co-moments, in place: S - s_u (s_h / n)ᵀ (one pass, no temporaries).
        c_uh = S.baddbmm_(s_u[:, :, None], (-s_h / c)[:, None, :])
        groups = Moments(
            n=cnt,
            mean_u=su + s_u / c,
            mean_h=sh + s_h / c,
            m2_u=q_u - s_u * s_u / c,
            m2_h=q_h - s_h * s_h / c,
            c_uh=c_uh,
        )
        state.total = state.total.combine(block)
        G = int(cnt.shape[0])
        slots = (state.n_groups + torch.arange(G)) % self.buckets
        # Fewer groups per block than buckets (the usual case): one vectorized union.
        for start in range(0, G, self.buckets):
            part = index(groups, slice(start, start + self.buckets))
            fold(state.buckets, slots[start : start + self.buckets], part)
        state.n_groups += G
        state.n_records += n_records
        return state

    def merge(self, a: CorrState, b: CorrState) -> CorrState:
        return CorrState(
            total=a.total.combine(b.total),
            # b's groups continue a's round-robin: its bucket k is a's bucket k + a.n_groups
            buckets=a.buckets.combine(rolled(b.buckets, a.n_groups % self.buckets)),
            n_groups=a.n_groups + b.n_groups,
            n_records=a.n_records + b.n_records,
            scorable=a.scorable,
        )

    def result(self, state: CorrState, confidence: float = 0.95) -> MeasureResult:
        tot = state.total
        n = float(tot.n)
        r = tot.r().clamp(-1, 1).cpu().numpy()
        var_u = (tot.m2_u / max(n, 1)).cpu().numpy()
        var_h = (tot.m2_h / max(n, 1)).cpu().numpy()
        mean_u2 = (tot.mean_u**2).cpu().numpy()
        mean_h2 = (tot.mean_h**2).cpu().numpy()
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
        """Half-width of the grouped-jackknife confidence interval of ``r``.

        NaN until every bucket holds ``min_bucket_groups`` groups: with one group of 64
        records per bucket, a rare hypothesis's leave-one-out values are few and
        heavy-tailed and the interval was too narrow. Measured over 20 random record
        orders of the quick parentheses LSTM (``benchmarks/bench_coverage.py``), the
        share of converged pairs within their own 95% interval of the full-data value
        was 91.4% from one group per bucket, 94.1% from two, 98.5% from three (the SQL
        LSTM: 96.4%, 97.5%, 98.4%). Three cost reading: early stopping's first error
        comes after 3,840 records instead of 1,280.
        """
        k = self.buckets
        if state.n_groups < self.min_bucket_groups * k or bool((state.buckets.n == 0).any()):
            return np.full(r.shape, np.nan)
        loo = state.total.without(state.buckets).r().clamp(-1, 1).cpu().numpy()  # (K, U, H)
        with np.errstate(invalid="ignore"):
            var = (k - 1) / k * ((loo - loo.mean(0)) ** 2).sum(0)
        err = stdtrit(k - 1, 0.5 + confidence / 2) * np.sqrt(var)
        err[~np.isfinite(r)] = np.nan
        return err
