"""The merged probe's columns solved in independent chunks by single-threaded workers.

Why not torch's own threads: one Newton step of the merged probe is a few hundred
short operations (gathers, small batched Cholesky solves, line-search passes), and
torch runs each as a parallel region whose threads meet at a barrier. Beside busy
processes the scheduler preempts one of the two threads for a whole time slice while its
partner waits at the barrier, once per region. Outputs are independent problems, so the
columns are split into chunks of whole outputs (every fold of an output shares its
Hessian gathering) and a pool of workers solves one chunk at a time, each on one torch
thread: a worker preempted delays only its own chunk, and the workers meet once, at the
end. ``dni-lab demo`` on this 2-core Xeon, each run alone then beside two busy loops,
three pairs per row, medians:

===========================  =======  =====================  ===========================
probe solve                  alone    beside two busy loops  ratio of each pair
===========================  =======  =====================  ===========================
torch's two threads          46.8 s   131.2 s                2.80×, 2.26×, 2.97×
two workers of one thread    33.3 s   80.3 s                 2.41×, 2.32×, 2.07×
===========================  =======  =====================  ===========================

(The workers' row split the demo's 157 outputs into 8 chunks; 20 chunks, as now, gave
36.3 s and 79.8 s, 2.20×, in one more pair; ``benchmarks/results/demo.json`` holds the
committed code's runs.) Beside two loops a process with two threads gets half the
machine, so twice its time alone is the floor; two separate processes solving half the
outputs each (no barrier, no shared interpreter) took 2.25× beside the loops on a
synthetic probe where two processes of matrix products took 2.0×: the probe's
memory-bound passes lose their caches at every switch. More workers than threads would
take more than a fair share from the other processes, which the pool does not do
(``LogReg(workers=3)`` asks for it).

A column's steps do not depend on the other columns solved with it (its Hessian's rows
are drawn from its output's own row of uniforms, ``_newton.hessians``), so a fit is the
same, up to float rounding, on any machine and with any ``workers``.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

from ._newton import Fit, Problem, newton

OUTPUTS_PER_CHUNK = 8  # ~40 columns at 5 folds: big enough that torch's per-op cost is small

_LOCK = threading.Lock()
_HELD = 0  # pools running now


def _one_thread() -> None:
    """A worker's initializer: its own OpenMP regions on one thread."""
    torch.set_num_threads(1)


@contextmanager
def _restoring_threads() -> Iterator[None]:
    """Leave torch's thread settings as the caller had them, also after an error.

    ``torch.set_num_threads`` in a worker sets that thread's own count, but also the
    count new threads start with and MKL's, which are process-wide; the caller's own
    count is its thread's and never changes. Two probes may fit at once (two
    non-blocking inspections), so the last pool to finish puts the process-wide
    settings back, to its caller's count, while the other's workers still need one.
    """
    global _HELD
    with _LOCK:
        _HELD += 1
    try:
        yield
    finally:
        with _LOCK:
            _HELD -= 1
            if _HELD == 0:
                torch.set_num_threads(torch.get_num_threads())


def chunks(p: Problem) -> list[torch.Tensor]:
    """Column indices of each chunk: ``OUTPUTS_PER_CHUNK`` consecutive outputs each."""
    outs = torch.unique(p.col_out)
    return [
        torch.isin(p.col_out, outs[a : a + OUTPUTS_PER_CHUNK]).nonzero().squeeze(1)
        for a in range(0, len(outs), OUTPUTS_PER_CHUNK)
    ]


def solve(
    p: Problem,
    W0: torch.Tensor,
    iters: int,
    tol: float,
    hessian_rows: int,
    mu: torch.Tensor | None,
    workers: int,
) -> Fit:
    """:func:`._newton.newton` on every chunk of ``p``'s columns, by ``workers`` workers.

    A Stop reaches every worker (each runs in a copy of the caller's context). With one
    worker, one chunk or on a GPU, every column is solved in one call in the calling
    thread, with torch's threads as the caller set them.
    """
    c = W0.shape[1]
    mu = torch.full((c,), 1e-2, device=W0.device) if mu is None else mu
    parts = chunks(p)
    # one worker, one chunk, or a GPU: every column in one call, the same steps as the
    # chunks' (an output's Hessian rows do not depend on the other columns), in fewer calls
    if workers <= 1 or len(parts) <= 1 or W0.device.type != "cpu":
        return newton(p, W0, iters, tol, hessian_rows, mu)

    def one(i: int) -> Fit:
        cols = parts[i]
        return newton(p.columns(cols), W0[:, cols], iters, tol, hessian_rows, mu[cols])

    with (
        _restoring_threads(),
        ThreadPoolExecutor(min(workers, len(parts)), initializer=_one_thread) as pool,
    ):
        futures = [pool.submit(contextvars.copy_context().run, one, i) for i in range(len(parts))]
        fits = [f.result() for f in futures]
    W, mu_out = W0.clone(), mu.clone()
    still = torch.ones(c, dtype=torch.bool, device=W0.device)
    Z = torch.empty(c, p.X.shape[0], dtype=W0.dtype, device=W0.device)
    for cols, fit in zip(parts, fits, strict=True):
        W[:, cols], mu_out[cols], still[cols], Z[cols] = fit.W, fit.mu, fit.open, fit.Z
    return Fit(W, mu_out, still, Z)
