"""dni_lab's notebook panels (anywidget): Python owns the data, the browser the layout.

Every panel exposes its data as a Polars frame (``.data``) and a ``selection``
that linked panels follow. Nothing loads from a CDN: the ES modules ship in
``dni_lab/js`` and the plots are rendered to SVG by vl-convert in the kernel.

>>> from dni_lab.widgets import Lab
>>> Lab(dl.inspect(..., background=True))                       # doctest: +SKIP

The names are imported on first use (PEP 562): a ``%%inspect`` cell's score table
must not pay for Altair and vl-convert, which only the charts need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and the API reference
    from ._base import Panel, link_selection, selection_key
    from ._patch_grid import patch_grid_chart
    from ._patching import patching_chart
    from .charts import epoch_scores, heatmap, sorted_scores, verification
    from .feature_dashboard import FeatureDashboard
    from .image_overlay import ImageOverlay
    from .lab import Lab
    from .plots import Plot, to_svg
    from .progress import ProgressView, progress_text
    from .query_builder import QueryBuilder
    from .table import ScoreTable
    from .text_overlay import TextOverlay
    from .vega import VegaPlot

# public name -> the submodule that defines it
_HOMES = {
    "Panel": "_base",
    "link_selection": "_base",
    "selection_key": "_base",
    "epoch_scores": "charts",
    "heatmap": "charts",
    "sorted_scores": "charts",
    "verification": "charts",
    "FeatureDashboard": "feature_dashboard",
    "ImageOverlay": "image_overlay",
    "Lab": "lab",
    "patch_grid_chart": "_patch_grid",
    "patching_chart": "_patching",
    "Plot": "plots",
    "to_svg": "plots",
    "ProgressView": "progress",
    "progress_text": "progress",
    "QueryBuilder": "query_builder",
    "ScoreTable": "table",
    "TextOverlay": "text_overlay",
    "VegaPlot": "vega",
}

__all__ = [
    "FeatureDashboard",
    "ImageOverlay",
    "Lab",
    "Panel",
    "Plot",
    "ProgressView",
    "QueryBuilder",
    "ScoreTable",
    "TextOverlay",
    "VegaPlot",
    "epoch_scores",
    "heatmap",
    "link_selection",
    "patch_grid_chart",
    "patching_chart",
    "progress_text",
    "selection_key",
    "sorted_scores",
    "to_svg",
    "verification",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value  # later look-ups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
