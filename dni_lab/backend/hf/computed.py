"""TransformerLens values that no Hugging Face module returns, computed from one that does.

A *computed* :class:`~.hooks.Tap` is made the first time its address is named
(:func:`lazy_tap`), so that model listings stay as they were:

* ``<norm>.hook_normalized``: the norm's input normalized, before its weight and
  bias, as TransformerLens reads ``ln1/ln2/ln_final.hook_normalized``: ``(x - mean) /
  scale`` for a LayerNorm, ``x / scale`` for an RMSNorm (T5's ``T5LayerNorm`` is one),
  computed in float32 from the norm's input;
* ``<norm>.hook_scale``: that ``scale``, ``sqrt(mean(x²) + eps)`` after centering for a
  LayerNorm: one unit per position;
* ``{block}.attn.hook_result``: each head's output through its slice of ``W_O``, before
  the heads are summed and the bias added: ``(pos, head, d_model)``, unit
  ``head * d_model + i`` (head-major, as ``hook_z``'s units are);
* ``{block}.attn.hook_rot_q`` / ``hook_rot_k``: queries / keys after rotary embeddings
  (after Qwen3's and Gemma3's per-head norms), heads × head_dim units, head-major;
  read from ``q_proj``'s output, the attention's own ``q_norm`` and the
  ``position_embeddings`` it is called with, through the model file's own
  ``apply_rotary_pos_emb``;
* ``<module>.input``: nnsight's name for a module's first positional input.

Computed taps can be read, not forced: forcing ``hook_normalized`` would need the
norm's weight applied after it, which is the norm module's output (force that).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch
from torch import nn

from ..errors import LayerError
from .hooks import ATTN_HOOKS, INPUT, NORM_HOOKS, Tap, has, role


def norm_kind(mod: nn.Module, address: str) -> str:
    """``"layer"`` (subtracts the mean) or ``"rms"``; a LayerError for an unknown norm."""
    name = type(mod).__name__
    if isinstance(mod, nn.LayerNorm):
        return "layer"
    if isinstance(mod, nn.RMSNorm) or "RMSNorm" in name or name == "T5LayerNorm":
        return "rms"
    raise LayerError(
        f"{address!r}: {name} is not a LayerNorm or an RMSNorm, so its normalized input "
        "has no TransformerLens meaning here; read the module's output by its path."
    )


def _eps(mod: nn.Module) -> float:
    for attr in ("eps", "variance_epsilon", "epsilon"):
        eps = getattr(mod, attr, None)
        if isinstance(eps, float):
            return eps
    return float(torch.finfo(torch.float32).eps)  # nn.RMSNorm(eps=None)'s default


def normalize(x: torch.Tensor, mod: nn.Module, kind: str, what: str) -> torch.Tensor:
    """TransformerLens's ``hook_normalized`` (``what="normalized"``) or ``hook_scale``,
    computed in float32 and returned in ``x``'s dtype (a half-precision model's cache keeps
    its dtype)."""
    dtype = x.dtype if x.is_floating_point() else torch.float32
    x = x.float()
    if kind == "layer":
        x = x - x.mean(-1, keepdim=True)
    scale = (x.pow(2).mean(-1, keepdim=True) + _eps(mod)).sqrt()
    return (scale if what == "scale" else x / scale).to(dtype)


def result(z: torch.Tensor, proj: nn.Module, head_dim: int) -> torch.Tensor:
    """``(R, T, H·D)`` heads' outputs → ``(R, T, H·d_model)``: head ``h`` through its ``W_O``."""
    w = proj.weight
    if type(proj).__name__ == "Conv1D":  # GPT-2 stores W as (in, out)
        w = w.t()
    w_o = w.reshape(w.shape[0], -1, head_dim).to(z.dtype)  # (d_model, H, D)
    per_head = z.unflatten(-1, (-1, head_dim))  # (R, T, H, D)
    return torch.einsum("rthd,mhd->rthm", per_head, w_o).flatten(-2)


def rotary(
    t: torch.Tensor, attn: nn.Module, qk: str, embeddings: Any, head_dim: int
) -> torch.Tensor:
    """Projected queries or keys ``(R, T, H·D)`` after ``attn``'s q/k norm and rotation.

    The norm (Qwen3, Gemma3) acts on each head's ``head_dim`` features, so it is applied
    here on ``(R, T, H, D)`` whatever axis order the model itself gives it; its
    ``forward`` is called directly, so no hook on it fires twice.
    """
    per_head = t.unflatten(-1, (-1, head_dim))  # (R, T, H, D): a projection's output
    norm = getattr(attn, f"{qk}_norm", None)
    if isinstance(norm, nn.Module):
        per_head = norm.forward(per_head)
    apply = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    cos, sin = embeddings
    heads_first = per_head.transpose(1, 2)
    rot, _ = apply(heads_first, heads_first, cos, sin)  # (R, H, T, D), unsqueeze_dim=1
    return rot.transpose(1, 2).flatten(-2)


def compute(tap: Tap, mod: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The value of computed tap ``tap`` from its module's input ``x``."""
    if tap.kind in ("normalized", "scale"):
        if tap.kind == "scale" and x.dim() == 4:  # one scale per (position, head)
            raise LayerError(
                f"'{tap.module}.hook_scale' is one value per position and head, and dni_lab "
                "reads no such unit axis; read its 'hook_normalized' instead."
            )
        return normalize(x, mod, norm_kind(mod, tap.module), tap.kind)
    if tap.kind == "result":
        return result(x, mod, int(tap.head_size or 0))
    return x


def lazy_tap(module: nn.Module, address: str, blocks: str, head_dim: int | None) -> Tap | None:
    """The tap that reads virtual address ``address``, or None if it names none.

    Raises a :class:`LayerError` where the address has the form of one but this model
    cannot give it (no rotary embeddings, not a norm, no such module).
    """
    if address.endswith(INPUT):
        path = address.removesuffix(INPUT)
        return Tap(path) if path and has(module, path) else None
    if address.endswith(NORM_HOOKS):
        path = address[: address.rindex(".")]
        if not has(module, path):
            return None
        norm_kind(module.get_submodule(path), address)  # raises for another module
        return Tap(path, kind=address[address.rindex(".hook_") + 6 :])
    hook = next((h for h in ATTN_HOOKS if address.endswith(f".{h}")), None)
    if hook is None:
        return None
    block = address.removesuffix(f".{hook}")
    if not block.startswith(f"{blocks}.") or not has(module, block):
        return None
    if head_dim is None:
        raise LayerError(f"{address!r}: the config of {type(module).__name__} gives no head_dim.")
    if hook == "attn.hook_result":
        return Tap(role(module, block, "out_proj"), kind="result", head_size=head_dim)
    return _rotary_tap(module, block, address, hook[-1], head_dim)


def _rotary_tap(module: nn.Module, block: str, address: str, qk: str, head_dim: int) -> Tap:
    attn = role(module, block, "attn_out")
    attn_mod = module.get_submodule(attn)
    params = inspect.signature(type(attn_mod).forward).parameters
    file = sys.modules.get(type(attn_mod).__module__)
    if "position_embeddings" not in params or not hasattr(file, "apply_rotary_pos_emb"):
        raise LayerError(
            f"{address!r}: {type(attn_mod).__name__} takes no rotary position embeddings "
            "(learned or relative positions, or a rotary variant dni_lab does not read: "
            "LLaMA, Mistral, Qwen and Gemma layouts are read); read "
            f"'{block}.attn.hook_{qk}' (before any rotation) instead."
        )
    # the projection's output, (R, T, H·D) on every such model; the q/k norm, whose input
    # axes differ between models (Qwen3: heads after tokens, Gemma3: before), is applied
    # by rotary() itself
    return Tap(role(module, block, qk), side="output", kind="rotary", head_size=head_dim,
               context=attn)  # fmt: skip
