"""The front door and the documentation site hold together (issue 26).

``make docs`` (in CI) builds the site with ``mkdocs build --strict``, which fails on a
broken link inside the site; these checks are the quick ones it cannot make: the README's
links (GitHub's view, outside the site), no link to files a clone does not have, and every
page in the navigation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_links_outside_the_repository():
    for page in pages():
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text, f"{page.relative_to(REPO)} links ../shared"


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_front_door_links_resolve(page):
    path = REPO / page
    links = [u for u in LINK.findall(path.read_text(encoding="utf-8")) if "://" not in u]
    assert links, f"{page} links nothing"
    missing = [u for u in links if not (path.parent / u).exists()]
    assert missing == [], f"{page} links missing files: {missing}"


def test_the_readme_is_a_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 80
    for command in ("make demo", "make test", "make docs"):
        assert command in text
    assert "![" in text  # a screenshot


def test_every_page_is_in_the_navigation():
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    listed = set(re.findall(r"([\w/]+\.(?:md|ipynb))", nav))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    on_disk |= {f"notebooks/{p.name}" for p in (REPO / "notebooks").glob("*.ipynb")}
    assert on_disk - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - on_disk == set(), "nav entries without a page"


def test_the_api_reference_covers_the_public_api():
    import dni_lab

    text = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "api").glob("*.md"))
    documented = set(re.findall(r"^::: dni_lab\.(\w+)", text, flags=re.M))
    public = set(dni_lab.__all__)
    assert public - documented == set(), "public names without an API page"
