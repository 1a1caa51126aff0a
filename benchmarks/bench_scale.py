"""Early stopping at modern scale: a GPT-2-small-shaped model over a million tokens.

Usage::

    python benchmarks/bench_scale.py                      # 12 x 768, >= 1,000,000 tokens
    python benchmarks/bench_scale.py --quick              # 2 x 64 over 20,000 tokens (CI)
    python benchmarks/bench_scale.py --part forward       # dl.inspect vs the bare forward
    python benchmarks/bench_scale.py --part forward --quick

``--part forward`` times ``dl.inspect`` against the bare forward pass of the records it
reads (issue 49, item 2; :mod:`benchmarks.forward_cost`) and stores it in
``results/scale_forward.json``; the default part is what follows.

The model is GPT-2 small's shape (12 blocks, 768 wide, 12 heads, 1,024 positions) built
from a config with seeded random weights, over a byte-level BPE trained here: nothing is
downloaded. The text is Python source from the running interpreter's standard library
(real text, offline), cut into windows of ``--chars`` characters and shuffled with a fixed
seed (early stopping assumes the records come in random order: read in file order, the
first files would stand for all of them). One hypothesis family, the code signals of
:class:`hypotheses.code.CodeFamily` (comment, string, bracket depth, indentation, keyword,
identifier; per character, read per token as the mean over each token's characters), is
scored with ``corr`` against the 768 units of ``blocks.5.hook_resid_post`` (the forward
pass stops after block 5).

Two runs: early stopping at ``eps`` over all the windows (the answer), and a full read
(``eps=None``) of the first windows holding 100,000 tokens (the reference). The script
prints and stores the records and tokens each read, their times, the peak RSS, and the
share of the early-stopped scores within ``eps`` of the reference (the reference has its
own sampling error, about 1/sqrt(its symbols), which the share includes). Targets (issue
34, item 8): answered in <= 5 minutes on 2 cores, memory bounded. It asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402
from hypotheses.code import CodeFamily  # noqa: E402
from hypotheses.windows import Window  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402
from hypotheses.workloads.pysource import stdlib_dir  # noqa: E402

SIGNALS = ["comment", "string", "bracket_depth", "indent", "keyword", "identifier"]
FULL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "tokens": 1_000_000, "vocab": 8192,
        "layer": "blocks.5.hook_resid_post", "reference_tokens": 100_000}  # fmt: skip
QUICK = {"n_layer": 2, "n_embd": 64, "n_head": 4, "tokens": 20_000, "vocab": 512,
         "layer": "blocks.1.hook_resid_post", "reference_tokens": 5_000}  # fmt: skip


def stdlib_sources(max_chars: int) -> list[str]:
    """Pure-Python stdlib files, in sorted order, until ``max_chars`` characters."""
    out, total = [], 0
    for path in sorted(stdlib_dir().glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return out


def windows(sources: list[str], chars: int, tok, tokens: int, seed: int):
    """Shuffled windows of ``chars`` characters holding at least ``tokens`` tokens."""
    wins = [Window(s, i, chars) for s in sources for i in range(0, len(s) - chars + 1, chars)]
    random.Random(seed).shuffle(wins)
    ids = tok([str(w) for w in wins], add_special_tokens=False)["input_ids"]
    counts = [len(i) for i in ids]
    cum = np.cumsum(counts)
    n = int(np.searchsorted(cum, tokens)) + 1
    if n > len(wins):
        raise SystemExit(f"the corpus holds {int(cum[-1]):,} tokens, fewer than {tokens:,}")
    return wins[:n], np.asarray(counts[:n])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small model and corpus (CI)")
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--chars", type=int, default=512, help="characters per record")
    ap.add_argument("--block-size", type=int, default=64, help="records per block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="results file (default: results/scale.json)")
    ap.add_argument("--part", choices=("scale", "forward"), default="scale",
                    help="forward: dl.inspect against the bare forward (scale_forward.json)")
    ap.add_argument("--repeats", type=int, default=3, help="--part forward: timed repeats")
    ap.add_argument("--forward-batch", type=int, default=None,
                    help="--part forward: records per forward pass (default: the block)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.part == "forward":
        return _forward(args, argv)
    size = QUICK if args.quick else FULL
    import transformers

    t0 = time.perf_counter()
    sources = stdlib_sources(6 * size["tokens"])  # ~3.5 characters per token of code
    tok = bpe(sources, vocab_size=size["vocab"])
    records, counts = windows(sources, args.chars, tok, size["tokens"], seed=0)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=1024, n_embd=size["n_embd"], n_layer=size["n_layer"],
        n_head=size["n_head"], bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    model = dl.Model.from_hf(module, tok, name="gpt2-small-shape")
    fam = CodeFamily(name="code", select=SIGNALS)
    fam.level = "char"  # per character: pooled onto each token's characters
    setup_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in module.parameters())
    print(f"{size['n_layer']} x {size['n_embd']} GPT-2 ({n_params / 1e6:.0f}M parameters), "
          f"{len(records):,} windows of {args.chars} characters = {int(counts.sum()):,} tokens "
          f"(setup {setup_s:.0f} s)")  # fmt: skip
    units = [(size["layer"], "*")]
    kw = dict(units=units, block_size=args.block_size, device="cpu", cache=False)

    rss0 = peak_rss_mb()
    t = time.perf_counter()
    early = dl.inspect(model, [fam], ["corr"], records, eps=args.eps, **kw)
    early_s = time.perf_counter() - t
    rss_early = peak_rss_mb()
    read = int(dl.provenance(early)["records_read"])
    print(f"early stopping at eps {args.eps}: {read:,} of {len(records):,} records "
          f"({int(counts[:read].sum()):,} tokens) in {early_s:.1f} s; peak RSS {rss_early:.0f} MB")

    n_ref = int(np.searchsorted(np.cumsum(counts), size["reference_tokens"])) + 1
    t = time.perf_counter()
    ref = dl.inspect(model, [fam], ["corr"], records[:n_ref], eps=None, **kw)
    ref_s = time.perf_counter() - t
    j = early.join(ref, on=["uid", "hid"], suffix="_ref")
    j = j.drop_nulls(["unit_score", "unit_score_ref"])
    diff = (j["unit_score"] - j["unit_score_ref"]).abs().to_numpy()
    within = float(np.mean(diff <= args.eps))
    converged = float(early["converged"].mean()) if "converged" in early.columns else None
    print(f"reference: a full read of {n_ref:,} records ({int(counts[:n_ref].sum()):,} tokens) in "
          f"{ref_s:.1f} s; {within:.1%} of {len(diff):,} early-stopped scores within eps of it "
          f"(largest difference {diff.max():.3f}); {converged:.1%} of pairs converged")  # fmt: skip
    write_results(
        args.out or (None if args.quick else REPO / "benchmarks" / "results" / "scale.json"),
        {
            "command": " ".join(["python", "benchmarks/bench_scale.py", *(argv or sys.argv[1:])]),
            "model": {k: size[k] for k in ("n_layer", "n_embd", "n_head")},
            "parameters": n_params,
            "layer": size["layer"],
            "units": int(early["uid"].n_unique()),
            "hypotheses": SIGNALS,
            "eps": args.eps,
            "records": len(records),
            "tokens": int(counts.sum()),
            "chars_per_record": args.chars,
            "block_size": args.block_size,
            "threads": args.threads,
            "setup_s": setup_s,
            "early": {
                "records_read": read,
                "tokens_read": int(counts[:read].sum()),
                "seconds": early_s,
                "peak_rss_mb": rss_early,
                "rss_before_mb": rss0,
                "converged_share": converged,
            },
            "reference": {"records": n_ref, "tokens": int(counts[:n_ref].sum()), "seconds": ref_s},
            "within_eps": within,
            "pairs_compared": len(diff),
            "max_abs_diff": float(diff.max()),
        },
    )
    return 0


def _forward(args: argparse.Namespace, argv: list[str] | None) -> int:
    from benchmarks.forward_cost import run

    block = args.block_size if "--block-size" in (argv or sys.argv[1:]) else 512  # the default
    res = run(args.quick, args.eps, block, args.forward_batch, args.repeats)
    res["command"] = " ".join(["python", "benchmarks/bench_scale.py", *(argv or sys.argv[1:])])
    res["threads"] = args.threads
    default = REPO / "benchmarks" / "results" / "scale_forward.json"
    write_results(args.out or (None if args.quick else default), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
