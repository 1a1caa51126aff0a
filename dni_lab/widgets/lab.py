"""The lab dashboard: score table, overlay and plots with one linked selection."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets
import numpy as np
import polars as pl
import traitlets

from ..backend.engine.run import Run
from ._base import Snapshots, as_selection, link_selection, selection_key
from ._behavior import feature_sets_in
from .image_overlay import ImageOverlay
from .plots import Plot
from .query_builder import QueryBuilder
from .table import ScoreTable
from .text_overlay import TextOverlay


def _is_image(record: Any) -> bool:
    return getattr(np.asarray(record) if not isinstance(record, str) else record, "ndim", 0) >= 2


class Lab(Snapshots, ipywidgets.VBox):
    """Score table, activation overlay and plots that follow one selection.

    Click a table row (or a plot's point) and the overlay shows that unit over
    the records while the plots outline it. With ``builder=True`` a query
    builder on top starts runs whose results stream into the table.

    Parameters
    ----------
    source : Run, polars.DataFrame or None
        A running inspection (live) or a score frame.
    models, records, hypotheses : optional
        What the overlay needs; taken from ``source`` when it is a run (with the
        feature sets among its units, so a latent's row shows over the records).
    epochs : mapping, optional
        ``{mid: epoch}``: adds the scores-across-epochs plot.
    builder : bool
        Show a query builder (needs ``models``, ``records`` and ``hypotheses``).
    plots : sequence of str
        Plot kinds to show (``"sorted"``, ``"heatmap"``, ``"epochs"``).
    plot_interval : float
        Seconds between plot refreshes while a run streams (SVG rendering costs
        CPU the run would otherwise use).
    charts : {"svg", "vega"}
        ``"svg"``: charts drawn in the kernel by vl-convert (light, static SVG with
        clickable marks); ``"vega"``: :class:`~.vega.VegaPlot`, drawn by Vega in the
        browser with tooltips, zoom and click selection (a 0.9 MB module, offline).

    Attributes
    ----------
    table, overlay, plots, builder
        The panels, each with ``.data`` (a Polars frame) and ``.selection``.
    """

    selection = traitlets.Dict()

    def __init__(
        self,
        source: Run | pl.DataFrame | None = None,
        models: Any = None,
        records: Sequence[Any] | None = None,
        hypotheses: Any = None,
        epochs: Mapping[str, Any] | None = None,
        builder: bool = False,
        plots: Sequence[str] = ("sorted", "heatmap"),
        plot_interval: float = 5.0,
        page_size: int = 15,
        charts: str = "svg",
    ) -> None:
        if isinstance(source, Run):
            # a query's run (QueryRun) has no single model list: pass models= etc. then
            insp = source.inspection
            models = models if models is not None else getattr(insp, "models", None)
            if hypotheses is None:
                hypotheses = getattr(insp, "families", None)
            # the run's records where they were a list in memory (a file is not read here)
            data = getattr(getattr(insp, "data", None), "in_memory", None)
            if records is None and isinstance(data, Sequence):
                records = data
            features = feature_sets_in(getattr(insp, "units", None))
        else:
            features = []
        self.table = ScoreTable(source, page_size=page_size)
        self.builder = (
            QueryBuilder(models, hypotheses, records, table=self.table) if builder else None
        )
        self.overlay: TextOverlay | ImageOverlay | None = None
        if models is not None and records is not None and len(records):
            cls = ImageOverlay if _is_image(records[0]) else TextOverlay
            self.overlay = cls(models, records, hypotheses, features=features or None)
        kinds = list(plots) + (["epochs"] if epochs and "epochs" not in plots else [])
        if charts not in ("svg", "vega"):
            raise ValueError(f"charts={charts!r}: use 'svg' (drawn in the kernel) or 'vega'.")
        if charts == "vega":
            from .vega import VegaPlot as plot_cls
        else:
            plot_cls = Plot
        self.plots = [
            plot_cls(k, self.table.frame, **({"epochs": dict(epochs)} if k == "epochs" else {}))
            for k in kinds
        ]
        self._interval, self._last_plot = plot_interval, 0.0
        self.table.on_frame(self._on_frame)
        panels = [self.table, *([self.overlay] if self.overlay else []), *self.plots]
        # The table takes the full width (its eleven columns were clipped at half width);
        # the overlay sits under it.
        top = ipywidgets.VBox(
            [self.table, *([self.overlay] if self.overlay else [])],
            layout=ipywidgets.Layout(width="100%"),
        )
        rows: list[Any] = [self.builder] if self.builder else []
        # align_items: each plot as tall as its chart (stretched, a short chart beside a tall
        # one left an empty area under it)
        plot_row = ipywidgets.Layout(flex_flow="row wrap", align_items="flex-start")
        rows += [top, ipywidgets.HBox(self.plots, layout=plot_row)]
        super().__init__(rows, layout=ipywidgets.Layout(width="100%"))
        self._links = link_selection(*panels)
        self._own = traitlets.link((self, "selection"), (self.table, "selection"))
        self.observe(self._snapshot_on_selection, names=["selection"])
        for p in self.plots:  # plots share a row
            if charts == "vega":  # its chart's own width: a narrower box clipped its legend
                p.layout = ipywidgets.Layout(flex="0 0 auto", max_width="100%", overflow="auto")
            else:
                p.layout = ipywidgets.Layout(flex="1 1 0", min_width="320px", overflow="auto")
        for p in [self.table, *([self.overlay] if self.overlay else [])]:
            p.layout = ipywidgets.Layout(width="100%", overflow="auto")

    @property
    def data(self) -> pl.DataFrame:
        """The score frame (the table's, all rows)."""
        return self.table.frame

    def select(self, value: Any) -> None:
        """Select ``(mid, uid, hid)``, a dict or a one-row frame; every panel follows."""
        sel = as_selection(value)
        if "layer" not in sel and self.data.height:
            rows = self.data.filter(
                (pl.col("mid") == sel.get("mid")) & (pl.col("uid") == sel.get("uid"))
            )
            if rows.height:
                sel = {**as_selection(rows.head(1)), **sel}
        self.selection = sel

    def _on_frame(self, frame: pl.DataFrame, final: bool) -> None:
        now = time.perf_counter()
        if not final and now - self._last_plot < self._interval:
            return
        self._last_plot = now
        for p in self.plots:
            p.update(frame)
        if final:  # the saved output shows the dashboard as it ended
            self.refresh_snapshot()

    def _running(self) -> bool:
        return self.table._running()

    def _publish_final(self) -> None:
        self.table._publish_final()  # its own output, if it has one; then the dashboard's
        self.refresh_snapshot()

    def snapshot_html(self) -> str:
        """The panels' snapshots, one under the other."""
        parts = [self.table, *([self.overlay] if self.overlay else []), *self.plots]
        return (
            '<div class="dni-snapshot-lab">' + "".join(p.snapshot_html() for p in parts) + "</div>"
        )

    def __repr__(self) -> str:
        parts = [f"{self.table.frame.height} rows"]
        if self.overlay is not None:
            parts.append(type(self.overlay).__name__)
        parts.append("plots " + ",".join(p.kind for p in self.plots))
        key = selection_key(self.selection)
        return f"<Lab: {', '.join(parts)}{', selected ' + key if key else ''}>"
