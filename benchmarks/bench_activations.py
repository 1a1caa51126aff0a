"""``dl.activations`` against TransformerLens's ``run_with_cache`` and nnsight's ``.save()``.

Usage::

    python benchmarks/bench_activations.py            # GPT-2 small's shape, 64 x ~128 tokens
    python benchmarks/bench_activations.py --quick    # 4 x 256, 8 records: a smoke run
    python benchmarks/bench_activations.py --out benchmarks/results/activations.json
    python benchmarks/bench_activations.py --every --out benchmarks/results/activations.json

A GPT-2 of GPT-2 small's shape (12 blocks, 768 wide, 50,257-token vocabulary; random
weights: time does not depend on training) built from a config, a byte-level BPE trained
here, and the records are saved to ``.dni_cache/activations-bench``; nothing comes from a
hub. Each (tool, workload) runs in its own process of the side environment
``.dni_cache/zoo-venv`` (TransformerLens 3.9 and dni_lab editable; ``make zoo-env``; nnsight
is timed where it is installed there), so each peak RSS (``ru_maxrss``) is its own and
includes the activations kept. One torch thread. Workloads:

* ``block3``: ``blocks.3.hook_resid_post`` of every record;
* ``all``: every block's ``hook_resid_post``;
* ``every`` (``--every``: this workload alone, its rows added to the results file's
  ``every`` key, the other keys kept): every name TransformerLens 4.3's
  ``TransformerBridge.run_with_cache`` returns with no ``names_filter`` (legacy hooks,
  bridge aliases, attention patterns, logits), but the token ids and positions
  (``embed.hook_in``, ``pos_embed.hook_in``), which hold no units. TransformerLens runs in
  ``.dni_cache/peers-venv`` (``--peers-python``), dni_lab in this interpreter; ours reads
  them with ``shapes="transformer_lens"``. Printed: both tools' time and peak RSS and
  their ratios, and the largest |difference| per name on the first records at real
  tokens (attention scores: where both are finite). Its shape: 4 blocks, 512 wide, 8
  heads, GPT-2's vocabulary, 64 records of ~64 tokens in batches of 16 (every name of
  GPT-2 small's shape would hold some 10 GB per tool). Two ways of ours: ``ours`` (one
  cache over every record: ``block_size=len(records), forward_batch=16``) and
  ``ours_blocks`` (``stream=True, block_size=16``, every block's cache kept: the loop a
  TransformerLens user writes around ``run_with_cache``).

Tools, each keeping every record's activations on the CPU (what a user then reads):

* ``ours``: ``dl.activations(model, records, names, block_size=batch)``;
* ``ours_stream``: the same with ``stream=True``, each block dropped after it is read
  (memory bounded by one block: the streaming use);
* ``transformer_lens``: ``TransformerBridge.run_with_cache(names_filter=..., stop_at_layer=...)``
  per batch of records padded to its longest, keeping the cached tensors;
* ``nnsight``: ``.trace`` saving the blocks' outputs, then ``tracer.stop()``.

Printed and written: tokens per second (real tokens / median seconds of ``--repeats``; also
per CPU second of the process, which a busy machine's neighbours move least), peak
RSS in MiB (``VmHWM`` reset after loading and a warm-up, so the weights, all read into
memory first, and each tool's libraries count, the loading does not), what the runs added
to the RSS they started at, and the largest difference from a forward hook on each block at
real tokens.
Timings on a shared machine are not evidence: re-run it on a quiet one. Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDE = REPO / ".dni_cache" / "zoo-venv" / "bin" / "python"
PEERS = REPO / ".dni_cache" / "peers-venv" / "bin" / "python"
#: what TransformerLens's cache holds that is no activation: token ids and positions
IDS = ("embed.hook_in", "pos_embed.hook_in")
WORDS = "select from where insert into values table column index join group order by".split()
BLOCK = 3
TOOLS = ("ours", "ours_stream", "transformer_lens", "nnsight")


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> None:
    """Reset the process's peak RSS (``VmHWM``; Linux >= 4.0: ``5 > clear_refs``)."""
    import gc

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")


def _peak_mb(field: str = "VmHWM") -> float:
    """Peak RSS since :func:`_reset_peak` (``VmRSS``: now), in MiB; the weights and the
    libraries loaded count too: they stay resident."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the side process: one tool, one workload ------------------------------------------------
def side(tool: str, workload: str, where: Path) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if workload == "every":
        return every_side(tool, where)
    import torch
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    data = json.loads((where / "data.json").read_text())
    tok = PreTrainedTokenizerFast.from_pretrained(str(where))
    tok.padding_side = "right"
    module = GPT2LMHeadModel.from_pretrained(str(where), attn_implementation="eager").eval()
    with torch.inference_mode():  # weights load memory-mapped, resident once read: read them
        for p in module.parameters():  # all now, so that no tool is charged for paging them in
            p.sum()
    n = module.config.n_layer
    blocks = [BLOCK] if workload == "block3" else list(range(n))
    names = [f"blocks.{i}.hook_resid_post" for i in blocks]
    texts, B = data["records"], data["batch"]
    run = globals()[f"_{tool}"](module, tok, names, blocks, B)
    out = {"tool": tool, "workload": workload, "rss_loaded_mb": rss_mb()}
    with torch.inference_mode():
        run(texts[:2])  # warm-up
        _reset_peak()  # the peak of the runs, not of loading the weights
        out["rss_start_mb"] = _peak_mb("VmRSS")  # weights, libraries: before any run
        times, cpu = [], []
        for _ in range(data["repeats"]):
            t, c = time.perf_counter(), time.process_time()
            kept = run(texts)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)  # what a busy machine's neighbours move least
            del kept
        out["rss_peak_mb"] = _peak_mb()
        out["rss_added_mb"] = out["rss_peak_mb"] - out["rss_start_mb"]  # what the runs held
        # equal to a forward hook on each block written by hand, at real tokens
        enc = tok(texts[:2], padding=True, return_tensors="pt")
        want = []
        hooks = [module.transformer.h[b].register_forward_hook(
            lambda _m, _a, o: want.append((o[0] if isinstance(o, tuple) else o).clone()))
            for b in blocks]  # fmt: skip
        module(**enc)
        for h in hooks:
            h.remove()
        got = run(texts[:2])
        keep = enc["attention_mask"].bool()
        out["max_abs_diff"] = max(
            float((g[keep] - w[keep]).abs().max()) for g, w in zip(got, want, strict=True)
        )
    tokens = sum(len(tok(t)["input_ids"]) for t in texts)
    med = statistics.median(times)
    cpu_med = statistics.median(cpu)
    out.update(seconds=med, tokens=tokens, tokens_per_s=tokens / med, cpu_seconds=cpu_med,
               tokens_per_cpu_s=tokens / cpu_med)  # fmt: skip
    return out


def _ours(module, tok, names, blocks, B):
    import dni_lab as dl

    model = dl.Model.from_hf(module, tok, name="gpt2")

    def run(texts):
        cache = dl.activations(model, texts, names, block_size=B, device="cpu")
        return [cache[nm] for nm in names]

    return run


def _ours_stream(module, tok, names, blocks, B):
    import dni_lab as dl

    model = dl.Model.from_hf(module, tok, name="gpt2")

    def run(texts):
        first = None
        for block in dl.activations(model, texts, names, block_size=B, device="cpu", stream=True):
            first = first or [block[nm] for nm in names]  # the rest is dropped: bounded memory
        return first

    return run


def _transformer_lens(module, tok, names, blocks, B):
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=module, tokenizer=tok)
    wanted = set(names)

    def run(texts):
        kept = []
        for i in range(0, len(texts), B):
            enc = tok(texts[i : i + B], padding=True, return_tensors="pt")
            _, cache = bridge.run_with_cache(enc["input_ids"], attention_mask=enc["attention_mask"],
                                             names_filter=lambda s: s in wanted,
                                             stop_at_layer=max(blocks) + 1)  # fmt: skip
            kept.append([cache[nm] for nm in names])
        return kept[0]

    return run


def _nnsight(module, tok, names, blocks, B):
    from nnsight import LanguageModel

    lm = LanguageModel(module, tokenizer=tok)
    tok.padding_side = "right"  # LanguageModel sets left (for generation); all tools pad right

    def run(texts):
        kept = []
        for i in range(0, len(texts), B):
            enc = tok(texts[i : i + B], padding=True, return_tensors="pt")
            outs = []
            with lm.trace(dict(enc)) as tracer:
                for b in blocks:
                    outs.append(lm.transformer.h[b].output.save())
                tracer.stop()
            kept.append([o[0] if isinstance(o, tuple) else o for o in outs])
        return kept[0]

    return run


# -- the every-name workload ---------------------------------------------------------------
def every_side(tool: str, where: Path) -> dict:
    """One tool reading every name TransformerLens returns; values of 2 records to a file."""
    import torch
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    data = json.loads((where / "data.json").read_text())
    tok = PreTrainedTokenizerFast.from_pretrained(str(where))
    tok.padding_side = "right"
    module = GPT2LMHeadModel.from_pretrained(str(where), attn_implementation="eager").eval()
    module = module.to(getattr(torch, data.get("dtype", "float32")))  # --dtype: both tools
    with torch.inference_mode():
        for p in module.parameters():
            p.sum()
    texts, B = data["records"], data["batch"]
    names_file = where / "every_names.json"
    if tool == "transformer_lens":
        from transformer_lens.model_bridge import TransformerBridge

        bridge = TransformerBridge.boot_transformers("gpt2", hf_model=module, tokenizer=tok)

        def run(texts):  # one cache per batch padded to its longest, kept whole
            kept = []
            for i in range(0, len(texts), B):
                enc = tok(texts[i : i + B], padding=True, return_tensors="pt")
                _, cache = bridge.run_with_cache(enc["input_ids"],
                                                 attention_mask=enc["attention_mask"])
                for k in cache.keys():
                    cache[k]
                kept.append(cache)
            return kept

        def per_record(kept, texts):
            enc = tok(texts, padding=True, return_tensors="pt")
            n = enc["attention_mask"].sum(1).tolist()
            cache = kept[0]
            return {k: [(v[i, :, : n[i], : n[i]] if "hook_pattern" in k or "attn_scores" in k
                         else v[i, : n[i]]).clone() for i in range(len(texts))]
                    for k, v in cache.items() if k not in IDS}  # fmt: skip
    else:
        import dni_lab as dl

        model = dl.Model.from_hf(module, tok, name="gpt2")
        names = json.loads(names_file.read_text())

        def run(texts):
            if tool == "ours_blocks":  # one cache per batch, all kept: run_with_cache's loop
                kept = list(dl.activations(model, texts, names, block_size=B, device="cpu",
                                           stream=True, shapes="transformer_lens"))  # fmt: skip
            else:  # one cache over every record: forward passes of B records, reassembled
                kept = [dl.activations(model, texts, names, block_size=len(texts),
                                       forward_batch=B, device="cpu", shapes="transformer_lens")]
            for cache in kept:
                for k in names:
                    cache[k]
            return kept

        def per_record(kept, texts):
            cache = kept[0]
            return {k: [cache.record(i, k).clone() for i in range(len(texts))] for k in names}

    out = {"tool": tool, "workload": "every"}
    with torch.inference_mode():
        kept = run(texts[:2])  # warm-up, and the values compared
        values = per_record(kept, texts[:2])
        if tool == "transformer_lens":
            names_file.write_text(json.dumps([k for k in kept[0].keys() if k not in IDS]))
            out["tl_keys"] = list(kept[0].keys())
        torch.save(values, where / f"every-{tool}.pt")
        del kept, values
        _reset_peak()
        out["rss_start_mb"] = _peak_mb("VmRSS")
        times, cpu = [], []
        for _ in range(data["repeats"]):
            t, c = time.perf_counter(), time.process_time()
            kept = run(texts)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            del kept
        out["rss_peak_mb"] = _peak_mb()
        out["rss_added_mb"] = out["rss_peak_mb"] - out["rss_start_mb"]
    tokens = sum(len(tok(t)["input_ids"]) for t in texts)
    out.update(seconds=statistics.median(times), cpu_seconds=statistics.median(cpu),
               seconds_all=[round(t, 3) for t in times], tokens=tokens)  # fmt: skip
    return out


def every_diffs(where: Path) -> dict[str, float]:
    """max |ours - TransformerLens| per name over the records both saved (inf: a shape differs)."""
    import torch

    theirs = torch.load(where / "every-transformer_lens.pt")
    ours = torch.load(where / "every-ours.pt")
    out = {}
    for k, recs in theirs.items():
        if k not in ours:
            out[k] = None
            continue
        worst = 0.0
        for a, b in zip(ours[k], recs, strict=True):
            if a.shape != b.shape:
                worst = float("inf")
                break
            a, b = _masked(a.float()), _masked(b.float())
            both = torch.isfinite(a) & torch.isfinite(b)
            if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
                worst = float("inf")
                break
            worst = max(worst, float((a[both] - b[both]).abs().max()) if both.any() else 0.0)
        out[k] = worst
    return out


def _masked(t):
    """A masked attention score as -inf: TransformerLens 4.3's bridge holds the dtype's
    minimum there, dni_lab (and TransformerLens's HookedTransformer) -inf."""
    import torch

    return t.masked_fill(t <= torch.finfo(t.dtype).min / 2, float("-inf"))


def run_every(args, where: Path) -> dict:
    """TransformerLens (in the peers' environment) first: it writes the names ours reads."""
    rows = []
    ours = Path(sys.executable)
    for tool, python in (("transformer_lens", args.peers_python), ("ours", ours),
                         ("ours_blocks", ours)):  # fmt: skip
        cmd = [str(python), __file__, "--side", tool, "every", str(where)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode or not line:
            sys.exit(f"every/{tool} failed: {p.stderr.strip()[-2000:]}")
        rows.append(json.loads(line[0][7:]))
    tl = rows[0]
    diffs = every_diffs(where)
    keys = tl.pop("tl_keys")
    ratios = {r["tool"]: dict(
        time=r["seconds"] / tl["seconds"], cpu=r["cpu_seconds"] / tl["cpu_seconds"],
        time_fastest=min(r["seconds_all"]) / min(tl["seconds_all"]),
        peak_rss=r["rss_peak_mb"] / tl["rss_peak_mb"],
        added_rss=r["rss_added_mb"] / max(tl["rss_added_mb"], 1e-9),
    ) for r in rows[1:]}  # fmt: skip
    result = dict(
        names=len(diffs), tl_keys=len(keys), left_out=list(IDS),
        missing=[k for k, v in diffs.items() if v is None], ratios=ratios,
        max_abs_diff=max((v for v in diffs.values() if v is not None), default=None),
        max_abs_diff_per_name=diffs, rows=rows,
    )  # fmt: skip
    for r in rows:
        print(f"every  {r['tool']:17} {r['seconds']:7.3f} s ({r['cpu_seconds']:7.3f} CPU s)  "
              f"peak RSS {r['rss_peak_mb']:7.0f} MiB (+{r['rss_added_mb']:5.0f} over its start)")
    for tool, q in ratios.items():
        print(f"every  {tool} / TransformerLens: time {q['time']:.2f}x (CPU {q['cpu']:.2f}x, "
              f"fastest repeats {q['time_fastest']:.2f}x), "
              f"peak RSS {q['peak_rss']:.2f}x (added {q['added_rss']:.2f}x)")
    print(f"every  {result['names']} names, max |diff| {result['max_abs_diff']:.2e}, "
          f"missing {result['missing']}")
    worst = sorted(diffs.items(), key=lambda kv: -(kv[1] if kv[1] is not None else 1e9))[:5]
    print("       largest |diff| per name: " + ", ".join(f"{k} {v:.1e}" for k, v in worst))
    return result


# -- the parent: build, run every side, write ----------------------------------------------
def build(where: Path, quick: bool, n_records: int, tokens: int, batch: int, repeats: int,
          shape: dict | None = None, dtype: str = "float32"):
    import numpy as np
    import torch
    import transformers

    sys.path.insert(0, str(REPO))
    from hypotheses.workloads.hf_tokenizers import bpe

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, tokens // 2)) for _ in range(n_records)]
    tok = bpe(texts, vocab_size=300)
    torch.manual_seed(0)
    if shape is None:
        shape = dict(n_embd=256, n_layer=4, n_head=4) if quick else dict(n_embd=768, n_layer=12,
                                                                           n_head=12)  # fmt: skip
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=1024, **shape,
                                  bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    module = transformers.GPT2LMHeadModel(cfg).eval()
    where.mkdir(parents=True, exist_ok=True)
    module.save_pretrained(str(where))
    tok.save_pretrained(str(where))
    data = dict(records=texts, batch=batch, repeats=repeats, shape=shape, dtype=dtype)
    (where / "data.json").write_text(json.dumps(data))
    return shape


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--side", nargs=3, metavar=("TOOL", "WORKLOAD", "DIR"))
    ap.add_argument("--python", type=Path, default=SIDE, help="the side environment's python")
    ap.add_argument("--peers-python", type=Path, default=PEERS,
                    help="TransformerLens 4.3's environment (--every)")
    ap.add_argument("--every", action="store_true", help="the every-name workload alone")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="the model's dtype in the every-name workload (results: every or "
                    "every_bfloat16)")  # fmt: skip
    args = ap.parse_args()
    if args.side:
        print("RESULT " + json.dumps(side(args.side[0], args.side[1], Path(args.side[2]))))
        return
    if args.every:
        sys.path.insert(0, str(REPO))
        from benchmarks.results_io import environment

        where = REPO / ".dni_cache" / ("activations-every-quick" if args.quick
                                       else "activations-every")  # fmt: skip
        # every name of GPT-2 small's shape would hold ~10 GB per tool: 4 blocks, 512 wide
        n, tokens, batch = (8, 32, 4) if args.quick else (64, 64, 16)
        shape = build(where, args.quick, n, tokens, batch, 1 if args.quick else args.repeats,
                      dict(n_embd=256 if args.quick else 512, n_layer=4,
                           n_head=4 if args.quick else 8), args.dtype)  # fmt: skip
        every = run_every(args, where)
        env = environment()
        # another job beside this one-thread run: wall-clock ratios are noise, CPU seconds less
        every.update(quick=args.quick, dtype=args.dtype, shape=shape, records=n,
                     tokens_per_record=tokens,
                     batch=batch, side_torch_threads=1, environment=env,
                     contended=max(env["load_average"][0], env["load_average_at_start"][0])
                     > (os.cpu_count() or 1) / 2)  # fmt: skip
        if args.out:
            old = json.loads(args.out.read_text()) if args.out.exists() else {}
            old["every" if args.dtype == "float32" else f"every_{args.dtype}"] = every
            args.out.write_text(json.dumps(old, indent=1) + "\n")
        return
    if not args.python.exists():
        sys.exit(f"no side environment at {args.python}; build it with `make zoo-env`.")
    where = REPO / ".dni_cache" / ("activations-bench-quick" if args.quick else "activations-bench")
    n, tokens, batch = (8, 32, 4) if args.quick else (64, 128, 16)
    shape = build(where, args.quick, n, tokens, batch, 1 if args.quick else args.repeats)
    rows = []
    for workload in ("block3", "all"):
        for tool in TOOLS:
            cmd = [str(args.python), __file__, "--side", tool, workload, str(where)]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                err = (p.stderr.strip().splitlines() or ["?"])[-1]
                rows.append(dict(tool=tool, workload=workload, error=err))
            else:
                rows.append(json.loads(line[0][7:]))
            r = rows[-1]
            print(f"{workload:6} {tool:17} " + (
                f"{r['tokens_per_s']:9.0f} tokens/s ({r['tokens_per_cpu_s']:6.0f} per CPU s)  "
                f"peak RSS {r['rss_peak_mb']:7.0f} MiB "
                f"(+{r['rss_added_mb']:5.0f} over its start)  "
                f"max |diff| {r['max_abs_diff']}" if "error" not in r else f"error: {r['error']}"
            ), flush=True)  # fmt: skip
    if args.out:
        sys.path.insert(0, str(REPO))
        from benchmarks.results_io import environment

        result = dict(quick=args.quick, side_torch_threads=1, shape=shape, records=n,
                      tokens_per_record=tokens, batch=batch, rows=rows,
                      environment=environment())  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
