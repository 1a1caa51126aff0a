"""The marimo example: ``dl.query`` and an anywidget panel without IPython magics."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "notebooks" / "marimo_query.py"


def test_marimo_example_runs_every_cell():
    pytest.importorskip("marimo")
    spec = importlib.util.spec_from_file_location("marimo_query", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _outputs, defs = module.app.run()
    scores, table = defs["scores"], defs["table"]
    assert scores.columns == ["uid", "unit_score"] and scores.height == 5
    assert scores["unit_score"].abs().is_sorted(descending=True)
    from dni_lab.widgets import ScoreTable

    assert isinstance(table.widget, ScoreTable) and table.widget.frame.height == 5


def test_marimo_example_runs_as_a_script():
    pytest.importorskip("marimo")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "dl.query in marimo: 5 rows; ['uid', 'unit_score']" in out.stdout
