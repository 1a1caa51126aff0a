"""Run by the side environment's python (with transformer-lens, without dni_lab): the other
half of tests/test_tl_meanings.py. Reads a job file (JSON), writes safetensors results.

job = {"models": {key: dir of a saved Hugging Face model}, "tokens": [[id, ...], ...],
       "legacy": [TransformerLens name, ...], "bridge": [TransformerBridge name, ...],
       "out": path}

Each model is loaded from its directory (offline: no hub), given to TransformerLens as
``HookedTransformer.from_pretrained_no_processing(dir, hf_model=...)`` (weights as they
are: ``from_pretrained_no_processing``'s state dict, built here from a local directory,
``use_attn_result`` on) and to ``TransformerBridge.boot_transformers(dir,
hf_model=...)``; each record runs alone. Results are ``{key}|{record}|{name}``:
``(positions, units)``, units flattened head-major as dni_lab reads them. A name
a model lacks is left out; the reason goes to the JSON written beside ``out``.
The JSON also lists each HookedTransformer's hook points with their shapes on the first
record, for dni_lab's layout table (``tl_hook_layout``).
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from importlib.metadata import version

import torch
from safetensors.torch import save_file
from transformer_lens import HookedTransformer
from transformer_lens import loading_from_pretrained as loading
from transformers import AutoModelForCausalLM

#: names whose tensors are (batch, head, pos, d): the bridge's post-reshape q/k norms
HEAD_FIRST = ("attn.hook_q_normed", "attn.hook_k_normed")


#: names whose tensors are (batch * pos * head, d): HookedTransformer's per-head q/k norms
ROWS = ("q_norm.hook_normalized", "k_norm.hook_normalized", "q_norm.hook_scale",
        "k_norm.hook_scale")  # fmt: skip


def per_position(name: str, t: torch.Tensor, n_pos: int) -> torch.Tensor:
    """One record's value as (positions, units), head-major, the batch of one dropped."""
    if name.endswith(ROWS):
        return t.detach().float().reshape(n_pos, -1).clone()
    t = t[0].detach().float()
    if t.dim() == 3 and name.endswith(HEAD_FIRST):
        t = t.transpose(0, 1)
    return t.reshape(t.shape[0], -1).clone()  # safetensors stores no shared storage


def run(model, names, tokens, key, out, why, tag):
    for r, ids in enumerate(tokens):
        x = torch.tensor([ids])
        with torch.no_grad():
            _, cache = model.run_with_cache(x)
        for name in names:
            if name not in cache:
                why[f"{key}|{tag}|{name}"] = "not in TransformerLens's cache"
                continue
            out[f"{key}|{r}|{name}"] = per_position(name, cache[name], len(ids))


def hooked(path: str, hf) -> HookedTransformer:
    """``from_pretrained_no_processing`` from a local directory (that one wants a hub name)."""
    cfg = loading.get_pretrained_model_config(path, fold_ln=False, device="cpu",
                                              dtype=torch.float32)  # fmt: skip
    cfg.use_attn_result = True  # hook_result: each head's output through its W_O
    state = loading.get_pretrained_state_dict(path, cfg, hf_model=hf, dtype=torch.float32)
    model = HookedTransformer(cfg, move_to_device=False)
    model.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False,
        fold_value_biases=False, refactor_factored_attn_matrices=False,
    )  # fmt: skip
    return model.eval()


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    out: dict[str, torch.Tensor] = {}
    why: dict[str, str] = {"version": version("transformer-lens")}
    hooks: dict[str, dict[str, list[int]]] = {}
    for key, path in job["models"].items():
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        tl = hooked(path, hf)
        run(tl, job["legacy"], job["tokens"], key, out, why, "legacy")
        with torch.no_grad():
            _, cache = tl.run_with_cache(torch.tensor([job["tokens"][0]]))
        hooks[key] = {n: list(v.shape) for n, v in cache.items()}
        try:
            from transformer_lens.model_bridge import TransformerBridge

            bridge = TransformerBridge.boot_transformers(path, hf_model=hf, device="cpu")
            bridge.eval()
            run(bridge, job["bridge"], job["tokens"], key, out, why, "bridge")
        except Exception as exc:  # an older TransformerLens has no bridge: say so
            why[f"{key}|bridge"] = f"{type(exc).__name__}: {exc}"[:300]
    save_file(out, job["out"])
    with open(job["out"] + ".json", "w") as f:
        json.dump({"why": why, "hooks": hooks}, f)


if __name__ == "__main__":
    main()
