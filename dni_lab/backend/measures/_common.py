"""Small helpers shared by the measures: null reasons, constancy tests, Chan updates.

Every score a measure cannot define is NaN *with* a reason string. Reasons are
written most fundamental first (nothing read, wrong kind, constant hypothesis,
constant unit, ...) and the first reason written for a cell wins, so the user
sees the root cause rather than a consequence of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..hypothesis.hypotheses import HypothesisInfo
from .base import Measure, MeasureResult, kind_mask, undefined

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


#: Why a binary hypothesis gets no score when it never holds, or always holds.
NEVER_TRUE = "hypothesis is never true (h > 0.5) over the symbols read"
ALWAYS_TRUE = "hypothesis is always true (h > 0.5) over the symbols read"


class SymbolMeasure(Measure):
    """A measure that reads each block as its real symbols, padding dropped.

    :meth:`update` counts the block's records on the state (every built-in state
    has ``n_records``) and its undefined cells per hypothesis (``n_undef``), and
    hands the real symbols, float32 matrices ``(N, n_units)`` and ``(N, n_hyps)``,
    to :meth:`fold`; a block without real symbols changes nothing else. ``Hf`` is
    NaN where a hypothesis is undefined: :meth:`fold` leaves those cells out.
    """

    def update(self, state: Any, U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor) -> Any:
        state.n_records += int(U.shape[0])
        count_undefined(state, H, mask)
        Uf, Hf = as_block(U, H, mask)
        return self.fold(state, Uf, Hf) if Uf.shape[0] else state

    def fold(self, state: Any, Uf: torch.Tensor, Hf: torch.Tensor) -> Any:
        """Fold ``N > 0`` real symbols into ``state`` and return the state."""
        raise NotImplementedError


def count_undefined(state: Any, H: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """Add the block's undefined cells per hypothesis to ``state.n_undef``; return them.

    ``state.n_undef`` stays None until a block holds one (float64 ``(n_hyps,)`` after).
    The ``(R, T, n_hyps)`` cells (:func:`~.base.undefined`) are returned, or None.
    """
    und = undefined(H, mask)
    if und is not None:
        state.n_undef = add_counts(state.n_undef, und.sum((0, 1)).to(F64))
    return und


def add_counts(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    """``a + b`` where None is nothing counted (the merge of optional counters)."""
    if a is None or b is None:
        return b if a is None else a
    return a + b.to(a.device)


def n_undefined(state: Any, n_hyps: int) -> np.ndarray:
    """The state's undefined cells per hypothesis, as float64 ``(n_hyps,)`` (0 where none)."""
    count = getattr(state, "n_undef", None)
    return np.zeros(n_hyps) if count is None else count.cpu().numpy()


def binary_reasons(reason: np.ndarray, n_true: np.ndarray, n_false: np.ndarray) -> None:
    """Null the binary hypotheses that never hold or always hold (per-hypothesis counts)."""
    set_reason(reason, (n_true == 0)[None, :], NEVER_TRUE)
    set_reason(reason, (n_false == 0)[None, :], ALWAYS_TRUE)


def opening_reasons(
    measure: Measure,
    n_units: int,
    n_hyps: int,
    info: list[HypothesisInfo] | None,
    n_read: float,
    min_read: int = 1,
) -> np.ndarray:
    """The reasons every measure writes first: too little read, then a kind it cannot score.

    Parameters
    ----------
    measure : Measure
        Its ``name`` and ``kinds`` word the kind reasons.
    n_units, n_hyps : int
        Shape of the reason array.
    info : list of HypothesisInfo or None
        The hypotheses' kinds (None: every kind is acceptable).
    n_read : float
        Symbols the state has read.
    min_read : int
        Fewest symbols with which the measure is defined.

    Returns
    -------
    np.ndarray
        ``(n_units, n_hyps)`` object array of reasons, ``None`` where none applies yet.
    """
    reason = new_reasons(n_units, n_hyps)
    if n_read < min_read:
        text = "no symbols read" if min_read == 1 else f"fewer than {min_read} symbols read"
        set_reason(reason, True, text)
    kind_reasons(reason, measure.name, info, measure.kinds)
    return reason


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
        if info[j].kind == "categorical" and "binary" in kinds:  # codes are no quantity
            text += (
                f"; it scores each category as its own binary hypothesis: the rows "
                f"'{info[j].name}=<code>'"
                if info[j].n_categories
                else "; declare categories=N on the hypothesis to score each category "
                "one-vs-rest (rows '<hid>=<code>')"
            )
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
    state: Any = None,
) -> MeasureResult:
    """NaN every score with a reason; independent measures reuse the unit score as group score.

    ``state``'s ``n_undef`` (undefined cells per hypothesis) becomes the result's
    ``n_undefined``.
    """
    score = np.where(reason == None, score, np.nan)  # noqa: E711
    if group is None:
        group = score.copy()
    err = np.full(score.shape, np.nan)
    und = None if state is None else n_undefined(state, score.shape[1])
    return MeasureResult(score, group, err, reason, n_undefined=und)


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
    # an empty union (n = 0) divides by 1 instead: both weights are then 0
    safe = n.clamp_min(1.0) if isinstance(n, torch.Tensor) else max(n, 1.0)
    w = nb / safe  # the weight of b's mean
    f = na * nb / safe  # the weight of the squared mean difference
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
