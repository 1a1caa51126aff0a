"""Train the reference models the test suite reads, side by side, before it reads them.

``python -m hypotheses.workloads.warm_store`` trains each model of :data:`MODELS` that
the store (``$DNI_LAB_MODELS``) does not hold yet, one process per model and at most
``--jobs`` at once. Each training run keeps its own fixed thread count (see
:func:`.store.using_threads`), so the stored weights are bit for bit those a test
would have trained itself: this only moves the work earlier, where it can overlap
with something else (``make test`` runs it while the side environments install),
and runs the single-threaded trainings of a two-core machine two at a time.

Why these: the suite's longest wait was the fleeing agent's CNN and its ghost-blind
twin, about a hundred seconds each on one thread, trained one after the other
inside one test's fixture (and read again by notebook 06).
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing as mp
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

#: ``(module, keyword arguments of its load)``: what the tests and notebooks load.
MODELS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("hypotheses.workloads.gridworld_flee", {}),
    ("hypotheses.workloads.gridworld_flee", {"blind": True}),
)


def _train(module: str, kwargs: dict[str, Any]) -> tuple[str, float]:
    """Load (training it if needed) one model in this process; its label and seconds."""
    start = time.perf_counter()
    importlib.import_module(module).load(**kwargs)
    label = module.rsplit(".", 1)[-1] + "".join(f" {k}={v}" for k, v in kwargs.items())
    return label, time.perf_counter() - start


def warm(models: tuple[tuple[str, dict[str, Any]], ...] = MODELS, jobs: int = 2) -> list[str]:
    """Train every model of ``models`` that is not stored yet, ``jobs`` processes at once.

    Returns
    -------
    list of str
        One line per model: its label and the seconds its load took here.
    """
    if jobs <= 1 or len(models) <= 1:  # nothing to overlap: no process to start
        return [_line(*_train(m, kw)) for m, kw in models]
    # spawn: a fresh interpreter per model, so no torch state is shared with a parent
    ctx = mp.get_context("spawn")
    lines = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_train, m, kw) for m, kw in models]
        for f in as_completed(futures):
            lines.append(_line(*f.result()))
    return lines


def _line(label: str, seconds: float) -> str:
    return f"{label}: {seconds:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="models trained at once (default: 2, or 1 on one core)")  # fmt: skip
    args = ap.parse_args(argv)
    start = time.perf_counter()
    for line in warm(jobs=args.jobs):
        print(f"warm_store: {line}", flush=True)
    print(f"warm_store: done in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
