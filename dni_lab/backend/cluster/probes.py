"""States kept off the driver: probes always, every state of a run read to the end.

``logreg``'s state keeps every row it read, and its ``merge`` is not order-exact
(shards.py), so one state must read the blocks in record order. That state lives on a
:class:`ProbeHolder` actor: workers return a held measure's block (its units'
behaviors) as a second Ray object that the driver never fetches; the driver hands its
reference to the holder, in shard order, and the holder fetches it from the worker's
node and runs ``measure.update`` on it, the very code one process runs. The driver
receives only results (``peek`` per early-stopping check, ``result`` at the end), and
a result equal to the one it already has is not sent again (:func:`_encode`).

A run read to the end (``eps=None``) checks no convergence per block, so the driver
needs no state until it shows a frame: there the holder also merges the exact
measures' fresh per-shard states (those that do not calibrate on block 0), in shard
order with ``Measure.merge``, and the driver receives their results instead of a state
per block (:func:`holds`).

A holder holds the probe's rows (what the driver held before) in one process on the
driver's node (a worker node's death leaves it alive); it reserves no CPU and is kept
between runs, like the workers. Ray sends a return value under 100 KB to its owner,
the driver, inline: such small blocks pass through the driver's process after all.
A Stop kills the holder (its fit cannot see the Stop) unless another run uses it, and
the frame keeps the last result the driver received.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np
import torch

from ..measures import Measure
from ..measures.base import MeasureResult
from .connect import session, worker_error
from .placement import placed
from .shards import Block, forkable, merges_exactly, untrimmed

#: Seconds between checks for a Stop while waiting for a result (the driver's POLL_S).
_POLL_S = 0.1

#: Seconds a Stop waits for an exact measure's result from a busy holder.
_STOP_WAIT_S = 5.0

#: Holders kept between runs, per Ray session (a new Python with torch costs seconds).
_HOLDERS: dict[tuple[int, str], Any] = {}
_ACTIVE: Counter[tuple[int, str]] = Counter()  # runs using each session's holder now


class ProbeHolder:
    """Keeps the held states of a run and folds blocks into them in the order given.

    Ray runs one caller's calls of an actor in the order they were made, so blocks
    handed over in shard order are read in shard order.
    """

    def __init__(self) -> None:
        # run -> (state index -> (measure, state), states that received a shard); two
        # runs may overlap (a notebook starts a query while the last one stops)
        self._runs: dict[str, tuple[dict[int, tuple[Measure, Any]], set[int]]] = {}

    def begin(self, run: str, specs: list[tuple[int, Measure, int]], n_hyps: int,
              info: Any, threads: int) -> None:  # fmt: skip
        """Fresh states for run ``run``: ``(state index, measure, units)`` each.

        ``threads`` is the driver's torch thread count: a probe's Newton path depends on
        the float rounding of its products, which depends on the threads that sum them.
        """
        torch.set_num_threads(threads)
        self._runs[run] = ({i: (m, m.start(n, n_hyps, "cpu", info)) for i, m, n in specs}, set())

    def update(self, run: str, blocks: dict[int, Any]) -> None:
        """Fold one shard's ``{state index: Block or fresh state}`` into the run's states:
        a block of behaviors by ``update``, a state by ``merge`` (the first replaces the
        empty one, as on the driver)."""
        if run not in self._runs:
            return
        states, merged = self._runs[run]
        for i, b in sorted(blocks.items()):
            m, acc = states[i]
            if isinstance(b, Block):
                acc = m.update(acc, b.U, b.H, b.mask)
            else:
                acc = untrimmed(b) if i not in merged else m.merge(acc, untrimmed(b))
                merged.add(i)
            states[i] = (m, acc)

    def result(self, run: str, index: int, confidence: float, final: bool,
               known: str | None) -> tuple[str, dict[str, Any] | None]:  # fmt: skip
        """A state's ``peek`` (or ``result`` when ``final``) as :func:`_encode` ships it."""
        m, acc = self._runs[run][0][index]
        res = m.result(acc, confidence) if final else m.peek(acc, confidence)
        return _encode(res, known)

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
    """The driver's side of a run's holder: blocks handed over, results fetched."""

    def __init__(self, ray: Any, insp: Any, held: list[int], run: str) -> None:
        self.ray, self.insp, self.run = ray, insp, run
        self.holder = _holder(ray)
        _ACTIVE[session(ray)] += 1
        self.received = 0  # bytes of the results the holder sent
        self._known: dict[int, tuple[str, MeasureResult]] = {}
        self._pending: list[Any] = []
        self.closed = False
        specs = [(i, insp.states[i].measure, len(insp.states[i].columns)) for i in held]
        threads = torch.get_num_threads()
        self.holder.begin.remote(run, specs, len(insp.info), insp.info, threads)
        for i, (_, m, _) in zip(held, specs, strict=True):
            insp.states[i].measure = Held(m, self, i)

    def feed(self, blocks: Any) -> None:
        """Hand one shard's blocks (a reference: the driver does not fetch them) over."""
        self._pending.append(self.holder.update.remote(self.run, blocks))

    def result(self, index: int, confidence: float, final: bool) -> MeasureResult:
        known = self._known.get(index)
        kept = known[1] if known else _none(self.insp.states[index])
        # A Stop: a probe's scores as they stood (its fit on the holder cannot see the
        # Stop); an exact measure's are cheap to ask for, unless the holder is busy.
        probe = not merges_exactly(self.insp.states[index].measure.measure)
        if self.closed or (self.insp._cancel and probe):
            return kept
        ref = self.holder.result.remote(self.run, index, confidence, final,
                                        known[0] if known else None)  # fmt: skip
        waited = 0.0
        while not self.ray.wait([ref], timeout=_POLL_S)[0]:
            waited += _POLL_S if self.insp._cancel else 0.0
            if self.insp._cancel and (probe or waited > _STOP_WAIT_S):
                return kept
        try:
            self.ray.get(self._pending)  # an update's error, in the order it happened
            digest, payload = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as err:
            raise worker_error(err) from None
        self._pending.clear()
        if payload is not None:
            self.received += sum(v.nbytes for v in payload.values() if hasattr(v, "nbytes"))
            self._known[index] = (digest, _decode(payload))
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


def holds(measure: Measure, eps: float | None) -> bool:
    """Whether a holder keeps ``measure``'s states in a run with this ``eps``.

    Always where the measure does not merge exactly (``logreg``: its blocks); and in a
    run read to the end (``eps=None``), which checks no convergence per block, every
    measure that does not calibrate on block 0 (the driver forks those): the driver
    then receives results when it asks for a frame, not a state per block.
    """
    if not merges_exactly(measure):
        return True
    return eps is None and not forkable(measure)


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


def _encode(res: MeasureResult, known: str | None) -> tuple[str, dict[str, Any] | None]:
    """``res`` as arrays, a group's broadcast rows once and reasons as codes; no payload
    when its digest is ``known`` (a probe's result changes at its checkpoints only)."""
    out: dict[str, Any] = {"unit_score": np.ascontiguousarray(res.unit_score),
                           "err": np.ascontiguousarray(res.err)}  # fmt: skip
    for name in ("group_score", "group_err"):
        v = getattr(res, name)
        if v is None:
            continue
        v = np.asarray(v)
        same = (
            v.ndim == 2
            and len(v) > 0
            and np.array_equal(v, np.broadcast_to(v[:1], v.shape), equal_nan=True)
        )
        out[name] = np.ascontiguousarray(v[:1] if same else v)
        out[name + "_rows"] = v.shape[0] if same else 0
    texts: dict[Any, int] = {}
    codes = [texts.setdefault(r, len(texts)) for r in res.reason.ravel()]
    small = np.uint8 if len(texts) <= 256 else np.int32  # a handful of reasons: a byte each
    out["reason_codes"] = np.array(codes, small).reshape(res.reason.shape)
    out["reason_texts"] = list(texts)
    h = hashlib.sha256()
    for k in sorted(out):
        v = out[k]
        h.update(k.encode() + (v.tobytes() if isinstance(v, np.ndarray) else repr(v).encode()))
    digest = h.hexdigest()
    return digest, (None if digest == known else out)


def _decode(p: dict[str, Any]) -> MeasureResult:
    def rows(name: str) -> np.ndarray | None:
        if name not in p:
            return None
        n = p[name + "_rows"]
        return np.repeat(p[name], n, axis=0) if n else p[name]

    texts = np.empty(len(p["reason_texts"]), dtype=object)
    texts[:] = p["reason_texts"]
    return MeasureResult(p["unit_score"], rows("group_score"), p["err"],
                         texts[p["reason_codes"]], rows("group_err"))  # fmt: skip


def _none(state: Any) -> MeasureResult:
    """No result yet (a Stop before the first): every score null, saying so."""
    shape = state.converged.shape
    nan = np.full(shape, np.nan)
    return MeasureResult(nan, nan.copy(), nan.copy(), np.full(shape, "no score yet", object))
