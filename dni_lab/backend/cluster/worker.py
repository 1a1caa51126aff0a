"""The worker actor: models resident on its device, one shard in, fresh measure states out.

An actor outlives a run (starting a Python with torch costs seconds per worker, a
notebook runs many queries): every shard names its run's :class:`Plan` by reference,
and the actor builds that run's inspection the first time it sees the plan. This also
makes a restarted actor (after its process died) able to read the shard it is retried
with. For a plan, a worker holds an :class:`~dni_lab.backend.engine.inspection.Inspection` of its
own, built from the same models, hypotheses, measures, units and parameters as the
driver's, so that it lays out its measure states in the driver's order and folds a
block with the very code the single-process loop runs (:meth:`Inspection._read`).
Its hypothesis cache is its own (the node's process-wide default, or the directory
named).
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..engine.inspection import Inspection
from ..engine.params import InspectParams
from ..engine.provenance import block_digest
from ..engine.sources import Part
from ..extraction.extract import on_device
from ..hypothesis.cache import HypothesisCache
from .shards import Block, Deferred, merges_exactly, moved, trimmed


@dataclass(repr=False)
class Plan:
    """Everything a worker needs for one run; fetched once per actor and run (and restart)."""

    models: list[Any]
    hypotheses: list[Any]
    measures: list[Any]
    units: Any
    params: InspectParams  # worker_params(): no cluster, a cache a worker can open
    sample: list[Any]  # the first block: resolves units exactly as the driver did

    def __repr__(self) -> str:  # an error that shows a plan must not print its records
        return (f"Plan({[m.name for m in self.models]}, {len(self.hypotheses)} hypotheses, "
                f"{len(self.measures)} measures, {len(self.sample)} sample records)")  # fmt: skip


def worker_params(params: InspectParams) -> InspectParams:
    """The driver's parameters for a worker: no cluster of its own, a cache it can open.

    A cache object is per process (locks, memory); a worker opens the same directory,
    or its own default when the driver's cache lives in memory only.
    """
    cache = params.cache
    if isinstance(cache, HypothesisCache):
        cache = cache.directory if cache.directory is not None else True
    return params.replace(cluster=None, workers=None, cache=cache)


class _Loaded:
    """One run's inspection on a worker: states laid out, models placed, extractors built."""

    def __init__(self, plan: Plan) -> None:
        insp = Inspection(
            plan.models, plan.hypotheses, plan.measures, (), units=plan.units,
            params=plan.params,
        )  # fmt: skip
        self._placed = contextlib.ExitStack()
        for model in insp.models:  # resident for the run, not moved per block
            self._placed.enter_context(on_device(model, insp.device))
        insp._prepare(insp._resolve_units(plan.sample))
        for s in insp.states:  # the driver updates these from the blocks it is sent
            if not merges_exactly(s.measure):
                s.measure = Deferred(s.measure)
        self.insp = insp
        self.extractors = insp._extractors()

    def close(self) -> None:
        self._placed.close()


class ShardWorker:
    """Reads shards of any run. Made a Ray actor by the driver (``ray.remote``)."""

    def __init__(self, threads: int = 0) -> None:
        # The actor reserves no CPU (placement.py): its share of the node's cores is set
        # here, so that workers on one node do not oversubscribe it.
        if threads > 0:
            torch.set_num_threads(threads)
        self._plan: tuple[str, _Loaded] | None = None
        self._templates: tuple[str, list[Any]] | None = None

    def pid(self) -> int:
        """The worker's process id (tests kill it to check retries)."""
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node the worker lives on (tests remove that node)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def read(
        self,
        plan: list[Any],
        part: Part,
        converged: list[np.ndarray],
        templates: list[Any] | None = None,
        stopped: list[bool] | None = None,
        held: list[bool] | None = None,
    ) -> tuple[tuple[list[Any], str], dict[int, Any]]:
        """Fold one shard into fresh states; return them on the CPU, in the driver's order.

        Called with ``num_returns=2``: the states come back to the driver; the held
        ones (``held``: a ``logreg`` block's behaviors, or the states of a run read to
        the end) go to a :class:`~.probes.ProbeHolder` without passing through it.

        Parameters
        ----------
        plan : list of ObjectRef
            ``[ref]`` to the run's :class:`Plan` (a list, so Ray hands over the reference;
            the plan is fetched and built once per actor and run).
        part : Part
            The shard's block: its records, or where this worker reads them (a file's
            row groups, a Dataset's blocks); record ``part.first`` of the data first.
        converged : list of numpy.ndarray
            The driver's converged pairs per state when it dealt the shard: models and
            hypothesis families that have nothing left to score are skipped, as the
            single-process loop skips them.
        templates : list of ObjectRef, optional
            ``[ref]`` to per-state forks of block 0's states (None where a measure starts
            fresh); wrapped in a list so Ray hands the reference, fetched once per actor.
        stopped : list of bool, optional
            States that stopped reading while others read on (``MeasureState.stop``):
            not updated, returned as None.
        held : list of bool, optional
            States a holder keeps (:func:`~.probes.holds`): sent in the second return.

        Returns
        -------
        (list, str)
            One state per driver state, None for states of models it skipped, for
            stopped states and for held ones; and the block's hash
            (:func:`~dni_lab.backend.engine.provenance.block_digest`): the driver's
            ``data_sha256`` covers records it never saw.
        dict
            ``{state index: Block or state}`` for the held states: a ``Block`` of
            behaviors where the measure does not merge exactly, else the fresh state.
        """
        records, first = part.read(), part.first
        loaded = self._load(plan[0])
        insp = loaded.insp
        forks = self._forks(templates, insp.device)
        nh = len(insp.info)
        halted = stopped or [False] * len(insp.states)
        for s, done, tpl, stop in zip(insp.states, converged, forks, halted, strict=True):
            s.converged = done.copy()
            s.stopped_at = first if stop else None  # the engine skips a stopped state
            if tpl is not None:
                s.accumulator = copy.deepcopy(tpl)
            else:
                s.accumulator = s.measure.start(len(s.columns), nh, insp.device, insp.info)
        active = {mu.model.name for mu in insp._active_models()}
        insp._read(records, first, loaded.extractors)
        states = [moved(s.accumulator, "cpu") if s.model_name in active and s.stopped_at is None
                  else None for s in insp.states]  # fmt: skip
        keep = held or [False] * len(states)
        blocks = {i: st for i, st in enumerate(states) if st is not None
                  and (keep[i] or isinstance(st, Block))}  # fmt: skip
        for i, st in enumerate(states):  # a fresh state's zero parts stay here
            states[i] = None if i in blocks else trimmed(st)
            if i in blocks and not isinstance(st, Block):
                blocks[i] = trimmed(st)
        return (states, block_digest(records)), blocks

    def _load(self, ref: Any) -> _Loaded:
        if self._plan is None or self._plan[0] != ref.hex():
            import ray

            if self._plan is not None:  # a new run: free the last one's models first
                self._plan[1].close()
                self._plan = None
            self._plan = (ref.hex(), _Loaded(ray.get(ref)))
        return self._plan[1]

    def _forks(self, templates: list[Any] | None, device: Any) -> list[Any]:
        assert self._plan is not None
        if not templates:
            return [None] * len(self._plan[1].insp.states)
        ref = templates[0]
        if self._templates is None or self._templates[0] != ref.hex():
            import ray

            forks = [None if t is None else moved(t, device) for t in ray.get(ref)]
            self._templates = (ref.hex(), forks)
        return self._templates[1]
