"""dni_lab: Deep Neural Inspection for PyTorch models.

>>> import dni_lab as dl
>>> frame = dl.inspect(models=[model], hypotheses=[keyword], measures=["corr"],
...                    data=records, units=[("lstm", "*")])            # doctest: +SKIP
"""

from __future__ import annotations

from . import (
    _threads,  # noqa: F401  (first: before torch loads OpenMP; see there)
    features,
)
from ._version import __version__ as __version__  # re-exported
from .backend import cluster as _cluster  # noqa: F401  (installs the engine's Ray runner)
from .backend import examples, verify
from .backend import hf as _hf  # noqa: F401  (installs Model.from_hf)
from .backend.api import inspect
from .backend.engine.frames import export, read_params
from .backend.engine.inspection import Progress
from .backend.engine.levels import check
from .backend.engine.params import InspectParams
from .backend.engine.provenance import PartialResultWarning, provenance
from .backend.engine.run import Run
from .backend.errors import (
    BehaviorError,
    CancelledError,
    DNIError,
    HypothesisError,
    LayerError,
    LevelError,
    MeasureError,
    TokenIdsError,
)
from .backend.extraction.activations import ActivationCache, activations
from .backend.extraction.layouts import Frames, Layout
from .backend.extraction.models import Model
from .backend.hf.generation import Generation, generate
from .backend.hf.token_records import TokenRecord
from .backend.hypothesis.cache import HypothesisCache
from .backend.hypothesis.hypotheses import (
    Hypothesis,
    HypothesisFamily,
    hypothesis,
    hypothesis_family,
)
from .backend.measures import Measure, MeasureResult, get_measure
from .backend.query import Catalog, QueryError, query
from .probe import Probe
from .probe.steering import steering_report, steering_vector

__all__ = [
    "ActivationCache",
    "BehaviorError",
    "CancelledError",
    "Catalog",
    "DNIError",
    "Frames",
    "Generation",
    "Hypothesis",
    "HypothesisCache",
    "HypothesisError",
    "HypothesisFamily",
    "InspectParams",
    "LayerError",
    "Layout",
    "LevelError",
    "Measure",
    "MeasureError",
    "MeasureResult",
    "Model",
    "PartialResultWarning",
    "Probe",
    "Progress",
    "QueryError",
    "Run",
    "TokenIdsError",
    "TokenRecord",
    "activations",
    "check",
    "examples",
    "export",
    "features",
    "generate",
    "get_measure",
    "hypothesis",
    "hypothesis_family",
    "inspect",
    "provenance",
    "query",
    "read_params",
    "steering_report",
    "steering_vector",
    "verify",
]


def _live_table(run: Run):
    """A run shown in a notebook is its live score table (imported late: anywidget)."""
    from .widgets.table import ScoreTable

    return ScoreTable(run)


Run.display_hook = _live_table


def load_ipython_extension(ipython):  # pragma: no cover - exercised through IPython
    """``%load_ext dni_lab`` registers the ``%%inspect`` magic."""
    from .magic import load_ipython_extension as _load

    _load(ipython)
