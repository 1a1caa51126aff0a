"""Precision, recall and F1 of each unit at its best threshold for a binary hypothesis.

The state is :class:`~.auroc.AUROC`'s: per-unit cells fixed by the first block and counts
per cell, class and jackknife bucket, so merging is as exact and early stopping works
alike. A threshold is a boundary between two cells; the best one maximises F1 over every
boundary and both directions: the unit is *on* where ``u > t`` (it rises on the
hypothesis) or where ``u < t`` (it falls). The score is that F1, in ``[0, 1]``, unsigned:
a unit unrelated to the hypothesis reaches the trivial F1 (below) in both directions, so
a sign would flip at random between reads and never settle; the direction is the
``rule`` of :meth:`PRF1.operating_point`.

Exactness: the boundaries between cells are every threshold the data allows for a unit
whose values are all edges (at most ``bins`` distinct values in its first block and no new
one after): the best F1 is then the exact best over all thresholds. Otherwise the best
threshold may lie inside an open-interval cell: :meth:`PRF1.binning_bound` gives how much
higher the exact best F1 can be (the score is always an F1 some threshold reaches).

The score frame has fixed columns, so it carries one of F1, precision or recall (the
``report`` parameter, each under its own measure name), not the threshold;
:meth:`PRF1.operating_point` returns the threshold with all three for a state.
Note the trivial rule (every symbol on) has F1 ``2p / (1 + p)`` for a hypothesis true on
a share ``p`` of symbols: chance is not 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from ..errors import MeasureError
from .auroc import AUROC, RankState, jackknife_err
from .base import MeasureResult

REPORTS = ("f1", "precision", "recall")


@dataclass
class Best:
    """The best-F1 threshold of each ``(..., H)`` pair: its cell boundary and values."""

    f1: torch.Tensor
    precision: torch.Tensor
    recall: torch.Tensor
    up: torch.Tensor  # bool: the unit is on above the threshold (else below)
    cell: torch.Tensor  # up: the first cell on; down: the last cell on
    optimistic: torch.Tensor  # the highest F1 a threshold inside an open cell could reach


def _suffix(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-2).cumsum(-2).flip(-2)


def _f1(tp: torch.Tensor, fp: torch.Tensor, n1: torch.Tensor) -> torch.Tensor:
    return torch.where(n1 > 0, 2 * tp / (tp + fp + n1).clamp_min(1.0), torch.nan)


def best_f1(pos: torch.Tensor, neg: torch.Tensor) -> Best:
    """Best F1 over cell boundaries and both directions of ``(..., C, H)`` counts."""
    n1 = pos.sum(-2, keepdim=True)
    tp_up, fp_up = _suffix(pos), _suffix(neg)  # on from cell i up
    tp_dn, fp_dn = pos.cumsum(-2), neg.cumsum(-2)  # on up to cell i
    f_up, f_dn = _f1(tp_up, fp_up, n1), _f1(tp_dn, fp_dn, n1)
    v_up, i_up = f_up.nan_to_num(-1.0).max(-2)
    v_dn, i_dn = f_dn.nan_to_num(-1.0).max(-2)
    up = v_up >= v_dn
    cell = torch.where(up, i_up, i_dn)
    i_up, i_dn = i_up[..., None, :], i_dn[..., None, :]
    tp = torch.where(up, tp_up.gather(-2, i_up)[..., 0, :], tp_dn.gather(-2, i_dn)[..., 0, :])
    fp = torch.where(up, fp_up.gather(-2, i_up)[..., 0, :], fp_dn.gather(-2, i_dn)[..., 0, :])
    n = n1[..., 0, :]
    nan = torch.tensor(torch.nan, dtype=pos.dtype, device=pos.device)
    f1 = torch.where(n > 0, torch.maximum(v_up, v_dn), nan)
    # A threshold inside open cell c (even) takes at most all its positives and none of its
    # negatives: F1 grows with TP and falls with FP, so that bounds every such threshold.
    zero = torch.zeros_like(fp_up[..., :1, :])
    fp_up_next = torch.cat([fp_up[..., 1:, :], zero], -2)
    fp_dn_prev = torch.cat([zero, fp_dn[..., :-1, :]], -2)
    opt_up = _f1(tp_up, fp_up_next, n1)[..., 0::2, :].nan_to_num(-1.0).amax(-2)
    opt_dn = _f1(tp_dn, fp_dn_prev, n1)[..., 0::2, :].nan_to_num(-1.0).amax(-2)
    optimistic = torch.maximum(torch.maximum(opt_up, opt_dn), f1)
    return Best(
        f1=f1,
        precision=torch.where(tp > 0, tp / (tp + fp).clamp_min(1.0), torch.where(n > 0, 0.0, nan)),
        recall=torch.where(n > 0, tp / n.clamp_min(1.0), nan),
        up=up,
        cell=cell,
        optimistic=optimistic,
    )


class PRF1(AUROC):
    """F1 (or its precision or recall) of each unit at its best threshold.

    Parameters
    ----------
    report : {"f1", "precision", "recall"}
        Which value of the best-F1 operating point is the score. The measure's name is
        ``prf1`` for F1, ``prf1_precision`` and ``prf1_recall`` for the others, so all
        three may be listed in one run.
    bins, group_records, buckets, min_bucket_groups
        As :class:`~.auroc.AUROC`'s.
    """

    def __init__(
        self,
        report: str = "f1",
        bins: int = 128,
        group_records: int = 4,
        buckets: int = 20,
        min_bucket_groups: int = 2,
    ):
        super().__init__(bins, group_records, buckets, min_bucket_groups)
        self.report = report

    @property
    def name(self) -> str:  # type: ignore[override]
        return "prf1" if self.report == "f1" else f"prf1_{self.report}"

    def _value(self, best: Best) -> torch.Tensor:
        if self.report not in REPORTS:
            raise MeasureError(
                f"PRF1(report={self.report!r}): report must be one of {', '.join(REPORTS)}."
            )
        return getattr(best, self.report)

    def result(self, state: RankState, confidence: float = 0.95) -> MeasureResult:
        reason = self.reasons(state)
        c = self.classes(state)
        best = best_f1(c.pos, c.neg)
        score = np.where(reason == None, self._value(best).cpu().numpy(), np.nan)  # noqa: E711
        err = np.full(score.shape, np.nan)
        if self.has_jackknife(state):
            loo = self._value(best_f1(c.loo_pos, c.loo_neg)).cpu().numpy()
            err = jackknife_err(loo, score, confidence)
        und = np.zeros(score.shape[1]) if state.n_undef is None else state.n_undef.cpu().numpy()
        return MeasureResult(score, score.copy(), err, reason, n_undefined=und)

    def binning_bound(self, state: RankState) -> np.ndarray:
        """``(U, H)``: how much higher than the F1 found the exact best F1 may be (0 where
        every value read is an edge). Applies to ``report="f1"``."""
        c = self.classes(state)
        best = best_f1(c.pos, c.neg)
        return (best.optimistic - best.f1).cpu().numpy()

    def operating_point(self, state: RankState) -> pl.DataFrame:
        """The best-F1 threshold of each pair with its F1, precision and recall.

        Returns
        -------
        polars.DataFrame
            One row per (unit, hypothesis), unit-major: ``unit``, ``hid`` (the hypothesis
            name, or its index as a string without info), ``rule`` (``">"``: the unit is on
            where ``u > threshold``; ``"<"``: where ``u < threshold``), ``threshold``,
            ``f1``, ``precision``, ``recall``; values null where the score is. For float32
            activations the rule reproduces the counts exactly (an edge's own cell starts
            one float32 step below it).
        """
        reason = self.reasons(state)
        ok = (reason == None).reshape(-1)  # noqa: E711
        c = self.classes(state)
        best = best_f1(c.pos, c.neg)
        nu, nh = best.f1.shape
        up = best.up.cpu().numpy()
        t = _thresholds(best.cell.cpu().numpy(), up, _edges(state, nu))
        names = [i.name for i in state.info] if state.info else [str(j) for j in range(nh)]

        def col(x: np.ndarray) -> np.ndarray:
            return np.where(ok, np.asarray(x, dtype=np.float64).reshape(-1), np.nan)

        return pl.DataFrame(
            {
                "unit": np.repeat(np.arange(nu), nh),
                "hid": np.tile(np.asarray(names, dtype=object), nu),
                "rule": np.where(up, ">", "<").reshape(-1),
                "threshold": col(t),
                "f1": col(best.f1.cpu().numpy()),
                "precision": col(best.precision.cpu().numpy()),
                "recall": col(best.recall.cpu().numpy()),
            },
            nan_to_null=True,
        )


def _edges(state: RankState, nu: int) -> np.ndarray:
    if state.edges is None:
        return np.zeros((nu, 1), dtype=np.float32)
    return state.edges.cpu().numpy().astype(np.float32)


def _thresholds(cell: np.ndarray, up: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``(U, H)`` thresholds of cell boundaries: on above ``t`` (``up``) or below it.

    Up from cell ``i``: everything (``-inf``) at 0; ``u >= e_j`` at ``2j + 1``, written
    ``u > nextafter(e_j, -inf)``; ``u > e_{j-1}`` at ``2j``. Down to cell ``c``:
    ``u < e_j`` at ``2j`` (everything at the last cell); ``u <= e_j`` at ``2j + 1``.
    """
    E = edges.shape[1]
    j = np.clip(cell // 2, 0, E - 1)
    e = np.take_along_axis(edges, j, 1)  # (U, H): edge j of each unit
    e_prev = np.take_along_axis(edges, np.clip(cell // 2 - 1, 0, E - 1), 1)
    odd = cell % 2 == 1
    inf = np.float32(np.inf)
    t_up = np.where(odd, np.nextafter(e, -inf), np.where(cell == 0, -inf, e_prev))
    t_dn = np.where(odd, np.nextafter(e, inf), np.where(cell // 2 >= E, inf, e))
    return np.where(up, t_up, t_dn).astype(np.float64)
