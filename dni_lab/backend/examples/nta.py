"""DeepEverest's Neural Threshold Algorithm (NTA) over a :class:`NeuronIndex`.

Fagin's threshold algorithm, with the index's partitions as sorted access and
the model as random access. Each unit of the group has a list of *segments* in
descending activation order: chunks of its MAI (exact values), then its NPI
partitions minus the MAI's records (bounds only). Round by round, every unit
reads its next most promising segment; records not seen before are run through
the model in one batch, which gives their exact group activations. After each
round a bound covers every record not yet seen — each of its activations lies
in a segment its unit has not read yet:

* top-k with a monotone ``agg`` (sum, mean, max): an unseen record scores at
  most ``agg`` of the units' next upper bounds;
* k nearest (L2): an unseen record is at least ``sqrt(sum gap_u^2)`` away, with
  ``gap_u`` the distance from the target's value to the unit's nearest unread
  segment.

The search stops when the k-th best seen record beats that bound (by a margin
that absorbs float rounding between the index's pass and the query's), so the
answer equals a full scan's, having run the model on fewer records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .index import NeuronIndex
from .scoring import best, distances, group_score

#: Relative margin between the k-th answer and the bound before the search may stop.
_MARGIN = 1e-5


class Segment(NamedTuple):
    ids: np.ndarray
    lo: float
    hi: float


def segments(index: NeuronIndex, unit: int, mai_chunk: int) -> list[Segment]:
    """The unit's segments in descending activation order; every record is in exactly one."""
    mai_ids, mai_vals = index.mai_ids_[unit], index.mai_values_[unit].astype(np.float64)
    out = [
        Segment(
            mai_ids[s : s + mai_chunk],
            float(mai_vals[min(s + mai_chunk, len(mai_ids)) - 1]),
            float(mai_vals[s]),
        )
        for s in range(0, len(mai_ids), mai_chunk)
    ]
    # Records outside the MAI are no higher than its last value: a tighter upper bound.
    cap = float(mai_vals[-1]) if len(mai_vals) else np.inf
    in_mai = np.zeros(index.n_records_, dtype=bool)
    in_mai[mai_ids] = True
    pid = index.partition_ids(unit)
    order = np.argsort(pid, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(pid, minlength=index.n_partitions_))])
    for p in range(index.n_partitions_ - 1, -1, -1):
        members = order[starts[p] : starts[p + 1]]
        members = members[~in_mai[members]]
        if len(members):
            hi = min(float(index.upper_[unit, p]), cap)
            out.append(Segment(members, float(index.lower_[unit, p]), hi))
    return out


class _Seen:
    """Records evaluated so far, and their exact values."""

    def __init__(self, n: int) -> None:
        self.mask = np.zeros(n, dtype=bool)
        self.ids: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def visit(self, new: list[np.ndarray], value_of: Callable[[np.ndarray], np.ndarray]) -> None:
        cand = np.unique(np.concatenate(new)) if new else np.zeros(0, np.int64)
        cand = cand[~self.mask[cand]]
        if len(cand):
            self.mask[cand] = True
            self.ids.append(cand)
            self.values.append(value_of(cand))

    def top(self, k: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
        if not self.ids:
            return np.zeros(0, np.int64), np.zeros(0)
        return best(np.concatenate(self.ids), np.concatenate(self.values), k, largest)


def _chunk(index: NeuronIndex, mai_chunk: int | None, k: int) -> int:
    # Small MAI chunks let a top-k stop after a few dozen records; no larger than a partition,
    # so each round reads comparable batches.
    return mai_chunk or max(1, min(index.n_records_ // index.n_partitions_, max(k, 32)))


def nta_topk(
    index: NeuronIndex,
    evaluate: Callable,
    units: np.ndarray,
    k: int,
    agg: str,
    mai_chunk: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Top-k records by ``agg`` of the group's activations, exactly, via the NTA."""
    segs = [segments(index, int(u), _chunk(index, mai_chunk, k)) for u in units]
    cursor = [0] * len(units)
    seen, rounds = _Seen(index.n_records_), 0
    score_of = lambda ids: group_score(evaluate(ids), agg)  # noqa: E731
    while True:
        new = []
        for j, s in enumerate(segs):
            if cursor[j] < len(s):
                new.append(s[cursor[j]].ids)
                cursor[j] += 1
        seen.visit(new, score_of)
        rounds += 1
        if any(c >= len(s) for c, s in zip(cursor, segs, strict=True)):
            break  # a unit read all its segments: every record has been seen
        bound = float(
            group_score(np.array([s[c].hi for c, s in zip(cursor, segs, strict=True)]), agg)
        )
        ids, vals = seen.top(k, True)
        if len(ids) >= k and vals[-1] > bound + _MARGIN * (1 + abs(bound)):
            break
    ids, vals = seen.top(k, True)
    return ids, vals, {"rounds": rounds}


def nta_knn(
    index: NeuronIndex,
    evaluate: Callable,
    units: np.ndarray,
    target: np.ndarray,
    k: int,
    target_id: int | None = None,
    mai_chunk: int | None = None,
):
    """k nearest records to ``target`` (group activations) in L2, exactly, via the NTA.

    Each unit walks outward from the target's value, reading on each round the
    unread neighbour segment (above or below) closest to it.
    """
    segs = [segments(index, int(u), _chunk(index, mai_chunk, k)) for u in units]
    target = np.asarray(target, np.float64)
    gap = lambda s, v: max(0.0, s.lo - v, v - s.hi)  # noqa: E731
    # Segments descend; "up" walks toward index 0, "down" toward the end.
    down = [int(sum(s.lo > v for s in ss)) for ss, v in zip(segs, target, strict=True)]
    up = [d - 1 for d in down]
    seen, rounds = _Seen(index.n_records_), 0
    if target_id is not None:  # already evaluated by the caller: distance 0 by definition
        seen.visit([np.array([target_id])], lambda ids: np.zeros(len(ids)))
    dist_of = lambda ids: distances(evaluate(ids), target, "l2")  # noqa: E731
    while True:
        new, gaps = [], []
        for j, (ss, v) in enumerate(zip(segs, target, strict=True)):
            g_up = gap(ss[up[j]], v) if up[j] >= 0 else np.inf
            g_dn = gap(ss[down[j]], v) if down[j] < len(ss) else np.inf
            if g_up == np.inf and g_dn == np.inf:
                continue
            if g_dn <= g_up:
                new.append(ss[down[j]].ids)
                down[j] += 1
            else:
                new.append(ss[up[j]].ids)
                up[j] -= 1
            g_up = gap(ss[up[j]], v) if up[j] >= 0 else np.inf
            g_dn = gap(ss[down[j]], v) if down[j] < len(ss) else np.inf
            gaps.append(min(g_up, g_dn))
        seen.visit(new, dist_of)
        rounds += 1
        if not new or any(g == np.inf for g in gaps):
            break  # a unit read all its segments: every record has been seen
        bound = float(np.sqrt(np.sum(np.square(gaps))))
        ids, vals = seen.top(k, False)
        if len(ids) >= k and vals[-1] < bound - _MARGIN * (1 + bound):
            break
    ids, vals = seen.top(k, False)
    return ids, vals, {"rounds": rounds}
