"""TransformerLens 4 ``TransformerBridge`` names on Hugging Face models.

A bridge wraps each Hugging Face module in a component with two hook points, its
input (``hook_in``) and its output (``hook_out``), under TransformerLens's names:
``blocks.N`` (the block), ``blocks.N.ln1`` / ``ln2``, ``blocks.N.attn`` (and its
``q``, ``k``, ``v``, ``o``, ``qkv``, ``q_norm``, ``k_norm``), ``blocks.N.mlp`` (and its
``in``, ``gate``, ``out``), ``embed``, ``pos_embed``, ``ln_final`` and ``unembed``.
Here each is the module TransformerLens's adapter wraps:

* ``<component>.hook_out`` is that module's output (``blocks.N.hook_out`` is the
  block's: ``hook_resid_post``; ``blocks.N.attn.hook_out`` is ``hook_attn_out``);
* ``<component>.hook_in`` is its first input (``<module>.input``), or the virtual
  address that already reads it: ``blocks.N.hook_in`` is ``hook_resid_pre``,
  ``blocks.N.attn.o.hook_in`` is ``attn.hook_z``, ``blocks.N.ln2.hook_in`` is
  ``hook_resid_mid`` on sequential pre-LN blocks;
* the bridge's other names are TransformerLens's (``hook_resid_mid``,
  ``attn.hook_q_normed``, ``ln1.hook_normalized``, ...): :mod:`.hooks`.

``embed.hook_in`` (token ids) and ``pos_embed.hook_in`` (positions) hold no units.
``hook_unembed`` is ``unembed.hook_out`` (the logits) and ``attn.hook_hidden_states``
``attn.o.hook_out``, as the bridge names them. On sequential pre-LN blocks (GPT-2,
LLaMA-style: those with a ``hook_resid_mid``) a component's input that is another
name's value is read as that name, so a cache holds it once: ``ln1.hook_in`` is
``hook_resid_pre``, ``attn.hook_in`` and ``attn.q/k/v.hook_in`` are ``ln1.hook_out``,
``mlp.hook_in`` and ``mlp.in.hook_in`` are ``ln2.hook_out``, ``ln_final.hook_in`` is
the last block's ``hook_resid_post`` and ``unembed.hook_in`` is ``ln_final.hook_out``.
:func:`bridge_names` lists the names TransformerLens 4.3's ``run_with_cache`` returns.
"""

from __future__ import annotations

import re

from torch import nn

from ..errors import LayerError
from .hooks import INPUT, Tap
from .roles import FINAL_LN, gated, has, role, top_level

_HIDDEN = re.compile(r"^(blocks\.\d+\.attn)\.hook_hidden_states$")
#: Per block, the bridge's names that are no TransformerLens legacy hook name.
_BRIDGE_BLOCK = (
    "hook_in", "ln1.hook_in", "ln1.hook_out", "attn.hook_in", "attn.q.hook_in",
    "attn.q.hook_out", "attn.k.hook_in", "attn.k.hook_out", "attn.v.hook_in", "attn.v.hook_out",
    "attn.o.hook_in", "attn.o.hook_out", "attn.hook_hidden_states", "attn.hook_out",
    "ln2.hook_in", "ln2.hook_out", "mlp.hook_in", "mlp.in.hook_in", "mlp.in.hook_out",
    "mlp.out.hook_in", "mlp.out.hook_out", "mlp.hook_out", "hook_out",
)  # fmt: skip
_BRIDGE_TOP = ("embed.hook_out", "pos_embed.hook_out", "ln_final.hook_in", "ln_final.hook_out",
               "unembed.hook_in", "unembed.hook_out", "hook_unembed")  # fmt: skip
#: Pre-LN inputs that are another bridge name's value (sequential blocks only).
_SAME_AS = {"ln1.hook_in": "hook_in", "attn.hook_in": "ln1.hook_out",
            "attn.q.hook_in": "ln1.hook_out", "attn.k.hook_in": "ln1.hook_out",
            "attn.v.hook_in": "ln1.hook_out", "mlp.hook_in": "ln2.hook_out",
            "mlp.in.hook_in": "ln2.hook_out"}  # fmt: skip
_NAME = re.compile(r"^blocks\.(?P<i>\d+)(?:\.(?P<comp>[a-z_0-9.]+?))?\.(?P<end>hook_in|hook_out)$")
#: Bridge component -> our role inside a block (:data:`.roles.ROLES`).
COMPONENTS = {
    "ln1": "ln1", "ln2": "ln2", "attn": "attn_out", "mlp": "mlp_out",
    "attn.q": "q", "attn.k": "k", "attn.v": "v", "attn.o": "out_proj",
    "attn.q_norm": "q_norm", "attn.k_norm": "k_norm", "mlp.out": "mlp_down",
}  # fmt: skip
_FUSED = ("attn.c_attn", "attention.query_key_value", "self_attn.qkv_proj")
#: Components whose output a TransformerLens name reads already (q/k/v split per head).
_LEGACY_OUT = {"attn.q": "attn.hook_q", "attn.k": "attn.hook_k", "attn.v": "attn.hook_v"}
#: ... and whose input one does (the bridge's own aliases: hook_z, hook_post).
_LEGACY_IN = {"attn.o": "attn.hook_z", "mlp.out": "mlp.hook_post"}


def translate(
    address: str, blocks: str, module: nn.Module, virtual: dict[str, Tap] | None = None
) -> str | None:
    """A TransformerLens name, a module path or a ``.input`` path; None if not a bridge name.

    ``virtual`` holds the model's virtual addresses (:func:`.hooks.taps`): a ``hook_in``
    that one of them reads already is given as that address.
    """
    hidden = _HIDDEN.match(address)
    if hidden:  # the out projection's output, before any residual add
        address = f"{hidden.group(1)}.o.hook_out"
    sequential = any(n.endswith(".hook_resid_mid") for n in (virtual or {}))
    if sequential and address == "ln_final.hook_in":
        n = sum(1 for n in (virtual or {}) if n.endswith(".hook_resid_mid"))
        return f"blocks.{n - 1}.hook_resid_post"
    if sequential and address == "unembed.hook_in":
        address = "ln_final.hook_out"
    top = _top(address, blocks, module)
    if top is not None:
        return top
    m = _NAME.match(address)
    if not m:
        return None
    i, comp, end = int(m.group("i")), m.group("comp"), m.group("end")
    same = _SAME_AS.get(f"{comp}.{end}") if sequential and comp else None
    if same is not None:  # a pre-LN input: the value of the name before it, read once
        return translate(f"blocks.{i}.{same}", blocks, module, virtual)
    if comp is None:
        return f"blocks.{i}.hook_resid_pre" if end == "hook_in" else f"blocks.{i}.hook_resid_post"
    block = f"{blocks}.{i}"
    legacy = (_LEGACY_OUT if end == "hook_out" else _LEGACY_IN).get(comp)
    if legacy is not None:
        return f"blocks.{i}.{legacy}"
    path = _component(module, block, comp, address)
    if end == "hook_out":
        return path
    for name, tap in (virtual or {}).items():  # the virtual address that reads this input
        if tap.module == path and tap.side == "input" and tap.kind is None:
            if name.startswith(f"{block}.") and not name.endswith(INPUT):
                return name
    return path + INPUT


def _component(module: nn.Module, block: str, comp: str, address: str) -> str:
    if comp == "attn.qkv":
        fused = [f"{block}.{p}" for p in _FUSED if has(module, f"{block}.{p}")]
        if not fused:
            raise LayerError(f"{address!r}: block {block!r} has no fused q/k/v projection "
                             f"among {_FUSED}; read 'attn.q', 'attn.k', 'attn.v'.")  # fmt: skip
        return fused[0]
    if comp in ("mlp.in", "mlp.gate"):
        is_gated = gated(module, block)
        if comp == "mlp.gate" and not is_gated:
            raise LayerError(f"{address!r}: the MLP of block {block!r} is not gated; read "
                             "'mlp.in' (its input projection) instead.")  # fmt: skip
        return role(module, block, "mlp_pre_linear" if comp == "mlp.in" and is_gated else "mlp_pre")
    if comp not in COMPONENTS:
        raise LayerError(
            f"{address!r}: no TransformerLens bridge component {comp!r} is read here; "
            f"components: {', '.join(sorted([*COMPONENTS, 'attn.qkv', 'mlp.in', 'mlp.gate']))}."
        )
    return role(module, block, COMPONENTS[comp])


def _top(address: str, blocks: str, module: nn.Module) -> str | None:
    """The bridge's model-wide names: embed, pos_embed, ln_final, unembed."""
    if address == "hook_unembed":
        address = "unembed.hook_out"
    if address == "embed.hook_out":
        return "hook_embed"
    if address == "pos_embed.hook_out":
        return "hook_pos_embed"
    if address in ("embed.hook_in", "pos_embed.hook_in"):
        raise LayerError(f"{address!r} is the token ids or positions, no units; read "
                         f"'{address.replace('hook_in', 'hook_out')}' instead.")  # fmt: skip
    if address in ("ln_final.hook_in", "ln_final.hook_out"):
        final = top_level(module, blocks, FINAL_LN, address, "final layer norm")
        return final + (INPUT if address.endswith("hook_in") else "")
    if address in ("unembed.hook_in", "unembed.hook_out"):
        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        name = next((n for n, mod in module.named_modules() if mod is head), None)
        if not name:
            raise LayerError(f"{type(module).__name__} has no unembedding (LM head) for "
                             f"{address!r}; load a *ForCausalLM class.")  # fmt: skip
        return name + (INPUT if address.endswith("hook_in") else "")
    return None


def bridge_names(n_blocks: int) -> list[str]:
    """The TransformerLens 4 bridge's names that are no legacy hook name, for ``n_blocks``.

    With the legacy names (:func:`.hooks.tl_names`) and the attention patterns, these
    are the names TransformerLens 4.3's ``TransformerBridge.run_with_cache`` returns on
    GPT-2, but ``embed.hook_in`` and ``pos_embed.hook_in`` (token ids and positions, no
    units). A model may not have all of them (no learned positions): resolve each.
    """
    per_block = [f"blocks.{i}.{h}" for i in range(n_blocks) for h in _BRIDGE_BLOCK]
    return [*_BRIDGE_TOP[:2], *per_block, *_BRIDGE_TOP[2:]]
