"""Altair charts of score frames and verification results (pure functions, no widgets).

Each builder returns ``(chart, data, keys)``: the Altair chart, the Polars frame
it plots, and the selection keys its clickable marks stand for. A clickable mark
carries ``href = "#dni=<i>"`` (i indexing ``keys``): in the SVG that vl-convert
renders, the mark sits inside an ``<a>`` the plot panel intercepts, so a click
selects a unit without any chart library in the browser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import altair as alt
import polars as pl

Built = tuple[alt.TopLevelMixin, pl.DataFrame, list[dict[str, Any]]]
_SEL = ["mid", "uid", "hid", "layer", "unit", "measure"]
_DIVERGING = alt.Scale(scheme="redblue", reverse=True, domain=[-1, 1], clamp=True)


def _pick(frame: pl.DataFrame, measure: str | None) -> pl.DataFrame:
    """Rows of one measure (the first present unless named) with a score."""
    if frame.height == 0:
        return frame
    measure = measure or frame["measure"][0]
    return frame.filter((pl.col("measure") == measure) & pl.col("unit_score").is_not_null())


def _with_keys(df: pl.DataFrame) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    cols = [c for c in _SEL if c in df.columns]
    keys = df.select(cols).to_dicts()
    hrefs = pl.Series([f"#dni={i}" for i in range(df.height)], dtype=pl.String)
    return df.with_columns(_href=hrefs), keys


def _described(chart: alt.Chart, epoch: bool = False) -> alt.Chart:
    """Clickable marks with a description, "unit · hypothesis · score": the SVG keeps it as
    the mark's aria-label, which the plot panel shows as its tooltip. Vega writes it when
    it draws, so the rows sent stay as they are."""
    text = "datum.label + ' · ' + datum.hid"
    text += " + ' · epoch ' + datum.epoch" if epoch else ""
    text += " + ' · score ' + format(datum.unit_score, '.3f')"
    return chart.transform_calculate(tip=text).encode(description="tip:N")


def _label() -> pl.Expr:
    return pl.format("{} {}[{}]", pl.col("mid"), pl.col("layer"), pl.col("unit"))


def _only(df: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """The columns a chart encodes: the spec carries its data inline (as JSON to the
    browser for Vega, through vl-convert for SVG), so every other column is dead weight,
    and scores to four decimals (the charts show three)."""
    scores = [c for c in ("unit_score", "abs_score") if c in cols and c in df.columns]
    return df.select(c for c in cols if c in df.columns).with_columns(pl.col(scores).round(4))


def _short_units(df: pl.DataFrame) -> tuple[pl.Expr, str]:
    """Unit axis labels without what every row shares, and the axis title that names it.

    On one model and one layer each label repeated both ("sql-lstm lstm[110]" forty
    times); then the label is the unit index and the title says "unit (sql-lstm lstm)".
    """
    shown = [c for c in ("mid", "layer") if df[c].n_unique() > 1]
    shared = " ".join(str(df[c][0]) for c in ("mid", "layer") if c not in shown and df.height)
    if not shown:
        label = pl.col("unit").cast(pl.String)
    else:
        label = pl.format("{}[{}]", pl.concat_str([pl.col(c) for c in shown], separator=" "),
                          pl.col("unit"))  # fmt: skip
    return label, f"unit ({shared})" if shared else "unit"


def _short_hids(hids: list[str]) -> tuple[dict[str, str], str]:
    """Hypothesis labels without their shared family prefix (up to a ``.`` or ``:``), and
    the axis title naming it: ``sql.range:ColumnRef`` is ``range:ColumnRef`` under
    "hypothesis (sql.*)". Names without a shared prefix stay whole."""
    if len(hids) < 2:
        return {h: h for h in hids}, "hypothesis"
    lo, hi = min(hids), max(hids)  # the sorted extremes share what all names share
    same = (i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b)
    common = lo[: next(same, len(lo))]
    cut = max(common.rfind("."), common.rfind(":")) + 1
    if cut == 0:
        return {h: h for h in hids}, "hypothesis"
    return {h: h[cut:] for h in hids}, f"hypothesis ({common[:cut]}*)"


def top_hypotheses(frame: pl.DataFrame, n: int) -> list[str]:
    """The ``n`` hypotheses with the strongest best unit (|unit_score|)."""
    best = frame.group_by("hid").agg(pl.col("unit_score").abs().max().alias("m"))
    return best.sort(["m", "hid"], descending=[True, False])["hid"].head(n).to_list()


def sorted_scores(
    frame: pl.DataFrame, measure: str | None = None, max_hyps: int = 8, clickable: int = 25
) -> Built:
    """Unit scores per hypothesis, sorted (the papers' "sorted unit scores" figure).

    Every unit is on the line; the ``clickable`` best units of each hypothesis get
    a point that selects them.
    """
    df = _pick(frame, measure)
    hids = top_hypotheses(df, max_hyps) if df.height else []
    df = (
        df.filter(pl.col("hid").is_in(hids))
        .sort(["hid", "unit_score", "uid"], descending=[False, True, False])
        .with_columns(rank=pl.int_range(pl.len()).over("hid") + 1, label=_label())
    )
    pts, keys = _with_keys(df.filter(pl.col("rank") <= clickable))
    base = alt.Chart(_only(df, "rank", "unit_score", "hid")).encode(
        x=alt.X("rank:Q", title="unit rank"),
        y=alt.Y("unit_score:Q", title="unit score"),
        color=alt.Color("hid:N", title="hypothesis", sort=hids),
    )
    points = _described(
        alt.Chart(_only(pts, "rank", "unit_score", "hid", "label", "_href"))
        .mark_point(filled=True, size=40)
        .encode(
            x="rank:Q",
            y="unit_score:Q",
            color=alt.Color("hid:N", sort=hids),
            href="_href:N",
            tooltip=["label:N", "hid:N", alt.Tooltip("unit_score:Q", format=".3f")],
        )
    )
    # the lines are not described (their aria-label, one point's fields, would mislead)
    chart = (base.mark_line(aria=False) + points).properties(
        width=360, height=200, title="Sorted unit scores per hypothesis"
    )
    return chart, df, keys


def epoch_scores(
    frame: pl.DataFrame,
    epochs: Mapping[str, Any] | None = None,
    measure: str | None = None,
    max_hyps: int = 8,
    selection: Mapping[str, Any] | None = None,
) -> Built:
    """Best |unit score| per hypothesis across training epochs (one model per epoch).

    ``epochs`` maps a model id to its epoch; without it the frame needs an
    ``epoch`` column (as a query selecting ``M.epoch`` returns). With a
    ``selection`` the selected unit's score across epochs is drawn dashed.
    """
    df = _pick(frame, measure)
    if "epoch" not in df.columns:
        mapping = {str(k): v for k, v in (epochs or {}).items()}
        df = df.with_columns(epoch=pl.col("mid").replace_strict(mapping, default=None))
    df = df.filter(pl.col("epoch").is_not_null())
    hids = top_hypotheses(df, max_hyps) if df.height else []
    best = (
        df.filter(pl.col("hid").is_in(hids))
        .sort(["epoch", "hid", "unit_score", "uid"], descending=[False, False, True, False])
        .with_columns(abs_score=pl.col("unit_score").abs())
        .sort("abs_score", descending=True, maintain_order=True)
        .group_by(["epoch", "hid"], maintain_order=True)
        .first()
        .sort(["hid", "epoch"])
        .with_columns(label=_label())
    )
    best, keys = _with_keys(best)
    enc = dict(
        x=alt.X("epoch:Q", title="epoch"),
        y=alt.Y("abs_score:Q", title="best |unit score|"),
        color=alt.Color("hid:N", sort=hids, title="hypothesis"),
    )
    drawn = _only(best, "epoch", "abs_score", "hid", "label", "unit_score", "_href")
    lines = alt.Chart(_only(drawn, "epoch", "abs_score", "hid")).mark_line(aria=False)
    lines = lines.encode(**enc)
    tip = ["hid:N", "epoch:Q", "label:N", alt.Tooltip("unit_score:Q", format=".3f")]
    points = alt.Chart(drawn).mark_point(filled=True)
    points = _described(points.encode(**enc, href="_href:N", tooltip=tip), epoch=True)
    chart = lines + points
    if selection and selection.get("uid") is not None:
        mine = df.filter(
            (pl.col("uid") == selection["uid"]) & (pl.col("hid") == selection.get("hid"))
        ).sort("epoch")
        if mine.height:
            mark = alt.Chart(_only(mine, "epoch", "unit_score"))
            chart = chart + mark.mark_line(strokeDash=[4, 3], color="black", aria=False).encode(
                x="epoch:Q", y=alt.Y("unit_score:Q")
            )
    return chart.properties(width=360, height=200, title="Scores across epochs"), best, keys


def heatmap(
    frame: pl.DataFrame, measure: str | None = None, max_units: int = 40, max_hyps: int = 30
) -> Built:
    """Unit × hypothesis scores for the strongest units and hypotheses."""
    df = _pick(frame, measure)
    hids = top_hypotheses(df, max_hyps) if df.height else []
    df = df.filter(pl.col("hid").is_in(hids)).with_columns(label=_label())
    best = (
        df.group_by(["mid", "uid", "label"])
        .agg(pl.col("unit_score").abs().max().alias("m"))
        .sort(["m", "mid", "uid"], descending=[True, False, False])
        .head(max_units)
    )
    df = df.join(best.select("mid", "uid"), on=["mid", "uid"]).sort(["mid", "uid", "hid"])
    unit_axis, unit_title = _short_units(df)
    short, hyp_title = _short_hids(hids)
    df = df.with_columns(
        unit_axis=unit_axis, hyp_axis=pl.col("hid").replace_strict(short, return_dtype=pl.String)
    )
    df, keys = _with_keys(df)
    order = best.join(df.select("mid", "uid", "unit_axis").unique(), on=["mid", "uid"])
    order = order.sort(["m", "mid", "uid"], descending=[True, False, False])["unit_axis"]
    # cells as wide as a plot of about 420 px allows (few hypotheses: wider cells)
    step = min(36, max(14, 420 // max(len(hids), 1)))
    chart = _described(
        alt.Chart(_only(df, "hyp_axis", "unit_axis", "unit_score", "label", "hid", "_href"))
        .mark_rect()
        .encode(
            x=alt.X("hyp_axis:N", sort=[short[h] for h in hids], title=hyp_title),
            y=alt.Y("unit_axis:N", sort=order.to_list(), title=unit_title),
            color=alt.Color("unit_score:Q", scale=_DIVERGING, title="score"),
            href="_href:N",
            tooltip=[
                alt.Tooltip("label:N", title="unit"),
                alt.Tooltip("hid:N", title="hypothesis"),
                alt.Tooltip("unit_score:Q", format=".3f", title="score"),
            ],
        )
    ).properties(width=alt.Step(step), height=alt.Step(12), title="Unit × hypothesis scores")
    return chart, df, keys


def verification(result: Any, sets: pl.DataFrame | None = None) -> Built:
    """A perturbation check: activation change under baseline vs treatment swaps, and
    the units' silhouette against random unit sets of the same size.

    ``result`` is what ``verify`` returns (``frame``, ``summary``) or a frame with
    ``kind`` and ``delta_norm`` columns; ``sets`` (``set``, ``silhouette``) defaults to
    ``summary["sets"]``.
    """
    frame = result.frame if hasattr(result, "frame") else result
    if sets is None and hasattr(result, "summary"):
        sets = result.summary.get("sets")
    change = (
        alt.Chart(frame)
        .mark_boxplot(extent="min-max")
        .encode(
            x=alt.X("delta_norm:Q", title="activation change (L2)"),
            y=alt.Y("kind:N", title=None, sort=["baseline", "treatment"]),
            color=alt.Color("kind:N", legend=None),
        )
        .properties(width=300, height=90, title="Baseline vs treatment perturbations")
    )
    chart: Any = change
    if sets is not None and sets.height:
        s = sets.with_columns(tested=pl.col("set") == "units")
        sil = (
            alt.Chart(s)
            .mark_point(filled=True, size=70)
            .encode(
                x=alt.X("silhouette:Q", title="silhouette"),
                y=alt.Y(
                    "tested:N",
                    title=None,
                    axis=alt.Axis(labelExpr="datum.value ? 'units' : 'random'"),
                ),
                color=alt.Color(
                    "tested:N", legend=None, scale=alt.Scale(range=["#9e9e9e", "#d32f2f"])
                ),
                tooltip=["set:N", alt.Tooltip("silhouette:Q", format=".3f")],
            )
            .properties(width=300, height=90, title="Silhouette vs random unit sets")
        )
        chart = alt.vconcat(change, sil)
    return chart, frame, []
