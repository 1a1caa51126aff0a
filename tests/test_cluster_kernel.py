"""No kernel dies because of Ray: a notebook session with Ray, in a process that must live.

Ray is started from a ``background=True`` run's thread, from ``%%inspect``'s and from
the query builder's, each after the user's own ``ray.shutdown()`` ended the last one,
and each followed by more calls (the foreground, ``dl.query`` in the background and
not, ``NeuronIndex.fit``); see ``ray_kernel_scenarios.py``. One process
for all of them: each Ray start costs seconds (tens on a busy 2-core machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

HERE = Path(__file__).parent


@pytest.mark.slow
def test_a_notebook_session_with_ray_never_kills_the_process():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(HERE / "ray_kernel_scenarios.py"), "session"],
        capture_output=True, text=True, timeout=540, env=env, cwd=HERE,
    )  # fmt: skip
    said = proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0, said
    assert "Failed to connect to GCS" not in proc.stderr, said
    steps = [line for line in proc.stdout.splitlines() if line.startswith("ok ")]
    assert len(steps) == 10 and proc.stdout.rstrip().endswith("alive"), said
