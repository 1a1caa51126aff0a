"""The heatmap of a patching grid (``dl.verify.patch_grid`` or ``dl.verify.attribution_grid``):
layers down, positions or heads across, the effect (or its estimate) as color, and the null
beside it on the same color scale so a cell reads against chance."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from .charts import Built

#: effects are in the metric's own units: a diverging scale centred at 0, not clamped
_CENTRED = alt.Scale(scheme="redblue", reverse=True, domainMid=0)


def _axis(df: pl.DataFrame) -> tuple[pl.Expr, str]:
    """The across axis: position, head, or ``head@position``."""
    heads = df["head"].null_count() < df.height
    positions = df["position"].null_count() < df.height
    if heads and positions:
        return pl.format("{}@{}", pl.col("head"), pl.col("position")), "head@position"
    if heads:
        return pl.col("head").cast(pl.String), "head"
    return pl.col("position").cast(pl.String), "position"


def patch_grid_chart(result: Any, value: str | None = None) -> Built:
    """Layer × position (or × head) cells colored by ``value``, and the null grid beside.

    Parameters
    ----------
    result : Verification or polars.DataFrame
        What ``dl.verify.patch_grid`` / ``attribution_grid`` return, or their frame.
    value : str, optional
        The column colored: ``effect`` (default), ``recovered``, ``attribution``, ...
    """
    frame = result.frame if hasattr(result, "frame") else result
    value = value or ("effect" if "effect" in frame.columns else "attribution")
    across, title = _axis(frame)
    panels = [("grid", value)]
    if value == "effect" and "null_effect" in frame.columns:
        panels.append(("null", "null_effect"))
    parts = [
        frame.select("layer", "head", "position", across.alias("across"),
                     pl.col(col).alias("value"), pl.lit(name).alias("panel"),
                     *(["null_p"] if "null_p" in frame.columns else []))
        for name, col in panels
    ]  # fmt: skip
    df = pl.concat(parts, how="vertical")
    order = frame.select(across.alias("a"))["a"].unique(maintain_order=True).to_list()
    summary = getattr(result, "summary", None) or {}
    what = f"{summary.get('site', '')} {value}".strip()
    tips = [alt.Tooltip("panel:N"), alt.Tooltip("layer:O"), alt.Tooltip("across:N", title=title),
            alt.Tooltip("value:Q", format=".4f", title=value)]  # fmt: skip
    if "null_p" in df.columns:
        tips.append(alt.Tooltip("null_p:Q", format=".3f"))
    chart = (
        alt.Chart(df)
        .mark_rect()
        .encode(
            x=alt.X("across:N", sort=order, title=title),
            y=alt.Y("layer:O", title="layer"),
            color=alt.Color("value:Q", scale=_CENTRED, title=value),
            column=alt.Column("panel:N", title=None, sort=["grid", "null"]),
            tooltip=tips,
        )
        .properties(
            width=alt.Step(max(8, min(28, 420 // max(len(order), 1)))),
            height=alt.Step(18),
            title=f"Patching grid: {what}",
        )
    )
    return chart, df, []
