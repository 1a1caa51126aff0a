"""By-example queries (DeepEverest): ``dl.examples.topk(...)``, ``dl.examples.knn(...)``.

* :mod:`.queries` — :func:`topk` and :func:`knn`, by full scan or with an index;
* :mod:`.index` — :class:`NeuronIndex`, DeepEverest's MAI/NPI index of one layer;
* :mod:`.index_file` — the index on disk: plain arrays, every field checked on load;
* :mod:`.nta` — the Neural Threshold Algorithm over an index;
* :mod:`.scoring` — group scores, distances and the k best, shared by both paths;
* :mod:`.acts` — a neuron group's per-record activations.
"""

from __future__ import annotations

from .acts import Activations, aggregate_symbols
from .index import NeuronIndex
from .queries import ExampleOptions, ExampleResult, knn, topk
from .scoring import distances, group_score

__all__ = [
    "Activations",
    "ExampleOptions",
    "ExampleResult",
    "NeuronIndex",
    "aggregate_symbols",
    "distances",
    "group_score",
    "knn",
    "topk",
]
