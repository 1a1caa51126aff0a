"""Feature dashboard: one latent of a feature set, as SAE dashboards show it.

Top activations binned by quantile with the hypothesis track under the text, the
density of its activations, its logit effects, its best hypotheses from the score
frame and the neurons it correlates with. The panel only draws: its data comes
from a ``summarize(latent) -> LatentSummary`` function that ``dl.features.dashboard``
builds (the widget never runs a model itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import traitlets

from ._base import Panel, esm, snapshot


def payload(summary: Any) -> dict[str, Any]:
    """The JSON the browser draws, from a :class:`~dni_lab.features.LatentSummary`."""
    ex = summary.examples
    bins = []
    for b in sorted(set(ex["bin"].to_list()), reverse=True):  # the highest bin first
        rows = ex.filter(pl.col("bin") == b)
        examples = []
        for rec in dict.fromkeys(rows["record"].to_list()):
            r = rows.filter(pl.col("record") == rec)
            examples.append({
                "record": int(rec), "symbols": r["symbol"].to_list(),
                "acts": r["activation"].to_list(),
                "hyp": r["hypothesis"].to_list() if "hypothesis" in r.columns else None,
            })  # fmt: skip
        bins.append({"bin": int(b), "examples": examples})
    logits = None
    if summary.logits is not None:
        logits = {
            side: summary.logits.filter(pl.col("side") == side).select("token", "effect").rows()
            for side in ("top", "bottom")
        }
    hyps = []
    if summary.hypotheses is not None:
        keep = ("mid", "uid", "hid", "measure", "unit_score")
        cols = [c for c in keep if c in summary.hypotheses.columns]
        hyps = summary.hypotheses.select(cols).head(10).to_dicts()
    return {
        "title": f"{summary.feature_set} · latent {summary.latent}",
        "latent": summary.latent,
        "firing_rate": summary.firing_rate,
        "max_act": float(ex["activation"].max()) if ex.height else 0.0,
        "bins": bins,
        "density": summary.density.to_dicts(),
        "logits": logits,
        "hypotheses": hyps,
        "neurons": summary.neurons.to_dicts(),
    }


class FeatureDashboard(Panel):
    """One latent's dashboard; follows a linked score table's selection of that set's latents.

    Parameters
    ----------
    summarize : callable
        ``summarize(latent) -> LatentSummary`` (``dl.features.dashboard`` makes it).
    layer : str
        The feature set's layer name in score frames (``"{hook}:{name}"``).
    latent : int
        The latent shown first.
    mid : str, optional
        The model's name, so that a selection from a score table of several models
        is followed only for this one.
    """

    _esm = esm("feature_dashboard")
    _payload = traitlets.Dict().tag(sync=True)

    def __init__(
        self, summarize: Callable[[int], Any], layer: str, latent: int = 0, mid: str | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self._summarize = summarize
        self.layer = layer
        self.mid = mid
        self.summary = None
        self.observe(self._follow, names="selection")
        self.on_msg(self._on_message)
        self.show(latent)

    def show(self, latent: int) -> None:
        """Draw ``latent``'s dashboard."""
        self.summary = self._summarize(int(latent))
        self._payload = payload(self.summary)

    def _follow(self, change: dict[str, Any]) -> None:
        sel = change["new"] or {}
        if sel.get("layer") != self.layer or "unit" not in sel:
            return
        if self.mid is not None and sel.get("mid") not in (None, self.mid):
            return
        if self.summary is None or int(sel["unit"]) != self.summary.latent:
            self.show(int(sel["unit"]))

    def _on_message(self, _w: Any, content: dict[str, Any], _b: list) -> None:
        if content.get("type") == "hypothesis":
            row = dict(content.get("row") or {})
            self.selection = {**row, "layer": self.layer, "unit": self.summary.latent}

    @property
    def data(self) -> pl.DataFrame:
        """The shown examples: ``bin, record, position, symbol, activation[, hypothesis]``."""
        return self.summary.examples if self.summary is not None else pl.DataFrame()

    def _describe(self) -> str:
        s = self.summary
        return f"{s.feature_set} latent {s.latent}, firing rate {s.firing_rate:.3f}"

    def snapshot_html(self) -> str:
        s = self.summary
        parts = [snapshot(type(self).__name__, self._describe(), s.examples, rows=40)]
        sections = (("logit effects", s.logits), ("best hypotheses", s.hypotheses),
                    ("correlated neurons", s.neurons), ("density", s.density))  # fmt: skip
        for title, frame in sections:
            if frame is not None and frame.height:
                parts.append(snapshot(title, "", frame, rows=10))
        return "<div>" + "".join(parts) + "</div>"
