"""Where each part of a transformer block lives, whatever the architecture.

A *role* (the attention's output, the out projection, the MLP's neurons, the norms,
q/k/v) is the first of its candidate paths that exists inside the block: GPT-2,
BERT/RoBERTa, LLaMA/Mistral/Qwen/Gemma, OPT, GPT-NeoX, GPT-J, Phi and T5 layouts.
Model-wide parts (the final norm, learned positions, the embedding sum) are found beside
the block list or above it.
"""

from __future__ import annotations

from torch import nn

from ..errors import LayerError

#: Role -> candidate paths inside one block, the first that exists wins.
ROLES: dict[str, tuple[str, ...]] = {
    # the attention's contribution to the residual stream, before any residual add
    "attn_out": (
        "attention.output.dense",
        "attn",
        "self_attn",
        "attention",
        "layer.0.SelfAttention",
    ),
    # the module whose *input* is the heads' concatenated outputs (hook_z)
    "out_proj": (
        "attention.output.dense",
        "attn.c_proj",
        "self_attn.o_proj",
        "self_attn.out_proj",
        "attention.dense",
        "attn.out_proj",
        "self_attn.dense",
        "layer.0.SelfAttention.o",
    ),
    "mlp_out": (
        "output.dense",
        "mlp",
        "feed_forward",
        "mlp.dense_4h_to_h",
        "fc2",
        "layer.1.DenseReluDense",
    ),
    "mlp_post": (
        "intermediate.intermediate_act_fn",
        "mlp.act",
        "mlp.act_fn",
        "mlp.activation_fn",
        "activation_fn",
        "layer.1.DenseReluDense.act",
    ),
    "mlp_pre": (
        "intermediate.dense",
        "mlp.c_fc",
        "mlp.gate_proj",
        "mlp.fc1",
        "fc1",
        "mlp.dense_h_to_4h",
        "mlp.fc_in",
        "layer.1.DenseReluDense.wi",
        "layer.1.DenseReluDense.wi_0",
    ),
    "mlp_pre_linear": ("mlp.up_proj", "layer.1.DenseReluDense.wi_1"),
    # the MLP's output projection: its input is the MLP neurons (hook_post)
    "mlp_down": (
        "mlp.down_proj",
        "mlp.c_proj",
        "output.dense",
        "mlp.fc2",
        "fc2",
        "mlp.dense_4h_to_h",
        "mlp.fc_out",
        "layer.1.DenseReluDense.wo",
    ),
    "q": (
        "attention.self.query",
        "self_attn.q_proj",
        "attn.q_proj",
        "attention.q_proj",
        "layer.0.SelfAttention.q",
    ),
    "k": (
        "attention.self.key",
        "self_attn.k_proj",
        "attn.k_proj",
        "attention.k_proj",
        "layer.0.SelfAttention.k",
    ),
    "v": (
        "attention.self.value",
        "self_attn.v_proj",
        "attn.v_proj",
        "attention.v_proj",
        "layer.0.SelfAttention.v",
    ),
    # Qwen3 / Gemma3 normalize each head's queries and keys (attn.hook_q_normed / k_normed)
    "q_norm": ("self_attn.q_norm", "attn.q_norm", "attention.q_norm"),
    "k_norm": ("self_attn.k_norm", "attn.k_norm", "attention.k_norm"),
    # the attention module whose output's second item is its weights (eager attention)
    "attn_weights": ("attn", "self_attn", "attention.self", "attention"),
    "ln1": (
        "ln_1",
        "input_layernorm",
        "self_attn_layer_norm",
        "attention.output.LayerNorm",
        "layer.0.layer_norm",
    ),
    "ln2": (
        "ln_2",
        "pre_feedforward_layernorm",
        "post_attention_layernorm",
        "final_layer_norm",
        "output.LayerNorm",
        "layer.1.layer_norm",  # T5: sequential sublayers, attention then feed-forward
    ),
}

FINAL_LN = ("ln_f", "norm", "final_layer_norm", "final_layernorm")
POS_EMBED = ("wpe", "embeddings.position_embeddings", "embed_positions")


def has(module: nn.Module, path: str) -> bool:
    """Whether ``module`` has a submodule at ``path``."""
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def role(module: nn.Module, block: str, name: str) -> str:
    """Address of role ``name`` inside ``block`` (e.g. ``transformer.h.0``)."""
    for cand in ROLES[name]:
        if has(module, f"{block}.{cand}"):
            return f"{block}.{cand}"
    raise LayerError(
        f"block {block!r} of {type(module).__name__} has no {name} module among "
        f"{ROLES[name]}; address the module by its path instead."
    )


def gated(module: nn.Module, block: str) -> bool:
    """Whether ``block``'s MLP is gated (act(gate) * up): LLaMA, Mistral, Qwen, Gemma."""
    return any(has(module, f"{block}.mlp.{p}") for p in ("gate_proj", "gate_up_proj", "up_proj"))


def _first_path(module: nn.Module, blocks: str, leaves: tuple[str, ...]) -> str | None:
    """The first of ``leaves`` beside the block list, or above it (innermost stem first)."""
    parts = blocks.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        stem = ".".join(parts[:depth])
        for leaf in leaves:
            path = f"{stem}.{leaf}" if stem else leaf
            if has(module, path):
                return path
    return None


def top_level(module: nn.Module, blocks: str, leaves: tuple, address: str, what: str) -> str:
    path = _first_path(module, blocks, leaves)
    if path is not None:
        return path
    extra = (
        " (its positions are rotary or relative, applied inside attention)"
        if leaves is POS_EMBED
        else ""
    )
    raise LayerError(
        f"{type(module).__name__} has no {what} for {address!r}{extra}; "
        "read 'blocks.0.hook_resid_pre' or 'hook_embed' instead."
    )


def embeddings(module: nn.Module, blocks: str) -> str:
    """Address of the module whose output enters block 0 (the embedding sum)."""
    path = _first_path(module, blocks, ("drop", "embeddings", "embed_tokens", "embed_in", "emb"))
    if path is None:
        raise LayerError(
            f"cannot find the embedding module of {type(module).__name__} for "
            "'blocks.0.hook_resid_pre'; address it by its module path."
        )
    return path


def role_or_none(module: nn.Module, block: str, name: str) -> str | None:
    """:func:`role`, or None where the block has no such module."""
    try:
        return role(module, block, name)
    except LayerError:
        return None
