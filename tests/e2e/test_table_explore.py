"""End to end: a score table worth exploring in (issue 36, target 4), in JupyterLab.

A 10,000-row score frame, all rows in one scrolled list (``page_size=0``). Timed in the page
with ``performance.now()`` (``js/table.js: drawBody`` and ``js/table_parts.js: update``;
the times are in the panel's ``dniDraws``): each DOM update after the data arrived, from the
start of building the rows to the end of the layout the update forces. The first paint is
the panel's first such update; the scroll goes from the first row to the last, a screen at a
time, and every redraw on the way counts. The first paint and 99% of the redraws must be
<= 100 ms (one redraw of 574 took 107 ms in a CI run beside the rest of the suite: a time
slice or a collection, not the table; the max is printed). Also printed (``pytest
-s``) and written to ``table_explore.json`` beside the screenshots: how long each scroll
step took from setting the scroll position to its rows drawn (a Python round trip where
the rows were not there yet), and the whole scroll.

Then: the best unit per hypothesis one click away (one row per model, hypothesis and
measure), a histogram in the header of each numeric column, hiding a column from the
columns menu, and the live table's cells written as the snapshot writes them.
"""

from __future__ import annotations

import json
from statistics import median

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
BUDGET_MS = 100.0

SETUP = """\
import numpy as np, polars as pl
from dni_lab.widgets import ScoreTable
rng = np.random.default_rng(0)
n = 10_000
score = rng.uniform(-1, 1, n)
score[::53] = np.nan
f = pl.DataFrame({
    "mid": np.where(np.arange(n) % 2, "a", "b"), "uid": np.arange(n) + 1000,
    "layer": np.where(np.arange(n) % 3, "lstm", "embed"), "unit": np.arange(n) % 512,
    "hid": np.array(["paren", "depth", "quote", "digit", "space"])[np.arange(n) % 5],
    "measure": np.where(np.arange(n) % 4 < 2, "corr", "logreg"), "unit_score": score,
    "n_records": np.full(n, 3621), "converged": np.arange(n) % 3 == 0,
}, nan_to_null=True)
t = ScoreTable(f, page_size=0)
t
"""
SNAPSHOT = "from IPython.display import HTML\nHTML(t.snapshot_html())"
N_GROUPS = 2 * 5 * 2  # models x hypotheses x measures
NUMERIC = ("uid", "unit", "unit_score", "n_records")

PANEL = "document.querySelector('.dni-table-panel')"
# a screen at a time from the top to the last row, each step waiting for its rows
SCROLL = f"""async () => {{
  const root = {PANEL};
  const wrap = root.querySelector('.dni-table-wrap');
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const steps = [];
  const t0 = performance.now();
  root.dniDraws.length = 0;
  while (true) {{
    const before = wrap.scrollTop;
    const s0 = performance.now();
    wrap.scrollTop = before + wrap.clientHeight - 40;
    await frame(); await frame();
    const until = performance.now() + 10000;
    while (root.dataset.firstRow !== root.dataset.wantRow) {{
      if (performance.now() > until) throw new Error('rows did not come: ' + root.dataset.wantRow);
      await frame();
    }}
    steps.push(performance.now() - s0);
    if (wrap.scrollTop === before) break;  // at the end
  }}
  const last = [...root.querySelectorAll('tbody tr')].pop();
  return {{ steps, total: performance.now() - t0, draws: root.dniDraws.slice(),
           lastIndex: Number(last.dataset.index) }};
}}"""
LIVE_ROWS = f"""() => [...{PANEL}.querySelectorAll('tbody tr')].map((tr) =>
  [...tr.children].map((td) => td.textContent))"""
SNAP_ROWS = """() => [...document.querySelectorAll('.dni-snapshot table tr')].slice(1).map((tr) =>
  [...tr.children].map((td) => td.textContent))"""


def test_a_table_worth_exploring_in(tmp_path, shots):
    one = ('ScoreTable(f.filter(pl.col("mid") == "a", pl.col("layer") == "lstm", '
           'pl.col("measure") == "corr"))')  # one model, layer and measure
    nb = write_notebook(tmp_path / "explore.ipynb", [SETUP, SNAPSHOT, "ScoreTable(f)", one])
    with jupyter_lab(tmp_path) as server, chromium_page() as page:
        try:
            result = _drive(page, server, nb, shots)
        except BaseException:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
            raise
    (shots / "table_explore.json").write_text(json.dumps(result, indent=1))
    print(f"\ntable explore timings: {json.dumps(result)}")
    assert result["first_paint_ms"] <= BUDGET_MS, result
    assert result["scroll_draw_p99_ms"] <= BUDGET_MS, result
    assert result["scroll_draws_over_budget"] <= result["scroll_draws"] // 100, result


def _drive(page, server, nb, shots) -> dict:
    open_notebook(page, server, nb.name)
    run_cell(page, 0)
    page.wait_for_selector(".dni-table-panel tbody tr", timeout=60_000)
    panel = page.locator(".dni-table-panel")
    first = page.evaluate(f"() => {PANEL}.dniDraws.slice()")
    assert any(d["what"] == "page" for d in first), first
    assert panel.locator(".dni-count").inner_text() == "10,000 rows"

    # a histogram in the header of each numeric column, none for the others
    for col in NUMERIC:
        bars = panel.locator(f"th[data-col='{col}'] svg.dni-hist rect")
        assert bars.count() >= 1, col
    assert panel.locator("th[data-col='unit_score'] svg.dni-hist rect").count() == 20
    assert panel.locator("th[data-col='hid'] svg.dni-hist").count() == 0
    assert panel.locator("th[data-col='converged'] svg.dni-hist").count() == 0

    # the live cells are the snapshot's cells (same rows: the first of the same view)
    wait_idle(page)
    run_cell(page, 1)
    page.wait_for_selector(".dni-snapshot table tr td", timeout=60_000)
    live, snap = page.evaluate(LIVE_ROWS), page.evaluate(SNAP_ROWS)
    assert live and live == snap[: len(live)], (live[:2], snap[:2])
    texts = {v for row in live for v in row}
    assert "3,621" in texts and "3621" not in texts and {"✓", "·"} <= texts

    # all 10,000 rows, scrolled to the end
    scroll = page.evaluate(SCROLL)
    assert scroll["lastIndex"] == 9999, scroll["lastIndex"]
    draws = [d["ms"] for d in scroll["draws"]]
    panel.screenshot(path=str(shots / "table_scrolled.png"))

    # the best unit per hypothesis: one click
    panel.locator("button.dni-best").click()
    page.wait_for_selector(f".dni-table-panel .dni-count:has-text('{N_GROUPS} of 10,000')",
                           timeout=15_000)
    # and all of them on one page: the page-size choice
    panel.locator("select.dni-page-size").select_option("25")
    page.wait_for_selector(".dni-table-panel .dni-page-label", timeout=15_000)
    cols = panel.locator("th").evaluate_all("(ths) => ths.map((t) => t.dataset.col)")
    rows = page.evaluate(LIVE_ROWS)
    groups = {(r[cols.index("mid")], r[cols.index("hid")], r[cols.index("measure")]) for r in rows}
    assert len(rows) == len(groups) == N_GROUPS
    assert panel.locator("button.dni-best").get_attribute("aria-pressed") == "true"
    panel.screenshot(path=str(shots / "table_best.png"))

    # hide a column from the columns menu
    panel.locator("button.dni-cols").click()
    panel.locator(".dni-col-menu input[data-col='n_records']").uncheck()
    page.wait_for_selector(".dni-table-panel th[data-col='n_records']", state="detached",
                           timeout=15_000)
    assert panel.locator("th[data-col='unit_score']").count() == 1

    # a narrow notebook: a new table hides the unit id by itself (the menu shows it again)
    wait_idle(page)  # (the indicator hides at the narrow width)
    page.set_viewport_size({"width": 760, "height": 900})
    run_cell(page, 2)
    narrow = page.locator(".dni-table-panel").nth(1)
    narrow.locator("tbody tr").first.wait_for(timeout=60_000)
    page.wait_for_function("() => { const t = document.querySelectorAll('.dni-table-panel')[1];"
                           " return t && !t.querySelector(\"th[data-col='uid']\"); }",
                           timeout=15_000)
    assert narrow.locator("th[data-col='unit']").count() == 1
    wrap = narrow.locator(".dni-table-wrap").evaluate(
        "(w) => ({client: w.clientWidth, scroll: w.scrollWidth})")
    narrow.screenshot(path=str(shots / "table_narrow.png"))
    # one model, layer and measure: those columns go too, said once above the table (no
    # wait_idle here: the indicator hides at this width; the cell above has drawn its table)
    run_cell(page, 3)
    single = page.locator(".dni-table-panel").nth(2)
    single.locator("tbody tr").first.wait_for(timeout=60_000)
    said = single.locator(".dni-constant")
    said.wait_for(state="visible", timeout=15_000)
    assert said.inner_text() == "every row: mid a · layer lstm · measure corr", said.inner_text()
    for col in ("mid", "layer", "measure", "uid"):
        assert single.locator(f"th[data-col='{col}']").count() == 0, col
    assert single.locator("th[data-col='hid']").count() == 1
    one_wrap = single.locator(".dni-table-wrap").evaluate(
        "(w) => ({client: w.clientWidth, scroll: w.scrollWidth})")
    single.screenshot(path=str(shots / "table_narrow_single.png"))
    return {
        "narrow_width_px": wrap["client"], "narrow_content_px": wrap["scroll"],
        "narrow_single_content_px": one_wrap["scroll"],
        "first_paint_ms": round(max(d["ms"] for d in first), 2),
        "scroll_draws": len(draws),
        "scroll_draw_median_ms": round(median(draws), 2),
        "scroll_draw_max_ms": round(max(draws), 2),
        "scroll_draw_p99_ms": round(sorted(draws)[int(0.99 * (len(draws) - 1))], 2),
        "scroll_draws_over_budget": sum(d > BUDGET_MS for d in draws),
        "scroll_steps": len(scroll["steps"]),
        "scroll_step_median_ms": round(median(scroll["steps"]), 1),
        "scroll_step_max_ms": round(max(scroll["steps"]), 1),
        "scroll_total_ms": round(scroll["total"], 1),
    }
