"""Results files are written by scripts, with the command, the machine and the load (issue 34).

``benchmarks/results_io.write_results`` stores ``command`` (``sys.argv``) and an
``environment`` holding the CPU and the 1-minute load average at the start and the end of
the run. Every committed file must carry them, except the files written before that
schema, listed in :data:`LEGACY` (no timing benchmark is re-run on the shared machine that
wrote this test). Strict: a listed file that gains the schema fails, so its entry goes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks/ is not an installed package

from benchmarks import results_io  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
_NO_ENV = "written before results_io stored an environment"
_NO_CMD = "written without its command (and, but for full/quick, without the start load)"
LEGACY: dict[str, str] = {
    "cluster": _NO_ENV, "coverage": _NO_ENV,
    "activations": _NO_CMD, "cluster_bytes": _NO_CMD, "cluster_bytes_logreg": _NO_CMD,
    "cluster_nodes": _NO_CMD, "early_stop": _NO_CMD, "explanations": _NO_CMD,
    "features_sparse": _NO_CMD, "fixed_cost": _NO_CMD, "full": _NO_CMD, "hf_depth": _NO_CMD,
    "hf_extract": _NO_CMD, "quick": _NO_CMD, "warm_query": _NO_CMD,
    "early_stop_eps": "its environment names no CPU (written before cpu_model)",
}  # fmt: skip


def schema_problems(data: dict) -> list[str]:
    """What a results file lacks of the schema: command, environment with CPU, a load."""
    env = data.get("environment")
    problems = [] if isinstance(data.get("command"), str) else ["no command"]
    if not isinstance(env, dict):
        return [*problems, "no environment"]
    if not env.get("cpu"):
        problems.append("no CPU in the environment")
    if not (env.get("load_average") or env.get("load_average_at_start")):
        problems.append("no load average")
    return problems


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.stem)
def test_every_results_file_carries_command_environment_and_load(path):
    problems = schema_problems(json.loads(path.read_text()))
    if path.stem in LEGACY:
        assert problems, f"{path.name} has the schema now: remove it from LEGACY"
    else:
        assert problems == [], f"{path.name}: {problems}"


def test_legacy_entries_name_committed_files():
    assert set(LEGACY) <= {p.stem for p in RESULTS.glob("*.json")}


def test_write_results_stores_the_schema(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/bench_x.py", "--quick"])
    path = results_io.write_results(tmp_path / "x.json", {"value": 1.5})
    data = json.loads(path.read_text())
    assert schema_problems(data) == []
    assert data["command"] == "python benchmarks/bench_x.py --quick"
    env = data["environment"]
    assert len(env["load_average_at_start"]) == 3 and len(env["load_average_at_end"]) == 3
    assert schema_problems({"command": "python x.py", "environment": {"cpu": "x"}}) == [
        "no load average"
    ]
