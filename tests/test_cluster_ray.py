"""One inspection sharded over a local Ray (2 workers): the same frame as one process,
early stopping included; generator data; Stop; a worker killed mid-run; worker errors.

One Ray and one pair of worker actors serve the whole module (start-up costs seconds).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from tolerances import assert_close_f32

import dni_lab as dl
from dni_lab.backend.cluster.shards import payload_bytes
from dni_lab.backend.engine.inspection import Inspection
from dni_lab.backend.engine.params import InspectParams
from dni_lab.backend.errors import HypothesisError
from dni_lab.backend.measures.corr import Corr
from dni_lab.backend.measures.logreg import LogReg

ray = pytest.importorskip("ray")

KEYS = ["mid", "uid", "hid", "measure"]
WORKERS = 2
#: symbols of the longest record random_records draws: scores sum over records x this
LONGEST = 24


@pytest.fixture(scope="module", autouse=True)
def _one_ray_per_module():
    yield
    from dni_lab.backend.cluster import shutdown

    shutdown()


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


@dl.hypothesis
def never(r):
    return [0] * len(r)


def _both(hyps, measures, data, provenance=False, **kw):
    """The frame of one process and of the cluster, same arguments (and their provenance)."""
    one = dl.inspect(_model(), hyps, measures, data() if callable(data) else data, **kw)
    many = dl.inspect(
        _model(), hyps, measures, data() if callable(data) else data, cluster=WORKERS, **kw
    )
    if provenance:
        return one.sort(KEYS), many.sort(KEYS), dl.provenance(one), dl.provenance(many)
    return one.sort(KEYS), many.sort(KEYS)


def assert_same_frame(a: pl.DataFrame, b: pl.DataFrame, f1_tol: float = 0.01) -> None:
    assert a.select(KEYS).equals(b.select(KEYS))
    for col in ("reason", "converged", "n_records"):
        assert a[col].to_list() == b[col].to_list(), col
    for col in ("unit_score", "group_score", "err"):
        assert a[col].is_null().to_list() == b[col].is_null().to_list(), col
    probe = (a["measure"] == "logreg").to_numpy()
    # workers fold blocks with their own thread counts: float32 sums in another order
    symbols = int(a["n_records"].max() or 1) * LONGEST
    for col in ("unit_score", "err"):
        x, y = a[col].fill_null(0).to_numpy(), b[col].fill_null(0).to_numpy()
        assert_close_f32(x[~probe], y[~probe], reduction=symbols, msg=col)
    gx, gy = a["group_score"].fill_null(0).to_numpy(), b["group_score"].fill_null(0).to_numpy()
    assert_close_f32(gx[~probe], gy[~probe], reduction=symbols)
    assert np.abs(gx - gy)[probe].max(initial=0) <= f1_tol


def test_cluster_frame_equals_one_process_frame():
    measures = ["corr", "logreg", "mi", "iou", "diffmeans"]
    a, b = _both([paren, position, never], measures, random_records(160), eps=None,
                 block_size=24, cache=False)  # fmt: skip
    assert a["reason"].str.contains("constant").any()  # null scores with a reason agree too
    probe = pl.col("measure") == "logreg"
    assert a.filter(probe)["group_score"].drop_nulls().len() > 0
    assert_same_frame(a, b)
    # logreg's states are updated by the driver from the workers' blocks, in order: its
    # coefficients agree too, not only its F1
    x, y = (f.filter(probe)["unit_score"].fill_null(0).to_numpy() for f in (a, b))
    assert_close_f32(x, y, reduction=160 * LONGEST)


@pytest.mark.parametrize("other", [None, "logreg", "diffmeans", "sampled"])
def test_early_stopping_decides_on_merged_states_as_one_process(other):
    corr = Corr(group_records=4, buckets=8)  # an error after 32 records, so it can stop
    probe = other in ("logreg", "sampled")
    # logreg scores binary hypotheses only: a continuous one would keep it reading
    hyps = [paren] if probe else [paren, position]
    extra = LogReg(max_rows=300) if other == "sampled" else other
    measures = [corr] if other is None else [corr, extra]
    # the probes of these untrained units (F1 near 0.46 on two of the three layers) have
    # refit errors near 0.07 after 1,000 records: eps 0.1 lets them settle in 1,500
    eps = 0.1 if other == "logreg" else 0.05
    a, b, pa, pb = _both(hyps, measures, random_records(1500, seed=3), True, eps=eps,
                         block_size=40, cache=False)  # fmt: skip
    # pairs froze early (the corr-only run stops reading early, too) ...
    assert (a["n_records"] < 1500).any() and a["converged"].any()
    if probe:
        assert (a.filter(pl.col("measure") == "logreg")["n_records"] < 1500).any()
    if other == "sampled":  # its sample filled: the holder stopped it, the driver knows
        assert "max_rows=300" in pa["measure_stops"]["logreg"]
    else:  # corr stops where it stops alone, though diffmeans reads every record
        assert a.filter(pl.col("measure") == "corr")["n_records"].max() < 1500
    assert_same_frame(a, b)  # ... at the same block, with the same scores and errors
    for key in ("records_read", "stopped_early", "measure_stops"):  # the same stop point
        assert pa.get(key) == pb.get(key), key
    assert pa["stopped_early"] == (other != "diffmeans")


def test_stopping_inside_a_batch_of_late_shards_is_not_reading_to_the_end(monkeypatch):
    """A worker slow to start holds shard 0 while the other reads every later shard: the
    driver then merges them all in one batch, and stops inside it. Records after the stop
    were never merged, so the run stopped early: no open pair may count as converged."""
    from dni_lab.backend.cluster import pool as driver_pool

    wait, held, others = driver_pool.Pool.wait, [], []

    def shard_0_last(pool, insp):  # shard 0's result is handed over after all the others
        while True:
            got = wait(pool, insp)
            held.extend(g for g in got if g[0] == 0)
            out = [g for g in got if g[0] != 0]
            others.extend(i for i, _ in out)
            if held and not pool.inflight:
                out, held[:] = out + held, []
            if out or not pool.inflight:
                return out

    monkeypatch.setattr(driver_pool.Pool, "wait", shard_0_last)
    corr = Corr(group_records=4, buckets=8)
    a, b, pa, pb = _both([paren, position], [corr], random_records(1500, seed=3), True,
                         eps=0.05, block_size=40, cache=False)  # fmt: skip
    assert len(others) == 1500 // 40  # every later shard was in before shard 0
    assert pa["records_read"] < 1500 and pa["stopped_early"]
    for key in ("records_read", "total_records", "stopped_early"):
        assert pb[key] == pa[key], key
    assert b["reason"].str.contains("left open").any()  # the pair the test is about
    assert_same_frame(a, b)


@pytest.mark.parametrize("measures", [["corr"], ["corr", "diffmeans"]])
def test_early_stopping_sends_the_driver_settled_pairs_not_states(measures):
    corr = Corr(group_records=4, buckets=8)
    recs = random_records(1500, seed=3)
    params = InspectParams(eps=0.05, block_size=40, cache=False, cluster=WORKERS)
    ms = [corr if m == "corr" else m for m in measures]
    insp = Inspection(_model(), [paren, position], ms, recs, params=params)
    frame = insp.run()
    # every state lives on the holder, which runs the convergence check itself
    assert all(type(s.measure).__name__ == "Held" for s in insp.states)
    one = Inspection(_model(), [paren, position], ms, recs, params=params.replace(cluster=None))
    assert_same_frame(one.run().sort(KEYS), frame.sort(KEYS))
    assert insp.progress.records_read == one.progress.records_read
    assert [s.stopped_at for s in insp.states] == [s.stopped_at for s in one.states]
    stats = insp.cluster_stats
    units = len(insp.states[0].columns)
    read = recs[: insp.progress.records_read]
    behaviors = 4 * units * sum(len(r) for r in read) / insp.progress.blocks
    # the driver received a corr state per block before (its filled buckets, a share of this)
    corr_state = payload_bytes(one.states[0].accumulator)
    per_block = stats["bytes_received"] / stats["shards_received"]
    assert per_block < 0.01 * behaviors, (per_block, behaviors)
    assert per_block < 0.05 * corr_state, (per_block, corr_state)


def test_workers_read_their_own_blocks_of_files_and_a_ray_dataset(tmp_path, monkeypatch):
    from test_sources import write_files

    from dni_lab.backend.engine.sources import Part

    recs = random_records(120, seed=5)
    kw = {"eps": None, "block_size": 24, "cache": False}
    one = dl.inspect(_model(), [paren, position], ["corr", "logreg"], recs, **kw)
    sha = dl.provenance(one)["data_sha256"]
    files = write_files(tmp_path, recs)
    reads: list[int] = []  # the blocks this process (the driver) reads itself
    read = Part.read
    monkeypatch.setattr(Part, "read", lambda part: reads.append(part.first) or read(part))
    cases = [(files["parquet"], "text"), (files["arrow"], None), (files["text"], None),
             (files["dir"], None)]  # fmt: skip
    for i, (data, column) in enumerate(cases):
        if i == 1:  # a Ray Dataset, once Ray runs: its blocks stay in the object store
            cases.append((ray.data.from_items([{"text": r} for r in recs]), "text"))
        reads.clear()
        many = dl.inspect(_model(), [paren, position], ["corr", "logreg"], data, column=column,
                          cluster=WORKERS, **kw)  # fmt: skip
        assert reads == [0], data  # block 0 resolves the units; workers read the rest
        assert_same_frame(one.sort(KEYS), many.sort(KEYS))
        assert dl.provenance(many)["data_sha256"] == sha, data
    solo = dl.inspect(_model(), [paren, position], ["corr", "logreg"], cases[-1][0],
                      column="text", **kw)  # a Dataset in one process: the same blocks  # fmt: skip
    assert_same_frame(one.sort(KEYS), solo.sort(KEYS))
    assert dl.provenance(solo)["data_sha256"] == sha


def test_logreg_blocks_and_states_read_to_the_end_go_to_a_holder_not_to_the_driver():
    recs = random_records(240, seed=7)
    params = InspectParams(eps=None, block_size=24, cache=False, cluster=WORKERS)
    insp = Inspection(_model(), [paren], ["logreg", "corr"], recs, params=params)
    insp.run()
    stats = insp.cluster_stats
    units = sum(len(s.columns) for s in insp.states)
    behaviors = 4 * units * sum(len(r) for r in recs)  # float32, every symbol of every unit
    # before the holder the driver received every behavior of logreg (100%) and corr's
    # state per block; now the final results only
    assert 0 < stats["bytes_received"] < 0.1 * behaviors, (stats, behaviors)
    assert all(type(s.measure).__name__ == "Held" for s in insp.states)
    one = Inspection(_model(), [paren], ["logreg", "corr"], recs,
                     params=params.replace(cluster=None))  # fmt: skip
    assert_same_frame(one.run().sort(KEYS), insp.frame(final=True).sort(KEYS))  # kept result


def test_idle_workers_hold_no_cpu_so_the_users_own_task_runs():
    run = dl.inspect(_model(), [paren], ["corr"], random_records(40), eps=None, block_size=20,
                     cache=False, cluster=WORKERS, background=True)  # fmt: skip
    run.result(timeout=120)
    alive = ray.get([a.pid.remote() for a in run.inspection.cluster_workers], timeout=60)
    assert len(alive) == WORKERS  # the workers are kept for the next run ...
    total = ray.cluster_resources()["CPU"]
    deadline = time.monotonic() + 60  # a finished task's CPUs come back asynchronously
    while ray.available_resources().get("CPU") != total and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU") == total  # ... yet hold none of the CPUs

    @ray.remote(num_cpus=total)
    def users_task():  # needs every CPU: it could not start while a worker held one
        return "ran"

    assert ray.get(users_task.remote(), timeout=120) == "ran"


def test_a_run_tells_the_autoscaler_its_demand_and_withdraws_it(monkeypatch):
    import ray.autoscaler.sdk as sdk

    asked = []
    monkeypatch.setattr(sdk, "request_resources", lambda bundles=None, **kw: asked.append(bundles))
    run = dl.inspect(_model(), [paren], ["corr"], random_records(40), eps=None, block_size=20,
                     cache=False, cluster=WORKERS, background=True)  # fmt: skip
    run.result(timeout=120)
    threads = max(1, int(ray.cluster_resources()["CPU"] // WORKERS))
    assert asked == [[{"CPU": float(threads)}] * WORKERS, []], asked


def test_generator_data_is_dealt_in_order(tmp_path):
    recs = random_records(130, seed=5)
    cache = dl.HypothesisCache(tmp_path / "hyps")  # workers open the same directory
    a, b = _both([paren, position], ["corr"], lambda: (r for r in recs), eps=None,
                 block_size=16, cache=cache, max_records=100)  # fmt: skip
    assert a["n_records"].max() == 100
    assert_same_frame(a, b)
    assert cache.hits > 0 or any((tmp_path / "hyps").iterdir())


def test_progress_and_live_frame_stream_in_shard_order():
    seen = []
    run = dl.inspect(_model(), [paren], ["corr"], random_records(120), eps=None,
                     block_size=20, cache=False, cluster=WORKERS, background=True)  # fmt: skip
    run.on_block(lambda r: seen.append((r.progress.records_read, r.frame.height,
                                        r.progress.cluster_text)))  # fmt: skip
    frame = run.result(timeout=120)
    reads = [n for n, _, _ in seen]
    assert reads == sorted(reads) and reads[-1] == 120
    assert any(h > 0 for n, h, _ in seen if n < 120)  # a live frame before the end
    assert frame["converged"].all()
    # the live header names the cluster while it runs; provenance keeps its counts
    workers = len(run.inspection.cluster_workers)
    want = f"Ray: 1 node, {workers} worker" + ("" if workers == 1 else "s")
    assert all(text == want for _, _, text in seen), seen
    from dni_lab.widgets._status import progress_line, run_status

    assert progress_line({**run_status(run), "state": "done"}).endswith(want)
    prov = dl.provenance(frame)["cluster"]
    assert (prov["nodes"], prov["workers"], prov["shards_redealt"], prov["lost_nodes"]) == (
        1, workers, 0, 0)
    assert prov["shards_received"] == 6 and prov["ray_log"]


def _slow(r):
    time.sleep(0.02)
    return [c in "()" for c in r]


def test_stop_cancels_every_worker_within_seconds():
    insp = Inspection(_model(), [_slow], ["corr"], random_records(600), params=InspectParams(
        eps=None, block_size=10, cache=False, cluster=WORKERS))  # fmt: skip
    run = dl.backend.engine.run.start_run(insp)
    deadline = time.time() + 120
    while insp.progress.blocks < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert insp.progress.blocks >= 1
    t0 = time.perf_counter()
    run.cancel()
    assert run.wait(10)
    assert time.perf_counter() - t0 < 5
    frame = run.result()
    assert insp.progress.cancelled and not frame["converged"].all()
    assert 0 < frame["n_records"].max() < 600
    # read to the end, corr's states live on the holder: the Stop still gets their scores
    assert frame["unit_score"].drop_nulls().len() > 0
    for actor in insp.cluster_workers:  # Stop killed them: nothing keeps reading
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.pid.remote(), timeout=30)


def test_a_killed_worker_is_retried_without_changing_the_answer():
    recs = random_records(200, seed=9)
    params = InspectParams(eps=None, block_size=10, cache=False, cluster=WORKERS)
    warm = Inspection(_model(), [paren], ["corr"], recs[:20], params=params)
    warm.run()  # the module's actors exist now; note their processes
    pids = ray.get([a.pid.remote() for a in warm.cluster_workers], timeout=60)
    killed = []

    def kill_once(insp):
        if not killed:  # shards are in flight on both workers now
            os.kill(pids[-1], signal.SIGKILL)
            killed.append(pids[-1])

    hyps = [_slow, position]
    insp = Inspection(_model(), hyps, ["corr", "diffmeans"], recs, params=params)
    b = insp.run(on_block=kill_once).sort(KEYS)
    after = ray.get([a.pid.remote() for a in insp.cluster_workers], timeout=60)
    assert killed and killed[0] not in after  # that worker really died and was restarted
    a = dl.inspect(_model(), hyps, ["corr", "diffmeans"], recs, eps=None, block_size=10,
                   cache=False).sort(KEYS)  # fmt: skip
    assert_same_frame(a, b)


def test_a_worker_error_surfaces_as_the_one_process_error():
    def broken(r):
        if r.startswith("a"):
            raise ValueError("no records starting with a")
        return [0.0] * len(r)

    recs = ["bcd"] * 50 + ["abc"] + ["bcd"] * 20
    with pytest.raises(HypothesisError) as one:
        dl.inspect(_model(), [broken], ["corr"], recs, block_size=16, cache=False)
    with pytest.raises(HypothesisError) as many:
        dl.inspect(_model(), [broken], ["corr"], recs, block_size=16, cache=False,
                   cluster=WORKERS)  # fmt: skip
    assert str(many.value) == str(one.value) and "50" in str(one.value)


def test_a_query_runs_on_the_cluster_from_its_with_options(monkeypatch):
    import dni_lab.backend.engine.inspection as engine

    sharded = []
    real = engine.sharded_run
    monkeypatch.setattr(engine, "sharded_run", lambda i, cb: sharded.append(1) or real(i, cb))
    recs = random_records(90, seed=11)
    ns = {"lm": _model(), "texts": recs, "hyps": [paren, position]}
    sql = "SELECT * INSPECT lm AND hyps OVER texts WITH (eps = NULL, block_size = 16, {})"
    one = dl.query(sql.format("cluster = NULL"), namespace=ns)
    many = dl.query(sql.format(f"cluster = 'local', workers = {WORKERS}"), namespace=ns)
    assert sharded == [1]  # only the query WITH a cluster ran on it
    assert_same_frame(one.sort(KEYS), many.sort(KEYS))


def test_neuron_index_fit_sharded_equals_one_process():
    recs = random_records(300, seed=13)
    make = lambda: dl.examples.NeuronIndex("lstm", ratio=0.1, n_partitions=8,  # noqa: E731
                                           batch_size=32, device="cpu")  # fmt: skip
    one = make().fit(_model(), recs)
    many = make().fit(_model(), recs, cluster=WORKERS)
    for name in ("mai_ids_", "partitions_"):
        np.testing.assert_array_equal(getattr(one, name), getattr(many, name))
    for name in ("mai_values_", "lower_", "upper_"):  # LSTM activations, 8 units, 24 steps
        assert_close_f32(getattr(one, name), getattr(many, name), reduction=8 * LONGEST, msg=name)
    assert (one.address_, one.digest_) == (many.address_, many.digest_)
    with pytest.raises(dl.DNIError, match="lstm9"):  # a worker's error, as one process says it
        dl.examples.NeuronIndex("lstm9", device="cpu").fit(_model(), recs, cluster=WORKERS)


def test_permutation_test_sharded_gives_the_same_p_values(monkeypatch):
    import dni_lab.backend.verify.stats as vstats

    monkeypatch.setattr(vstats, "_CHUNK_BYTES", 40_000)  # 5 chunks of 12 permutations
    # Few records, so that p-values spread well above the 1/61 floor: with 120 records most
    # sat at the floor and whether a 4th distinct value showed up hung on one near-tie,
    # which the CPU's float rounding decided.
    recs = random_records(60, seed=17, lo=4, hi=10)
    kw = {"units": [("lstm", "*")], "n_permutations": 60, "device": "cpu", "seed": 3}
    one = dl.verify.permutation_test(_model(), [paren, position], recs, **kw)
    many = dl.verify.permutation_test(_model(), [paren, position], recs, cluster=WORKERS, **kw)
    assert one["p_value"].n_unique() > 3  # a real spread of p-values, not all 1
    assert one["p_value"].to_list() == many["p_value"].to_list()
    assert one["q_value"].to_list() == many["q_value"].to_list()


def test_an_unpicklable_hypothesis_is_named_before_any_worker_runs():
    import threading

    lock = threading.Lock()

    def locked(r):
        with lock:
            return [0.0] * len(r)

    with pytest.raises(dl.DNIError, match="cannot send the inspection to Ray workers"):
        dl.inspect(_model(), [locked], ["corr"], random_records(20), cache=False,
                   cluster=WORKERS)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("eps", [None, 0.1])  # 0.1: the probe settles before 2,000 records
def test_sharded_equals_one_process_at_64_units_and_2000_records_through_ray(eps):
    """Issue 34 target 7: not a replay of the merge in one process but real workers on a
    local Ray, at 64 units x 2,000 records: the same frame (float32 reduction tolerance,
    the promise is 1e-6 on scores), the same records read and the same data hash."""
    recs = random_records(2000, seed=11)
    kw = {"eps": eps, "block_size": 100, "cache": False}

    def lm() -> dl.Model:
        torch.manual_seed(0)
        return dl.Model(CharLM(hidden=64), encode=encode_chars, name="toy64")

    # the probe's loadings: its L1 coefficients on ``paren`` (separable, F1 1.0) have a
    # near-singular Hessian, whose record-group error moved 0.093 -> 0.068 with the float
    # rounding of the workers' activations, and one pair settled a block apart
    measures = [Corr(group_records=4, buckets=8), LogReg(unit_score="loading")]
    one = dl.inspect(lm(), [paren, position], measures, recs, **kw)
    many = dl.inspect(lm(), [paren, position], measures, recs, cluster=WORKERS, **kw)
    pa, pb = dl.provenance(one), dl.provenance(many)
    a, b = one.sort(KEYS), many.sort(KEYS)
    assert a.filter(pl.col("measure") == "corr")["uid"].n_unique() >= 64
    for key in ("records_read", "stopped_early", "data_sha256"):
        assert pa[key] == pb[key], key
    if eps is not None:
        assert pa["records_read"] < 2000  # it stopped early, at the same block
    assert_same_frame(a, b)
    corr = (pl.col("measure") == "corr") & pl.col("unit_score").is_not_null()
    x, y = (f.filter(corr)["unit_score"].to_numpy() for f in (a, b))
    assert x.size >= 64 and np.abs(x - y).max() <= 1e-6
