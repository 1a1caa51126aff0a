"""By-example queries: the Neural Threshold Algorithm vs a full scan (DeepEverest).

Usage::

    python benchmarks/bench_examples.py            # 2k, 8k, 32k records
    python benchmarks/bench_examples.py --quick    # 1k, 4k records

For a neuron group of a trained model — the parentheses LSTM whose units S are
specialized to the nesting depth (64 units, DeepBase §6.1) — and for a synthetic
skewed layer (an identity "model" over log-normal vectors), it prints per dataset
size: the time to build the layer's MAI/NPI index (one pass over the data), and
per query (top-10 by the sum over the group; 10 nearest neighbours in L2) the
records the NTA ran through the model, as a share of the dataset, its time and
the time of a full scan, and whether both gave the same answer. It asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make dni_lab and hypotheses importable
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import dni_lab as dl  # noqa: E402


def workloads(sizes: list[int]):
    """``(name, model, layer, group, records)`` per workload and size."""
    from hypotheses.workloads import parens

    module, encode, meta = parens.load_specialized(
        4, 0.5, "depth", quick=True, hidden=64, epochs=12
    )
    model = dl.Model(module, encode=encode, name="parens-depth")
    group = meta["specialized_units"][:3]
    pool = parens.records(max(sizes), seed=101)
    for n in sizes:
        yield "parens LSTM, S[:3]", model, "lstm", group, pool[:n]
    ident = dl.Model(nn.Identity(), symbols=lambda r: 1, name="identity")
    rng = np.random.default_rng(0)
    X = rng.lognormal(0, 1.0, size=(max(sizes), 32)).astype(np.float32)
    for n in sizes:
        yield "synthetic log-normal", ident, "", [0, 1, 2], list(X[:n])


def query(kind: str, model, recs, layer, group, index=None) -> dl.examples.ExampleResult:
    """Top-10 by the group's sum, or the 10 nearest neighbours of record 0 (L2)."""
    if kind == "top-10":
        return dl.examples.topk(model, recs, layer, group, 10, "sum", index, device="cpu")
    return dl.examples.knn(model, recs, layer, group, 0, 10, "l2", index, device="cpu")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller datasets")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [1000, 4000] if args.quick else [2000, 8000, 32000]
    head = (
        f"{'workload':22} {'records':>7} {'build s':>8} {'query':6} {'NTA evals':>9} "
        f"{'share':>6} {'NTA s':>7} {'scan s':>7} {'speedup':>7} same"
    )
    print(head)
    print("-" * len(head))
    for name, model, layer, group, recs in workloads(sizes):
        n = len(recs)
        index = dl.examples.NeuronIndex(layer, device="cpu")
        idx, build = timed(lambda: index.fit(model, recs))  # noqa: B023
        for q in ("top-10", "10-NN"):
            nta, scan = (
                query(q, model, recs, layer, group, idx),
                query(q, model, recs, layer, group),
            )
            same = nta.frame["record"].to_list() == scan.frame["record"].to_list()
            print(
                f"{name:22} {n:7d} {build:8.2f} {q:6} {nta.evaluated:9d} "
                f"{nta.share_evaluated:6.1%} {nta.seconds:7.3f} {scan.seconds:7.3f} "
                f"{scan.seconds / nta.seconds:6.1f}x {same}"
            )
    print(
        "\nNTA evals: records run through the model by the threshold algorithm (the target of "
        "a 10-NN query included);\na full scan runs all of them. 'build s' is paid once per "
        "layer and dataset (index: ratio 0.05, 32 partitions)."
    )


if __name__ == "__main__":
    main()
