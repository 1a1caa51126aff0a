"""The built docs site in a browser with no network (issue 36, target 2).

The site is built as ``make docs`` builds it and served from this machine; Chromium opens
the notebook pages that hold widget outputs while every request to another host is
refused and recorded. None may be made, and each panel shows its static snapshot: the
score tables' rows, notebook 05's text overlay as coloured lines of code.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from .lab_harness import E2E, chromium_page, free_port

pytestmark = E2E
REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("offline", REPO / "docs" / "hooks" / "offline.py")
offline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(offline)
PAGES = ["01_quickstart", "02_sql_autocompletion", "05_source_code", "06_gridworld_cnn",
         "09_sql_magic_tour"]
# each snapshot drawn: its height, and the coloured symbols in it
DRAWN = """() => [...document.querySelectorAll('.dni-snapshot')].map((s) => ({
  title: s.querySelector('b')?.textContent, height: s.getBoundingClientRect().height,
  coloured: [...s.querySelectorAll('span[style*="background-color"]')].filter((x) =>
    getComputedStyle(x).backgroundColor !== 'rgba(0, 0, 0, 0)' &&
    x.getBoundingClientRect().width > 0).length }))"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    offline.build(root)
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_notebook_pages_render_their_snapshots_offline(site):
    off_host, timings, drawn = [], {}, {}
    with chromium_page() as page:
        def route(r):
            if urlparse(r.request.url).hostname not in ("127.0.0.1", None):
                off_host.append(r.request.url)
                return r.abort()
            return r.continue_()

        page.route("**/*", route)
        for name in PAGES:
            t0 = time.perf_counter()
            page.goto(f"{site}/notebooks/{name}/", wait_until="load")
            page.wait_for_load_state("networkidle")
            timings[name] = time.perf_counter() - t0
            drawn[name] = page.evaluate(DRAWN)
    print("page load + network idle, s:", {k: round(v, 2) for k, v in timings.items()})
    assert off_host == [], f"requests to other hosts: {off_host[:5]}"
    for name in ("01_quickstart", "05_source_code", "06_gridworld_cnn", "09_sql_magic_tour"):
        assert drawn[name] and all(s["height"] > 40 for s in drawn[name]), (name, drawn[name])
    overlay = [s for s in drawn["05_source_code"] if s["title"] == "TextOverlay"]
    assert len(overlay) == 1 and overlay[0]["coloured"] > 100, drawn["05_source_code"]
