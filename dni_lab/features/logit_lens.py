"""The logit lens and direct logit attribution as units: chosen tokens' logits read at a hook.

``logit_lens(model, "blocks.3.hook_resid_post", [" the", " a"])`` attaches to the residual
stream after block 3 and reads, per symbol, what the model's own head would say there:
the final norm applied to the stream, then the unembedding's rows of the chosen tokens
(plus its bias). At the last block this is the model's logits for those tokens.

On a per-head hook (``blocks.N.attn.hook_result``: each head's output through its slice
of ``W_O``, heads × d_model units) the units are each head's *direct logit attribution*:
the head's output through the final norm's linear part (centring for a LayerNorm, then its
weight) and the unembedding, unit ``head * len(tokens) + j``. The norm's scale depends on
the whole residual stream, which a head's output does not hold: it is not applied, so the
values are proportional, per position, to TransformerLens's ``cache.logit_attrs`` with a
scale of 1. That is ``apply_ln=False``; for TransformerLens's ``apply_ln=True`` (each part
divided by the final norm's scale cached on the same records) read the heads' results
and the scale with ``dl.activations`` and call ``cache.logit_attrs(stack, tokens,
apply_ln=True)`` (or ``apply_ln=False``, the values here):
:mod:`~dni_lab.backend.extraction.activation_stacks`.

Either is a unit set like a sparse autoencoder's latents: score it with ``dl.inspect(...,
units=[lens])`` against any hypothesis, or read it with ``dl.activations`` through its hook.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence

import torch
from torch import nn

from ..backend.errors import DNIError, LayerError
from ..backend.extraction.models import Model
from .base import check_width

#: the names a decoder's final norm goes by (GPT-2, LLaMA-style, OPT/T5-style, Falcon)
FINAL_NORMS = ("ln_f", "norm", "final_layer_norm", "final_layernorm")


class LogitLens(nn.Module):
    """Chosen tokens' logits read from a hook: a unit set (``dl.inspect(units=[lens])``).

    Attributes
    ----------
    hook : str
        The model address read (the residual stream, or a per-head ``hook_result``).
    name : str
        Names the layer of its units in score frames: ``"{hook}:{name}"``.
    tokens : list of int
        The token ids whose logits are the units (per head, on a per-head hook).
    heads : int or None
        Heads on a per-head hook; None on the residual stream.
    """

    sparse = False

    def __init__(
        self,
        norm: nn.Module,
        unembed: nn.Linear,
        tokens: Sequence[int],
        hook: str,
        name: str,
        heads: int | None = None,
        latent_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.norm = copy.deepcopy(norm).eval().requires_grad_(False)
        self.tokens = [int(t) for t in tokens]
        idx = torch.as_tensor(self.tokens)
        W = unembed.weight.detach()[idx].T.clone().float()  # (d_model, n)
        b = unembed.bias.detach()[idx].clone().float() if unembed.bias is not None else None
        self.register_buffer("W_U", W)
        self.register_buffer("b_U", b if b is not None else torch.zeros(len(self.tokens)))
        self.hook, self.name, self.heads = str(hook), str(name), heads
        d_model = W.shape[0]
        self.d_in = d_model * (heads or 1)
        self.d_sae = len(self.tokens) * (heads or 1)
        self.meta = {"latent_names": list(latent_names or map(str, self.tokens))}

    @property
    def address(self) -> str:
        return f"{self.hook}:{self.name}"

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_in)`` activations → ``(..., d_sae)`` logits (or attributions)."""
        check_width(x, self.d_in, f"logit lens {self.name!r}", self.hook)
        x = x.float()
        if self.heads is None:
            return self.norm(x.to(self.W_U.dtype)) @ self.W_U + self.b_U
        d = self.W_U.shape[0]
        per = x.reshape(*x.shape[:-1], self.heads, d)
        if isinstance(self.norm, nn.LayerNorm) or getattr(self.norm, "bias", None) is not None:
            per = per - per.mean(-1, keepdim=True)  # centring is linear: it splits over heads
        weight = getattr(self.norm, "weight", None)
        if weight is not None:
            per = per * weight.float()
        return (per @ self.W_U).reshape(*x.shape[:-1], self.d_sae)

    def fingerprint(self) -> str:
        """A hash of the tokens, the hook and the weights: same value, same units."""
        h = hashlib.sha256(repr((self.hook, self.name, self.heads, self.tokens)).encode())
        for k, v in sorted(self.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return f"LogitLens({self.name!r}, hook={self.hook!r}, units={self.d_sae})"


def logit_lens(
    model: Model,
    hook: str,
    tokens: Sequence[int | str],
    name: str | None = None,
    norm: str | None = None,
) -> LogitLens:
    """The logits of ``tokens`` read at ``hook`` (per head on an ``attn.hook_result`` hook).

    Parameters
    ----------
    model : Model
        A transformer with an LM head (``dl.Model.from_hf``).
    hook : str
        The residual stream (``"blocks.3.hook_resid_post"``, any name ``units=`` takes),
        or ``"blocks.N.attn.hook_result"`` for per-head direct logit attribution.
    tokens : sequence of int or str
        Token ids, or strings the tokenizer keeps as one token each.
    name : str, optional
        The set's name (its layer is ``"{hook}:{name}"``); ``"logit_lens"`` or
        ``"logit_attribution"`` by default.
    norm : str, optional
        The final norm's module path, where it is not one of :data:`FINAL_NORMS`.
    """
    module = model.module
    unembed = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
    if not isinstance(unembed, nn.Linear):
        raise LayerError(
            f"model {model.name!r} ({type(module).__name__}) has no LM head to unembed with; "
            "load it with its head (e.g. AutoModelForCausalLM)."
        )
    final = _final_norm(module, norm, model.name)
    ids = [model.token_id(t) for t in tokens]
    if not ids:
        raise DNIError("no tokens given; pass tokens=[id or one-token string, ...].")
    address = model.resolve_layer(hook)
    heads = None
    if address.endswith("attn.hook_result"):
        heads = getattr(getattr(module, "config", None), "num_attention_heads", None)
    labels = [t if isinstance(t, str) else model.tokenizer.decode([t]) for t in tokens]
    default = "logit_attribution" if heads else "logit_lens"
    return LogitLens(final, unembed, ids, hook, name or default, heads, labels)


def _final_norm(module: nn.Module, path: str | None, model_name: str) -> nn.Module:
    if path is not None:
        return module.get_submodule(path)
    found = [
        (n, m)
        for n, m in module.named_modules()
        if n.split(".")[-1] in FINAL_NORMS and not any(p.isdigit() for p in n.split("."))
    ]
    if len(found) != 1:
        raise LayerError(
            f"model {model_name!r}: {'no' if not found else len(found)} final norms among "
            f"{[n for n, _ in found] or FINAL_NORMS}; pass norm='<its module path>'."
        )
    return found[0][1]


