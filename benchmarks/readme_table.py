"""The Benchmarks table of ``docs/benchmarks.md``, rendered from ``benchmarks/results/*.json``.

Usage::

    python benchmarks/readme_table.py           # rewrite the table between the markers
    python benchmarks/readme_table.py --check   # exit 1 if the page is not up to date

Every cell comes from a stored result, and every ✓ or ✗ is computed here from the
stored numbers against the target the row declares: a row whose file (or key) is
missing says "not measured yet" instead of showing an old figure. The rows
themselves are in ``benchmarks/readme_rows.py``; ``tests/test_readme_numbers.py``
fails when the page differs from this rendering. (The table lived in the README until the
documentation site took the reference material; the module keeps its name.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PAGE = REPO / "docs" / "benchmarks.md"
if str(REPO) not in sys.path:  # run as a script: make the benchmarks package importable
    sys.path.insert(0, str(REPO))
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
HEADER = "| what | script | ours | baseline | ratio | target |\n|---|---|---|---|---|---|"
MISSING = "not measured yet"

from benchmarks.readme_rows import ROWS, Row  # noqa: E402  (after the sys.path line)


def load_results(directory: Path = RESULTS) -> dict[str, dict]:
    """Every ``<name>.json`` in ``directory``, parsed, by name."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))}


def _escape(cell: str) -> str:
    # a literal "|" inside a cell would split it in Markdown
    return cell.replace("\\|", "|").replace("|", "\\|")


def render_row(row: Row, results: dict[str, dict]) -> str:
    """One Markdown row; cells that cannot be read from the results say so.

    Parameters
    ----------
    row
        The row's description.
    results
        Parsed results files by name (:func:`load_results`).

    Returns
    -------
    str
        ``| what | script | ours | baseline | ratio | target |``.
    """
    res = results.get(row.source)
    try:
        if res is None:
            raise KeyError(row.source)
        ours, base, ratio = row.cells(res)
        if res.get("quick") is True:  # a smoke run stored where a real one belongs
            ours += " (smoke size)"
        marks = [f"{t.text()} {'✓' if t.holds(res) else '✗'}" for t in row.targets]
        target = "; ".join(marks) if marks else row.note
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
        # the file, or the keys this row reads, are not stored yet
        ours, base, ratio = MISSING, "—", "—"
        target = "; ".join(t.text() for t in row.targets) or row.note
        target += f": {MISSING}"
    cells = [row.what, row.script, ours, base, ratio, target]
    return "| " + " | ".join(_escape(c) for c in cells) + " |"


def _load_average(res: dict) -> str | None:
    """The stored 1-minute load average(s) of one results file, if it stored any."""
    env = res.get("environment", {})
    stored = (env.get("load_average"), env.get("load_average_at_start"),
              env.get("load_average_at_end"), res.get("load_average"))  # fmt: skip
    vals = [v[0] for v in stored if v]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    return f"{lo:.2f}" if hi - lo < 0.005 else f"{lo:.2f}–{hi:.2f}"


def render_table(results: dict[str, dict] | None = None) -> str:
    """The whole generated block: header, rows and the load line, without markers."""
    results = load_results() if results is None else results
    lines = [HEADER, *(render_row(r, results) for r in ROWS), ""]
    sources = dict.fromkeys(r.source for r in ROWS)
    stored = {s: _load_average(results[s]) for s in sources if s in results}
    known = [f"`{s}.json` {v}" for s, v in stored.items() if v]
    unknown = [f"`{s}.json`" for s, v in stored.items() if not v]
    line = "1-minute load average stored with each result: " + (", ".join(known) or "none")
    if unknown:
        line += "; not stored in " + ", ".join(unknown)
    lines.append(line + ".")
    return "\n".join(lines)


def splice(text: str, block: str) -> str:
    """``text`` with everything between the markers replaced by ``block``."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise ValueError(f"{PAGE.name} has no {BEGIN} … {END} block")
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/benchmarks.md's table, or with ``--check`` report whether it is current.

    Parameters
    ----------
    argv
        Command-line arguments (None: ``sys.argv``).

    Returns
    -------
    int
        0 when the page is (or now is) the rendering, 1 when ``--check`` finds it stale.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    ap.add_argument("--results", type=Path, default=RESULTS, help="the results directory")
    args = ap.parse_args(argv)
    text = PAGE.read_text()
    new = splice(text, render_table(load_results(args.results)))
    if new == text:
        print("docs/benchmarks.md's table is up to date")
        return 0
    if args.check:
        print("docs/benchmarks.md's table differs: run python benchmarks/readme_table.py")
        return 1
    PAGE.write_text(new)
    print("docs/benchmarks.md's table rewritten from", args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
