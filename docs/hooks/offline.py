"""The documentation site loads nothing from another host (issue 36, target 2).

Two parts, one rule:

- a MkDocs hook (``hooks:`` in mkdocs.yml): nbconvert's notebook template adds a module
  script to every notebook page that imports Mermaid from a CDN when the page holds a
  Mermaid diagram; ours hold none, so the loader is dropped from pages without one;
- a check over the built site (``python docs/hooks/offline.py SITE``, run by ``make docs``):
  it lists every off-host URL that a page would *load*: ``src``/``srcset``/``poster``/
  ``data`` of any element, ``href`` of ``<link>`` (stylesheets, icons, preloads) and of SVG
  ``<use>``/``<image>``, ``url()``/``@import`` in inline styles and in the site's CSS files,
  and any absolute URL written in an inline script (which could fetch it).

Links a reader clicks (``<a href>``) may point anywhere: following one is the reader's
choice and the page renders fully without it. XML namespace names (``xmlns``,
``http://www.w3.org/2000/svg`` in a script) are names, not fetched.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

#: An absolute URL (a scheme with an authority, or protocol-relative): another host.
OFF_HOST = re.compile(r"^\s*(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//", re.ASCII)
URL_IN_TEXT = re.compile(r"""(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}[^\s"'`)<>]*""")
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)|@import\s+['"]([^'"]+)""")
NAMESPACES = ("//www.w3.org/",)
LOADED = {"src", "srcset", "poster", "data", "background"}
LOADED_HREF = {"link", "use", "image", "feimage"}
#: ``<link rel>`` values that name a page without the browser fetching it.
NAVIGATION_RELS = {"canonical", "alternate", "prev", "next", "author", "license", "search"}


def off_host(url: str) -> bool:
    """Whether ``url`` points at another host (``data:``, relative and ``#`` links do not)."""
    return bool(OFF_HOST.match(url)) and not any(ns in url for ns in NAMESPACES)


def css_urls(css: str) -> list[str]:
    """The off-host URLs that ``css`` loads (``url(...)`` and ``@import``)."""
    found = [a or b for a, b in CSS_URL.findall(css)]
    return [u for u in found if off_host(u)]


class _Loads(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in: str | None = None  # "script" or "style" while inside one

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        for name, value in a.items():
            urls = [value]
            if name == "srcset":  # "a.png 1x, b.png 2x"
                urls = [p.split()[0] for p in value.split(",") if p.strip()]
            if name in LOADED or (name in ("href", "xlink:href") and tag in LOADED_HREF):
                if tag == "link" and set(a.get("rel", "").split()) & NAVIGATION_RELS:
                    continue
                self.found += [f"<{tag} {name}={u}>" for u in urls if off_host(u)]
            elif name == "style":
                self.found += [f"<{tag} style> {u}" for u in css_urls(value)]
        if tag in ("script", "style"):
            self._in = tag

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "style":
            self.found += [f"<style> {u}" for u in css_urls(data)]
        elif self._in == "script":
            urls = URL_IN_TEXT.findall(data)
            self.found += [f"<script> {u}" for u in urls if off_host(u)]


def off_host_loads(html: str) -> list[str]:
    """Each off-host resource the page ``html`` loads (or whose URL a script holds)."""
    parser = _Loads()
    parser.feed(html)
    parser.close()
    return parser.found


def check_site(site: Path) -> dict[str, list[str]]:
    """``{page: [off-host loads]}`` over the built site's HTML and CSS files."""
    bad = {}
    for path in sorted(site.rglob("*")):
        if path.suffix == ".html":
            found = off_host_loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".css":
            found = css_urls(path.read_text(encoding="utf-8"))
        else:
            continue
        if found:
            bad[str(path.relative_to(site))] = found
    return bad


def build(out: Path) -> None:
    """Build the site into ``out`` as ``make docs`` does (strict; notebooks not executed)."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=repo, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
        text=True, timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"mkdocs build failed:\n{done.stderr[-3000:]}")


# -- the MkDocs hook -------------------------------------------------------------------
_MERMAID_LOADER = re.compile(
    r"<script type=\"module\">(?:(?!</script>).)*?\.jp-Mermaid(?:(?!</script>).)*</script>",
    re.S,
)


def on_post_page(output: str, page, config) -> str:
    """Drop nbconvert's Mermaid loader (a CDN import) from pages without a diagram."""
    if 'class="jp-Mermaid"' in output:
        return output  # a diagram needs it: check_site then names the CDN import
    return _MERMAID_LOADER.sub("", output)


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else ".dni_cache/site")
    pages = list(site.rglob("*.html"))
    if not pages:
        sys.exit(f"no HTML under {site}: build the site first (make docs)")
    bad = check_site(site)
    for page, found in bad.items():
        print(f"{page}: loads from another host: {', '.join(found[:5])}")
    print(f"{len(pages)} pages checked, {len(bad)} load from another host")
    sys.exit(1 if bad else 0)
