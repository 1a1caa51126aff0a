"""``dl.features.dashboard``: the feature dashboard panel for a feature set's latents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from ..backend.extraction.models import Model
from .base import FeatureSet
from .summary import summarize


def dashboard(
    model: Model,
    fs: FeatureSet,
    records: Sequence[Any],
    latent: int | None = None,
    hypothesis: Any = None,
    frame: pl.DataFrame | None = None,
    **summary_kw: Any,
):
    """A :class:`~dni_lab.widgets.FeatureDashboard` of ``fs``'s latents over ``records``.

    It shows ``latent`` (default: the best-scoring latent of ``frame``, else 0) and
    follows a linked score table's selection of this set's latents
    (``dl.widgets.link_selection(table, dash)``). ``hypothesis`` draws its track under
    each example; ``summary_kw`` goes to :func:`~dni_lab.features.summarize`.
    """
    from ..widgets.feature_dashboard import FeatureDashboard

    records = list(records)
    if latent is None:
        latent = 0
        if frame is not None:
            own = frame.filter(pl.col("layer") == fs.address).drop_nulls("unit_score")
            if own.height:
                latent = int(own.sort(pl.col("unit_score").abs(), descending=True)["unit"][0])

    def one(lat: int):
        return summarize(model, fs, lat, records, hypothesis=hypothesis, frame=frame, **summary_kw)

    return FeatureDashboard(one, fs.address, latent, mid=model.name)
