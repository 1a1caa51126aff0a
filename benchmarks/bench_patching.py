"""Patching grids: dni_lab's ``dl.verify.patch_grid`` against TransformerLens' helpers.

Usage::

    python benchmarks/bench_patching.py            # 16 pairs of 16 tokens, 5 repeats
    python benchmarks/bench_patching.py --quick    # 8 pairs of 8 tokens: a smoke run

The same small GPT-2 (4 blocks × 256 wide, 8 heads, random weights, a tokenizer trained
here) is saved once; each tool then runs in its own process (``patching_side.py``):
TransformerLens 4 (``TransformerBridge`` over the same Hugging Face module, in
``.dni_cache/peers-venv``) and dni_lab (this environment), on the same token ids and
answers. Two grids, as TransformerLens users sweep them: ``resid_pre`` layer × position
(``get_act_patch_resid_pre``) and the heads' outputs layer × head over all positions
(``get_act_patch_attn_head_out_all_pos``). Printed and written to
``benchmarks/results/patching.json``: each tool's median seconds per grid (the clean and
corrupted baselines included on both sides), the ratio ours / TransformerLens (target
1.0, bar 1.5), the same with dni_lab's null grid (and with it, GPT-2's GELU run step by
step as TransformerLens runs it, where ``patch_grid`` fuses it), and the largest
|difference| over the grid's cells (target 1e-4), beside the spread of TransformerLens'
cells (``value_range``: what a difference reads against). A third grid is timed the
same way: the heads' attention patterns layer × head
(``get_act_patch_attn_head_pattern_all_pos``; ``site="pattern"``). The other sites'
grids (``resid_mid``, ``attn_out``, ``mlp_out``, q / k / v, heads per position) are
compared cell by cell, untimed. The machine's load is recorded: on a busy machine the
ratios are contended; each grid's ratio of the fastest repeats (``min_ratio*``) moves
least with the neighbors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results_io import LOAD_AT_START, RESULTS, environment, write_results

REPO = Path(__file__).resolve().parents[1]
PEERS = REPO / ".dni_cache" / "peers-venv" / "bin" / "python"
WORDS = "the a cat dog sat ran on under mat box red blue big small when then".split()


def build(where: Path, pairs: int, tokens: int, repeats: int) -> None:
    """The GPT-2, its tokenizer and the clean / corrupted ids, saved to ``where``."""
    import transformers

    from hypotheses.workloads.hf_tokenizers import bpe

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 40)) for _ in range(64)]
    tok = bpe(texts, vocab_size=300)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=256, n_layer=4,
                                  n_head=8, bos_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id)  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    module.save_pretrained(str(where))
    tok.save_pretrained(str(where))
    vocab = len(tok)
    clean = rng.integers(1, vocab, (pairs, tokens))
    corrupted = clean.copy()
    corrupted[:, 1] = (clean[:, 1] + 1 + rng.integers(0, vocab - 2, pairs)) % (vocab - 1) + 1
    answers = rng.integers(1, vocab, (pairs, 2))
    answers[:, 1] = np.where(answers[:, 1] == answers[:, 0], answers[:, 0] % (vocab - 1) + 1,
                             answers[:, 1])  # fmt: skip
    data = {"clean": clean.tolist(), "corrupted": corrupted.tolist(),
            "answers": answers.tolist(), "repeats": repeats}  # fmt: skip
    (where / "data.json").write_text(json.dumps(data))


def side(python: Path | str, tool: str, where: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    run = subprocess.run([str(python), str(REPO / "benchmarks" / "patching_side.py"), tool,
                          str(where)], capture_output=True, text=True, env=env)  # fmt: skip
    line = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    if run.returncode or not line:
        raise RuntimeError(f"{tool} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    out = json.loads(line[-1][len("RESULT ") :])
    out["grids"] = json.loads((where / f"{tool}.json").read_text())
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 pairs of 8 tokens: a smoke run")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "patching.json"))
    args = ap.parse_args(argv)
    pairs, tokens = (8, 8) if args.quick else (args.pairs, args.tokens)
    repeats = 2 if args.quick else args.repeats
    if not PEERS.exists():
        raise SystemExit(
            f"TransformerLens' environment {PEERS} is missing (bench_hf_depth --peers)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        build(where, pairs, tokens, repeats)
        tl = side(PEERS, "transformer_lens", where)
        ours = side(sys.executable, "ours", where)
        ours_null = side(sys.executable, "ours_null", where)
        stepwise = side(sys.executable, "ours_null_stepwise", where)
    grids = {}
    from benchmarks.patching_side import CHECKED, GRIDS

    for key in GRIDS:
        a, b = np.asarray(ours["grids"][key]), np.asarray(tl["grids"][key])
        c = np.asarray(ours_null["grids"][key])
        grids[key] = {
            "cells": list(a.shape),
            "seconds_ours": ours[f"seconds_{key}"],
            "seconds_ours_null": ours_null[f"seconds_{key}"],
            "seconds_transformer_lens": tl[f"seconds_{key}"],
            "ratio": ours[f"seconds_{key}"] / tl[f"seconds_{key}"],
            "ratio_with_null": ours_null[f"seconds_{key}"] / tl[f"seconds_{key}"],
            # GPT-2's GELU step by step, as TransformerLens runs it: the fused kernel's share
            "seconds_ours_null_stepwise": stepwise[f"seconds_{key}"],
            "ratio_with_null_stepwise": stepwise[f"seconds_{key}"] / tl[f"seconds_{key}"],
            "cpu_ratio_with_null_stepwise": stepwise[f"cpu_seconds_{key}"]
            / tl[f"cpu_seconds_{key}"],
            # CPU seconds of each process: what a busy machine's neighbors move least
            "cpu_ratio": ours[f"cpu_seconds_{key}"] / tl[f"cpu_seconds_{key}"],
            "cpu_ratio_with_null": ours_null[f"cpu_seconds_{key}"] / tl[f"cpu_seconds_{key}"],
            # the fastest repeat of each side: what a busy machine's neighbors move least
            "min_ratio": ours[f"min_seconds_{key}"] / tl[f"min_seconds_{key}"],
            "min_ratio_with_null": ours_null[f"min_seconds_{key}"] / tl[f"min_seconds_{key}"],
            "min_ratio_with_null_stepwise": stepwise[f"min_seconds_{key}"]
            / tl[f"min_seconds_{key}"],
            "max_abs_diff": float(np.abs(a - b).max()) if a.shape == b.shape else None,
            "max_abs_diff_null_run": float(np.abs(c - b).max()) if c.shape == b.shape else None,
            "value_range": float(b.max() - b.min()),
        }
        g = grids[key]
        print(f"{key:10s} cells {g['cells']}: ours {g['seconds_ours']:.3f}s "
              f"(+null {g['seconds_ours_null']:.3f}s), TransformerLens "
              f"{g['seconds_transformer_lens']:.3f}s: ratio {g['ratio']:.2f}× "
              f"(with null {g['ratio_with_null']:.2f}×; CPU seconds {g['cpu_ratio']:.2f}×, "
              f"{g['cpu_ratio_with_null']:.2f}×; with null, GELU step by step "
              f"{g['ratio_with_null_stepwise']:.2f}×; fastest repeats {g['min_ratio']:.2f}×, "
              f"{g['min_ratio_with_null']:.2f}×, {g['min_ratio_with_null_stepwise']:.2f}×), "
              f"max |diff| {g['max_abs_diff']:.2e} "
              f"(cells span {g['value_range']:.2e})")  # fmt: skip
    checked = {}
    for key in CHECKED:  # untimed: every cell of the other sites against TransformerLens
        a, b = np.asarray(ours["grids"][key]), np.asarray(tl["grids"][key])
        same = a.shape == b.shape
        diff = float(np.abs(a - b).max()) if same else f"shapes {list(a.shape)}, {list(b.shape)}"
        span = float(b.max() - b.min())
        checked[key] = {"cells": list(b.shape), "max_abs_diff": diff, "value_range": span}
        print(f"{key:16s} cells {list(b.shape)}: max |diff| {diff} (cells span {span:.2e})")
    load_end = list(os.getloadavg())
    payload = {
        "benchmark": "patching",
        "model": {"layers": 4, "width": 256, "heads": 8, "weights": "random"},
        "pairs": pairs, "tokens": tokens, "repeats": repeats, "quick": args.quick,
        "grids": grids,
        "checked": checked,
        "targets": {"ratio": 1.0, "bar": 1.5, "max_abs_diff": 1e-4},
        "load_at_start": LOAD_AT_START, "load_at_end": load_end,
        "contended": max(LOAD_AT_START[0], load_end[0]) > 1.5,
        "versions": {"ours": ours["versions"], "transformer_lens": tl["versions"]},
        "environment": environment(),
    }  # fmt: skip
    if not args.quick:
        write_results(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
