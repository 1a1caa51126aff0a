"""TransformerLens's residual-stream methods on a ``dl.activations`` cache.

``stack`` (``stack_activation``), ``accumulated_resid``, ``decompose_resid`` and
``apply_ln_to_stack`` as TransformerLens 4.3's ``ActivationCache`` defines them, over
the names the cache holds (read them: ``names="blocks.*.hook_resid_*"``, ...); a name
they need and the cache lacks raises a ``KeyError`` naming it. Two differences, both
from what a dl cache is:

* slots past a record's length are 0 in a dl cache, and so is their cached
  ``hook_scale``; ``apply_ln_to_stack`` leaves them 0 there instead of dividing by 0;
* the final norm (``accumulated_resid(apply_ln=True)`` at the last layer, where
  TransformerLens recomputes it per component) is the model's own module, run in its dtype
  (at padding it gives the norm's bias).

``logit_attrs`` is direct logit attribution with TransformerLens's ``apply_ln`` choice:
each part through the final norm's cached scale (``apply_ln=True``, TransformerLens's
``cache.logit_attrs``) or not (``False``: what ``dl.features.logit_lens`` on
``attn.hook_result`` gives per head, the scale depending on the whole stream), then the
norm's weight and the unembedding's columns of the tokens (TransformerLens folds that
weight into ``W_U`` with ``fold_ln=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: TransformerLens's short names (``utils.get_act_name``) → the hook under a block.
_ATTN = ("q", "k", "v", "z", "pattern", "attn_scores", "result", "rot_q", "rot_k")
_SHORT = {
    **{k: f"attn.hook_{k}" for k in _ATTN},
    **{k: f"mlp.hook_{k}" for k in ("pre", "post", "pre_linear")},
    **{k: f"hook_{k}" for k in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")},
}
#: Per-head names: their units are heads × d_head, head-major.
_PER_HEAD = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_rot_q", "hook_rot_k",
             "attn.q.hook_out", "attn.k.hook_out", "attn.v.hook_out", "attn.o.hook_in")  # fmt: skip


def act_name(name: str, layer: int | None = None, sublayer: str | None = None) -> str:
    """TransformerLens's ``get_act_name``: ``("resid_post", 3)`` → ``blocks.3.hook_resid_post``.

    ``("scale", 2, "ln1")`` → ``blocks.2.ln1.hook_scale``; ``("scale",)`` →
    ``ln_final.hook_scale``; ``("embed",)`` → ``hook_embed``. A full name passes through.
    """
    if "." in name or name.startswith("hook_"):
        return name
    if name in ("embed", "pos_embed", "unembed"):
        return f"hook_{name}"
    if name in ("scale", "normalized"):
        where = "ln_final" if layer is None else f"blocks.{layer}.{sublayer or 'ln1'}"
        return f"{where}.hook_{name}"
    if name not in _SHORT or layer is None:
        raise KeyError(
            f"{name!r} is no TransformerLens short name with a layer; use one of "
            f"{sorted(_SHORT)} with a layer, or a full name ('blocks.0.hook_resid_post')."
        )
    return f"blocks.{int(layer)}.{_SHORT[name]}"


@dataclass(frozen=True)
class Transformer:
    """What a cache's TransformerLens methods read of its model.

    Attributes
    ----------
    n_blocks : int
        The blocks (TransformerLens's ``n_layers``).
    norm : {"layer", "rms"} or None
        The blocks' norm: a LayerNorm centers, an RMSNorm does not; None: no norm found.
    final_norm : nn.Module or None
        The norm before the unembedding.
    heads : int
        Query heads.
    head_dim : int or None
        Features per head.
    resolve : callable
        ``name -> address`` (the model's ``resolve_layer``): another name of a value held.
    unembed : nn.Module or None
        The LM head (``get_output_embeddings()``).
    token_id : callable or None
        ``token -> id`` (an id, or a string the tokenizer keeps as one token).
    """

    n_blocks: int
    norm: str | None
    final_norm: nn.Module | None
    heads: int
    head_dim: int | None
    resolve: Callable[[str], str]
    unembed: nn.Module | None = None
    token_id: Callable[[Any], int] | None = None

    def head_axes(self, name: str, address: str, width: int) -> tuple[int, int] | None:
        """``(heads, per head)`` of a per-head name's ``width`` units; None for others."""
        if name.endswith("attn.hook_result") or address.endswith("attn.hook_result"):
            return (self.heads, width // self.heads) if self.heads else None
        per_head = name.endswith(_PER_HEAD) or address.endswith(_PER_HEAD)
        if per_head and self.head_dim and width % self.head_dim == 0:
            return (width // self.head_dim, self.head_dim)
        return None


def describe(model: Any) -> Transformer | None:
    """The :class:`Transformer` of a Hugging Face ``model``; None for any other model."""
    if not hasattr(model, "hook_names") or not hasattr(model, "_n_blocks"):
        return None
    from ..hf.computed import norm_kind
    from ..hf.names import head_shape

    config = getattr(model.module, "config", None)
    _counts, head_dim = head_shape(config)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    final, kind = None, None
    try:
        path = model.resolve_layer("ln_final.hook_scale").removesuffix(".hook_scale")
        final = model.module.get_submodule(path)
        kind = norm_kind(final, path)
    except (KeyError, ValueError, AttributeError):
        pass
    get = getattr(model.module, "get_output_embeddings", None)
    unembed = get() if get is not None else None
    return Transformer(model._n_blocks, kind, final, heads, head_dim, model.resolve_layer,
                       unembed, getattr(model, "token_id", None))  # fmt: skip


def _pos(t: torch.Tensor, pos_slice: Any) -> torch.Tensor:
    """TransformerLens's ``Slice(pos_slice).apply(t, dim=-2)``: None keeps every position."""
    if pos_slice is None:
        return t
    if isinstance(pos_slice, (list, tuple, torch.Tensor)):
        return t.index_select(-2, torch.as_tensor(pos_slice, device=t.device))
    return t[..., pos_slice, :]


class Stacks:
    """The residual-stream methods; mixed into :class:`.activation_cache.ActivationCache`."""

    model: Transformer | None

    def __getitem__(self, name: Any) -> torch.Tensor:  # pragma: no cover - the cache's
        raise NotImplementedError

    def _transformer(self, what: str) -> Transformer:
        if self.model is None:
            raise KeyError(
                f"cache.{what} needs a transformer's blocks; this cache is of a model that has "
                "none (read a dl.Model.from_hf model)."
            )
        return self.model

    def stack(self, name: str, layer: int | None = -1, sublayer_type: str | None = None
              ) -> torch.Tensor:  # fmt: skip
        """``name`` of every block before ``layer`` stacked: ``(layers, R, ...)``.

        TransformerLens's ``stack_activation``: ``name`` is a short name
        (``"resid_post"``, ``"z"``, ``"scale"`` with ``sublayer_type="ln1"``); ``layer``
        -1 or None: every block.
        """
        m = self._transformer("stack")
        n = m.n_blocks if layer is None or layer == -1 else int(layer)
        return torch.stack([self[act_name(name, i, sublayer_type)] for i in range(n)])

    stack_activation = stack

    def accumulated_resid(
        self,
        layer: int | None = None,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: Any = None,
        mlp_input: bool = False,
        return_labels: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream before each block up to ``layer``: ``(components, R, T, d)``.

        TransformerLens's semantics: ``resid_pre`` of blocks ``0..layer`` (and
        ``resid_mid`` before ``layer`` with ``incl_mid``, at ``layer`` with
        ``mlp_input``); ``layer`` None or the block count adds the last block's
        ``resid_post`` (label ``"final_post"``). ``apply_ln``: through
        :meth:`apply_ln_to_stack` (at the last layer, the final norm recomputed per
        component). Labels ``"0_pre"``, ``"0_mid"``, ..., ``"final_post"``.
        """
        n = self._transformer("accumulated_resid").n_blocks
        layer = n if layer is None or layer == -1 else int(layer)
        parts, labels = [], []
        for i in range(layer + 1):
            if i == n:
                parts.append(self[act_name("resid_post", n - 1)])
                labels.append("final_post")
                continue
            parts.append(self[act_name("resid_pre", i)])
            labels.append(f"{i}_pre")
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                parts.append(self[act_name("resid_mid", i)])
                labels.append(f"{i}_mid")
        out = torch.stack([_pos(p, pos_slice) for p in parts])
        if apply_ln:
            out = self.apply_ln_to_stack(out, layer, mlp_input, pos_slice,
                                         recompute_ln=layer == n)  # fmt: skip
        return (out, labels) if return_labels else out

    def decompose_resid(
        self,
        layer: int | None = None,
        mlp_input: bool = False,
        mode: str = "all",
        apply_ln: bool = False,
        pos_slice: Any = None,
        incl_embeds: bool = True,
        return_labels: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """What each part wrote into the residual stream before ``layer``: ``(parts, R, T, d)``.

        TransformerLens's semantics: ``hook_embed`` and ``hook_pos_embed`` (with
        ``incl_embeds``, where the cache holds them), then each block's ``hook_attn_out``
        and ``hook_mlp_out`` (``mode="attn"`` / ``"mlp"``: one kind), and block
        ``layer``'s ``hook_attn_out`` with ``mlp_input``. Labels ``"embed"``,
        ``"pos_embed"``, ``"0_attn_out"``, ``"0_mlp_out"``, ...
        """
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode must be 'all', 'attn' or 'mlp', not {mode!r}.")
        n = self._transformer("decompose_resid").n_blocks
        layer = n if layer is None or layer == -1 else int(layer)
        parts, labels = [], []
        if incl_embeds:
            for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed")):
                if label == "embed" or name in self:  # no learned positions: none to add
                    parts.append(self[name])
                    labels.append(label)
        for i in range(layer):
            for kind in ("attn", "mlp"):
                if mode in ("all", kind):
                    parts.append(self[act_name(f"{kind}_out", i)])
                    labels.append(f"{i}_{kind}_out")
        if mlp_input and mode != "mlp":
            parts.append(self[act_name("attn_out", layer)])
            labels.append(f"{layer}_attn_out")
        out = torch.stack([_pos(p, pos_slice) for p in parts])
        if apply_ln:
            out = self.apply_ln_to_stack(out, layer, mlp_input, pos_slice)
        return (out, labels) if return_labels else out

    def apply_ln_to_stack(
        self,
        residual_stack: torch.Tensor,
        layer: int | None = None,
        mlp_input: bool = False,
        pos_slice: Any = None,
        batch_slice: Any = None,
        has_batch_dim: bool = True,
        recompute_ln: bool = False,
    ) -> torch.Tensor:
        """Parts of the residual stream as the norm before ``layer`` scales them.

        TransformerLens's semantics: centered (a LayerNorm) and divided by the cached
        ``hook_scale`` of ``blocks.{layer}.ln1`` (``ln2`` with ``mlp_input``), or of
        ``ln_final`` for ``layer`` None or the block count; the norm's weight and bias are
        not applied. ``recompute_ln`` at the last layer runs the final norm on each part
        instead. A model without norms: the stack unchanged. Slots whose scale is 0 (a dl
        cache's padding) stay 0.
        """
        m = self._transformer("apply_ln_to_stack")
        layer = m.n_blocks if layer is None or layer == -1 else int(layer)
        x = residual_stack
        if has_batch_dim and batch_slice is not None:
            x = x[:, batch_slice]
        if m.norm is None:
            return x
        if recompute_ln and layer == m.n_blocks and m.final_norm is not None:
            with torch.no_grad():
                p = next(m.final_norm.parameters(), x)  # the norm's own device and dtype
                out = m.final_norm(x.to(p.device, p.dtype)).to(x.device, x.dtype)
            return out
        if m.norm == "layer":
            x = x - x.mean(-1, keepdim=True)
        if layer == m.n_blocks:
            key = act_name("scale")
        else:
            key = act_name("scale", layer, "ln2" if mlp_input else "ln1")
        scale = _pos(self[key], pos_slice)
        if has_batch_dim and batch_slice is not None:
            scale = scale[batch_slice]
        scale = scale.to(x.device)
        return torch.where(scale > 0, x / scale.clamp_min(torch.finfo(scale.dtype).tiny), 0.0)

    def logit_attrs(
        self,
        residual_stack: torch.Tensor,
        tokens: Any,
        incorrect_tokens: Any = None,
        apply_ln: bool = True,
        pos_slice: Any = None,
    ) -> torch.Tensor:
        """Direct logit attribution of each part of ``residual_stack`` to ``tokens``.

        Parameters
        ----------
        residual_stack : torch.Tensor
            ``(parts, R, T, d_model)`` (from :meth:`decompose_resid`,
            :meth:`accumulated_resid`, or per-head results stacked).
        tokens : int, str or sequence
            One token (every position's logit for it) or one per record (``(R,)``; with
            ``pos_slice`` picking one position).
        incorrect_tokens : optional
            As ``tokens``: the attribution to the logit difference.
        apply_ln : bool
            Divide by the final norm's cached scale (TransformerLens's
            ``cache.logit_attrs``, the default), or not.
        pos_slice : optional
            The positions ``residual_stack`` was cut to.

        Returns
        -------
        torch.Tensor
            ``(parts, R, T)`` (or as ``pos_slice`` cut it).
        """
        m = self._transformer("logit_attrs")
        if m.unembed is None or not hasattr(m.unembed, "weight"):
            raise KeyError("cache.logit_attrs needs the model's LM head; load it with one.")
        x = self.apply_ln_to_stack(residual_stack, None, False, pos_slice) if apply_ln \
            else residual_stack  # fmt: skip
        if not apply_ln and m.norm == "layer":
            x = x - x.mean(-1, keepdim=True)  # centring is linear: it splits over parts
        weight = getattr(m.final_norm, "weight", None)
        direction = self._directions(m, tokens)
        if incorrect_tokens is not None:
            direction = direction - self._directions(m, incorrect_tokens)
        if weight is not None:
            direction = direction * weight.detach().to(direction.dtype)
        return (x * direction.to(x.device, x.dtype)).sum(-1)

    @staticmethod
    def _directions(m: Transformer, tokens: Any) -> torch.Tensor:
        """The unembedding's rows of ``tokens``: ``(d_model,)`` or ``(R, 1, d_model)``."""
        one = isinstance(tokens, (int, str)) or (torch.is_tensor(tokens) and tokens.dim() == 0)
        seq = [tokens] if one else list(tokens)
        ids = [int(t) if not isinstance(t, str) else m.token_id(t) for t in seq]
        W = m.unembed.weight.detach()[torch.as_tensor(ids)]  # (n, d_model)
        return W[0] if one else W[:, None, :]
