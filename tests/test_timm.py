"""A real timm ``VisionTransformer`` read with no declaration (issue 47, item 5).

timm imports torchvision, and the torchvision built for this torch (0.28.0) is a CUDA build
whose import fails on the CPU torch (``operator torchvision::nms does not exist``). So timm
lives in a side environment, never among dni_lab's dependencies: torch 2.13.0 (CPU) first,
then torchvision 0.16.2 *without its dependencies* (its import tolerates a C extension that
does not load: no fake op is registered for it), timm without its dependencies, and timm's
and torchvision's pure-Python ones. tests/timm_side.py runs there in a subprocess and prints
one JSON line that these tests read; skipped, with that reason, where the venv is missing.

The models are tiny, with random weights (nothing is downloaded): class token, class and
register tokens, registers only, a distillation token, ``dynamic_img_size`` (at its own
size and another), and ``vit_tiny_patch16_224`` as ``timm.create_model`` builds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".dni_cache" / "timm-venv"
SIDE = Path(os.environ.get("DNI_LAB_TIMM_PYTHON", VENV / "bin" / "python"))
# the venv is stamped only once every package installed (a python alone is not enough)
READY = SIDE.exists() and ("DNI_LAB_TIMM_PYTHON" in os.environ or (VENV / ".installed").exists())
CASES = ["cls", "cls_reg2", "reg4_avg", "distilled", "dynamic", "dynamic_48",
         "vit_tiny_patch16_224"]  # fmt: skip
DYNAMIC = {"dynamic", "dynamic_48"}
pytestmark = pytest.mark.skipif(
    not READY,
    reason=f"timm side environment missing ({SIDE}); build it with `make timm-env`",
)


@pytest.fixture(scope="module")
def report() -> dict:
    """The side run over every case, by name, plus the versions it ran with."""
    proc = subprocess.run(
        [str(SIDE), str(ROOT / "tests" / "timm_side.py"), *CASES],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {c["case"]: c for c in out["cases"]} | {"versions": out}


def test_side_environment_keeps_the_cpu_torch(report):
    versions = report["versions"]
    assert versions["torch"] == "2.13.0+cpu"
    assert versions["timm"].startswith("1.") and versions["torchvision"] == "0.16.2"


@pytest.mark.parametrize("case", CASES)
def test_the_prefix_and_patches_are_read_from_the_model(report, case):
    c = report[case]
    assert c["from_hf"] == "ok", c["from_hf"]
    # the prefix the config implies, timm's own count and dni_lab's are one number
    assert c["prefix"] == c["prefix_expected"] == c["timm_prefix"], c
    assert c["symbols"] == c["symbols_expected"], c


@pytest.mark.parametrize("case", CASES)
def test_named_layers_equal_a_hand_hook_after_the_prefix(report, case):
    reads = {r["address"]: r for r in report[case]["reads"]}
    if case in DYNAMIC:  # its patch embedding: test_a_dynamic_patch_embedding_is_read
        reads.pop("patch_embed")
    bad = {a: r for a, r in reads.items() if r["outcome"] != "equal"}
    assert not bad, json.dumps(bad, indent=1)[:3000]
    assert all(r["diff"] <= r["tol"] for r in reads.values())
    assert reads["blocks.1"]["shape"] == reads["blocks.1"]["want_shape"]


@pytest.mark.parametrize("case", sorted(DYNAMIC))
def test_a_dynamic_patch_embedding_is_read_channels_last(report, case):
    row = next(r for r in report[case]["reads"] if r["address"] == "patch_embed")
    assert row["outcome"] == "equal", row.get("error")


@pytest.mark.parametrize("case", CASES)
def test_inspect_scores_a_block_as_a_hand_pearson(report, case):
    corr = report[case]["corr"]
    assert "error" not in corr, corr.get("error")
    assert corr["units"] == corr["want_units"] > 0
    assert corr["diff"] <= 1e-6


@pytest.mark.parametrize("case", CASES)
def test_the_default_units_are_the_blocks(report, case):
    c = report[case]
    blocks = [layer for layer in c["positional_layers"] if layer.startswith("blocks.")]
    assert c["positional_layers"] == blocks and len(blocks) >= 2, c["positional_layers"]
    assert c["default_layers"] == sorted(blocks), c["default_layers"]


@pytest.mark.parametrize("case", CASES)
def test_the_model_is_left_as_found(report, case):
    assert report[case]["left_as_found"] is True, report[case]["changed"]
