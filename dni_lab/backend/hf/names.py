"""Where things live inside a Hugging Face transformer, and foreign hook names.

A transformer's blocks are the ``nn.ModuleList`` with ``config.num_hidden_layers``
entries; inside a block, each *role* (attention output, MLP neurons, ...) is
the first candidate path that exists, which covers GPT-2, BERT/RoBERTa,
LLaMA/Mistral-style, OPT/GPT-NeoX-style and T5 layouts. TransformerLens hook names
(``blocks.0.hook_resid_post``), TransformerLens 4 bridge names
(``blocks.0.hook_out``, :mod:`.tl_bridge`) and nnsight module paths
(``model.transformer.h[0].mlp.output``, and ``.input``: the module's first positional
input) are translated to our addresses.
Per-head outputs are heads × head_dim units, head-major, whatever the hidden
size (Qwen3 and Gemma set ``head_dim`` apart from it; GQA keys/values have
fewer heads): :func:`reads_input`, :func:`input_width`, :func:`head_shape`,
:func:`token_major`.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from ..errors import LayerError
from . import tl_bridge
from .hooks import HEADS, INPUT, embeddings, has, reads_input, role, translate_tl

__all__ = ["HEADS", "embeddings", "reads_input", "role"]  # re-exported from .hooks


def find_blocks(module: nn.Module) -> tuple[str, int]:
    """Address of the block list and the number of blocks."""
    config = getattr(module, "config", None)
    n = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    lists = [
        (name, len(m))
        for name, m in module.named_modules()
        if isinstance(m, nn.ModuleList) and len(m) and (n is None or len(m) == n)
    ]
    if not lists:
        raise LayerError(
            f"{type(module).__name__} has no list of {n} transformer blocks; pass "
            "units=[(address, '*')] with addresses from model.addresses."
        )
    # the outermost list (the decoder/encoder stack, not a list inside one block)
    return min(lists, key=lambda x: x[0].count("."))


def input_width(module: nn.Module) -> int | None:
    """Features a projection reads: the width of its input (hook_z reads that input).

    ``in_features`` of an ``nn.Linear`` (and its quantized subclasses), ``nx`` of
    GPT-2's ``Conv1D``; None for anything else (the caller measures it). This is
    heads × head_dim, which is not the hidden size on Qwen3 or Gemma configs.
    """
    width = getattr(module, "in_features", None)
    if width is None and type(module).__name__ == "Conv1D":
        width = getattr(module, "nx", None)
    weight = getattr(module, "weight", None)
    if width is None and "Norm" in type(module).__name__ and getattr(weight, "dim", None):
        # a layer norm (hook_resid_mid reads its input): as wide as its weight
        width = int(weight.shape[-1]) if weight.dim() == 1 else None
    return int(width) if isinstance(width, int) else None


def head_shape(config: object) -> tuple[frozenset[int], int | None]:
    """The head counts (queries, keys/values under GQA) and ``head_dim`` of a config.

    ``head_dim`` is the config's own when it sets one (Qwen3, Gemma: then heads ×
    head_dim need not be the hidden size), else hidden size / heads.
    """
    n_q = getattr(config, "num_attention_heads", None)
    n_kv = getattr(config, "num_key_value_heads", None)
    counts = frozenset(n for n in (n_q, n_kv) if isinstance(n, int) and n > 0)
    dim = getattr(config, "head_dim", None)
    hidden = getattr(config, "hidden_size", None)
    if not isinstance(dim, int) and isinstance(n_q, int) and isinstance(hidden, int) and n_q:
        dim = hidden // n_q
    return counts, dim if isinstance(dim, int) else None


def token_major(
    t: torch.Tensor, n_tokens: int | None, counts: frozenset[int], head_dim: int | None
) -> torch.Tensor:
    """A per-head map ``(R, T, H, D)`` or ``(R, H, T, D)`` as ``(R, T, H·D)``, head-major.

    Parameters
    ----------
    t : torch.Tensor
        A 4-D module output.
    n_tokens : int or None
        Tokens in the batch that produced it (``T``).
    counts, head_dim
        From :func:`head_shape`: ``H`` must be one of ``counts``, ``D`` be ``head_dim``.

    Returns
    -------
    torch.Tensor
        ``(R, T, H·D)`` (unit ``h·D + d`` is dimension ``d`` of head ``h``), or ``t``
        unchanged when it is not a per-head map (attention weights ``(R, H, T, T)``).
    """
    if head_dim is None or t.dim() != 4 or t.shape[3] != head_dim:
        return t
    dims = [d for d in (1, 2) if t.shape[d] == n_tokens and t.shape[3 - d] in counts]
    if not dims:
        return t
    # as many tokens as heads: the tokens are the outer dimension in memory, the order
    # the projection wrote them in, whichever way the module transposed them after
    d = max(dims, key=t.stride)
    return (t if d == 1 else t.transpose(1, 2)).flatten(2)


def translate(
    address: str, blocks: str, n_blocks: int, module: nn.Module, virtual: dict | None = None
) -> str | None:
    """Our address for a TransformerLens or nnsight name; None if it is neither.

    ``virtual`` holds the model's virtual addresses (:func:`.hooks.taps`).
    """
    legacy = tl_bridge.translate(address, blocks, module, virtual)  # TransformerLens 4 bridge names
    if legacy is not None and legacy != address:
        if legacy in (virtual or {}) or has(module, legacy.removesuffix(INPUT)):
            return legacy  # an address already: a module, its input, a virtual one
        return translate(legacy, blocks, n_blocks, module, virtual) or legacy
    mapped = translate_tl(address, blocks, n_blocks, module, virtual or {})
    if mapped is not None:
        return mapped
    nnsight = address.endswith((".output", ".input", ".inputs"))
    if address.startswith("model.") or "[" in address or nnsight:
        # nnsight: model.transformer.h[0].mlp.output -> transformer.h.0.mlp; .input is the
        # module's first positional input, a virtual address of its own (.computed)
        path = re.sub(r"\[(\d+)\]", r".\1", address)
        if path.endswith(".inputs"):
            raise LayerError(
                f"{address!r} names all of a module's inputs (args, kwargs); dni_lab reads "
                f"one tensor: name its first positional input, '{address[:-1]}'."
            )
        base, _, end = path.rpartition(".")
        base, suffix = (base, INPUT) if end == "input" else (path.removesuffix(".output"), "")
        if not has(module, base):  # nnsight's root is 'model.'; LLaMA's own stack is too
            base = base.removeprefix("model.")
        return base + suffix
    return None
