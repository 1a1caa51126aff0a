"""Importing a benchmark module changes nothing: tests import them at collection time.

A benchmark that set ``DNI_LAB_BEHAVIOR_MEMO_MB=0`` on import turned the behavior memo
off for every test collected after it (the memo tests failed only in the full run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_importing_the_benchmarks_leaves_our_settings_alone():
    # (libraries they import set variables of their own, e.g. Ray's allocator settings)
    names = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, json, os, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "before = dict(os.environ)\n"
        "changed = {}\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module('benchmarks.' + name)\n"
        "    except ImportError:\n"
        "        continue  # an optional peer is missing: nothing ran\n"
        "    now = {k: v for k, v in os.environ.items() if k.startswith('DNI_LAB')}\n"
        "    ours = {k: v for k, v in before.items() if k.startswith('DNI_LAB')}\n"
        "    if now != ours:\n"
        "        changed[name] = sorted(set(now.items()) ^ set(ours.items()))\n"
        "        os.environ.clear(); os.environ.update(before)\n"
        "print(json.dumps(changed))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}
