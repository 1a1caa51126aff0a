"""How a by-example query ranks records: a group's score, distances, the k best.

Shared by the full scan (:mod:`.queries`) and the Neural Threshold Algorithm
(:mod:`.nta`), so both answer with exactly the same order and ties.
"""

from __future__ import annotations

import numpy as np


def group_score(acts: np.ndarray, agg: str) -> np.ndarray:
    """Score of each row of ``(N, g)`` group activations: sum, mean or max over the group."""
    return {"sum": np.sum, "mean": np.mean, "max": np.max}[agg](
        np.asarray(acts, np.float64), axis=-1
    )


def distances(acts: np.ndarray, target: np.ndarray, metric: str) -> np.ndarray:
    """L2 or cosine distance of every row of ``acts`` to ``target`` (zero vectors: cosine 1)."""
    a, t = np.asarray(acts, np.float64), np.asarray(target, np.float64)
    if metric == "l2":
        return np.sqrt(((a - t) ** 2).sum(-1))
    den = np.linalg.norm(a, axis=-1) * np.linalg.norm(t)
    return 1.0 - np.divide(a @ t, den, out=np.zeros(len(a)), where=den > 0)


def best(
    ids: np.ndarray, values: np.ndarray, k: int, largest: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (id, value) pairs; ties go to the lower id, as in every query here."""
    ids, values = np.asarray(ids), np.asarray(values, np.float64)
    order = np.lexsort((ids, -values if largest else values))[:k]
    return ids[order], values[order]
