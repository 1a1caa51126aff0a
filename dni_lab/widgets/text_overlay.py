"""Text overlay: records symbol by symbol, coloured by selected units' behavior."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl
import traitlets

from ._base import as_selection, esm, selection_key
from ._behavior import unit_ready
from ._format import counted
from ._overlay import PagedOverlay


def default_symbols(record: Any) -> list[str]:
    """Characters of a string, tokens of a sequence, else the record as one symbol."""
    if isinstance(record, str):
        return list(record)
    if isinstance(record, (list, tuple)):
        return [str(t) for t in record]
    return [str(record)]


class TextOverlay(PagedOverlay):
    """Records drawn symbol by symbol, the background the unit's behavior.

    The selected unit (and any pinned units, side by side) colour each symbol
    with a diverging map centred on 0; under each record a thin second track
    shows the selection's hypothesis signal, aligned symbol by symbol.

    Parameters
    ----------
    models : Model, list or mapping
        Models named by selections' ``mid``.
    records : sequence
        Records to show (strings, token lists).
    hypotheses : list, optional
        Hypotheses and families; the selection's ``hid`` picks the second track.
    selection : dict, optional
        ``{mid, layer, unit, uid, hid}``; usually linked to a score table's.
    page_size : int
        Records per page.
    symbols : callable, optional
        ``record -> list of display strings``, one per symbol.
    device : str
        Device for the forward passes (default CPU, leaving an accelerator to runs).
    features : feature set or list, optional
        Feature sets (``dl.features``) whose latents a selection may name (its ``layer``
        ``"{hook}:{name}"``, as score frames name latents): each symbol is coloured by
        the latent's activation, encoded from the hook.

    Attributes
    ----------
    pinned : list of dict
        Units kept beside the selection (the pin button adds the selection).
    data : polars.DataFrame
        The page in long form: ``record, position, symbol, key, activation, signal``.
    """

    _esm = esm("text_overlay")
    page_size = traitlets.Int(20).tag(sync=True)
    pinned = traitlets.List().tag(sync=True)
    _order = traitlets.Unicode("index").tag(sync=True)
    _page_index = traitlets.Int(0).tag(sync=True)
    _browser_sets = (*PagedOverlay._browser_sets, "pinned")
    _layout = traitlets.Dict().tag(sync=True)
    _values = traitlets.Bytes(b"").tag(sync=True)
    _signals = traitlets.Bytes(b"").tag(sync=True)

    def __init__(
        self,
        models: Any,
        records: Sequence[Any],
        hypotheses: Any = None,
        selection: Any = None,
        page_size: int = 20,
        symbols: Callable[[Any], list[str]] | None = None,
        device: str = "cpu",
        features: Any = None,
        **kwargs: Any,
    ) -> None:
        self._symbols = symbols or default_symbols
        super().__init__(
            models, records, hypotheses, selection, page_size, device, ("pinned",), features,
            **kwargs,
        )
        self.on_msg(self._on_message)

    @property
    def units(self) -> list[dict[str, Any]]:
        """The shown units: the selection first, then the pinned ones (no duplicates)."""
        out, seen = [], set()
        for u in [self.selection, *self.pinned]:
            key = selection_key(u)
            if unit_ready(u) and key not in seen:
                seen.add(key)
                out.append(dict(u))
        return out

    def pin(self, unit: Any = None) -> None:
        """Keep ``unit`` (default: the selection) on screen when the selection moves on."""
        u = as_selection(unit) if unit is not None else dict(self.selection)
        if unit_ready(u) and selection_key(u) not in {selection_key(p) for p in self.pinned}:
            self.pinned = [*self.pinned, u]

    def step_unit(self, delta: int) -> dict[str, Any]:
        """Select the unit ``delta`` places away in the selected unit's layer (same model
        and hypothesis); what the overlay's "‹ unit" and "unit ›" buttons do."""
        sel = dict(self.selection)
        if not unit_ready(sel):
            return sel
        width = self.source.width(sel["mid"], sel["layer"])
        unit = int(sel["unit"]) + int(delta)
        if 0 <= unit < width:  # uids are consecutive within a layer (resolve_units)
            self.selection = {**sel, "unit": unit, "uid": int(sel["uid"]) + int(delta)}
        return dict(self.selection)

    def _on_message(self, _w: Any, content: dict[str, Any], _b: list) -> None:
        if content.get("type") == "step":
            self.step_unit(int(content.get("delta", 0)))

    def _describe(self) -> str:
        lay = self._layout
        return (
            f"{counted(len(self.source.records), 'record')}, {counted(len(self.units), 'unit')}, "
            f"page {lay.get('page', 0) + 1}/{lay.get('n_pages', 1)}, order {self._order}"
        )

    def snapshot_html(self) -> str:
        """The visible page as coloured text (the selected unit's behavior), as the panel
        draws it, instead of the long table of :attr:`data`."""
        from ._base import snapshot
        from ._static import coloured_records

        n = int(self._layout.get("n_symbols", 0))
        values = np.frombuffer(self._values, np.float32)[:n] if self._values else np.zeros(n)
        head = snapshot("TextOverlay", self._describe(), None)
        body = coloured_records(self._layout, values)
        return head.replace("</div></div>", f"</div>{body}</div>", 1)

    # -- computing a page ---------------------------------------------------------
    def _compute(self) -> None:
        units = self.units
        idx, page, pages, n_records = self._page_of(units[0] if units else None)
        recs = [self.source.records[i] for i in idx]
        syms = [self._symbols(r) for r in recs]
        lengths = [len(s) for s in syms]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
        total = int(offsets[-1])
        values = np.zeros((len(units), total), np.float32)
        signals = np.full((len(units), total), np.nan, np.float32)
        meta, frames = [], []
        for u, sel in enumerate(units):
            acts = self.source.activations(sel, idx)
            model = self.source.model(sel["mid"])
            sig = self.source.signal(sel.get("hid"), idx, model)
            for r, a in enumerate(acts):
                n = min(len(a), lengths[r])
                values[u, offsets[r] : offsets[r] + n] = a[:n]
                if sig:
                    signals[u, offsets[r] : offsets[r] + n] = sig[r][:n]
            scale, scope = self._scale(sel, values[u])
            meta.append(_unit_meta(sel, scale, scope, signals[u] if sig else None))
            frames.append(_long(idx, syms, values[u], signals[u], selection_key(sel)))
        self._data = pl.concat(frames) if frames else pl.DataFrame()
        with self.hold_sync():  # one message: the browser draws once, with matching arrays
            self._values = values.tobytes()
            self._signals = signals.tobytes()
            self._set_layout(idx, syms, offsets, total, meta, page, pages, n_records)

    def _set_layout(
        self,
        idx: list[int],
        syms: list[list[str]],
        offsets: np.ndarray,
        total: int,
        meta: list[dict[str, Any]],
        page: int,
        pages: int,
        n_records: int,
    ) -> None:
        self._layout = {
            "records": [
                {"index": int(i), "symbols": s, "offset": int(o)}
                for i, s, o in zip(idx, syms, offsets[:-1], strict=True)
            ],
            "n_symbols": total,
            "units": meta,
            "page": page,
            "n_pages": pages,
            "n_records": n_records,
            "order": self._order,
            "sent_at": time.time() * 1000.0,
            "error": "",
        }

    def _scale(self, sel: dict[str, Any], page_values: np.ndarray) -> tuple[float, str]:
        """Colour scale ±max|behavior|: over all records once they were scanned for
        ordering (stable across pages), else over the page."""
        key = (sel["mid"], sel["layer"], int(sel["unit"]))
        pk = self.source._peaks.get(key)
        if pk is not None and np.isfinite(pk).any():
            return float(np.nanmax(np.abs(pk))) or 1.0, "all records"
        m = float(np.abs(page_values).max()) if page_values.size else 0.0
        return m or 1.0, "this page"


def _unit_meta(
    sel: dict[str, Any], scale: float, scope: str, signal: np.ndarray | None
) -> dict[str, Any]:
    label = f"{sel['mid']} {sel['layer']}[{sel['unit']}]"
    out = {
        "key": selection_key(sel),
        "label": label,
        "hid": sel.get("hid"),
        "scale": scale,
        "scale_of": scope,
        "signal": None,
    }
    if signal is not None and np.isfinite(signal).any():
        out["signal"] = [float(np.nanmin(signal)), float(np.nanmax(signal))]
    return out


def _long(idx: list[int], syms: list[list[str]], vals: np.ndarray, sig: np.ndarray, key: str):
    rec = np.repeat(np.asarray(idx, dtype=np.int64), [len(s) for s in syms])
    pos = np.concatenate([np.arange(len(s)) for s in syms]) if syms else np.zeros(0, np.int64)
    return pl.DataFrame(
        {
            "record": rec,
            "position": pos.astype(np.int64),
            "symbol": [c for s in syms for c in s],
            "key": [key] * len(rec),
            "activation": vals,
            "signal": sig,
        },
        schema={
            "record": pl.Int64,
            "position": pl.Int64,
            "symbol": pl.String,
            "key": pl.String,
            "activation": pl.Float32,
            "signal": pl.Float32,
        },
        nan_to_null=True,
    )
