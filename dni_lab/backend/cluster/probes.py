"""States kept off the driver: a probe's always, every exact one but a calibrating one.

``logreg``'s state keeps every row it read, and its ``merge`` is not order-exact
(shards.py), so one state must read the blocks in record order. That state lives on a
:class:`ProbeHolder` actor: workers return a held measure's block (its units'
behaviors) as a second Ray object that the driver never fetches; the driver hands its
reference to the holder, in shard order, and the holder fetches it from the worker's
node and runs ``measure.update`` on it, the very code one process runs.

The exact measures' fresh per-shard states (those that do not calibrate on block 0,
which the driver forks) go to the holder the same way, which merges them in shard
order with ``Measure.merge`` (:func:`holds`). With early stopping the holder also runs
the convergence check after each block, :meth:`MeasureState.check`, the one-process
code, on its own :class:`MeasureState` of each held state; the driver receives the
pairs that converged or are decided (two bits a pair, wire.py) and decides with them,
as one process does, whether to stop: it tells the holder which states stopped with
the next block. Results (``peek``, ``result``) and the scores frozen when pairs
converged reach the driver only when it shows a frame (the live table, the end), and a
result equal to the one it already has is not sent again.

A holder holds the probe's rows (what the driver held before) in one process on the
driver's node (a worker node's death leaves it alive); it reserves no CPU and is kept
between runs, like the workers. Ray sends a return value under 100 KB to its owner,
the driver, inline: such small blocks pass through the driver's process after all.
A Stop kills the holder (its fit cannot see the Stop) unless another run uses it, and
the frame keeps the last result the driver received.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch

from ..engine.states import MeasureState
from ..measures import Measure
from ..measures.base import MeasureResult
from .connect import session, worker_error
from .placement import placed
from .shards import Block, forkable, merges_exactly, untrimmed
from .wire import (
    Bits,
    apply_frozen,
    apply_settled,
    decode,
    encode,
    frozen_since,
    nbytes,
    no_result,
    settled,
)

#: Seconds between checks for a Stop while waiting for a result (the driver's POLL_S).
_POLL_S = 0.1

#: Seconds a Stop waits for an exact measure's result from a busy holder.
_STOP_WAIT_S = 5.0

#: Holders kept between runs, per Ray session (a new Python with torch costs seconds).
_HOLDERS: dict[tuple[int, str], Any] = {}
_ACTIVE: Counter[tuple[int, str]] = Counter()  # runs using each session's holder now


class _Run:
    """One run's held states on a holder, and what the driver was sent of them."""

    def __init__(self, states: dict[int, MeasureState]) -> None:
        self.states = states
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

    def update(
        self,
        run: str,
        blocks: dict[int, Any],
        stops: dict[int, int] | None = None,
        check: tuple[float, float, int] | None = None,
    ) -> dict[int, Bits] | None:
        """Fold one shard's ``{state index: Block or fresh state}`` into the run's states.

        A block of behaviors by ``update``, a state by ``merge`` (the first replaces the
        empty one, as on the driver). ``stops`` names states that stopped reading before
        this shard (``MeasureState.stop`` on the driver): their later shards are dropped.
        With ``check`` = ``(eps, confidence, records read)``, the convergence check
        follows, and the settled bits of each state whose bits changed are returned.
        """
        r = self._runs.get(run)
        if r is None:
            return None
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


class Held(Measure):
    """Stands in on the driver for a state a :class:`ProbeHolder` updates."""

    def __init__(self, measure: Measure, link: ProbeLink, index: int) -> None:
        self.measure, self.link, self.index = measure, link, index
        self.name, self.joint = measure.name, measure.joint
        self.has_error = measure.has_error
        self.kinds = getattr(measure, "kinds", None)

    def update(self, state: Any, U: Any, H: Any, mask: Any) -> Any:  # pragma: no cover
        raise RuntimeError("a held state is updated on its ProbeHolder, not on the driver")

    def peek(self, state: Any, confidence: float = 0.95) -> MeasureResult:
        return self.link.result(self.index, confidence, final=False)

    def result(self, state: Any, confidence: float = 0.95) -> MeasureResult:
        return self.link.result(self.index, confidence, final=True)


class ProbeLink:
    """The driver's side of a run's holder: blocks handed over, settled pairs and
    results fetched."""

    def __init__(self, ray: Any, insp: Any, held: list[int], run: str) -> None:
        self.ray, self.insp, self.run, self.held = ray, insp, run, held
        self.holder = _holder(ray)
        _ACTIVE[session(ray)] += 1
        self.received = 0  # bytes of what the holder sent
        self._known: dict[int, tuple[str, MeasureResult]] = {}
        self._pending: list[Any] = []
        self._told: set[int] = set()  # stopped states the holder knows of
        self.closed = False
        specs = [(i, insp.states[i].measure, len(insp.states[i].columns)) for i in held]
        # with early stopping the holder checks its states after each block (those with
        # an error estimate: the others never converge)
        self.checks = any(m.has_error for _, m, _ in specs)
        threads = torch.get_num_threads()
        self.holder.begin.remote(run, specs, len(insp.info), insp.info, threads)
        for i, (_, m, _) in zip(held, specs, strict=True):
            insp.states[i].measure = Held(m, self, i)

    def feed(self, blocks: Any) -> None:
        """Hand one shard's blocks (a reference: the driver does not fetch them) over,
        after the states that stopped since the last; with early stopping, wait for the
        holder's convergence check and copy its settled pairs into the driver's states.

        Call after ``progress.records_read`` counts the shard. Returns early on a Stop.
        """
        insp = self.insp
        stops = {i: insp.states[i].stopped_at for i in self.held
                 if insp.states[i].stopped_at is not None and i not in self._told}  # fmt: skip
        self._told |= set(stops)
        check = None
        if self.checks and insp._checks():
            check = (insp.params.eps, insp.params.confidence, insp.progress.records_read)
        ref = self.holder.update.remote(self.run, blocks, stops, check)
        self._pending.append(ref)
        if check is None:
            return
        while not self.ray.wait([ref], timeout=_POLL_S)[0]:
            if insp._cancel:
                return
        changes = self._get(ref)
        self.received += nbytes(changes)
        for i, bits in (changes or {}).items():
            apply_settled(insp.states[i], bits, insp.params.eps)

    def _get(self, ref: Any) -> Any:
        """``ref``'s value, after raising the first error of an earlier update."""
        try:
            self.ray.get(self._pending)  # an update's error, in the order it happened
            out = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as err:
            raise worker_error(err) from None
        self._pending.clear()
        return out

    def result(self, index: int, confidence: float, final: bool) -> MeasureResult:
        known = self._known.get(index)
        state = self.insp.states[index]
        kept = known[1] if known else no_result(state)
        # A Stop: a probe's scores as they stood (its fit on the holder cannot see the
        # Stop); an exact measure's are cheap to ask for, unless the holder is busy.
        probe = not merges_exactly(state.measure.measure)
        if self.closed or (self.insp._cancel and probe):
            return kept
        ref = self.holder.result.remote(self.run, index, confidence, final,
                                        known[0] if known else None)  # fmt: skip
        waited = 0.0
        while not self.ray.wait([ref], timeout=_POLL_S)[0]:
            waited += _POLL_S if self.insp._cancel else 0.0
            if self.insp._cancel and (probe or waited > _STOP_WAIT_S):
                return kept
        digest, payload, frozen = self._get(ref)
        self.received += nbytes(payload) + nbytes(frozen)
        if frozen is not None:  # the frame's converged pairs show these scores
            apply_frozen(state, frozen)
        if payload is not None:
            self._known[index] = (digest, decode(payload))
        return self._known[index][1]

    def close(self, keep: bool) -> None:
        """Free the run's rows; after a Stop or a failure, kill the holder (mid-fit)
        unless another run uses it."""
        self.closed = True
        key = session(self.ray)
        _ACTIVE[key] -= 1
        if keep or _ACTIVE[key] > 0:
            self.holder.end.remote(self.run)
        else:
            _HOLDERS.pop(key, None)
            try:
                self.ray.kill(self.holder, no_restart=True)
            except Exception:  # already dead, or Ray already gone
                pass


def holds(measure: Measure) -> bool:
    """Whether a holder keeps ``measure``'s states.

    Where the measure does not merge exactly (``logreg``: its blocks), and every
    measure that does not calibrate on block 0 (the driver forks those, and merges them
    itself): the driver receives settled pairs per block and results when it asks for
    a frame, not a state per block.
    """
    return not merges_exactly(measure) or not forkable(measure)


def _holder(ray: Any) -> Any:
    key = session(ray)
    for old in [k for k in _HOLDERS if k != key]:  # a Ray this process left
        del _HOLDERS[old]
    if key not in _HOLDERS:
        # On the driver's node: a worker node that dies must not take the held states
        # with it (the driver's own node dying ends the run anyway).
        try:
            here = str(ray.get_runtime_context().get_node_id())
        except Exception:  # a Ray Client driver has no node of its own
            here = None
        opts = placed({"num_cpus": 0}, here)
        _HOLDERS[key] = ray.remote(ProbeHolder).options(**opts).remote()
    return _HOLDERS[key]


def forget_holders(ray: Any) -> None:
    """Kill the kept holders (Ray stops, or the cluster's resources are wanted)."""
    for key in list(_HOLDERS):
        try:
            ray.kill(_HOLDERS.pop(key), no_restart=True)
        except Exception:  # already dead, or Ray already gone
            pass
