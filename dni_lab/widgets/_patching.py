"""The chart of an activation-patching check (``dl.verify.patching``): the tested set's
recovered share of the metric against the random sets'; a patching grid
(``dl.verify.patch_grid`` / ``attribution_grid``) is drawn as its heatmap
(:mod:`._patch_grid`)."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from .charts import Built


def patching_chart(result: Any) -> Built:
    """One point per unit set: how much of the clean–corrupted difference patching it
    recovers (0: none, 1: all), the tested set in red, random sets in grey.

    ``result`` is what ``dl.verify.patching`` returns (``frame``, ``summary``) or its frame
    (``set``, ``draw``, ``recovered``, ``metric``, ``units``); a grid's result (``layer``,
    ``head``, ``position`` columns) is drawn by :func:`._patch_grid.patch_grid_chart`.
    """
    frame = result.frame if hasattr(result, "frame") else result
    if {"layer", "head", "position"} <= set(frame.columns):  # a grid: its heatmap
        from ._patch_grid import patch_grid_chart

        return patch_grid_chart(result)
    df = frame.select(
        "set", "draw", "recovered", "metric",
        label=pl.when(pl.col("set") == "tested").then(pl.lit("tested"))
        .otherwise(pl.lit("random")),
    )  # fmt: skip
    title = "Activation patching: share of the metric recovered"
    summary = getattr(result, "summary", None) or {}
    if summary.get("layer"):
        title += f" ({summary['layer']}, {summary.get('direction', 'denoise')})"
    points = (
        alt.Chart(df)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("recovered:Q", title="recovered (0 = target run, 1 = source run)"),
            y=alt.Y("label:N", title=None, sort=["tested", "random"]),
            color=alt.Color("label:N", legend=None,
                            scale=alt.Scale(domain=["tested", "random"],
                                            range=["#d32f2f", "#9e9e9e"])),
            tooltip=["set:N", "draw:Q", alt.Tooltip("recovered:Q", format=".3f"),
                     alt.Tooltip("metric:Q", format=".3f")],
        )
        .properties(width=320, height=80, title=title)
    )
    ends = alt.Chart(pl.DataFrame({"x": [0.0, 1.0]})).mark_rule(strokeDash=[4, 3]).encode(x="x:Q")
    return alt.layer(ends, points), df, []
