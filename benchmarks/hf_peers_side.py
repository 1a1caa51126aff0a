"""One side of ``bench_hf_depth.py --peers``: time one tool in its own process.

Usage (``bench_hf_depth.py --peers`` runs it; by hand for debugging)::

    python benchmarks/hf_peers_side.py {bare,ours,transformer_lens,nnsight} DIR

``DIR`` holds what the parent wrote: the GPT-2 (``save_pretrained``: config and
safetensors weights), its tokenizer, and ``data.json`` (the uniform and the mixed-length
records, the forward batch and the repeats). Nothing comes from a hub. The peers run in
their own virtual environment, so this file imports neither dni_lab nor a peer at the top.
Each tool runs at its best documented setting for the question:

* ``bare``: the full forward pass (``GPT2LMHeadModel``, LM head included);
* ``ours``: dni_lab's extractor (the forward pass stops after the last requested hook)
  reading the records as one block in forward batches sorted by length, as ``dl.inspect``
  does, and ``dl.inspect`` with ``forward_batch`` for the mixed-length records;
* ``transformer_lens``: ``TransformerBridge.run_with_cache`` with ``names_filter`` and
  ``stop_at_layer``;
* ``nnsight``: ``.trace`` saving the blocks' outputs, then ``tracer.stop()``.

Workloads: ``block3`` (``blocks.3.hook_resid_post``), ``all`` (every block's
``hook_resid_post``) over the uniform records, and ``mixed`` (block 3 over records of mixed
length). A peer pads each forward batch to its longest record, in record order; dni_lab sorts
a block by length. Printed: one JSON line with the median seconds (wall clock, and the
process's CPU seconds) per workload, the padding
waste of ``mixed``, the largest difference from Hugging Face's ``hidden_states`` (peers), and
peak RSS (``ru_maxrss``) after loading and at the end.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

BLOCK = 3


def rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux: ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def padded(tok, texts: list[str]) -> dict[str, torch.Tensor]:
    return dict(tok(texts, padding=True, return_tensors="pt"))


def waste(encs: list[dict[str, torch.Tensor]]) -> float:
    """Share of padded token slots in the forward batches ``encs``."""
    slots = sum(e["attention_mask"].numel() for e in encs)
    return 1 - sum(int(e["attention_mask"].sum()) for e in encs) / slots


def reference(module, enc: dict[str, torch.Tensor], layer: int) -> torch.Tensor:
    """Hugging Face's own residual stream after block ``layer`` (no LM head runs)."""
    return module.transformer(**enc, output_hidden_states=True).hidden_states[layer + 1]


def tool_bare(module, tok, data):
    def full(texts):
        for b in batches(texts, data["batch"]):
            module(**padded(tok, b))

    return {"block3": full, "all": full, "mixed": full}, None, {}


def tool_ours(module, tok, data):
    repo = str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, repo)
    import dni_lab as dl
    from dni_lab.backend.engine.resolve import resolve_units
    from dni_lab.backend.extraction.extract import Extractor, symbol_mask
    from dni_lab.backend.hf import HFModel

    model = HFModel(module, tok, name="gpt2")
    cpu = torch.device("cpu")
    every = [f"blocks.{i}.hook_resid_post" for i in range(module.config.n_layer)]
    names = {"block3": [f"blocks.{BLOCK}.hook_resid_post"], "all": every}
    extractors = {}
    for key, hooks in names.items():
        units = resolve_units(model, [[(h, "*") for h in hooks]], data["uniform"][:2], cpu)
        extractors[key] = Extractor(model, units.layer_units, "activation", cpu,
                                    forward_batch=data["batch"])  # fmt: skip

    def run(key):
        def go(texts):  # one block, as dl.inspect reads it: forward batches sorted by length
            extractors[key](texts, symbol_mask(model, texts, cpu))

        return go

    @dl.hypothesis(kind="binary")
    def keyword(record: str) -> list[float]:
        return [float(c == "s") for c in record]

    seen: dict[str, float] = {}

    def mixed(texts):
        frame = dl.inspect(model, [keyword], data=texts, units=[(names["block3"][0], "*")],
                           eps=None, block_size=len(texts), forward_batch=data["batch"],
                           cache=False)  # fmt: skip
        seen["padding_waste"] = float(dl.provenance(frame)["padding_waste"]["gpt2"])

    return {"block3": run("block3"), "all": run("all"), "mixed": mixed}, None, seen


def tool_transformer_lens(module, tok, data):
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=module, tokenizer=tok)
    n = module.config.n_layer

    def block3(enc):
        name = f"blocks.{BLOCK}.hook_resid_post"
        _, cache = bridge.run_with_cache(enc["input_ids"], attention_mask=enc["attention_mask"],
                                         names_filter=name, stop_at_layer=BLOCK + 1)  # fmt: skip
        return cache[name]

    def every(enc):
        bridge.run_with_cache(enc["input_ids"], attention_mask=enc["attention_mask"],
                              names_filter=lambda s: s.endswith("hook_resid_post")
                              and s.startswith("blocks."), stop_at_layer=n)  # fmt: skip

    return _peer(tok, data, block3, every)


def tool_nnsight(module, tok, data):
    from nnsight import LanguageModel

    lm = LanguageModel(module, tokenizer=tok)
    tok.padding_side = "right"  # LanguageModel sets left (for generation); all tools pad right
    n = module.config.n_layer

    def block3(enc):
        with lm.trace(dict(enc)) as tracer:
            out = lm.transformer.h[BLOCK].output.save()
            tracer.stop()
        return out[0] if isinstance(out, tuple) else out

    def every(enc):
        outs = []
        with lm.trace(dict(enc)) as tracer:
            for i in range(n):  # a plain loop: nnsight re-runs the block's source
                outs.append(lm.transformer.h[i].output.save())
            tracer.stop()
        return outs

    return _peer(tok, data, block3, every)


def _peer(tok, data, block3, every):
    """A peer's workloads: batches of the records in order, each padded to its longest."""

    def over(fn):
        def go(texts):
            for b in batches(texts, data["batch"]):
                fn(padded(tok, b))

        return go

    return {"block3": over(block3), "all": over(every), "mixed": over(block3)}, block3, {}


def main(tool: str, where: Path) -> dict:
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.set_num_threads(1)
    data = json.loads((where / "data.json").read_text())
    tok = PreTrainedTokenizerFast.from_pretrained(str(where))
    module = GPT2LMHeadModel.from_pretrained(str(where), attn_implementation="eager").eval()
    out: dict = {"tool": tool, "rss_loaded_mb": rss_mb()}
    runs, block3, seen = globals()[f"tool_{tool}"](module, tok, data)
    with torch.inference_mode():
        if block3 is not None:  # outputs equal: at real tokens, against hidden_states
            enc = padded(tok, data["uniform"][:2])
            keep = enc["attention_mask"].bool()
            diff = (block3(enc) - reference(module, enc, BLOCK))[keep].abs().max()
            out["max_abs_diff_block3"] = float(diff)
        texts = {"block3": data["uniform"], "all": data["uniform"], "mixed": data["mixed"]}
        for fn in runs.values():  # warm-up on two records
            fn(data["uniform"][:2])
        times: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(data["repeats"]):
            for key, fn in runs.items():
                t, c = time.perf_counter(), time.process_time()
                fn(texts[key])
                times[key].append(time.perf_counter() - t)
                cpu[key].append(time.process_time() - c)
    out.update({f"seconds_{k}": statistics.median(v) for k, v in times.items()})
    # CPU seconds of the process (all its threads): what a busy machine's neighbors move least
    out.update({f"cpu_seconds_{k}": statistics.median(v) for k, v in cpu.items()})
    encs = [padded(tok, b) for b in batches(data["mixed"], data["batch"])]
    out["padding_waste_mixed"] = seen.get("padding_waste", waste(encs))
    out["rss_peak_mb"] = rss_mb()
    out["versions"] = {"torch": torch.__version__}
    for pkg in ("transformers", "transformer_lens", "nnsight"):
        try:
            from importlib.metadata import version

            out["versions"][pkg] = version(pkg.replace("_", "-"))
        except Exception:  # a package absent from this environment
            pass
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
