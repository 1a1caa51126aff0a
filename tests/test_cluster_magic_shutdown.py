"""The user's ``ray.shutdown()`` during a ``%%inspect`` run, in a real kernel (issue 35, target 5).

``%%inspect -o res`` starts a sharded run on a local Ray and the cell ends at once; the
next cell shuts Ray down the user's way while the run reads. The run must end partial
(``res`` becomes its partial frame, as after a Stop), no Ray may be started behind the
user's back by the run's thread, the kernel must live, and the next ``%%inspect`` must
start a fresh Ray and read every record. The foreground and ``background=True`` cases
are in ``test_cluster_shutdown.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ipykernel")
pytest.importorskip("ray")
from jupyter_client.manager import start_new_kernel
from test_cell_await import _iopub_until

REPO = Path(__file__).resolve().parents[1]
RECORDS = 400
SETUP = f"""\
import sys, json, time
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests")!r}]
import ray, torch
import dni_lab as dl
from conftest import CharLM, encode_chars, random_records
%load_ext dni_lab
torch.manual_seed(0)
lm = dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")
texts = random_records({RECORDS}, seed=3)

@dl.hypothesis(name="slow")
def slow(r):
    time.sleep(0.02)  # 20 ms a record: the run lasts seconds, long enough to shut Ray down
    return [c in "()" for c in r]
"""
SQL = ("SELECT S.uid, S.unit_score, S.n_records INSPECT lm AND slow OVER texts "
       "WITH (cache = FALSE, cluster = 'local', workers = 2)")  # fmt: skip
WIDGET = "application/vnd.jupyter.widget-view+json"


def _run(kc, code: str, timeout: float = 300) -> str:
    """Execute ``code``; return its stdout; fail with the kernel's error if it raised."""
    msg_id = kc.execute(code, allow_stdin=False)
    out: list[str] = []

    def ended(msg: dict) -> bool:  # collects the cell's stdout on the way to its idle
        if msg["parent_header"].get("msg_id") != msg_id:
            return False
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            out.append(content["text"])
        elif kind == "error":
            tb = "\n".join(content.get("traceback", []))  # the kernel's, so CI says where
            pytest.fail(f"{code!r} raised {content['ename']}: {content['evalue']}\n{tb}")
        return kind == "status" and content["execution_state"] == "idle"

    _iopub_until(kc, ended, timeout)
    return "".join(out)


@pytest.mark.slow
def test_ray_shutdown_during_an_inspect_cell_ends_it_partial_and_the_next_starts_fresh():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        _run(kc, SETUP)
        _run(kc, f"%%inspect -o res --eps none --block-size 10\n{SQL}")
        # the cell ended at once: the magic holds the running query (taken from there, as
        # a cell naming the -o variable would wait for the run to end)
        said = _run(kc, "magic = get_ipython().magics_manager.registry['InspectMagics']\n"
                        "run = next(iter(magic.pending.values()))\n"
                        "print(type(run).__name__, run.done)")
        assert said.split() == ["QueryRun", "False"], said
        _run(kc, "deadline = time.monotonic() + 180\n"
                 "while run.progress.blocks < 1 and time.monotonic() < deadline:\n"
                 "    time.sleep(0.05)\n"
                 "assert run.progress.blocks >= 1, 'the run never merged a block'\n"
                 "ray.shutdown()")  # fmt: skip
        # naming `res` waits for the run's end, which the shutdown must bring
        said = _run(kc, "p = dl.provenance(res)\n"
                        "print(json.dumps({'partial': p['partial'], 'reason': p['partial_reason'],"
                        " 'n': res['n_records'].max(), 'ray': ray.is_initialized(),"
                        " 'type': type(res).__name__}))", timeout=120)  # fmt: skip
        got = json.loads(said.strip().splitlines()[-1])
        assert got["type"] == "DataFrame" and got["partial"] is True, got
        assert 0 < got["n"] < RECORDS, got  # stopped while reading, not read to the end
        assert got["ray"] is False, got  # the run's thread started no new local Ray
        # the next cell: a fresh Ray, every record read, the kernel alive
        said = _run(kc, f"%%inspect -o again --eps none --block-size 10 --wait\n{SQL}\n")
        said = _run(kc, "print(json.dumps({'n': again['n_records'].min(),"
                        " 'partial': dl.provenance(again)['partial'],"
                        " 'ray': ray.is_initialized()}))")  # fmt: skip
        got = json.loads(said.strip().splitlines()[-1])
        assert got == {"n": RECORDS, "partial": False, "ray": True}, got
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
