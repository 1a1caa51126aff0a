"""Difference of means: mean(u | h = 1) − mean(u | h = 0) for binary hypotheses.

Per block, the units are centered on their block mean and one float32 GEMM
``Ucᵀ·B`` (``B = H > 0.5``) gives every unit's sum within class 1; class 0 is
the column total minus class 1. Per-class means (and, with ``standardize``,
centered sums of squares from a second GEMM on ``Uc²``) fold into the float64
state with Chan's pairwise update, which is also :meth:`DiffMeans.merge`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..extraction.sparse_block import SparseBlock
from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    F64,
    SymbolMeasure,
    add_counts,
    binary_reasons,
    chan,
    finish,
    is_constant,
    opening_reasons,
    set_reason,
)
from .base import MeasureResult, StateShape, any_nan, undefined

#: Relative resolution of variances accumulated from float32 block products.
_F32_RES = 1e-6


@dataclass
class DiffMeansState:
    """Per-class counts, means and (optionally) centered sums of squares."""

    n: float
    mean_u: torch.Tensor  # (U,) over all symbols, for the constant-unit test
    m2_u: torch.Tensor  # (U,)
    n1: torch.Tensor  # (H,) symbols with h > 0.5
    n0: torch.Tensor  # (H,)
    mean1: torch.Tensor  # (U, H) mean of each unit where h = 1
    mean0: torch.Tensor  # (U, H)
    m2_1: torch.Tensor | None  # (U, H) centered sums of squares (standardize only)
    m2_0: torch.Tensor | None
    info: list[HypothesisInfo] | None
    n_records: int = 0
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out


def _div(s: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``s / n`` with 0 where the class is empty (its mean is then never used)."""
    return torch.where(n > 0, s / n.clamp_min(1.0), 0.0)


class DiffMeans(SymbolMeasure):
    """Difference between a unit's mean where a binary hypothesis holds and where not.

    Parameters
    ----------
    standardize : bool
        Divide by the pooled within-class standard deviation
        ``sqrt((SS₁ + SS₀) / (n₁ + n₀ − 2))`` (Cohen's d).
    """

    name = "diffmeans"
    kinds = ("binary",)
    one_vs_rest = True

    def __init__(self, standardize: bool = False):
        self.standardize = standardize

    def empty_state(self, shape: StateShape) -> DiffMeansState:
        # Per-class centered sums of squares serve only the pooled std of standardize.
        standardize = self.standardize
        return DiffMeansState(
            n=0.0,
            mean_u=shape.per_unit(),
            m2_u=shape.per_unit(),
            n1=shape.per_hyp(),
            n0=shape.per_hyp(),
            mean1=shape.per_pair(),
            mean0=shape.per_pair(),
            m2_1=shape.per_pair() if standardize else None,
            m2_0=shape.per_pair() if standardize else None,
            info=shape.info,
        )

    def fold(self, state: DiffMeansState, Uf: torch.Tensor, Hf: torch.Tensor) -> DiffMeansState:
        B = (Hf > 0.5).float()  # NaN (undefined) is in neither class: NaN > 0.5 is False
        mu = Uf.mean(0)
        Uc = Uf - mu  # centered so the float32 sums keep their digits
        s_all = Uc.sum(0).to(F64)  # float32 reductions: a float64 one would copy the block
        s1 = (Uc.T @ B).to(F64)
        q = Uc * Uc
        q1 = (q.T @ B).to(F64) if state.m2_1 is not None else None
        sums = (s_all, s1, q.sum(0).to(F64), q1, B.sum(0).to(F64))
        class0 = None
        if any_nan(Hf):  # class 0 is no longer "all but class 1": sum it too
            B0 = (Hf <= 0.5).float()
            q0 = (q.T @ B0).to(F64) if state.m2_1 is not None else None
            class0 = ((Uc.T @ B0).to(F64), q0, B0.sum(0).to(F64))
        return self._fold_sums(state, Uf.shape[0], mu.to(F64), *sums, class0=class0)

    def update_sparse(self, state: DiffMeansState, Z: SparseBlock, H, mask) -> DiffMeansState:
        """:meth:`update` for latents given as their nonzeros (a TopK or JumpReLU set).

        Each active latent adds its value (and square) to its row where the hypothesis
        holds: sparse × dense products in float64, ``N·k·H`` work for ``N`` symbols.
        """
        if undefined(H, mask) is not None:  # undefined values: the dense path leaves them out
            return self.update(state, Z.dense(), H, mask)
        state.n_records += int(Z.values.shape[0])
        keep = mask.reshape(-1)
        if not bool(keep.any()):
            return state
        k, D, nh = Z.values.shape[2], Z.width, H.shape[2]
        v = Z.values.reshape(-1, k)[keep].to(F64).reshape(-1)
        idx = Z.indices.reshape(-1, k)[keep].reshape(-1)
        B = (H.reshape(-1, nh)[keep] > 0.5).to(F64)
        Bk = B[:, None, :].expand(-1, k, -1).reshape(-1, nh)
        dev = v.device
        s_all = torch.zeros(D, dtype=F64, device=dev).index_add_(0, idx, v)
        q_all = torch.zeros(D, dtype=F64, device=dev).index_add_(0, idx, v * v)
        s1 = torch.zeros(D, nh, dtype=F64, device=dev).index_add_(0, idx, Bk * v[:, None])
        q1 = None
        if state.m2_1 is not None:
            q1 = torch.zeros(D, nh, dtype=F64, device=dev)
            q1 = q1.index_add_(0, idx, Bk * (v * v)[:, None])
        zero = torch.zeros(D, dtype=F64, device=dev)
        return self._fold_sums(state, B.shape[0], zero, s_all, s1, q_all, q1, B.sum(0))

    def _fold_sums(self, state, n, mu64, s_all, s1, q_all, q1, n1, class0=None) -> DiffMeansState:
        """Fold a block's sums of ``u - mu64`` (all, where h = 1, and squared) into the state.

        ``class0`` holds the sums where h = 0 ``(s0, q0, n0)`` when some symbols are in
        neither class (undefined); otherwise class 0 is every symbol not in class 1.
        """
        dev = state.mean_u.device
        if class0 is None:
            s0, n0 = s_all[:, None] - s1, n - n1
            q0 = None if q1 is None else q_all[:, None] - q1
        else:
            s0, q0, n0 = class0
        m2_1 = None
        m2_0 = None
        if q1 is not None:
            m2_1 = (q1 - s1 * _div(s1, n1)).clamp_min(0.0).to(dev)
            m2_0 = (q0 - s0 * _div(s0, n0)).clamp_min(0.0).to(dev)
        blk_u = (float(n), (mu64 + s_all / n).to(dev), (q_all - s_all * s_all / n).to(dev))
        _, state.mean_u, state.m2_u = chan(state.n, state.mean_u, state.m2_u, *blk_u)
        n1 = n1.to(dev)
        n0 = n0.to(dev)
        m1 = (mu64[:, None] + _div(s1, n1)).to(dev)
        m0 = (mu64[:, None] + _div(s0, n0)).to(dev)
        state.n1, state.mean1, state.m2_1 = chan(state.n1, state.mean1, state.m2_1, n1, m1, m2_1)
        state.n0, state.mean0, state.m2_0 = chan(state.n0, state.mean0, state.m2_0, n0, m0, m2_0)
        state.n += float(n)
        return state

    def merge(self, a: DiffMeansState, b: DiffMeansState) -> DiffMeansState:
        dev = a.mean_u.device

        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(dev)

        _, mean_u, m2_u = chan(a.n, a.mean_u, a.m2_u, b.n, mv(b.mean_u), mv(b.m2_u))
        n1, mean1, m2_1 = chan(a.n1, a.mean1, a.m2_1, mv(b.n1), mv(b.mean1), mv(b.m2_1))
        n0, mean0, m2_0 = chan(a.n0, a.mean0, a.m2_0, mv(b.n0), mv(b.mean0), mv(b.m2_0))
        return DiffMeansState(
            a.n + b.n, mean_u, m2_u, n1, n0, mean1, mean0, m2_1, m2_0,
            a.info, a.n_records + b.n_records, add_counts(a.n_undef, b.n_undef),
        )  # fmt: skip

    def result(self, state: DiffMeansState, confidence: float = 0.95) -> MeasureResult:
        reason = opening_reasons(self, *state.mean1.shape, state.info, state.n)
        n1 = state.n1.cpu().numpy()
        n0 = state.n0.cpu().numpy()
        binary_reasons(reason, n_true=n1, n_false=n0)
        const_u = is_constant(state.m2_u, state.n, state.mean_u)
        set_reason(reason, const_u[:, None], "unit is constant over the symbols read")
        diff = (state.mean1 - state.mean0).cpu().numpy()
        if self.standardize:
            if state.n < 3:
                set_reason(reason, True, "fewer than 3 symbols read: no pooled standard deviation")
            var = ((state.m2_1 + state.m2_0) / max(state.n - 2, 1.0)).cpu().numpy()
            # Within-class sums of squares come from float32 GEMMs: anything below their
            # resolution relative to the unit's total variance is a zero.
            tiny = _F32_RES * (state.m2_u / max(state.n, 1.0)).cpu().numpy()[:, None]
            set_reason(reason, var <= tiny, "unit is constant within each class: pooled std is 0")
            with np.errstate(divide="ignore", invalid="ignore"):
                diff = diff / np.sqrt(var)
        return finish(diff, reason, state=state)
