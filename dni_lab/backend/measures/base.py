"""The Measure protocol: a mergeable accumulator of unit/hypothesis affinity.

A block is three aligned tensors on the run's device:

* ``U`` — unit behaviors, shape ``(R, T, n_units)``, float32;
* ``H`` — hypothesis behaviors, shape ``(R, T, n_hyps)``, float32;
* ``mask`` — ``(R, T)`` bool, True on real symbols, False on padding.

``R`` records, padded to ``T`` symbols. Padding must never reach a statistic.
Measures that need independent units of observation (folds, effective sample
sizes) use the record axis; the rest flatten ``U[mask]``.

``H`` is NaN where a hypothesis is *undefined* at a real symbol (its function
returned NaN or None there). Such a (symbol, hypothesis) cell is left out of that
hypothesis's statistics, and only of those: :func:`undefined` gives the cells,
:func:`filled` a copy of ``H`` safe for products. A block without NaN takes each
measure's usual path unchanged. Measures report how many cells they left out per
hypothesis in :attr:`MeasureResult.n_undefined` (the frame's ``n_undefined``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

# HypothesisInfo and KINDS describe hypotheses and live there; they are re-exported
# because measure modules (and user measures) long imported them from here.
from ..hypothesis.hypotheses import KINDS, HypothesisInfo

__all__ = [
    "KINDS",
    "HypothesisInfo",
    "Measure",
    "MeasureResult",
    "StateShape",
    "any_nan",
    "filled",
    "flatten_block",
    "kind_mask",
    "stop_check",
    "stop_requested",
    "undefined",
]

# Set by the engine while it folds a block, so that a long update can give way to a Stop.
_STOP: ContextVar[Callable[[], bool] | None] = ContextVar("dni_lab_stop", default=None)


def stop_requested() -> bool:
    """True when the run folding the current block has been asked to stop.

    A measure whose update or result optimises (the probes) polls it between steps and
    returns early, so a Stop acts within a step instead of a block. The state must still
    hold the block's data: stopping only leaves the fit less far along.
    """
    check = _STOP.get()
    return check is not None and check()


@contextmanager
def stop_check(check: Callable[[], bool]) -> Iterator[None]:
    """Answer :func:`stop_requested` with ``check`` inside the block (the engine's side)."""
    token = _STOP.set(check)
    try:
        yield
    finally:
        _STOP.reset(token)


@dataclass
class MeasureResult:
    """Scores of one measure state.

    Every array has shape ``(n_units, n_hyps)``. Joint measures broadcast their
    group score and error over the group's units. ``reason`` holds why a score
    is null (``None`` where the score is defined); null scores are NaN here and
    become nulls in the score frame.
    """

    unit_score: np.ndarray
    group_score: np.ndarray
    err: np.ndarray
    reason: np.ndarray = field(default=None)  # type: ignore[assignment]
    #: A joint measure's error of the group score alone (``err`` bounds both scores of a
    #: row). Where it is within eps the group's score has settled, though a unit's may not.
    group_err: np.ndarray | None = None
    #: Real symbols read where each hypothesis was undefined (NaN) and left out, ``(n_hyps,)``
    #: or per pair; None where the measure does not count them.
    n_undefined: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = self.unit_score.shape
        if self.reason is None:
            self.reason = np.full(shape, None, dtype=object)
        names = ["group_score", "err", "reason"]
        if self.group_err is not None:
            names.append("group_err")
        if self.n_undefined is not None:
            names.append("n_undefined")
        for name in names:
            arr = getattr(self, name)
            if arr.shape != shape:
                setattr(self, name, np.broadcast_to(arr, shape).copy())


@dataclass(frozen=True)
class StateShape:
    """What a new measure state is sized for: units, hypotheses, device and kinds.

    :meth:`Measure.start` builds one and hands it to :meth:`Measure.empty_state`,
    so a measure writes only what its state holds.
    """

    n_units: int
    n_hyps: int
    device: torch.device
    info: list[HypothesisInfo] | None = None

    def zeros(self, *dims: int) -> torch.Tensor:
        """Float64 zeros of shape ``dims`` on the state's device (running sums stay exact)."""
        return torch.zeros(*dims, dtype=torch.float64, device=self.device)

    def per_pair(self) -> torch.Tensor:
        """Float64 zeros ``(n_units, n_hyps)``."""
        return self.zeros(self.n_units, self.n_hyps)

    def per_unit(self) -> torch.Tensor:
        """Float64 zeros ``(n_units,)``."""
        return self.zeros(self.n_units)

    def per_hyp(self) -> torch.Tensor:
        """Float64 zeros ``(n_hyps,)``."""
        return self.zeros(self.n_hyps)


class Measure:
    """Base class and protocol of a measure.

    Subclasses set ``name`` and implement :meth:`empty_state` (or :meth:`start`),
    :meth:`update`, :meth:`merge` and :meth:`result`. Constructors only store parameters
    (scikit-learn's contract); all work happens in those methods, and states
    are plain objects that can be merged across shards, devices or machines.

    Attributes
    ----------
    name : str
        Short name used in the score frame's ``measure`` column.
    joint : bool
        True if the measure scores a unit *group* (probes), False if it scores
        each unit independently.
    kinds : tuple of str
        Hypothesis kinds the measure accepts; others get null scores with a reason.
    has_error : bool
        Whether :meth:`result` returns an error estimate usable for early stopping.
    one_vs_rest : bool
        Whether it reads a categorical hypothesis as one binary indicator per category
        (``"{hid}={code}"`` rows, :mod:`~dni_lab.backend.hypothesis.one_vs_rest`) instead
        of its codes; the engine adds those indicators when any measure of a run asks.
    null_score : float or None
        The score of "no relation" (0.0 for a correlation). With :meth:`error_df`, what
        turns a score and its ``err`` into a p-value (``dl.inspect(..., fdr=)``); None:
        the measure gives no p-values.
    """

    name: str = "measure"
    joint: bool = False
    kinds: tuple[str, ...] = KINDS
    has_error: bool = False
    one_vs_rest: bool = False
    null_score: float | None = None

    def error_df(self) -> float | None:
        """Degrees of freedom of the t quantile ``err`` is a multiple of (None: normal).

        ``err`` is then ``t_{df, (1 + confidence) / 2} * SE``; p-values read the SE back.
        """
        return None

    def start(
        self,
        n_units: int,
        n_hyps: int,
        device: torch.device | str = "cpu",
        info: list[HypothesisInfo] | None = None,
    ) -> Any:
        """Return an empty state for ``n_units`` units and ``n_hyps`` hypotheses."""
        return self.empty_state(StateShape(n_units, n_hyps, torch.device(device), info))

    def empty_state(self, shape: StateShape) -> Any:
        """The state :meth:`start` returns; implement this or override :meth:`start`."""
        raise NotImplementedError(
            f"measure {type(self).__name__} implements neither empty_state(shape) nor "
            "start(n_units, n_hyps, device, info); implement one of them."
        )

    def update(self, state: Any, U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor) -> Any:
        """Fold one block into ``state`` and return the state.

        An update that optimises may poll :func:`stop_requested` and stop early; it must
        still fold the block's data into the state.
        """
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        """Combine two states as if their blocks had been read by one state."""
        raise NotImplementedError

    def result(self, state: Any, confidence: float = 0.95) -> MeasureResult:
        """Scores, group scores, error and null reasons of ``state``."""
        raise NotImplementedError

    def peek(self, state: Any, confidence: float = 0.95) -> MeasureResult:
        """Cheap current scores for live tables and convergence checks.

        Defaults to :meth:`result`; measures whose ``result`` is expensive (probes
        that re-optimize) override it with their current estimate.
        """
        return self.result(state, confidence)

    def plan(self, state: Any, current: MeasureResult, eps: float, open_: np.ndarray) -> None:
        """Hear, after each convergence check, how far the open pairs are from ``eps``.

        ``current`` is the :meth:`peek` the check read and ``open_`` marks the pairs
        neither converged nor decided. A measure whose updates are costly (a probe's
        refits) may use it to do its work where it can settle a pair; the default
        ignores it.
        """

    def retire(self, state: Any, converged: np.ndarray) -> None:
        """Hear which pairs converged, for good, after a convergence check.

        ``converged`` is ``(n_units, n_hyps)``: the engine keeps those pairs' scores as
        they were when each converged and never reads them from this state again (also
        when the data ends). A measure whose updates are costly (a probe's refits) may
        stop refining what only they show; the default ignores it.
        """

    def saturated(self, state: Any) -> str | None:
        """Why reading more records cannot settle this state's open pairs, or None.

        Asked after each convergence check. A measure that scores a bounded sample
        (a probe's ``max_rows``) stops gaining once the sample is full and its error
        is estimated: its state then stops reading, its converged pairs stay, and the
        open ones are left open with this reason. The default, None, reads on.
        """
        return None

    def sampled(self, state: Any) -> str | None:
        """Why this state's result on every record read is not its full-data value, or None.

        A measure that scores a bounded sample (a probe's ``max_rows``, once rows were
        dropped from it) says so here: reaching the end of the data does not then settle
        a pair; the engine marks converged only the pairs whose error is within eps and
        gives the others this reason. The default, None: reading every record settles all.
        """
        return None

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters (used in fingerprints and export metadata)."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_")}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def flatten_block(
    U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the real symbols of a block as two 2-D matrices ``(N, n_units)``, ``(N, n_hyps)``."""
    return U[mask], H[mask]


def undefined(H: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """``(R, T, n_hyps)`` bool: real symbols where a hypothesis is undefined (NaN).

    None when there is none in the block (the usual case: measures keep their usual path).
    """
    if not any_nan(H):
        return None
    # padding may hold anything (NaN too): only real symbols count
    und = torch.isnan(H) & mask.to(device=H.device, dtype=torch.bool)[..., None]
    return und if bool(und.any()) else None


def any_nan(X: torch.Tensor) -> bool:
    """Whether ``X`` holds a NaN, screened by one sum (NaN only if a value is, or inf meets
    -inf): a fifth of the cost of ``isnan(X).any()`` on the usual block without one."""
    return bool(torch.isnan(X.sum())) and bool(torch.isnan(X).any())


def filled(H: torch.Tensor) -> torch.Tensor:
    """``H`` with 0 where it is undefined: finite, for products whose sums leave those cells out."""
    return torch.nan_to_num(H, nan=0.0)


def kind_mask(info: list[HypothesisInfo] | None, n_hyps: int, kinds: tuple[str, ...]) -> np.ndarray:
    """Boolean per hypothesis: may a measure accepting ``kinds`` score it?"""
    if info is None:
        return np.ones(n_hyps, dtype=bool)
    return np.array([i.kind in kinds for i in info], dtype=bool)
