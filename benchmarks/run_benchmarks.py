"""DeepBase's scalability benchmark (§6.3) on this machine, side by side with its baselines.

Usage::

    python benchmarks/run_benchmarks.py            # the paper's size (long: see below)
    python benchmarks/run_benchmarks.py --quick    # smoke test, well under a minute

The workload is DeepBase's default: a character LSTM of 512 units over windows
of 30 characters of SQL queries, 190 hypotheses, 29,696 records (890,880
symbols). In one run it reports:

1. ``corr`` inspection time vs the bare matrix product UᵀH on the same behaviors;
2. ``corr`` vs the paper's baseline: dense behavior tables in a real PostgreSQL
   server, ``corr()`` aggregates batched 1,600 per ``SELECT``;
3. the merged ``logreg`` probe vs scikit-learn, one model per hypothesis, at
   equal F1;
4. end to end with early stopping vs a full scan: records read and time;
5. peak memory with 1x and 4x the records, each size in its own process.

Where a baseline would run for hours it runs on a measured subset and is
extrapolated linearly; the table and the JSON say so next to the number, and
the linearity is measured (two sizes) rather than assumed. Results go to
``benchmarks/results/<name>.json``. Targets are printed as information: this
script asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make dni_lab, hypotheses, benchmarks importable
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dni_lab as dl  # noqa: E402
from benchmarks import pg_baseline as pgb  # noqa: E402
from benchmarks.results_io import cpu_model  # noqa: E402
from benchmarks.workload import Workload, build_workload  # noqa: E402
from dni_lab.backend.engine.resolve import as_families  # noqa: E402
from dni_lab.backend.hypothesis.hypotheses import hypothesis_block  # noqa: E402
from dni_lab.backend.measures.base import HypothesisInfo, Measure  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


@dataclass(frozen=True)
class Config:
    """One benchmark size.

    Attributes
    ----------
    name : str
        Result file stem.
    n_records, hidden, n_hyps : int
        Records (30-symbol windows), LSTM units, hypotheses.
    block_size : int
        Records per block, as DeepBase's 512.
    eps : float
        Early-stopping threshold (DeepBase's default 0.025).
    repeats : int
        Repetitions of the short timings (the best is reported).
    pg_batches : int or None
        Full ``corr()`` batches to time in PostgreSQL (None: all of them).
    pg_small_exprs : int
        Size of the extra, smaller batch that measures cost per expression.
    pg_rows_fraction : float
        Share of rows of the second table size that measures cost per row.
    sk_hyps : int
        Hypotheses that scikit-learn fits (extrapolated to all of them).
    sk_solver : str
        scikit-learn solver for the per-hypothesis probes.
    memory_factor : int
        The memory test compares ``n_records`` with ``memory_factor * n_records``.
    quick : bool
        Smoke-test size (also selects the quick model of the workload).
    """

    name: str
    n_records: int
    hidden: int
    n_hyps: int = 190
    block_size: int = 512
    eps: float = 0.025
    repeats: int = 3
    pg_batches: int | None = None
    pg_small_exprs: int = 400
    pg_rows_fraction: float = 0.25
    sk_hyps: int = 3
    sk_solver: str = "liblinear"
    memory_factor: int = 4
    quick: bool = False


FULL = Config("full", n_records=29_696, hidden=512, pg_batches=2, sk_hyps=3)
# Small enough for CI (< 60 s on 2 idle cores); PostgreSQL runs 2 of its batches and is
# extrapolated like the full size, so the extrapolation code is exercised too.
QUICK = Config(
    "quick",
    n_records=512,
    hidden=64,
    repeats=2,
    pg_batches=2,
    pg_small_exprs=200,
    sk_hyps=2,
    quick=True,
)


# ---------------------------------------------------------------------------------------
# Behaviors, extracted without the engine (the baselines' input)
# ---------------------------------------------------------------------------------------


@dataclass
class Behaviors:
    """Unit and hypothesis behaviors of a workload, per block and flattened."""

    U: list[torch.Tensor]  # (R, T, n_units) float32 per block
    H: list[torch.Tensor]  # (R, T, n_hyps) float32 per block
    mask: list[torch.Tensor]  # (R, T) bool per block
    info: list[HypothesisInfo]
    extract_s: float
    hypotheses_s: float

    def flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, n_units)`` and ``(N, n_hyps)``: the real symbols of every block."""
        U = torch.cat([u[m] for u, m in zip(self.U, self.mask, strict=True)])
        H = torch.cat([h[m] for h, m in zip(self.H, self.mask, strict=True)])
        return U.contiguous(), H.contiguous()


@torch.inference_mode()
def extract_units(wl: Workload, records: list[Any], block_size: int) -> tuple[list, list, float]:
    """Run the model block by block and keep the hidden states of ``wl.layer``.

    A plain forward hook, the least any DNI system must do to see the units:
    the bare baseline of item 1.
    """
    store: dict[str, torch.Tensor] = {}

    def hook(_mod: Any, _inp: Any, out: Any) -> None:
        store["h"] = out[0] if isinstance(out, tuple) else out

    handle = wl.module.get_submodule(wl.layer).register_forward_hook(hook)
    Us, masks = [], []
    t0 = time.perf_counter()
    try:
        for b in range(0, len(records), block_size):
            recs = records[b : b + block_size]
            wl.module(wl.encode(recs))
            n = torch.tensor([len(r) for r in recs])
            masks.append(torch.arange(int(n.max()))[None, :] < n[:, None])
            Us.append(store.pop("h")[:, : masks[-1].shape[1]].float().contiguous())
    finally:
        handle.remove()
    return Us, masks, time.perf_counter() - t0


def behaviors(wl: Workload, records: list[Any], block_size: int) -> Behaviors:
    """Unit behaviors (model forward) and hypothesis behaviors (the engine's own evaluator)."""
    Us, masks, t_u = extract_units(wl, records, block_size)
    fams, info = as_families(wl.hypotheses)
    Hs = []
    t0 = time.perf_counter()
    for b, m in zip(range(0, len(records), block_size), masks, strict=True):
        recs = records[b : b + block_size]
        n_sym = m.sum(1).tolist()
        Hs.append(torch.from_numpy(hypothesis_block(fams, recs, n_sym, b, None)))
    return Behaviors(Us, Hs, masks, info, t_u, time.perf_counter() - t0)


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Fastest of ``repeats`` runs (seconds) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def model_of(wl: Workload) -> dl.Model:
    return dl.Model(wl.module, encode=wl.encode, name="sql-lstm")


def inspect(wl: Workload, records: list[Any], measures: list[Any], eps: float | None, **kw: Any):
    """``dl.inspect`` on the workload's layer; returns (frame, seconds)."""
    t0 = time.perf_counter()
    frame = dl.inspect(
        models=[model_of(wl)],
        hypotheses=wl.hypotheses,
        measures=measures,
        data=records,
        units=[(wl.layer, "*")],
        eps=eps,
        block_size=kw.pop("block_size", 512),
        device="auto",
        **kw,
    )
    return frame, time.perf_counter() - t0


def score_matrix(
    frame: Any, n_units: int, hids: list[str], column: str = "unit_score"
) -> np.ndarray:
    """``(n_units, n_hyps)`` matrix of one score column of a single-measure frame."""
    idx = {h: j for j, h in enumerate(hids)}
    out = np.full((n_units, len(hids)), np.nan)
    units = frame["unit"].to_numpy()
    cols = np.array([idx[h] for h in frame["hid"].to_list()])
    vals = frame[column].to_numpy().astype(np.float64)
    out[units, cols] = vals
    return out


# ---------------------------------------------------------------------------------------
# 1. corr vs the bare product
# ---------------------------------------------------------------------------------------


def run_measure(measure: Measure, bh: Behaviors) -> Any:
    """Stream every block of ``bh`` through ``measure``; returns its result."""
    st = measure.start(bh.U[0].shape[-1], bh.H[0].shape[-1], "cpu", bh.info)
    for U, H, m in zip(bh.U, bh.H, bh.mask, strict=True):
        st = measure.update(st, U, H, m)
    return measure.result(st)


def bench_corr_vs_product(bh: Behaviors, cfg: Config) -> dict[str, Any]:
    """Item 1: the ``corr`` measure over pre-extracted blocks vs one GEMM UᵀH."""
    from dni_lab.backend.measures.corr import Corr

    Uf, Hf = bh.flat()
    t_corr, res = best_of(lambda: run_measure(Corr(), bh), cfg.repeats)
    t_mm, _ = best_of(lambda: torch.mm(Uf.T, Hf), cfg.repeats)
    # Exactness on a column subset (the float64 reference of all pairs costs more than the run).
    cols = np.arange(0, Uf.shape[1], max(1, Uf.shape[1] // 32))
    ref = pgb.numpy_corr(Uf[:, cols].numpy(), Hf.numpy())
    err = float(np.nanmax(np.abs(res.unit_score[cols] - ref)))
    return {
        "symbols": int(Uf.shape[0]),
        "units": int(Uf.shape[1]),
        "hypotheses": int(Hf.shape[1]),
        "corr_measure_s": t_corr,
        "bare_product_s": t_mm,
        "ratio": t_corr / t_mm,
        "gflops_bare": 2 * Uf.shape[0] * Uf.shape[1] * Hf.shape[1] / t_mm / 1e9,
        "max_abs_diff_vs_numpy": err,
        "corr": res.unit_score,
    }


# ---------------------------------------------------------------------------------------
# 2. corr vs PostgreSQL
# ---------------------------------------------------------------------------------------


def bench_postgres(bh: Behaviors, corr: np.ndarray, cfg: Config) -> dict[str, Any]:
    """Item 2: DeepBase §5.1's dense tables and batched ``corr()`` in a real PostgreSQL.

    The full-size run times ``cfg.pg_batches`` full batches (every row, 1,600
    expressions each) plus one smaller batch, fits ``t = a + b * expressions``
    and sums the fit over every planned batch. A second, smaller table pair
    measures cost per row. With ``pg_batches=None`` every batch runs and the
    extrapolation from the first batches is reported next to the measured
    total, which checks the extrapolation itself.
    """
    Uf, Hf = (x.numpy() for x in bh.flat())
    out: dict[str, Any] = {}
    with pgb.PostgresServer() as srv, srv.connect() as conn:
        out["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
        out["settings"] = srv.settings
        t0 = time.perf_counter()
        up = pgb.load_dense(conn, "unitsb_dense", Uf, "u")
        hp = pgb.load_dense(conn, "hyposb_dense", Hf, "h")
        out["load_s"] = time.perf_counter() - t0
        out["table_bytes"] = int(
            conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "WHERE relname LIKE '%sb_dense_%'"
            ).fetchone()[0]
        )
        pairs = pgb._all_pairs(Uf.shape[1], Hf.shape[1])
        plan = pgb.plan_batches(pairs, up, hp)
        sizes = np.array([len(p) for _, _, p in plan])
        n_run = len(plan) if cfg.pg_batches is None else min(cfg.pg_batches, len(plan))
        pg_corr, stats = pgb.corr_batched(conn, up, hp, pairs, max_batches=n_run)
        # One smaller batch (pairs from the last planned batch) gives the per-expression slope.
        small = plan[-1][2][: cfg.pg_small_exprs]
        _, small_stats = pgb.corr_batched(conn, up, hp, small)
        first = stats[: max(2, cfg.pg_batches or 2)]
        fit_x = np.array([s["n_exprs"] for s in first] + [len(small)])
        fit_y = np.array([s["seconds"] for s in first] + [small_stats[0]["seconds"]])
        b, a = np.polyfit(fit_x, fit_y, 1)
        predicted = float(np.sum(a + b * sizes))
        measured = float(sum(s["seconds"] for s in stats))
        complete = n_run == len(plan)
        # Rows: the same full batch on a table pair with a fraction of the rows.
        n_small = max(1000, int(len(Uf) * cfg.pg_rows_fraction))
        up_s = pgb.load_dense(conn, "unitsb_small", Uf[:n_small], "u")
        hp_s = pgb.load_dense(conn, "hyposb_small", Hf[:n_small], "h")
        _, rows_stats = pgb.corr_batched(conn, up_s, hp_s, plan[0][2])
    done = ~np.isnan(pg_corr)
    units_done = np.unique(np.nonzero(done)[0])
    ref = pgb.numpy_corr(Uf[:, units_done], Hf)
    sub = done[units_done]
    out.update(
        {
            "rows": len(Uf),
            "pairs": len(pairs),
            "batches_total": len(plan),
            "batches_run": n_run,
            "exprs_per_batch": int(sizes.max()),
            "batch_seconds": [s["seconds"] for s in stats],
            "small_batch": {"n_exprs": len(small), "seconds": small_stats[0]["seconds"]},
            "fit_seconds_per_batch": {"intercept": float(a), "per_expression": float(b)},
            "query_measured_s": measured,
            "query_total_s": measured if complete else predicted,
            "query_extrapolated_from_first_batches_s": predicted,
            "query_total_is_extrapolated": not complete,
            "rows_check": {
                "rows": [n_small, len(Uf)],
                "seconds": [rows_stats[0]["seconds"], stats[0]["seconds"]],
                "time_ratio": stats[0]["seconds"] / rows_stats[0]["seconds"],
                "rows_ratio": len(Uf) / n_small,
            },
            "max_abs_diff_vs_numpy": float(np.nanmax(np.abs(pg_corr[units_done] - ref)[sub])),
            "max_abs_diff_vs_dni_lab": float(np.nanmax(np.abs(pg_corr - corr)[done])),
        }
    )
    return out


# ---------------------------------------------------------------------------------------
# 3. merged logreg vs scikit-learn
# ---------------------------------------------------------------------------------------


def bench_logreg(bh: Behaviors, cfg: Config) -> dict[str, Any]:
    """Item 3: the merged L1 probe vs one scikit-learn model per hypothesis and fold.

    The merged measure streams every block (its time includes keeping its
    bounded row sample and all optimisation). scikit-learn then fits the
    hypotheses in ``cfg.sk_hyps`` (spread over the merged F1 range) on the very
    rows, folds and standardisation the merged probe used; its time is scaled
    to all hypotheses.
    """
    try:
        from dni_lab.backend.measures.logreg import LogReg
    except ImportError as exc:
        return {"skipped": f"dni_lab logreg measure not available ({exc})"}
    from benchmarks.sk_probe import sklearn_probe_f1

    measure = LogReg()
    t0 = time.perf_counter()
    st = measure.start(bh.U[0].shape[-1], bh.H[0].shape[-1], "cpu", bh.info)
    for U, H, m in zip(bh.U, bh.H, bh.mask, strict=True):
        st = measure.update(st, U, H, m)
    res = measure.result(st)
    t_merged = time.perf_counter() - t0
    f1 = np.asarray(res.group_score, dtype=np.float64)[0]
    # Binary hypotheses with a defined F1 (one output column each).
    out_of = {int(j): k for k, j in enumerate(st.out_hyp)}
    ok = [j for j in np.flatnonzero(np.isfinite(f1)) if bh.info[j].kind == "binary"]
    # Trivial probes (F1 0: never fires; F1 1: one character decides) say little
    # about solver agreement: take quantiles of the F1 range between them.
    inner = [j for j in ok if 0.05 < f1[j] < 0.99] or ok
    order = sorted(inner, key=lambda j: f1[j])
    q = (np.arange(min(cfg.sk_hyps, len(order))) + 0.5) / min(cfg.sk_hyps, len(order))
    pick = [order[int(i)] for i in np.floor(q * len(order))]
    cols = [out_of[j] for j in pick]
    sk = sklearn_probe_f1(
        st.X.numpy(), st.Y[:, cols].numpy(), st.fold.numpy(), C=measure.C, solver=cfg.sk_solver
    )
    n_scored = int(np.isfinite(f1).sum())
    sk_total = sk["seconds"] / len(pick) * n_scored
    diffs = np.abs(np.asarray(sk["f1"]) - f1[pick])
    return {
        "merged_s": t_merged,
        "hypotheses_scored": n_scored,
        "training_rows": len(st.X),
        "symbols_read": int(sum(int(m.sum()) for m in bh.mask)),
        "measure_params": measure.get_params(),
        "sklearn_hypotheses_fitted": [bh.info[j].name for j in pick],
        "sklearn_fitted_s": sk["seconds"],
        "sklearn_total_s": sk_total,
        "sklearn_total_is_extrapolated": len(pick) < n_scored,
        "sklearn_params": sk["params"],
        "f1_dni_lab": [float(f1[j]) for j in pick],
        "f1_sklearn": [float(v) for v in sk["f1"]],
        "max_abs_f1_diff": float(np.nanmax(diffs)),
        "ratio": sk_total / t_merged,
    }


# ---------------------------------------------------------------------------------------
# 4. early stopping end to end, and the engine against extraction + product
# ---------------------------------------------------------------------------------------


def bench_inspect(wl: Workload, bh: Behaviors, cfg: Config, bare_mm_s: float) -> dict[str, Any]:
    """Items 1b and 4: ``dl.inspect`` full scan vs early stopping, cold and warm caches."""
    n_units = bh.U[0].shape[-1]
    hids = [i.name for i in bh.info]
    mem = 8 << 30  # big enough that the warm run never misses

    # Cold runs compute every hypothesis (a fresh cache each); the first one
    # fills ``warm``, which the warm runs then read (DeepBase Fig. 8, right).
    warm = dl.HypothesisCache(directory=False, max_bytes=mem)
    cold_full, t_cold_full = inspect(wl, wl.records, ["corr"], None, cache=warm)
    cold_es, t_cold_es = inspect(
        wl, wl.records, ["corr"], cfg.eps, cache=dl.HypothesisCache(directory=False, max_bytes=mem)
    )
    _, t_warm_full = inspect(wl, wl.records, ["corr"], None, cache=warm)
    warm_es, t_warm_es = inspect(wl, wl.records, ["corr"], cfg.eps, cache=warm)

    r_full = score_matrix(cold_full, n_units, hids)
    r_es = score_matrix(cold_es, n_units, hids)
    both = np.isfinite(r_full) & np.isfinite(r_es)
    within = float(np.mean(np.abs(r_full - r_es)[both] <= cfg.eps)) if both.any() else float("nan")
    bare_pipeline = bh.extract_s + bare_mm_s
    return {
        "full_scan": {
            "seconds": t_cold_full,
            "records_read": int(cold_full["n_records"].max()),
        },
        "early_stop": {
            "seconds": t_cold_es,
            "records_read": int(cold_es["n_records"].max()),
            # Pairs that met eps before the data ended (the engine marks every pair
            # converged once all records are read, so the flag alone says little).
            "pairs_stopped_early": float((cold_es["n_records"] < len(wl.records)).mean()),
            "pairs_null": int(np.isnan(cold_es["unit_score"].to_numpy().astype(float)).sum()),
            "share_within_eps_of_full": within,
        },
        "warm_cache_full_scan_s": t_warm_full,
        "warm_cache_early_stop_s": t_warm_es,
        "warm_cache_early_stop_records": int(warm_es["n_records"].max()),
        "bare_pipeline_s": bare_pipeline,
        "bare_extract_s": bh.extract_s,
        "hypotheses_eval_s": bh.hypotheses_s,
        "warm_full_vs_bare_ratio": t_warm_full / bare_pipeline,
        "max_abs_diff_vs_measure": None,
        "r_full": r_full,
    }


# ---------------------------------------------------------------------------------------
# 5. peak memory, one process per size
# ---------------------------------------------------------------------------------------


def _proc_status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _proc_status_kb("VmHWM") is not None


def memory_child(cfg: Config, n_records: int) -> dict[str, Any]:
    """Run in a fresh process: one full-scan ``corr`` inspection of ``n_records``.

    The kernel's peak-RSS mark (VmHWM) is reset before building the workload
    and again before inspecting, so ``inspect_peak_mb`` is the peak *during*
    the inspection alone. ``ru_maxrss`` is not used where VmHWM works: Linux
    carries it over from the parent across fork and exec, so a child of a big
    benchmark process would report the parent's size.
    """
    import psutil

    reset = _reset_peak_rss()
    wl = build_workload(n_records, cfg.hidden, cfg.quick, cfg.n_hyps)
    build_peak_kb = _proc_status_kb("VmHWM") if reset else None
    rss0 = psutil.Process().memory_info().rss
    reset = _reset_peak_rss()
    frame, secs = inspect(wl, wl.records, ["corr"], None)
    hwm_kb = _proc_status_kb("VmHWM") if reset else None
    maxrss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "records": n_records,
        "records_read": int(frame["n_records"].max()),
        "seconds": secs,
        "build_peak_mb": build_peak_kb / 1024 if build_peak_kb else None,
        "rss_before_inspect_mb": rss0 / 2**20,
        "inspect_peak_mb": (hwm_kb or maxrss_kb) / 1024,
        "inspect_peak_source": "VmHWM reset before inspect" if hwm_kb else "ru_maxrss",
    }


def bench_memory(cfg: Config) -> dict[str, Any]:
    """Item 5: peak RSS of a full scan over 1x and ``memory_factor``x records."""
    out: dict[str, Any] = {"sizes": []}
    with tempfile.TemporaryDirectory(prefix="dni_lab_bench_cache_") as cache_dir:
        for factor in (1, cfg.memory_factor):
            n = cfg.n_records * factor
            env = {**os.environ, "DNI_LAB_CACHE": os.path.join(cache_dir, str(factor))}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", str(n)]
            cmd += ["--quick"] if cfg.quick else []
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
            if proc.returncode != 0:
                raise RuntimeError(f"memory child failed:\n{proc.stderr[-3000:]}")
            out["sizes"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    a, b = out["sizes"]
    out["peak_ratio"] = b["inspect_peak_mb"] / a["inspect_peak_mb"]
    out["inspect_growth_mb"] = [
        s["inspect_peak_mb"] - s["rss_before_inspect_mb"] for s in out["sizes"]
    ]
    out["cache"] = "default HypothesisCache (memory LRU + disk store in a temporary directory)"
    return out


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


def _fmt_s(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.3g} s" if x < 100 else f"{x:,.0f} s"


def table_rows(res: dict[str, Any]) -> list[dict[str, str]]:
    """The summary table: one row per comparison, ratios against their targets."""
    rows: list[dict[str, str]] = []

    def row(item: str, what: str, ours: str, base: str, ratio: str, target: str, met: Any) -> None:
        flag = "-" if met is None else ("yes" if met else "NO")
        rows.append(dict(item=item, what=what, dni_lab=ours, baseline=base, ratio=ratio,
                         target=target, met=flag))  # fmt: skip

    c = res.get("corr_vs_product", {})
    if "ratio" in c:
        row("1", "corr measure vs bare UᵀH (same behaviors)", _fmt_s(c["corr_measure_s"]),
            _fmt_s(c["bare_product_s"]), f"{c['ratio']:.2f}x", "<= 2x",
            c["ratio"] <= 2)  # fmt: skip
    i = res.get("inspect", {})
    if "warm_full_vs_bare_ratio" in i:
        row("1b", "dl.inspect full scan (hyps cached) vs forward+UᵀH",
            _fmt_s(i["warm_cache_full_scan_s"]), _fmt_s(i["bare_pipeline_s"]),
            f"{i['warm_full_vs_bare_ratio']:.2f}x", "info", None)  # fmt: skip
    p = res.get("postgres", {})
    if "query_total_s" in p and "ratio_query" in res:
        tag = " (extrapolated*)" if p["query_total_is_extrapolated"] else ""
        row("2", "PostgreSQL corr() batched vs corr measure", _fmt_s(c.get("corr_measure_s")),
            _fmt_s(p["query_total_s"]) + tag, f"{res['ratio_query']:,.0f}x", ">= 1000x",
            res["ratio_query"] >= 1000)  # fmt: skip
        row("2b", "PG extract+load+query vs dl.inspect (hyps cached)",
            _fmt_s(i.get("warm_cache_full_scan_s")), _fmt_s(res["pg_end_to_end_s"]) + tag,
            f"{res['ratio_end_to_end']:,.0f}x", "info", None)  # fmt: skip
    elif "error" in p or "skipped" in p:
        row("2", "PostgreSQL corr() batched", "-", p.get("error", p.get("skipped", ""))[:40],
            "-", ">= 1000x", None)  # fmt: skip
    lr = res.get("logreg", {})
    if "ratio" in lr:
        tag = " (extrapolated*)" if lr["sklearn_total_is_extrapolated"] else ""
        row("3", "sklearn L1 per hypothesis vs merged logreg", _fmt_s(lr["merged_s"]),
            _fmt_s(lr["sklearn_total_s"]) + tag, f"{lr['ratio']:.1f}x", ">= 20x",
            lr["ratio"] >= 20)  # fmt: skip
        row("3b", "F1 |dni_lab - sklearn| (max over fitted)", "", "",
            f"{lr['max_abs_f1_diff']:.3f}", "<= 0.02", lr["max_abs_f1_diff"] <= 0.02)  # fmt: skip
    else:
        row("3", "merged logreg vs sklearn", "-", lr.get("skipped", lr.get("error", ""))[:40],
            "-", ">= 20x", None)  # fmt: skip
    if "early_stop" in i:
        es, fs = i["early_stop"], i["full_scan"]
        row("4", "early stop (eps) vs full scan: time", _fmt_s(es["seconds"]),
            _fmt_s(fs["seconds"]), f"{fs['seconds'] / es['seconds']:.2f}x faster", "info",
            None)  # fmt: skip
        row("4b", "early stop vs full scan: records read", f"{es['records_read']:,}",
            f"{fs['records_read']:,}", f"{es['records_read'] / fs['records_read']:.2f}",
            "< 1", es["records_read"] < fs["records_read"])  # fmt: skip
        row("4c", "early stop: share of scores within eps of full", "", "",
            f"{es['share_within_eps_of_full']:.3f}", ">= 0.95",
            es["share_within_eps_of_full"] >= 0.95)  # fmt: skip
    m = res.get("memory", {})
    if "peak_ratio" in m:
        a, b = m["sizes"]
        row("5", f"peak RSS, {b['records'] // a['records']}x records vs 1x",
            f"{b['inspect_peak_mb']:,.0f} MB", f"{a['inspect_peak_mb']:,.0f} MB",
            f"{m['peak_ratio']:.2f}x", "< 1.3x", m["peak_ratio"] < 1.3)  # fmt: skip
    elif "error" in m:
        row("5", "peak memory", "-", m["error"][:40], "-", "< 1.3x", None)
    return rows


def render(rows: list[dict[str, str]]) -> str:
    """Plain-text table."""
    cols = ["item", "what", "dni_lab", "baseline", "ratio", "target", "met"]
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols} if rows else {}
    lines = ["  ".join(c.ljust(width[c]) for c in cols)]
    lines.append("  ".join("-" * width[c] for c in cols))
    lines += ["  ".join(r[c].ljust(width[c]) for c in cols) for r in rows]
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "load_average_at_start": list(os.getloadavg()),
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items() if not isinstance(v, np.ndarray)}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def guarded(name: str, fn: Callable[[], dict[str, Any]], log: Callable[[str], None]) -> dict:
    """Run one benchmark item; a failure is reported, not fatal for the others."""
    t0 = time.perf_counter()
    log(f"[{name}] ...")
    try:
        out = fn()
    except pgb.PostgresUnavailable as exc:
        out = {"skipped": str(exc)}
    except Exception as exc:
        traceback.print_exc()
        out = {"error": f"{type(exc).__name__}: {exc}"}
    log(f"[{name}] done in {time.perf_counter() - t0:.1f} s")
    return out


def run(cfg: Config, name: str, skip: set[str], log: Callable[[str], None] = print) -> dict:
    """Every item of the benchmark at size ``cfg``; returns the JSON-able result."""
    t_start = time.perf_counter()
    log(f"dni_lab benchmark '{name}': {cfg.n_records:,} records, {cfg.hidden} units")
    t0 = time.perf_counter()
    wl = build_workload(cfg.n_records, cfg.hidden, cfg.quick, cfg.n_hyps)
    build_s = time.perf_counter() - t0
    for k, v in wl.sources.items():
        log(f"  {k}: {v}")
    bh = behaviors(wl, wl.records, cfg.block_size)
    res: dict[str, Any] = {
        "name": name,
        "config": asdict(cfg),
        "environment": environment(),
        "workload": {
            **wl.sources,
            "records": len(wl.records),
            "symbols": int(sum(int(m.sum()) for m in bh.mask)),
            "units": int(bh.U[0].shape[-1]),
            "hypotheses": len(bh.info),
            "build_s": build_s,
            "model_meta": {k: v for k, v in wl.meta.items() if isinstance(v, (int, float, str))},
        },
    }
    log(
        f"  {res['workload']['symbols']:,} symbols x {res['workload']['units']} units x "
        f"{res['workload']['hypotheses']} hypotheses; forward {bh.extract_s:.1f} s, "
        f"hypotheses {bh.hypotheses_s:.1f} s"
    )
    c = guarded("1 corr vs UᵀH", lambda: bench_corr_vs_product(bh, cfg), log)
    res["corr_vs_product"] = c
    corr = c.get("corr")
    if "inspect" not in skip:
        res["inspect"] = guarded(
            "1b/4 dl.inspect", lambda: bench_inspect(wl, bh, cfg, c["bare_product_s"]), log
        )
        r_full = res["inspect"].get("r_full")
        if r_full is not None and corr is not None:
            res["inspect"]["max_abs_diff_vs_measure"] = float(np.nanmax(np.abs(r_full - corr)))
    if "postgres" not in skip and corr is not None:
        res["postgres"] = p = guarded("2 PostgreSQL", lambda: bench_postgres(bh, corr, cfg), log)
        if "query_total_s" in p:
            res["ratio_query"] = p["query_total_s"] / c["corr_measure_s"]
            res["pg_end_to_end_s"] = bh.extract_s + p["load_s"] + p["query_total_s"]
            t_ours = res.get("inspect", {}).get("warm_cache_full_scan_s")
            if t_ours:
                res["ratio_end_to_end"] = res["pg_end_to_end_s"] / t_ours
            else:
                res["ratio_end_to_end"] = float("nan")
    if "logreg" not in skip:
        res["logreg"] = guarded("3 logreg vs sklearn", lambda: bench_logreg(bh, cfg), log)
    if "memory" not in skip:
        res["memory"] = guarded("5 memory", lambda: bench_memory(cfg), log)
    res["table"] = table_rows(res)
    res["total_s"] = time.perf_counter() - t_start
    res["environment"]["load_average_at_end"] = list(os.getloadavg())
    return _jsonable(res)


def footnotes(res: dict[str, Any]) -> list[str]:
    """The notes printed under the table: what was extrapolated and how."""
    notes = []
    p = res.get("postgres", {})
    if p.get("query_total_is_extrapolated"):
        fit = p["fit_seconds_per_batch"]
        notes.append(
            f"* PostgreSQL: ran {p['batches_run']} of {p['batches_total']} full batches "
            f"({p['exprs_per_batch']} corr() each, all {p['rows']:,} rows) plus one of "
            f"{p['small_batch']['n_exprs']}; fit t = {fit['intercept']:.2f} s + "
            f"{fit['per_expression'] * 1e3:.2f} ms/expr, summed over all batches. Rows check: "
            f"{p['rows_check']['rows_ratio']:.1f}x rows -> "
            f"{p['rows_check']['time_ratio']:.2f}x time."
        )
    elif "query_total_s" in p:
        notes.append(
            f"  PostgreSQL: all {p['batches_total']} batches ran ({p['query_measured_s']:.2f} s); "
            f"extrapolating from the first ones would have said "
            f"{p['query_extrapolated_from_first_batches_s']:.2f} s. Rows check: "
            f"{p['rows_check']['rows_ratio']:.1f}x rows -> "
            f"{p['rows_check']['time_ratio']:.2f}x time."
        )
    if "load_s" in p:
        notes.append(
            f"  PostgreSQL load (binary COPY, {p['table_bytes'] / 2**20:,.0f} MiB of tables): "
            f"{p['load_s']:.1f} s, not in ratio 2."
        )
    es = res.get("inspect", {}).get("early_stop", {})
    if es and es["records_read"] == res["workload"]["records"]:
        notes.append(
            f"  Early stopping read every record ({es['pairs_null']} pairs with a null score): "
            "at this size the data ends before the pairs settle (the quick size has one or two "
            "blocks)."
        )
    lr = res.get("logreg", {})
    if "ratio" in lr:
        star = "*" if lr["sklearn_total_is_extrapolated"] else " "
        notes.append(
            f"{star} scikit-learn ({lr['sklearn_params']['solver']}): fitted "
            f"{len(lr['sklearn_hypotheses_fitted'])} of {lr['hypotheses_scored']} hypotheses x "
            f"{lr['measure_params']['folds']} folds ({lr['sklearn_fitted_s']:.1f} s), scaled "
            f"linearly; both probes train on the merged measure's {lr['training_rows']:,}-row "
            f"sample of the {lr['symbols_read']:,} symbols."
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    # Every run here pays its own forward pass: a repeated block must not come from the
    # models' behavior memo. Set here, not on import: bench_warm_query.py imports this
    # module and measures the memo on purpose (the import had turned it off there).
    os.environ.setdefault("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke-test size (< 60 s)")
    ap.add_argument("--name", help="result file stem (default: quick or full)")
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated items to skip: inspect, postgres, logreg, memory",
    )
    ap.add_argument("--records", type=int, help="override the number of records")
    ap.add_argument(
        "--out", type=Path, help="result file (default: benchmarks/results/<name>.json)"
    )
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.records:
        cfg = Config(**{**asdict(cfg), "n_records": args.records})
    if args.memory_child:
        print(json.dumps(memory_child(cfg, args.memory_child)))
        return 0
    name = args.name or cfg.name
    res = run(cfg, name, {s.strip() for s in args.skip.split(",") if s.strip()})
    print()
    print(render(res["table"]))
    for line in footnotes(res):
        print(line)
    load = max(res["environment"]["load_average_at_start"][0], os.getloadavg()[0])
    if load > (os.cpu_count() or 1):
        print(
            f"  WARNING: load average {load:.1f} on {os.cpu_count()} cores: other processes "
            "competed for the CPU, absolute times are inflated and ratios noisy."
        )
    path = args.out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str))
    tmp.replace(path)
    print(f"\nwrote {path} (total {res['total_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
