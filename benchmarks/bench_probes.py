"""The merged ``logreg`` probe against ``corr`` and against one probe per hypothesis.

Usage::

    python benchmarks/bench_probes.py            # 40 hypotheses x 128 units, 1,000 queries
    python benchmarks/bench_probes.py --quick     # smoke size (CI)
    python benchmarks/bench_probes.py --ratio-only  # issue 46's logreg/corr ratio alone

First (unless ``--no-ratio``), issue 46's ratio (``corr_ratio`` in the results): the code
LSTM of :mod:`benchmarks.probe_workloads` (39 binary hypotheses x 128 units x 600
records), every record read (``eps=None``), hypotheses and behaviors warm (a first
``dl.inspect`` fills a memory hypothesis cache and the model's behavior memo), on
``--threads`` threads: ``corr`` and ``logreg`` through ``dl.inspect`` and as measures
alone over the same blocks, the fastest of ``--ratio-repeats`` runs (target: logreg
≤ 30x corr).

Then (``--workload sql``, the default; ``code`` runs the same on the code LSTM): the
trained SQL LSTM (128 units) over windows of held-out queries, and 40 binary parse-tree
signals of the SQL grammar (the 40 with the most balanced classes). All in one run, side by side:

1. ``dl.inspect`` end to end (extraction, hypotheses, measure; ``eps=None`` so both
   read every record) with ``corr`` and with ``logreg``: the cost a user meets;
   also the measures alone over the same precomputed blocks.
2. scikit-learn's fastest L1 solver (``liblinear``), one model per hypothesis and
   fold, on exactly the rows (every symbol read: the probe's default), the
   record-level folds and the standardisation the merged probe trained on, with the
   same C and tolerance (extraction done once: it gets arrays).
3. NeuroX 1.0.9's ``train_logistic_regression_probe`` (Adam, 10 epochs, batch 32,
   its defaults; L1 weight ``1/(C·n)`` as ours) on the same rows and folds, if
   NeuroX is installed (``pip install --no-deps neurox==1.0.9 imbalanced-learn``).

scikit-learn fits ``--sk-hyps`` hypotheses (a spread over the F1 range, 10 by default) and
the merged probe is timed again on exactly those hypotheses' columns, so the ratio needs no
extrapolation; both sides run on ``--threads`` threads (liblinear is single-threaded: 1,
the default, is thread for thread). Tolerances differ in kind and are stored: the merged
probe stops when its Newton step would move no standardised coefficient by more than
``LogReg.tol``; liblinear stops on its own optimality criterion ``tol``. NeuroX fits a
spread of hypotheses and is scaled to all 40 (printed as extrapolated). F1 is compared on
the hypotheses each baseline fitted. Targets (issues 11, 24, 34): logreg ≤ 5x corr end
to end; ≥ 20x faster than each baseline with |ΔF1| ≤ 0.01 per hypothesis. It asserts
nothing; the results go to ``benchmarks/results/probes.json`` through ``write_results``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
# Every run here pays its own forward pass: a repeated block must not come from the
# models' behavior memo (bench_warm_query.py measures that on purpose).
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.probe_workloads import CODE_RECORDS, code_workload, sql_workload  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from benchmarks.run_benchmarks import Behaviors, behaviors  # noqa: E402
from benchmarks.sk_probe import pooled_f1, sklearn_probe_f1, standardize  # noqa: E402
from benchmarks.workload import Workload  # noqa: E402
from dni_lab.backend.measures.corr import Corr  # noqa: E402
from dni_lab.backend.measures.logreg import LogReg  # noqa: E402


def timed_inspect(wl: Workload, family: Any, measure: Any) -> tuple[float, Any]:
    model = dl.Model(wl.module, encode=wl.encode, name="probe-lstm")
    t0 = time.perf_counter()
    frame = dl.inspect(models=[model], hypotheses=[family], measures=[measure], data=wl.records,
                       units=[("lstm", "*")], eps=None, cache=False)  # fmt: skip
    return time.perf_counter() - t0, frame


def warm_inspect(wl: Workload, family: Any, measure: Any, repeats: int) -> float:
    """Fastest of ``repeats`` ``dl.inspect`` calls after a first one warmed the hypothesis
    cache and the model's behavior memo (issue 46's "hypotheses and behaviors warm")."""
    model = dl.Model(wl.module, encode=wl.encode, name="probe-lstm")
    cache = dl.HypothesisCache(directory=False)

    def once() -> Any:
        return dl.inspect(models=[model], hypotheses=[family], measures=[measure],
                          data=wl.records, units=[("lstm", "*")], eps=None,
                          cache=cache)  # fmt: skip

    once()
    return best_of(once, repeats)[0]


@contextlib.contextmanager
def memo_on():
    """The models' behavior memo at its default size (the script turns it off elsewhere:
    each cold run pays its own forward pass)."""
    before = os.environ.get("DNI_LAB_BEHAVIOR_MEMO_MB")
    os.environ["DNI_LAB_BEHAVIOR_MEMO_MB"] = "64"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DNI_LAB_BEHAVIOR_MEMO_MB")
        else:
            os.environ["DNI_LAB_BEHAVIOR_MEMO_MB"] = before


def best_of(fn: Any, repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def corr_ratio(wl: Workload, family: Any, bh: Any, repeats: int) -> dict[str, Any]:
    """Issue 46's ratio: logreg against corr, warm ``dl.inspect`` and the measures alone,
    every record read (``eps=None``), the fastest of ``repeats`` runs each (corr's of
    five times as many: it is short, so noise weighs more)."""
    out: dict[str, Any] = {"repeats": repeats}
    out["inspect_corr_s"] = warm_inspect(wl, family, "corr", 5 * repeats)
    out["inspect_logreg_s"] = warm_inspect(wl, family, "logreg", repeats)
    out["corr_measure_s"] = best_of(lambda: run_measure(Corr(), bh), 5 * repeats)[0]
    out["logreg_measure_s"] = best_of(lambda: run_measure(LogReg(), bh), repeats)[0]
    out["inspect_ratio"] = out["inspect_logreg_s"] / out["inspect_corr_s"]
    out["measure_ratio"] = out["logreg_measure_s"] / out["corr_measure_s"]
    print(f"warm dl.inspect, every record read: corr {out['inspect_corr_s']:.2f} s, logreg "
          f"{out['inspect_logreg_s']:.2f} s -> logreg/corr {out['inspect_ratio']:.1f}x "
          f"(target <= 30x)")  # fmt: skip
    print(f"measures alone: corr {out['corr_measure_s']:.3f} s, logreg "
          f"{out['logreg_measure_s']:.2f} s -> {out['measure_ratio']:.1f}x")  # fmt: skip
    return out


def _baseline(out: dict[str, Any], pick: list[int], f1: np.ndarray, n_all: int) -> dict:
    """A baseline's fitted time scaled to all hypotheses, and its F1 beside ours."""
    diff = np.abs(np.subtract(out["f1"], f1[pick]))
    return {"fitted": len(pick), "seconds": out["seconds"],
            "total_s": out["seconds"] / len(pick) * n_all,
            "f1_ours": [float(f1[j]) for j in pick], "f1_theirs": [float(v) for v in out["f1"]],
            "max_abs_f1_diff": float(np.nanmax(diff))}  # fmt: skip


def columns(bh: Behaviors, cols: list[int]) -> Behaviors:
    """``bh`` with only the hypotheses ``cols`` (the blocks' hypothesis columns sliced)."""
    return Behaviors(bh.U, [H[..., cols] for H in bh.H], bh.mask, [bh.info[j] for j in cols],
                     bh.extract_s, bh.hypotheses_s)  # fmt: skip


def run_measure(measure: Any, bh: Any) -> tuple[float, Any, Any]:
    t0 = time.perf_counter()
    st = measure.start(bh.U[0].shape[-1], bh.H[0].shape[-1], "cpu", bh.info)
    for U, H, m in zip(bh.U, bh.H, bh.mask, strict=True):
        st = measure.update(st, U, H, m)
    res = measure.result(st)
    return time.perf_counter() - t0, st, res


def neurox_f1(
    X: np.ndarray, Y: np.ndarray, fold: np.ndarray, C: float, epochs: int = 10
) -> dict[str, Any]:
    """NeuroX probes per hypothesis column and fold, scored like the merged probe."""
    from neurox.interpretation import linear_probe as lp

    Xs = standardize(np.asarray(X, dtype=np.float32)).astype(np.float32)
    f1, t0 = [], time.perf_counter()
    for j in range(Y.shape[1]):
        y = Y[:, j] > 0.5
        pred = np.zeros(len(y), dtype=bool)
        for f in np.unique(fold):
            tr, te = fold != f, fold == f
            quiet = io.StringIO()  # NeuroX prints per epoch
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                probe = lp.train_logistic_regression_probe(
                    Xs[tr], y[tr].astype(np.int64), lambda_l1=1.0 / (C * tr.sum()), lambda_l2=0.0,
                    num_epochs=epochs,
                )
            with torch.no_grad():
                out = probe(torch.from_numpy(Xs[te]))
            pred[te] = out.argmax(1).numpy() == 1
        f1.append(pooled_f1(pred, y))
    return {"f1": f1, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    # set here, not on import: tests import the benchmarks
    os.environ.setdefault("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke size")
    ap.add_argument("--queries", type=int, default=None)
    ap.add_argument("--hyps", type=int, default=40)
    ap.add_argument("--sk-hyps", type=int, default=10, help="hypotheses scikit-learn fits")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the merged probe (liblinear uses one)")  # fmt: skip
    ap.add_argument("--neurox-hyps", type=int, default=3, help="hypotheses NeuroX fits")
    ap.add_argument("--neurox-epochs", type=int, default=10,
                    help="NeuroX's epochs (its default 10 stops below our F1)")  # fmt: skip
    ap.add_argument("--workload", choices=("sql", "code"), default="sql",
                    help="the workload of the end-to-end and baseline comparisons")  # fmt: skip
    ap.add_argument("--ratio-only", action="store_true",
                    help="only issue 46's logreg/corr ratio on the code workload")  # fmt: skip
    ap.add_argument("--no-ratio", action="store_true", help="skip that ratio")
    ap.add_argument("--ratio-records", type=int, default=None,
                    help=f"code records of the ratio ({CODE_RECORDS:,}; 100 with --quick)")
    ap.add_argument("--ratio-repeats", type=int, default=2,
                    help="logreg runs of the ratio, the fastest kept (corr: five times as many)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    res: dict[str, Any] = {}
    if not args.no_ratio:
        n_r = args.ratio_records or (100 if args.quick else CODE_RECORDS)
        cwl, cfam, csig = code_workload(n_r, args.quick)
        cbh = behaviors(cwl, cwl.records, 512)
        n_sym = int(sum(int(m.sum()) for m in cbh.mask))
        print(f"ratio workload: code LSTM 128 units, {len(cwl.records):,} records, {n_sym:,} "
              f"symbols, {len(csig)} hypotheses, {args.threads} thread(s)")  # fmt: skip
        with memo_on():
            res["corr_ratio"] = {"workload": "code", "records": len(cwl.records),
                                 "symbols": n_sym, "hypotheses": len(csig), "units": 128,
                                 **corr_ratio(cwl, cfam, cbh, args.ratio_repeats)}  # fmt: skip
        if args.ratio_only:
            res["threads"] = args.threads
            write_results(args.json, res)
            return 0
    if args.workload == "code":
        n_q = args.queries or (100 if args.quick else CODE_RECORDS)
        wl, family, signals = code_workload(n_q, args.quick)
    else:
        n_q = args.queries or (40 if args.quick else 1000)
        wl, family, signals = sql_workload(n_q, args.quick, args.hyps)
    print(f"workload: {args.workload} LSTM 128 units, {len(wl.records):,} records, "
          f"{len(signals)} hypotheses")  # fmt: skip
    res |= {"workload": args.workload, "records": len(wl.records), "hypotheses": len(signals)}
    res["inspect_corr_s"], _ = timed_inspect(wl, family, "corr")
    res["inspect_logreg_s"], _ = timed_inspect(wl, family, "logreg")
    sub = Workload(wl.module, wl.encode, "lstm", 128, wl.records, [family])
    bh = behaviors(sub, wl.records, 512)
    res["symbols"] = int(sum(int(m.sum()) for m in bh.mask))
    res["corr_measure_s"], _, _ = run_measure(Corr(), bh)
    measure = LogReg()
    res["logreg_measure_s"], st, out = run_measure(measure, bh)
    f1 = np.asarray(out.group_score[0], dtype=float)
    res["training_rows"] = len(st.X)

    order = [j for j in np.argsort(f1) if np.isfinite(f1[j])]
    col_of = {int(j): k for k, j in enumerate(st.out_hyp)}

    def spread(k: int) -> list[int]:
        return [order[int(i)] for i in np.linspace(0, len(order) - 1, min(k, len(order)))]

    X, Y, fold = st.X.numpy(), st.Y.numpy(), st.fold.numpy()
    if args.sk_hyps < 1:
        res["sklearn"] = {"skipped": "scikit-learn not run (--sk-hyps 0)"}
    else:
        pick = spread(args.sk_hyps)
        sk = sklearn_probe_f1(X, Y[:, [col_of[j] for j in pick]], fold, C=measure.C,
                              solver="liblinear")  # fmt: skip
        # ours again on exactly those hypotheses: a ratio without extrapolation
        ours_s, _, sub_out = run_measure(LogReg(), columns(bh, sorted(pick)))
        sub_f1 = dict(zip(sorted(pick), np.asarray(sub_out.group_score[0], float), strict=True))
        res["sklearn"] = {
            **_baseline(sk, pick, f1, len(order)), "ours_s": ours_s,
            "ratio": sk["seconds"] / ours_s,
            "f1_ours": [float(sub_f1[j]) for j in pick],
            "max_abs_f1_diff": float(np.nanmax(np.abs(np.subtract(sk["f1"],
                                                                  [sub_f1[j] for j in pick])))),
            "threads": {"ours": args.threads, "liblinear": 1},
            "tolerances": {"ours": f"LogReg.tol={measure.tol} (largest Newton step of a "
                                   "standardised coefficient)",
                           "liblinear": f"tol={sk['params']['tol']} (its optimality criterion)"},
        }  # fmt: skip
    try:
        if args.neurox_hyps < 1:
            raise ImportError("--neurox-hyps 0")
        pick = spread(args.neurox_hyps)
        nx = neurox_f1(X, Y[:, [col_of[j] for j in pick]], fold, measure.C, args.neurox_epochs)
        res["neurox"] = {**_baseline(nx, pick, f1, len(order)), "epochs": args.neurox_epochs}
    except ImportError as exc:
        res["neurox"] = {"skipped": f"NeuroX not run ({exc})"}

    lr, co = res["logreg_measure_s"], res["corr_measure_s"]
    kept = res["training_rows"]
    print(f"symbols {res['symbols']:,}; logreg trained on {kept:,} rows "
          f"({'every symbol' if kept == res['symbols'] else 'a sample'})")  # fmt: skip
    ic, il = res["inspect_corr_s"], res["inspect_logreg_s"]
    print(f"dl.inspect end to end: corr {ic:.2f} s, logreg {il:.2f} s -> logreg/corr "
          f"{il / ic:.1f}x (target <= 5x)")  # fmt: skip
    print(f"measures alone on the same blocks: corr {co:.2f} s, logreg {lr:.2f} s "
          f"-> {lr / co:.0f}x")  # fmt: skip
    for name in ("sklearn", "neurox"):
        b = res[name]
        if "skipped" in b:
            print(f"{name}: {b['skipped']}")
            continue
        if name == "sklearn":
            print(f"scikit-learn liblinear (1 thread, {b['tolerances']['liblinear']}): "
                  f"{b['seconds']:.1f} s for {b['fitted']} hypotheses x 5 folds; merged logreg "
                  f"on the same {b['fitted']} ({args.threads} thread(s)): {b['ours_s']:.2f} s -> "
                  f"{b['ratio']:.0f}x faster (target >= 20x); max |F1 diff| "
                  f"{b['max_abs_f1_diff']:.3f} (target <= 0.01)")  # fmt: skip
            continue
        label = f"NeuroX 1.0.9 ({args.neurox_epochs} epochs)"
        print(f"{label}: {b['seconds']:.1f} s for {b['fitted']} hypotheses x 5 folds -> "
              f"{b['total_s']:.1f} s for all {len(order)} (extrapolated); merged logreg {lr:.2f} s "
              f"-> {b['total_s'] / lr:.0f}x faster (target >= 20x); max |F1 diff| "
              f"{b['max_abs_f1_diff']:.3f} (target <= 0.01)")  # fmt: skip
    res["threads"] = args.threads
    write_results(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
