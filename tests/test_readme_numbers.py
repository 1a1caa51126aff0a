"""Every number in the README and the documentation pages has a source (issue 24, target 6;
issue 34, target 6).

* The Benchmarks table of ``docs/benchmarks.md`` between ``<!-- bench:begin -->`` and
  ``<!-- bench:end -->`` must be exactly what ``benchmarks/readme_table.py`` renders from
  the committed ``benchmarks/results/*.json``: a figure typed by hand, or a ✓ that the
  stored numbers do not support, fails.
* Everywhere else in the README and the pages that took its reference material (prose,
  notes, the findings table; code blocks excepted), a number
  with a unit (s, ms, ×, %, MiB, GiB, records/s, ...) must be in :data:`ALLOWED`,
  which says where it comes from: a key of a results file, a default in the source,
  or a paper's own figure quoted beside the paper's name. Each source is checked.
* On the pages in :data:`CONVERTED`, every other number in prose too (r, F1, p, ranks,
  sizes) must be a generated fragment (``<!-- fig:NAME -->…<!-- /fig -->``, checked against
  its source by ``tests/test_figures.py``), sit in a ``<!-- prose -->…<!-- /prose -->`` span
  (a definition, an example or a setting, not a measurement), or match one of the reviewed
  :data:`STRUCTURAL` patterns (issue numbers, versions, ordinals...).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks/ is not an installed package

from benchmarks import readme_table as rt  # noqa: E402
from benchmarks.readme_rows import ROWS  # noqa: E402

README = REPO / "README.md"
# The pages the README's reference material moved to (issue 26).
MOVED = [
    "index",
    "quickstart",
    "queries",
    "notebook",
    "notebooks",
    "transformers",
    "ray",
    "benchmarks",
    "findings",
]
# Pages whose every prose number is checked (issue 34, target 6) ...
CONVERTED = [
    README,
    *(
        REPO / "docs" / f"{name}.md"
        for name in ("findings", "transformers", "index", "quickstart", "benchmarks", "ray")
    ),
    *(
        REPO / "docs" / f"{name}.md"
        for name in (
            "features", "notebooks", "notebook", "queries", "byo_model", "scorecard",
            "from_transformerlens",
        )
    ),
    REPO / "docs" / "architecture.md",
    # the seed models' figures: benchmarks/model_figures.py reads them from the model store
    REPO / "docs" / "models.md",
]
# the pages whose numbers with a unit are checked against ALLOWED: a converted page's too
PAGES = [README, *(REPO / "docs" / f"{name}.md" for name in MOVED)]
PAGES += [p for p in CONVERTED if p not in PAGES]
# ... and the others, with the reason. Strict: a page listed here whose prose has no bare
# number fails test_not_converted_pages_still_have_bare_numbers, so it moves to CONVERTED.
NOT_CONVERTED: dict[str, str] = {}
# Tables between <!-- NAME:begin --> and <!-- NAME:end --> that a test compares, cell by
# cell, with their source (the scan leaves them to it): NAME -> (page, the checking test)
TABLES = {
    "bench": (
        "benchmarks",
        "tests/test_readme_numbers.py::test_benchmarks_table_is_rendered_from_the_results",
    ),
    "scorecard": (
        "scorecard",
        "tests/test_scorecard.py::test_the_page_is_the_stored_results_rendering",
    ),
    # the counts of a run in the zoo venv (make zoo-env; skipped, with the reason, without it)
    "pretrained": ("byo_model", "tests/test_pretrained.py::test_the_docs_table_is_this_run"),
}
# Pages a script writes whole, compared with its rendering by a test: not scanned.
GENERATED = {
    # rendered from a full zoo run; tests/test_zoo.py::test_zoo_table_is_current compares
    # them (skipped, with the reason, after a partial run)
    "zoo_table": "tests/zoo/table.py",
}
_N = r"\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?"
BARE = re.compile(rf"(?<![\w.]){_N}(?![\w])")
# Numbers that name or order things, never measure them; each entry reviewed:
STRUCTURAL = [
    re.compile(p.replace("{N}", _N), re.M)
    for p in (
        # an issue, notebook, target, paper section, block, layer, head or epoch is named by its
        # number (an index: changing it changes what is named, not a measured value)
        r"(?:\b[Ii]ssues?|\b[Nn]otebooks?|\btargets?|§|\b[Bb]locks?|\b[Ll]ayers?|\b[Hh]eads?"
        r"|\bepochs?|\bPEP|\bFig\.|\bFigure|\baxis) ?{N}",
        # a link whose text is a notebook's number, e.g. [06](notebooks/06_gridworld_cnn.ipynb),
        # or its number and title: [06 Grid-world CNN](notebooks/06_gridworld_cnn.ipynb)
        r"\[{N}\]|\[{N}(?= [A-Z])",
        # a version beside its tool's name
        r"\b(?:TransformerLens|nnsight|transformer-lens|torch|Python|NeuroX|sae-lens|ipykernel)"
        r" {N}(?:\.\d+)*",
        # a number inside a name: GPT-2, SIGMOD'19, block N-1
        r"[A-Za-z]-{N}|'{N}\b",
        # a numbered list's ordinal
        r"^\s*{N}\. ",
        # a rank of a shape (1-D, 2-D, 4-D), not a measured value
        r"\b{N}-D\b",
        # a snippet include (pymdownx.snippets): --8<-- "zoo_table.md"
        r"^--8<-- ",
    )
]
_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNIT = r"(?:ms|s|min|h|×|%|KiB|MiB|GiB|kB|MB|GB|records/s)"
# "6×256" is a shape, not a ratio: no digit or word may follow the unit
NUMBER = re.compile(rf"(?<![\w.]){_NUM}(?:\s*[–-]\s*{_NUM})?\s?{_UNIT}(?![\w×/])")


@dataclass(frozen=True)
class Result:
    """A figure read from ``benchmarks/results/<file>.json`` at a dotted ``key``."""

    file: str
    key: str
    fmt: str  # how the README writes it, e.g. "{:.0f}×"

    def check(self, text: str, line: str) -> str | None:
        value = json.loads((REPO / "benchmarks" / "results" / f"{self.file}.json").read_text())
        for part in self.key.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        shown = self.fmt.format(value)
        return None if shown == text else f"{self.file}.json {self.key} reads {shown}"


@dataclass(frozen=True)
class Setting:
    """A default in the source: ``literal`` occurs in the file at ``path`` and its last
    number equals the README's number times ``scale`` (95% is ``0.95``)."""

    path: str
    literal: str
    scale: float = 1.0

    def check(self, text: str, line: str) -> str | None:
        if self.literal not in (REPO / self.path).read_text():
            return f"{self.path} no longer contains {self.literal!r}"
        default = float(re.findall(_NUM, self.literal)[-1])
        shown = float(re.match(_NUM, text).group().replace(",", "")) * self.scale
        return None if abs(shown - default) < 1e-12 else f"the default is {self.literal!r}"


@dataclass(frozen=True)
class Cited:
    """A paper's own figure: the README line must name the paper before the number."""

    paper: str

    def check(self, text: str, line: str) -> str | None:
        before = line[: line.find(text)]
        return None if self.paper in before else f"not quoted beside {self.paper!r}"


ALLOWED: dict[str, Result | Setting | Cited] = {
    "95%": Setting("dni_lab/backend/engine/params.py", "confidence: float = 0.95", 0.01),
    "0.5%": Setting("dni_lab/backend/engine/inspection.py", "LEAVE_OPEN = 0.005", 0.01),
    "4 GiB": Setting("dni_lab/backend/hypothesis/cache_budget.py", '"DNI_LAB_CACHE_MAX_GB", "4"'),
    "64 MiB": Setting(
        "dni_lab/backend/extraction/behavior_memo.py", '"DNI_LAB_BEHAVIOR_MEMO_MB", "64"'
    ),
    "2 s": Setting("dni_lab/backend/cluster/connect.py", "CONNECT_TIMEOUT_S = 2.0"),
    "10 s": Setting("dni_lab/backend/cluster/guard.py", "LEAVE_WAIT_S = 10.0"),
    "8 s": Setting("dni_lab/backend/cluster/tasks.py", "STALL_S = 8.0"),
    "1.5×": Setting("dni_lab/backend/measures/logreg.py", "checkpoint_growth: float = 1.5"),
    "4×": Setting("dni_lab/backend/measures/logreg.py", "max_growth: float = 4.0"),
    "8 ×": Setting("tests/tolerances.py", "ulps: float = 8.0"),  # docs/architecture.md
    "99%": Cited("Luigi"),  # the findings table's "the paper's finding" column
    # docs/scorecard.md: the synthetic case's firing probabilities, from common to rare
    "8%": Setting("benchmarks/scorecard_side.py", "torch.linspace(0.08", 0.01),
    "1%": Setting("benchmarks/scorecard_side.py", "torch.linspace(0.08, 0.01", 0.01),
}


def prose(text: str) -> str:
    """The README without its checked tables (:data:`TABLES`) and its fenced code blocks."""
    for name in TABLES:
        text = re.sub(rf"<!-- {name}:begin -->.*?<!-- {name}:end -->", "", text, flags=re.S)
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def typed(text: str) -> str:
    """The prose of ``text`` without its generated fragments (``tests/test_figures.py``
    checks each against its source, a unit included, e.g. ``99.41%``)."""
    return re.sub(r"<!-- fig:[\w.-]+ -->.*?<!-- /fig -->", " ", prose(text), flags=re.S)


def unsourced(text: str, allowed: dict) -> list[str]:
    """Each number with a unit in ``text`` that ``allowed`` has no (valid) source for."""
    problems = []
    for line in typed(text).splitlines():
        for m in NUMBER.finditer(line):
            source = allowed.get(m.group())
            why = "no source in ALLOWED" if source is None else source.check(m.group(), line)
            if why:
                problems.append(f"{m.group()!r} ({why}) in: {line.strip()[:120]}")
    return problems


def bare_numbers(text: str) -> list[str]:
    """Each number in the prose of ``text`` that no fragment, prose span, sourced unit or
    structural pattern accounts for (code, inline code and link targets are not prose)."""
    text = typed(text)
    text = re.sub(r"<!-- prose -->.*?<!-- /prose -->", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    found = []
    for line in text.splitlines():
        covered = [m.span() for p in [NUMBER, *STRUCTURAL] for m in p.finditer(line)]
        for m in BARE.finditer(line):
            if not any(a <= m.start() < b for a, b in covered):
                found.append(f"{m.group()!r} in: {line.strip()[:120]}")
    return found


def docs_text() -> str:
    """The README and every documentation page, one after the other."""
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES)


def test_benchmarks_table_is_rendered_from_the_results():
    text = rt.PAGE.read_text()
    stored = text.split(rt.BEGIN, 1)[1].split(rt.END, 1)[0].strip("\n")
    assert stored == rt.render_table(), "run: python benchmarks/readme_table.py"


def test_readme_prose_has_no_number_without_a_source():
    assert unsourced(docs_text(), ALLOWED) == []


def test_every_allowed_number_is_still_in_the_readme():
    # a stale entry would let the same figure back in later without review
    found = {m.group() for m in NUMBER.finditer(typed(docs_text()))}
    assert set(ALLOWED) <= found


def test_the_scan_catches_a_typed_number_and_a_wrong_source():
    text = "Stop ends the run 0.1–0.95 s after the click; 130× in a second run; 6×256 GPT-2.\n"
    assert [p.split()[0] for p in unsourced(text, {})] == ["'0.1–0.95", "'130×'"]
    src = Result("warm_query", "postgres.ratio", "{:.0f}×")
    stored = f"{rt.load_results()['warm_query']['postgres']['ratio']:.0f}×"  # what the file reads
    wrong = f"{int(stored[:-1]) + 17}×"
    assert unsourced(f"warm query {stored} PostgreSQL", {stored: src}) == []
    assert unsourced(f"warm query {wrong} PostgreSQL", {wrong: src})  # the file reads another
    assert unsourced("at most 4 GiB", ALLOWED) == []
    assert unsourced("at most 5 GiB", {"5 GiB": ALLOWED["4 GiB"]})  # the default is 4
    assert unsourced("(> 99% accuracy)", ALLOWED)  # a paper's figure without the paper
    # a fragment is checked against its source by test_figures, its unit included
    assert unsourced("<!-- fig:eps.3.parens_within -->99.41%<!-- /fig --> within", {}) == []
    assert unsourced("<!-- fig:x -->1<!-- /fig --> 99.41% within", {})


def test_the_table_check_catches_an_edited_number(tmp_path):
    results = rt.load_results()
    probes = json.loads(json.dumps(results["probes"]))
    probes["sklearn"]["max_abs_f1_diff"] = 0.05  # beyond the target: the row must say ✗
    edited = rt.render_table({**results, "probes": probes})
    assert edited != rt.render_table(results)
    sk = next(r for r in ROWS if r.source == "probes" and "scikit-learn" in r.what)
    assert rt.render_row(sk, {**results, "probes": probes}).endswith("\\|ΔF1\\| ≤ 0.01 ✗ |")


def test_a_row_without_its_file_says_not_measured():
    row = next(r for r in ROWS if r.source == "warm_query")
    cells = rt.render_row(row, {}).split(" | ")
    assert cells[2] == rt.MISSING and cells[-1] == f"≥ 100×: {rt.MISSING} |"
    assert "✓" not in rt.render_row(row, {"warm_query": {"postgres": {}}})  # a key missing


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.source)
def test_rows_hold_no_measured_number_in_their_text(row):
    # the what/script cells are typed: a measured figure there would escape the check
    assert not NUMBER.findall(f"{row.what} {row.script}")


@pytest.mark.parametrize("page", CONVERTED, ids=lambda p: p.name)
def test_every_number_on_a_converted_page_has_a_source(page):
    assert bare_numbers(page.read_text(encoding="utf-8")) == []


def test_every_page_is_converted_generated_or_listed():
    names = {p.stem for p in (REPO / "docs").glob("*.md")}
    converted = {p.stem for p in CONVERTED if p != README}
    assert names - converted - set(GENERATED) == set(NOT_CONVERTED), "list a new page"
    assert not converted & set(NOT_CONVERTED)
    assert not set(GENERATED) & (converted | set(NOT_CONVERTED))


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_pages_say_so_and_their_generator_writes_them(name):
    script = REPO / GENERATED[name]
    assert f"docs/{name}.md" in script.read_text(encoding="utf-8")
    head = (REPO / "docs" / f"{name}.md").read_text(encoding="utf-8").splitlines()[0]
    assert head.startswith(f"<!-- generated by {GENERATED[name]}"), head


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_checked_table_is_marked_and_its_test_exists(name):
    page, test = TABLES[name]
    text = (REPO / "docs" / f"{page}.md").read_text(encoding="utf-8")
    assert text.count(f"<!-- {name}:begin -->") == text.count(f"<!-- {name}:end -->") == 1
    path, func = test.split("::")
    assert f"def {func}" in (REPO / path).read_text(encoding="utf-8")


def test_not_converted_pages_still_have_bare_numbers():
    # strict: a page whose prose has no bare number left belongs in CONVERTED (every page
    # is converted today: a page listed again must hold the numbers it is listed for)
    done = [n for n in NOT_CONVERTED
            if not bare_numbers((REPO / "docs" / f"{n}.md").read_text(encoding="utf-8"))]
    assert done == [], f"converted, so no longer NOT_CONVERTED: {done}"


def test_the_scan_catches_any_bare_number():
    text = "rank 8 of 8, r 0.075, 6,144 units; `x = 3`; see issue 34 and GPT-2 [a](p/1.md)\n"
    assert [b.split()[0] for b in bare_numbers(text)] == ["'8'", "'8'", "'0.075'", "'6,144'"]
    marked = "<!-- prose -->k = 8<!-- /prose -->, r <!-- fig:nb10.lstm_r -->0.76<!-- /fig -->"
    assert bare_numbers(marked) == []
    assert bare_numbers("within 1e-6 of it") and bare_numbers("1. first\n") == []
    assert bare_numbers("[06 Grid-world CNN](n/06.ipynb), ipykernel 7") == []
    assert bare_numbers("[10 records](x.md)")  # a link's text that is not a title
