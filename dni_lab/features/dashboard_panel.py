"""The latent dashboard panel: :class:`~dni_lab.widgets.FeatureDashboard` plus the parts
of :mod:`.dashboard_parts`.

It only turns the frames into the JSON that ``js/feature_dashboard_parts.js`` draws
under the base panel's drawing; ``dl.features.dashboard`` computes them. Imported on
first use, as the widgets are (``import dni_lab`` does not load anywidget).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..widgets._base import _read, esm, snapshot
from ..widgets.feature_dashboard import FeatureDashboard, payload

_EXPORT = "export default { render };"


def _esm() -> str:
    # the base panel's module without its export, then the parts' module, which wraps
    # its render (one self-contained module: anywidget cannot import a sibling)
    base = esm("feature_dashboard")
    if base.count(_EXPORT) != 1:
        raise RuntimeError("js/feature_dashboard.js no longer ends with " + _EXPORT)
    return base.replace(_EXPORT, "") + "\n" + _read("feature_dashboard_parts.js")


def _rows(frame: pl.DataFrame | None) -> list[dict[str, Any]] | None:
    return None if frame is None else frame.to_dicts()


def parts_payload(data: Any) -> dict[str, Any]:
    """The JSON of the parts :class:`FeatureDashboard` does not draw."""
    ablation = None
    if data.ablation is not None:
        ablation = [
            {"record": int(rec), "symbols": g["symbol"].to_list(),
             "change": g["loss_change"].to_list()}
            for (rec,), g in data.ablation.group_by("record", maintain_order=True)
        ]  # fmt: skip
    return {
        "nearest": _rows(data.nearest),
        "logit_weights": _rows(data.logit_weights),
        "explanation": _rows(data.explanation),
        "ablation": ablation,
    }


class LatentDashboard(FeatureDashboard):
    """A :class:`~dni_lab.widgets.FeatureDashboard` that also draws the nearest latents
    (a click shows one), the logit-weight histogram, the explanation and the per-token
    ablation effects of :class:`~dni_lab.features.dashboard_parts.LatentDashboardData`."""

    _esm = _esm()

    def show(self, latent: int) -> None:
        """Draw ``latent``'s dashboard."""
        self.summary = self._summarize(int(latent))
        self._payload = {**payload(self.summary), **parts_payload(self.summary)}

    def _on_message(self, w: Any, content: dict[str, Any], b: list) -> None:
        if content.get("type") == "latent":
            self.show(int(content["latent"]))
        else:
            super()._on_message(w, content, b)

    def snapshot_html(self) -> str:
        s = self.summary
        extra = []
        sections = (("explanation", s.explanation), ("nearest latents", s.nearest),
                    ("logit weights", s.logit_weights),
                    ("ablation effects", s.ablation))  # fmt: skip
        for title, frame in sections:
            if frame is not None and frame.height:
                extra.append(snapshot(title, "", frame, rows=20))
        return "<div>" + super().snapshot_html() + "".join(extra) + "</div>"
