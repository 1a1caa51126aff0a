"""Sparse-aware scoring of SAE latents: corr and diffmeans, sparse path vs dense path.

Usage::

    python benchmarks/bench_features_sparse.py            # d_sae = 16,384, k = 32
    python benchmarks/bench_features_sparse.py --quick    # d_sae = 2,048, smoke size
    python benchmarks/bench_features_sparse.py --out benchmarks/results/features_sparse.json

A TopK feature set gives each symbol ``k`` active latents out of ``d_sae``. Blocks of
``records × symbols`` latents (indices drawn Zipf-like, so some latents fire often
and most rarely; a few track a hypothesis) are folded into one state per path:

* dense: ``measure.update`` on the ``(R, T, d_sae)`` float32 block (what a dense
  set's latents go through; densifying is *not* counted, so the ratio is conservative);
* sparse: ``measure.update_sparse`` on the block's ``(R, T, k)`` values and indices.

One block goes through both paths untimed first (a warm-up: allocator, kernels), then
``--blocks`` (at least 5) are timed; torch runs on ``--threads`` threads (1 by default,
stated in the output and the results). It prints the median time per block of each path
(and the fastest and slowest), their ratio (target ≥ 5x), the
largest difference between the two paths' final scores (target ≤ 1e-6), and each
path's largest difference from an exact float64 dense pass. All three differences are
taken over the same pairs: every (latent, hypothesis) pair that both paths and the
reference score (the reference is computed ``REF`` latents at a time, units being
scored independently). It asserts nothing; with ``--out`` it stores what it printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402
from dni_lab.backend.extraction.sparse_block import SparseBlock  # noqa: E402
from dni_lab.backend.hypothesis.hypotheses import HypothesisInfo  # noqa: E402
from dni_lab.backend.measures.corr import Corr  # noqa: E402
from dni_lab.backend.measures.diffmeans import DiffMeans  # noqa: E402

N_HYPS = 8
REF = 1024  # latents per chunk of the exact float64 reference


def blocks(n: int, R: int, T: int, d_sae: int, k: int, seed: int = 0):
    """``n`` blocks: (SparseBlock, H, mask), records of random length, k latents a symbol."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, d_sae + 1) ** 0.8  # Zipf-like firing rates
    weights /= weights.sum()
    out = []
    for _ in range(n):
        lengths = rng.integers(T // 2, T + 1, R)
        mask = torch.as_tensor(np.arange(T)[None, :] < lengths[:, None])
        H = np.concatenate(
            [rng.random((R, T, N_HYPS // 2)) < 0.1, rng.normal(size=(R, T, N_HYPS // 2))], axis=2
        )
        idx = np.empty((R, T, k), dtype=np.int64)
        for r in range(R):  # k distinct latents per symbol, popular ones more often
            keys = rng.random((T, d_sae)) ** (1.0 / weights)  # Efraimidis-Spirakis sampling
            idx[r] = np.argpartition(-keys, k, axis=1)[:, :k]
        vals = rng.gamma(2.0, 0.5, (R, T, k))
        vals[..., 0] += 2.0 * H[..., 0]  # the latent in slot 0 follows hypothesis 0
        values = torch.as_tensor(vals, dtype=torch.float32)
        Z = SparseBlock(values, torch.as_tensor(idx), d_sae)
        out.append((Z, torch.as_tensor(H, dtype=torch.float32), mask))
    return out


def reference(name: str, U: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Exact float64 scores of ``U`` ``(N, units)`` against ``H`` ``(N, hyps)``."""
    if name == "corr":
        Uc, Hc = U - U.mean(0), H - H.mean(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (Uc.T @ Hc) / np.sqrt(np.outer((Uc**2).sum(0), (Hc**2).sum(0)))
    B = H > 0.5
    out = np.full((U.shape[1], H.shape[1]), np.nan)
    for j in range(N_HYPS // 2):  # the binary hypotheses
        out[:, j] = U[B[:, j]].mean(0) - U[~B[:, j]].mean(0)
    return out


def exact_scores(name: str, data, d_sae: int) -> np.ndarray:
    """Exact float64 scores ``(d_sae, hyps)`` of every latent, ``REF`` latents at a time."""
    vals = np.concatenate([Z.values[mask].double().numpy() for Z, _, mask in data])
    idx = np.concatenate([Z.indices[mask].numpy() for Z, _, mask in data])
    H = np.concatenate([H[mask].double().numpy() for _, H, mask in data])
    rows = np.broadcast_to(np.arange(len(vals))[:, None], idx.shape)
    out = np.empty((d_sae, N_HYPS))
    for lo in range(0, d_sae, REF):
        hi = min(lo + REF, d_sae)
        U = np.zeros((len(vals), hi - lo))
        inside = (idx >= lo) & (idx < hi)
        U[rows[inside], idx[inside] - lo] = vals[inside]
        out[lo:hi] = reference(name, U, H)
    return out


def run(measure, data, d_sae: int, info, warmup) -> dict:
    dense_s, sparse_s = [], []
    Z, H, mask = warmup  # untimed, into states thrown away
    measure.update(measure.start(d_sae, N_HYPS, info=info), Z.masked(mask).dense(), H, mask)
    measure.update_sparse(measure.start(d_sae, N_HYPS, info=info), Z, H, mask)
    a = measure.start(d_sae, N_HYPS, info=info)
    b = measure.start(d_sae, N_HYPS, info=info)
    for Z, H, mask in data:
        U = Z.masked(mask).dense()  # not timed: the dense path starts from dense latents
        t = time.perf_counter()
        b = measure.update(b, U, H, mask)
        dense_s.append(time.perf_counter() - t)
        del U
        t = time.perf_counter()
        a = measure.update_sparse(a, Z, H, mask)
        sparse_s.append(time.perf_counter() - t)
    ra, rb = measure.result(a), measure.result(b)
    same_nulls = bool((np.isnan(ra.unit_score) == np.isnan(rb.unit_score)).all())
    exact = exact_scores(measure.name, data, d_sae)
    # One set of pairs for all three differences: scored by both paths and the reference.
    pairs = np.isfinite(ra.unit_score) & np.isfinite(rb.unit_score) & np.isfinite(exact)

    def most(x: np.ndarray, y: np.ndarray) -> float:
        return float(np.abs(x - y)[pairs].max())

    return {
        "dense_s": statistics.median(dense_s),
        "sparse_s": statistics.median(sparse_s),
        "ratio": statistics.median(dense_s) / statistics.median(sparse_s),
        "dense_min_max_s": [min(dense_s), max(dense_s)],
        "sparse_min_max_s": [min(sparse_s), max(sparse_s)],
        "max_score_diff": most(ra.unit_score, rb.unit_score),
        "scored_pairs": int(pairs.sum()),
        "sparse_vs_float64": most(ra.unit_score, exact),
        "dense_vs_float64": most(rb.unit_score, exact),
        "same_nulls": same_nulls,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="d_sae 2,048, 2 blocks")
    ap.add_argument("--d-sae", type=int, default=16384)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--records", type=int, default=64, help="records per block")
    ap.add_argument("--symbols", type=int, default=48, help="longest record")
    ap.add_argument("--blocks", type=int, default=6, help="timed blocks (at least 5)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.quick and args.blocks < 5:
        ap.error("--blocks must be at least 5: a median of fewer timings is not a measurement")
    torch.set_num_threads(args.threads)
    d_sae, n = (2048, 2) if args.quick else (args.d_sae, args.blocks)
    torch.manual_seed(0)
    warmup, *data = blocks(n + 1, args.records, args.symbols, d_sae, args.k)
    info = [HypothesisInfo(f"b{i}", "binary") for i in range(N_HYPS // 2)]
    info += [HypothesisInfo(f"c{i}", "continuous") for i in range(N_HYPS // 2)]
    payload = {
        "d_sae": d_sae, "k": args.k, "records_per_block": args.records,
        "symbols_per_record_max": args.symbols, "blocks": n, "hypotheses": N_HYPS,
        "target_ratio": 5.0, "target_max_diff": 1e-6, "threads": args.threads,
        "warmup_blocks": 1,
    }  # fmt: skip
    print(f"d_sae={d_sae:,}, k={args.k}, {n} blocks of {args.records} records × ≤{args.symbols} "
          f"symbols, {N_HYPS} hypotheses (torch threads: {torch.get_num_threads()})")  # fmt: skip
    print(f"{'measure':<12}{'dense s/block':>15}{'sparse s/block':>16}{'ratio':>8}{'max |Δ|':>11}"
          f"{'sparse-f64':>12}{'dense-f64':>11}")  # fmt: skip
    for name, measure in [("corr", Corr()), ("diffmeans", DiffMeans())]:
        r = run(measure, data, d_sae, info, warmup)
        payload[name] = r
        print(f"{name:<12}{r['dense_s']:>15.4f}{r['sparse_s']:>16.4f}{r['ratio']:>7.1f}x"
              f"{r['max_score_diff']:>11.1e}{r['sparse_vs_float64']:>12.1e}"
              f"{r['dense_vs_float64']:>11.1e}")  # fmt: skip
    write_results(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
