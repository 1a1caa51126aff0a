"""The scorecard page is the stored result's rendering, and the stored result says what
the page claims: dni_lab ahead of both hypothesis-blind baselines in every case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_scorecard import markdown, render_page  # noqa: E402


def stored() -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / "scorecard.json").read_text())


def test_the_page_is_the_stored_results_rendering():
    assert render_page(stored(), check=True), (
        "docs/scorecard.md differs from benchmarks/results/scorecard.json: "
        "run python benchmarks/bench_scorecard.py --page"
    )


def test_every_case_beats_both_baselines_by_the_stored_numbers():
    res = stored()
    cases = {r["case"] for r in res["rows"]}
    assert len(cases) >= 3
    for case in cases:
        rows = [r for r in res["rows"] if r["case"] == case]
        ours = max(r["precision"] for r in rows if r["ranker"].startswith("dni_lab"))
        base = max(r["precision"] for r in rows if not r["ranker"].startswith("dni_lab"))
        assert ours > base, case
        assert res["beats_baselines"][case]
    assert "synthetic" in markdown(res)
