"""dl.Probe's fit beside scikit-learn, probelab and hprobes on the same cached activations.

    .venv/bin/python benchmarks/bench_probe_peers.py [--quick] [--json PATH]

One run, side by side: the shipped SQL auto-completion LSTM (``hypotheses.workloads.sql``;
``--quick``: its quick variant and fewer queries) reads training and held-out queries at
one layer (``lstm``); the activations, one row per character, and a real hypothesis's
labels (``sql.range:WhereClause``, "inside the WHERE clause") are written once to
``.dni_cache/probe-peers-bench/data.npz``. Every tool then runs in its own process
(``probe_peers_side.py``), reads that file, fits ``--repeats`` times on the training rows
and writes its held-out logits; the parent scores every tool with one AUROC function
(``dni_lab.probe.metrics.auroc``, which is scikit-learn's), so only the fits differ.

* ``ours_l2``, ``ours_l1``: ``dl.Probe``'s fit on the float32 matrix as ``Probe.fit`` hands
  it on (standardise, then Newton's method with a float64 gradient, or the ``logreg``
  measure's Newton solver for L1); ``ours_l2_fit_path``: all ``Probe.fit`` does after
  reading (the fit, its threshold, training AUROC and five-fold out-of-fold AUROC);
* ``sklearn_l2``, ``sklearn_l1``: ``LogisticRegression`` (lbfgs; liblinear L1) on the
  same standardised rows, the same ``C``;
* tolerances: ``ours_*`` and ``sklearn_*`` stop at a largest gradient entry of ``1e-8``
  of the same objective (mean log-loss + ``||w||² / (2 C n)``); the ``*_tol1e-4`` pair at
  ``1e-4``, scikit-learn's default. ``ours_over_sklearn`` holds each pair's time ratio
  and AUROC difference;
* ``probelab``: ``probelab.probes.Logistic`` (its LBFGS, its own standardisation; the
  same objective: mean log-loss plus ``||w||² / (2 C n)``) fed ``Activations.from_tensor``
  (its bundled datasets need the hub);
* ``hprobes_l1``: ``HProbes.fit`` reads a Hugging Face model and multiple-choice samples
  only, so its probe stage is run as it configures it (liblinear L1, ``C``, raw features).

The peers run in ``.dni_cache/probe-peers-venv`` (built on first use: ``torch==2.13.0``
first, then ``probelab==0.1.0 hprobes==0.11.0 scikit-learn``), never as dni_lab
dependencies. Fit times are each tool's median over repeats (five) with one thread, wall
and CPU time (a busy machine moves the CPU time less); the
``fit_ratio_to_ours_l2`` is a tool's time over ``ours_l2``'s. The machine's load is stored
with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402

VENV = REPO / ".dni_cache" / "probe-peers-venv"
WHERE = REPO / ".dni_cache" / "probe-peers-bench"
SIDE = REPO / "benchmarks" / "probe_peers_side.py"
OURS = ("ours_l2", "ours_l2_tol1e-4", "ours_l2_fit_path", "ours_l1", "sklearn_l2",
        "sklearn_l2_tol1e-4", "sklearn_l1")  # fmt: skip
TOL = {"ours_l2": 1e-8, "ours_l2_tol1e-4": 1e-4, "ours_l2_fit_path": 1e-8, "ours_l1": 1e-8,
       "sklearn_l2": 1e-8, "sklearn_l2_tol1e-4": 1e-4, "sklearn_l1": 1e-8}  # fmt: skip
# the headline: ours over scikit-learn at the same tolerance of the same objective
PAIRS = {"l2_tol1e-8": ("ours_l2", "sklearn_l2"),
         "l2_tol1e-4": ("ours_l2_tol1e-4", "sklearn_l2_tol1e-4"),
         "l1_tol1e-8": ("ours_l1", "sklearn_l1")}  # fmt: skip
PEERS = ("probelab", "hprobes_l1")
HYPOTHESIS = "WhereClause"


def peers_python() -> Path:
    """The peers' interpreter, built on first use (torch's CPU wheel first)."""
    py = VENV / "bin" / "python"
    ok = py.exists() and subprocess.run([py, "-c", "import probelab, hprobes, sklearn"],
                                        capture_output=True).returncode == 0  # fmt: skip
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "torch==2.13.0"], check=True)
        subprocess.run([py, "-m", "pip", "install", "probelab==0.1.0", "hprobes==0.11.0",
                        "scikit-learn"], check=True)  # fmt: skip
    return py


def cache(args: argparse.Namespace) -> dict:
    """Read the layer over training and held-out queries; write the rows both sides read."""
    import torch

    import dni_lab as dl
    from hypotheses.grammars import sql as grammar
    from hypotheses.parse_tree import ParseTreeFamily
    from hypotheses.workloads import sql

    torch.set_num_threads(1)
    module, encode, _ = sql.load(quick=args.quick)
    model = dl.Model(module, encode=encode, name="sql-lstm")
    rules = ParseTreeFamily(grammar.grammar(), name="sql", tokenizer=grammar.tokenize,
                            labels=[HYPOTHESIS])  # fmt: skip
    col = rules.signals().index(f"range:{HYPOTHESIS}")
    n = args.queries or (15 if args.quick else 100)
    parts, t0 = {}, time.perf_counter()
    for name, seed, k in (("train", 20_011, n), ("test", 10_007, max(10, n // 2))):
        recs = sql.records(k, seed=seed)
        acts = dl.activations(model, recs, [args.layer])
        parts[f"X_{name}"] = np.concatenate(
            [acts.record(i, args.layer).numpy() for i in range(len(recs))]
        ).astype(np.float32)
        parts[f"y_{name}"] = np.concatenate([rules.evaluate(r)[:, col] for r in recs]) > 0.5
        lengths = [len(acts.record(i, args.layer)) for i in range(len(recs))]
        parts[f"r_{name}"] = np.repeat(np.arange(len(recs)), lengths)  # each row's record
    WHERE.mkdir(parents=True, exist_ok=True)
    np.savez(WHERE / "data.npz", **parts)
    (WHERE / "config.json").write_text(json.dumps({"C": args.C, "repeats": args.repeats}))
    return {
        "model": f"sql-lstm ({'quick' if args.quick else 'full'})", "layer": args.layer,
        "hypothesis": f"sql.range:{HYPOTHESIS}", "queries_train": n,
        "rows_train": len(parts["y_train"]), "rows_test": len(parts["y_test"]),
        "units": int(parts["X_train"].shape[1]),
        "positives_train": float(parts["y_train"].mean()),
        "extract_s": time.perf_counter() - t0,
    }  # fmt: skip


def run_tool(tool: str, py: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO)}  # fmt: skip
    run = subprocess.run([py, str(SIDE), tool, str(WHERE)], capture_output=True, text=True,
                         env=env)  # fmt: skip
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    if run.returncode or not lines:
        return {"error": (run.stderr or run.stdout)[-2000:]}
    return json.loads(lines[-1][len("RESULT ") :])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke size (< a minute)")
    ap.add_argument("--queries", type=int, default=None, help="training queries")
    ap.add_argument("--layer", default="lstm")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--peers-python", default=None, help="an interpreter with the peers")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 5)
    from dni_lab.probe import metrics

    data = cache(args)
    print(f"{data['model']}, layer {data['layer']}, {data['hypothesis']}: "
          f"{data['rows_train']:,} training rows, {data['rows_test']:,} held out")  # fmt: skip
    y_test = np.load(WHERE / "data.npz")["y_test"]
    py_peers = args.peers_python or str(peers_python())
    tools: dict[str, dict] = {}
    for tool in OURS + PEERS:
        got = run_tool(tool, sys.executable if tool in OURS else py_peers)
        if "error" not in got:
            got["fit_median_s"] = float(np.median(got["fit_s"]))
            got["cpu_median_s"] = float(np.median(got["cpu_s"]))
            got["auroc"] = metrics.auroc(np.load(WHERE / f"{tool}.npy"), y_test)
        tools[tool] = got
    base = tools["ours_l2"].get("fit_median_s")
    print(f"{'tool':<20} {'fit (s)':>9} {'CPU (s)':>9} {'/ ours_l2':>10} {'held-out AUROC':>15}")
    for tool, got in tools.items():
        if "error" in got:
            print(f"{tool:<20} failed: {got['error'][-300:]}")
            continue
        got["fit_ratio_to_ours_l2"] = got["fit_median_s"] / base if base else None
        print(f"{tool:<20} {got['fit_median_s']:>9.3f} {got['cpu_median_s']:>9.3f} "
              f"{got['fit_ratio_to_ours_l2']:>10.2f} "
              f"{got['auroc']:>15.4f}")  # fmt: skip
    ratios = {}
    for name, (a, b) in PAIRS.items():
        ta, tb = tools[a].get("fit_median_s"), tools[b].get("fit_median_s")
        if ta and tb:
            ca, cb = tools[a]["cpu_median_s"], tools[b]["cpu_median_s"]
            ratios[name] = {"ours": a, "sklearn": b, "time_ratio": ta / tb,
                            "cpu_time_ratio": ca / cb,
                            "auroc_difference": tools[a]["auroc"] - tools[b]["auroc"]}  # fmt: skip
            print(f"{a} / {b}: {ta / tb:.2f}x the time ({ca / cb:.2f}x the CPU time), "
                  f"AUROC difference {ratios[name]['auroc_difference']:+.1e}")  # fmt: skip
    for tool, got in tools.items():
        got["tol"] = TOL.get(tool)
    load = list(os.getloadavg())
    contended = load[0] > 1.0
    print(f"load average {load[0]:.2f}{' (contended: ratios are indicative)' if contended else ''}")
    write_results(args.json, {
        "quick": args.quick, "C": args.C, "repeats": args.repeats, "data": data,
        "tools": tools, "ours_over_sklearn": ratios, "contended": contended,
        "load_average_end": load,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
