"""Plot panels: Altair charts rendered to SVG in the kernel by vl-convert.

The SVG is made in Python, so no chart library (and nothing from a CDN) is
needed in the browser; clickable marks select units (see :mod:`.charts`) and
the selected unit's marks are outlined by the browser, without a re-render.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import altair as alt
import polars as pl
import traitlets

from . import charts
from ._base import Panel, as_selection, esm, selection_key
from ._patch_grid import patch_grid_chart
from ._patching import patching_chart

KINDS: dict[str, Callable[..., charts.Built]] = {
    "sorted": charts.sorted_scores,
    "epochs": charts.epoch_scores,
    "heatmap": charts.heatmap,
    "verification": charts.verification,
    "patching": patching_chart,
    "patch_grid": patch_grid_chart,
}
_HREF = re.compile(r'xlink:href="[^"#]*#dni=')
_RENDER_LOCK = threading.Lock()  # vl-convert's engine is shared by the process


def to_svg(chart: Any) -> str:
    """SVG text of an Altair chart (or a Vega-Lite dict), offline, through vl-convert."""
    import vl_convert as vlc

    with alt.data_transformers.disable_max_rows():
        spec = chart if isinstance(chart, dict) else chart.to_dict()
    with _RENDER_LOCK:
        svg = vlc.vegalite_to_svg(spec)
    # Vega resolves hrefs against its data URL; keep only the fragment the panel reads,
    # so the page never holds a link to the outside.
    return _HREF.sub('xlink:href="#dni=', svg)


class Plot(Panel):
    """An Altair chart of a score frame (or a verification result), as a panel.

    Parameters
    ----------
    kind : {"sorted", "epochs", "heatmap", "verification", "patching", "patch_grid"}
        Which chart (:mod:`dni_lab.widgets.charts`; ``"patching"``: :func:`.patching_chart`;
        ``"patch_grid"``: :func:`.patch_grid_chart`).
    source : polars.DataFrame or verification result
        What to plot.
    **options
        Passed to the chart builder (``measure=``, ``epochs=``, ``max_hyps=``, ...).

    Attributes
    ----------
    chart : altair chart
        The chart shown (display it with ``alt.JupyterChart`` for Vega's own interaction).
    data : polars.DataFrame
        The rows plotted.
    """

    _esm = esm("plot")
    _svg = traitlets.Unicode("").tag(sync=True)
    _keys = traitlets.List().tag(sync=True)  # selection key of each clickable mark

    def __init__(self, kind: str, source: Any = None, **options: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown plot kind {kind!r}; use one of {sorted(KINDS)}.")
        self.kind, self.options = kind, options
        self._source = source
        self._data = pl.DataFrame()
        self._mark_keys: list[dict[str, Any]] = []
        self.chart: Any = None
        self.error = ""
        super().__init__()
        self.on_msg(self._on_message)
        if kind == "epochs":  # the selected unit's own line is part of this chart
            self.observe(lambda _c: self.update(), names=["selection"])
        self.update(source)

    @property
    def data(self) -> pl.DataFrame:
        return self._data

    def update(self, source: Any = None) -> None:
        """Plot ``source`` (default: the last one) again."""
        if source is not None:
            self._source = source
        src = self._source
        if src is None or (isinstance(src, pl.DataFrame) and src.height == 0):
            self._data, self._mark_keys, self.chart = pl.DataFrame(), [], None
            with self.hold_sync():
                self._keys, self._svg = [], ""
            return
        opts = dict(self.options)
        if self.kind == "epochs":
            opts["selection"] = self.selection
        try:
            chart, data, keys = KINDS[self.kind](src, **opts)
            svg = to_svg(chart)
            self.error = ""
        except Exception as exc:  # shown in the panel instead of breaking a linked update
            self.error = f"{type(exc).__name__}: {exc}"
            svg = f'<div class="dni-error">{self.error}</div>'
            chart, data, keys = None, pl.DataFrame(), []
        self.chart, self._data, self._mark_keys = chart, data, keys
        with self.hold_sync():
            self._keys = [selection_key(k) for k in keys]
            self._svg = svg

    def _describe(self) -> str:
        return f"{self.kind}, {self._data.height} rows"

    def snapshot_html(self) -> str:
        """The chart as drawn, an ``<img>`` of its SVG (inline SVG does not survive a
        notebook's sanitiser; the image's links are inert)."""
        from ._base import snapshot
        from ._static import svg_img

        head = snapshot("Plot", self._describe(), None)
        return head.replace("</div></div>", f"</div>{svg_img(self._svg, self.kind)}</div>", 1)

    def _on_message(self, _w: Any, content: dict[str, Any], _b: list) -> None:
        if content.get("type") == "select":
            i = int(content["index"])
            if 0 <= i < len(self._mark_keys):
                self.selection = as_selection(self._mark_keys[i])
