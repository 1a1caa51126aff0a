"""Binned mutual information between every unit and every hypothesis.

Units (and continuous hypotheses) are cut into ``bins`` equal-width bins whose
range is fixed by the first block a state sees: the min/max over its real
symbols. Later values outside that range are clipped into the edge bins. The
fixed edges are what make counts from different blocks (and states) addable;
two states can only merge if they were calibrated on the same first block.
Binary hypotheses use ``h > 0.5`` as their bin, categorical hypotheses their
integer code (``HypothesisInfo.n_categories`` categories, or ``max + 1`` of the
first block when not given; codes outside are clipped).

Joint counts of all unit × hypothesis pairs come from one matrix product per
block, one-hot(unit bins)ᵀ @ one-hot(hypothesis bins), chunked to bound memory.
Bin 0 of each hypothesis is left out of the product and recovered from the unit
bin totals, which halves the work for binary hypotheses.

A hypothesis undefined (NaN) at a symbol is in none of its bins there; the unit bin
counts over such symbols are kept per hypothesis (``u_undef``, only once one occurs)
and taken out of that hypothesis's bin 0 and unit margins, so each pair's MI reads
the symbols where its hypothesis is defined.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    CHUNK_BYTES,
    F64,
    SymbolMeasure,
    add_counts,
    finish,
    n_undefined,
    opening_reasons,
    set_reason,
)
from .base import MeasureResult, StateShape, any_nan

# Hypothesis kinds as the binning codes them.
_CONT = 0
_BIN = 1
_CAT = 2


@dataclass
class MIState:
    """Bin edges (after calibration) and joint bin counts."""

    n_units: int
    n_hyps: int
    info: list[HypothesisInfo] | None
    device: torch.device
    n: float = 0.0
    n_records: int = 0
    u_lo: torch.Tensor | None = None  # (U,) float32 lower edge; None until calibrated
    u_scale: torch.Tensor | None = None  # (U,) bins per unit of value (0 for a constant unit)
    h_lo: torch.Tensor | None = None  # (H,) as above for continuous hypotheses
    h_scale: torch.Tensor | None = None
    h_kind: torch.Tensor | None = None  # (H,) _CONT / _BIN / _CAT
    h_bins: list[int] | None = None  # bins of each hypothesis
    kinds_present: tuple[int, ...] = ()  # the kinds present, to skip unneeded code paths
    joint: torch.Tensor | None = None  # (U*bins, Σ(h_bins-1)) counts of hypothesis bins >= 1
    u_count: torch.Tensor | None = None  # (U*bins,) unit bin totals
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out
    u_undef: torch.Tensor | None = None  # (U*bins, H) unit bin counts where h is undefined

    @property
    def calibrated(self) -> bool:
        return self.u_lo is not None


def _edges(X: torch.Tensor, bins: int) -> tuple[torch.Tensor, torch.Tensor]:
    nan = torch.isnan(X)
    if bool(nan.any()):  # over the defined values; a column with none gets [0, 0]
        lo = torch.where(nan, torch.inf, X).amin(0)
        hi = torch.where(nan, -torch.inf, X).amax(0)
        none = ~torch.isfinite(lo)
        lo, hi = torch.where(none, 0.0, lo), torch.where(none, 0.0, hi)
    else:
        lo, hi = torch.aminmax(X, dim=0)
    width = hi - lo
    # A column constant on the calibration block gets scale 0: everything in bin 0.
    scale = torch.where(width > 0, bins / torch.where(width > 0, width, 1.0), 0.0)
    return lo, scale


def bin_codes(X: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor, bins: int) -> torch.Tensor:
    """Equal-width bin of each value, ``floor((x - lo) * scale)`` clipped to ``[0, bins)``."""
    return torch.floor((X - lo) * scale).clamp_(0, bins - 1).long()


def _clone(v: object, device: torch.device) -> object:
    return v.to(device).clone() if isinstance(v, torch.Tensor) else v


def _plan(sizes: list[int], per: int, budget: int) -> list[tuple[int, int]]:
    """Consecutive index ranges whose ``sum(sizes) * per`` stays within ``budget``."""
    out: list[tuple[int, int]] = []
    start = 0
    acc = 0
    for i, s in enumerate(sizes):
        if i > start and (acc + s) * per > budget:
            out.append((start, i))
            start = i
            acc = 0
        acc += s
    if start < len(sizes):
        out.append((start, len(sizes)))
    return out


class MutualInformation(SymbolMeasure):
    """Mutual information (nats) of binned unit activations and binned hypotheses.

    Parameters
    ----------
    bins : int
        Equal-width bins per unit and per continuous hypothesis.

    Notes
    -----
    The value equals :func:`sklearn.metrics.mutual_info_score` on the same bin
    labels. A unit or hypothesis occupying a single bin gets a null score.
    """

    name = "mi"

    def __init__(self, bins: int = 16):
        self.bins = bins

    def empty_state(self, shape: StateShape) -> MIState:
        # Bin edges and count tables wait for the first block: it fixes their sizes.
        return MIState(shape.n_units, shape.n_hyps, shape.info, shape.device)

    def _calibrate(self, state: MIState, Uf: torch.Tensor, Hf: torch.Tensor) -> None:
        dev = state.device
        b = self.bins
        info = state.info or [HypothesisInfo(str(j)) for j in range(state.n_hyps)]
        kinds = [{"binary": _BIN, "categorical": _CAT}.get(i.kind, _CONT) for i in info]
        nan = torch.isnan(Hf)
        top = torch.where(nan, -1.0, Hf).max(0).values if Hf.shape[1] else Hf[0]
        seen = top.round().long().cpu().tolist() if Hf.shape[1] else []
        h_bins = []
        for i, k, top in zip(info, kinds, seen, strict=True):
            if k == _BIN:
                h_bins.append(2)
            elif k == _CAT:
                h_bins.append(max(int(i.n_categories or (top + 1)), 1))
            else:
                h_bins.append(b)
        u_lo, u_scale = _edges(Uf, b)
        state.u_lo = u_lo.to(dev)
        state.u_scale = u_scale.to(dev)
        state.h_kind = torch.tensor(kinds, dtype=torch.long, device=dev)
        # Only continuous hypotheses have edges; zeros elsewhere keep merge checks meaningful.
        cont = (state.h_kind == _CONT).to(Hf.device)
        h_lo, h_scale = _edges(Hf, b)
        state.h_lo = torch.where(cont, h_lo, 0.0).to(dev)
        state.h_scale = torch.where(cont, h_scale, 0.0).to(dev)
        state.h_bins = h_bins
        state.kinds_present = tuple(set(kinds))
        state.joint = torch.zeros(
            state.n_units * b, sum(h_bins) - len(h_bins), dtype=F64, device=dev
        )
        state.u_count = torch.zeros(state.n_units * b, dtype=F64, device=dev)

    def _hyp_codes(self, state: MIState, Hf: torch.Tensor) -> torch.Tensor:
        """Bin code of every (symbol, hypothesis); only the kinds present are computed."""
        dev = Hf.device
        kind = state.h_kind.to(dev)
        present = set(state.kinds_present)
        if any_nan(Hf):  # an undefined value is in no bin: code 0 here, taken out later
            return torch.where(torch.isnan(Hf), 0, self._hyp_codes(state, Hf.nan_to_num(0.0)))
        codes = (Hf > 0.5).long()
        if _CONT in present:
            cont = bin_codes(Hf, state.h_lo.to(dev), state.h_scale.to(dev), self.bins)
            codes = torch.where(kind == _CONT, cont, codes)
        if _CAT in present:
            top = torch.tensor(state.h_bins, device=dev) - 1
            cat = torch.minimum(Hf.round().clamp_min(0).long(), top)
            codes = torch.where(kind == _CAT, cat, codes)
        return codes

    def fold(self, state: MIState, Uf: torch.Tensor, Hf: torch.Tensor) -> MIState:
        if not state.calibrated:
            self._calibrate(state, Uf, Hf)
        b = self.bins
        dev = Uf.device
        hcodes = self._hyp_codes(state, Hf)  # (N, H)
        und = torch.isnan(Hf).float() if any_nan(Hf) else None  # (N, H) or None
        if und is not None and state.u_undef is None:
            state.u_undef = torch.zeros(state.n_units * b, state.n_hyps, dtype=F64,
                                        device=state.device)  # fmt: skip
        extra = [k - 1 for k in state.h_bins]  # one-hot columns per hypothesis (bin 0 left out)
        offsets = [0, *itertools.accumulate(extra)]
        # Float32 counts are exact below 2**24 per cell, hence the row cap.
        rows = max(1, min(2**24, CHUNK_BYTES // (4 * max(b, max(extra, default=1), 1))))
        u_lo = state.u_lo.to(dev)
        u_scale = state.u_scale.to(dev)
        for r0 in range(0, Uf.shape[0], rows):
            Ur = Uf[r0 : r0 + rows]
            hc = hcodes[r0 : r0 + rows]
            nr = Ur.shape[0]
            uchunk = max(1, CHUNK_BYTES // (4 * nr * b))
            plan = _plan(extra, 4 * nr, CHUNK_BYTES)
            plan = [(h0, h1) for h0, h1 in plan if offsets[h1] > offsets[h0]]
            # Reused buffers: fresh zero-filled allocations per chunk cost more than the scatter.
            ubuf = torch.empty(nr * min(uchunk, state.n_units) * b, device=dev)
            width = max((offsets[h1] - offsets[h0] for h0, h1 in plan), default=1)
            hbuf = torch.empty(nr * width, device=dev)
            hoh_once = self._hyp_onehot(hc, offsets, *plan[0], hbuf) if len(plan) == 1 else None
            for u0 in range(0, state.n_units, uchunk):
                u1 = min(u0 + uchunk, state.n_units)
                offs = torch.arange(u1 - u0, device=dev) * b
                idx = bin_codes(Ur[:, u0:u1], u_lo[u0:u1], u_scale[u0:u1], b) + offs
                cnt = torch.bincount(idx.flatten(), minlength=(u1 - u0) * b)
                state.u_count[u0 * b : u1 * b] += cnt.to(F64).to(state.device)
                if not plan and und is None:
                    continue
                Uoh = ubuf[: nr * (u1 - u0) * b].view(nr, -1).zero_().scatter_(1, idx, 1.0)
                if und is not None:
                    part = (Uoh.T @ und[r0 : r0 + rows]).to(F64).to(state.device)
                    state.u_undef[u0 * b : u1 * b] += part
                for h0, h1 in plan:
                    Hoh = hoh_once
                    if Hoh is None:
                        Hoh = self._hyp_onehot(hc, offsets, h0, h1, hbuf)
                    part = (Uoh.T @ Hoh).to(F64).to(state.device)
                    state.joint[u0 * b : u1 * b, offsets[h0] : offsets[h1]] += part
        state.n += float(Uf.shape[0])
        return state

    @staticmethod
    def _hyp_onehot(
        hc: torch.Tensor, offsets: list[int], h0: int, h1: int, buf: torch.Tensor
    ) -> torch.Tensor:
        """One-hot of hypotheses ``h0:h1`` without their bin 0, ``(N, offsets[h1]-offsets[h0])``."""
        c0 = offsets[h0]
        c1 = offsets[h1]
        codes = hc[:, h0:h1]
        # Bin 0 writes a 0 into its own hypothesis' first column: no other code lands there
        # in that row, and the one-hot stays contiguous (strided GEMMs are far slower).
        col = torch.tensor(offsets[h0:h1], device=hc.device) - c0 + (codes - 1).clamp_min(0)
        out = buf[: hc.shape[0] * (c1 - c0)].view(hc.shape[0], -1).zero_()
        return out.scatter_(1, col, (codes > 0).to(out.dtype))

    def merge(self, a: MIState, b: MIState) -> MIState:
        if not (a.calibrated and b.calibrated):
            # A state without edges has read nothing: the result is a copy of the other.
            src = a if a.calibrated else b
            out = MIState(**{k: _clone(v, a.device) for k, v in vars(src).items()})
            out.device = a.device
            out.n_records = a.n_records + b.n_records
            return out
        same = a.h_bins == b.h_bins and all(
            torch.equal(getattr(a, k), getattr(b, k).to(a.device))
            for k in ("u_lo", "u_scale", "h_lo", "h_scale", "h_kind")
        )
        if not same:
            raise ValueError(
                "cannot merge mutual-information states with different bin edges: the edges "
                "are fixed by the first block a state reads, so states to be merged must be "
                "calibrated on the same first block (start one state, update it with that "
                "block, and copy it to the workers before they read their own blocks)"
            )
        out = MIState(**vars(a))
        out.n = a.n + b.n
        out.n_records = a.n_records + b.n_records
        out.joint = a.joint + b.joint.to(a.device)
        out.u_count = a.u_count + b.u_count.to(a.device)
        out.n_undef = add_counts(a.n_undef, b.n_undef)
        out.u_undef = add_counts(a.u_undef, b.u_undef)
        return out

    def contingency(self, state: MIState, j: int) -> torch.Tensor:
        """Joint counts ``(n_units, bins, hyp_bins)`` of hypothesis ``j`` (float64)."""
        b = self.bins
        off = sum(k - 1 for k in state.h_bins[:j])
        J1 = state.joint[:, off : off + state.h_bins[j] - 1].reshape(state.n_units, b, -1)
        J0 = state.u_count.reshape(state.n_units, b) - J1.sum(-1)
        if state.u_undef is not None:
            J0 = J0 - state.u_undef[:, j].reshape(state.n_units, b)
        return torch.cat([J0[..., None], J1], -1)

    def result(self, state: MIState, confidence: float = 0.95) -> MeasureResult:
        n_units = state.n_units
        n_hyps = state.n_hyps
        b = self.bins
        reason = opening_reasons(self, n_units, n_hyps, state.info, state.n)
        if not state.calibrated:
            return finish(np.zeros((n_units, n_hyps)), reason)
        # MI = (Σ J log J - Σ a log a - Σ c log c) / n + log n over the contingency J with
        # margins a (unit bins) and c (hypothesis bins): no contingency is materialised.
        dev = state.joint.device
        # symbols read per hypothesis: those where it is defined
        n = torch.as_tensor(state.n - n_undefined(state, n_hyps), dtype=F64, device=dev)
        extra = torch.tensor([k - 1 for k in state.h_bins], device=dev)
        col_hyp = torch.repeat_interleave(torch.arange(n_hyps, device=dev), extra)
        sj = torch.zeros(n_units, n_hyps, dtype=F64, device=dev)
        rows = max(b, CHUNK_BYTES // (8 * max(state.joint.shape[1], n_hyps, 1)) // b * b)
        ux = state.u_undef
        for r0 in range(0, n_units * b, rows):
            Jc = state.joint[r0 : r0 + rows]
            u0 = r0 // b
            nu = Jc.shape[0] // b
            J0 = state.u_count[r0 : r0 + rows, None] - _seg_sum(Jc, col_hyp, n_hyps)
            if ux is not None:
                J0 = J0 - ux[r0 : r0 + rows]
            xl = _seg_sum(torch.xlogy(Jc, Jc), col_hyp, n_hyps) + torch.xlogy(J0, J0)
            sj[u0 : u0 + nu] = xl.reshape(nu, b, n_hyps).sum(1)
        if ux is None:
            su = torch.xlogy(state.u_count, state.u_count).reshape(n_units, b).sum(1)[:, None]
        else:  # each hypothesis's unit margins: the symbols where it is defined
            a = state.u_count[:, None] - ux
            su = torch.xlogy(a, a).reshape(n_units, b, n_hyps).sum(1)
        # Hypothesis margins are the same through every unit: read them off unit 0.
        c1 = state.joint[:b].sum(0)
        c0 = n - _seg_sum(c1[None], col_hyp, n_hyps)[0]
        sh = _seg_sum(torch.xlogy(c1, c1)[None], col_hyp, n_hyps)[0] + torch.xlogy(c0, c0)
        safe = n.clamp_min(1.0)
        mi = ((sj - su - sh[None, :]) / safe + torch.log(safe)).clamp_min(0.0)
        h_bins = _seg_sum((c1 > 0).to(F64)[None], col_hyp, n_hyps)[0] + (c0 > 0).to(F64)
        set_reason(
            reason,
            (h_bins <= 1).cpu().numpy()[None, :],
            "hypothesis is constant over the symbols read (one occupied bin)",
        )
        u_bins = (state.u_count.reshape(n_units, b) > 0).sum(-1)
        set_reason(
            reason,
            (u_bins <= 1).cpu().numpy()[:, None],
            "unit is constant over the symbols read (one occupied bin)",
        )
        return finish(mi.cpu().numpy(), reason, state=state)


def _seg_sum(X: torch.Tensor, col_hyp: torch.Tensor, n_hyps: int) -> torch.Tensor:
    """Sum the columns of ``X`` that belong to each hypothesis: ``(rows, n_hyps)``."""
    out = torch.zeros(X.shape[0], n_hyps, dtype=X.dtype, device=X.device)
    return out.index_add_(1, col_hyp, X)
