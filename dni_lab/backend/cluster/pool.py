"""A run's worker actors and the shards in flight on them: dealing, answers, lost
workers and nodes (a shard depends only on its records, so another worker reads it
again), workers for nodes that join, and in-order merging with early stopping."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engine.inspection import Inspection
from ..engine.provenance import RecordsHash
from ..engine.sources import Part
from ..errors import DNIError
from .actors import RETRIES, hosts, new_actor, release
from .connect import worker_error
from .guard import check_ray, ray_gone
from .placement import worker_shape
from .probes import ProbeLink, holds
from .shards import InOrder, Shard, fork, forkable, payload_bytes, untrimmed
from .view import ClusterView, request_demand
from .worker import Plan

#: Shards in flight per worker: one being read, one waiting, so a worker never idles.
AHEAD = 2

#: Seconds between checks for a cancel while waiting for workers (Stop's latency).
POLL_S = 0.1


class Pool:
    """The run's actors and the shards in flight on them."""

    def __init__(self, ray: Any, plan: Plan, insp: Inspection) -> None:
        self.ray = ray
        shape = worker_shape(
            ray.cluster_resources(), insp.params.cluster, insp.params.workers, insp.params.device
        )
        try:
            self.plan = [ray.put(plan)]  # a list: Ray passes the reference, not the plan
        except Exception as exc:  # what the check above passed but Ray refused
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise DNIError(
                f"cannot send the inspection to Ray workers: {first}. Models, encode "
                "functions, hypotheses and measures must pickle (no open files, locks or "
                "sockets in them)."
            ) from None
        self.shape = shape
        self.key, self.actors = hosts(ray, shape)
        # task -> (shard, actor slot, the actor then): a shard whose worker is gone is dealt again
        self.inflight: dict[Any, tuple[Shard, int, Any]] = {}
        self.load = [0] * len(self.actors)  # shards in flight per actor
        self.tries: Counter[int] = Counter()  # failed reads per shard index
        self.received = 0  # bytes of the states workers sent back (held ones not)
        self.answers = 0  # shards whose states came back
        self.redealt = 0  # shards dealt again after their worker (or node) died
        self.shards: dict[int, Shard] = {}
        # per shard: the converged pairs, stopped states and templates it was dealt with
        self.args: dict[int, tuple[list[Any], list[bool], Any]] = {}
        self._sent: tuple[list[Any], list[bool], Any] | None = None
        self._templates: list[Any] | None = None
        # states kept on a holder actor (probes.holds): logreg's, and every exact one that
        # does not calibrate on block 0; the driver merges and checks the others
        held = [i for i, s in enumerate(insp.states) if holds(s.measure)]
        self.held = [i in held for i in range(len(insp.states))]
        self.local = [s for i, s in enumerate(insp.states) if not self.held[i]]
        self.link = ProbeLink(ray, insp, held, self.plan[0].hex(), self.reread) if held else None
        self.view = ClusterView(ray)
        # nodes that join mid-run get workers, unless the user fixed their number
        self.grow = insp.params.workers is None and not isinstance(insp.params.cluster, int)
        one = {"CPU": float(shape.threads), **({"GPU": shape.num_gpus} if shape.num_gpus else {})}
        self.demand = request_demand(ray, [one] * shape.count)  # for an autoscaler to see

    def submit(self, shard: Shard, insp: Inspection) -> None:
        converged = [s.converged for s in insp.states]
        if self._sent is not None and all(
            np.array_equal(a, b) for a, b in zip(self._sent[0], converged, strict=True)
        ):  # the same as the last shard's: one copy kept for them all
            converged = self._sent[0]
        else:
            converged = [c.copy() for c in converged]
        stopped = [s.stopped_at is not None for s in insp.states]
        # what the shard was dealt with, kept: its held blocks may have to be read again
        self._sent = self.args[shard.index] = (converged, stopped, self._templates)
        self._send(shard, self.inflight)

    def _send(self, shard: Shard, into: dict[Any, Any]) -> None:
        check_ray(self.ray)  # never a call into a Ray the user is shutting down
        # The least loaded actor: a slow (or restarting) worker does not hold shards up.
        a = min(range(len(self.actors)), key=lambda i: (self.load[i], i))
        converged, stopped, templates = self.args[shard.index]
        actor = self.actors[a]
        ref, blocks = actor.read.options(num_returns=2).remote(
            self.plan, shard.part, converged, templates, stopped, self.held
        )  # the blocks of held states stay where they are: the holder fetches them
        into[ref] = (shard, a, actor, blocks)
        self.load[a] += 1

    def reread(self, indices: list[int]) -> dict[int, Any]:
        """Shards read again for their held blocks (lost with a node, or with the
        holder), dealt as they were first; ``{index: blocks' reference}``."""
        out: dict[int, Any] = {}
        todo: dict[Any, tuple[Shard, int, Any, Any]] = {}
        for i in indices:
            self._send(self.shards[i], todo)
        while todo:
            check_ray(self.ray)
            done, _ = self.ray.wait(list(todo), num_returns=1, timeout=POLL_S)
            for ref in done:
                shard, a, actor, blocks = todo.pop(ref)
                self.load[a] -= 1
                if self._answer(ref, shard, a, actor) is not None:
                    out[shard.index] = blocks
                else:  # its worker is gone too: another reads it
                    self._send(shard, todo)
        return out

    def set_templates(self, insp: Inspection) -> None:
        """Forks of block 0's merged states for the measures that calibrate on it."""
        forks = [fork(s.measure, s.accumulator) if forkable(s.measure) else None
                 for s in insp.states]  # fmt: skip
        if any(f is not None for f in forks):
            self._templates = [self.ray.put(forks)]

    def wait(self, insp: Inspection) -> list[tuple[int, tuple[list[Any], str, Any]]]:
        """Finished shards as (index, (states, block hash, held blocks' reference));
        returns early (maybe empty) on a cancel."""
        while self.inflight and not insp._cancel:
            check_ray(self.ray)
            done, _ = self.ray.wait(list(self.inflight), num_returns=1, timeout=POLL_S)
            if done:
                out = []
                for ref in done:
                    shard, a, actor, blocks = self.inflight.pop(ref)
                    self.load[a] -= 1
                    got = self._get(ref, shard, a, actor, insp)
                    if got is not None:
                        out.append((shard.index, (*got, blocks)))
                return out
        return []

    def _get(self, ref: Any, shard: Shard, a: int, actor: Any,
             insp: Inspection) -> tuple[list[Any], str] | None:  # fmt: skip
        """The shard's states and block hash; None when its worker is gone and the shard
        was dealt again."""
        got = self._answer(ref, shard, a, actor)
        if got is None:  # dealt as it was first: the same converged pairs skip the same
            self._send(shard, self.inflight)
        return got

    def _answer(self, ref: Any, shard: Shard, a: int,
                actor: Any) -> tuple[list[Any], str] | None:  # fmt: skip
        """The shard's answer; None when its worker (or its node, or the node holding
        the answer) is gone: the worker is replaced, the caller deals the shard again."""
        exc = self.ray.exceptions
        try:
            states = self.ray.get(ref)
            self.received += payload_bytes(states)
            self.answers += 1
            return states
        except exc.RayTaskError as caught:
            err = worker_error(caught)
            if not isinstance(err, (exc.RayActorError, exc.ActorUnschedulableError,
                                    exc.ObjectLostError)):  # fmt: skip
                raise err from None  # the worker's own error: one process raises it too
            return self._lost(shard, a, actor, err)  # an argument lost with its node
        except (exc.RayActorError, exc.ActorUnschedulableError, exc.ObjectLostError) as err:
            return self._lost(shard, a, actor, err)

    def _lost(self, shard: Shard, a: int, actor: Any, err: BaseException) -> None:
        """Count a failed read of ``shard``; replace its worker; fail after RETRIES."""
        # Ray's restarts are used up, the worker's node is gone, or the answer died
        # with it: a shard depends only on its records, so another worker reads it
        # to the same states.
        self.tries[shard.index] += 1
        if self.tries[shard.index] > RETRIES:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
            raise DNIError(
                f"Ray workers died {RETRIES + 1} times reading shard {shard.index}: "
                f"{first}. Check the workers' memory (a model per worker) or pass "
                "fewer workers=."
            ) from None
        self.redealt += 1
        if self.actors[a] is actor:  # the first of its shards to fail: replace it
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
            self.actors[a] = new_actor(self.ray, self.shape)  # where Ray finds room
        return None

    def run(self, insp: Inspection, part0: Part, parts: Any,
            on_block: Callable[[Inspection], None] | None, start: float,
            merged_hash: RecordsHash) -> bool:  # fmt: skip
        """Deal and merge shards until the data ends, pairs settle or a cancel.

        Returns whether every record of the data was merged.
        """
        order = InOrder()
        merged = 0  # shards merged: ``order.next`` counts those handed out, merged or not
        self.shards[0] = Shard(0, part0)
        self.submit(self.shards[0], insp)
        sizes = {0: part0.count}
        more = True
        # Block 0 alone first where a measure calibrates on it: later shards start from it.
        alone = any(forkable(m) for m in insp.measures)
        while not insp._cancel:
            while (
                more
                and (order.next > 0 or not alone)
                and len(self.inflight) < AHEAD * len(self.actors)
            ):
                nxt = next(parts, None)
                if nxt is None:
                    more = False
                    break
                index = len(sizes)
                sizes[index] = nxt.count
                self.shards[index] = Shard(index, nxt)
                self.submit(self.shards[index], insp)
            if not self.inflight:
                return not more and merged == len(sizes)
            for index, states in self.wait(insp):
                order.put(index, states)
            for index, (states, digest, blocks) in order.ready():
                self._merge(insp, index, states)
                merged_hash.add(digest, sizes[index])
                insp.progress.records_read += sizes[index]
                insp.progress.blocks += 1
                merged += 1
                if self.link is not None:  # with early stopping: the held states' check
                    self.link.feed(blocks)  # returns at once on a Stop
                insp._check_convergence(self.local)
                self.view.refresh()
                self._join()
                insp.progress.cluster = self.view.counts(self)
                insp.progress.mark(time.perf_counter() - start)
                if on_block is not None:
                    on_block(insp)
                if index == 0:
                    self.set_templates(insp)
                if insp._cancel or (insp.params.eps is not None and insp._settled()):
                    # Not ``order.next``: a slow worker's shard 0 releases every shard read
                    # meanwhile in one batch, and stopping inside it leaves the rest unread;
                    # read to the end would mark every open pair converged (``rows``).
                    return not more and merged == len(sizes)
        return False

    def _join(self) -> None:
        """Workers on the nodes that joined since the last shard, as many as their share
        of CPUs (GPUs for GPU workers) holds; they are dealt shards like the others."""
        for nid, res in self.view.take_joined().items():
            if not self.grow:
                continue
            gpu = self.shape.num_gpus > 0
            have = float(res.get("GPU" if gpu else "CPU", 0.0))
            per = self.shape.num_gpus if gpu else float(self.shape.threads)
            for _ in range(int(have // per) if per > 0 else 0):
                self.actors.append(new_actor(self.ray, self.shape, nid))
                self.load.append(0)
                self.view.workers_joined += 1

    def _merge(self, insp: Inspection, index: int, states: list[Any]) -> None:
        for s, new in zip(insp.states, states, strict=True):
            if new is None or s.stopped_at is not None:  # skipped, stopped or held
                continue
            new = untrimmed(new)
            s.accumulator = new if index == 0 else s.measure.merge(s.accumulator, new)

    def close(self, keep: bool) -> None:
        """Drop the shards still in flight; kill the actors after a cancel or a failure.

        After an early stop the actors stay for the next run (the shards read ahead are
        cancelled or finish in a block's time); a Stop must free the cluster at once.
        """
        gone = ray_gone(self.ray)  # nothing to cancel or kill: they died with that Ray
        if self.demand and not gone:
            request_demand(self.ray, [])  # the run's demand withdrawn
        for ref in [] if gone else self.inflight:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=False)
        self.inflight.clear()
        release(self.ray, self.key, keep, gone)
