"""The README's two commands, as the Makefile plans them (issue 46, item 3).

`make demo` (and `make install`) install no system packages and the demo needs no dev
extra; PostgreSQL and Chromium belong to `make test`. Read from `make -n` against venvs
that do not exist, so every step is planned and nothing runs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def plan(target: str, tmp_path: Path) -> str:
    """What ``make -n target`` would run from a fresh clone (no venv, no side venvs)."""
    names = ("VENV", "SAELENS_VENV", "ZOO_VENV", "TIMM_VENV")
    venvs = [f"{var}={tmp_path / var.lower()}" for var in names]
    out = subprocess.run(["make", "-n", "--no-print-directory", target, *venvs], cwd=ROOT,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout


@pytest.mark.parametrize("target", ["demo", "install"])
def test_demo_and_install_touch_no_system_packages(target, tmp_path):
    steps = plan(target, tmp_path)
    assert "torch==2.13.0" in steps
    assert "apt-get" not in steps


def test_the_demo_installs_dni_lab_without_its_dev_extra(tmp_path):
    steps = plan("demo", tmp_path)
    assert "-e ." in steps and "[dev]" not in steps
    assert steps.strip().splitlines()[-1].endswith("bin/dni-lab demo")


def test_the_tests_install_the_dev_extra_and_the_system_packages(tmp_path):
    steps = plan("test", tmp_path)
    assert '-e ".[dev]"' in steps and "apt-get install" in steps
    # the system packages and the dev extra are in place before pytest starts
    assert steps.index("apt-get install") < steps.index("-m pytest")
    assert steps.index("[dev]") < steps.index("-m pytest")
    # the reference models are trained before the suite reads them
    assert steps.index("hypotheses.workloads.warm_store") < steps.index("-m pytest")
    # timm's side venv: torchvision without its dependencies (the pinned one cannot import)
    assert "--no-deps" in steps and "torchvision==0.16.2" in steps
