"""Small helpers shared by the measures: null reasons, constancy tests, Chan updates.

Every score a measure cannot define is NaN *with* a reason string. Reasons are
written most fundamental first (nothing read, wrong kind, constant hypothesis,
constant unit, ...) and the first reason written for a cell wins, so the user
sees the root cause rather than a consequence of it.
"""

from __future__ import annotations

import numpy as np
import torch

from ..hypotheses import HypothesisInfo
from .base import MeasureResult, kind_mask

F64 = torch.float64

#: Relative variance below which a signal counts as constant (same rule as ``corr``).
REL_TOL = 1e-10

#: Working-memory budget of one intermediate tensor in the chunked hot paths.
CHUNK_BYTES = 64 * 2**20


def new_reasons(n_units: int, n_hyps: int) -> np.ndarray:
    """An ``(n_units, n_hyps)`` object array of ``None`` (no reason yet)."""
    return np.full((n_units, n_hyps), None, dtype=object)


def set_reason(reason: np.ndarray, where: np.ndarray | bool, text: str) -> None:
    """Write ``text`` where ``where`` holds and no earlier reason was written."""
    where = np.broadcast_to(np.asarray(where, dtype=bool), reason.shape)
    reason[where & (reason == None)] = text  # noqa: E711  (elementwise on object arrays)


def kind_reasons(
    reason: np.ndarray,
    measure: str,
    info: list[HypothesisInfo] | None,
    kinds: tuple[str, ...],
) -> None:
    """Null the hypotheses whose kind ``measure`` does not accept."""
    n_hyps = reason.shape[1]
    ok = kind_mask(info, n_hyps, kinds)
    for j in np.flatnonzero(~ok):
        text = f"{measure} cannot score {info[j].kind} hypotheses (it accepts {', '.join(kinds)})"
        set_reason(reason, (np.arange(n_hyps) == j)[None, :], text)


def is_constant(m2: torch.Tensor, n: float, mean: torch.Tensor) -> np.ndarray:
    """Per column: is the centered sum of squares ``m2`` negligible for its ``mean``?"""
    var = (m2 / max(n, 1.0)).cpu().numpy()
    mean2 = (mean * mean).cpu().numpy()
    return var <= REL_TOL * np.maximum(mean2, 1.0)


def finish(
    score: np.ndarray,
    reason: np.ndarray,
    group: np.ndarray | None = None,
) -> MeasureResult:
    """NaN every score with a reason; independent measures reuse the unit score as group score."""
    score = np.where(reason == None, score, np.nan)  # noqa: E711
    if group is None:
        group = score.copy()
    err = np.full(score.shape, np.nan)
    return MeasureResult(score, group, err, reason)


def chan(
    na: torch.Tensor | float,
    ma: torch.Tensor,
    m2a: torch.Tensor | None,
    nb: torch.Tensor | float,
    mb: torch.Tensor,
    m2b: torch.Tensor | None,
) -> tuple[torch.Tensor | float, torch.Tensor, torch.Tensor | None]:
    """Pairwise (Chan et al.) combination of counts, means and centered sums of squares.

    Counts may be scalars or tensors broadcasting against the means; a side with
    count 0 contributes nothing, whatever its (meaningless) mean holds.
    """
    n = na + nb
    if isinstance(n, torch.Tensor):
        safe = n.clamp_min(1.0)
        w, f = nb / safe, na * nb / safe
    else:
        w, f = (nb / n, na * nb / n) if n > 0 else (0.0, 0.0)
    delta = mb - ma
    mean = ma + delta * w
    m2 = None if m2a is None else m2a + m2b + delta * delta * f
    return n, mean, m2


def as_block(
    U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Real symbols of a block as float32 matrices ``(N, n_units)``, ``(N, n_hyps)``."""
    mask = mask.to(device=U.device, dtype=torch.bool)
    H = H.to(U.device)
    if bool(mask.all()):  # no padding: a view instead of a gathered copy
        return U.reshape(-1, U.shape[-1]).float(), H.reshape(-1, H.shape[-1]).float()
    return U[mask].float(), H[mask].float()
