"""Intersection over union of a thresholded unit and a binary hypothesis mask.

:class:`IoU` follows NetDissect: a unit is "on" where it exceeds the top
``quantile`` of its activations, and scores ``|A ∩ B| / |A ∪ B|`` against the
hypothesis mask ``B = {h > 0.5}``. The threshold is fixed from the *first block
a state reads* (its real symbols), so that intersections of later blocks can be
counted in one pass and added; a state that reads everything in one block gets
NetDissect's exact threshold. States merge only if their thresholds are equal.

:class:`LocalIoU` is the DeepBase blog's "LocalIOU": per record, the unit is
thresholded at that record's own top ``quantile`` and compared with that
record's mask; the score is the mean IoU over records whose mask is non-empty.
It needs no calibration, and merging adds per-record sums and counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    CHUNK_BYTES,
    F64,
    SymbolMeasure,
    add_counts,
    binary_reasons,
    count_undefined,
    finish,
    kind_reasons,
    n_undefined,
    new_reasons,
    opening_reasons,
    set_reason,
)
from .base import Measure, MeasureResult, StateShape, any_nan


def quantile_rows(X: torch.Tensor, q: float) -> torch.Tensor:
    """Column-wise ``q`` quantile of ``X`` (N, D) with numpy's default linear interpolation.

    Only the two order statistics around ``q`` are needed, so the shorter tail
    is taken with ``topk`` (a top-0.5% threshold reads ~0.5% of a full sort).
    """
    n = X.shape[0]
    pos = q * (n - 1)
    k = int(np.floor(pos))
    k1 = min(k + 1, n - 1)
    if n - k <= k1 + 1:
        top = torch.topk(X, n - k, dim=0).values  # descending: top[i] is order statistic n-1-i
        lo = top[n - 1 - k]
        hi = top[n - 1 - k1]
    else:
        bottom = torch.topk(X, k1 + 1, dim=0, largest=False).values  # ascending
        lo = bottom[k]
        hi = bottom[k1]
    return lo + (pos - k) * (hi - lo)


def top_threshold(X: torch.Tensor, q: float) -> torch.Tensor:
    """Per column of ``X`` (N, D): its ``q`` quantile, lowered where no value exceeds it.

    A unit whose top values tie (a latent at exactly 1.0 on 99 of 412 symbols, 0 elsewhere)
    has its quantile *at* its maximum, and ``u > threshold`` would never hold. There the
    threshold drops to the largest value below the maximum, so the unit is on at its
    maximum. A column with one value keeps its quantile: it is constant, and never on.
    """
    t = quantile_rows(X, q)
    below = torch.where(X < t, X, -torch.inf).amax(0)  # -inf where nothing is below
    stuck = ~(X > t).any(0) & torch.isfinite(below)
    return torch.where(stuck, below, t)


@dataclass
class IoUState:
    """Global threshold per unit and counts of on-symbols and their intersections."""

    threshold: torch.Tensor | None  # (U,) fixed by the first block; None before
    inter: torch.Tensor  # (U, H) |A ∩ B|
    a: torch.Tensor  # (U,) |A|
    b: torch.Tensor  # (H,) |B|
    n: float
    info: list[HypothesisInfo] | None
    n_records: int = 0
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out
    a_undef: torch.Tensor | None = None  # (U, H) of |A|, the symbols where h is undefined


class IoU(SymbolMeasure):
    """NetDissect-style IoU of each unit's top-quantile region with a binary hypothesis.

    Parameters
    ----------
    quantile : float
        A unit is on where its value exceeds this quantile of its activations
        over the first block the state reads; where its top values tie, so that none
        exceeds the quantile, where it is at its maximum (:func:`top_threshold`).
    """

    name = "iou"
    kinds = ("binary",)

    def __init__(self, quantile: float = 0.995):
        self.quantile = quantile

    def empty_state(self, shape: StateShape) -> IoUState:
        return IoUState(
            threshold=None,
            inter=shape.per_pair(),
            a=shape.per_unit(),
            b=shape.per_hyp(),
            n=0.0,
            info=shape.info,
        )

    def fold(self, state: IoUState, Uf: torch.Tensor, Hf: torch.Tensor) -> IoUState:
        dev = state.inter.device
        if state.threshold is None:
            state.threshold = top_threshold(Uf, self.quantile).to(dev)
        A = (Uf > state.threshold.to(Uf.device)).float()
        B = (Hf > 0.5).float()  # an undefined (NaN) value is outside the mask
        state.inter += (A.T @ B).to(F64).to(dev)  # counts < 2**24 per block are exact in float32
        state.a += A.sum(0).to(F64).to(dev)
        if any_nan(Hf):  # |A| of each pair counts the hypothesis's defined symbols only
            nan = torch.isnan(Hf).float()
            state.a_undef = add_counts(state.a_undef, (A.T @ nan).to(F64).to(dev))
        state.b += B.sum(0).to(F64).to(dev)
        state.n += float(Uf.shape[0])
        return state

    def merge(self, a: IoUState, b: IoUState) -> IoUState:
        dev = a.inter.device
        t = a.threshold if a.threshold is not None else b.threshold
        if a.threshold is not None and b.threshold is not None:
            if not torch.equal(a.threshold, b.threshold.to(dev)):
                raise ValueError(
                    "cannot merge IoU states with different unit thresholds: thresholds are "
                    "fixed by the first block a state reads, so states to be merged must be "
                    "calibrated on the same first block"
                )
        return IoUState(
            None if t is None else t.to(dev).clone(),
            a.inter + b.inter.to(dev), a.a + b.a.to(dev), a.b + b.b.to(dev),
            a.n + b.n, a.info, a.n_records + b.n_records,
            add_counts(a.n_undef, b.n_undef), add_counts(a.a_undef, b.a_undef),
        )  # fmt: skip

    def result(self, state: IoUState, confidence: float = 0.95) -> MeasureResult:
        reason = opening_reasons(self, *state.inter.shape, state.info, state.n)
        b = state.b.cpu().numpy()
        a = state.a.cpu().numpy()
        n_def = state.n - n_undefined(state, len(b))
        binary_reasons(reason, n_true=b, n_false=n_def - b)
        set_reason(
            reason,
            (a == 0)[:, None],
            "unit never exceeds its top-quantile threshold (it was constant over the first "
            "block read, which fixes the threshold)",
        )
        a_pair = state.a[:, None] if state.a_undef is None else state.a[:, None] - state.a_undef
        union = a_pair + state.b[None, :] - state.inter
        iou = (state.inter / union.clamp_min(1.0)).cpu().numpy()
        return finish(iou, reason, state=state)


@dataclass
class LocalIoUState:
    """Sums of per-record IoUs and the counts needed to average and explain them."""

    iou_sum: torch.Tensor  # (U, H) sum over records with a non-empty mask
    n_valid: torch.Tensor  # (H,) records with a non-empty mask
    n_partial: torch.Tensor  # (H,) of those, records where the mask is not every symbol
    fired: torch.Tensor  # (U,) records where the unit exceeded its record threshold
    info: list[HypothesisInfo] | None
    n_records: int = 0
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out


class LocalIoU(Measure):
    """Mean over records of the IoU between a unit's per-record top region and the mask.

    Parameters
    ----------
    quantile : float
        Per record, a unit is on where it exceeds this quantile of its values
        on that record's real symbols.
    """

    name = "local_iou"
    kinds = ("binary",)

    def __init__(self, quantile: float = 0.9):
        self.quantile = quantile

    def empty_state(self, shape: StateShape) -> LocalIoUState:
        return LocalIoUState(
            iou_sum=shape.per_pair(),
            n_valid=shape.per_hyp(),
            n_partial=shape.per_hyp(),
            fired=shape.per_unit(),
            info=shape.info,
        )

    def record_thresholds(self, U: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-record, per-unit quantile over real symbols (numpy's linear rule).

        ``U`` is laid out ``(R, n_units, T)`` so that sorts run along contiguous
        memory; the result is ``(R, n_units)``. Padding is sorted to the end as
        +inf, so the order statistics of each record's real symbols come first.
        """
        R, n_units, _ = U.shape
        L = mask.sum(1)  # (R,)
        S = U.masked_fill(~mask[:, None, :], float("inf")).sort(dim=2).values
        # Positions in float64 as numpy does: 0.9 * 10 must floor to 9, not 8.
        pos = self.quantile * (L - 1).clamp_min(0).to(F64)
        k = pos.floor().long()
        k1 = torch.minimum(k + 1, (L - 1).clamp_min(0))
        lo = S.gather(2, k[:, None, None].expand(R, n_units, 1))[..., 0]
        hi = S.gather(2, k1[:, None, None].expand(R, n_units, 1))[..., 0]
        t = lo + ((pos - k)[:, None] * (hi - lo)).to(lo.dtype)
        return torch.where((L > 0)[:, None], t, float("inf"))

    def update(
        self, state: LocalIoUState, U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor
    ) -> LocalIoUState:
        H = H.to(U.device).float()
        mask = mask.to(device=U.device, dtype=torch.bool)
        R, T, n_units = U.shape
        n_hyps = H.shape[2]
        dev = state.iou_sum.device
        state.n_records += int(R)
        # per record, a pair's IoU reads the symbols where the hypothesis is defined
        und = count_undefined(state, H, mask)
        # The per-record (U, H) intersection table dominates memory: bound its record count.
        per = max(1, CHUNK_BYTES // (4 * (2 * n_units * n_hyps + T * (3 * n_units + n_hyps))))
        for r0 in range(0, R, per):
            Ur = U[r0 : r0 + per].float().transpose(1, 2).contiguous()  # (R, U, T)
            Hr = H[r0 : r0 + per]
            mr = mask[r0 : r0 + per]
            L = mr.sum(1)
            t = self.record_thresholds(Ur, mr)
            A = ((Ur > t[..., None]) & mr[:, None, :]).float()  # (R, U, T)
            B = ((Hr > 0.5) & mr[..., None]).float()  # (R, T, H); NaN > 0.5 is False
            inter = torch.bmm(A, B)  # (R, U, H): the one batched product per chunk
            a = A.sum(2)[:, :, None]  # (R, U, 1)
            b = B.sum(1)  # (R, H)
            Lh = L[:, None]
            if und is not None:  # |A| and the length per hypothesis: its defined symbols
                D = (mr[..., None] & ~und[r0 : r0 + per]).float()  # (R, T, H)
                a = torch.bmm(A, D)
                Lh = D.sum(1)
            # A record whose mask is empty has inter = 0, hence IoU 0: it adds nothing
            # to the sum, and n_valid leaves it out of the mean.
            union = torch.add(a, b[:, None, :]).sub_(inter).clamp_min_(1.0)
            state.iou_sum += inter.div_(union).sum(0).to(F64).to(dev)
            valid = b > 0
            state.n_valid += valid.sum(0).to(F64).to(dev)
            state.n_partial += (valid & (b < Lh)).sum(0).to(F64).to(dev)
            state.fired += (A.sum(2) > 0).sum(0).to(F64).to(dev)
        return state

    def merge(self, a: LocalIoUState, b: LocalIoUState) -> LocalIoUState:
        dev = a.iou_sum.device
        return LocalIoUState(
            a.iou_sum + b.iou_sum.to(dev), a.n_valid + b.n_valid.to(dev),
            a.n_partial + b.n_partial.to(dev), a.fired + b.fired.to(dev),
            a.info, a.n_records + b.n_records, add_counts(a.n_undef, b.n_undef),
        )  # fmt: skip

    def result(self, state: LocalIoUState, confidence: float = 0.95) -> MeasureResult:
        # No "nothing read" reason: an empty mask in every record read says it already.
        reason = new_reasons(*state.iou_sum.shape)
        kind_reasons(reason, self.name, state.info, self.kinds)
        n_valid = state.n_valid.cpu().numpy()
        set_reason(reason, (n_valid == 0)[None, :], "hypothesis mask is empty in every record read")
        set_reason(
            reason,
            (state.n_partial.cpu().numpy() == 0)[None, :],
            "hypothesis is constant (covers every symbol of every record read)",
        )
        set_reason(
            reason,
            (state.fired.cpu().numpy() == 0)[:, None],
            "unit never exceeds its per-record top-quantile threshold (constant in every record)",
        )
        score = (state.iou_sum / state.n_valid.clamp_min(1.0)).cpu().numpy()
        return finish(score, reason, state=state)
