"""The findings table is regression-tested: each row's notebook asserts its headline.

Each row of "Findings and their evidence" (``docs/findings.md``) links one notebook. That
notebook must end in a ``## Regression check`` cell whose ``assert`` statements hold the
row's headline numbers (nbval runs every cell under ``CI=1``, so a broken finding fails
CI), and whose
``# README: "..."`` lines quote the row's own text, so the page and the asserted numbers
are read side by side and cannot silently part: a row whose wording or numbers change must
change its notebook's check too. (The marker kept its name when the table moved from the
README to the documentation site.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "# Findings and their evidence"
QUOTE = re.compile(r'^# README: "([^"]+)"', re.MULTILINE)
LINK = re.compile(r"\]\((notebooks/[^)]+\.ipynb)\)")
# the page's generated fragments and prose spans (benchmarks/figures.py): read as their text
MARKUP = re.compile(r"<!-- (?:fig:[\w.-]+|/fig|prose|/prose) -->")
# Rows whose notebook is not checked yet, with the reason; strict: a check added there
# makes the test pass and fails it, so the entry goes.
NOT_YET: dict[str, str] = {}


def findings_rows() -> list[str]:
    """The table rows of the findings page, with ``\\|`` read as ``|``."""
    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    # past the header and its rule
    return [MARKUP.sub("", row).replace("\\|", "|") for row in rows[2:]]


def regression_cells(notebook: Path) -> list[str]:
    """The sources of the code cells after the notebook's ``## Regression check`` headings.

    A notebook with two findings rows has two checks (``## Regression check: ...``), one per row.
    """
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    out = []
    for i, cell in enumerate(cells[:-1]):
        heading = cell["cell_type"] == "markdown" and "".join(cell["source"])
        if heading and heading.startswith("## Regression check"):
            nxt = cells[i + 1]
            assert nxt["cell_type"] == "code", f"{notebook.name}: no code cell after the heading"
            out.append("".join(nxt["source"]))
    assert out, f"{notebook.name} has no '## Regression check' cell"
    return out


def check_for(row: str, notebook: Path) -> str:
    """The notebook's regression cell whose quotes all stand in ``row`` (the first if none)."""
    cells = regression_cells(notebook)
    for source in cells:
        quotes = QUOTE.findall(source)
        if quotes and all(q in row for q in quotes):
            return source
    return cells[0]


def _row_params() -> list:
    params = []
    for row in findings_rows():
        links = LINK.findall(row)
        nb = links[-1] if links else row[:40]
        mark = [pytest.mark.xfail(reason=NOT_YET[nb], strict=True)] if nb in NOT_YET else []
        params.append(pytest.param(row, id=Path(nb).stem, marks=mark))
    return params


def test_the_findings_table_is_where_the_tests_read_it():
    rows = findings_rows()
    assert len(rows) >= 7, rows
    assert all(row.count("|") >= 5 for row in rows), "a findings row lost a column"


@pytest.mark.parametrize("row", _row_params())
def test_each_finding_is_asserted_in_its_notebook(row: str):
    links = LINK.findall(row)
    assert links, f"a findings row links no notebook: {row[:80]}"
    notebook = ROOT / links[-1]
    assert notebook.exists(), f"{links[-1]} does not exist"
    source = check_for(row, notebook)
    assert re.search(r"^\s*assert ", source, re.MULTILINE), f"{notebook.name}: asserts nothing"
    assert "QUICK" in source, f"{notebook.name}: the check must say which mode's number it expects"
    quotes = QUOTE.findall(source)
    assert quotes, f'{notebook.name}: the check quotes no README text (# README: "...")'
    missing = [q for q in quotes if q not in row]
    assert not missing, f"{notebook.name}: the findings row no longer says {missing}"


def test_a_check_that_quotes_text_the_row_lacks_fails(tmp_path):
    """The quote check itself can fail: a notebook quoting other numbers is caught."""
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["## Regression check\n"], "metadata": {}},
        {"cell_type": "code", "source": ['# README: "r = 0.99"\n', "assert QUICK or True\n"],
         "metadata": {}, "outputs": [], "execution_count": None},
    ]}  # fmt: skip
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    quotes = QUOTE.findall(check_for(findings_rows()[0], path))
    assert quotes == ["r = 0.99"]
    assert [q for q in quotes if q not in findings_rows()[0]] == ["r = 0.99"]
    path.write_text(json.dumps({"cells": nb["cells"][1:]}))
    with pytest.raises(AssertionError, match="no '## Regression check' cell"):
        regression_cells(path)


def test_every_regression_check_stands_for_a_row():
    """A notebook's second check must quote a row too: none is left unclaimed."""
    rows = findings_rows()
    notebooks = {link for row in rows for link in LINK.findall(row)[-1:]}
    for link in sorted(notebooks):
        for source in regression_cells(ROOT / link):
            quotes = QUOTE.findall(source)
            owners = [row for row in rows if quotes and all(q in row for q in quotes)]
            assert owners, f"{link}: a regression check quotes {quotes}, which no row says"
