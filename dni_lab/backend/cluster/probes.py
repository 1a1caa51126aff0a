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
the frame keeps the last result the driver received. The holder is no single point of
failure: blocks lost with their node before the holder fetched them, or a holder whose
process died, are read again by workers and handed over again in order
(:class:`ProbeLink`), so the held states end as one process's.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from ..errors import DNIError
from ..measures import Measure
from ..measures.base import MeasureResult
from .connect import session, worker_error
from .guard import check_ray, ray_gone
from .holder import ProbeHolder
from .placement import placed
from .shards import forkable, merges_exactly
from .wire import apply_frozen, apply_settled, decode, nbytes, no_result

#: Seconds between checks for a Stop while waiting for a result (the driver's POLL_S).
_POLL_S = 0.1

#: Seconds a Stop waits for an exact measure's result from a busy holder.
_STOP_WAIT_S = 5.0

#: Seconds a holder has to say which shard it reads next before it is taken for dead
#: (it answers between two updates; a long fit delays the answer, not a live holder's).
_PING_S = 60.0

#: Rebuilds of a run's held states (lost blocks, a dead holder) before the run fails.
_REBUILDS = 4

#: Holders kept between runs, per Ray session (a new Python with torch costs seconds).
_HOLDERS: dict[tuple[int, str], Any] = {}
_ACTIVE: Counter[tuple[int, str]] = Counter()  # runs using each session's holder now


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
    results fetched; a holder that died, or blocks lost with their node, rebuilt.

    Every shard fed is logged (its stops and check, not its blocks): when an update
    fails because its blocks died with their worker's node, the shards from the first
    one the holder lacks are read again (``reread``) and fed again in order; when the
    holder itself died, a new holder reads them all again from shard 0. Either way the
    held states end as one process's (a shard depends only on its records).
    """

    def __init__(self, ray: Any, insp: Any, held: list[int], run: str,
                 reread: Callable[[list[int]], dict[int, Any]] | None = None) -> None:  # fmt: skip
        self.ray, self.insp, self.run, self.held = ray, insp, run, held
        self.reread = reread  # shard indices -> their held blocks, read again by workers
        self.holder = _holder(ray)
        self.key = session(ray)
        _ACTIVE[self.key] += 1
        self.received = 0  # bytes of what the holder sent
        self.lost_shards = 0  # shards whose held blocks were read again
        self.holder_restarts = 0  # holders that died and were rebuilt
        self._known: dict[int, tuple[str, MeasureResult]] = {}
        self._pending: list[Any] = []  # updates not yet seen to succeed
        self._log: list[tuple[dict[int, int], Any]] = []  # per shard fed: stops, check
        self._told: set[int] = set()  # stopped states the holder knows of
        # The run's thread feeds and the notebook's thread asks for frames: both read and
        # clear ``_pending``, and a list cleared while Ray's get walks it fails in Ray
        self._lock = threading.RLock()
        self.closed = False
        specs = [(i, insp.states[i].measure, len(insp.states[i].columns)) for i in held]
        # with early stopping the holder checks its states after each block (those with
        # an error estimate: the others never converge)
        self.checks = any(m.has_error for _, m, _ in specs)
        self._begin = (run, specs, len(insp.info), insp.info, torch.get_num_threads())
        self.holder.begin.remote(*self._begin)
        for i, (_, m, _) in zip(held, specs, strict=True):
            insp.states[i].measure = Held(m, self, i)

    def feed(self, blocks: Any) -> None:
        """Hand the next shard's blocks (a reference: the driver does not fetch them)
        over, after the states that stopped since the last; with early stopping, wait
        for the holder's convergence check and copy its settled pairs into the driver's
        states.

        Call after ``progress.records_read`` counts the shard. Returns early on a Stop.
        """
        insp = self.insp
        stops = {i: insp.states[i].stopped_at for i in self.held
                 if insp.states[i].stopped_at is not None and i not in self._told}  # fmt: skip
        self._told |= set(stops)
        check = None
        if self.checks and insp._checks():
            check = (insp.params.eps, insp.params.confidence, insp.progress.records_read)
        check_ray(self.ray)
        with self._lock:
            index = len(self._log)
            self._log.append((stops, check))
            ref = self.holder.update.remote(self.run, index, blocks, stops, check)
            self._pending.append(ref)
        if check is None:
            return
        while not self._ready(ref):
            if insp._cancel:
                return
        # after a rebuild, the last update fed again is this shard's (the same check)
        changes = self._get(ref, lambda: self._pending[-1])
        self.received += nbytes(changes)
        for i, bits in (changes or {}).items():
            apply_settled(insp.states[i], bits, insp.params.eps)

    def _ready(self, ref: Any) -> bool:
        """Whether ``ref`` is done, after at most a poll; never calls a Ray shutting down."""
        check_ray(self.ray)
        return bool(self.ray.wait([ref], timeout=_POLL_S)[0])

    def _get(self, ref: Any, again: Callable[[], Any]) -> Any:
        """``ref``'s value, after the earlier updates succeeded; the holder rebuilt
        (and ``again()`` asked instead) where blocks or the holder were lost."""
        with self._lock:  # one thread at a time checks (and rebuilds) the holder
            return self._get_locked(ref, again)

    def _get_locked(self, ref: Any, again: Callable[[], Any]) -> Any:
        errors = self.ray.exceptions
        for attempt in range(_REBUILDS + 1):
            check_ray(self.ray)
            try:
                done = self.ray.get(list(self._pending))  # an update's error, in order
                out = self.ray.get(ref)
                if any(isinstance(x, str) for x in [*done, out]):  # GAP: shards missing
                    raise _Lost("an update found an earlier shard missing")
                self._pending.clear()
                return out
            except (errors.RayError, _Lost) as caught:
                if ray_gone(self.ray):  # the user's ray.shutdown(): the run ends partial
                    raise
                err = worker_error(caught)  # a task's own error inside Ray's wrapper
                if isinstance(caught, errors.RayTaskError) and not isinstance(
                    err, errors.RayError
                ):  # the holder's own code raised: one process would raise it too
                    raise err from None
                # the holder's process, or the blocks it was handed, are gone (Ray wraps
                # a lost argument's ActorUnschedulableError in a RayTaskError)
                if attempt == _REBUILDS:
                    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
                    raise DNIError(
                        f"the probe holder lost its blocks {_REBUILDS + 1} times ({first}); "
                        "check the cluster's nodes and memory, or run without cluster=."
                    ) from None
                self._rebuild()
                ref = again()
        raise AssertionError("unreachable")  # pragma: no cover

    def _rebuild(self) -> None:
        """Read again the shards the holder lacks and feed them in order; a dead holder
        is replaced and reads every shard fed so far."""
        try:
            start = self.ray.get(self.holder.applied.remote(self.run), timeout=_PING_S)
        except Exception:  # the holder's process is gone (or hangs): a new holder
            self.holder = _replace_holder(self.ray, self.holder)
            self.holder_restarts += 1
            start = None
        if start is None:  # a holder without the run's states: they start again
            self.holder.begin.remote(*self._begin)
            start = 0
        todo = list(range(start, len(self._log)))
        self._pending = []
        if not todo:
            return
        if self.reread is None:
            raise DNIError("the probe holder lost blocks and no workers can read them again.")
        blocks = self.reread(todo)
        self.lost_shards += len(todo)
        for i in todo:
            stops, check = self._log[i]
            self._pending.append(self.holder.update.remote(self.run, i, blocks[i], stops, check))

    def result(self, index: int, confidence: float, final: bool) -> MeasureResult:
        known = self._known.get(index)
        state = self.insp.states[index]
        kept = known[1] if known else no_result(state)
        # A Stop: a probe's scores as they stood (its fit on the holder cannot see the
        # Stop); an exact measure's are cheap to ask for, unless the holder is busy.
        probe = not merges_exactly(state.measure.measure)
        if not self.closed and ray_gone(self.ray):  # ray.shutdown() while the frame is built
            self.closed = self.insp._cancel = True
        if self.closed or (self.insp._cancel and probe):
            return kept

        def ask() -> Any:
            return self.holder.result.remote(self.run, index, confidence, final,
                                             known[0] if known else None)  # fmt: skip

        check_ray(self.ray)
        ref = ask()
        waited = 0.0
        while not self._ready(ref):
            waited += _POLL_S if self.insp._cancel else 0.0
            if self.insp._cancel and (probe or waited > _STOP_WAIT_S):
                return kept
        digest, payload, frozen = self._get(ref, ask)
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
        key = self.key
        _ACTIVE[key] -= 1
        if ray_gone(self.ray):  # the holder died with that Ray
            _HOLDERS.pop(key, None)
        elif keep or _ACTIVE[key] > 0:
            self.holder.end.remote(self.run)
        else:
            _HOLDERS.pop(key, None)
            try:
                self.ray.kill(self.holder, no_restart=True)
            except Exception:  # already dead, or Ray already gone
                pass


class _Lost(Exception):
    """A holder's answer says an earlier shard's blocks never reached it."""


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


def _replace_holder(ray: Any, dead: Any) -> Any:
    """A new holder in place of ``dead`` (once, whichever run notices first)."""
    key = session(ray)
    if _HOLDERS.get(key) is dead:
        del _HOLDERS[key]
        with contextlib.suppress(Exception):  # already gone
            ray.kill(dead, no_restart=True)
    return _holder(ray)


def forget_holders(ray: Any) -> None:
    """Kill the kept holders (Ray stops, or the cluster's resources are wanted)."""
    for key in list(_HOLDERS):
        try:
            ray.kill(_HOLDERS.pop(key), no_restart=True)
        except Exception:  # already dead, or Ray already gone
            pass
