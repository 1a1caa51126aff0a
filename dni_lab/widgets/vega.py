"""Interactive plots: the charts of :mod:`.charts` drawn by Vega in the browser.

:class:`VegaPlot` is Altair's ``JupyterChart`` (an anywidget) with tooltips, zoom
and pan, and a click on a unit's mark that becomes the panel's ``selection``, so
the table and the overlay follow it. Nothing comes from a CDN: JupyterChart's
module normally imports Vega from esm.sh, so :func:`offline` has vl-convert bundle
it into the module (0.9 MB; bundled once per installation and kept in the user's
cache, since bundling costs a second or more of CPU in every new kernel), and the
charts' action menu (links to the Vega editor) is turned off.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl
import traitlets

from ._base import Snapshots, as_selection
from .plots import KINDS, to_svg

_PICK = "unit"  # the name of the click selection in every chart


def _bundle_cache() -> Path:
    """Where the bundled module is kept: ``$DNI_LAB_JS_CACHE`` or ``~/.cache/dni_lab/js``."""
    env = os.environ.get("DNI_LAB_JS_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dni_lab" / "js"


@functools.cache
def offline() -> None:
    """Make JupyterChart self-contained (Vega bundled by vl-convert, no esm.sh import).

    The bundle depends only on Altair's module and vl-convert's Vega, so it is keyed
    by both and read from the cache when there; a cache that cannot be written is
    skipped (the bundle is then made in each kernel, as Altair does).
    """
    import vl_convert as vlc
    from altair.jupyter.jupyter_chart import load_js_src

    chart = alt.JupyterChart
    if chart._is_offline:
        return
    key = hashlib.sha256(
        f"{alt.__version__}|{vlc.__version__}|{load_js_src()}".encode()
    ).hexdigest()[:16]
    path = _bundle_cache() / f"jupyterchart-{key}.js"
    try:
        chart._esm, chart._is_offline = path.read_text(encoding="utf-8"), True
        return
    except OSError:
        pass
    chart.enable_offline()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(chart._esm, encoding="utf-8")
        tmp.replace(path)  # whole or absent: another kernel may read it meanwhile
    except OSError:
        pass


def _clickable(chart: Any, zoom: bool) -> Any:
    """The chart with a click selection on its clickable marks (those with an ``href``)
    and no ``href`` channel (in the browser a link would navigate away).

    The selection is a top-level parameter naming its layer (``views``): JupyterChart
    reports only top-level selections back to Python.
    """
    layered = isinstance(chart, alt.LayerChart)
    chart = chart.copy()
    layers = list(chart.layer) if layered else [chart]
    select = alt.PointSelectionConfig(type="point", fields=["_href"], on="click", clear="dblclick")
    param: Any = alt.SelectionParameter(name=_PICK, select=select)
    for k, layer in enumerate(layers):
        enc = layer.encoding
        if enc is alt.Undefined or getattr(enc, "href", alt.Undefined) is alt.Undefined:
            continue
        layer.encoding.href = alt.Undefined
        if zoom:  # zoom and pan live on the clickable layer (a layer chart shares its scales)
            layer = layer.interactive()
        if layered:
            layer.name = f"dni_pick_{k}"
            param = alt.TopLevelSelectionParameter(name=_PICK, select=select, views=[layer.name])
            layers[k] = layer
        else:
            chart = layer
    if layered:
        chart.layer = layers
    chart.params = [param] + ([] if chart.params is alt.Undefined else list(chart.params))
    return chart


def _fit(chart: Any) -> Any:
    """The chart with its legend underneath, so it is no wider than its plot and axes.

    With the legend on the right a chart was about 490 px wide; squeezed into a panel
    sharing a row it overflowed (a scrollbar, the legend's title clipped: "hypothesi").
    The Lab also gives each Vega panel its chart's own width (wrapping to a new row when
    two do not fit) rather than a share of the row. (A chart as wide as its container
    measures the container once, before it is laid out, and draws nothing.)
    """
    return chart.configure_legend(
        orient="bottom", direction="horizontal", columns=4, labelLimit=240, titleLimit=0
    )


class VegaPlot(Snapshots, alt.JupyterChart):
    """An interactive chart of a score frame (or a verification result) as a panel.

    Parameters
    ----------
    kind : {"sorted", "epochs", "heatmap", "verification"}
        Which chart (:mod:`dni_lab.widgets.charts`).
    source : polars.DataFrame or verification result
        What to plot.
    **options
        Passed to the chart builder.

    Attributes
    ----------
    selection : dict
        The unit whose mark was clicked (linked panels follow it).
    data : polars.DataFrame
        The rows plotted.
    """

    selection = traitlets.Dict()

    def __init__(self, kind: str, source: Any = None, **options: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown plot kind {kind!r}; use one of {sorted(KINDS)}.")
        offline()
        self.kind, self.options = kind, options
        self._keys: list[dict[str, Any]] = []
        self._data = pl.DataFrame()
        self._snap_svg = ""
        self.error = ""
        # svg: marks a person (and a browser test) can point at; no action menu: no links out
        empty = alt.Chart(alt.Data(values=[])).mark_point()
        super().__init__(empty, embed_options={"actions": False, "renderer": "svg"})
        self.update(source)

    @property
    def data(self) -> pl.DataFrame:
        return self._data

    def update(self, source: Any = None) -> None:
        """Plot ``source`` (default: the last one) again; the click selection is kept."""
        if source is not None:
            self._source = source
        src = getattr(self, "_source", None)
        if src is None or (isinstance(src, pl.DataFrame) and src.height == 0):
            return
        opts = dict(self.options)
        if self.kind == "epochs":
            opts["selection"] = self.selection
        chart, data, keys = KINDS[self.kind](src, **opts)
        self._data, self._keys = data, keys
        self._snap_svg = ""  # the snapshot's SVG, drawn when a snapshot is asked for
        self.chart = _fit(_clickable(chart, zoom=self.kind in ("sorted", "epochs")))

    @traitlets.observe("_vl_selections")
    def _on_pick(self, change: Any) -> None:
        # Vega reports the clicked mark's fields in the selection's store: "#dni=<i>"
        for entry in (change["new"].get(_PICK) or {}).get("store") or []:
            values = entry.get("values") or []
            if values and isinstance(values[0], str) and values[0].startswith("#dni="):
                i = int(values[0].removeprefix("#dni="))
                if 0 <= i < len(self._keys):
                    self.selection = as_selection(self._keys[i])
                return

    def snapshot_html(self) -> str:
        from ._base import snapshot
        from ._static import svg_img

        head = snapshot("Plot", f"{self.kind}, {self._data.height} rows", None)
        if self._data.height and not self._snap_svg:  # once per chart: the Lab republishes
            self._snap_svg = to_svg(self.chart)  # its snapshot after every selection
        svg = svg_img(self._snap_svg, self.kind) if self._data.height else ""
        return head.replace("</div></div>", f"</div>{svg}</div>", 1)

    def __repr__(self) -> str:
        return f"<VegaPlot: {self.kind}, {self._data.height} rows>"
