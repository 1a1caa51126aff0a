"""``dl.generate`` against Hugging Face's ``generate`` and a loop without a KV cache (issue 49.6).

Usage::

    python benchmarks/bench_generate.py            # GPT-2 6 x 256, 8 prompts, 64 new tokens
    python benchmarks/bench_generate.py --quick    # 2 blocks, 4 prompts, 16 tokens: a smoke run
    python benchmarks/bench_generate.py --out benchmarks/results/generate.json

A GPT-2 built from a config (random weights: time does not depend on training), a
byte-level BPE trained here, prompts of about 32 tokens padded on the left. Timed
side by side, interleaved, median of ``--repeats``, one thread: Hugging Face's
``module.generate(do_sample=False)``; ``dl.generate`` alone, reading two names at every
token, and steering one; and the same greedy loop run without a key/value cache (each
step runs the whole sequence again), which is what a hook-per-forward loop costs. The
tokens of every greedy run are checked equal first. The load average is recorded: on a
shared machine the numbers are contended.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

WORDS = "select from where insert into values table column index join group order by".split()


def prompts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(words // 2, words)))) for _ in range(n)]


def no_cache_loop(module, enc, new: int) -> torch.Tensor:
    """Greedy decoding that runs the whole sequence at every step (no key/value cache)."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    with torch.no_grad():
        for _ in range(new):
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            logits = module(input_ids=ids, attention_mask=mask, position_ids=pos,
                            use_cache=False).logits[:, -1]  # fmt: skip
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
    return ids


def main(argv: list[str] | None = None) -> dict:
    """Time the five ways; returns (and with ``--out`` writes) the numbers."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 blocks, 4 prompts: a smoke run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", "--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(1)
    n, new, layers, width = (4, 16, 2, 128) if args.quick else (8, 64, 6, 256)
    texts = prompts(n, 32)
    tok = bpe(prompts(200, 32, seed=1), vocab_size=300)
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=width, n_layer=layers,
                     n_head=8, bos_token_id=tok.eos_token_id,
                     eos_token_id=tok.eos_token_id)  # fmt: skip
    module = GPT2LMHeadModel(cfg).eval()
    model = dl.Model.from_hf(module, tok)
    tok.padding_side = "left"  # this tokenizer is the benchmark's own
    enc = tok(texts, return_tensors="pt", padding=True)
    read = [f"blocks.{layers // 2}.hook_resid_post", f"blocks.{layers - 1}.attn.hook_z"]
    steer = {f"blocks.{layers // 2}.hook_resid_post": torch.zeros(width)}
    ways = {
        "hf_generate": lambda: module.generate(**enc, max_new_tokens=new, do_sample=False,
                                               pad_token_id=tok.pad_token_id, eos_token_id=None),
        "dl_generate": lambda: dl.generate(model, texts, new, stop_at_eos=False).sequences,
        "dl_generate_read": lambda: dl.generate(model, texts, new, activations=read,
                                                stop_at_eos=False).sequences,
        "dl_generate_steer": lambda: dl.generate(model, texts, new, steer=steer,
                                                 stop_at_eos=False).sequences,
        "no_kv_cache_loop": lambda: no_cache_loop(module, enc, new),
    }  # fmt: skip
    model.layer_widths(texts[:1], "cpu")  # the probe pass, once, outside the timings
    outs = {k: f() for k, f in ways.items()}  # warm-up, and every way writes the same tokens
    same = {k: bool(torch.equal(v, outs["hf_generate"])) for k, v in outs.items()}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.repeats):
        for k, f in ways.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {f"seconds_{k}": v for k, v in med.items()}
    out.update({f"ratio_{k}_vs_hf": v / med["hf_generate"] for k, v in med.items()})
    out["speedup_kv_vs_no_cache"] = med["no_kv_cache_loop"] / med["dl_generate"]
    out.update(same_tokens=same, prompts=n, new_tokens=new,
               prompt_tokens=int(enc["input_ids"].shape[1]), blocks=layers, width=width,
               repeats=args.repeats, threads=torch.get_num_threads(),
               quick=args.quick, load_average=list(os.getloadavg()),
               contended=os.getloadavg()[0] > 1.0)  # fmt: skip
    print(f"GPT-2 {layers} x {width}, {n} prompts of {enc['input_ids'].shape[1]} tokens "
          f"(left-padded), {new} new tokens, 1 thread; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    for k, v in med.items():
        print(f"  {k:20s} {v:8.3f} s   {v / med['hf_generate']:5.2f}x HF generate   "
              f"same tokens: {same[k]}")  # fmt: skip
    print(f"  the KV cache: {out['speedup_kv_vs_no_cache']:.2f}x faster than the loop without")
    write_results(args.out, out)
    return out


if __name__ == "__main__":
    main()
