"""The fixed cost of a ``dl.inspect`` call: fingerprints and the warm-cache path.

Usage::

    python benchmarks/bench_fixed_cost.py              # fixed cost: 40 hypotheses, 7 repeats
    python benchmarks/bench_fixed_cost.py --rss 10000  # peak RSS at 10k and 40k records
    python benchmarks/bench_fixed_cost.py --out benchmarks/results/fixed_cost.json
    python benchmarks/bench_fixed_cost.py --rss 20000 --out benchmarks/results/rss.json

With 40 hypotheses whose values are already in the in-memory hypothesis cache
(36 keyword functions with closures, a function reading a module global, a
``functools.partial``, the SQL parse-tree family and the source-code family),
it prints the median time of

* fingerprinting all 40 (what every call does before reading a block);
* a warm ``dl.inspect`` over 32 records (a stand-in char-LSTM of 128 units):
  fingerprints, cache look-ups, extraction and the measure, i.e. the fixed
  cost a call pays however small the data.

With ``--rss N`` it runs one cold ``dl.inspect`` with the default hypothesis
cache (memory plus a temporary disk store) over N and over 4N records, each in
a fresh process, and prints their peak resident memory.

Targets (issue 11): a fixed cost of at most 50 ms per call; peak RSS at 4x the
records at most 1.3x. It asserts nothing. With ``--out`` it stores what it printed
(the README's Benchmarks table is rendered from those files).
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make dni_lab and hypotheses importable
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from benchmarks.workload import make_model, make_records  # noqa: E402
from dni_lab.backend.engine.resolve import as_families  # noqa: E402

KEYWORDS = (
    "SELECT FROM WHERE AND OR NOT IN BETWEEN LIKE ORDER BY ASC DESC GROUP HAVING LIMIT "
    "DISTINCT COUNT SUM AVG MIN MAX JOIN ON AS IS NULL UNION ALL ANY EXISTS CASE WHEN THEN "
    "ELSE END"
).split()[:36]
THRESHOLD = 3  # read by `long_word`: a module global its fingerprint covers


def keyword(word: str):
    def inside(record: str) -> list[float]:
        out = [0.0] * len(record)
        start = record.find(word)
        while start >= 0:
            out[start : start + len(word)] = [1.0] * len(word)
            start = record.find(word, start + 1)
        return out

    inside.__name__ = f"kw_{word.lower()}"
    return inside


def long_word(record: str) -> list[float]:
    return [float(len(w) > THRESHOLD) for w in record.split(" ") for _ in range(len(w) + 1)][
        : len(record)
    ]


def char_is(record: str, char: str = "(") -> list[float]:
    return [float(c == char) for c in record]


def hypotheses() -> list:
    from hypotheses.code import CodeFamily
    from hypotheses.grammars import sql

    hyps: list = [keyword(w) for w in KEYWORDS]
    hyps += [long_word, functools.partial(char_is, char=","), sql.family(n_rules=95)]
    hyps.append(CodeFamily(select=["string", "bracket_depth"]))
    return hyps


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(repeats: int = 7) -> dict:
    """Median fingerprint time and warm ``dl.inspect`` time over ``repeats`` calls.

    Parameters
    ----------
    repeats
        Timed calls of each kind; the median is reported.

    Returns
    -------
    dict
        ``fingerprints_s``, ``warm_inspect_s`` (the fixed cost), ``target_s`` (0.05)
        and the workload's sizes.
    """
    # set here, not on import: tests import the benchmarks (shapes matter here, not training)
    os.environ.setdefault("DNI_LAB_BENCH_MODEL", "standin")
    import torch

    torch.set_num_threads(1)  # 32 records: threads only add contention on a busy machine
    hyps = hypotheses()
    module, encode, layer, _, _ = make_model(128, quick=True)
    model = dl.Model(module, encode=encode, name="standin")
    records = make_records(32, seed=1, n_rules=95)[0]
    cache = dl.HypothesisCache(directory=False)

    def run() -> None:
        dl.inspect([model], hyps, ["corr"], records, units=[(layer, "*")], eps=None, cache=cache)

    run()  # fills the cache
    misses = cache.misses
    fp = median_s(lambda: [f.fingerprint() for f in as_families(hyps)[0]], repeats)
    warm = median_s(run, repeats)
    assert cache.misses == misses, "the warm runs missed the cache"
    n_sig = sum(len(f.signals()) for f in as_families(hyps)[0])
    print(f"{len(hyps)} hypotheses ({n_sig} signals), {len(records)} records, 128 units")
    print(f"fingerprints of all hypotheses: {fp * 1e3:8.1f} ms per call")
    print(f"warm dl.inspect (fixed cost):   {warm * 1e3:8.1f} ms per call  (target <= 50 ms)")
    return {"hypotheses": len(hyps), "signals": n_sig, "records": len(records), "units": 128,
            "repeats": repeats, "fingerprints_s": fp, "warm_inspect_s": warm,
            "target_s": 0.05}  # fmt: skip


def child(n_records: int) -> None:
    """One cold run over ``n_records`` with the default cache; prints peak RSS in MiB."""
    module, encode, layer, _, _ = make_model(128, quick=True)
    model = dl.Model(module, encode=encode, name="standin")
    records = make_records(n_records, seed=1, n_rules=95)[0]
    dl.inspect([model], hypotheses(), ["corr"], records, units=[(layer, "*")], eps=None)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def rss(n_records: int) -> dict:
    """Peak RSS of one cold run over ``n_records`` and over 4x as many, each in a child.

    Parameters
    ----------
    n_records
        The smaller size; the larger is four times it.

    Returns
    -------
    dict
        ``records`` (both sizes), ``peak_rss_mib`` (both), ``ratio`` (large / small)
        and ``target_ratio`` (1.3).
    """
    peaks = []
    for n in (n_records, 4 * n_records):
        with tempfile.TemporaryDirectory() as store:
            env = {**os.environ, "DNI_LAB_CACHE": store}
            cmd = [sys.executable, __file__, "--child", str(n)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        peaks.append(float(out.stdout.split()[-1]))
        print(f"{n:7d} records: peak RSS {peaks[-1]:7.0f} MiB")
    print(f"ratio at 4x the records: {peaks[1] / peaks[0]:.2f}  (target <= 1.3)")
    return {"records": [n_records, 4 * n_records], "peak_rss_mib": peaks,
            "ratio": peaks[1] / peaks[0], "target_ratio": 1.3}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rss", type=int, help="measure peak RSS at N and 4N records")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls (median)")
    parser.add_argument("--out", "--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
    elif args.rss:
        write_results(args.out, rss(args.rss))
    else:
        write_results(args.out, main(args.repeats))
