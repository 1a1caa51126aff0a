"""The probe's chunked solve: same scores with any number of workers, torch's thread
count left as found (after an error and beside another fit too), a Stop in every worker."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from test_measures_logreg import feed, planted

from dni_lab.backend.measures import _column_pool, _newton
from dni_lab.backend.measures.base import HypothesisInfo, stop_check
from dni_lab.backend.measures.logreg import LogReg

WEIGHTS = tuple(np.linspace(2.0, 0.0, 20))  # 20 outputs: three chunks of 8, 8 and 4


@pytest.fixture
def wide():
    U, H, mask = planted(seed=5, weights=WEIGHTS)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(H.shape[2])]
    return U, H, mask, info


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_scores_do_not_depend_on_the_workers(wide, two_threads):
    U, H, mask, info = wide
    res = {}
    for workers in (1, 2, 3):
        m = LogReg(workers=workers)
        state = feed(m, U, H, mask, info)
        res[workers] = m.result(state)
        assert torch.get_num_threads() == 2  # the caller's count is untouched
    assert len(_column_pool.chunks(m._solve(state, m._design(state), state.W, 0, True)[1])) == 3
    # the same steps and Hessian rows for every column: only float rounding differs (one
    # torch thread per worker against two, a chunk's products against the whole's)
    for workers in (2, 3):
        np.testing.assert_allclose(res[workers].group_score, res[1].group_score, atol=1e-6)
        np.testing.assert_allclose(res[workers].unit_score, res[1].unit_score, atol=2e-4)
    assert res[1].group_score[0, 0] > 0.7 > res[1].group_score[0, -1]  # a real fit


def test_an_error_in_a_worker_reaches_the_caller_and_the_threads_are_restored(
    wide, two_threads, monkeypatch
):
    U, H, mask, info = wide
    m = LogReg(workers=2)
    real = _newton.newton

    def failing(p, *args, **kwargs):
        if int(p.col_out.min()) == _column_pool.OUTPUTS_PER_CHUNK:  # the second chunk
            raise RuntimeError("chunk 1 failed")
        return real(p, *args, **kwargs)

    monkeypatch.setattr(_column_pool, "newton", failing)
    with pytest.raises(RuntimeError, match="chunk 1 failed"):
        feed(m, U, H, mask, info, blocks=2)
    counts = []
    fresh = threading.Thread(target=lambda: counts.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert torch.get_num_threads() == 2 and counts == [2]  # a new thread too


def test_two_fits_at_once_leave_the_callers_thread_count(wide, two_threads, monkeypatch):
    """The count is process-wide: the first pool in saves it and the last out restores
    it, whichever finishes first (two non-blocking inspections fit at once)."""
    U, H, mask, info = wide
    lock, arrived, release = threading.Lock(), [0], threading.Event()
    real = _newton.newton

    seen = set()

    def meeting(p, *args, **kwargs):
        seen.add(torch.get_num_threads())  # in a worker
        if int(p.col_out.min()) == 0 and not release.is_set():  # each fit's first chunk
            with lock:
                arrived[0] += 1
            release.wait(timeout=60)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(_column_pool, "newton", meeting)
    errors = []

    def fit():
        try:
            m = LogReg(workers=2)
            m.result(feed(m, U, H, mask, info, blocks=2))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=fit) for _ in range(2)]
    for t in threads:
        t.start()
    assert _wait_for(lambda: arrived[0] == 2 and _column_pool._HELD == 2)
    release.set()
    for t in threads:
        t.join(timeout=120)
    assert not errors and seen == {1} and _column_pool._HELD == 0  # workers: one thread
    # the caller's count, and the count a new thread starts with, are as before
    counts = []
    fresh = threading.Thread(target=lambda: counts.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert torch.get_num_threads() == 2 and counts == [2]


def test_a_stop_reaches_every_worker(wide, monkeypatch):
    U, H, mask, info = wide
    m = LogReg(workers=2, max_iter=50, tol=0.0)
    state = feed(m, U, H, mask, info, blocks=2)
    steps = {"n": 0}
    real = _newton._face_step

    def counted(*args, **kwargs):
        steps["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_newton, "_face_step", counted)
    with stop_check(lambda: steps["n"] >= 1):  # Stop pressed once a step was solved
        res = m.result(state)
    assert steps["n"] <= 3  # each chunk's worker stops at its next check: <= 1 step each
    assert np.isfinite(res.group_score).all()


def _wait_for(cond, timeout: float = 60.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False
