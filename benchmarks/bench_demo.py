"""Wall time of ``dni-lab demo`` (the README's main job), alone and beside busy processes.

Usage::

    python benchmarks/bench_demo.py --out benchmarks/results/demo.json
    python benchmarks/bench_demo.py --from-nothing --out benchmarks/results/demo.json
    python benchmarks/bench_demo.py --quick --out .dni_cache/demo_quick.json   # smoke

Each run is ``dni-lab demo`` in a subprocess, timed from start to exit (what a user
waits for), with the SQL model already stored and a cold hypothesis cache (a fresh
``$DNI_LAB_CACHE`` per run). It runs the demo ``--repeats`` times alone, then as
often beside two busy processes (``while :; do :; done`` loops, the load issue 24
measured under), and reports the medians and their ratio. ``--from-nothing`` adds
one run with an empty model store too, so the demo trains its model first.

Targets: at most 45 s alone on a quiet 2-core machine (issue 24), and at most 2.0x
that beside the two loops, the median of at least 3 runs each (issue 34, target 5);
from nothing (issue 1) at most 3 minutes. The results file keeps every run, the
minimum, median and maximum of each set, and the CPU model. It asserts
nothing: run it on a quiet machine, since any other job inflates both times.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the benchmarks package importable
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402

TARGETS = {"alone_s": 45.0, "busy_ratio": 2.0, "from_nothing_s": 180.0}


def demo_command(quick: bool, out: Path) -> list[str]:
    """The command line of one demo run: the installed ``dni-lab`` script if present."""
    script = Path(sys.executable).with_name("dni-lab")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "dni_lab.cli"]
    return [*cmd, "demo", "--out", str(out), *(["--quick"] if quick else [])]


def run_demo(quick: bool, models: str | None = None) -> dict:
    """One ``dni-lab demo`` with a cold hypothesis cache; its wall time and what it read.

    Parameters
    ----------
    quick
        The demo's quick model and data (a smoke run), else its default.
    models
        Model store directory; None keeps ``$DNI_LAB_MODELS`` (the stored model).

    Returns
    -------
    dict
        ``wall_s`` (start to exit), ``load_s`` (model trained or loaded),
        ``inspection_s``, ``windows``, ``records_read`` and ``probe_records_read`` (the
        most any row, and any probe row, read; from the score frame), ``converged``
        (the share of all pairs) and, per measure, the share converged and the share
        settled before the data ended.
    """
    import polars as pl

    with tempfile.TemporaryDirectory(prefix="dni_demo_") as tmp:
        env = {**os.environ, "DNI_LAB_CACHE": str(Path(tmp) / "hypotheses")}
        env.pop("CI", None)  # $CI would switch the demo to its quick mode silently
        if models is not None:
            env["DNI_LAB_MODELS"] = models
        out = Path(tmp) / "scores.parquet"
        t0 = time.perf_counter()
        proc = subprocess.run(demo_command(quick, out), env=env, cwd=REPO, capture_output=True,
                              text=True, check=False)  # fmt: skip
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"dni-lab demo failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        frame = pl.read_parquet(out)
        read = int(frame["n_records"].max())
        probe = frame.filter(pl.col("measure").is_in(["lda", "logreg"]))["n_records"]
        probe_read = int(probe.max()) if probe.len() else None
        shares = frame.group_by("measure").agg(
            pl.col("converged").mean().alias("share"),
            (pl.col("converged") & (pl.col("n_records") < read)).mean().alias("early"),
        )
        converged = {r["measure"]: r["share"] for r in shares.iter_rows(named=True)}
        early = {r["measure"]: r["early"] for r in shares.iter_rows(named=True)}
        share_all = float(frame["converged"].mean())
    text = proc.stdout

    def number(pattern: str) -> float | None:
        m = re.search(pattern, text)
        return float(m.group(1).replace(",", "")) if m else None

    return {
        "wall_s": wall,
        "load_s": number(r"\(([\d.]+) s to train or load\)"),
        "inspection_s": number(r"inspection: ([\d.]+) s"),
        "windows": int(number(r"data: ([\d,]+) windows") or 0),
        "records_read": read,
        "probe_records_read": probe_read,  # the most any probe row read
        "converged": share_all,  # share of all pairs converged
        "converged_by_measure": converged,
        "settled_early_by_measure": early,  # converged before the data ended
    }


def busy_loops(n: int) -> list[subprocess.Popen]:
    """Start ``n`` shell loops that each keep one core busy (the caller stops them)."""
    return [subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(n)]


def main(argv: list[str] | None = None) -> dict:
    """Time the demo alone and beside busy loops (``argv``: None reads the command line).

    Returns
    -------
    dict
        The runs, their medians (``alone_s``, ``busy_s``), ``busy_ratio``, optionally
        ``from_nothing_s``, and ``targets``; also written to ``--out`` if given.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the demo's quick mode (smoke run)")
    ap.add_argument("--repeats", type=int, default=3, help="runs alone and runs beside the loops")
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the second set")
    ap.add_argument("--from-nothing", action="store_true", help="also time a run that trains")
    ap.add_argument("--out", "--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    prepare = run_demo(args.quick)  # trains the model if it is not stored yet; warms the disk
    print(f"prepared: model stored ({prepare['wall_s']:.1f} s)")
    alone = [run_demo(args.quick) for _ in range(args.repeats)]
    loops = busy_loops(args.busy)
    try:
        busy = [run_demo(args.quick) for _ in range(args.repeats)]
    finally:
        for p in loops:
            p.kill()
            p.wait()
    res: dict = {"quick": args.quick, "busy_loops": args.busy, "runs_alone": alone,
                 "runs_busy": busy, "targets": TARGETS}  # fmt: skip
    for name, runs in (("alone", alone), ("busy", busy)):
        walls = [r["wall_s"] for r in runs]
        res[f"{name}_s"] = statistics.median(walls)
        res[f"{name}_min_s"], res[f"{name}_max_s"] = min(walls), max(walls)
    res["busy_ratio"] = res["busy_s"] / res["alone_s"]
    for key in ("records_read", "windows", "probe_records_read", "converged",
                "converged_by_measure", "settled_early_by_measure"):
        res[key] = alone[0][key]
    probe = res["probe_records_read"]
    print(f"alone: min {res['alone_min_s']:.1f} s, median {res['alone_s']:.1f} s, max "
          f"{res['alone_max_s']:.1f} s; beside {args.busy} busy loops: min "
          f"{res['busy_min_s']:.1f} s, median {res['busy_s']:.1f} s, max {res['busy_max_s']:.1f} s "
          f"({args.repeats} runs each)")  # fmt: skip
    print(f"dni-lab demo, model stored, cold hypothesis cache: {res['alone_s']:.1f} s alone "
          f"(target <= {TARGETS['alone_s']:.0f} s), {res['busy_s']:.1f} s beside {args.busy} "
          f"busy loops: {res['busy_ratio']:.2f}x (target <= {TARGETS['busy_ratio']}x); read "
          f"{res['records_read']:,} of {res['windows']:,.0f} windows"
          + (f", the probe {probe:,}" if probe is not None else "")
          + f"; {res['converged']:.1%} of all pairs converged")  # fmt: skip
    if args.from_nothing:
        store = tempfile.mkdtemp(prefix="dni_models_")
        try:
            cold = run_demo(args.quick, models=store)
        finally:
            shutil.rmtree(store, ignore_errors=True)
        res["run_from_nothing"], res["from_nothing_s"] = cold, cold["wall_s"]
        limit = TARGETS["from_nothing_s"]
        print(f"from nothing (trains the model): {cold['wall_s']:.1f} s, of which "
              f"{cold['load_s']} s training (target <= {limit:.0f} s)")  # fmt: skip
    write_results(args.out, res)
    return res


if __name__ == "__main__":
    main()
