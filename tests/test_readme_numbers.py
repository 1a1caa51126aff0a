"""Every number in the README and the documentation pages has a source (issue 24, target 6).

* The Benchmarks table of ``docs/benchmarks.md`` between ``<!-- bench:begin -->`` and
  ``<!-- bench:end -->`` must be exactly what ``benchmarks/readme_table.py`` renders from
  the committed ``benchmarks/results/*.json``: a figure typed by hand, or a ✓ that the
  stored numbers do not support, fails.
* Everywhere else in the README and the pages that took its reference material (prose,
  notes, the findings table; code blocks excepted), a number
  with a unit (s, ms, ×, %, MiB, GiB, records/s, ...) must be in :data:`ALLOWED`,
  which says where it comes from: a key of a results file, a default in the source,
  or a paper's own figure quoted beside the paper's name. Each source is checked.
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
# The pages the README's reference material moved to (issue 26). docs/models.md (the
# seed models' training figures, written beside their store) was never scanned.
MOVED = ["index", "quickstart", "queries", "notebook", "notebooks", "transformers", "ray",
         "benchmarks", "findings"]
PAGES = [README, *(REPO / "docs" / f"{name}.md" for name in MOVED)]
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
    "99%": Cited("Luigi"),  # the findings table's "the paper's finding" column
    # docs/benchmarks.md, "Early stopping by eps" (rows: parens, then SQL, eps 0.1 to 0.01)
    "100.00%": Result("early_stop_eps", "rows.0.within_eps", "{:.2%}"),
    "99.96%": Result("early_stop_eps", "rows.2.within_eps", "{:.2%}"),
    "99.41%": Result("early_stop_eps", "rows.3.within_eps", "{:.2%}"),
    "99.35%": Result("early_stop_eps", "rows.6.within_eps", "{:.2%}"),
    "96.63%": Result("early_stop_eps", "rows.7.within_eps", "{:.2%}"),
}


def prose(text: str) -> str:
    """The README without its generated table and its fenced code blocks."""
    text = re.sub(rf"{re.escape(rt.BEGIN)}.*?{re.escape(rt.END)}", "", text, flags=re.S)
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def unsourced(text: str, allowed: dict) -> list[str]:
    """Each number with a unit in ``text`` that ``allowed`` has no (valid) source for."""
    problems = []
    for line in prose(text).splitlines():
        for m in NUMBER.finditer(line):
            source = allowed.get(m.group())
            why = "no source in ALLOWED" if source is None else source.check(m.group(), line)
            if why:
                problems.append(f"{m.group()!r} ({why}) in: {line.strip()[:120]}")
    return problems


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
    found = {m.group() for m in NUMBER.finditer(prose(docs_text()))}
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
