"""The thread policy (dni_lab/_threads.py) is in place before torch loads OpenMP."""

from __future__ import annotations

import os
import subprocess
import sys

ORDER = """
import sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        seen.append(name)
sys.meta_path.insert(0, Watch())
import os, dni_lab
print(os.environ.get("GOMP_SPINCOUNT"), seen.index("dni_lab._threads") < seen.index("torch"))
"""


def _run(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", ORDER], env=env, capture_output=True,
                          text=True, check=True, timeout=120)  # fmt: skip
    return proc.stdout.strip()


def test_the_spin_count_is_set_before_torch_loads_and_a_users_own_value_stays():
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert _run(env) == "10000 True"
    assert _run({**env, "GOMP_SPINCOUNT": "7"}) == "7 True"
