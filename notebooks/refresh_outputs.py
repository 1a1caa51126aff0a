"""Run notebooks in quick mode (``CI=1``) and store their outputs, without widget state.

    .venv/bin/python notebooks/refresh_outputs.py notebooks/05_source_code.ipynb [...]

The stored outputs are what nbval checks (``make test``) and what the documentation site
shows. nbclient stores the widgets' state in ``metadata.widgets`` by default; a notebook
holding it is rendered by nbconvert (and the docs site) through a widget manager fetched
from a CDN instead of the panels' static snapshots, so it is never stored
(``tests/test_notebook_outputs.py`` fails on it).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]


def refresh(path: Path, timeout: int = 1800) -> float:
    """Execute ``path`` in place with the test command's environment; returns seconds."""
    os.environ.setdefault("CI", "1")
    os.environ.setdefault("DNI_LAB_MODELS", str(REPO / ".dni_cache" / "models"))
    os.environ.setdefault("DNI_LAB_CACHE", str(REPO / ".dni_cache" / "hypotheses"))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    t0 = time.perf_counter()
    client.execute()
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for arg in sys.argv[1:]:
        print(f"{arg}: {refresh(Path(arg).resolve()):.0f} s", flush=True)
