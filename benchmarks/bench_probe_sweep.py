"""``Probe.sweep`` in one pass against fitting ``Probe(layer)`` layer by layer.

Usage::

    python benchmarks/bench_probe_sweep.py            # GPT-2 (4 blocks, width 128), 600 records
    python benchmarks/bench_probe_sweep.py --quick    # smoke size (< 60 s)

A GPT-2 built from a config (random weights, a byte-level BPE trained here on the
records: nothing downloaded) and a character-level "SQL keyword" hypothesis pooled onto
its tokens. Side by side in one run, on the same records, layers and parameters:

1. ``per_layer``: the sweep as it was before it read every layer at once: per layer,
   ``Probe(layer).fit`` on the training records, the held-out AUROC with its record
   bootstrap, and ``Probe.nulls`` (control task, random directions, the untrained copy),
   each reading its own layer with its own forward passes;
2. ``sweep``: ``dl.Probe.sweep``: one pass per block of records for every layer (and one
   over the untrained copy), each layer's probe fitted from its columns.

Each side's time is the fastest of ``--repeats`` runs (the first run of each plans its
reads: both pay it once); forward passes are counted by a pre-hook on the token
embedding; the largest AUROC difference between the two sides is stored (it must be 0 up
to 1e-6). Results go to ``benchmarks/results/probe_sweep.json`` with the load average:
on a shared machine the numbers are contended.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402

WORDS = ["select", "from", "where", "insert", "into", "values", "a", "b", "tab", "x1", "=", "1"]


def corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(4, 16)))) for _ in range(n)]


def keyword_hypothesis() -> Any:
    import dni_lab as dl

    @dl.hypothesis(kind="binary", level="char")
    def keyword(record: str) -> list[float]:
        out = np.zeros(len(record))
        for w in ("select", "from", "where"):
            i = record.find(w)
            while i >= 0:
                out[i : i + len(w)] = 1
                i = record.find(w, i + 1)
        return out

    return keyword


def build(n_layer: int, width: int, records: list[str]) -> tuple[Any, Any]:
    import torch
    import transformers

    import dni_lab as dl
    from hypotheses.workloads.hf_tokenizers import bpe

    tok = bpe(records, vocab_size=300)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=width,
                                  n_layer=n_layer, n_head=4, bos_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id)  # fmt: skip
    model = dl.Model.from_hf(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="gpt2-bench")
    return model, dl.verify.untrained_copy(model, seed=1)


def per_layer(model, records, hyp, layers, untrained, kw) -> dict[str, float]:
    """The layer-by-layer sweep (what ``Probe.sweep`` did before): held-out AUROC per layer."""
    import dni_lab as dl
    from dni_lab.probe import metrics
    from dni_lab.probe.sweep import _split

    train, held, _, _ = _split(records, None, 4)
    out = {}
    for layer in layers:
        p = dl.Probe(layer, folds=None, C=kw["C"], block_size=kw["block_size"]).fit(
            model, train, hyp
        )
        z, r = p._read(model, held, False, hyp)
        at = ~np.isnan(r.y)
        auc, *_ = metrics.bootstrap(lambda w, z=z[at], y=r.y[at]: metrics.auroc(z, y, w),
                                    r.record[at], kw["n_boot"], 0, 0.95)  # fmt: skip
        p.nulls(model, held, hyp, train=train, untrained=untrained, n_controls=1,
                n_directions=5)  # fmt: skip
        out[layer] = auc
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke size (< 60 s)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "probe_sweep.json"))
    args = ap.parse_args()
    import torch

    import dni_lab as dl

    n_records, n_layer, width = (120, 2, 64) if args.quick else (600, 4, 128)
    repeats = args.repeats or 2
    records = corpus(n_records, seed=3)
    model, untrained = build(n_layer, width, records)
    hyp = keyword_hypothesis()
    layers = [f"transformer.h.{i}" for i in range(n_layer)]
    kw = {"C": 0.1, "block_size": 64, "n_boot": 200}

    calls = {"n": 0}
    model.module.transformer.wte.register_forward_pre_hook(
        lambda *_: calls.__setitem__("n", calls["n"] + 1)
    )
    times: dict[str, list[float]] = {"per_layer": [], "sweep": []}
    passes: dict[str, int] = {}
    aucs: dict[str, dict[str, float]] = {}
    for _ in range(repeats):  # alternated, so both sides meet the same load
        calls["n"] = 0
        t = time.perf_counter()
        aucs["per_layer"] = per_layer(model, records, hyp, layers, untrained, kw)
        times["per_layer"].append(time.perf_counter() - t)
        passes["per_layer"] = calls["n"]
        calls["n"] = 0
        t = time.perf_counter()
        sw = dl.Probe.sweep(model, records, hyp, layers=layers, untrained=untrained,
                            n_controls=1, n_directions=5, **kw)  # fmt: skip
        times["sweep"].append(time.perf_counter() - t)
        passes["sweep"] = calls["n"]
        aucs["sweep"] = dict(zip(sw.frame["layer"], sw.frame["auroc"], strict=True))
    best = {k: min(v) for k, v in times.items()}
    diff = max(abs(aucs["sweep"][k] - aucs["per_layer"][k]) for k in layers)
    res = {
        "workload": {
            "model": f"GPT-2 from a config, {n_layer} blocks, width {width}",
            "records": n_records,
            "layers": layers,
            "hypothesis": "SQL keyword (char)",
            "untrained_copy": True,
            **kw,
        },
        "per_layer_s": best["per_layer"],
        "sweep_s": best["sweep"],
        "speedup": best["per_layer"] / best["sweep"],
        "forward_passes": passes,
        "max_auroc_difference": diff,
        "times_s": times,
        "torch_threads": torch.get_num_threads(),
        "contended": os.getloadavg()[0] > 1.0,
    }
    print(f"{n_records} records, {n_layer} layers, load {os.getloadavg()[0]:.2f}")
    print(f"per layer: {best['per_layer']:.2f} s, {passes['per_layer']} forward passes")
    print(f"sweep    : {best['sweep']:.2f} s, {passes['sweep']} forward passes")
    print(f"speedup  : {res['speedup']:.2f}x   max |AUROC difference| {diff:.2e}")
    write_results(Path(args.out) if not args.quick else None, res)


if __name__ == "__main__":
    main()
