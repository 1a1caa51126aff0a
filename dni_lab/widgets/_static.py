"""Static markup for snapshots that survives a notebook front end's HTML sanitiser.

JupyterLab and Notebook 7 sanitise the ``text/html`` of an untrusted output: inline
``<svg>`` is stripped (a chart became run-together axis labels) and only some CSS
properties are kept. A chart therefore travels as an ``<img>`` whose source is the SVG
as a data URI, and coloured text as spans with ``background-color`` and ``color``.
"""

from __future__ import annotations

import base64
import html
from typing import Any

import numpy as np

#: The panels' diverging map (``dni_lab/js/_common.js``), blue (negative) to red.
DIVERGING = np.array(
    [
        [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
        [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43],
    ],
    dtype=float,
)  # fmt: skip


def svg_img(svg: str, alt: str = "chart") -> str:
    """``svg`` as an ``<img>`` with a base64 data URI (kept by sanitisers; inline SVG is not).

    Anything that is not an SVG document (an error message) is returned as it is.
    """
    if "<svg" not in svg:
        return svg
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (
        f'<img alt="{html.escape(alt)}" style="max-width:100%" '
        f'src="data:image/svg+xml;base64,{data}">'
    )


def diverging(t: float) -> tuple[int, int, int]:
    """The colour of ``t`` in [-1, 1] on :data:`DIVERGING` (grey for NaN), as the JS does."""
    if not np.isfinite(t):
        return (200, 200, 200)
    x = (min(max(t, -1.0), 1.0) + 1) / 2 * (len(DIVERGING) - 1)
    i = min(int(x), len(DIVERGING) - 2)
    c = DIVERGING[i] + (DIVERGING[i + 1] - DIVERGING[i]) * (x - i)
    return tuple(round(float(v)) for v in c)  # type: ignore[return-value]


_SHOWN = {" ": "&nbsp;", "\n": "⏎", "\t": "⇥"}


def coloured_records(layout: dict[str, Any], values: np.ndarray) -> str:
    """The overlay's visible records as coloured spans: one line per record, each symbol's
    background its unit's behavior on the diverging map scaled by ``layout``'s first unit.

    ``values`` holds the first unit's behavior for every symbol of the page (the layout's
    ``offset`` indexes it). Without a unit, the records are shown uncoloured.
    """
    units = layout.get("units") or []
    scale = float(units[0]["scale"]) if units else 0.0
    lines = []
    for rec in layout.get("records", []):
        spans = []
        for t, sym in enumerate(rec["symbols"]):
            text = _SHOWN.get(sym) or html.escape(sym)
            if not scale:
                spans.append(text)
                continue
            r, g, b = diverging(float(values[rec["offset"] + t]) / scale)
            fg = "#fff" if 0.299 * r + 0.587 * g + 0.114 * b < 130 else "#111"
            style = f"background-color:rgb({r},{g},{b});color:{fg}"
            spans.append(f'<span style="{style}">{text}</span>')
        lines.append(
            f'<div style="font-family:monospace;white-space:pre;margin:1px 0">'
            f'<span style="color:#777">#{rec["index"]} </span>{"".join(spans)}</div>'
        )
    if units:
        u = units[0]
        legend = (
            f'<div style="color:#777">{html.escape(u["label"])}: blue −{scale:.2f} … '
            f'red +{scale:.2f} (scale over {html.escape(u["scale_of"])})</div>'
        )
    else:
        legend = '<div style="color:#777">no unit selected: select one to colour the text</div>'
    return legend + "".join(lines)
