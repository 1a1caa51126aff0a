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
* **a function** ``decoder_input=fn``, ``fn(record)`` → the decoder's text (a string,
  tokenized with its special tokens) or its token ids (a list of ints): the decoder reads
  ``[decoder_start] + tokens`` (teacher forcing on that text). Its non-special tokens
  (every id of a list) are the decoder's symbols and pair one to one with the record's:
  decoder symbol ``t`` is token ``t`` of ``fn(record)``, so ``fn`` must give exactly one
  token per symbol of the record (a tag per token, an edited record of the same length);
  another count raises a :class:`~dni_lab.backend.errors.DNIError` naming the record.
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
    if not callable(rule) and rule not in RULES:
        raise DNIError(
            f"unknown decoder_input {rule!r}; use one of {RULES} (the record itself, shifted "
            "right: decoder symbols are the record's tokens) or a function record -> the "
            "decoder's text or token ids, one token per symbol of the record."
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


def encode_decoder(tokenizer: Any, records: list[Any], start: int, max_length: int | None,
                   truncate: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:  # fmt: skip
    """Decoder inputs for ``records`` (texts, or lists of token ids), and which slots are symbols.

    Returns ``({"decoder_input_ids", "decoder_attention_mask"}, keep)``, each
    ``(R, T + 1)``: ``[start] + tokens`` padded right (a decoder's learned positions
    count from its first slot), ``keep`` true at position ``t + 1`` for each
    non-special token ``t`` (every id of a list).
    """
    if records and all(isinstance(r, str) for r in records):
        kw: dict[str, Any] = dict(
            padding=True, return_tensors="pt", return_special_tokens_mask=True,
            padding_side="right",
        )  # fmt: skip
        if max_length is not None and truncate:
            kw.update(truncation=True, max_length=max_length)
        enc = tokenizer(list(records), **kw)
        mask = enc["attention_mask"].bool()
        keep = mask & ~enc["special_tokens_mask"].bool()
    else:
        enc = _pad_ids(records, tokenizer.pad_token_id)
        keep = enc["attention_mask"].bool()
    first = torch.full((len(records), 1), start, dtype=enc["input_ids"].dtype)
    ids = torch.cat([first, enc["input_ids"]], 1)
    dmask = torch.cat([torch.ones_like(first), enc["attention_mask"]], 1)
    keep = torch.cat([torch.zeros_like(first, dtype=torch.bool), keep], 1)
    return {"decoder_input_ids": ids, "decoder_attention_mask": dmask}, keep


def _pad_ids(rows: list[Any], pad: int) -> dict[str, torch.Tensor]:
    """Lists of token ids, padded right: ``{"input_ids", "attention_mask"}``."""
    bad = next((r for r in rows if isinstance(r, str) or not all(
        isinstance(i, int) or (hasattr(i, "__index__") and not isinstance(i, bool)) for i in r
    )), None)  # fmt: skip
    if bad is not None:
        raise DNIError(
            f"decoder_input= returned {bad!r:.60} beside other kinds of value; return the "
            "decoder's text (a string) or its token ids (a list of ints) for every record."
        )
    T = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), T), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor([int(x) for x in r], dtype=torch.long)
        mask[i, : len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def decoder_records(model: Any, given: list[str], records: list[str]) -> list[Any]:
    """What the decoder reads for each record under ``model.decoder_input``.

    ``records`` are the encoder's (a skipped record already replaced by the pad token,
    which the decoder then reads too); a function's result must give one token per
    symbol of its record.
    """
    rule = model.decoder_input
    if not callable(rule):
        return list(records)
    return [r if model.skips(g) else rule(g) for g, r in zip(given, records, strict=True)]


def check_counts(model: Any, given: list[str], keep: torch.Tensor) -> None:
    """Each record's decoder symbols must pair one to one with its symbols."""
    got = keep.sum(1).tolist()
    for i, (record, n) in enumerate(zip(given, got, strict=True)):
        want = model.symbols(record)
        if n != want:
            raise DNIError(
                f"decoder_input={getattr(model.decoder_input, '__name__', 'fn')}(record) gives "
                f"{n} decoder tokens for record {i} of the batch ({record[:40]!r}), which has "
                f"{want} symbols; decoder symbol t is its token t, so return one token per "
                "symbol of the record (or pass decoder_input='same')."
            )


def encoder_inputs(module: nn.Module, batch: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``batch`` the encoder stack's forward pass takes."""
    params = inspect.signature(module.forward).parameters
    return {k: v for k, v in batch.items() if k in params and not k.startswith("decoder_")}
