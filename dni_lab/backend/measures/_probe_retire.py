"""Retired hypotheses: a merged probe refits only the hypotheses still open.

Once every (unit, hypothesis) pair of a hypothesis converged, the engine keeps the
scores each pair had then and never reads that hypothesis from the probe's state again,
also when the data ends (:meth:`Measure.retire`). Its outputs' columns are independent
problems (one per fold and output; each output's Hessian rows are drawn from its own
uniforms, :func:`._newton.hessians`), so dropping them changes no other column's fit.
Refits then cost what the open hypotheses need: on the demo's SQL workload most
hypotheses settle within the first few thousand records, while its rare ones read on.

:func:`restricted` builds the state of the open outputs alone (sharing the rows);
:func:`carry_back` writes its fit back and extends the last checkpoint with the open
hypotheses' new scores, the retired ones keeping theirs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import numpy as np
import torch

from ._probe_error import Checkpoint
from ._probe_rows import LogRegState


class _Retiring(Protocol):
    """A probe state that can retire hypotheses (``logreg``'s and ``lda``'s)."""

    Y: torch.Tensor
    out_hyp: np.ndarray
    info: list
    defined: torch.Tensor | None
    retired: np.ndarray | None


def live_outputs(state: _Retiring) -> np.ndarray | None:
    """``(outputs,)`` bool: outputs of hypotheses not retired; None while none is."""
    if state.retired is None or not state.retired.any():
        return None
    return ~state.retired[state.out_hyp]


def retired_union(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """Hypotheses retired in either of two merged states."""
    if a is None or b is None:
        return b if a is None else a
    return a | b


def output_subset(
    state: _Retiring, live: np.ndarray
) -> tuple[dict, np.ndarray, torch.Tensor, np.ndarray]:
    """What any probe state of the outputs ``live`` alone replaces, and their indices.

    Returns the replaced fields (targets, definedness, hypotheses renumbered
    ``0..len(hyps) - 1``, no checkpoints, nothing retired), the outputs as an array and
    a tensor, and the hypotheses they belong to. Rows are shared, not copied.
    """
    outs = np.flatnonzero(live)
    hyps, sub_hyp = np.unique(state.out_hyp[outs], return_inverse=True)
    outs_t = torch.as_tensor(outs, dtype=torch.long, device=state.Y.device)
    fields = {
        "Y": state.Y[:, outs_t],
        "out_hyp": sub_hyp.astype(np.int64),
        "info": [state.info[j] for j in hyps] if state.info else [],
        "checks": [],
        "defined": None if state.defined is None else state.defined[:, outs_t],
        "retired": None,
    }
    return fields, outs, outs_t, hyps


def restricted(
    state: LogRegState, live: np.ndarray, folds: int
) -> tuple[LogRegState, torch.Tensor, np.ndarray]:
    """``logreg``'s state of the outputs ``live`` alone, its weight columns and hypotheses.

    Columns are fold-major (column ``f * outputs + o``), as :meth:`LogReg._solve` lays
    them out.
    """
    fields, outs, _, hyps = output_subset(state, live)
    cols = (np.arange(folds)[:, None] * len(state.out_hyp) + outs[None, :]).ravel()
    cols_t = torch.as_tensor(cols, dtype=torch.long, device=state.W.device)
    sub = replace(
        state, W=state.W[:, cols_t], scorable=state.scorable[hyps],
        damping=None if state.damping is None else state.damping[cols_t], **fields,
    )  # fmt: skip
    return sub, cols_t, hyps


def carry_back(state: LogRegState, sub: LogRegState, cols: torch.Tensor, hyps: np.ndarray) -> None:
    """Write the sub-state's fit into ``state`` and checkpoint the whole probe.

    The new checkpoint holds the open hypotheses' scores from the sub-state's fit and
    the retired ones' from the last checkpoint (the engine shows their converged
    scores, not these; they only keep the arrays whole).
    """
    state.W[:, cols] = sub.W
    if sub.damping is not None:
        if state.damping is None:
            state.damping = torch.full((state.W.shape[1],), 1e-2, device=state.W.device)
        state.damping[cols] = sub.damping
    if sub.checks:
        state.checks.append(extend_checkpoint(
            state.checks[-1] if state.checks else None, sub.checks[-1], hyps,
            state.n_records, state.X.shape[1], len(state.scorable)))  # fmt: skip


def extend_checkpoint(
    prev: Checkpoint | None, new: Checkpoint, hyps: np.ndarray, n_records: int, n_units: int,
    n_h: int,
) -> Checkpoint:  # fmt: skip
    """The whole probe's checkpoint: the open hypotheses ``hyps`` from ``new`` (a fit of
    them alone), the retired ones from ``prev`` (the engine shows their converged
    scores, not these; they only keep the arrays whole)."""

    def whole(name: str, shape: tuple[int, ...], fill) -> np.ndarray | None:
        part = getattr(new, name)
        if part is None:
            return None
        old = getattr(prev, name) if prev is not None else None
        out = np.full(shape, fill, dtype=part.dtype) if old is None else old.copy()
        out[..., hyps] = part
        return out

    return Checkpoint(
        n_records=n_records,
        f1=whole("f1", (n_h,), np.nan),
        f1_se=whole("f1_se", (n_h,), np.nan),
        coef=whole("coef", (n_units, n_h), np.nan),
        coef_se=whole("coef_se", (n_units, n_h), np.nan),
        done=whole("done", (n_h,), True),
        folds=new.folds,
        groups=new.groups,
        coef_ij=whole("coef_ij", (n_units, n_h), np.nan),
        enough=whole("enough", (n_h,), True),
    )
