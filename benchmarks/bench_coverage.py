"""Early stopping's honesty: how often a pair marked converged is within eps of the full data.

Usage::

    python benchmarks/bench_coverage.py            # 20 record orders, two workloads
    python benchmarks/bench_coverage.py --quick    # smoke size (3 orders, fewer records)

For each workload (the quick SQL char-LSTM of 128 units with the SQL grammar's
parse-tree hypotheses, and the quick parentheses char-LSTM of 128 units with depth and
character hypotheses) the units' activations and the hypotheses are computed once;
then ``dl.inspect`` reads them back through a replaying model (the real engine: blocks,
convergence checks, freezing) once in full (``eps=None``) and once per random record
order with early stopping (``eps``). Per measure with an error it prints, over every
pair marked converged in every order:

* ``within_eps``: the share whose reported score is within eps of the full-data score
  (target: at least 95%); a pair frozen null whose full-data score is not, or the
  reverse, counts as a miss. For ``logreg`` both the group F1 and the unit score the
  frame shows must be within eps;
* ``within_err``: the share within its own reported error (the interval's coverage).

Results go to ``benchmarks/results/coverage.json`` (``--json`` to change); it asserts
nothing.

``--sweep`` instead reads both workloads with ``corr`` at eps 0.1, 0.05, 0.025 and 0.01
(blocks of 64 records, ``--orders`` random orders, 10 by default) and stores the records
each eps read and its coverage in ``benchmarks/results/early_stop_eps.json``: early
stopping must read more as eps shrinks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from dni_lab.backend.hypothesis.hypotheses import as_family, evaluate_family  # noqa: E402
from dni_lab.backend.measures.logreg import LogReg  # noqa: E402

MEASURES = ("corr", "logreg")
#: measures by name beyond the registry's: the probe whose unit score is its loading
MEASURE_OBJECTS: dict[str, Any] = {"logreg-loading": LogReg(unit_score="loading")}
SWEEP_EPS = (0.1, 0.05, 0.025, 0.01)


class Replay(nn.Module):
    """Returns its input: the encoded batch already holds the units' activations."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@dataclass
class Replayed:
    """A workload's activations and hypotheses, computed once, replayed per record order.

    Records are indices into ``U`` and ``H`` (one ``(L, n)`` float32 array per record).
    """

    name: str
    U: list[np.ndarray]
    H: list[np.ndarray]
    signals: list[str]
    kinds: dict[str, str]
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def _encode(self, records: list[int]) -> torch.Tensor:
        T = max(len(self.U[i]) for i in records)
        out = torch.zeros(len(records), T, self.U[0].shape[1])
        for k, i in enumerate(records):
            out[k, : len(self.U[i])] = torch.from_numpy(self.U[i])
        return out

    def model(self) -> dl.Model:
        """A model whose units are the stored activations."""
        return dl.Model(Replay(), encode=self._encode, symbols=lambda i: len(self.U[i]),
                        name=self.name, layouts={"": "n s u"})  # fmt: skip

    def family(self, signals: list[str] | None = None) -> Any:
        """The stored hypotheses (``signals``: a subset, in order) as one family."""
        cols = [self.signals.index(s) for s in signals] if signals else None
        names = signals or self.signals
        fn = (lambda i: self.H[i][:, cols]) if cols else (lambda i: self.H[i])
        return dl.hypothesis_family(signals=names, name=self.name, kind=self.kinds)(fn)


def replayed(name: str, module: nn.Module, encode: Any, layer: str, records: list[Any],
             families: list[Any], source: str = "", batch: int = 256) -> Replayed:  # fmt: skip
    """Run ``module`` and the hypotheses over ``records`` once; keep the real symbols."""
    target = dict(module.named_modules())[layer]
    got: list[torch.Tensor] = []
    hook = target.register_forward_hook(
        lambda _m, _i, out: got.append((out[0] if isinstance(out, tuple) else out).detach())
    )
    U: list[np.ndarray] = []
    try:
        with torch.no_grad():
            for b in range(0, len(records), batch):
                part = records[b : b + batch]
                got.clear()
                module(encode(part))
                U += [got[0][k, : len(r)].float().numpy() for k, r in enumerate(part)]
    finally:
        hook.remove()
    fams = [as_family(f) for f in families]
    sigs = [(f, s) for f in fams for s in f.signals()]
    names = [s if len(fams) == 1 else f"{f.name}.{s}" for f, s in sigs]
    H = [np.concatenate([evaluate_family(f, r, len(r), i) for f in fams], axis=1)
         for i, r in enumerate(records)]  # fmt: skip
    kinds = {n: f.kind_of(s) for n, (f, s) in zip(names, sigs, strict=True)}
    return Replayed(name, U, H, names, kinds, source)


def sql_workload(n_records: int) -> Replayed:
    """The quick SQL auto-completion LSTM (128 units), 191 parse-tree hypotheses."""
    from benchmarks.workload import build_workload

    wl = build_workload(n_records, 128, quick=True)
    src = "; ".join(f"{k}: {v}" for k, v in wl.sources.items())
    return replayed("sql", wl.module, wl.encode, wl.layer, wl.records, wl.hypotheses, src)


def parens_workload(n_records: int) -> Replayed:
    """The quick parentheses LSTM (128 units): depth, inside, paren, depth levels, digits."""
    from hypotheses.workloads import parens

    module, vocab, _ = parens.load(quick=True)
    records = parens.records(n_records, seed=101)  # not the training seed

    def signals(r: str) -> dict[str, np.ndarray]:
        d = parens.depth(r)
        out = {name: f(r) for name, f in parens.HYPOTHESES.items()}
        out |= {f"depth_{k}": (d == k).astype(float) for k in range(parens.MAX_DEPTH + 1)}
        return out | {f"char_{c}": np.array([ch == c for ch in r], float) for c in "()0123"}

    names = list(signals("0()"))
    kinds = {n: "continuous" if n == "depth" else "binary" for n in names}
    fam = dl.hypothesis_family(signals=names, name="parens", kind=kinds)(signals)
    src = "parens quick LSTM (128 units), held-out records of seed 101"
    return replayed("parens", module.eval(), vocab, "lstm", records, [fam], src)


def coverage(early: pl.DataFrame, full: pl.DataFrame, eps: float, group: bool) -> dict[str, Any]:
    """Shares of settled pairs within eps of, and within their error of, the full data.

    Only pairs that could have been wrong count: converged *before the data ended* (a
    pair read to the end holds its full-data value) and not empty (a null score, such as
    a continuous hypothesis under ``logreg``, is no estimate).

    Parameters
    ----------
    early, full : polars.DataFrame
        Score frames of one measure: early-stopped and read to the end.
    eps : float
        The early-stopping tolerance.
    group : bool
        Also require the group score within eps (probes: the group F1 the frame shows).
    """
    n_full = int(full["n_records"].max() or 0)
    settled = pl.col("converged") & (pl.col("n_records") < n_full)
    j = early.filter(settled & pl.col("unit_score").is_not_nan())
    j = j.join(full, on=["uid", "hid"], suffix="_full")
    ok = np.ones(j.height, bool)
    ok_err = np.ones(j.height, bool)
    cols = ("unit_score", "group_score") if group else ("unit_score",)
    for c in cols:
        a, b = j[c].to_numpy().astype(float), j[f"{c}_full"].to_numpy().astype(float)
        gap = np.abs(a - b)
        ok &= gap <= eps  # a full-data null where the early score is not: a miss
        if c == "unit_score":
            err = j["err"].to_numpy().astype(float)
            ok_err &= gap <= np.nan_to_num(err, nan=0.0)
    nonempty = early.filter(pl.col("unit_score").is_not_nan())
    half = int((nonempty["converged"] & (nonempty["n_records"] <= n_full // 2)).sum())
    group_done = pl.col("converged") | pl.col("reason").str.starts_with(
        "left open: the group's score settled").fill_null(False)  # fmt: skip
    groups = nonempty.group_by("hid").agg(group_done.all().alias("done"))
    return {"pairs": int(j.height), "within_eps": int(ok.sum()), "within_err": int(ok_err.sum()),
            "records_read": int(early["n_records"].max() or 0), "nonempty": nonempty.height,
            "settled_by_half": half, "groups": groups.height,
            "groups_settled": int(groups["done"].sum())}  # fmt: skip


def measure_coverage(
    wl: Replayed,
    measure: str,
    orders: int,
    eps: float,
    block: int,
    signals: list[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Coverage of ``measure`` on ``wl`` over ``orders`` random record orders.

    ``pairs_converged`` counts the non-empty pairs settled before the data ended
    (:func:`coverage`), summed over the orders.
    """
    measure_obj = MEASURE_OBJECTS.get(measure, measure)
    model, fam = wl.model(), wl.family(signals)
    data = list(range(len(wl.U)))
    run = dict(units=[("", "*")], cache=False, block_size=block)
    t0 = time.perf_counter()
    full = dl.inspect([model], [fam], [measure_obj], data, eps=None, **run)
    group = measure.startswith("logreg")
    tot = dict.fromkeys(("pairs", "within_eps", "within_err", "nonempty", "settled_by_half",
                         "groups", "groups_settled"), 0)  # fmt: skip
    per_order, reads = [], []
    rng = np.random.default_rng(seed)
    for _ in range(orders):
        order = [int(i) for i in rng.permutation(len(data))]
        early = dl.inspect([model], [fam], [measure_obj], order, eps=eps, **run)
        c = coverage(early, full, eps, group)
        for k in tot:
            tot[k] += c[k]
        per_order.append(c["within_eps"] / max(c["pairs"], 1))
        reads.append(c["records_read"])
    pairs = max(tot["pairs"], 1)
    return {
        "workload": wl.name, "measure": measure, "orders": orders, "records": len(data),
        "hypotheses": len(signals or wl.signals), "units": int(wl.U[0].shape[1]),
        "pairs_converged": tot["pairs"], "within_eps": tot["within_eps"] / pairs,
        "within_err": tot["within_err"] / pairs, "worst_order_within_eps": min(per_order),
        "median_records_read": float(np.median(reads)), "records_read": reads,
        "nonempty_pairs": tot["nonempty"], "settled_by_half_the_data": tot["settled_by_half"],
        "groups": tot["groups"], "groups_settled": tot["groups_settled"],
        "seconds": time.perf_counter() - t0,
    }  # fmt: skip


def eps_sweep(n: int, orders: int, block: int) -> list[dict[str, Any]]:
    """``corr`` on both workloads at each of :data:`SWEEP_EPS`: records read, coverage."""
    rows = []
    for wl in (parens_workload(n), sql_workload(n)):
        for eps in SWEEP_EPS:
            r = measure_coverage(wl, "corr", orders, eps, block) | {"eps": eps}
            rows.append(r)
            print(f"{wl.name:6s} eps {eps:<6} records read {r['records_read']} (median "
                  f"{r['median_records_read']:.0f} of {n:,}); {r['within_eps']:.2%} of "
                  f"{r['pairs_converged']:,} non-empty pairs settled before the end within eps, "
                  f"{r['within_err']:.2%} within err")  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke size: 3 orders, fewer records")
    ap.add_argument("--orders", type=int, default=None)
    ap.add_argument("--eps", type=float, default=0.025)
    ap.add_argument("--block", type=int, default=512)
    ap.add_argument("--measures", default=",".join(MEASURES))
    ap.add_argument("--logreg-orders", type=int, default=None,
                    help="orders for logreg (its fits are slow; default: --orders)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workloads", default="sql,parens", help="comma-separated: sql, parens")
    ap.add_argument("--sweep", action="store_true",
                    help="records read per eps (corr), to results/early_stop_eps.json")  # fmt: skip
    args = ap.parse_args(argv)
    # replayed blocks: nothing to memo (set here, not on import: tests import this module)
    os.environ.setdefault("DNI_LAB_BEHAVIOR_MEMO_MB", "0")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if args.sweep:
        n, orders = (2_500, 3) if args.quick else (10_000, args.orders or 10)
        rows = eps_sweep(n, orders, 64)
        path = args.json or REPO / "benchmarks/results/early_stop_eps.json"
        cmd = "python benchmarks/bench_coverage.py --sweep" + (" --quick" if args.quick else "")
        write_results(path, {"command": cmd, "records": n, "orders": orders,
                             "block_size": 64, "rows": rows})  # fmt: skip
        print(f"wrote {path}")
        return 0
    args.json = args.json or REPO / "benchmarks/results/coverage.json"
    orders = args.orders or (3 if args.quick else 20)
    n = 2_500 if args.quick else 10_000
    rows = []
    for name in args.workloads.split(","):
        wl = {"sql": sql_workload, "parens": parens_workload}[name](n)
        print(f"{wl.name}: {len(wl.U)} records, {len(wl.signals)} hypotheses ({wl.source})")
        for measure in args.measures.split(","):
            # probes fit one model per hypothesis: a dozen of them keeps 20 orders affordable
            sub = wl.signals[:12] if measure.startswith("logreg") else None
            k = (args.logreg_orders or orders) if measure.startswith("logreg") else orders
            r = measure_coverage(wl, measure, k, args.eps, args.block, sub)
            rows.append(r)
            _write(args, rows)  # after every row: a slow probe run still leaves the rest
            worst = r["worst_order_within_eps"]
            print(f"  {measure:7s} {r['pairs_converged']:7d} non-empty pairs settled before"
                  f" the end ({k} orders):"
                  f" {r['within_eps']:.2%} within eps (worst order {worst:.2%}),"
                  f" {r['within_err']:.2%} within err; median {r['median_records_read']:.0f}"
                  f" records read; {r['seconds']:.0f} s")  # fmt: skip
    print(f"wrote {args.json}")
    return 0


def _write(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    cmd = "python benchmarks/bench_coverage.py " + " ".join(sys.argv[1:])
    write_results(args.json, {"command": cmd.strip(), "eps": args.eps, "block_size": args.block,
                              "quick": args.quick, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
