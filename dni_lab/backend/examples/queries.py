"""By-example queries (DeepEverest): from units back to the inputs that drive them.

* :func:`topk` — the k records with the highest activation of a neuron group,
  the group's activation being the ``sum``, ``mean`` or ``max`` over its units;
* :func:`knn` — the k records nearest to a target record in the group's
  activation space (L2 or cosine distance).

**A record's activation of a unit** is one number per record: an aggregate of
the unit's activation over the record's symbols, ``max`` by default ("does the
record drive the unit high anywhere?"), or ``mean`` or ``last`` (the final
state of a recurrent model, a summary of the whole record).

Each query answers by a full scan (run the model on every record) or, given a
:class:`~.index.NeuronIndex` of the layer, by DeepEverest's Neural
Threshold Algorithm, which runs the model only on candidate batches and stops
once no unseen record can enter the answer: the same answer as the scan,
usually after reading a fraction of the data.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import polars as pl
import torch

from ..engine.params import keyword_options
from ..errors import DNIError
from ..extraction.behaviors import check_units
from ..extraction.models import Model
from .acts import Activations, choice
from .nta import nta_knn, nta_topk
from .scoring import best, distances, group_score

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

GROUP_AGGS = ("sum", "mean", "max")
METRICS = ("l2", "cosine")


class ExampleOptions(TypedDict, total=False):
    """Keyword options of :func:`topk` and :func:`knn` (unknown keywords raise ``TypeError``).

    Attributes
    ----------
    symbol_agg : {"max", "mean", "last"}
        A record's activation of a unit from its symbols' (see the module docstring;
        default ``"max"``). An index must have been built with the same.
    batch_size : int
        Records per forward pass (default 256).
    device : str or torch.device
        Where the model runs (default ``"auto"``).
    mai_chunk : int or None
        Records per MAI segment read by the NTA (default ``max(k, 32)``, at most a
        partition); smaller chunks read fewer records in more rounds.
    """

    symbol_agg: str
    batch_size: int
    device: str | torch.device
    mai_chunk: int | None


@dataclass(frozen=True)
class _Options:
    """:class:`ExampleOptions` resolved, with their defaults."""

    symbol_agg: str = "max"
    batch_size: int = 256
    device: str | torch.device = "auto"
    mai_chunk: int | None = None

    def activations(self, model: Model, records: Sequence[Any], layer, units) -> Activations:
        return Activations(
            model, records, layer, units, self.symbol_agg, self.batch_size, self.device
        )


@dataclass
class ExampleResult:
    """A by-example answer and what it cost.

    Attributes
    ----------
    frame : polars.DataFrame
        ``rank``, ``record`` (position in the dataset) and ``score`` or ``distance``.
    evaluated : int
        Records run through the model (the target included).
    n_records : int
        Size of the dataset.
    seconds : float
        Wall time of the query.
    method : str
        ``"scan"`` or ``"nta"``.
    stats : dict
        Method details (NTA rounds, why a scan was used).
    """

    frame: pl.DataFrame
    evaluated: int
    n_records: int
    seconds: float
    method: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def share_evaluated(self) -> float:
        return self.evaluated / max(self.n_records, 1)


def _frame(ids, values, col) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": np.arange(1, len(ids) + 1),
            "record": np.asarray(ids, np.int64),
            col: np.asarray(values, np.float64),
        }
    )


def _check_k(k: Any) -> None:
    # k=-1 once sliced off the last record instead of failing
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise DNIError(f"k must be a positive whole number of records, got {k!r}.")


def _evaluator(model, records, layer, units, index, opts: _Options) -> Activations:
    ev = opts.activations(model, records, layer, units)
    if index is not None:  # before any answer: an index of other weights or data is refused
        index.check(model, records, *ev.resolve(), opts.symbol_agg)
    return ev


def topk(
    model: Model,
    records: Sequence[Any],
    layer: Any,
    units: Sequence[int],
    k: int = 10,
    agg: str = "sum",
    index: Any = None,
    **options: Unpack[ExampleOptions],
) -> ExampleResult:
    """The ``k`` records with the highest group activation (``agg`` over ``units``).

    Parameters
    ----------
    model, records, layer
        The model, the dataset (records are named by position), and the layer: an
        address or position, or a feature set (``dl.features``) attached to the model,
        whose latents are then the units.
    units : sequence of int
        The neuron group: indices within ``layer`` (latents of a feature set).
    k : int
        Records to return.
    agg : {"sum", "mean", "max"}
        A record's group activation from its units' activations.
    index : NeuronIndex, optional
        An index fitted on this model (same weights), ``layer``, records and
        ``symbol_agg``: the Neural Threshold Algorithm answers, running the model on
        candidates only. Without it, a full scan answers. Both give the same records
        and scores; an index of another checkpoint or dataset is refused.
    **options
        :class:`ExampleOptions`: ``symbol_agg``, ``batch_size``, ``device``, ``mai_chunk``.

    Returns
    -------
    ExampleResult
        ``frame`` (``rank``, ``record``, ``score``; ties go to the lower record),
        ``evaluated`` records, time and method.
    """
    opts = keyword_options(_Options, "topk", options)
    choice(agg, GROUP_AGGS, "group aggregation")
    _check_k(k)
    t0 = time.perf_counter()
    ev = _evaluator(model, records, layer, units, index, opts)
    if index is None:
        ids, vals = best(
            np.arange(len(records)), group_score(ev(np.arange(len(records))), agg), k, True
        )
        stats: dict[str, Any] = {}
    else:
        ids, vals, stats = nta_topk(
            index, ev, check_units(units, index.width_, index.address_), k, agg, opts.mai_chunk
        )
    return ExampleResult(
        _frame(ids, vals, "score"),
        ev.evaluated_,
        len(records),
        time.perf_counter() - t0,
        "nta" if index is not None else "scan",
        stats,
    )


def knn(
    model: Model,
    records: Sequence[Any],
    layer: Any,
    units: Sequence[int],
    target: int | Any,
    k: int = 10,
    metric: str = "l2",
    index: Any = None,
    **options: Unpack[ExampleOptions],
) -> ExampleResult:
    """The ``k`` records nearest to ``target`` in the group's activation space.

    Parameters
    ----------
    target : int or record
        A position in ``records`` (that record is then its own nearest
        neighbour, at distance 0) or an outside record (one more evaluation).
    metric : {"l2", "cosine"}
        Distance between group activation vectors. With ``index``, L2 is answered
        by the Neural Threshold Algorithm; cosine distance has no per-unit bound,
        so it always scans (``stats["reason"]`` says so).
    model, records, layer, units, k, index, **options
        As in :func:`topk`.

    Returns
    -------
    ExampleResult
        ``frame`` (``rank``, ``record``, ``distance``), ``evaluated`` records, time
        and method.
    """
    opts = keyword_options(_Options, "knn", options)
    choice(metric, METRICS, "metric")
    _check_k(k)
    t0 = time.perf_counter()
    ev = _evaluator(model, records, layer, units, index, opts)
    own = int(target) if isinstance(target, (int, np.integer)) else None
    if own is not None and not 0 <= own < len(records):  # -1 would wrap to the last record
        raise DNIError(
            f"target {own} is not a position in the records (0..{len(records) - 1}); pass a "
            "position, or the record itself to search from an outside record."
        )
    if own is None:  # an outside record: one extra model evaluation
        ev1 = opts.activations(model, [target], layer, units)
        tvec, ev.evaluated_ = ev1([0])[0], ev.evaluated_ + 1
    stats: dict[str, Any] = {}
    if index is not None and metric == "l2":
        sel = check_units(units, index.width_, index.address_)
        if own is not None:
            tvec = ev([own])[0]
        ids, vals, stats = nta_knn(index, ev, sel, tvec, k, own, opts.mai_chunk)
        method = "nta"
    else:
        if index is not None:
            stats["reason"] = "cosine distance has no per-unit bound for the threshold algorithm"
        acts = ev(np.arange(len(records)))
        tvec = acts[own] if own is not None else tvec
        ids, vals = best(np.arange(len(records)), distances(acts, tvec, metric), k, False)
        method = "scan"
    return ExampleResult(
        _frame(ids, vals, "distance"),
        ev.evaluated_,
        len(records),
        time.perf_counter() - t0,
        method,
        stats,
    )
