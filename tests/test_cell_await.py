"""A cell waiting for a background run keeps the panels alive (issue 26, §3.1).

In a real kernel: ``%%inspect -o res`` starts a slow run, the next cell names ``res`` and
waits for it. While it waits, the score table's messages are handled: a header click
comes back as a sorted page, and Stop ends the run, so ``res`` is a partial result
"stopped by the user" (before, the messages waited for the cell: the run read to its end).
"""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

pytest.importorskip("ipykernel")
from jupyter_client.manager import start_new_kernel

from dni_lab.cell_await import AwaitPending, comms_run_beside_async_cells

REPO = Path(__file__).resolve().parents[1]
SETUP = f"""\
import sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests")!r}]
import time
import torch
torch.set_num_threads(1)
import dni_lab as dl
from query_workloads import sql_checkpoint, encode_sql, sql_records
%load_ext dni_lab
lm = dl.Model(sql_checkpoint(1.0), encode_sql, name='lm')
texts = sql_records(400, seed=3)

@dl.hypothesis(name="slow_kw")
def slow_kw(r):
    time.sleep(0.02)  # 400 records: about 8 s, long enough to act while the next cell waits
    return [c.isupper() for c in r]
"""
QUERY = "%%inspect -o res --eps none --block-size 8\n" \
        "SELECT S.uid, S.unit_score INSPECT lm AND slow_kw OVER texts"
WIDGET = "application/vnd.jupyter.widget-view+json"


def test_the_transformer_keeps_the_cells_line_numbers():
    import ast

    t = AwaitPending()
    tree = ast.parse("\n\nx = res.height\ny = 2\n")
    assert t.visit(tree) is tree and len(tree.body) == 2  # nothing asked: unchanged
    t.names = ("res",)
    tree = t.visit(ast.parse("\n\nx = res.height\ny = 2\n"))
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Await)
    assert first.lineno == 3 and [s.lineno for s in tree.body[1:]] == [3, 4]
    assert t.names == ()  # once


def _execute(kc, code: str) -> str:
    return kc.execute(code, allow_stdin=False)


def _reply(kc, msg_id: str, timeout: float = 120) -> dict:
    while True:
        msg = kc.get_shell_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg["content"]


def _iopub_until(kc, pred, timeout: float = 120, before: str | None = None) -> dict:
    """Read IOPub until ``pred(msg)`` holds; return that message. With ``before`` (a request's
    msg_id) it must come while that request still runs, not after it went idle."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if pred(msg):
            return msg
        idle = msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
        if before and idle and msg["parent_header"].get("msg_id") == before:
            raise AssertionError("the message came only after the waiting cell had ended")
    raise AssertionError("the kernel never sent the expected message")


def _sort_while_waiting(kc, comm_id: str, waiting: str) -> None:
    """Click the table's ``uid`` header; its new sort must come back while ``waiting`` runs."""
    kc.session.send(kc.shell_channel.socket, kc.session.msg("comm_msg", {
        "comm_id": comm_id, "data": {"method": "custom",
                                     "content": {"type": "sort", "column": "uid"}}}))
    _iopub_until(kc, lambda m: m["msg_type"] == "comm_msg"
                 and m["content"].get("comm_id") == comm_id
                 and "_sort" in m["content"]["data"].get("state", {}), before=waiting)


@pytest.mark.slow
@pytest.mark.skipif(not comms_run_beside_async_cells(), reason="ipykernel < 7: cells block")
def test_stop_and_sorting_work_while_the_next_cell_waits():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        setup = _execute(kc, SETUP)
        assert _reply(kc, setup)["status"] == "ok"
        start = _execute(kc, QUERY)
        shown = _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == start
                             and WIDGET in m["content"].get("data", {}))
        comm_id = shown["content"]["data"][WIDGET]["model_id"]
        assert _reply(kc, start)["status"] == "ok"
        waiting = _execute(kc, "n = res.height")  # names res: waits for the run
        _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == waiting
                     and m["msg_type"] == "execute_input")
        # a header click while the cell waits: the sorted page comes back at once
        _sort_while_waiting(kc, comm_id, waiting)
        kc.session.send(kc.shell_channel.socket, kc.session.msg("comm_msg", {
            "comm_id": comm_id, "data": {"method": "custom", "content": {"type": "stop"}}}))
        reply = _reply(kc, waiting)
        assert reply["status"] == "ok", reply
        check = _execute(kc, "rec = dl.provenance(res); "
                              "print(rec['partial'], rec['partial_reason'], n == res.height)")
        out = _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == check
                           and m["msg_type"] == "stream")["content"]["text"]
        assert out.startswith("True stopped by the user after") and out.strip().endswith("True")
        # Kernel -> Interrupt while a cell awaits: the run stops, the cell goes on with the
        # partial frame (never a NameError or a cancelled cell)
        start = _execute(kc, QUERY)
        assert _reply(kc, start)["status"] == "ok"
        shown = _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == start
                             and WIDGET in m["content"].get("data", {}))
        waiting = _execute(kc, "m = res.height")
        _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == waiting
                     and m["msg_type"] == "execute_input")
        _sort_while_waiting(kc, shown["content"]["data"][WIDGET]["model_id"], waiting)
        km.interrupt_kernel()  # the cell is awaiting now (it just handled a comm message)
        reply = _reply(kc, waiting)
        assert reply["status"] == "ok", reply
        check = _execute(kc, "print(dl.provenance(res)['partial'], m == res.height)")
        out = _iopub_until(kc, lambda m: m["parent_header"].get("msg_id") == check
                           and m["msg_type"] == "stream")["content"]["text"]
        assert out.strip() == "True True"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
