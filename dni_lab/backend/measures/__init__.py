"""Measures: statistical affinity between unit behaviors and hypotheses.

Every measure follows the protocol in :mod:`.base`. Look one up by name with
:func:`get_measure`; a plain function ``f(u, h) -> float`` becomes a
:class:`~.function.FunctionMeasure` (the slow path).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..errors import MeasureError, did_you_mean
from ..hypothesis.hypotheses import HypothesisInfo
from .base import Measure, MeasureResult

# name -> (module, class); imported lazily so one measure's import cost is not everyone's.
REGISTRY: dict[str, tuple[str, str]] = {
    "corr": ("corr", "Corr"),
    "logreg": ("logreg", "LogReg"),
    "ridge": ("ridge", "Ridge"),
    "mi": ("mi", "MutualInformation"),
    "diffmeans": ("diffmeans", "DiffMeans"),
    "iou": ("iou", "IoU"),
    "local_iou": ("iou", "LocalIoU"),
    "auroc": ("auroc", "AUROC"),
    "roc_auc": ("roc", "ROCAUC"),
    "recall_at_fpr": ("roc", "RecallAtFPR"),
    "prf1": ("prf1", "PRF1"),
    "lda": ("lda", "LDA"),
}


def measure_class(name: str) -> type[Measure]:
    """The class registered under ``name``."""
    if name not in REGISTRY:
        raise MeasureError(
            f"unknown measure {name!r}.{did_you_mean(name, REGISTRY)} "
            f"Known measures: {', '.join(REGISTRY)}; or pass a Measure object or a "
            "function f(u, h) -> float."
        )
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def get_measure(spec: str | Measure | Callable[..., Any]) -> Measure:
    """Resolve a measure name, object or function into a :class:`Measure`."""
    if isinstance(spec, Measure):
        return spec
    if isinstance(spec, str):
        return measure_class(spec)()
    if isinstance(spec, type) and issubclass(spec, Measure):
        return spec()
    if callable(spec):
        from .function import FunctionMeasure

        return FunctionMeasure(spec)
    raise MeasureError(
        f"{spec!r} is not a measure: pass a name ({', '.join(REGISTRY)}), a Measure object, "
        "or a function f(u, h) -> float."
    )


__all__ = ["REGISTRY", "HypothesisInfo", "Measure", "MeasureResult", "get_measure", "measure_class"]
