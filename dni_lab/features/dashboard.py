"""``dl.features.dashboard``: the latent dashboard panel for a feature set's latents.

The data (Polars frames) comes from :func:`~dni_lab.features.summarize` and
:mod:`.dashboard_parts`; :mod:`.dashboard_panel` draws it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from ..backend.extraction.extract import resolve_device
from ..backend.extraction.models import Model
from ..backend.extraction.readings import eval_mode
from .base import FeatureSet
from .dashboard_parts import explanation_rows, parts
from .summary import summarize

if TYPE_CHECKING:
    from .dashboard_panel import LatentDashboard


def dashboard(
    model: Model,
    fs: FeatureSet,
    records: Sequence[Any],
    latent: int | None = None,
    hypothesis: Any = None,
    frame: pl.DataFrame | None = None,
    *,
    explanation: str | None = None,
    explanation_score: float | None = None,
    explanations: pl.DataFrame | None = None,
    n_nearest: int = 10,
    logit_bins: int = 20,
    ablation: bool = True,
    **summary_kw: Any,
) -> LatentDashboard:
    """A :class:`LatentDashboard` of ``fs``'s latents over ``records``.

    It shows ``latent`` (default: the best-scoring latent of ``frame``, else 0) and
    follows a linked score table's selection of this set's latents
    (``dl.widgets.link_selection(table, dash)``).

    Parameters
    ----------
    model, fs, records
        The model, the feature set at one of its hooks, and the records to read.
    latent : int, optional
        The latent shown first.
    hypothesis, frame
        A hypothesis drawn under each example, and a score frame (best hypotheses).
    explanation, explanation_score : str, float, optional
        The first shown latent's explanation and its score (not shown for others); or
    explanations : polars.DataFrame, optional
        A frame with columns ``latent, explanation, score`` (each latent's rows shown).
    n_nearest, logit_bins : int
        Nearest latents by decoder cosine listed; bins of the logit-weight histogram.
    ablation : bool
        Compute the per-token loss change of ablating the latent on its top examples
        (two forward passes over them per latent shown).
    **summary_kw
        Passed to :func:`~dni_lab.features.summarize` (``n_bins``, ``per_bin``, ``device``...).

    The model's and the feature set's modes and hooks are as they were after each
    latent is drawn, also when drawing one fails.
    """
    from .dashboard_panel import LatentDashboard

    records = list(records)
    explanation_rows(0, explanation, explanation_score, explanations)  # bad input fails now
    if latent is None:
        latent = 0
        if frame is not None:
            own = frame.filter(pl.col("layer") == fs.address).drop_nulls("unit_score")
            if own.height:
                latent = int(own.sort(pl.col("unit_score").abs(), descending=True)["unit"][0])
    dev, first = resolve_device(summary_kw.get("device", "auto")), latent

    def one(lat: int):
        mine = lat == first  # a string explains the latent shown first only
        with eval_mode(fs):  # summarize leaves the set in eval mode; put its modes back
            s = summarize(model, fs, lat, records, hypothesis=hypothesis, frame=frame, **summary_kw)
            return parts(model, fs, s, records, dev, n_nearest=n_nearest, logit_bins=logit_bins,
                         explanation=explanation if mine else None,
                         explanation_score=explanation_score if mine else None,
                         explanations=explanations, ablation=ablation)  # fmt: skip

    return LatentDashboard(one, fs.address, latent, mid=model.name)
