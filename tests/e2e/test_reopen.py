"""A saved notebook reopened after its kernel is gone shows its panels (issue 26, §3.2).

Reopened by the person who saved it (a trusted notebook), JupyterLab and Notebook 7 prefer
the widget to the static snapshot and, with no model to draw, said "model not found" for
every panel. dni_lab installs a settings override (``overrides.d/dni_lab.json`` in
``share/jupyter/lab/settings``, see pyproject.toml) that saves the widget state with the
notebook, so the panels are redrawn as saved. The server here reads the package's
override file from a settings directory of its own (the environment's is not reinstalled
for a test).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from .lab_harness import (
    CHROMIUM,
    chromium_page,
    jupyter_lab,
    open_notebook,
    run_cell,
    write_notebook,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]
REPO = Path(__file__).resolve().parents[2]
CELL = """\
import polars as pl
from dni_lab.widgets import ScoreTable
ScoreTable(pl.DataFrame({"mid": ["m"] * 3, "uid": [0, 1, 2], "layer": ["l"] * 3,
                         "unit": [0, 1, 2], "hid": ["h"] * 3, "measure": ["corr"] * 3,
                         "unit_score": [0.1, -0.7, 0.4]}))
"""


@pytest.mark.parametrize("app", ["jupyterlab", "notebook"])
def test_a_reopened_notebook_redraws_its_panels(tmp_path, app):
    settings = tmp_path / "app-settings"
    (settings / "overrides.d").mkdir(parents=True)
    shutil.copy(REPO / "jupyter-config" / "dni_lab-overrides.json",
                settings / "overrides.d" / "dni_lab.json")
    nb = write_notebook(tmp_path / "saved.ipynb", [CELL])
    with jupyter_lab(tmp_path, app=app, app_settings=settings) as server, \
            chromium_page() as page:
        open_notebook(page, server, nb.name)
        run_cell(page, 0)
        page.locator(".dni-table-panel").first.wait_for(timeout=60_000)
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while "widgets" not in json.loads(nb.read_text()).get("metadata", {}):
            assert time.monotonic() < deadline, "the widget state was not saved"
            time.sleep(0.2)
        base, token, *_ = server.split("|")
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}") as r:
            for s in json.load(r):  # the kernel goes: no model exists any more
                url = f"{base}/api/sessions/{s['id']}?token={token}"
                urllib.request.urlopen(urllib.request.Request(url, method="DELETE")).close()
        page.goto("about:blank")
        open_notebook(page, server, nb.name, reset=True)
        table = page.locator(".dni-table-panel").first
        table.wait_for(timeout=30_000)  # drawn from the saved state
        assert "-0.700" in table.inner_text()
        assert "model not found" not in page.locator(".jp-Notebook").inner_text()
