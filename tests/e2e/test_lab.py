"""End to end: a live inspection in a real JupyterLab, driven through Debian's Chromium."""

from __future__ import annotations

import re
import time
from pathlib import Path

from .lab_harness import (
    E2E,
    cell_output,
    chromium_page,
    jupyter_lab,
    open_notebook,
    run_cell,
    wait_idle,
    write_notebook,
)

pytestmark = E2E

SETUP = """\
import sys, time
sys.path.insert(0, {tests!r})
import dni_lab as dl
from conftest import CharLM, encode_chars, random_records
from dni_lab.widgets import Lab
import torch
torch.manual_seed(0)
model = dl.Model(CharLM(), encode=encode_chars, name="toy")
records = random_records(6000)

@dl.hypothesis
def paren(r):
    # slow enough that a person sees the run stream block by block, and that the run (30 s
    # of sleeps alone) is still going when the test presses Stop after its UI checks
    time.sleep(0.005)
    return [c in "()" for c in r]

@dl.hypothesis(kind="continuous")
def position(r):
    return list(range(len(r)))

run = dl.inspect(models=[model], hypotheses=[paren, position], data=records,
                 units=[("lstm", "*")], eps=None, block_size=48, background=True, cache=False)
"""
SHOW = "lab = Lab(run, plot_interval=2.0)\nlab"
CHECK = (
    'print("FRAME", lab.data.shape, "cancelled", run.progress.cancelled, '
    '"sel", lab.overlay.selection.get("uid"), "rows", lab.table.data.height)'
)


def test_live_inspection_in_jupyterlab(tmp_path, shots):
    tests_dir = str(Path(__file__).resolve().parents[1])
    write_notebook(tmp_path / "live.ipynb", [SETUP.format(tests=tests_dir), SHOW, CHECK])
    with jupyter_lab(tmp_path) as server, chromium_page() as page:
        try:
            _drive(page, server, shots)
        except BaseException:
            path = tmp_path / "failure.png"
            page.screenshot(path=str(path), full_page=True)
            print(f"screenshot of the failure: {path}")
            raise


def _drive(page, server: str, shots: Path) -> None:
    open_notebook(page, server, "live.ipynb")
    run_cell(page, 0)
    run_cell(page, 1)
    table = page.locator(".dni-table-panel")
    table.wait_for(timeout=60_000)

    # rows arrive while the run is still going
    page.wait_for_selector(".dni-table-panel tbody tr", timeout=60_000)
    state = table.locator(".dni-state")
    assert state.get_attribute("data-state") == "running", state.inner_text()
    first = _records_read(page)
    page.wait_for_function(
        "n => { const t = document.querySelector('.dni-progress-text');"
        " return t && parseInt(t.textContent.replace(/,/g, '')) > n; }",
        arg=first,
        timeout=30_000,
    )
    assert state.get_attribute("data-state") == "running"

    # a click on a row selects its unit: the overlay shows it
    overlay = page.locator(".dni-text-overlay")
    assert overlay.locator(".dni-empty").count() == 1
    rows = table.locator("tbody tr")
    key0 = rows.nth(0).get_attribute("data-key")
    rows.nth(0).click()
    page.wait_for_selector(f".dni-text-overlay .dni-unit-col[data-key='{key0}']", timeout=30_000)
    spans0 = overlay.locator(".dni-seq span").count()
    assert spans0 > 0
    key3 = rows.nth(3).get_attribute("data-key")
    rows.nth(3).click()
    page.wait_for_selector(f".dni-text-overlay .dni-unit-col[data-key='{key3}']", timeout=30_000)
    assert page.locator(f".dni-table-panel tr.dni-selected[data-key='{key3}']").count() == 1
    # the plots follow: the heatmap outlines the selected unit's cell
    page.wait_for_selector(".dni-plot a.dni-sel", timeout=30_000)
    page.wait_for_timeout(300)
    page.screenshot(path=str(shots / "dashboard.png"), full_page=True)
    page.locator(".dni-plot").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "plots.png"))

    # sorting a column, in Python, comes back as a sorted page
    table.locator("th[data-col='unit_score']").click()
    page.wait_for_selector("th[data-col='unit_score']:has-text('▼')", timeout=15_000)
    page.wait_for_function(
        """() => {
          const th = [...document.querySelectorAll('.dni-table-panel th')];
          const j = th.findIndex(t => t.dataset.col === 'unit_score');
          const v = [...document.querySelectorAll('.dni-table-panel tbody tr')]
            .map(tr => parseFloat(tr.children[j].textContent)).filter(x => !isNaN(x));
          return v.length > 1 && v.every((x, i) => i === 0 || v[i - 1] >= x);
        }""",
        timeout=15_000,
    )

    # Stop: the run ends early, cancelled
    table.locator("button.dni-stop").click()
    page.wait_for_selector(".dni-table-panel .dni-state[data-state='cancelled']", timeout=60_000)
    assert _records_read(page) < 6000

    # the frame is back in the kernel
    wait_idle(page)
    run_cell(page, 2)
    deadline = time.monotonic() + 30
    out = ""
    while time.monotonic() < deadline and "FRAME" not in out:
        time.sleep(0.3)
        out = cell_output(page, 2)
    m = re.search(r"FRAME \((\d+), (\d+)\) cancelled (\w+) sel (\d+) rows (\d+)", out)
    assert m, out
    assert int(m[1]) == 24 and m[3] == "True" and int(m[5]) == 24
    assert key3.split("|")[1] == m[4]


def _records_read(page) -> int:
    text = page.locator(".dni-progress-text").inner_text()
    return int(text.split(" ")[0].replace(",", ""))


VEGA = """\
import sys
sys.path.insert(0, {tests!r})
import dni_lab as dl
from conftest import CharLM, encode_chars, random_records
from dni_lab.widgets import Lab
import torch
torch.manual_seed(0)
model = dl.Model(CharLM(), encode=encode_chars, name="toy")
records = random_records(300)
paren = dl.hypothesis(lambda r: [c in "()" for c in r], name="paren")
frame = dl.inspect(models=[model], hypotheses=[paren], data=records, units=[("lstm", "*")],
                   eps=None, cache=False)
lab = Lab(frame, models=[model], records=records, hypotheses=[paren], charts="vega")
lab
"""


# each Vega chart's panel box, its drawing and its legend titles, as laid out
_VEGA_BOXES = """() => [...document.querySelectorAll('.vega-embed')].map((e) => {
  const box = e.closest('.lm-Widget'), b = box.getBoundingClientRect();
  const s = e.querySelector('svg').getBoundingClientRect();
  const titles = [...e.querySelectorAll('.role-legend-title')];
  return {width: box.clientWidth, scroll: box.scrollWidth, right: b.right, height: b.height,
          svg_right: s.right, svg_height: s.height,
          legend_right: titles.map((t) => t.getBoundingClientRect().right)};
})"""


def test_vega_charts_offline_and_a_click_selects(tmp_path, shots):
    """Altair's JupyterChart, bundled offline: the page requests nothing from elsewhere, the
    chart has tooltips and a click on a point selects the unit in the table."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    write_notebook(tmp_path / "vega.ipynb", [VEGA.format(tests=tests_dir)])
    with jupyter_lab(tmp_path) as server, chromium_page() as page:
        outside = []
        base = server.split("|")[0]
        page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:"))
                else outside.append(r.url))  # fmt: skip
        try:
            open_notebook(page, server, "vega.ipynb")
            run_cell(page, 0)
            point = page.locator(".vega-embed .mark-symbol path").first
            point.wait_for(timeout=90_000)
            assert page.locator(".dni-table-panel tr.dni-selected").count() == 0
            point.click()
            page.wait_for_selector(".dni-table-panel tr.dni-selected", timeout=15_000)
            point.hover()
            page.wait_for_selector("#vg-tooltip-element.visible", timeout=10_000)
            page.locator(".vega-embed").first.scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "vega_charts.png"))
            # a narrow notebook (issue 26, 3.4): each chart fits its panel, legend included,
            # with no scrollbar, and no panel is taller than its chart
            page.keyboard.press("Escape")
            page.keyboard.press("Control+b")  # the file browser closed, as on a small screen
            page.set_viewport_size({"width": 760, "height": 900})
            page.wait_for_timeout(500)  # one layout pass after the resize
            for chart in page.evaluate(_VEGA_BOXES):
                assert chart["scroll"] <= chart["width"] + 1, chart  # no horizontal scrollbar
                assert chart["svg_right"] <= chart["right"] + 1, chart  # nothing drawn outside
                assert all(r <= chart["right"] + 1 for r in chart["legend_right"]), chart
                assert chart["height"] - chart["svg_height"] < 12, chart  # no empty area
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
            raise
        assert outside == [], outside


DEMO = """\
import sys
sys.path.insert(0, {tests!r})
import dni_lab as dl
import torch
from conftest import CharLM, encode_chars, random_records
from demo_scores import demo_scores
from dni_lab.widgets import Lab
torch.manual_seed(0)
model = dl.Model(CharLM(hidden=128, layers=1), encode=encode_chars, name="sql-lstm")
records = random_records(300, lo=30, hi=31)  # the demo's windows are 30 characters
paren = dl.hypothesis(lambda r: [c in "()" for c in r], name="paren")
frame = demo_scores()  # 128 units x 157 hypotheses, as the demo's score frame
"""
DEMO_LABS = [
    "svg_lab = Lab(frame, models=[model], records=records, hypotheses=[paren])\nsvg_lab",
    "vega_lab = Lab(frame, models=[model], records=records, hypotheses=[paren], charts='vega')\n"
    "vega_lab",
]
# Issue 36 measured 28.2 s for Vega's first draw at the demo's size; this machine measured
# 1-4 s after the fix (the test prints it). The bound is generous: the browser tests share
# a busy machine, and a regression to tens of seconds still fails.
VEGA_FIRST_DRAW_S = 12.0
_VEGA_DRAWN = """() => document.querySelectorAll('.vega-embed .mark-rect path').length >= 1200
  && document.querySelectorAll('.vega-embed .mark-symbol path').length >= 100"""
# where the overlay's records sit: the right end of each record's text, the columns used
_OVERLAY_SPREAD = """() => {
  const units = document.querySelector('.dni-text-overlay .dni-units');
  const box = units.getBoundingClientRect();
  const ends = [...units.querySelectorAll('.dni-unit-body .dni-seq')].slice(0, 30)
    .map((s) => s.lastElementChild.getBoundingClientRect());
  return {width: box.width, used: Math.max(...ends.map((r) => r.right)) - box.left,
          columns: new Set(ends.map((r) => Math.round(r.top))).size < ends.length
            ? new Set(ends.map((r) => Math.round(r.right))).size : 1};
}"""
_AXIS_TEXT = """(role) => [...document.querySelectorAll(`.dni-plot svg .${role} text`)]
  .map((t) => t.textContent)"""


def test_charts_at_the_demos_size(tmp_path, shots):
    """At the demo's size (128 units x 157 hypotheses): the SVG charts show a tooltip by the
    pointer, the heatmap names the model, layer and family once, the overlay spreads its
    30-character records over its width, and Vega's first draw takes seconds."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    write_notebook(tmp_path / "demo.ipynb", [DEMO.format(tests=tests_dir), *DEMO_LABS])
    with jupyter_lab(tmp_path) as server, chromium_page() as page:
        try:
            open_notebook(page, server, "demo.ipynb")
            run_cell(page, 0)
            wait_idle(page, 120)
            t0 = time.monotonic()
            run_cell(page, 1)
            page.wait_for_selector(".dni-plot svg .mark-rect path", timeout=60_000)
            svg_s = time.monotonic() - t0
            wait_idle(page, 60)
            # a tooltip on the default (SVG) charts: unit, hypothesis and score of the mark
            cell = page.locator(".dni-plot svg .mark-rect a path").nth(45)
            cell.hover()
            tip = page.locator(".dni-plot .dni-tooltip:visible")
            tip.wait_for(timeout=5_000)
            assert re.fullmatch(r"sql-lstm lstm\[\d+\] · sql\.\S+ · score −?\d\.\d{3}",
                                tip.inner_text()), tip.inner_text()  # fmt: skip
            # the sorted chart's points too (they overlap: the pointer is over one of them)
            page.locator(".dni-plot svg .mark-symbol a path").nth(20).hover(force=True)
            page.wait_for_function(
                "() => document.querySelector('.dni-plot .dni-tooltip:not([hidden])')"
                "?.closest('.dni-plot').querySelector('.mark-symbol')", timeout=5_000
            )
            # the heatmap's labels: unit indices and rules, the shared parts in the titles
            titles = page.evaluate(_AXIS_TEXT, "role-axis-title")
            assert "unit (sql-lstm lstm)" in titles and "hypothesis (sql.*)" in titles, titles
            labels = page.evaluate(_AXIS_TEXT, "role-axis-label")
            assert not any("sql-lstm" in t or t.startswith("sql.") for t in labels), labels
            # the overlay uses its width: a unit's records in several columns
            cell.click()
            page.wait_for_selector(".dni-text-overlay .dni-unit-body .dni-rec", timeout=30_000)
            spread = page.evaluate(_OVERLAY_SPREAD)
            assert spread["columns"] >= 2 and spread["used"] >= 0.7 * spread["width"], spread
            page.locator(".dni-text-overlay").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "overlay_width.png"))
            # Vega at the same size: the first draw, from the cell's run to every mark
            t0 = time.monotonic()
            run_cell(page, 2)
            page.wait_for_function(_VEGA_DRAWN, timeout=120_000, polling=50)
            vega_s = time.monotonic() - t0
            print(f"\nfirst draw at the demo's size: SVG {svg_s:.2f} s, Vega {vega_s:.2f} s")
            assert vega_s <= VEGA_FIRST_DRAW_S, (svg_s, vega_s)
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
            raise
