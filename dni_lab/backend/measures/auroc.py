"""AUROC of each unit as a score for each binary hypothesis, from mergeable histograms.

**Cells.** The first block a state reads fixes, per unit, ``bins`` edges: its order
statistics at evenly spaced ranks, the minimum and maximum among them. A value equal to
an edge falls in that edge's own cell (an *atom*), any other value in the open interval
between two edges (or beyond the outer ones): ``2 * bins + 1`` cells, in the order of
the values. Per jackknife bucket, a state counts each unit's symbols per cell, in total
and where each hypothesis holds (and, once one occurs, where it is undefined). Counts
add, so :meth:`AUROC.merge` is exact: states calibrated on the same first block (the
cluster forks block 0's state, :meth:`AUROC.fork`) merge to what one state reading every
block holds.

**Exactness.** Symbols in different cells are ordered exactly; symbols in one atom are
truly tied and get half credit, as ``sklearn.metrics.roc_auc_score`` gives them. Only
positives and negatives in one open interval are tied by the binning. So the AUROC is
exact for a unit with at most ``bins`` distinct values in its first block and no new one
after (binary, ReLU-sparse with few levels, a latent that is 0 off its token), and
otherwise within :meth:`AUROC.binning_bound` of it (about ``1 / bins`` for a unit whose
values are continuous and unrelated to the hypothesis; ``tests/test_measures_auroc.py``).

**Score.** Signed, like ``corr``: ``2 * AUROC - 1`` (Somers' D), in ``[-1, 1]``, 0 at
chance, 1 where every positive lies above every negative, -1 where below; ``|score|``
is the separation and ranks units (the engine's top-k decisions use ``|score|``), the
sign says the direction, and the AUROC itself is ``(1 + score) / 2``.

**Error.** A grouped jackknife over ``buckets`` buckets of ``group_records`` consecutive
records, dealt round-robin as ``corr`` deals them (its reasons hold here: symbols of one
record are not independent). ``err`` is the sampling error of the binned score; the
binning bound is not in it (reading more cannot shrink it, so it would hold early
stopping back forever where it exceeds eps).

**Size.** A state holds ``buckets * n_units * (2 * bins + 1) * (n_hyps + 1)`` float64
counts: 58 MB at the defaults for 128 units and 10 hypotheses, about ``2 * bins + 1`` times a
``corr`` state's co-moments. Pass fewer ``bins`` or ``buckets`` for wide unit sets.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import stdtrit

from ..errors import MeasureError
from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    CHUNK_BYTES,
    F64,
    add_counts,
    binary_reasons,
    count_undefined,
    opening_reasons,
    set_reason,
)
from ._roc import auc_of_counts
from .base import Measure, MeasureResult, StateShape
from .corr import Corr


@dataclass
class RankState:
    """Per-unit cell edges and, per jackknife bucket, each unit's counts per cell."""

    edges: torch.Tensor | None  # (U, bins) float32, fixed by the first block; None before
    total: torch.Tensor  # (K, U, C) every real symbol
    pos: torch.Tensor  # (K, U, C, H) symbols where h > 0.5
    lo: torch.Tensor  # (U,) smallest value read (exact constancy test)
    hi: torch.Tensor  # (U,) largest value read
    n_groups: int  # groups of records dealt so far (decides the next bucket)
    info: list[HypothesisInfo] | None
    n_records: int = 0
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out
    undef: torch.Tensor | None = None  # (K, U, C, H) of ``total``, where h is undefined


@dataclass
class Classes:
    """Per-cell counts of positives and negatives, summed (``(U, C, H)``) and with each
    bucket left out (``(K, U, C, H)``)."""

    pos: torch.Tensor
    neg: torch.Tensor
    loo_pos: torch.Tensor
    loo_neg: torch.Tensor


def jackknife_err(loo: np.ndarray, full: np.ndarray, confidence: float) -> np.ndarray:
    """Half-width of the ``confidence`` interval from ``K`` leave-one-bucket-out values."""
    k = loo.shape[0]
    with np.errstate(invalid="ignore"):
        var = (k - 1) / k * ((loo - loo.mean(0)) ** 2).sum(0)
    err = stdtrit(k - 1, 0.5 + confidence / 2) * np.sqrt(var)
    err[~np.isfinite(full)] = np.nan
    return err


class AUROC(Measure):
    """Signed area under the ROC curve of each unit as a score for a binary hypothesis.

    Parameters
    ----------
    bins : int
        Cell edges per unit, from its first block's order statistics (see the module).
    group_records : int
        Consecutive records per jackknife group (overlapping records must share one).
    buckets : int
        Jackknife buckets.
    min_bucket_groups : int
        Groups every bucket must hold before ``err`` is defined.
    """

    name = "auroc"
    kinds = ("binary",)
    has_error = True
    one_vs_rest = True

    def __init__(
        self,
        bins: int = 128,
        group_records: int = 4,
        buckets: int = 20,
        min_bucket_groups: int = 2,
    ):
        self.bins = bins
        self.group_records = group_records
        self.buckets = buckets
        self.min_bucket_groups = min_bucket_groups

    def empty_state(self, shape: StateShape) -> RankState:
        if self.bins < 2 or self.buckets < 2:
            raise MeasureError(
                f"{type(self).__name__}(bins={self.bins}, buckets={self.buckets}): both must "
                "be at least 2 (bins: the minimum and maximum are edges; buckets: the jackknife)."
            )
        K, nu, C = self.buckets, shape.n_units, 2 * self.bins + 1
        return RankState(
            edges=None,
            total=shape.zeros(K, nu, C),
            pos=shape.zeros(K, nu, C, shape.n_hyps),
            lo=torch.full((nu,), np.inf, dtype=F64, device=shape.device),
            hi=torch.full((nu,), -np.inf, dtype=F64, device=shape.device),
            n_groups=0,
            info=shape.info,
        )

    def fork(self, state: RankState) -> RankState:
        """An empty state with ``state``'s edges: blocks it reads merge with ``state``."""
        out = copy.deepcopy(state)
        for t in (out.total, out.pos):
            t.zero_()
        out.lo.fill_(np.inf)
        out.hi.fill_(-np.inf)
        out.n_groups, out.n_records, out.n_undef, out.undef = 0, 0, None, None
        return out

    def _calibrate(self, Uf: torch.Tensor) -> torch.Tensor:
        """``(U, bins)`` edges: order statistics at evenly spaced ranks (ties repeat)."""
        n = Uf.shape[0]
        ranks = torch.linspace(0, n - 1, self.bins, device=Uf.device).round().long()
        return Uf.sort(0).values.index_select(0, ranks).T.contiguous()

    def cells(self, edges: torch.Tensor, Uf: torch.Tensor) -> torch.Tensor:
        """``(N, U)`` cell of each value: ``2j + 1`` where it equals edge ``j``, else ``2j``
        with ``j`` the number of edges below it (repeated edges leave empty cells)."""
        x = Uf.T.contiguous()
        j = torch.searchsorted(edges, x)
        at = edges.gather(1, j.clamp_max(edges.shape[1] - 1))
        return (2 * j + ((j < edges.shape[1]) & (at == x)).long()).T

    def update(self, state: RankState, U, H, mask):
        state.n_records += int(U.shape[0])
        mask = mask.to(device=U.device, dtype=torch.bool)
        if not bool(mask.any()):
            return state
        count_undefined(state, H, mask)
        slot, _, n_new = Corr._slots(self, state, mask)  # corr's round-robin deal, shared
        bucket = ((state.n_groups + slot) % self.buckets)[:, None].expand(mask.shape)[mask]
        Uf, Hf = U[mask].float(), H.to(U.device)[mask].float()
        dev = state.total.device
        if state.edges is None:
            state.edges = self._calibrate(Uf).to(dev)
        state.lo = torch.minimum(state.lo, Uf.min(0).values.to(F64).to(dev))
        state.hi = torch.maximum(state.hi, Uf.max(0).values.to(F64).to(dev))
        K, nu, C, _ = state.pos.shape
        # a chunk's (rows, U) int64 cell indices, several of them alive at once
        per = max(1, CHUNK_BYTES // (8 * 4 * nu))
        nan = torch.isnan(Hf)
        for r0 in range(0, Uf.shape[0], per):
            cell = self.cells(state.edges.to(Uf.device), Uf[r0 : r0 + per])
            flat = (bucket[r0 : r0 + per, None] * nu + torch.arange(nu, device=Uf.device)) * C
            flat = flat + cell  # (rows, U): index into (K, U, C)
            counts = torch.bincount(flat.reshape(-1), minlength=K * nu * C)
            state.total += counts.view(K, nu, C).to(F64).to(dev)
            state.pos += self._pair_counts(flat, Hf[r0 : r0 + per] > 0.5, (K, nu, C), dev)
            if bool(nan[r0 : r0 + per].any()):
                part = self._pair_counts(flat, nan[r0 : r0 + per], (K, nu, C), dev)
                state.undef = add_counts(state.undef, part)
        state.n_groups += n_new
        return state

    @staticmethod
    def _pair_counts(flat: torch.Tensor, B: torch.Tensor, shape: tuple[int, ...], dev):
        """``(K, U, C, H)`` counts of the cells ``flat`` ``(rows, U)`` where ``B`` ``(rows, H)``
        holds: one bincount over the true cells of ``B``, so a rare hypothesis costs its
        positives, not every symbol."""
        nh = B.shape[1]
        rows, hyp = B.nonzero(as_tuple=True)
        idx = (flat.index_select(0, rows) * nh + hyp[:, None]).reshape(-1)
        counts = torch.bincount(idx, minlength=int(np.prod(shape)) * nh)
        return counts.view(*shape, nh).to(F64).to(dev)

    def merge(self, a: RankState, b: RankState) -> RankState:
        dev = a.total.device
        if a.edges is not None and b.edges is not None:
            if not torch.equal(a.edges, b.edges.to(dev)):
                raise MeasureError(
                    f"cannot merge {type(self).__name__} states with different cell edges: "
                    "edges are fixed by the first block a state reads, so states to be merged "
                    "must be forked from one calibrated state (measure.fork(state))."
                )
        edges = a.edges if a.edges is not None else b.edges
        shift = a.n_groups % self.buckets  # b's groups continue a's round-robin

        def rolled(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else torch.roll(t.to(dev), shift, 0)

        return RankState(
            edges=None if edges is None else edges.to(dev).clone(),
            total=a.total + rolled(b.total),
            pos=a.pos + rolled(b.pos),
            lo=torch.minimum(a.lo, b.lo.to(dev)),
            hi=torch.maximum(a.hi, b.hi.to(dev)),
            n_groups=a.n_groups + b.n_groups,
            info=a.info,
            n_records=a.n_records + b.n_records,
            n_undef=add_counts(a.n_undef, b.n_undef),
            undef=add_counts(a.undef, rolled(b.undef)),
        )

    def classes(self, state: RankState) -> Classes:
        """Positives and negatives per cell, in total and with each bucket left out."""
        neg_b = state.total[..., None] - state.pos
        if state.undef is not None:  # an undefined value is in neither class
            neg_b = neg_b - state.undef
        pos, neg = state.pos.sum(0), neg_b.sum(0)
        return Classes(pos, neg, pos[None] - state.pos, neg[None] - neg_b)

    def reasons(self, state: RankState) -> np.ndarray:
        """Null reasons, most fundamental first: nothing read, kind, constant h, constant u."""
        _, nu, _, nh = state.pos.shape
        n_read = float(state.total[:, 0].sum()) if nu else 0.0
        reason = opening_reasons(self, nu, nh, state.info, n_read)
        if nu:
            n1 = state.pos[:, 0].sum((0, 1)).cpu().numpy()
            und = 0.0 if state.undef is None else state.undef[:, 0].sum((0, 1)).cpu().numpy()
            binary_reasons(reason, n_true=n1, n_false=n_read - und - n1)
        const = (state.lo >= state.hi).cpu().numpy()
        set_reason(reason, const[:, None], "unit is constant over the symbols read")
        return reason

    def has_jackknife(self, state: RankState) -> bool:
        """Whether every bucket holds ``min_bucket_groups`` groups (``err`` is defined)."""
        enough = state.n_groups >= self.min_bucket_groups * self.buckets
        return enough and bool((state.total.sum((1, 2)) > 0).all())

    def result(self, state: RankState, confidence: float = 0.95) -> MeasureResult:
        reason = self.reasons(state)
        c = self.classes(state)
        score = (2 * auc_of_counts(c.pos, c.neg) - 1).cpu().numpy()
        score = np.where(reason == None, score, np.nan)  # noqa: E711
        err = np.full(score.shape, np.nan)
        if self.has_jackknife(state):
            loo = (2 * auc_of_counts(c.loo_pos, c.loo_neg) - 1).cpu().numpy()
            err = jackknife_err(loo, score, confidence)
        und = np.zeros(score.shape[1]) if state.n_undef is None else state.n_undef.cpu().numpy()
        return MeasureResult(score, score.copy(), err, reason, n_undefined=und)

    def binning_bound(self, state: RankState) -> np.ndarray:
        """``(U, H)``: how far the score may lie from the exact (unbinned) one.

        Positives and negatives sharing an open-interval cell are scored as ties; their
        true order could give any share of those pairs, so the exact AUROC is within half
        their share of all pairs, the score (``2A - 1``) within their share. 0 where every
        value read is an edge.
        """
        c = self.classes(state)
        inner = (c.pos * c.neg)[:, 0::2].sum(1)  # even cells are the open intervals
        pairs = c.pos.sum(1) * c.neg.sum(1)
        return torch.where(pairs > 0, inner / pairs.clamp_min(1.0), torch.nan).cpu().numpy()
