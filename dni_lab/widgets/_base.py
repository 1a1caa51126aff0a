"""What every panel shares: its ES module, the stylesheet, the selection, a stable repr.

anywidget loads one self-contained ES module per widget class, so the helpers
of ``js/_common.js`` are prepended to each panel's module here rather than
imported in the browser (nothing may come from a CDN, and a module loaded from
a blob URL cannot resolve relative imports).
"""

from __future__ import annotations

import functools
import html
import threading
import uuid
from collections.abc import Mapping
from importlib import resources
from itertools import pairwise
from typing import Any

import anywidget
import polars as pl
import traitlets

from ._format import cell_text, counted

SELECTION_FIELDS = ("mid", "uid", "hid", "layer", "unit", "measure")


@functools.cache
def _read(name: str) -> str:
    return resources.files("dni_lab").joinpath("js", name).read_text(encoding="utf-8")


def esm(name: str, *parts: str) -> str:
    """The ES module of panel ``name``: the shared helpers, then ``js/{part}.js`` of each of
    ``parts`` (helpers of this panel alone), then ``js/{name}.js``."""
    return "\n".join(_read(f"{n}.js") for n in ("_common", *parts, name))


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


class Snapshots:
    """Static snapshots for a widget: ``text/html`` beside the widget view in its output.

    A saved notebook keeps a widget's output bundle, not its model: the text/html part
    is what nbconvert, GitHub and a notebook opened where the models do not exist show.
    The output is displayed under a display id, so that :meth:`refresh_snapshot` can
    replace it once the widget reaches its final state (a run that ended).
    """

    _display_id: str | None = None
    #: Seconds of quiet after a selection change before the snapshot is republished (a
    #: republished output redraws the live view, so a run of clicks gives one redraw).
    snapshot_delay = 1.0
    _snapshot_timer: threading.Timer | None = None

    def snapshot_html(self) -> str:
        raise NotImplementedError

    def _snapshot_on_selection(self, _change: Any = None) -> None:
        """Republish the snapshot once the selection has rested for :attr:`snapshot_delay`
        (for panels whose snapshot shows the selection: overlays, plots, the Lab), so a
        notebook saved after a click holds what the person saw, not the first unit."""
        if self._display_id is None:
            return  # not displayed through _ipython_display_: no output to replace
        if self._snapshot_timer is not None:
            self._snapshot_timer.cancel()
        self._snapshot_timer = threading.Timer(self.snapshot_delay, self.refresh_snapshot)
        self._snapshot_timer.daemon = True
        self._snapshot_timer.start()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # the base's own shape: (data, metadata) from anywidget, data alone from ipywidgets
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/html"] = self.snapshot_html()
        return bundle

    def _bundle(self) -> tuple[dict[str, Any], dict[str, Any]]:
        bundle = self._repr_mimebundle_()
        return bundle if isinstance(bundle, tuple) else (bundle, {})

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if self._display_id is None:
            self._display_id = uuid.uuid4().hex
        data, meta = self._bundle()
        display(data, metadata=meta, raw=True, display_id=self._display_id)
        if self._running():
            self._refresh_on_a_later_cell()

    def _running(self) -> bool:
        """Whether the widget follows something still going (its snapshot is not final)."""
        return False

    def _publish_final(self) -> None:
        """Bring the widget up to its final state and publish its snapshot (the run's own
        thread may not have shown its end yet when a later cell starts)."""
        self.refresh_snapshot()

    def _refresh_on_a_later_cell(self) -> None:
        """Publish the final snapshot again from the first cell run after the end.

        The end is published under the message of the cell that displayed the widget:
        JupyterLab applies that, but a notebook executor (nbclient: nbconvert, nbval)
        ignores messages of a cell that is over; both apply an update that comes with
        the cell now running.
        """
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return

        def hook(*_args: Any) -> None:
            if not self._running():
                shell.events.unregister("pre_run_cell", hook)
                self._publish_final()

        shell.events.register("pre_run_cell", hook)

    def refresh_snapshot(self) -> None:
        """Replace this widget's displayed bundle with its current snapshot; the live view is
        redrawn from the same model. (JupyterLab and Notebook 7 apply it until the cell
        that displayed the widget runs again.)"""
        if self._display_id is not None:
            from IPython.display import update_display

            data, meta = self._bundle()
            update_display(data, metadata=meta, raw=True, display_id=self._display_id)


class Panel(Snapshots, anywidget.AnyWidget):
    """Base class of the dni_lab panels.

    Attributes
    ----------
    selection : dict
        The selected ``{mid, uid, hid, layer, unit, measure}`` (a subset may be
        present); linked panels follow each other's selection.
    """

    _css = css()
    selection = traitlets.Dict().tag(sync=True)
    #: Traits the browser may set (``js/_common.js: setTraits`` sends ``{"type": "set"}``
    #: messages; a state sync from the browser can be held for good while a cell awaits a
    #: run, a message cannot). Anything else a message names is ignored.
    _browser_sets: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_msg(self._on_set)

    def _on_set(self, _widget: Any, content: Any, _buffers: list) -> None:
        """Set the traits of a ``set`` message, together (observers see them all set)."""
        if not isinstance(content, dict) or content.get("type") != "set":
            return
        changes = content.get("traits")
        if not isinstance(changes, dict):
            return
        with self.hold_trait_notifications():
            for name, value in changes.items():
                if name in self._browser_sets:
                    setattr(self, name, value)

    @traitlets.validate("selection")
    def _valid_selection(self, proposal: Any) -> dict[str, Any]:
        return as_selection(proposal["value"])

    @property
    def data(self) -> pl.DataFrame:
        """The panel's data as a Polars frame."""
        raise NotImplementedError

    def _describe(self) -> str:
        """The part of the repr after the class name; deterministic (nbval compares it)."""
        return counted(self.data.height, "row")

    def __repr__(self) -> str:
        key = selection_key(self.selection)
        sel = f", selected {key}" if key else ""
        return f"<{type(self).__name__}: {self._describe()}{sel}>"

    def snapshot_html(self) -> str:
        """The panel as static HTML (no script): its title, state and data as a table."""
        return snapshot(type(self).__name__, self._describe(), self.data)


_STYLE = (
    "font-family:system-ui,sans-serif;font-size:12px;border:1px solid #ddd;"
    "border-radius:4px;padding:6px;max-width:100%;overflow:auto"
)


def snapshot(
    title: str, state: str, frame: pl.DataFrame | None, rows: int = 20, note: str = ""
) -> str:
    """Static HTML of a panel: a title line, an optional note and up to ``rows`` rows."""
    head = (
        f'<div style="margin-bottom:4px"><b>{html.escape(title)}</b> '
        f'<span style="color:#777">{html.escape(state)}</span></div>'
    )
    if note:
        head += f'<div style="color:#555;margin-bottom:4px">{html.escape(note)}</div>'
    body = ""
    if frame is not None and frame.width:
        shown = frame.head(rows)
        th = "".join(
            f'<th style="text-align:left;padding:1px 6px">{html.escape(c)}</th>'
            for c in shown.columns
        )
        trs = "".join(
            "<tr>" + "".join(f'<td style="padding:1px 6px">{html.escape(cell_text(v))}</td>'
                             for v in r) + "</tr>"
            for r in shown.iter_rows()
        )
        more = frame.height - shown.height
        tail = f'<div style="color:#777">… {counted(more, "more row")}</div>' if more > 0 else ""
        body = f'<table style="border-collapse:collapse"><tr>{th}</tr>{trs}</table>{tail}'
    return f'<div class="dni-snapshot" style="{_STYLE}">{head}{body}</div>'


def link_selection(*panels: Panel) -> list[traitlets.link]:
    """Make every panel follow the others' ``selection`` (two-way links, in a chain)."""
    return [traitlets.link((a, "selection"), (b, "selection")) for a, b in pairwise(panels)]
