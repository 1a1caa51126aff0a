"""A notebook's life with Ray, in a process of its own: ``python ray_kernel_scenarios.py NAME``.

Run by ``tests/test_cluster_kernel.py``: Ray is started from one entry point, called
again, ended the user's way (``ray.shutdown()``) and started from the next entry point;
every call's frame must equal the first, and the process must live to exit 0. Before the fix, a Ray
started by a background run's thread died with the thread, and the next call aborted
the process after 60 s ("Failed to connect to GCS ... The program will terminate").
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import polars as pl
import ray
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from tolerances import assert_close_f32

import dni_lab as dl

KEYS = ["mid", "uid", "hid", "measure"]
WORKERS = 2
RECORDS = random_records(48, seed=21)
OPTS = {"eps": None, "block_size": 16, "cache": False}
SQL = (
    "SELECT * INSPECT lm AND hyps OVER texts "
    f"WITH (eps = NULL, block_size = 16, cache = FALSE, cluster = 'local', workers = {WORKERS})"
)


def model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def namespace() -> dict:
    return {"lm": model(), "texts": RECORDS, "hyps": [paren, position]}


def scores(frame: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in (*KEYS, "unit_score", "n_records", "converged") if c in frame.columns]
    return frame.sort([c for c in KEYS if c in frame.columns]).select(cols)


def step(name: str, frame: pl.DataFrame, first: pl.DataFrame | None) -> pl.DataFrame:
    """Print the step; check its frame against the first one."""
    frame = scores(frame)
    assert frame.height > 0, name
    if first is not None:
        assert frame.equals(first), f"{name}: the frame differs from the first call's"
    print(f"ok {name} ({frame.height} rows)", flush=True)
    return frame


def inspect_fg() -> pl.DataFrame:
    return dl.inspect(model(), [paren, position], ["corr"], RECORDS, cluster=WORKERS, **OPTS)


def inspect_bg() -> pl.DataFrame:
    run = dl.inspect(model(), [paren, position], ["corr"], RECORDS, cluster=WORKERS,
                     background=True, **OPTS)  # fmt: skip
    return run.result(timeout=240)


def cpus_given_back() -> None:
    """Idle workers hold no CPU: the user's own task runs at once (no timing asserted)."""
    deadline = time.monotonic() + 60  # reservations of finished tasks return asynchronously
    while ray.available_resources().get("CPU") != ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.05)

    @ray.remote(num_cpus=1)
    def users_task() -> int:
        return 42

    assert ray.get(users_task.remote(), timeout=120) == 42
    print("ok the CPUs are free after the run", flush=True)


def session() -> None:
    """Ray started from a run's thread, from %%inspect's, then from the query builder's."""
    first = step("background=True starts Ray", inspect_bg(), None)
    step("a second call, in the foreground", inspect_fg(), first)
    cpus_given_back()
    ray.shutdown()  # the user's own: the kept workers are gone with it
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "dni_lab")
    ip.user_ns.update(namespace())
    magic = ip.run_cell_magic("inspect", "--no-live", SQL)  # its run thread starts Ray
    q = step("%%inspect after ray.shutdown() starts Ray", magic, None)
    bg = dl.query(SQL, namespace=namespace(), background=True).result(timeout=240)
    step("dl.query(background=True), second call", bg, q)
    step("dl.query in the foreground", dl.query(SQL, namespace=namespace()), q)
    ray.shutdown()
    from dni_lab.widgets.query_builder import QueryBuilder

    qb = QueryBuilder(model(), [paren, position], {"texts": RECORDS}, cluster="local",
                      workers=WORKERS)  # fmt: skip
    built = qb.start().result(timeout=240)  # the form's run thread starts Ray
    assert built.height > 0 and built["unit_score"].is_not_null().any()
    print("ok QueryBuilder.start() after ray.shutdown() starts Ray", flush=True)
    step("a foreground call after the query builder's", inspect_fg(), first)
    index = dl.examples.NeuronIndex("lstm", ratio=0.2, n_partitions=4, batch_size=16,
                                    device="cpu")  # fmt: skip
    index.fit(model(), RECORDS, cluster=WORKERS)
    assert index.mai_ids_.shape[0] > 0
    print("ok NeuronIndex.fit, a third call", flush=True)
    step("background=True, a fourth call", inspect_bg(), first)
    one = scores(dl.inspect(model(), [paren, position], ["corr"], RECORDS, **OPTS))
    # one process folds the blocks in turn, the cluster merges block states computed by
    # workers with their own thread counts (float32 products round differently): equal
    # to float32 precision over the symbols summed, not bit for bit (1.3e-7 seen)
    a, b = one["unit_score"].to_numpy(), first["unit_score"].to_numpy()
    symbols = sum(map(len, RECORDS))
    assert_close_f32(a, b, reduction=symbols, equal_nan=True, msg=f"{one.height} {first.height}")


if __name__ == "__main__":
    {"session": session}[sys.argv[1]]()
    print("alive", flush=True)
