"""A plain score table does not pay for the charts (issue 26, §3.5).

The first ``%%inspect`` in a fresh kernel imported Altair (about 1.5 s of its 2.2-2.5 s)
only because ``dni_lab.widgets`` imported every panel. Each check runs in a fresh
interpreter, as a new kernel would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHARTING = ("altair", "vl_convert")


def imported_after(code: str, modules: tuple[str, ...] = CHARTING) -> dict[str, bool]:
    """Which of ``modules`` (the charting ones) are in ``sys.modules`` after ``code`` ran in
    a new process."""
    report = f"print(json.dumps({{m: m in sys.modules for m in {modules!r}}}))"
    probe = f"{code}\nimport json, sys\n{report}"
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_magic_and_a_score_table_do_not_import_charting():
    code = """
import polars as pl
import dni_lab, dni_lab.magic
from dni_lab.widgets import ScoreTable
frame = pl.DataFrame({"mid": ["m"] * 3, "uid": [0, 1, 2], "layer": ["lstm"] * 3,
                      "unit": [0, 1, 2], "hid": ["h"] * 3, "measure": ["corr"] * 3,
                      "unit_score": [0.1, -0.7, 0.4]})
table = ScoreTable(frame)
assert "-0.7" in table.snapshot_html()
"""
    assert imported_after(code) == dict.fromkeys(CHARTING, False)


def test_the_charts_still_import_it_when_asked():
    # the check above can fail: asking for a chart panel does import Altair
    assert imported_after("from dni_lab.widgets import Plot")["altair"] is True



def test_import_dni_lab_leaves_scipy_stats_for_the_first_rank_correlation():
    # scipy.stats costs ~0.7 s of a ~3 s `import dni_lab` (every kernel, Ray worker and CLI
    # call pays it); only attribution patching's Spearman needs it, and imports it there
    assert imported_after("import dni_lab", ("scipy.stats",)) == {"scipy.stats": False}
