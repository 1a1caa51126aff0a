"""What every panel shares: its ES module, the stylesheet, the selection, a stable repr.

anywidget loads one self-contained ES module per widget class, so the helpers
of ``js/_common.js`` are prepended to each panel's module here rather than
imported in the browser (nothing may come from a CDN, and a module loaded from
a blob URL cannot resolve relative imports).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from itertools import pairwise
from typing import Any

import anywidget
import polars as pl
import traitlets

SELECTION_FIELDS = ("mid", "uid", "hid", "layer", "unit", "measure")


@functools.cache
def _read(name: str) -> str:
    return resources.files("dni_lab").joinpath("js", name).read_text(encoding="utf-8")


def esm(name: str) -> str:
    """The ES module of panel ``name``: the shared helpers followed by ``js/{name}.js``."""
    return _read("_common.js") + "\n" + _read(f"{name}.js")


def css() -> str:
    return _read("dni.css")


def selection_key(sel: Mapping[str, Any] | None) -> str:
    """``"mid|uid|hid"``: how panels (and ``js/_common.js: selKey``) compare selections."""
    if not sel or sel.get("mid") is None:
        return ""
    hid = sel.get("hid")
    return f"{sel['mid']}|{sel.get('uid')}|{'' if hid is None else hid}"


def as_selection(value: Any) -> dict[str, Any]:
    """A selection dict from a dict, a one-row frame, or a ``(mid, uid, hid)`` tuple."""
    if value is None:
        return {}
    if isinstance(value, pl.DataFrame):
        if value.height == 0:
            return {}
        value = value.row(0, named=True)
    if isinstance(value, (tuple, list)):
        value = dict(zip(("mid", "uid", "hid"), value, strict=False))
    out = {k: value[k] for k in SELECTION_FIELDS if k in value and value[k] is not None}
    for k in ("uid", "unit"):
        if k in out:
            out[k] = int(out[k])
    return out


class Panel(anywidget.AnyWidget):
    """Base class of the dni_lab panels.

    Attributes
    ----------
    selection : dict
        The selected ``{mid, uid, hid, layer, unit, measure}`` (a subset may be
        present); linked panels follow each other's selection.
    """

    _css = css()
    selection = traitlets.Dict().tag(sync=True)

    @traitlets.validate("selection")
    def _valid_selection(self, proposal: Any) -> dict[str, Any]:
        return as_selection(proposal["value"])

    @property
    def data(self) -> pl.DataFrame:
        """The panel's data as a Polars frame."""
        raise NotImplementedError

    def _describe(self) -> str:
        """The part of the repr after the class name; deterministic (nbval compares it)."""
        return f"{self.data.height} rows"

    def __repr__(self) -> str:
        key = selection_key(self.selection)
        sel = f", selected {key}" if key else ""
        return f"<{type(self).__name__}: {self._describe()}{sel}>"


def link_selection(*panels: Panel) -> list[traitlets.link]:
    """Make every panel follow the others' ``selection`` (two-way links, in a chain)."""
    return [traitlets.link((a, "selection"), (b, "selection")) for a, b in pairwise(panels)]
