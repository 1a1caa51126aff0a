"""Token-id records on a Hugging Face model: the ids fed as they are, tokens to hypotheses.

A record may be token ids instead of text: a list or tuple of ints, or a 1-D integer
tensor or array (``data=`` makes such records of a 2-D id tensor or a ``BatchEncoding``:
:mod:`dni_lab.backend.engine.token_ids`). The model tokenizes nothing: the ids are the
batch's ``input_ids``, padded on the tokenizer's padding side, and a record's symbols are
its ids that are not special tokens (the BOS TransformerLens's ``to_tokens`` prepends,
BERT's ``[CLS]`` and ``[SEP]``), as with text, whose special tokens run through the model
but are not symbols either. So a text and its ids (``tokenizer(text).input_ids``) give
the same symbols and the same behaviors.

Symbols are exactly the tokens, so nothing is aligned: a hypothesis gets a
:class:`TokenRecord` (the decoded tokens, one per symbol, and their ids) and returns one
value per token (or, declared ``level="record"``, one per record). A character- or
word-level hypothesis has no characters to read here: a run asks for ``level=`` before
its first block (a ``LevelError``); read outside a run it raises a ``HypothesisError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch

from ..errors import DNIError, TokenIdsError
from .encoding import Layout, record_layout, token_layout


@dataclass(frozen=True)
class TokenRecord(Sequence[str]):
    """A token-id record as a hypothesis receives it: its decoded tokens, with their ids.

    A sequence of strings, one per symbol: ``len(record)`` is the record's symbol count
    and ``record[t]`` (or ``record.tokens[t]``) the text of token ``t``, so
    ``[tok == " from" for tok in record]`` is a token-level hypothesis.

    Attributes
    ----------
    ids : tuple of int
        Each symbol's token id; the record's special tokens (BOS, ``[CLS]``) and, under
        ``truncate=True``, the ids past ``max_length`` are left out.
    tokens : tuple of str
        Each symbol's text, ``tokenizer.decode([id])`` (``" from"`` for GPT-2's
        ``"Ġfrom"``). A byte-level token that holds part of a character decodes to
        ``"\\ufffd"``.
    text : str
        The symbols decoded together, ``tokenizer.decode(ids)``.
    """

    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    text: str

    def __len__(self) -> int:
        return len(self.tokens)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self.tokens[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tokens)

    def __repr__(self) -> str:
        shown = ", ".join(repr(t) for t in self.tokens[:8])
        more = ", ..." if len(self.tokens) > 8 else ""
        return f"TokenRecord([{shown}{more}], ids={list(self.ids[:8])}{more})"


def record_ids(record: Any, model: str) -> tuple[int, ...] | None:
    """The ids of a token-id record; None for a text record.

    Parameters
    ----------
    record : Any
        One record: text (``str``), or token ids (a list or tuple of ints, a 1-D integer
        tensor or array).
    model : str
        The model's name, for the error.

    Raises
    ------
    DNIError
        A record that is neither (a :class:`TokenIdsError` for a float or 2-D tensor).
    """
    if isinstance(record, str):
        return None
    if isinstance(record, (torch.Tensor, np.ndarray)):
        floating = (
            record.dtype.is_floating_point
            if isinstance(record, torch.Tensor)
            else (not np.issubdtype(record.dtype, np.integer))
        )
        if floating or record.ndim != 1:
            kind = str(record.dtype).removeprefix("torch.")
            raise TokenIdsError(
                f"model {model!r} reads text or token ids; got a {record.ndim}-D {kind} "
                f"{type(record).__name__} {tuple(record.shape)} as one record. Token ids are "
                "integers, one 1-D row per record: pass data=ids.long() (a 2-D tensor is read "
                "one record per row), or the texts."
            )
        return tuple(int(i) for i in record.tolist())
    if isinstance(record, (list, tuple)) and all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in record
    ):
        return tuple(int(i) for i in record)
    raise DNIError(
        f"model {model!r} reads text or token ids; got {type(record).__name__} "
        f"({record!r:.40}). Pass strings, or token ids: a 2-D id tensor, a BatchEncoding or a "
        "list of id lists as data=."
    )


def check_vocab(ids: Sequence[int], vocab: int | None, model: str, index: str = "") -> None:
    """Refuse ids outside ``0 .. vocab - 1`` (another tokenizer's), naming the first."""
    if vocab is None or not ids or (min(ids) >= 0 and max(ids) < vocab):
        return
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        shown = list(ids[:8]) + (["..."] if len(ids) > 8 else [])
        raise TokenIdsError(
            f"token id {bad} of record {shown}{index} is outside model {model!r}'s "
            f"vocabulary (ids 0..{vocab - 1}); pass ids of the model's own tokenizer (or "
            "call module.resize_token_embeddings(len(tokenizer)) after adding tokens)."
        )


def symbol_ids(ids: tuple[int, ...], specials: frozenset[int]) -> tuple[int, ...]:
    """The ids that are symbols: every id that is not a special token."""
    return tuple(i for i in ids if i not in specials)


def token_record(tokenizer: Any, ids: tuple[int, ...]) -> TokenRecord:
    """The :class:`TokenRecord` of a record's symbol ids (one Rust call for the tokens)."""
    tokens = tokenizer.batch_decode([[i] for i in ids]) if ids else []
    return TokenRecord(ids, tuple(tokens), tokenizer.decode(list(ids)))


def encode_ids(
    tokenizer: Any, rows: Sequence[Sequence[int]], specials: frozenset[int], pool: str | None
) -> tuple[dict[str, torch.Tensor], Layout]:
    """A batch of id rows, padded on the tokenizer's side, and where its symbols sit.

    Parameters
    ----------
    tokenizer : PreTrainedTokenizerFast
        Gives the pad id and the padding side.
    rows : sequence of sequences of int
        Each record's ids, as fed (specials included, already cut to ``max_length``).
    specials : frozenset of int
        The special tokens' ids: fed, never symbols.
    pool : str or None
        A record-level pool (``"cls"``, ``"last"``, ``"mean"``), or None.

    Returns
    -------
    batch : dict
        ``input_ids`` and ``attention_mask``, ``(R, T)`` int64.
    layout : Layout
        Symbol ``t`` of a record is its ``t``-th non-special id.
    """
    R, T = len(rows), max((len(r) for r in rows), default=0)
    ids = torch.full((R, T), int(tokenizer.pad_token_id), dtype=torch.long)
    mask = torch.zeros((R, T), dtype=torch.long)
    left = tokenizer.padding_side == "left"
    for i, r in enumerate(rows):
        at = slice(T - len(r), T) if left else slice(0, len(r))
        ids[i, at] = torch.as_tensor(list(r), dtype=torch.long)
        mask[i, at] = 1
    special = torch.isin(ids, torch.as_tensor(sorted(specials), dtype=torch.long))
    keep = mask.bool() & ~special
    layout = record_layout(mask.bool(), pool) if pool is not None else token_layout(keep)
    return {"input_ids": ids, "attention_mask": mask}, layout
