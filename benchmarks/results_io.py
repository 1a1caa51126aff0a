"""Writing a focused benchmark's numbers to ``benchmarks/results/<name>.json``.

The README's Benchmarks table is rendered from these files
(``benchmarks/readme_table.py``), so every script that the table cites stores what
it printed, with the machine and the load it ran under: a number measured beside
other jobs must be recognisable as such in the file itself.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
# the load when the benchmark started: every script imports this module before it measures
LOAD_AT_START = list(os.getloadavg())


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's processor string.

    Ratios against a GEMM or a peer move with the CPU (AVX-512 or not, cache sizes), so
    every results file names it.
    """
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict[str, Any]:
    """Where and when a benchmark ran: date, commit, CPU, cores, threads, load average.

    Returns
    -------
    dict
        ``date`` (UTC, ISO 8601), ``commit`` (the repository's HEAD, or None outside
        git), ``cores``, ``torch_threads`` (None if torch is not imported) and
        ``load_average`` (1, 5 and 15 minutes) at the time of the call, also stored as
        ``load_average_at_end``, ``load_average_at_start`` (when this module was imported,
        before the script measured anything), ``cpu`` (its model name).
    """
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = None
    torch = __import__("sys").modules.get("torch")  # only report threads a run actually used
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "load_average": list(os.getloadavg()),
        "load_average_at_start": LOAD_AT_START,
        "load_average_at_end": list(os.getloadavg()),
    }


def command() -> str:
    """The command line that ran the script (``sys.argv``), as a user would type it."""
    return " ".join(["python", *sys.argv])


def write_results(path: Path | str | None, payload: dict[str, Any]) -> Path | None:
    """Write ``payload`` plus its ``command`` and ``environment`` to ``path`` as JSON, atomically.

    Parameters
    ----------
    path
        The results file; None writes nothing (the script only prints).
    payload
        The benchmark's numbers. It must not hold a ``table`` key: notebook 08 reads
        such files as ``run_benchmarks.py`` side-by-side tables.

    Returns
    -------
    Path or None
        The file written, or None.
    """
    if path is None:
        return None
    if "table" in payload:
        raise ValueError("a focused benchmark's results must not have a 'table' key")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")  # a killed run never leaves half a file behind
    stored = {"command": command(), **payload, "environment": environment()}
    tmp.write_text(json.dumps(stored, indent=2, default=str))
    tmp.replace(path)
    print(f"wrote {path}")
    return path
