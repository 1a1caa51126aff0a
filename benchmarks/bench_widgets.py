"""Widget latency: from a block's scores to the table, a 100k-row page, a 1,000-record overlay.

Python side: the panels' own work (view, page, payload) timed in-process.
Browser side (when /usr/bin/chromium exists): the panels' ES modules loaded in
headless Chromium with a stand-in for anywidget's model, timing how long each
redraw takes once the kernel's payload has arrived (the websocket between the
two is local and not included). Prints numbers; asserts nothing.

    python benchmarks/bench_widgets.py [--no-browser] [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import dni_lab as dl  # noqa: E402
from dni_lab.widgets import Plot, ScoreTable, TextOverlay  # noqa: E402
from dni_lab.widgets._base import css, esm  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1e3:7.2f} ms  (min {min(samples) * 1e3:.2f})"


def big_frame(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    units = n // 100
    return pl.DataFrame(
        {
            "mid": "model",
            "uid": np.repeat(np.arange(units), 100),
            "layer": "lstm",
            "unit": np.repeat(np.arange(units), 100),
            "hid": np.tile([f"h{j}" for j in range(100)], units),
            "measure": "corr",
            "unit_score": rng.uniform(-1, 1, n),
            "group_score": rng.uniform(-1, 1, n),
            "err": rng.uniform(0, 0.1, n),
            "n_records": np.full(n, 512),
            "converged": rng.uniform(size=n) > 0.5,
        }
    )


def python_side() -> dict[str, Any]:
    from conftest import CharLM, encode_chars, random_records

    out: dict[str, Any] = {}
    # 1. block -> table, with a real background run
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=64), encode=encode_chars, name="toy")
    recs = random_records(4000, seed=1)
    hyps = [dl.hypothesis(lambda r, c=c: [x == c for x in r], name=f"is_{c}") for c in "abcdef()"]
    run = dl.inspect(
        models=[model],
        hypotheses=hyps,
        data=recs,
        units=[("lstm", "*")],
        eps=None,
        block_size=128,
        background=True,
        cache=False,
    )
    table = ScoreTable(page_size=25, min_interval=0.0)
    lat: list[float] = []

    def timed(r: Any) -> None:
        t0 = time.perf_counter()
        table._on_block(r)
        lat.append(time.perf_counter() - t0)

    table.run = run
    run.on_block(timed)
    run.wait(300)
    out["block_to_table"] = (lat, run.frame.height)
    # 2. 100k rows in the frame: a new frame (live block), a sort, a filter, a page turn
    df = big_frame(100_000)
    t = ScoreTable(df, page_size=25)
    steps = {"new frame": [], "sort": [], "filter": [], "page": []}
    for i in range(7):
        t0 = time.perf_counter()
        t.frame = df
        steps["new frame"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        t._sort = [["unit_score", "desc" if i % 2 else "asc"]]
        steps["sort"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        t._filter = f"unit_score > {0.1 * (i % 3)} and hid <> 'h3'"
        steps["filter"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        t._page_index = 10 + i
        steps["page"].append(time.perf_counter() - t0)
    out["page_100k"] = steps
    out["page_json_bytes"] = len(json.dumps(t._page))
    out["table_payload"] = (dict(t._page), dict(t._status))
    # 3. a 1,000-record overlay page
    sel = run.frame.sort("unit_score", descending=True).row(0, named=True)
    ov = TextOverlay(model, recs, hyps, page_size=1000)
    times = []
    for i in range(3):
        t0 = time.perf_counter()
        ov.selection = {**sel, "unit": (sel["unit"] + i) % 64}
        times.append(time.perf_counter() - t0)
    out["overlay_1000"] = (times, ov._layout["n_symbols"])
    out["overlay_payload"] = (dict(ov._layout), ov._values, ov._signals)
    out["overlay_json_bytes"] = len(json.dumps(ov._layout)) + len(ov._values) + len(ov._signals)
    plot = Plot("heatmap", run.frame)
    out["plot"] = plot._svg
    out["plot_keys"] = plot._keys
    return out


MOCK = """
window.__mount = async (src, state, cssText) => {
  const style = document.createElement('style'); style.textContent = cssText;
  document.head.append(style);
  const handlers = {};
  const model = {
    state, get: (k) => state[k], set: (k, v) => { state[k] = v; }, save_changes() {},
    on: (ev, cb) => { (handlers[ev] ||= []).push(cb); }, off() {}, send() {},
    trigger: (k) => { for (const cb of handlers['change:' + k] || []) cb(); },
  };
  const url = URL.createObjectURL(new Blob([src], { type: 'text/javascript' }));
  const mod = (await import(url)).default;
  const el = document.createElement('div'); document.body.append(el);
  const t0 = performance.now();
  mod.render({ model, el });
  void el.offsetHeight;  // include style and layout, not only DOM building
  return { model, el, first: performance.now() - t0 };
};
window.__bytes = (b64) => {
  const s = atob(b64); const a = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i);
  return new DataView(a.buffer);
};
"""


def browser_side(py: dict[str, Any], shots: Path | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from lab_harness import CHROMIUM_ARGS

    out: dict[str, Any] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        # table: first draw, then a new page arriving (what a block does)
        page.set_content("<html><body></body></html>")
        page.add_script_tag(content=MOCK)
        tpage, tstatus = py["table_payload"]
        state = {
            "_page": tpage,
            "_status": tstatus,
            "_sort": [],
            "_filter": "",
            "selection": {},
            "_page_index": 0,
            "page_size": 25,
        }
        res = page.evaluate(
            """async ([src, state, css]) => {
                 const m = await window.__mount(src, state, css); window.__t = m;
                 const times = [];
                 for (let i = 0; i < 30; i++) {
                   const p = structuredClone(m.model.get('_page')); p.seq = i;
                   p.rows = p.rows.map(r => r.slice()).reverse();
                   const t0 = performance.now();
                   m.model.set('_page', p); m.model.trigger('_page');
                   void m.el.offsetHeight; times.push(performance.now() - t0);
                 }
                 return { first: m.first, times };
               }""",
            [esm("table"), state, css()],
        )
        out["table_first_ms"] = res["first"]
        out["table_update_ms"] = res["times"]
        if shots:
            page.screenshot(path=str(shots / "table.png"))
        # overlay: 1,000 records on one page
        page.set_content("<html><body></body></html>")
        page.add_script_tag(content=MOCK)
        lay, vals, sigs = py["overlay_payload"]
        res = page.evaluate(
            """async ([src, lay, v, s, css]) => {
                 const state = { _layout: lay, _values: window.__bytes(v),
                   _signals: window.__bytes(s), pinned: [], selection: {}, _order: 'index',
                   _page_index: 0 };
                 const m = await window.__mount(src, state, css);
                 const times = [];
                 for (let i = 0; i < 5; i++) {
                   const t0 = performance.now();
                   m.model.set('_layout', { ...lay, sent_at: i }); m.model.trigger('_layout');
                   void m.el.offsetHeight; times.push(performance.now() - t0);
                 }
                 const spans = m.el.querySelectorAll('span[data-i]').length;
                 return { first: m.first, times, spans };
               }""",
            [
                esm("text_overlay"),
                lay,
                base64.b64encode(vals).decode(),
                base64.b64encode(sigs).decode(),
                css(),
            ],
        )
        out["overlay_first_ms"] = res["first"]
        out["overlay_update_ms"] = res["times"]
        out["overlay_spans"] = res["spans"]
        if shots:
            page.screenshot(path=str(shots / "overlay.png"))
            page.set_content("<html><body></body></html>")
            page.add_script_tag(content=MOCK)
            page.evaluate(
                """async ([src, svg, keys, css]) => {
                     await window.__mount(src, { _svg: svg, _keys: keys,
                       selection: {} }, css); }""",
                [esm("plot"), py["plot"], py["plot_keys"], css()],
            )
            page.screenshot(path=str(shots / "plot.png"), full_page=True)
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--screenshots", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    print(
        f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    py = python_side()
    lat, rows = py["block_to_table"]
    print("== Python side (kernel) ==")
    print(f"block -> table page ({rows} rows, {len(lat)} blocks):  {ms(lat)}")
    for step, v in py["page_100k"].items():
        print(f"100k-row frame, {step:9s}:  {ms(v)}")
    print(f"page payload (25 rows): {py['page_json_bytes']:,} bytes of JSON")
    times, nsym = py["overlay_1000"]
    print(f"1,000-record overlay page ({nsym:,} symbols), extract + payload:  {ms(times)}")
    print(f"overlay payload: {py['overlay_json_bytes']:,} bytes (JSON layout + float32 arrays)")
    if args.no_browser or not CHROMIUM.exists():
        print("browser side skipped: " + ("--no-browser" if args.no_browser else "no chromium"))
        return
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    br = browser_side(py, args.screenshots)
    sec = [x / 1e3 for x in br["table_update_ms"]]
    print("== Browser side (headless Chromium, DOM + layout) ==")
    print(f"table first draw: {br['table_first_ms']:.1f} ms; new page drawn:  {ms(sec)}")
    print(
        f"block -> table shown (kernel + browser, medians): "
        f"{(statistics.median(lat) + statistics.median(sec)) * 1e3:.1f} ms"
    )
    osec = [x / 1e3 for x in br["overlay_update_ms"]]
    print(
        f"1,000-record overlay ({br['overlay_spans']:,} symbols): first draw "
        f"{br['overlay_first_ms']:.0f} ms; redraw:  {ms(osec)}"
    )


if __name__ == "__main__":
    main()
