"""The worker actor: models resident on its device, one shard in, fresh measure states out.

A worker holds an :class:`~dni_lab.backend.engine.Inspection` of its own, built from
the same models, hypotheses, measures, units and parameters as the driver's, so that
it lays out its measure states in the driver's order and folds a block with the very
code the single-process loop runs (:meth:`Inspection._read`). Its hypothesis cache is
its own (the process-wide default of the node it runs on, or the directory named).
"""

from __future__ import annotations

import contextlib
import copy
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cache import HypothesisCache
from ..engine import Inspection
from ..extract import on_device
from ..params import InspectParams
from .shards import moved


@dataclass
class Plan:
    """Everything a worker is built from; shipped once per actor (and per restart)."""

    models: list[Any]
    hypotheses: list[Any]
    measures: list[Any]
    units: Any
    params: InspectParams
    sample: list[Any]  # the first block: resolves units exactly as the driver did


def worker_params(params: InspectParams) -> InspectParams:
    """The driver's parameters for a worker: no cluster of its own, a cache it can open.

    A cache object is per process (locks, memory); a worker opens the same directory,
    or its own default when the driver's cache lives in memory only.
    """
    cache = params.cache
    if isinstance(cache, HypothesisCache):
        cache = cache.directory if cache.directory is not None else True
    return params.replace(cluster=None, workers=None, cache=cache)


class ShardWorker:
    """Reads shards for one run. Made a Ray actor by the driver (``ray.remote``)."""

    def __init__(self, plan: Plan) -> None:
        insp = Inspection(
            plan.models, plan.hypotheses, plan.measures, (), units=plan.units,
            params=worker_params(plan.params),
        )  # fmt: skip
        self._placed = contextlib.ExitStack()
        for model in insp.models:  # resident for the actor's life, not moved per block
            self._placed.enter_context(on_device(model, insp.device))
        insp._prepare(plan.sample)
        self.insp = insp
        self.extractors = insp._extractors()
        self._templates: dict[str, list[Any]] = {}

    def pid(self) -> int:
        """The worker's process id (tests kill it to check retries)."""
        return os.getpid()

    def device(self) -> str:
        return str(self.insp.device)

    def read(
        self,
        records: list[Any],
        first: int,
        converged: list[np.ndarray],
        templates: list[Any] | None = None,
    ) -> list[Any]:
        """Fold one shard into fresh states; return them on the CPU, in the driver's order.

        Parameters
        ----------
        records : list
            The shard's records; ``records[0]`` is record ``first`` of the data.
        first : int
            Index of the shard's first record (errors name records by it).
        converged : list of numpy.ndarray
            The driver's converged pairs per state when it dealt the shard: models and
            hypothesis families that have nothing left to score are skipped, as the
            single-process loop skips them.
        templates : list of ObjectRef, optional
            ``[ref]`` to per-state forks of block 0's states (None where a measure starts
            fresh); wrapped in a list so Ray hands the reference, fetched once per actor.

        Returns
        -------
        list
            One state per driver state, None for states of models it skipped.
        """
        insp = self.insp
        forks = self._forks(templates)
        nh = len(insp.info)
        for s, done, tpl in zip(insp.states, converged, forks, strict=True):
            s.converged = done.copy()
            if tpl is not None:
                s.accumulator = copy.deepcopy(tpl)
            else:
                s.accumulator = s.measure.start(len(s.columns), nh, insp.device, insp.info)
        active = {mu.model.name for mu in insp._active_models()}
        insp._read(records, first, self.extractors)
        return [moved(s.accumulator, "cpu") if s.model_name in active else None
                for s in insp.states]  # fmt: skip

    def _forks(self, templates: list[Any] | None) -> list[Any]:
        if not templates:
            return [None] * len(self.insp.states)
        ref = templates[0]
        key = ref.hex()
        if key not in self._templates:
            import ray

            self._templates = {key: [None if t is None else moved(t, self.insp.device)
                                     for t in ray.get(ref)]}  # fmt: skip
        return self._templates[key]
