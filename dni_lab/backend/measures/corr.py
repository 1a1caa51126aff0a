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

A hypothesis undefined (NaN) at some symbols is correlated over the others, pair by
pair: the moments read it as 0 there, and an :class:`~.moments.Excluded` beside them
(the units' raw sums over those symbols, in total and per bucket) takes them back
out (:func:`~.moments.defined`). Blocks without undefined values cost nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import stdtrit

from ..extraction.sparse_block import SparseBlock
from ._common import add_counts, count_undefined, kind_reasons, set_reason
from .base import HypothesisInfo, Measure, MeasureResult, filled, kind_mask, undefined
from .moments import Excluded, Moments, block_mean, defined, fold, rolled, sum_groups

_F64 = torch.float64
#: Most values of a block's runs summed by one float64 cumulative sum (its copy: 16 MiB)
_CUMSUM_MAX = 1 << 21


@dataclass
class CorrState:
    total: Moments  # every symbol read
    buckets: Moments  # (K, ...) groups of records dealt round-robin, for the jackknife
    n_groups: int  # groups of records folded so far (decides the next bucket)
    n_records: int
    scorable: np.ndarray  # (H,) hypothesis kinds this measure accepts
    info: list[HypothesisInfo] | None = None
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined
    x_total: Excluded | None = None  # the units over those symbols, every group
    x_buckets: Excluded | None = None  # the same per bucket (K, ...)

    @property
    def n(self) -> torch.Tensor:
        return self.total.n


def _run_records(T: int, rows: int) -> int:
    """Records per run of the product: at most about ``rows`` symbols (at least one record)."""
    return max(1, rows // max(T, 1))


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
        Consecutive records per group (a group is the jackknife's unit of independence:
        records that overlap, such as sliding windows, must fall in one group).
    buckets : int
        Jackknife buckets.
    rel_tol : float
        Relative variance below which a unit or hypothesis counts as constant.
    min_bucket_groups : int
        Groups every bucket must hold before ``err`` is defined (see ``_error``).
    """

    name = "corr"
    joint = False
    # categorical codes are no quantity: each category is scored as its own binary
    # indicator (one_vs_rest), never the codes
    kinds = ("binary", "continuous")
    has_error = True
    one_vs_rest = True
    null_score = 0.0

    def error_df(self) -> float:
        return self.buckets - 1  # err is a t interval over the jackknife's buckets (_error)

    def __init__(
        self,
        group_records: int = 4,
        buckets: int = 20,
        rel_tol: float = 1e-10,
        min_bucket_groups: int = 2,
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
            info=info,
        )

    def update(self, state: CorrState, U, H, mask):
        if not bool(mask.any()):
            return state
        und = count_undefined(state, H, mask)
        x_groups = None
        if und is not None:  # read as 0 here, then taken back out per pair (Excluded)
            H = filled(H)
        # Shifting by an approximate mean keeps float32 products as accurate as centered
        # ones. The shift is the block's own mean, never the running one: the float32
        # rounding of a block's moments then depends on the block alone, so states that
        # read blocks apart (cluster shards) merge to what one state reading them gives,
        # to float64 rounding (a running-mean shift made them differ by up to 1e-5).
        su, sh = block_mean(U, mask), block_mean(H.to(U.dtype), mask)
        slot, P, n_new = self._slots(state, mask)
        R, T, nu, nh = int(U.shape[0]), int(U.shape[1]), int(U.shape[2]), int(H.shape[2])
        # The product runs over short runs of records whose float32 results add up in
        # float64: a float32 GEMM's error grows with the length it accumulates over. Over
        # a whole group (3,072 symbols) it put a rarely active unit's correlation 4.5e-7
        # off float64; over about 64 symbols, 5e-8 (benchmarks/bench_features_sparse.py,
        # d_sae 16,384 at k 32, and tests/test_measures_corr.py). A run is at least twice as long
        # as the hypotheses are many, so that its (U, H+1) result stays smaller than the
        # run's own (symbols, U) block: with many hypotheses, the float64 sums of short
        # runs' results cost more than the product.
        sub = _run_records(T, max(64, 2 * (nh + 1)))
        dev, f32 = U.device, U.dtype
        S = torch.zeros(P, nu, nh + 1, dtype=_F64, device=dev)
        s_h_all = torch.zeros(P, nh + 1, dtype=_F64, device=dev)
        q_h = torch.zeros(P, nh, dtype=_F64, device=dev)
        q_u = torch.zeros(P, nu, dtype=_F64, device=dev)
        su32, sh32 = su.to(f32), sh.to(f32)
        # Slot by slot, its records gathered: a run of the product then reaches across the
        # slot's groups (runs cut at every 4-record group edge made item 1 of
        # benchmarks/run_benchmarks.py 3x slower), and the shifted copies stay slot-sized
        # and in cache (block-sized ones cost more in fresh pages than the product).
        order = torch.argsort(slot, stable=True)
        start = 0
        for j, c in enumerate(torch.bincount(slot, minlength=P).tolist()):
            rows = order[start : start + c]
            start += c
            mj = mask.index_select(0, rows)
            m = mj[..., None].to(f32)
            Ud = U.index_select(0, rows).sub_(su32)
            if not bool(mj.all()):
                Ud.mul_(m)
            # The mask column makes the one product also return the units' sums.
            Hd = torch.cat([(H.index_select(0, rows).to(f32) - sh32) * m, m], dim=2)
            for lo, hi, n in _runs(c, sub):
                Pr = torch.bmm(
                    Ud[lo:hi].reshape(n, -1, nu).transpose(1, 2),
                    Hd[lo:hi].reshape(n, -1, nh + 1),
                )  # (n, U, H+1): the one product, run by run
                if n > 1 and Pr.numel() <= _CUMSUM_MAX:
                    # many small runs (short records, few hypotheses) added into float64 one
                    # after another in one operation: a cumulative sum is sequential, so the
                    # sums are those of n additions, without n operations' fixed costs
                    S[j].add_(torch.cumsum(Pr, 0, dtype=_F64)[-1])
                else:
                    for r in range(n):  # added into float64 as they are, no float64 copy
                        S[j].add_(Pr[r])
            Hd64 = Hd.reshape(-1, nh + 1).to(_F64)
            s_h_all[j] = Hd64.sum(0)
            q_h[j] = Hd64[:, :-1].square_().sum(0)
            # torch sums a dimension in cascade, so the float32 per-record sums lose
            # nothing measurable; the float32 ``vector_norm`` this replaces cost up to 1e-6
            # in the correlation of a rarely active unit.
            q_u[j] = Ud.square_().sum(1).sum(0, dtype=_F64)
        cnt, s_h, s_u, S = s_h_all[:, -1], s_h_all[:, :-1], S[:, :, -1], S[:, :, :-1]
        if und is not None:
            x_groups = self._excluded_slots(U, und, mask, slot, P)
        return self._fold_groups(state, R, n_new, su, sh, cnt, s_u, s_h, q_u, q_h, S, x_groups)

    def _slots(self, state: CorrState, mask: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        """Each record's bucket slot in this block, the slots used, and the groups dealt.

        Groups of ``group_records`` consecutive records holding a real symbol are dealt
        round-robin to the buckets, continuing from ``state.n_groups``. A block's groups
        are summed per bucket they land in (at most ``buckets`` slots, whatever the group
        size): Chan's union is exact, so folding a bucket's groups together or one by one
        gives the same moments, and the block's co-moments never exceed ``(buckets, U, H)``.
        Slot ``j`` of the block is bucket ``(state.n_groups + j) % buckets``. A slot's
        records depend on the block alone (``rank % buckets``), so states that read blocks
        apart merge to what one state reading them gives.
        """
        R, g, K = int(mask.shape[0]), self.group_records, self.buckets
        grp = torch.arange(R, device=mask.device) // g
        G = -(-R // g)
        real = torch.zeros(G, dtype=torch.long, device=mask.device)
        real.index_add_(0, grp, mask.any(1).long())
        keep = real > 0
        rank = torch.cumsum(keep.long(), 0) - 1  # empty groups: no symbol, any slot will do
        n_new = int(keep.sum())
        return (rank.clamp_min(0) % K)[grp], min(n_new, K), n_new

    def _excluded_slots(self, U, und, mask, slot, P) -> Excluded:
        """Per bucket slot (:meth:`_slots`): the units' raw float64 sums where each
        hypothesis is undefined."""
        Um = torch.where(mask[..., None], U, 0.0).to(_F64)  # padding may hold anything
        X = und.to(_F64)
        parts = []
        for j in range(P):
            rows = slot == j
            u = Um[rows].reshape(-1, U.shape[2])
            x = X[rows].reshape(-1, X.shape[2])
            parts.append((x.sum(0), u.T @ x, (u * u).T @ x))
        return Excluded(*(torch.stack(t) for t in zip(*parts, strict=True)))

    def update_sparse(self, state: CorrState, Z: SparseBlock, H, mask):
        """:meth:`update` for latents given as their nonzeros (a TopK or JumpReLU set).

        The groups' sums come from sparse × dense products in float64: each of the
        ``k`` active latents of a symbol adds its value times the symbol's hypotheses
        to its row, so a block costs ``R·T·k·H`` instead of ``R·T·n_units·H``. The
        moments are then the dense path's, from unshifted sums.
        """
        if not bool(mask.any()):
            return state
        if undefined(H, mask) is not None:  # undefined values: the dense path leaves them out
            return self.update(state, Z.dense(), H, mask)
        R, T, k = Z.values.shape
        D, dev = Z.width, Z.values.device
        grp, G, n_new = self._slots(state, mask)
        m = mask.to(_F64)
        Hm = H.to(_F64) * m[..., None]  # (R, T, H), padding zeroed
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
        return self._fold_groups(state, R, n_new, zero_u, zero_h, cnt, s_u, s_h, q_u, q_h, S)

    def _fold_groups(
        self, state: CorrState, n_records: int, n_new: int, su, sh, cnt, s_u, s_h, q_u, q_h,
        S, x_groups: Excluded | None = None,
    ):  # fmt: skip
        """Fold the slots' sums (shifted by ``su``, ``sh``) into the total and buckets.

        Slot ``j`` goes to bucket ``(state.n_groups + j) % buckets`` (:meth:`_slots`);
        ``n_new`` groups were dealt. ``x_groups``: the slots' sums over undefined symbols
        (:meth:`_excluded_slots`).
        """
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
        slots = (state.n_groups + torch.arange(int(cnt.shape[0]))) % self.buckets
        if x_groups is not None:
            self._fold_excluded(state, x_groups, slots)
        fold(state.buckets, slots, groups)  # one vectorized union (at most ``buckets`` slots)
        state.n_groups += n_new
        state.n_records += n_records
        return state

    def _fold_excluded(self, state: CorrState, x: Excluded, slots: torch.Tensor) -> None:
        dev = state.total.n.device
        x = Excluded(x.n.to(dev), x.s.to(dev), x.q.to(dev))
        if state.x_total is None:
            K, (nu, nh) = self.buckets, x.s.shape[1:]
            z = lambda *d: torch.zeros(*d, dtype=_F64, device=dev)  # noqa: E731
            state.x_total = Excluded(z(nh), z(nu, nh), z(nu, nh))
            state.x_buckets = Excluded(z(K, nh), z(K, nu, nh), z(K, nu, nh))
        state.x_total = state.x_total + Excluded(x.n.sum(0), x.s.sum(0), x.q.sum(0))
        idx = slots.to(dev)
        b = state.x_buckets
        b.n.index_add_(0, idx, x.n)
        b.s.index_add_(0, idx, x.s)
        b.q.index_add_(0, idx, x.q)

    def merge(self, a: CorrState, b: CorrState) -> CorrState:
        shift = a.n_groups % self.buckets
        x_total, x_buckets = a.x_total, a.x_buckets
        if b.x_total is not None:  # b's groups continue a's round-robin, as its buckets do
            dev = a.total.n.device
            bt = Excluded(b.x_total.n.to(dev), b.x_total.s.to(dev), b.x_total.q.to(dev))
            bb = Excluded(*(t.to(dev) for t in (b.x_buckets.n, b.x_buckets.s, b.x_buckets.q)))
            bb = bb.rolled(shift)
            x_total = bt if x_total is None else x_total + bt
            x_buckets = bb if x_buckets is None else x_buckets + bb
        return CorrState(
            total=a.total.combine(b.total),
            # b's groups continue a's round-robin: its bucket k is a's bucket k + a.n_groups
            buckets=a.buckets.combine(rolled(b.buckets, shift)),
            n_groups=a.n_groups + b.n_groups,
            n_records=a.n_records + b.n_records,
            scorable=a.scorable,
            info=a.info,
            n_undef=add_counts(a.n_undef, b.n_undef),
            x_total=x_total,
            x_buckets=x_buckets,
        )

    def result(self, state: CorrState, confidence: float = 0.95) -> MeasureResult:
        tot = state.total
        n_h = tot.c_uh.shape[1]
        if state.x_total is None:
            n = np.full(n_h, float(tot.n))
            r = tot.r().clamp(-1, 1).cpu().numpy()
            m2_u, mean_u = tot.m2_u[:, None], tot.mean_u[:, None]
            m2_h, mean_h = tot.m2_h, tot.mean_h
        else:  # each pair over the symbols where its hypothesis is defined
            pm = defined(tot, state.x_total)
            n = pm.n.cpu().numpy()
            r = pm.r().clamp(-1, 1).cpu().numpy()
            m2_u, mean_u, m2_h, mean_h = pm.m2_u, pm.mean_u, pm.m2_h, pm.mean_h
        safe = np.maximum(n, 1.0)
        var_u = m2_u.cpu().numpy() / safe
        var_h = m2_h.cpu().numpy() / safe
        const_u = var_u <= self.rel_tol * np.maximum(mean_u.cpu().numpy() ** 2, 1.0)
        const_h = var_h <= self.rel_tol * np.maximum(mean_h.cpu().numpy() ** 2, 1.0)
        # the most fundamental reason first (the first written wins): a hypothesis that is
        # constant nulls its rows as such, whatever its units do
        reason = np.full(r.shape, None, dtype=object)
        set_reason(
            reason,
            (n < 3)[None, :],
            "fewer than 3 symbols read"
            + (" where the hypothesis is defined" if state.x_total is not None else ""),
        )
        kind_reasons(reason, self.name, state.info, self.kinds)
        set_reason(reason, const_h[None, :], "hypothesis is constant over the symbols read")
        set_reason(reason, np.broadcast_to(const_u, r.shape),
                   "unit is constant over the symbols read")  # fmt: skip
        r = np.where(reason == None, r, np.nan)  # noqa: E711
        err = self._error(state, r, confidence)
        und = np.zeros(n_h) if state.n_undef is None else state.n_undef.cpu().numpy()
        return MeasureResult(r, r.copy(), err, reason, n_undefined=und)

    def _error(self, state: CorrState, r: np.ndarray, confidence: float) -> np.ndarray:
        """Half-width of the grouped-jackknife confidence interval of ``r``.

        NaN until every bucket holds ``min_bucket_groups`` groups: 2 groups of 4 records
        in each of 20 buckets, so the first error comes after 160 records. Groups of 64
        and 3 per bucket (3,840 records) made early stopping a fixed floor: every eps from
        0.25 down to 0.025 stopped at the same 3,840 records. Over 8 random orders of the
        quick parentheses LSTM (10,000 records, blocks of 64) the share of converged pairs
        within their own 95% interval was 95.8% with groups of 8 and one per bucket, 98.8%
        with 4 and two (the default) and 98.5% with 64 and three; within eps, 97.9% or
        more at eps 0.01 to 0.1 (``benchmarks/bench_coverage.py --sweep`` stores the
        defaults' figures). Groups of consecutive records, not single records, because
        consecutive records may overlap (sliding windows of one query).
        """
        k = self.buckets
        if state.n_groups < self.min_bucket_groups * k or bool((state.buckets.n == 0).any()):
            return np.full(r.shape, np.nan)
        loo_m = state.total.without(state.buckets)
        if state.x_total is not None:  # each left-out bucket's undefined symbols too
            loo_m = defined(loo_m, state.x_total - state.x_buckets)
        loo = loo_m.r().clamp(-1, 1).cpu().numpy()  # (K, U, H)
        with np.errstate(invalid="ignore"):
            var = (k - 1) / k * ((loo - loo.mean(0)) ** 2).sum(0)
        err = stdtrit(k - 1, 0.5 + confidence / 2) * np.sqrt(var)
        err[~np.isfinite(r)] = np.nan
        return err
