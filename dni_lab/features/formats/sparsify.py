"""EleutherAI sparsify's layout: one directory per hook with ``cfg.json`` + ``sae.safetensors``.

Its TopK SAE reads ``encoder.weight (d_sae, d_in)``, ``encoder.bias``, ``W_dec
(d_sae, d_in)``, ``b_dec``: ``z = TopK(ReLU((x - b_dec) encoderᵀ + bias))`` (no
``b_dec`` shift when it transcodes), ``x̂ = z W_dec + b_dec`` — SAELens' TopK
equations with ``W_enc = encoder.weightᵀ``. The hook is the directory's name (a
module path such as ``h.3`` or ``layers.3``) unless ``hook=`` says otherwise.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...backend.errors import DNIError
from ..architectures import with_weights
from ..topk import TopKSAE
from .saelens import read_config, read_tensors

CFG = "cfg.json"
WEIGHTS = "sae.safetensors"


def read(
    path: Path,
    hook: str | None = None,
    dtype: str | torch.dtype | None = None,
    name: str | None = None,
) -> TopKSAE:
    """The TopK SAE saved by sparsify in hook directory ``path``."""
    source = f"sparsify SAE {str(path)!r}"
    cfg = read_config(path / CFG, source)
    if not (path / WEIGHTS).exists():
        raise DNIError(f"{source} has a {CFG} but no {WEIGHTS}; copy the weights file next to it.")
    w = read_tensors(path / WEIGHTS, source)
    if cfg.get("skip_connection") or "W_skip" in w:
        raise DNIError(f"{source}: sparsify skip connections are not supported yet.")
    if cfg.get("activation", "topk") != "topk":
        raise DNIError(f"{source}: activation {cfg['activation']!r} is not supported; only topk.")
    if "encoder.weight" not in w:
        raise DNIError(f"{source}: {WEIGHTS} holds no encoder.weight (it holds {sorted(w)}).")
    d_sae, d_in = w["encoder.weight"].shape
    stored = w["encoder.weight"].dtype
    fs = TopKSAE(
        d_in,
        d_sae,
        hook or path.name,
        name=name or path.name,
        dtype=dtype or stored,
        apply_b_dec_to_input=not cfg.get("transcode", False),
        k=int(cfg["k"]),
        meta={"format": "sparsify", **{k: v for k, v in cfg.items() if k != "k"}},
    )
    weights = {
        "W_enc": w["encoder.weight"].T,
        "b_enc": w["encoder.bias"],
        "W_dec": w["W_dec"],
        "b_dec": w["b_dec"],
    }
    return with_weights(fs, weights, f"{source} ({WEIGHTS})", cast=True)


def hook_dirs(path: Path) -> list[Path]:
    """The hook directories under a sparsify run's root."""
    return sorted(p for p in path.iterdir() if (p / WEIGHTS).exists() and (p / CFG).exists())
