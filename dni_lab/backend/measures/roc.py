"""The AUROC itself and the recall at a fixed FPR, exact, with record-bootstrap errors.

The statistics a probe's users report (``Probe.report``), as measures a query can ask for:

* ``roc_auc`` (:class:`ROCAUC`): the area under the ROC curve of each unit as a score for
  each binary hypothesis, in ``[0, 1]``, 0.5 at chance (the ``auroc`` measure gives
  ``2 · AUROC − 1`` from binned counts; this one is the AUROC, exact);
* ``recall_at_fpr`` (:class:`RecallAtFPR`): the highest recall of a threshold on the unit
  whose false-positive rate is at most ``fpr`` (``0.01`` by default; ``fpr`` at chance).

**Exact.** A state keeps every real symbol's unit values (float32), its hypothesis values
and its record, so :meth:`~ROCAUC.result` ranks the values themselves: on a full read the
score is ``sklearn.metrics.roc_auc_score`` (ties count half; ``tests/test_measures_roc.py``).
The price is memory, ``4 · (n_units + n_hyps)`` bytes per symbol: use ``auroc`` (fixed
size, mergeable histograms) for wide unit sets over many symbols.

**Error.** The statistic is recomputed on ``n_boot`` bootstrap replicates that draw as
many *records* as were read, with replacement (a record's symbols are correlated: drawing
symbols one by one would give errors too small), the draws of ``dni_lab.probe.metrics``'s
``bootstrap`` from ``seed``. ``err`` is the replicates' standard deviation times the normal
quantile of ``confidence``: a symmetric interval, the form the engine's early stopping and
p-values read. Every statistic comes from one piece of code, :mod:`._roc`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.special import ndtri

from ..errors import MeasureError
from ..hypothesis.hypotheses import HypothesisInfo
from ._common import binary_reasons, count_undefined, n_undefined, opening_reasons, set_reason
from ._roc import auc_of_counts, check_fpr, group_sum, recall_of_counts, record_draws, tie_groups
from .base import Measure, MeasureResult, StateShape

#: bootstrap replicates behind ``err`` at a convergence check (:meth:`_ExactROC.peek`)
PEEK_BOOT = 32
# replicates summed at once: a (chunk, symbols, hypotheses) float64 array is alive per unit
_CHUNK_CELLS = 2**23


@dataclass
class ValueState:
    """Every real symbol read: unit values, hypothesis values and record, block by block."""

    n_units: int
    n_hyps: int
    info: list[HypothesisInfo] | None
    U: list[torch.Tensor] = field(default_factory=list)  # (n, n_units) float32, CPU
    H: list[torch.Tensor] = field(default_factory=list)  # (n, n_hyps) float32, NaN: undefined
    record: list[torch.Tensor] = field(default_factory=list)  # (n,) int64 record ids
    n_records: int = 0
    n_undef: torch.Tensor | None = None


class _ExactROC(Measure):
    """Shared state, merge, reasons and bootstrap; subclasses give :meth:`statistic`."""

    kinds = ("binary",)
    has_error = True
    one_vs_rest = True

    def __init__(self, n_boot: int = 100, seed: int = 0):
        self.n_boot = n_boot
        self.seed = seed

    def statistic(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        """``(B, H)`` from ``(B, G, H)`` ascending class counts."""
        raise NotImplementedError

    def empty_state(self, shape: StateShape) -> ValueState:
        if not (isinstance(self.n_boot, int) and self.n_boot >= 0):
            raise MeasureError(
                f"{type(self).__name__}(n_boot={self.n_boot!r}): pass a number of bootstrap "
                "replicates, 0 or more (0: no err)."
            )
        return ValueState(shape.n_units, shape.n_hyps, shape.info)

    def update(self, state: ValueState, U, H, mask):
        mask = mask.to(device=U.device, dtype=torch.bool)
        count_undefined(state, H, mask)
        rec = torch.arange(U.shape[0], device=U.device)[:, None].expand(mask.shape)[mask]
        if bool(mask.any()):
            state.U.append(U[mask].float().cpu())
            state.H.append(H.to(U.device)[mask].float().cpu())
            state.record.append(rec.cpu() + state.n_records)
        state.n_records += int(U.shape[0])
        return state

    def merge(self, a: ValueState, b: ValueState) -> ValueState:
        # b's records follow a's: ids stay distinct, so the bootstrap draws them apart
        return ValueState(
            a.n_units, a.n_hyps, a.info, a.U + b.U, a.H + b.H,
            a.record + [r + a.n_records for r in b.record],
            a.n_records + b.n_records,
            None if a.n_undef is None and b.n_undef is None
            else (0 if a.n_undef is None else a.n_undef) + (0 if b.n_undef is None else b.n_undef),
        )  # fmt: skip

    def _stack(self, state: ValueState) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        if not state.U:
            return torch.zeros(0, state.n_units), torch.zeros(0, state.n_hyps), np.zeros(0, int)
        return torch.cat(state.U), torch.cat(state.H), torch.cat(state.record).numpy()

    def peek(self, state: ValueState, confidence: float = 0.95) -> MeasureResult:
        """The scores, with ``err`` from at most :data:`PEEK_BOOT` replicates: a convergence
        check reads it after every block, and the full bootstrap costs ``n_boot`` passes."""
        return self.result(state, confidence, n_boot=min(self.n_boot, PEEK_BOOT))

    def result(
        self, state: ValueState, confidence: float = 0.95, n_boot: int | None = None
    ) -> MeasureResult:
        n_boot = self.n_boot if n_boot is None else n_boot
        U, H, record = self._stack(state)
        pos = (H > 0.5).double()  # NaN compares False: an undefined cell is in neither class
        neg = (H <= 0.5).double()
        nu, nh = state.n_units, state.n_hyps
        reason = opening_reasons(self, nu, nh, state.info, float(len(U)))
        binary_reasons(reason, pos.sum(0).numpy(), neg.sum(0).numpy())
        if len(U):
            const = (U.amin(0) >= U.amax(0)).numpy()
            set_reason(reason, const[:, None], "unit is constant over the symbols read")
        score = np.full((nu, nh), np.nan)
        err = np.full((nu, nh), np.nan)
        live = np.flatnonzero((reason == None).any(1))  # noqa: E711
        counts = None
        if n_boot >= 2 and len(np.unique(record)) >= 2:
            draws, row_group = record_draws(record, n_boot, self.seed)
            # float32: weights are small integers; the replicates only feed their spread
            counts = torch.from_numpy(draws[:, row_group]).float()  # (B, N) row weights
        for u in live:
            order, group, n_groups = tie_groups(U[:, u])
            p, n = pos[order], neg[order]
            full = group_sum(torch.stack([p, n]), group, n_groups)  # (2, G, H)
            score[u] = self.statistic(full[:1], full[1:])[0].numpy()
            if counts is not None:
                reps = self._replicates(counts[:, order], p, n, group, n_groups)
                with np.errstate(invalid="ignore"):
                    err[u] = np.nanstd(reps, 0) * ndtri(0.5 + confidence / 2)
        ok = reason == None  # noqa: E711
        score, err = np.where(ok, score, np.nan), np.where(ok, err, np.nan)
        return MeasureResult(score, score.copy(), err, reason, n_undefined=n_undefined(state, nh))

    def _replicates(self, w, p, n, group, n_groups) -> np.ndarray:
        """``(B, H)`` statistic of each replicate (``w``: ``(B, N)`` weights, sorted rows)."""
        step = max(1, _CHUNK_CELLS // max(1, w.shape[1] * p.shape[1]))
        p, n = p.float(), n.float()
        tied = n_groups < len(group)  # without ties each row is its own group: no sums

        def counts(x: torch.Tensor) -> torch.Tensor:
            return group_sum(x, group, n_groups) if tied else x

        out = []
        for b0 in range(0, w.shape[0], step):
            wb = w[b0 : b0 + step, :, None]
            out.append(self.statistic(counts(wb * p), counts(wb * n)))
        # a replicate that drew one class is NaN: nanstd leaves it out, as the report does
        return torch.cat(out).numpy()


class ROCAUC(_ExactROC):
    """The area under the ROC curve of each unit for a binary hypothesis, exact.

    Parameters
    ----------
    n_boot : int
        Bootstrap replicates over records for ``err`` (0: no ``err``).
    seed : int
        Seed of the records' draws.
    """

    name = "roc_auc"
    null_score = 0.5

    def statistic(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        return auc_of_counts(pos, neg)


class RecallAtFPR(_ExactROC):
    """The highest recall of a threshold on each unit whose false-positive rate is at most
    ``fpr``, for a binary hypothesis (predicting it where the unit is at or above the
    threshold; a unit that is low on the concept scores low: read ``roc_auc`` below 0.5).

    Parameters
    ----------
    fpr : float
        The false-positive rate allowed, strictly between 0 and 1 (with fewer than
        ``1 / fpr`` negatives read, the recall at no false positive).
    n_boot : int
        Bootstrap replicates over records for ``err`` (0: no ``err``).
    seed : int
        Seed of the records' draws.
    """

    name = "recall_at_fpr"

    def __init__(self, fpr: float = 0.01, n_boot: int = 100, seed: int = 0):
        super().__init__(n_boot=n_boot, seed=seed)
        self.fpr = fpr

    @property
    def null_score(self) -> float:  # type: ignore[override]
        """A threshold unrelated to the concept recalls as many positives as negatives."""
        return float(self.fpr)

    def empty_state(self, shape: StateShape) -> ValueState:
        try:
            check_fpr(self.fpr)
        except Exception as exc:
            raise MeasureError(f"RecallAtFPR: {exc}") from None
        return super().empty_state(shape)

    def statistic(self, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        return recall_of_counts(pos, neg, self.fpr)
