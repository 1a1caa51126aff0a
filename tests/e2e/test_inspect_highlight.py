"""``%%inspect`` cells are highlighted as SQL, not Python (issue 26, §3.6; issue 36, §6).

The prebuilt extension in ``dni_lab/labextension`` (source: ``labextension/``) is what the
wheel installs into ``share/jupyter/labextensions``; here the server finds it in its own
data directory. In a ``%%inspect`` cell SELECT, FROM and WHERE take the colour of a keyword
(Python's ``import`` in the next cell), and so do dni_lab's own keywords (INSPECT, USING,
OVER, FDR: the parser's list); the options line is the magic's, not SQL: ``--eps none`` is
an option and its value, not a comment (``-- why`` on a later line is one). In a Python
cell ``SELECT`` stays a plain name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .lab_harness import E2E, chromium_page, jupyter_lab, open_notebook, write_notebook

pytestmark = E2E
REPO = Path(__file__).resolve().parents[2]
CELLS = ["%%inspect -o res --eps none\nSELECT S.uid -- why\n"
         "INSPECT U.uid AND H.h USING corr OVER D.seq AS S\n"
         "FROM units U WHERE U.layer = 'lstm' WITH FDR 0.05",
         "import os\nSELECT = 1"]
# each cell's highlighted tokens and their colours
TOKENS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell .cm-content')].map((c) =>
  Object.fromEntries([...c.querySelectorAll('span')].map((s) =>
    [s.textContent, getComputedStyle(s).color])))"""


@pytest.mark.parametrize("app", ["jupyterlab", "notebook"])
def test_an_inspect_cell_is_highlighted_as_sql(tmp_path, app, monkeypatch):
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")  # this tree's build, not share/jupyter's
    shutil.copytree(REPO / "dni_lab" / "labextension",
                    tmp_path / ".jupyter-home" / "data" / "labextensions" / "dni-lab-inspect-sql")
    write_notebook(tmp_path / "sql.ipynb", CELLS)
    with jupyter_lab(tmp_path, app=app) as server, chromium_page() as page:
        open_notebook(page, server, "sql.ipynb")
        # both editors drawn and highlighted (the SQL language loads after the editor)
        ready = "() => { const t = (" + TOKENS + ")(); " \
                "return t.length === 2 && 'SELECT' in t[0] && 'import' in t[1]; }"
        page.wait_for_function(ready, timeout=30_000)
        inspect_cell, python_cell = page.evaluate(TOKENS)
    keyword = python_cell["import"]
    for word in ("SELECT", "FROM", "WHERE", "INSPECT", "USING", "OVER", "FDR"):
        assert inspect_cell[word] == keyword, word
    assert "SELECT" not in python_cell  # a Python name: not a keyword there
    comment = inspect_cell["-- why"]  # a comment in the query stays one
    # the options line: the magic, each flag and each value in their own colours
    assert "--eps none" not in inspect_cell
    magic, flag, value = inspect_cell["%%inspect"], inspect_cell["--eps"], inspect_cell["none"]
    assert inspect_cell["-o"] == flag and inspect_cell["res"] == value
    assert len({magic, flag, value, keyword, comment}) == 5, inspect_cell
