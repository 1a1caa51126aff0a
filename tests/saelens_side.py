"""Run by the side environment's python (with sae-lens, without dni_lab): the other half
of tests/test_features_saelens.py. Reads a job file (JSON) and writes safetensors results.

job = {"inputs": path of {"x": tensor}, "ours": [dir, ...], "theirs": {arch: dir},
       "d_in": int, "d_sae": int, "k": int, "out": path,
       "scaled": [checkpoint dir, dir without the scaler file], "factor": float}
"""

import json
import sys

import sae_lens
import torch
from sae_lens import SAE
from safetensors.torch import load_file, save_file

job = json.loads(open(sys.argv[1]).read())
x = load_file(job["inputs"])["x"]
out = {}
meta = {"version": sae_lens.__version__, "ours": {}}
for i, d in enumerate(job["ours"]):
    sae = SAE.load_from_disk(d)
    with torch.no_grad():
        z = sae.encode(x)
        out[f"ours{i}.z"] = z.contiguous()
        out[f"ours{i}.recon"] = sae.decode(z).contiguous()
    meta["ours"][d] = {
        "architecture": sae.cfg.architecture(),
        "hook_name": sae.cfg.metadata.hook_name,
        "class": type(sae).__name__,
    }
configs = {
    "standard": sae_lens.StandardSAEConfig,
    "topk": sae_lens.TopKSAEConfig,
    "jumprelu": sae_lens.JumpReLUSAEConfig,
}
torch.manual_seed(0)
for arch, d in job["theirs"].items():
    kw = {"k": job["k"]} if arch == "topk" else {}
    cfg = configs[arch](d_in=job["d_in"], d_sae=job["d_sae"], **kw)
    cfg.metadata.hook_name = "blocks.0.hook_resid_post"
    sae = sae_lens.saes.sae.SAE.get_sae_class_for_architecture(arch)(cfg)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
        if arch == "jumprelu":
            sae.threshold.copy_(torch.rand(sae.threshold.shape) * 0.5)
    sae.save_model(d)
    with torch.no_grad():
        out[f"theirs.{arch}.z"] = sae.encode(x).contiguous()
if job.get("scaled"):  # a mid-training checkpoint: the input scaling factor not folded yet
    import copy

    cfg = sae_lens.StandardSAEConfig(d_in=job["d_in"], d_sae=job["d_sae"],
                                     normalize_activations="expected_average_only_in")
    cfg.metadata.hook_name = "blocks.0.hook_resid_post"
    sae = sae_lens.saes.sae.SAE.get_sae_class_for_architecture("standard")(cfg)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    for d in job["scaled"]:
        sae.save_model(d)
    scaler = sae_lens.training.activation_scaler.ActivationScaler(scaling_factor=job["factor"])
    scaler.save(job["scaled"][0] + "/activation_scaler.json")  # as SAETrainer's checkpoints
    folded = copy.deepcopy(sae)
    folded.fold_activation_norm_scaling_factor(job["factor"])  # what SAELens ends training with
    with torch.no_grad():
        out["theirs.scaled.z"] = folded.encode(x).contiguous()
        out["theirs.scaled.recon"] = folded.decode(folded.encode(x)).contiguous()
save_file(out, job["out"])
print(json.dumps(meta))
