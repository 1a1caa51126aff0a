"""The documentation's generated figures match their sources, and the check can fail.

``benchmarks/figures.py`` copies each ``<!-- fig:NAME -->…<!-- /fig -->`` fragment from its
source (a results file, or a notebook's stored ``figures: {json}`` line, whose headline
the notebook's regression check asserts within a tolerance on every run). Here: every
page is up to date, every registered figure is used, and changing any figure on a page,
or any source value, is caught.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks/ is not an installed package

from benchmarks import figures as fg  # noqa: E402
from benchmarks.figure_list import FIGURES  # noqa: E402


def _fragments() -> list[tuple[Path, re.Match]]:
    return [(page, m) for page in fg.pages() for m in fg.FRAGMENT.finditer(page.read_text())]


def _mutate(shown: str) -> str:
    """``shown`` with its last digit changed (9 -> 0, else +1), the sign and layout kept."""
    i = max(i for i, c in enumerate(shown) if c.isdigit())
    return shown[:i] + str((int(shown[i]) + 1) % 10) + shown[i + 1 :]


@pytest.mark.parametrize("page", fg.pages(), ids=lambda p: p.name)
def test_every_fragment_is_its_source(page):
    stale = fg.differences(page.read_text(encoding="utf-8"))
    assert stale == [], "run: python benchmarks/figures.py"


def test_every_registered_figure_is_shown_and_every_page_figure_registered():
    used = {m[1] for _, m in _fragments()}
    assert used == set(FIGURES), (sorted(set(FIGURES) - used), sorted(used - set(FIGURES)))


def test_a_changed_figure_on_a_page_fails():
    """Each sourced figure in the docs, changed by one digit in memory, is reported."""
    found = _fragments()
    assert len(found) >= 100
    for page, m in found:
        text = page.read_text(encoding="utf-8")
        edited = text[: m.start(2)] + _mutate(m[2]) + text[m.end(2) :]
        problems = fg.differences(edited)
        assert any(f"fig:{m[1]} reads" in p for p in problems), (page.name, m[1])


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_changed_source_value_fails(name, monkeypatch):
    """The stored value changed (a results file rewritten, a notebook re-run): the page is stale."""
    source = FIGURES[name]
    value = source.value()
    changed = -value - 1 if isinstance(value, int) else round(value + 0.11, 6)
    stored = type(source).value
    monkeypatch.setattr(
        type(source), "value", lambda s, *a: changed if s == source else stored(s, *a)
    )
    page = next(p for p, m in _fragments() if m[1] == name)
    assert any(f"fig:{name} reads" in p for p in fg.differences(page.read_text()))


def test_a_fragment_without_a_source_or_a_stored_value_fails():
    assert fg.differences("<!-- fig:nb99.nothing -->1<!-- /fig -->")
    missing = {"x": fg.Notebook("10_transformers", "no_such_key")}
    assert "is not stored" in fg.differences("<!-- fig:x -->1<!-- /fig -->", missing)[0]
    absent = {"x": fg.Result("no_such_file", "a.b")}
    assert "is not stored" in fg.differences("<!-- fig:x -->1<!-- /fig -->", absent)[0]


def test_the_notebook_figures_are_printed_once(tmp_path, monkeypatch):
    cell = {"outputs": [{"text": ['figures: {"a": 1}\n']}]}
    nb = json.dumps({"cells": [cell, cell]})
    (tmp_path / "x.ipynb").write_text(nb)
    # the notebooks directory lives with the figures' sources, in figure_list
    monkeypatch.setattr(sys.modules["benchmarks.figure_list"], "NOTEBOOKS", tmp_path)
    fg.notebook_figures.cache_clear()
    with pytest.raises(KeyError, match="printed twice"):
        fg.notebook_figures("x")
    fg.notebook_figures.cache_clear()
