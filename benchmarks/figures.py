"""Figures in the documentation's prose, each copied from its source into a marked fragment.

Usage::

    python benchmarks/figures.py           # rewrite every fragment from its source
    python benchmarks/figures.py --check   # exit 1 if a fragment differs from its source

A page marks a figure as ``<!-- fig:NAME -->0.173<!-- /fig -->`` (HTML comments: invisible
on GitHub and on the MkDocs site). ``NAME`` is a key of :data:`benchmarks.figure_list.FIGURES`,
which says where the figure comes from and how the page writes it: a key of a committed
results file (``benchmarks/results/<file>.json``, written by a benchmark script), or a key
of a notebook's stored output (its last cell prints ``figures: {json}`` in quick mode;
``notebooks/refresh_outputs.py`` stores it). The page is compared with that output. The
output is not compared with a fresh run: a model retrained on another CPU moves such
figures in the second decimal, so the notebook's regression check asserts its headline
within a tolerance on every run instead.
``tests/test_figures.py`` fails when a fragment differs from its source.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the benchmarks package importable
    sys.path.insert(0, str(REPO))

# the figures and their sources (the last three re-exported: tests name them here)
from benchmarks.figure_list import FIGURES, Source  # noqa: E402
from benchmarks.figure_list import Notebook as Notebook  # noqa: E402
from benchmarks.figure_list import Result as Result  # noqa: E402
from benchmarks.figure_list import notebook_figures as notebook_figures  # noqa: E402

FRAGMENT = re.compile(r"<!-- fig:([\w.-]+) -->(.*?)<!-- /fig -->", re.S)


def pages() -> list[Path]:
    """The README and every documentation page (generated ones too: a fragment is a fragment),
    the API reference's included."""
    docs = REPO / "docs"
    return [REPO / "README.md", *sorted(docs.glob("*.md")), *sorted((docs / "api").glob("*.md"))]


def render(source: Source, value: Any = None) -> str:
    """The text a page shows for ``source`` (``value`` replaces the stored one, for tests)."""
    return source.fmt.format(source.value() if value is None else value)


def differences(text: str, figures: dict[str, Source] | None = None) -> list[str]:
    """Each fragment of ``text`` whose content is not its source's rendering, or has no source."""
    figures = FIGURES if figures is None else figures
    problems = []
    for m in FRAGMENT.finditer(text):
        name, shown = m.groups()
        source = figures.get(name)
        if source is None:
            problems.append(f"fig:{name} has no source in benchmarks/figure_list.py")
            continue
        try:
            want = render(source)
        except (KeyError, IndexError, FileNotFoundError) as err:
            problems.append(f"fig:{name}: {source.where()} is not stored ({err})")
            continue
        if shown != want:
            problems.append(f"fig:{name} reads {shown!r}, {source.where()} gives {want!r}")
    return problems


def rewrite(text: str, figures: dict[str, Source] | None = None) -> str:
    """``text`` with every fragment's content rendered from its source."""
    figures = FIGURES if figures is None else figures
    return FRAGMENT.sub(lambda m: f"<!-- fig:{m[1]} -->{render(figures[m[1]])}<!-- /fig -->", text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite every page's fragments, or with ``--check`` report the stale ones.

    Returns
    -------
    int
        0 when every fragment is (or now is) its source's rendering, 1 when ``--check``
        finds one that is not.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = ap.parse_args(argv)
    stale = 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        problems = differences(text)
        if not problems:
            continue
        stale += 1
        for p in problems:
            print(f"{page.relative_to(REPO)}: {p}")
        if not args.check:
            page.write_text(rewrite(text), encoding="utf-8")
            print(f"{page.relative_to(REPO)} rewritten")
    if stale and args.check:
        print("run: python benchmarks/figures.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
