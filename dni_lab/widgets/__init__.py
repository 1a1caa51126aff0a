"""dni_lab's notebook panels (anywidget): Python owns the data, the browser the layout.

Every panel exposes its data as a Polars frame (``.data``) and a ``selection``
that linked panels follow. Nothing loads from a CDN: the ES modules ship in
``dni_lab/js`` and the plots are rendered to SVG by vl-convert in the kernel.

>>> from dni_lab.widgets import Lab
>>> Lab(dl.inspect(..., background=True))                       # doctest: +SKIP
"""

from ._base import Panel, link_selection, selection_key
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
    "progress_text",
    "selection_key",
    "sorted_scores",
    "to_svg",
    "verification",
]
