"""Image overlay: a convolutional unit's map over the input grid, the hypothesis mask outlined."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl
import traitlets

from ._base import esm, selection_key
from ._behavior import unit_ready
from ._overlay import PagedOverlay

# Categorical colours for one-hot grids (e.g. a gridworld's object channels).
_PALETTE = np.array(
    [
        [245, 245, 245],
        [66, 66, 66],
        [30, 136, 229],
        [67, 160, 71],
        [229, 57, 53],
        [253, 216, 53],
        [142, 36, 170],
        [0, 172, 193],
        [244, 81, 30],
        [109, 76, 65],
    ],
    dtype=np.uint8,
)


def to_rgb(record: Any) -> np.ndarray:
    """An ``(H, W, 3)`` uint8 picture of an image record.

    ``(H, W)`` and ``(1, H, W)`` are grey levels, ``(3, H, W)`` colour; other channel
    counts are read as one-hot layers and drawn with a categorical palette
    (channel 0 wins where no channel is set).
    """
    a = np.asarray(record, dtype=np.float32)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"an image record has shape (H, W) or (C, H, W), got {a.shape}.")
    if a.shape[0] in (1, 3):
        lo, hi = float(a.min()), float(a.max())
        g = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
        g = np.repeat(g, 3, axis=0) if a.shape[0] == 1 else g
        return (g.transpose(1, 2, 0) * 255).round().astype(np.uint8)
    cls = np.where(a.max(0) > 0, a.argmax(0), 0)
    return _PALETTE[cls % len(_PALETTE)]


class ImageOverlay(PagedOverlay):
    """Image records in a grid: the unit's map drawn over each, the hypothesis mask outlined.

    Parameters
    ----------
    models : Model, list or mapping
        Models named by selections' ``mid``; convolutional maps are resized to
        the input by the extractor, so the map has one value per input pixel.
    records : sequence of arrays
        Images ``(H, W)`` or ``(C, H, W)``.
    hypotheses : list, optional
        Mask hypotheses; the selection's ``hid`` picks the outlined mask
        (values > 0.5, or > 0 for continuous signals).
    selection : dict, optional
    page_size : int
        Images per page.
    render : callable, optional
        ``record -> (H, W, 3) uint8`` picture; default :func:`to_rgb`.
    device : str

    Attributes
    ----------
    data : polars.DataFrame
        One row per pixel of the page: ``record, y, x, activation, mask``.
    """

    _esm = esm("image_overlay")
    page_size = traitlets.Int(12).tag(sync=True)
    opacity = traitlets.Float(0.9).tag(sync=True)
    _order = traitlets.Unicode("index").tag(sync=True)
    _page_index = traitlets.Int(0).tag(sync=True)
    _browser_sets = (*PagedOverlay._browser_sets, "opacity")
    _layout = traitlets.Dict().tag(sync=True)
    _images = traitlets.Bytes(b"").tag(sync=True)  # uint8 RGB, image after image
    _maps = traitlets.Bytes(b"").tag(sync=True)  # float32, one value per pixel
    _masks = traitlets.Bytes(b"").tag(sync=True)  # uint8 0/1 per pixel

    def __init__(
        self,
        models: Any,
        records: Sequence[Any],
        hypotheses: Any = None,
        selection: Any = None,
        page_size: int = 12,
        render: Callable[[Any], np.ndarray] | None = None,
        device: str = "cpu",
        **kwargs: Any,
    ) -> None:
        self._render = render or to_rgb
        super().__init__(models, records, hypotheses, selection, page_size, device, **kwargs)

    def _describe(self) -> str:
        lay = self._layout
        return (
            f"{len(self.source.records)} images, page {lay.get('page', 0) + 1}/"
            f"{lay.get('n_pages', 1)}, order {self._order}"
        )

    def _compute(self) -> None:
        sel = self.selection if unit_ready(self.selection) else None
        idx, page, pages, n_records = self._page_of(sel)
        pics = [self._render(self.source.records[i]) for i in idx]
        maps: list[np.ndarray] = []
        masks: list[np.ndarray] = []
        scale = 1.0
        if sel is not None:
            model = self.source.model(sel["mid"])
            maps = self.source.activations(sel, idx)
            sig = self.source.signal(sel.get("hid"), idx, model)
            kind = self._kind(sel.get("hid"))
            masks = [(s > (0.5 if kind == "binary" else 0)).astype(np.uint8) for s in sig]
            scale = max((float(np.abs(m).max()) for m in maps if m.size), default=0.0) or 1.0
        cells, frames = [], []
        for k, (i, pic) in enumerate(zip(idx, pics, strict=True)):
            H, W = pic.shape[:2]
            cell = {"index": int(i), "h": H, "w": W}
            if maps:
                cell["peak"] = float(maps[k].max()) if maps[k].size else None
                frames.append(_pixels(i, H, W, maps[k], masks[k] if masks else None))
            cells.append(cell)
        self._data = pl.concat(frames) if frames else pl.DataFrame()
        with self.hold_sync():
            self._images = b"".join(p.astype(np.uint8).tobytes() for p in pics)
            self._maps = b"".join(m.astype(np.float32).tobytes() for m in maps)
            self._masks = b"".join(m.tobytes() for m in masks)
            self._layout = {
                "cells": cells,
                "unit": _label(sel) if sel else None,
                "hid": sel.get("hid") if sel else None,
                "has_map": bool(maps),
                "has_mask": bool(masks),
                "scale": scale,
                "page": page,
                "n_pages": pages,
                "n_records": n_records,
                "order": self._order,
                "sent_at": time.time() * 1000.0,
                "error": "",
            }

    def _kind(self, hid: str | None) -> str:
        if hid is None or hid not in self.source.signals:
            return "binary"
        fam, col = self.source.signals[hid]
        return fam.kind_of(fam.signals()[col])


def _label(sel: dict[str, Any]) -> str:
    return f"{sel['mid']} {sel['layer']}[{sel['unit']}] ({selection_key(sel)})"


def _pixels(i: int, H: int, W: int, amap: np.ndarray, mask: np.ndarray | None) -> pl.DataFrame:
    n = H * W
    yy, xx = np.divmod(np.arange(n), W)
    return pl.DataFrame(
        {
            "record": np.full(n, i, np.int64),
            "y": yy.astype(np.int64),
            "x": xx.astype(np.int64),
            "activation": amap[:n].astype(np.float32),
            "mask": (mask[:n] if mask is not None else np.zeros(n, np.uint8)).astype(bool),
        }
    )
