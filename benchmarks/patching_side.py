"""One side of ``bench_patching.py``: one tool's patching grids, timed in its own process.

Usage (``bench_patching.py`` runs it; by hand for debugging)::

    python benchmarks/patching_side.py {ours,ours_null,ours_null_stepwise,transformer_lens} DIR

``DIR`` holds what the parent wrote: the GPT-2 (``save_pretrained``), its tokenizer and
``data.json`` (clean and corrupted token ids, the answer ids, the repeats). Nothing comes
from a hub. TransformerLens runs in its own virtual environment, so this file imports
neither dni_lab nor TransformerLens at the top. Each grid is timed as a user runs it:

* ``transformer_lens``: ``run_with_cache`` on the clean tokens, a run on the corrupted
  ones (the baselines a metric is read against), then ``transformer_lens.patching``'s
  ``get_act_patch_resid_pre`` / ``get_act_patch_attn_head_out_all_pos`` /
  ``get_act_patch_attn_head_pattern_all_pos``;
* ``ours``: ``dl.verify.patch_grid`` (both baselines inside), ``null=False``;
* ``ours_null``: the same with its null grid (in the same passes: twice their rows);
* ``ours_null_stepwise``: the same with GPT-2's GELU left step by step (the module as
  TransformerLens runs it; ``patch_grid`` runs it as one fused kernel: ``grid_kernels``).

The other sites (``resid_mid``, ``attn_out``, ``mlp_out``, q, k, v over all positions,
the heads' outputs per position) run once each, untimed, for their values. Printed: one
JSON line with the median seconds per timed grid; every grid's values (the mean logit
difference per cell) are written to ``DIR/{tool}.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

#: grids timed: resid_pre layer × position, the heads' outputs and their attention patterns
#: layer × head (a pattern is written inside the attention: dni_lab's ``grid_pattern``)
GRIDS = ("resid_pre", "head_out", "pattern")
#: grids compared cell by cell, untimed: name -> (TransformerLens helper suffix, our site, by)
CHECKED = {
    "resid_mid": ("resid_mid", "resid_mid", "position"),
    "attn_out": ("attn_out", "attn_out", "position"),
    "mlp_out": ("mlp_out", "mlp_out", "position"),
    "q": ("attn_head_q_all_pos", "q", "head"),
    "k": ("attn_head_k_all_pos", "k", "head"),
    "v": ("attn_head_v_all_pos", "v", "head"),
    "head_out_by_pos": ("attn_head_out_by_pos", "z", "head_position"),
}


def tool_transformer_lens(module, tok, data):
    from transformer_lens import patching
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=module, tokenizer=tok)
    clean = torch.as_tensor(data["clean"])
    corrupted = torch.as_tensor(data["corrupted"])
    ans = torch.as_tensor(data["answers"])

    def metric(logits):
        last = logits[:, -1]
        return (last.gather(1, ans[:, :1]) - last.gather(1, ans[:, 1:])).mean()

    def grid(helper):
        def go():
            _, cache = bridge.run_with_cache(clean)
            bridge(corrupted)  # the corrupted baseline a metric is normalized by
            return helper(bridge, corrupted, cache, metric)

        return go

    runs = {"resid_pre": grid(patching.get_act_patch_resid_pre),
            "head_out": grid(patching.get_act_patch_attn_head_out_all_pos),
            "pattern": grid(patching.get_act_patch_attn_head_pattern_all_pos)}  # fmt: skip
    checks = {k: grid(getattr(patching, f"get_act_patch_{v[0]}")) for k, v in CHECKED.items()}
    # layer × position, layer × head and layer × position × head, as TransformerLens
    # returns them
    return runs, checks, lambda key, out: out.detach().double().tolist()


def _ours(module, tok, data, null: bool):
    import dni_lab as dl

    m = dl.Model.from_hf(module, tok, name="bench")
    # token-id records: the same tokens TransformerLens reads, no tokenizer in between
    clean, corrupted = data["clean"], data["corrupted"]
    answers = [tuple(a) for a in data["answers"]]

    def grid(site, by=None):
        def go():
            return dl.verify.patch_grid(m, clean, corrupted, site, by=by, answers=answers,
                                        null=null, device="cpu", batch_size=len(clean))  # fmt: skip

        return go

    def values(key, out):
        f = out.frame
        n_l = f["layer"].n_unique()
        v = f["metric"].to_numpy().reshape(n_l, -1)
        if out.summary["by"] == "head_position":  # ours head-major, TransformerLens' pos-major
            v = v.reshape(n_l, f["head"].n_unique(), -1).transpose(0, 2, 1)
        return v.tolist()

    checks = {k: grid(site, by) for k, (_tl, site, by) in CHECKED.items()}
    runs = {"resid_pre": grid("resid_pre"), "head_out": grid("z"), "pattern": grid("pattern")}
    return runs, checks, values


def tool_ours(module, tok, data):
    return _ours(module, tok, data, null=False)


def tool_ours_null(module, tok, data):
    return _ours(module, tok, data, null=True)


def tool_ours_null_stepwise(module, tok, data):
    """With the null, GPT-2's GELU run step by step as TransformerLens runs it (not fused)."""
    from dni_lab.backend.verify import grid_kernels

    grid_kernels._STEPWISE_TANH_GELU = set()
    runs, _checks, values = _ours(module, tok, data, null=True)
    return runs, {}, values


def main(tool: str, where: Path) -> dict:
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    data = json.loads((where / "data.json").read_text())
    tok = PreTrainedTokenizerFast.from_pretrained(str(where))
    module = GPT2LMHeadModel.from_pretrained(str(where), attn_implementation="eager").eval()
    runs, checks, values = globals()[f"tool_{tool}"](module, tok, data)
    out: dict = {"tool": tool}
    grids = {}
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    with torch.inference_mode():
        for key, fn in {**runs, **checks}.items():  # warm-up, and the values compared
            grids[key] = values(key, fn())
        for _ in range(data["repeats"]):
            for key, fn in runs.items():
                t, c = time.perf_counter(), time.process_time()
                fn()
                times[key].append(time.perf_counter() - t)
                cpu[key].append(time.process_time() - c)
    out.update({f"seconds_{k}": statistics.median(v) for k, v in times.items()})
    out.update({f"cpu_seconds_{k}": statistics.median(v) for k, v in cpu.items()})
    out.update({f"min_seconds_{k}": min(v) for k, v in times.items()})
    (where / f"{tool}.json").write_text(json.dumps(grids))
    out["versions"] = {"torch": torch.__version__}
    for pkg in ("transformers", "transformer_lens"):
        try:
            from importlib.metadata import version

            out["versions"][pkg] = version(pkg.replace("_", "-"))
        except Exception:  # a package absent from this environment
            pass
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
