"""A user function of two 1-D arrays as a measure (the slow path).

The state buffers every real symbol on the CPU, up to ``max_rows``; the
function runs once per (unit, hypothesis) pair when the result is asked for.
This suits exploratory measures on modest data; a measure that must stream
should implement the :class:`~dni_lab.backend.measures.base.Measure` protocol.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import MeasureError
from ..hypothesis.hypotheses import HypothesisInfo
from ._common import (
    SymbolMeasure,
    add_counts,
    finish,
    new_reasons,
    opening_reasons,
    set_reason,
)
from .base import MeasureResult, StateShape


@dataclass
class FunctionState:
    """Real symbols read so far, as CPU float32 blocks."""

    n_units: int
    n_hyps: int
    info: list[HypothesisInfo] | None
    U: list[torch.Tensor] = field(default_factory=list)  # (N_i, n_units) each
    H: list[torch.Tensor] = field(default_factory=list)  # (N_i, n_hyps) each
    n: int = 0
    n_records: int = 0
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined, left out


class FunctionMeasure(SymbolMeasure):
    """Score each (unit, hypothesis) pair with ``fn(u, h) -> float``.

    Parameters
    ----------
    fn : callable
        ``fn(u, h)`` receives two float64 1-D arrays of equal length: the
        unit's and the hypothesis' values on every real symbol read where the
        hypothesis is defined (not NaN).
    name : str, optional
        Name in the score frame; defaults to ``fn.__name__``.
    max_rows : int
        Most symbols the state buffers; more raise :class:`MeasureError`.

    Notes
    -----
    An exception raised by ``fn``, or a result that is not a finite number,
    becomes a null score whose reason quotes it.
    """

    def __init__(
        self,
        fn: Callable[[np.ndarray, np.ndarray], float],
        name: str | None = None,
        max_rows: int = 2_000_000,
    ):
        self.fn = fn
        self.name = name if name is not None else getattr(fn, "__name__", "function")
        self.max_rows = max_rows

    def empty_state(self, shape: StateShape) -> FunctionState:
        return FunctionState(shape.n_units, shape.n_hyps, shape.info)

    def _check_rows(self, n: int) -> None:
        if n > self.max_rows:
            raise MeasureError(
                f"function measure {self.name!r} would buffer {n:,} symbols, more than "
                f"max_rows={self.max_rows:,}: it keeps every symbol in memory to call the "
                f"function at the end. Read fewer records (set eps, or pass less data), "
                f"raise max_rows, or implement the Measure protocol (start/update/merge/"
                f"result) to stream."
            )

    def fold(self, state: FunctionState, Uf: torch.Tensor, Hf: torch.Tensor) -> FunctionState:
        self._check_rows(state.n + Uf.shape[0])
        # Copies: a CPU block may be a view of a buffer the engine reuses for the next block.
        state.U.append(Uf.to("cpu", copy=True))
        state.H.append(Hf.to("cpu", copy=True))
        state.n += Uf.shape[0]
        return state

    def merge(self, a: FunctionState, b: FunctionState) -> FunctionState:
        self._check_rows(a.n + b.n)
        return FunctionState(
            a.n_units, a.n_hyps, a.info, [*a.U, *b.U], [*a.H, *b.H],
            a.n + b.n, a.n_records + b.n_records, add_counts(a.n_undef, b.n_undef),
        )  # fmt: skip

    def _call(self, u: np.ndarray, h: np.ndarray) -> tuple[float, str | None]:
        """The function's value, or NaN and the reason it gave none."""
        try:
            value = float(self.fn(u, h))
        except Exception as exc:  # a user function may fail in any way: report, don't crash
            return math.nan, f"{self.name} raised {type(exc).__name__}: {exc}"
        if not math.isfinite(value):
            return math.nan, f"{self.name} returned {value}"
        return value, None

    def peek(self, state: FunctionState, confidence: float = 0.95) -> MeasureResult:
        """Null scores: calling the function on every pair after every block would be quadratic."""
        reason = new_reasons(state.n_units, state.n_hyps)
        set_reason(reason, True, f"{self.name} is computed when the run ends (function measure)")
        return finish(np.full(reason.shape, np.nan), reason)

    def result(self, state: FunctionState, confidence: float = 0.95) -> MeasureResult:
        reason = opening_reasons(self, state.n_units, state.n_hyps, state.info, state.n)
        score = np.full((state.n_units, state.n_hyps), np.nan)
        if state.n == 0:
            return finish(score, reason)
        # One contiguous float64 row per unit and hypothesis, shared by every call.
        U = np.ascontiguousarray(torch.cat(state.U).numpy().T, dtype=np.float64)
        H = np.ascontiguousarray(torch.cat(state.H).numpy().T, dtype=np.float64)
        # Read-only: an in-place edit by the function would leak into other pairs.
        U.flags.writeable = False
        H.flags.writeable = False
        for j in range(state.n_hyps):
            if reason[0, j] is not None:
                continue
            ok = ~np.isnan(H[j])  # undefined symbols are left out of this hypothesis's pairs
            h = H[j] if ok.all() else H[j][ok]
            h.flags.writeable = False
            for i in range(state.n_units):
                score[i, j], reason[i, j] = self._call(U[i] if ok.all() else U[i][ok], h)
        return finish(score, reason, state=state)
