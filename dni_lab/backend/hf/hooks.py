"""TransformerLens hook names on Hugging Face models: where each one is read.

Most hooks are a module's output (``blocks.N.hook_attn_out`` is the attention
module's), and translate to that module's address. Some are not any module's
output, and get a *virtual* address under their block, read by a :class:`Tap`:

* ``{block}.attn.hook_z``: the heads' concatenated outputs, the input of the
  attention's out projection;
* ``{block}.mlp.hook_post`` on gated MLPs (LLaMA, Mistral, Qwen, Gemma) and T5:
  ``act(gate) * up``, the input of ``down_proj`` (``act_fn``'s output is act(gate) only);
* ``{block}.hook_resid_mid`` on pre-LN blocks: the input of the MLP's layer norm,
  i.e. the residual stream between attention and MLP;
* ``{block}.attn.hook_q`` / ``hook_k`` / ``hook_v`` on GPT-2's fused ``c_attn``: a
  third of its output each.

Values TransformerLens computes that no Hugging Face module returns are *computed*
taps (:mod:`.computed`), made when first named: ``ln1/ln2/ln_final.hook_normalized``
and ``hook_scale`` (the norm's input normalized, before its weight and bias, as
TransformerLens reads it), ``attn.hook_result`` (each head's output times its slice
of ``W_O``), ``attn.hook_rot_q`` / ``hook_rot_k`` (after rotary), and nnsight's
``<module>.input``. TransformerLens 4 bridge names (``blocks.N.hook_in``,
``blocks.N.attn.o.hook_in``, ...) are translated by :mod:`.tl_bridge`.

Attention patterns (``attn.hook_pattern``, ``attn.hook_attn_scores``) are one value
per (head, query, key), not per symbol, so they are no units: naming one raises a
:class:`~dni_lab.backend.errors.LayerError` that says what to read instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn

from ..errors import LayerError
from .roles import (  # noqa: F401  (re-exported: where each role lives)
    FINAL_LN,
    POS_EMBED,
    ROLES,
    embeddings,
    gated,
    has,
    role,
    role_or_none,
    top_level,
)

#: Per-head outputs: a virtual address under the block, ``{block}.attn.hook_z``.
HEADS = "attn.hook_z"
#: Gated MLP neurons act(gate) * up, the input of down_proj.
GATED_POST = "mlp.hook_post"
#: The residual stream between attention and MLP (pre-LN blocks).
RESID_MID = "hook_resid_mid"
#: nnsight's name for a module's first positional input: ``<module path>.input``.
INPUT = ".input"
#: Addresses whose units are a module's input (read with a forward pre-hook).
INPUT_SUFFIXES = (HEADS, GATED_POST, RESID_MID, INPUT)
#: Per-head addresses: unit ``u`` is dimension ``u % head_dim`` of head ``u // head_dim``.
PER_HEAD = ("attn.hook_q", "attn.hook_k", "attn.hook_v", HEADS)

_BLOCK_HOOKS = {
    "hook_resid_pre": None,  # the block's input: handled apart
    "hook_resid_mid": None,
    "hook_resid_post": None,
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_q": "q",
    "attn.hook_k": "k",
    "attn.hook_v": "v",
    "attn.hook_z": None,
    "mlp.hook_pre": "mlp_pre",
    "mlp.hook_pre_linear": "mlp_pre_linear",
    "mlp.hook_post": None,
    # computed (.computed): the norm's input normalized, its scale; per-head results;
    # queries and keys after rotary; Qwen3/Gemma3's per-head q/k norms
    "ln1.hook_normalized": "ln1",
    "ln2.hook_normalized": "ln2",
    "ln1.hook_scale": "ln1",
    "ln2.hook_scale": "ln2",
    "attn.hook_result": None,
    "attn.hook_rot_q": None,
    "attn.hook_rot_k": None,
    "attn.hook_q_normed": "q_norm",
    "attn.hook_k_normed": "k_norm",
    "attn.q_norm.hook_normalized": "q_norm",
    "attn.q_norm.hook_scale": "q_norm",
    "attn.k_norm.hook_normalized": "k_norm",
    "attn.k_norm.hook_scale": "k_norm",
}
#: Computed values of a norm: ``<norm path>.hook_normalized`` / ``.hook_scale``.
NORM_HOOKS = (".hook_normalized", ".hook_scale")
#: Computed values of a block's attention: ``{block}.attn.hook_result`` / rotary q, k.
ATTN_HOOKS = ("attn.hook_result", "attn.hook_rot_q", "attn.hook_rot_k")
_PATTERNS = ("attn.hook_pattern", "attn.hook_attn_scores")
_FINAL = ("ln_final.hook_normalized", "ln_final.hook_scale")
_TL = re.compile(r"^blocks\.(?P<i>\d+)\.(?P<hook>(?:\w+\.){0,2}hook_\w+)$")


@dataclass(frozen=True)
class Tap:
    """How a virtual address is read: a module's input, a slice of its output, or computed.

    Parameters
    ----------
    module : str
        The module's address.
    side : {"input", "output"}
        Read its first positional input (forward pre-hook) or its output.
    start, stop : int or None
        A slice of the last dimension (a third of a fused q/k/v projection).
    head_size : int or None
        The slice is taken within each head's ``3 * head_size`` features (GPT-NeoX's
        fused projection interleaves q, k, v per head) and the heads are concatenated;
        for a computed tap, the heads' ``head_dim``.
    kind : str or None
        A computed value (:mod:`.computed`): ``"normalized"`` / ``"scale"`` (of a norm's
        input), ``"result"`` (per-head output through ``W_O``), ``"rotary"`` (queries
        or keys after rotary embeddings). None: the value as read.
    context : str or None
        For ``"rotary"``: the attention module whose ``position_embeddings`` it reads.
    """

    module: str
    side: str = "input"
    start: int | None = None
    stop: int | None = None
    head_size: int | None = None
    kind: str | None = None
    context: str | None = None

    def read(self, t):
        """This tap's units of the output ``t`` (``(R, T, features)``)."""
        if self.head_size is None or self.kind is not None:
            return t[..., self.start : self.stop]
        per_head = t.unflatten(-1, (-1, 3 * self.head_size))
        return per_head[..., self.start : self.stop].flatten(-2)


def reads_input(address: str) -> bool:
    """Whether ``address`` names units of a module's *input*, not of its output.

    Per-head outputs (``{block}.attn.hook_z``), gated MLP neurons
    (``{block}.mlp.hook_post``), the mid residual stream (``{block}.hook_resid_mid``)
    and nnsight's ``<module>.input`` are the input of a module (out projection,
    ``down_proj``, the MLP's layer norm, the module named); reading, forcing and
    ablating them all hook that input with a forward pre-hook.
    """
    return address.endswith(INPUT_SUFFIXES)


def _parallel(module: nn.Module) -> bool:
    """Attention and MLP read the same input (GPT-J, GPT-NeoX, Phi): no mid residual."""
    config = getattr(module, "config", None)
    kind = getattr(config, "model_type", "")
    return bool(getattr(config, "use_parallel_residual", False)) or kind in ("gptj", "phi")


def taps(module: nn.Module, blocks: str, n_blocks: int) -> dict[str, Tap]:
    """The virtual addresses of every block that this model has, and how to read them."""
    out: dict[str, Tap] = {}
    for i in range(n_blocks):
        block = f"{blocks}.{i}"
        try:
            out[f"{block}.{HEADS}"] = Tap(role(module, block, "out_proj"))
        except LayerError:
            pass
        if gated(module, block) and has(module, f"{block}.mlp.down_proj"):
            out[f"{block}.{GATED_POST}"] = Tap(f"{block}.mlp.down_proj")
        if has(module, f"{block}.layer.1.DenseReluDense.wo"):  # T5: dropout sits before wo
            out[f"{block}.{GATED_POST}"] = Tap(f"{block}.layer.1.DenseReluDense.wo")
        post_ln = has(module, f"{block}.attention.output.LayerNorm")
        if not post_ln and not _parallel(module):
            try:
                out[f"{block}.{RESID_MID}"] = Tap(role(module, block, "ln2"))
            except LayerError:
                pass
        fused = f"{block}.attn.c_attn"
        if has(module, fused) and not has(module, f"{block}.attn.q_attn"):
            width = module.get_submodule(fused).nf // 3
            for j, qkv in enumerate("qkv"):
                out[f"{block}.attn.hook_{qkv}"] = Tap(fused, "output", j * width, (j + 1) * width)
        neox = f"{block}.attention.query_key_value"
        if has(module, neox):
            d = getattr(module.get_submodule(f"{block}.attention"), "head_size", None)
            for j, qkv in enumerate("qkv" if isinstance(d, int) else ""):
                out[f"{block}.attn.hook_{qkv}"] = Tap(neox, "output", j * d, (j + 1) * d, d)
    return out


def tl_names(module: nn.Module, blocks: str, n_blocks: int, virtual: dict[str, Tap]) -> list[str]:
    """The TransformerLens hook names that translate on this model (model-wide, per block).

    A name that translates may still not be readable (a rotary hook where there is no
    rotary: resolving it says so); ``dl.activations``' name filters leave those out.
    """
    out = []
    per_block = [f"blocks.{i}.{h}" for i in range(n_blocks) for h in _BLOCK_HOOKS]
    for name in ("hook_embed", "hook_pos_embed", *per_block, *_FINAL):
        try:
            if translate_tl(name, blocks, n_blocks, module, virtual) is not None:
                out.append(name)
        except LayerError:  # not on this architecture (no learned positions, parallel blocks)
            continue
    return out


def translate_tl(
    address: str, blocks: str, n_blocks: int, module: nn.Module, virtual: dict[str, Tap]
) -> str | None:
    """Our address for a TransformerLens hook name; None if ``address`` is not one.

    ``virtual`` holds the model's virtual addresses (:func:`taps`).
    """
    if address == "hook_embed":
        emb = module.get_input_embeddings() if hasattr(module, "get_input_embeddings") else None
        name = next((n for n, m in module.named_modules() if m is emb), None)
        if not name:
            raise LayerError(f"{type(module).__name__} has no input embedding for 'hook_embed'.")
        return name
    if address == "hook_pos_embed":
        return top_level(module, blocks, POS_EMBED, address, "learned position embedding")
    if address in _FINAL:
        final = top_level(module, blocks, FINAL_LN, address, "final layer norm")
        return final + address.removeprefix("ln_final")
    m = _TL.match(address)
    if not m:
        return None
    i, hook = int(m.group("i")), m.group("hook")
    if hook in _PATTERNS:
        raise LayerError(
            f"{address!r} is an attention pattern: one value per (head, query, key), not one "
            "per symbol, so it holds no units to score. Read the heads' outputs "
            f"('blocks.{i}.attn.hook_z', head = unit // head_dim), their queries and keys "
            f"('blocks.{i}.attn.hook_q' / 'hook_k'), or score the pattern against a pair "
            "hypothesis: model.attention_to(pair) gives one unit per head. "
            f"dl.activations(model, data, ['{address}']) returns it as a tensor."
        )
    if hook not in _BLOCK_HOOKS:
        raise LayerError(
            f"TransformerLens hook {address!r} is not supported; supported per block: "
            f"{', '.join(sorted(_BLOCK_HOOKS))}; model-wide: hook_embed, hook_pos_embed, "
            "ln_final.hook_normalized, ln_final.hook_scale."
        )
    if i >= n_blocks:
        raise LayerError(f"{address!r}: the model has {n_blocks} blocks (0..{n_blocks - 1}).")
    block = f"{blocks}.{i}"
    if hook == "hook_resid_pre":
        return f"{blocks}.{i - 1}" if i else embeddings(module, blocks)
    if hook == "hook_resid_post":
        return block
    if hook == "hook_resid_mid":
        if f"{block}.{RESID_MID}" in virtual:
            return f"{block}.{RESID_MID}"
        if has(module, f"{block}.attention.output.LayerNorm"):  # post-LN (BERT): after ln1
            return f"{block}.attention.output.LayerNorm"
        raise LayerError(
            f"{address!r}: {type(module).__name__} runs attention and MLP in parallel on the "
            "same input, so there is no residual stream between them; read "
            f"'blocks.{i}.hook_resid_pre' or 'blocks.{i}.hook_resid_post'."
        )
    if hook in ("attn.hook_z", "mlp.hook_post", "attn.hook_q", "attn.hook_k", "attn.hook_v"):
        if f"{block}.{hook}" in virtual:
            return f"{block}.{hook}"
        if hook == "attn.hook_z":
            return role(module, block, "out_proj")  # raises, naming the candidates
    if hook in ATTN_HOOKS:
        return f"{block}.{hook}"  # computed when first named (.computed)
    if hook.endswith(NORM_HOOKS):  # the norm's input normalized / its scale (.computed)
        return role(module, block, _BLOCK_HOOKS[hook]) + hook[hook.rindex(".") :]
    if (
        _BLOCK_HOOKS[hook] in ("q_norm", "k_norm")
        and role_or_none(module, block, _BLOCK_HOOKS[hook]) is None
    ):
        raise LayerError(
            f"{address!r}: block {block!r} of {type(module).__name__} normalizes no per-head "
            "queries or keys (Qwen3 and Gemma3 do); read "
            f"'blocks.{i}.attn.hook_{_BLOCK_HOOKS[hook][0]}' instead."
        )
    return role(module, block, _BLOCK_HOOKS[hook] or "mlp_post")
