"""A whole node dies mid-run on a 2-node Ray cluster: the frame is the one-process frame.

The cluster (``ray.cluster_utils.Cluster``: a head and a worker node, 1 CPU each, on
this machine) lives in a process of its own, ``ray_nodes_scenario.py``, so that it
cannot meet the other modules' local Ray.
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
def test_killing_a_node_mid_run_gives_the_one_process_frame():
    proc = subprocess.run(
        [sys.executable, str(HERE / "ray_nodes_scenario.py")], capture_output=True, text=True,
        timeout=540, env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=HERE,
    )  # fmt: skip
    steps = [line for line in proc.stdout.splitlines() if line.startswith(("ok ", "alive"))]
    said = "\n".join(steps) + "\n" + proc.stderr[-3000:]
    assert proc.returncode == 0, said
    assert len(steps) == 4 and steps[-1] == "alive", said
