"""TransformerLens hook points: their axes follow from their names, not their shapes.

A ``HookedTransformer`` (or a TransformerLens 4 bridge) documents every hook's
axes: the residual stream and the norms' values are ``(batch, pos, d)``, the
per-head hooks ``(batch, pos, head, d_head)``. Attention patterns are one value per
(head, query, key), no units per symbol: they get no layout, so naming one raises.
"""

from __future__ import annotations

from torch import nn

#: Per-head hooks, ``(batch, pos, head, d_head)``: unit ``h * d_head + d``.
PER_HEAD = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result", "hook_rot_q", "hook_rot_k",
            "hook_q_normed", "hook_k_normed")
#: One value per (head, query, key): no units per symbol.
PATTERNS = ("hook_pattern", "hook_attn_scores")


def is_tl_model(module: nn.Module) -> bool:
    """A TransformerLens model: it keeps its hook points in ``hook_dict``."""
    return hasattr(module, "hook_dict")


def hook_point_layout(root: nn.Module, address: str, module: nn.Module, ndim: int) -> str | None:
    """The layout of TransformerLens hook point ``address`` (None: not one, or no units)."""
    leaf = address.rsplit(".", 1)[-1]
    if not leaf.startswith("hook_") or not is_tl_model(root) or leaf in PATTERNS:
        return None
    if leaf in PER_HEAD:
        return {4: "n s u u", 3: "n s u"}.get(ndim)  # 3-D: a bridge's heads already merged
    return {2: "n s", 3: "n s u"}.get(ndim)
