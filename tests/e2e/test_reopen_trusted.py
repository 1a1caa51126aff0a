"""A saved notebook reopened by the person who saved it shows the panels' snapshots
(issue 26, §3.2).

The notebook is trusted there, so JupyterLab and Notebook 7 choose the widget view over
the output's text/html; with the kernel gone the widget renderer would say "model not
found". The prebuilt extension (``dni_lab/labextension``, source ``labextension/``) shows
the snapshot instead, and leaves a panel whose model exists live: after a run, and after
a page reload while the kernel still runs. Reopened, it logs no error for a panel (the
widget renderer's "widget model not found" is for other widgets only), and a snapshot's
table sits under its title as in an untrusted notebook (issue 36, 6).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

import pytest

from .lab_harness import (
    E2E,
    chromium_page,
    jupyter_lab,
    open_notebook,
    run_cell,
    wait_idle,
    write_notebook,
)

pytestmark = E2E
REPO = Path(__file__).resolve().parents[2]
SETUP = """\
import sys
sys.path.insert(0, {tests!r})
import dni_lab as dl
from conftest import CharLM, encode_chars, random_records
import torch
torch.manual_seed(0)
cat = dl.Catalog.default()
cat.add_model(dl.Model(CharLM(), encode=encode_chars, name="toy"))
cat.add_inputs(random_records(64), "texts")

@dl.hypothesis(name="paren")
def paren(r):
    return [c in "()" for c in r]

cat.add_hypothesis(paren)
%load_ext dni_lab
"""
QUERY = """\
%%inspect --wait -o fin --eps none
SELECT S.uid, S.unit_score
INSPECT U.uid AND H.h USING corr OVER D.seq AS S
FROM models M, units U, hypotheses H, inputs D
WHERE U.layer = 'lstm' AND H.name = 'paren'
"""
# another library's widget: its renderer behaves as without the extension
SLIDER = "import ipywidgets\nipywidgets.IntSlider(value=3)"
LAB = "from dni_lab.widgets import Lab\nLab(fin)"
PANELS = (1, 3)  # the cells whose output is a dni_lab panel
# the extension has found that the panels' models are gone (the kernel that held them)
GONE = """(n) => document.querySelectorAll(".dni-snapshot-or-widget[data-widget='gone']")
  .length === n"""
# each snapshot table's left edge against its title's (a table centred by JupyterLab's
# .jp-RenderedHTMLCommon rule sat far right of its title)
TABLE_OFFSETS = """() => [...document.querySelectorAll('.jp-Notebook .dni-snapshot')]
  .filter((s) => s.querySelector('table'))
  .map((s) => s.querySelector('table').getBoundingClientRect().left
    - s.querySelector('b').getBoundingClientRect().left)"""


@pytest.mark.parametrize("app", ["jupyterlab", "notebook"])
def test_reopened_trusted_notebook_shows_snapshots(tmp_path, shots, app, monkeypatch):
    # this tree's build, not the one an install put in the environment's share/jupyter
    # (in a virtual environment Jupyter prefers that one otherwise)
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    shutil.copytree(REPO / "dni_lab" / "labextension",
                    tmp_path / ".jupyter-home" / "data" / "labextensions" / "dni-lab-inspect-sql")
    tests_dir = str(REPO / "tests")
    cells = [SETUP.format(tests=tests_dir), QUERY, SLIDER, LAB]
    nb = write_notebook(tmp_path / "saved.ipynb", cells)
    suffix = "" if app == "jupyterlab" else "_nb7"
    with jupyter_lab(tmp_path, app=app) as server, chromium_page() as page:
        try:
            open_notebook(page, server, nb.name)
            run_cell(page, 0)
            wait_idle(page)
            run_cell(page, 1)
            wait_idle(page, 120)
            run_cell(page, 2)
            wait_idle(page)
            run_cell(page, 3)
            wait_idle(page)
            _assert_live(page)
            _save(page, nb)

            # a reload while the kernel runs: the panel comes back as a widget
            open_notebook(page, server, nb.name)
            _assert_live(page)

            # the kernel gone, the same (trusted) notebook reopened: the snapshot shows
            _shutdown_kernels(server)
            page.goto("about:blank")
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            open_notebook(page, server, nb.name)
            snapshot = page.locator(".jp-Notebook .dni-snapshot").first
            snapshot.wait_for(state="visible", timeout=30_000)
            page.wait_for_function(GONE, arg=len(PANELS), timeout=60_000)
            assert snapshot.is_visible()
            assert "done" in snapshot.inner_text()
            assert page.locator(".jp-Notebook .dni-table-panel").count() == 0
            text = _cell(page, 1).inner_text()
            assert "model not found" not in text and "Error displaying widget" not in text
            # the slider has no snapshot: the widget renderer's own message, as before
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .jp-Cell')[2]"
                ".innerText.includes('model not found')", timeout=30_000)
            # the slider's renderer logs that once; the two panels log nothing
            assert len(errors) == 1 and "widget model not found" in errors[0], errors
            offsets = page.evaluate(TABLE_OFFSETS)
            assert len(offsets) == 2 and all(abs(x) <= 1 for x in offsets), offsets
            page.screenshot(path=str(shots / f"reopened_trusted{suffix}.png"))
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
            raise


def _cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def _assert_live(page) -> None:
    """Cells 1 and 3 show live table widgets, and no snapshot beside them; cell 2 its slider."""
    _cell(page, 2).locator(".widget-slider").first.wait_for(timeout=30_000)
    for i in PANELS:
        cell = _cell(page, i)
        cell.locator(".dni-table-panel tbody tr").first.wait_for(timeout=60_000)
        assert cell.locator(".dni-table-panel").is_visible()
    page.wait_for_function(
        "() => !document.querySelector('.jp-Notebook .dni-snapshot')", timeout=10_000
    )


def _save(page, nb: Path, timeout: float = 30.0) -> None:
    """Ctrl+S until the file on disk holds the panels' final snapshots beside their widgets."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.keyboard.press("Control+s")
        pressed = time.monotonic()
        while time.monotonic() < min(pressed + 5, deadline):
            if _saved(nb):
                return
            time.sleep(0.25)
    raise AssertionError("the saved notebook holds no snapshot of a panel")


def _saved(nb: Path) -> bool:
    try:
        cells = json.loads(nb.read_text())["cells"]
        data = [[o.get("data", {}) for o in cells[i]["outputs"]] for i in PANELS]
    except (OSError, ValueError, IndexError):  # read while the server writes it
        return False
    return all(
        any(
            "dni-snapshot" in "".join(d.get("text/html", ""))
            and "application/vnd.jupyter.widget-view+json" in d
            for d in cell
        )
        for cell in data
    )


def _shutdown_kernels(server: str) -> None:
    base, token, *_app = server.split("|")
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}") as r:
        sessions = json.load(r)
    for s in sessions:
        url = f"{base}/api/sessions/{s['id']}?token={token}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE")).close()
