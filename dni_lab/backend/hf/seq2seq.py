"""Encoder–decoder models (T5, BART): the encoder stack, and the decoder stack under a rule.

A record gives the encoder its input; the decoder needs inputs of its own, which a
record does not give. :class:`~dni_lab.backend.hf.model.HFModel` therefore reads the
encoder by default (its blocks are the default units and the positions in
``units=[2]``) and runs the encoder alone. Decoder units (addresses under the
decoder, ``decoder.block.1`` on T5, ``decoder.layers.1`` on BART, or
``decoder.blocks.N.hook_resid_post``) need ``decoder_input="same"``:

* **teacher forcing on the record itself**: the decoder reads the record's tokens
  shifted right, ``[decoder_start] + tokens`` (its special tokens included), as in
  training with ``labels`` = the record. Decoder position ``t + 1`` reads token
  ``t`` and predicts token ``t + 1``, so **decoder symbol t is token t of the
  record**, read where the decoder has just seen it (as in a decoder-only LM).
  The decoder's symbols are the encoder's, so hypotheses pool onto them the same way.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch
from torch import nn

from ..errors import DNIError, LayerError

#: The decoder-input rules: ``"same"`` feeds the record itself, shifted right.
RULES = ("same",)

_TL = re.compile(r"^decoder\.blocks\.(\d+)(?:\.hook_resid_post)?$")


def is_encoder_decoder(module: nn.Module) -> bool:
    """Whether ``module``'s forward pass takes decoder inputs (T5Model, BartModel, ...)."""
    # T5EncoderModel's config says encoder-decoder too: ask the forward pass
    return "decoder_input_ids" in inspect.signature(module.forward).parameters


def check_rule(module: nn.Module, rule: Any, stride: Any, record_pool: Any) -> None:
    """A clear error for a decoder rule that cannot apply."""
    if rule is None:
        return
    kind = type(module).__name__
    if not is_encoder_decoder(module):
        raise DNIError(f"decoder_input={rule!r} is for encoder-decoder models; {kind} has no "
                       "decoder inputs: leave it out.")  # fmt: skip
    if rule not in RULES:
        raise DNIError(
            f"unknown decoder_input {rule!r}; use one of {RULES} (the record itself, shifted "
            "right: decoder symbols are the record's tokens)."
        )
    if stride is not None or record_pool is not None:
        raise DNIError("decoder_input= reads the decoder per token; it does not combine with "
                       "stride= or a record-level pool.")  # fmt: skip
    if start_token(module) is None:
        raise DNIError(f"{kind}'s config has no decoder_start_token_id; set it to read the "
                       "decoder.")  # fmt: skip


def start_token(module: nn.Module) -> int | None:
    config = getattr(module, "config", None)
    start = getattr(config, "decoder_start_token_id", None)
    return int(start) if start is not None else None


def decoder_prefix(module: nn.Module) -> str | None:
    """Address of the decoder stack (``decoder``, ``model.decoder``), or None."""
    get = getattr(module, "get_decoder", None)
    if get is None or not is_encoder_decoder(module):
        return None
    dec = get()
    return next((n for n, m in module.named_modules() if m is dec and n), None)


def decoder_blocks(module: nn.Module, prefix: str) -> str | None:
    """Address of the decoder's list of blocks (``decoder.block``, ``decoder.layers``)."""
    dec = module.get_submodule(prefix)
    lists = [n for n, m in dec.named_children() if isinstance(m, nn.ModuleList) and len(m)]
    return f"{prefix}.{lists[0]}" if lists else None


def translate(layer: str, blocks: str | None) -> str | None:
    """``decoder.blocks.N[.hook_resid_post]`` → the decoder's block ``N``."""
    m = _TL.match(layer)
    return f"{blocks}.{m.group(1)}" if m and blocks else None


def needs_rule(model: Any, address: str) -> None:
    """A decoder address without a decoder-input rule: say which rule to pass."""
    prefix = model._decoder
    if prefix is None or model.decoder_input is not None:
        return
    if address == prefix or address.startswith(prefix + "."):
        raise LayerError(
            f"{address!r} is in the decoder of {type(model.module).__name__} (model "
            f"{model.name!r}), which needs decoder inputs that records do not give. Pass "
            "Model.from_hf(..., decoder_input='same') to feed each record to the decoder "
            "too, shifted right (decoder symbols are then the record's tokens), or read "
            "the encoder's units (the defaults)."
        )


def encode_decoder(tokenizer: Any, records: list[str], start: int, max_length: int | None,
                   truncate: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:  # fmt: skip
    """Decoder inputs for ``records`` under the ``"same"`` rule, and which slots are symbols.

    Returns ``({"decoder_input_ids", "decoder_attention_mask"}, keep)``, each
    ``(R, T + 1)``: ``[start] + tokens`` padded right (a decoder's learned positions
    count from its first slot), ``keep`` true at position ``t + 1`` for each
    non-special token ``t``.
    """
    kw: dict[str, Any] = dict(padding=True, return_tensors="pt", return_special_tokens_mask=True,
                              padding_side="right")  # fmt: skip
    if max_length is not None and truncate:
        kw.update(truncation=True, max_length=max_length)
    enc = tokenizer(list(records), **kw)
    mask = enc["attention_mask"].bool()
    keep = mask & ~enc["special_tokens_mask"].bool()
    first = torch.full((len(records), 1), start, dtype=enc["input_ids"].dtype)
    ids = torch.cat([first, enc["input_ids"]], 1)
    dmask = torch.cat([torch.ones_like(first), enc["attention_mask"]], 1)
    keep = torch.cat([torch.zeros_like(first, dtype=torch.bool), keep], 1)
    return {"decoder_input_ids": ids, "decoder_attention_mask": dmask}, keep


def encoder_inputs(module: nn.Module, batch: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``batch`` the encoder stack's forward pass takes."""
    params = inspect.signature(module.forward).parameters
    return {k: v for k, v in batch.items() if k in params and not k.startswith("decoder_")}
