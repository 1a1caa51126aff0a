"""The probe holder: an actor that keeps a run's held states and folds blocks into them.

The driver's side, which hands blocks over, asks for results and rebuilds a holder
that died, is :class:`~.probes.ProbeLink` (probes.py says which states are held and
why). Blocks apply in shard order: a shard that arrives before an earlier one (whose
blocks were lost with their node) is refused with :data:`GAP`, and the driver reads
the shards from :meth:`ProbeHolder.applied` on again.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from ..engine.states import MeasureState
from ..measures import Measure
from .shards import Block, untrimmed
from .wire import Bits, encode, frozen_since, settled

#: What a holder answers for a shard it cannot apply yet (an earlier one is missing).
GAP = "gap"


class _Run:
    """One run's held states on a holder, and what the driver was sent of them."""

    def __init__(self, states: dict[int, MeasureState]) -> None:
        self.states = states
        self.next = 0  # the shard the run's states read next (blocks apply in shard order)
        self.merged: set[int] = set()  # states that received a shard's state
        self.bits: dict[int, bytes] = {}  # the settled bits last sent, per state
        self.frozen_sent = {i: np.zeros(s.converged.shape, bool) for i, s in states.items()}


class ProbeHolder:
    """Keeps the held states of a run and folds blocks into them in the order given.

    Ray runs one caller's calls of an actor in the order they were made, so blocks
    handed over in shard order are read in shard order.
    """

    def __init__(self) -> None:
        # two runs may overlap (a notebook starts a query while the last one stops)
        self._runs: dict[str, _Run] = {}

    def begin(self, run: str, specs: list[tuple[int, Measure, int]], n_hyps: int,
              info: Any, threads: int) -> None:  # fmt: skip
        """Fresh states for run ``run``: ``(state index, measure, units)`` each.

        ``threads`` is the driver's torch thread count: a probe's Newton path depends on
        the float rounding of its products, which depends on the threads that sum them.
        """
        torch.set_num_threads(threads)
        self._runs[run] = _Run({
            i: MeasureState(None, m, "", np.arange(n), m.start(n, n_hyps, "cpu", info),  # type: ignore[arg-type]
                            np.zeros((n, n_hyps), bool))
            for i, m, n in specs
        })  # fmt: skip

    def pid(self) -> int:
        """The holder's process id (tests kill it)."""
        return os.getpid()

    def applied(self, run: str) -> int | None:
        """The shard run ``run``'s states read next; None for a run this holder lacks."""
        r = self._runs.get(run)
        return None if r is None else r.next

    def update(
        self,
        run: str,
        index: int,
        blocks: dict[int, Any],
        stops: dict[int, int] | None = None,
        check: tuple[float, float, int] | None = None,
    ) -> dict[int, Bits] | str | None:
        """Fold shard ``index``'s ``{state index: Block or fresh state}`` into the run's states.

        A block of behaviors by ``update``, a state by ``merge`` (the first replaces the
        empty one, as on the driver). ``stops`` names states that stopped reading before
        this shard (``MeasureState.stop`` on the driver): their later shards are dropped.
        With ``check`` = ``(eps, confidence, records read)``, the convergence check
        follows, and the settled bits of each state whose bits changed are returned.
        A shard that is not the next one (an earlier shard's blocks were lost with
        their node) changes nothing and returns :data:`GAP`: the driver reads the
        shards from :meth:`applied` on again.
        """
        r = self._runs.get(run)
        if r is None or index != r.next:
            return GAP
        r.next += 1
        for i, at in (stops or {}).items():
            r.states[i].stopped_at = at
        for i, b in sorted(blocks.items()):
            s = r.states[i]
            if s.stopped_at is not None:  # a shard dealt before the driver said so
                continue
            if isinstance(b, Block):
                s.accumulator = s.measure.update(s.accumulator, b.U, b.H, b.mask)
            else:
                new = untrimmed(b)
                s.accumulator = new if i not in r.merged else s.measure.merge(s.accumulator, new)
                r.merged.add(i)
        if check is None:
            return None
        out = {}
        for i, s in r.states.items():
            if not s.measure.has_error:  # never converges: nothing to check or send
                continue
            s.check(*check)
            bits = settled(s)
            key = bits[0].tobytes() + bits[1].tobytes() + bits[2].encode() + repr(bits[3]).encode()
            if r.bits.get(i) != key:
                r.bits[i] = key
                out[i] = bits
        return out

    def result(self, run: str, index: int, confidence: float, final: bool, known: str | None
               ) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:  # fmt: skip
        """A state's ``peek`` (or ``result`` when ``final``) as :func:`~.wire.encode`
        ships it, and the scores frozen since the last call (:func:`~.wire.frozen_since`)."""
        r = self._runs[run]
        s = r.states[index]
        res = s.measure.result(s.accumulator, confidence) if final else s.measure.peek(
            s.accumulator, confidence)  # fmt: skip
        return (*encode(res, known), frozen_since(s, r.frozen_sent[index]))

    def end(self, run: str) -> None:
        """Free the run's rows (the holder is kept for the next run)."""
        self._runs.pop(run, None)
