"""The documentation site renders offline (issue 36, target 2).

``make docs`` builds the site and runs ``docs/hooks/offline.py`` over it; these tests check
that check (it names what a page would load from another host, and leaves links alone),
then build the site as ``make docs`` does and read its notebook pages: nothing loaded from
another host, and each widget output drawn as its stored snapshot (no widget view that
only a CDN's widget manager could draw).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("offline", REPO / "docs" / "hooks" / "offline.py")
offline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(offline)


@pytest.mark.parametrize("html", [
    '<script src="https://unpkg.com/x.js"></script>',
    '<script src="//cdn.example.org/x.js"></script>',
    '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">',
    '<link rel="preconnect" href="https://fonts.gstatic.com">',
    '<img src="http://example.com/a.png">',
    '<img srcset="a.png 1x, https://example.com/b.png 2x">',
    '<iframe src="https://www.youtube.com/embed/x"></iframe>',
    '<video poster="https://example.com/p.jpg"></video>',
    '<svg><use href="https://example.com/s.svg#i"></use></svg>',
    '<div style="background:url(https://example.com/bg.png)"></div>',
    '<style>@import "https://example.com/a.css";</style>',
    '<script>s.src = "https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js"'
    "</script>",
    '<script type="module">await import("https://cdnjs.cloudflare.com/m.mjs")</script>',
])
def test_the_check_names_what_a_page_loads_from_another_host(html):
    assert len(offline.off_host_loads(html)) == 1, html


def test_the_check_leaves_links_and_local_resources_alone():
    html = """
    <a href="https://docs.ray.io/en/latest/">Ray</a><a href="../api/">API</a>
    <link rel="canonical" href="https://example.org/dni_lab/">
    <link rel="stylesheet" href="../assets/stylesheets/main.css">
    <script src="../../assets/javascripts/bundle.js"></script>
    <img src="data:image/svg+xml;base64,PHN2Zz4="><img src="../screenshots/a.png">
    <svg xmlns="http://www.w3.org/2000/svg"><use href="#icon"></use></svg>
    <script>var ns = "http://www.w3.org/2000/svg"; var u = new URL("../..", location)</script>
    <div style="color:#777;background:url(data:image/png;base64,AAAA)"></div>
    """
    assert offline.off_host_loads(html) == []
    assert offline.css_urls("a{b:url('data:image/svg+xml;utf8,<svg/>')} @import 'x.css';") == []
    assert offline.css_urls("@import url(https://fonts.googleapis.com/css);") == [
        "https://fonts.googleapis.com/css"]


def test_the_hook_drops_the_mermaid_loader_only_without_a_diagram():
    loader = ('<script type="module">\nconst d = document.querySelectorAll(".jp-Mermaid > '
              'pre.mermaid");\nawait import("https://cdnjs.cloudflare.com/m.mjs")\n</script>')
    page = f"<p>a</p>{loader}<script>var x = 1</script>"
    out = offline.on_post_page(page, None, None)
    assert out == "<p>a</p><script>var x = 1</script>"
    with_diagram = page + '<div class="jp-Mermaid"><pre class="mermaid">a-->b</pre></div>'
    assert offline.on_post_page(with_diagram, None, None) == with_diagram


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``make docs`` builds it (mkdocs --strict; notebooks never executed)."""
    out = tmp_path_factory.mktemp("site")
    offline.build(out)
    return out


def test_the_built_site_loads_nothing_from_another_host(site):
    assert len(list(site.rglob("*.html"))) >= 30
    assert offline.check_site(site) == {}


def test_widget_outputs_are_drawn_as_their_snapshots(site):
    drawn = 0
    for nb_path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        widgets = [o for c in nb["cells"] for o in c.get("outputs", [])
                   if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
        page = (site / "notebooks" / nb_path.stem / "index.html").read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget" not in page, nb_path.name
        assert page.count('class="dni-snapshot"') >= len(widgets), nb_path.name
        drawn += len(widgets)
    assert drawn >= 5
    # notebook 05's text overlay: coloured text, one line per record
    page = (site / "notebooks" / "05_source_code" / "index.html").read_text(encoding="utf-8")
    assert page.count("<b>TextOverlay</b>") == 1 and page.count("background-color:rgb(") > 100
