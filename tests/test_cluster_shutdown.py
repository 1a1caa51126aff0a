"""The user's ``ray.shutdown()`` during a sharded run (issue 35): the run ends with a
partial frame, no Ray is started behind the user's back, the next call starts fresh.

A module of its own: it shuts its local Ray down twice, which the other cluster
modules' shared Ray must not see.
"""

from __future__ import annotations

import time

import pytest
import torch
from conftest import CharLM, encode_chars, random_records

import dni_lab as dl
from dni_lab.backend.engine.inspection import Inspection
from dni_lab.backend.engine.params import InspectParams

ray = pytest.importorskip("ray")

RECORDS = 400


@pytest.fixture(scope="module", autouse=True)
def _own_ray():
    yield
    from dni_lab.backend.cluster import shutdown

    shutdown()
    if ray.is_initialized():
        ray.shutdown()


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


@dl.hypothesis
def slow(r):
    time.sleep(0.02)  # a hypothesis that costs 20 ms a record: the run lasts seconds
    return [c in "()" for c in r]


def _partial(insp: Inspection, frame) -> None:
    assert insp.progress.cancelled  # marked partial, as after a Stop
    assert 0 < frame["n_records"].max() < RECORDS
    assert not ray.is_initialized()  # no new local Ray started by the run's own calls


@pytest.mark.slow
def test_ray_shutdown_during_a_run_ends_it_partial_and_the_next_call_starts_fresh():
    recs = random_records(RECORDS, seed=3)
    kw = {"eps": None, "block_size": 10, "cache": False}
    # background: the user's next cell shuts Ray down while the run reads
    run = dl.inspect(_model(), [slow], ["corr", "logreg"], recs, cluster=2, background=True,
                     **kw)  # fmt: skip
    deadline = time.monotonic() + 120
    while run.inspection.progress.blocks < 1:
        assert time.monotonic() < deadline, "the run never merged a block"
        time.sleep(0.05)
    ray.shutdown()
    assert run.wait(30), "the run did not end after ray.shutdown()"
    _partial(run.inspection, run.result())
    # foreground, the next call: it starts a new Ray (its blocks are read: it started
    # fresh); a shutdown between two blocks, from on_block in the driver's own thread,
    # ends it partial too
    insp = Inspection(_model(), [slow], ["corr", "logreg"], recs,
                      params=InspectParams(cluster=2, **kw))  # fmt: skip
    frame = insp.run(on_block=lambda i: i.progress.blocks == 2 and ray.shutdown())
    assert insp.progress.blocks >= 2
    _partial(insp, frame)
