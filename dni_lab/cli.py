"""``dni-lab``: the terminal entry point. ``dni-lab demo`` is the README's main job;
``dni-lab probe fit|apply|report`` keeps a linear probe (:mod:`dni_lab.probe.cli`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import polars as pl

from dni_lab.backend.engine.inspection import Progress
from dni_lab.probe import cli as probe_cli


def demo(args: argparse.Namespace) -> int:
    """Train or load the SQL LSTM, inspect it against the SQL grammar, print and save."""
    import dni_lab as dl
    from hypotheses.grammars import sql as grammar
    from hypotheses.workloads import sql as workload

    t0 = time.perf_counter()
    module, encode, meta = workload.load(quick=args.quick, hidden=args.hidden)
    acc = meta.get("accuracy")
    print(f"model: sql-lstm, {args.hidden} units, held-out next-char accuracy {acc:.3f} "
          f"({time.perf_counter() - t0:.1f} s to train or load)")  # fmt: skip
    model = dl.Model(module, encode=encode, name="sql-lstm", meta={"epochs": meta.get("epochs")})
    # held-out queries: a seed the model was not trained on
    records = workload.records(args.queries, seed=10_007)
    family = grammar.family()
    print(f"data: {len(records)} windows of 30 characters; hypotheses: {len(family.signals())} "
          "parse-tree signals (range, impulse per node type, depth)")  # fmt: skip

    measures = _measures(args.measures, args.probe_rows)
    t1 = time.perf_counter()
    frame = dl.inspect(
        models=[model],
        hypotheses=[family],
        measures=measures,
        data=records,
        units=[("lstm", "*")],
        eps=args.eps,
        on_block=lambda insp: print(_progress_line(insp.progress), flush=True),
    )
    print(f"inspection: {time.perf_counter() - t1:.1f} s, {frame.height} scores; "
          f"{_converged_line(frame)}\n")  # fmt: skip
    _print_top(frame, args.top)
    out = dl.export(
        frame, args.out, {"measures": args.measures, "eps": args.eps, "probe_rows": args.probe_rows}
    )
    print(f"\nscore frame written to {out}")
    return 0


def _converged_line(frame: pl.DataFrame) -> str:
    """Per measure: the share of its pairs converged, and how many settled early."""
    end = int(frame["n_records"].max()) if frame.height else 0
    parts = []
    for (m,), rows in frame.group_by("measure", maintain_order=True):
        early = int((rows["converged"] & (rows["n_records"] < end)).sum())
        parts.append(f"{m} {rows['converged'].mean():.1%} converged ({early:,} of "
                     f"{rows.height:,} before the data ended)")  # fmt: skip
    return "; ".join(parts)


def _measures(names: list[str], probe_rows: int | None) -> list:
    """The demo's measures; ``logreg`` on a uniform sample of ``probe_rows`` symbols if set.

    The default probe is ``lda``, the closed-form probe (one pass of co-moments per
    block, ridge LDA per fold): its rows converge within the demo's seconds. The L1
    logistic probe (``--measures corr logreg``) fits every symbol it reads and stops
    when its scores settled, each checkpoint refitting only the hypotheses with a pair
    still open (``Measure.retire``): on the demo's 157 hypotheses its rare ones need
    every record, so it reads to the end and takes minutes on two cores.
    ``--probe-rows n`` fits it on a uniform sample of ``n`` symbols instead: faster,
    but its pairs then settle only where the sample's error is within eps.
    """
    from dni_lab.backend.measures.logreg import LogReg

    if "lda" in names:
        print("probe: lda, the closed-form probe (--measures corr logreg: the L1 logistic "
              "probe, minutes on two cores)")  # fmt: skip
    if "logreg" in names and probe_rows is not None:
        print(f"logreg: fitted on a uniform sample of {probe_rows:,} symbols, read until "
              "it is full; its scores are the sample's (--probe-rows all: every one)")
    return [LogReg(max_rows=probe_rows) if m == "logreg" else m for m in names]


def _probe_rows(text: str) -> int | None:
    if text == "all":
        return None
    try:
        rows = int(text)
    except ValueError:
        msg = f"--probe-rows takes a count or 'all', not {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if rows < 1:
        raise argparse.ArgumentTypeError(f"--probe-rows must be at least 1, not {rows}")
    return rows


def _progress_line(p: Progress) -> str:
    """One line per block: where the run stands, how fast, how long at most."""
    settled = (p.pairs_converged + p.pairs_decided) / max(p.pairs_total, 1)
    rate = p.records_per_s
    left = p.time_left_s
    return (
        f"  block {p.blocks}: {p.records_read:,} records, {settled:.0%} of pairs settled"
        + (f", {rate:,.0f} records/s" if rate else "")
        + (f", at most {left:.0f} s left" if left is not None else "")
    )


def _print_top(frame: pl.DataFrame, k: int) -> None:
    """Best units per hypothesis: |corr| for correlation, the probe's F1 for logreg."""
    with pl.Config(tbl_rows=60, tbl_cols=8, fmt_str_lengths=40, tbl_hide_dataframe_shape=True):
        if "corr" in frame["measure"].unique().to_list():
            top = (
                frame.filter(pl.col("measure") == "corr", pl.col("unit_score").is_not_null())
                .with_columns(pl.col("unit_score").abs().alias("abs_r"))
                .sort("abs_r", descending=True)
                .group_by("hid", maintain_order=True)
                .head(k)
                .group_by("hid", maintain_order=True)
                .agg(pl.col("unit"), pl.col("unit_score").round(3).alias("corr"))
                .head(15)
            )
            print(f"Top {k} units per hypothesis by |corr| (15 best hypotheses):")
            print(top)
        for name in ("lda", "logreg"):
            if name not in frame["measure"].unique().to_list():
                continue
            probe = (
                frame.filter(pl.col("measure") == name, pl.col("group_score").is_not_null())
                .sort(pl.col("unit_score").abs(), descending=True)
                .group_by("hid", maintain_order=True)
                .agg(pl.col("group_score").first().round(3).alias("F1"), pl.col("unit").head(k))
                .sort("F1", descending=True)
                .head(15)
            )
            what = "LDA probe" if name == "lda" else "L1 logistic probe"
            print(f"\n{what} over all units: cross-validated F1 and its {k} units of largest "
                  "|loading| (correlation with the probe's output):")  # fmt: skip
            print(probe)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dni-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="inspect the SQL auto-completion LSTM (the main job)")
    d.add_argument(
        "--quick",
        action="store_true",
        default=bool(os.environ.get("CI")),
        help="quick model variant and fewer records (default when $CI is set)",
    )
    d.add_argument("--hidden", type=int, default=128)
    d.add_argument("--queries", type=int, default=None, help="held-out queries to cut into windows")
    d.add_argument("--eps", type=float, default=0.025)
    d.add_argument("--measures", nargs="+", default=["corr", "lda"],
                   help="corr, lda (the closed-form probe), logreg (the L1 logistic probe), ...")
    d.add_argument(
        "--probe-rows",
        type=_probe_rows,
        default=None,
        help="symbols logreg fits: 'all' (the default) every symbol read, or a count for "
        "a uniform sample of that many (faster; its scores are the sample's)",
    )
    d.add_argument("--top", type=int, default=3)
    d.add_argument("--out", type=Path, default=Path("dni_demo_scores.parquet"))
    probe_cli.add_parser(sub)  # dni-lab probe fit|apply|report: all of it in probe/cli.py
    args = parser.parse_args(argv)
    if args.command == "probe":
        return probe_cli.run(args)
    if args.command == "demo":
        if args.queries is None:
            args.queries = 150 if args.quick else 1200
        return demo(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
