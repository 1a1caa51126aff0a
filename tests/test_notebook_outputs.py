"""The committed notebooks render anywhere, offline (issue 36, target 2).

A widget output is a bundle: the widget view (useless without its kernel) and the panel's
``text/html`` snapshot. nbconvert (so the docs site) and GitHub show the snapshot unless
the notebook stores its widgets' state in ``metadata.widgets``; then they render the state
through ``@jupyter-widgets/html-manager`` fetched from a CDN, and a dni_lab panel, whose
module that manager cannot load, shows nothing. So: no notebook stores widget state, every
widget output carries a snapshot, and each stored snapshot has the markup that the panel
makes today (a stale one, such as the text overlay's old table, fails here). Refresh a
notebook's outputs with ``notebooks/refresh_outputs.py``.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.widgets import ImageOverlay, Plot, ScoreTable, TextOverlay

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def outputs(path: Path):
    """``(cell index, output)`` of every output of the notebook at ``path``."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            yield i, out


def text(value) -> str:
    return "".join(value) if isinstance(value, list) else value or ""


class Skeleton(HTMLParser):
    """The markup of each panel snapshot (``div.dni-snapshot``) in a piece of HTML, text
    and values aside: its title and the set of ``(tag, class, style properties)`` in it."""

    def __init__(self) -> None:
        super().__init__()
        self.panels: list[tuple[str, set[tuple[str, str, frozenset[str]]]]] = []
        self._depth = 0  # open elements inside the current snapshot (0: outside one)
        self._title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if not self._depth and "dni-snapshot" in (a.get("class") or "").split():
            self.panels.append(("", set()))
        elif not self._depth:
            return
        props = frozenset(
            p.split(":")[0].strip() for p in (a.get("style") or "").split(";") if ":" in p
        )
        self.panels[-1][1].add((tag, a.get("class") or "", props))
        self._title = tag == "b" and not self.panels[-1][0]
        if tag not in ("img", "br"):  # void elements close themselves
            self._depth += 1

    def handle_endtag(self, tag):
        if self._depth and tag not in ("img", "br"):
            self._depth -= 1
        self._title = False

    def handle_data(self, data):
        if self._title:
            self.panels[-1] = (data, self.panels[-1][1])


def skeletons(html: str) -> list[tuple[str, set]]:
    parser = Skeleton()
    parser.feed(html)
    return parser.panels


def fresh_html(char_model, records, hyps) -> list[str]:
    """Today's snapshots of each panel a notebook may hold, in each of their states."""
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"mid": "toy", "uid": np.arange(30), "layer": "lstm",
                          "unit": np.arange(30), "hid": "paren", "measure": "corr",
                          "unit_score": rng.uniform(-1, 1, 30), "n": [None, *range(29)]})
    table = ScoreTable(frame, page_size=10)
    noted = ScoreTable(frame)
    noted.note = "a note under the header"
    sel = {"mid": "toy", "layer": "lstm", "unit": 2, "uid": 2, "hid": "paren"}
    cnn = dl.Model(nn.Sequential(nn.Conv2d(1, 2, 3, padding=1)), name="cnn")
    imgs = [rng.normal(size=(1, 6, 6)).astype(np.float32) for _ in range(3)]
    torch.manual_seed(0)
    return [
        table.snapshot_html(),
        noted.snapshot_html(),
        TextOverlay(char_model, records[:4], hyps, selection=sel, page_size=2).snapshot_html(),
        TextOverlay(char_model, records[:4], hyps, page_size=2).snapshot_html(),
        ImageOverlay(cnn, imgs, selection={"mid": "cnn", "uid": 0, "layer": "0", "unit": 1},
                     page_size=2).snapshot_html(),
        Plot("sorted", frame).snapshot_html(),
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_stores_widget_state(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in nb["metadata"], (
        f"{path.name} stores widget state (metadata.widgets): the docs site would fetch a "
        "widget manager from a CDN; run notebooks/refresh_outputs.py on it"
    )
    stored = [i for i, out in outputs(path) if WIDGET_STATE in out.get("data", {})]
    assert stored == [], f"{path.name}: cells {stored} store widget state in an output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_widget_output_carries_a_snapshot(path):
    bare = [i for i, out in outputs(path)
            if WIDGET_VIEW in out.get("data", {}) and not text(out["data"].get("text/html"))]
    assert bare == [], f"{path.name}: the widget outputs of cells {bare} have no text/html"


def test_stored_snapshots_have_the_current_markup(char_model, records, hyps):
    today: dict[str, set] = {}
    for html in fresh_html(char_model, records, hyps):
        for title, marks in skeletons(html):
            today.setdefault(title, set()).update(marks)
    assert {"Scores", "TextOverlay", "ImageOverlay", "Plot"} <= set(today)
    checked, stale = 0, []
    for path in NOTEBOOKS:
        for i, out in outputs(path):
            if WIDGET_VIEW not in out.get("data", {}):
                continue
            panels = skeletons(text(out["data"].get("text/html")))
            assert panels, f"{path.name} cell {i}: a widget output without a panel snapshot"
            for title, marks in panels:
                assert title in today, f"{path.name} cell {i}: no fresh {title} to compare with"
                if extra := marks - today[title]:
                    stale.append(f"{path.name} cell {i} {title}: {sorted(extra)[:3]}")
                checked += 1
    assert stale == [], "stale snapshots (refresh with notebooks/refresh_outputs.py): " + (
        "; ".join(stale))
    assert checked >= 5, "fewer stored snapshots than the notebooks hold"


def test_an_old_text_overlay_snapshot_is_stale(char_model, records, hyps):
    """The check above catches the old format: the text overlay as a table of symbols."""
    sel = {"mid": "toy", "layer": "lstm", "unit": 2, "uid": 2, "hid": "paren"}
    ov = TextOverlay(char_model, records[:4], hyps, selection=sel, page_size=2)
    from dni_lab.widgets._base import snapshot

    old = snapshot("TextOverlay", ov._describe(), ov.data)
    (title, marks), = skeletons(old)
    (_, now), = skeletons(ov.snapshot_html())
    assert title == "TextOverlay" and {m[0] for m in marks - now} >= {"table", "th", "td"}
