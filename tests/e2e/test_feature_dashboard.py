"""End to end: the feature dashboard in a real JupyterLab, linked to a score table."""

from __future__ import annotations

from pathlib import Path

from .lab_harness import (
    E2E,
    chromium_page,
    jupyter_lab,
    open_notebook,
    run_cell,
    wait_idle,
    wait_output,
    write_notebook,
)

pytestmark = E2E

SETUP = """\
import sys
sys.path.insert(0, {tests!r})
import dni_lab as dl
import torch
from conftest import CharLM, encode_chars, random_records
from feature_sets import identity_set
from dni_lab.widgets import ScoreTable, link_selection
torch.manual_seed(0)
model = dl.Model(CharLM(), encode=encode_chars, name="toy")
records = random_records(80)
paren = dl.hypothesis(lambda r: [c in "()" for c in r], name="paren", kind="binary")
sae = identity_set(12, "lstm")
frame = dl.inspect(model, [paren], ["corr"], records, units=[sae], eps=None)
table = ScoreTable(frame)
dash = dl.features.dashboard(model, sae, records, hypothesis=paren, frame=frame)
_ = link_selection(table, dash)
"""
SHOW = "display(table); dash"
CHECK = 'print("LATENT", dash.summary.latent)'


def test_feature_dashboard_in_jupyterlab(tmp_path, shots):
    tests_dir = str(Path(__file__).resolve().parents[1])
    write_notebook(tmp_path / "fd.ipynb", [SETUP.format(tests=tests_dir), SHOW, CHECK])
    with jupyter_lab(tmp_path) as server, chromium_page() as page:
        try:
            open_notebook(page, server, "fd.ipynb")
            run_cell(page, 0)
            wait_idle(page, 120)
            run_cell(page, 1)
            dash = page.locator(".dni-feature-dashboard")
            dash.wait_for(timeout=60_000)
            # examples with one shaded column per symbol and the hypothesis bar under it
            page.wait_for_selector(".dni-feature-dashboard .dni-fd-cell .dni-fd-bar")
            assert dash.locator(".dni-fd-example").count() >= 2
            assert dash.locator("svg.dni-fd-density rect").count() == 20
            title = dash.locator(".dni-fd-title").inner_text()
            assert "lstm:identity · latent" in title
            dash.scroll_into_view_if_needed()
            dash.screenshot(path=str(shots / "feature_dashboard.png"))
            # selecting another latent in the score table redraws the dashboard
            rows = page.locator(".dni-table-panel tbody tr")
            rows.nth(3).click()
            page.wait_for_function(
                "t => document.querySelector('.dni-fd-title').innerText !== t", arg=title,
                timeout=30_000,
            )
            run_cell(page, 2)
            # the prompt shows the cell queued before the kernel turns busy: wait on
            # the output itself, not on an idle indicator that may not have left idle
            wait_output(page, 2, "LATENT", timeout=60)
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
            raise
