"""saprmarks/dictionary_learning's layout: ``ae.pt`` (a state dict) + ``config.json``.

``config.json``'s ``trainer.dict_class`` names the dictionary; its equations map
onto SAELens' (``W_enc = encoder.weightᵀ``, ``W_dec = decoder.weightᵀ``):

* ``AutoEncoder``: ``z = ReLU(encoder(x - bias))``, ``x̂ = decoder(z) + bias`` → standard;
* ``AutoEncoderTopK``: ``z = TopK(ReLU(encoder(x - b_dec)))`` → topk;
* ``BatchTopKSAE``: at inference ``z = ReLU(pre) · [ReLU(pre) > threshold]``, one
  threshold for all latents → jumprelu with that threshold everywhere;
* ``JumpReluAutoEncoder``: ``W_enc``, ``b_enc``, ``W_dec``, ``b_dec``, ``threshold``
  already in SAELens' names → jumprelu.

The weights are read with ``torch.load(weights_only=True)``: no pickle runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...backend.errors import DNIError
from ..architectures import with_weights
from ..base import FeatureSet
from ..jumprelu import JumpReLUSAE
from ..standard import StandardSAE
from ..topk import TopKSAE
from .saelens import read_config

CFG = "config.json"
WEIGHTS = "ae.pt"


def _hook(trainer: dict[str, Any], hook: str | None, source: str) -> str:
    if hook:
        return hook
    sub, layer = str(trainer.get("submodule_name") or ""), trainer.get("layer")
    if layer is not None and (sub.startswith("resid_post") or not sub):
        return f"blocks.{int(layer)}.hook_resid_post"
    raise DNIError(
        f"{source}: config.json names submodule {sub!r}, which dni_lab cannot map to a hook; "
        "pass dl.features.load(path, hook='<model address>')."
    )


def read(
    path: Path,
    hook: str | None = None,
    dtype: str | torch.dtype | None = None,
    name: str | None = None,
) -> FeatureSet:
    """The dictionary saved in ``path`` (``ae.pt`` + ``config.json``)."""
    source = f"dictionary_learning dictionary {str(path)!r}"
    cfg = read_config(path / CFG, source)
    if not (path / WEIGHTS).exists():
        raise DNIError(f"{source} has a {CFG} but no {WEIGHTS}; copy the weights file next to it.")
    try:  # weights_only: tensors and plain containers, never an arbitrary pickle
        w = torch.load(path / WEIGHTS, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle and runtime errors alike
        raise DNIError(
            f"{source}: cannot read {WEIGHTS} as a state dict of tensors (weights_only=True "
            f"refused it: {type(exc).__name__}); it is corrupt or holds other Python objects."
        ) from None
    if not isinstance(w, dict):
        raise DNIError(f"{source}: {WEIGHTS} holds a {type(w).__name__}, not a state dict.")
    trainer = cfg.get("trainer") or {}
    kind = trainer.get("dict_class", "AutoEncoder")
    hook = _hook(trainer, hook, source)
    meta = {"format": "dictionary_learning", "dict_class": kind}
    if kind == "JumpReluAutoEncoder":
        d_in, d_sae = w["W_enc"].shape
        weights = {k: w[k] for k in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")}
        apply_b_dec = trainer.get("apply_b_dec_to_input", False)
        cls, kwargs = JumpReLUSAE, {"apply_b_dec_to_input": apply_b_dec}
    elif kind in ("AutoEncoder", "AutoEncoderTopK", "BatchTopKSAE"):
        d_sae, d_in = w["encoder.weight"].shape
        b_dec = w["bias"] if kind == "AutoEncoder" else w["b_dec"]
        weights = {
            "W_enc": w["encoder.weight"].T,
            "b_enc": w["encoder.bias"],
            "W_dec": w["decoder.weight"].T,
            "b_dec": b_dec,
        }
        kwargs = {}
        cls = StandardSAE
        if kind == "AutoEncoderTopK":
            cls, kwargs = TopKSAE, {"k": int(w.get("k", trainer.get("k", 0)))}
        elif kind == "BatchTopKSAE":
            thr = w.get("threshold")
            if thr is None:
                raise DNIError(f"{source}: a BatchTopKSAE needs its inference threshold in ae.pt.")
            cls = JumpReLUSAE
            weights["threshold"] = torch.full((d_sae,), float(thr), dtype=w["b_dec"].dtype)
    else:
        raise DNIError(
            f"{source}: dict_class {kind!r} is not supported; dni_lab reads AutoEncoder, "
            "AutoEncoderTopK, BatchTopKSAE and JumpReluAutoEncoder."
        )
    stored = weights["W_enc"].dtype
    fs = cls(d_in, d_sae, hook, name=name or path.name, dtype=dtype or stored, meta=meta, **kwargs)
    return with_weights(fs, weights, f"{source} ({WEIGHTS})", cast=True)
