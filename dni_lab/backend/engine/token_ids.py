"""Token ids as ``data=``: a 2-D integer tensor, a list of id lists, a ``BatchEncoding``.

What a transformer user holds after ``tokenizer(texts, return_tensors="pt")`` or
TransformerLens's ``model.to_tokens(texts)`` is token ids, one row per record. Each row
becomes one *token-id record*, a plain ``list`` of ``int``:

* a 2-D ``torch.int64`` / ``torch.int32`` tensor: each row as it is (padding included:
  pass the ``BatchEncoding``, or its ``attention_mask``, to leave padding out);
* a ``BatchEncoding``, or any mapping holding ``input_ids`` (and ``attention_mask``):
  each row of ``input_ids`` without the positions its ``attention_mask`` masks, whatever
  the padding side; its other keys (``token_type_ids``, ...) are not read. Unbatched
  (``tokenizer(text)``: one flat list of ids) it is one record;
* a list of id lists already is such records (nothing to convert).

How a model reads them is its own: a ``dl.Model``'s ``encode`` receives the lists; a
Hugging Face model (``dl.Model.from_hf``) feeds the ids as they are and hands its
hypotheses a :class:`~dni_lab.backend.hf.token_records.TokenRecord`.

Only 32- and 64-bit integer tensors are token ids: a ``uint8`` tensor (images) or a float
tensor is read row by row as before. What cannot be records raises
:class:`~dni_lab.backend.errors.TokenIdsError` here, before any record is read: a 1-D or
3-D id tensor, float ``input_ids``, a mask of another shape than the ids or with values
other than 0 and 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..errors import TokenIdsError

#: tensor dtypes read as token ids (uint8 and bool stay images and masks)
ID_DTYPES = (torch.int64, torch.int32)


def token_id_records(data: Any) -> list[list[int]] | None:
    """The token-id records ``data`` holds, or None when it holds no token ids.

    Parameters
    ----------
    data : Any
        What ``data=`` names.

    Returns
    -------
    list of list of int, or None
        One id list per record (see the module docstring); None for any other data.

    Raises
    ------
    TokenIdsError
        For token ids that cannot be records (see the module docstring).
    """
    if isinstance(data, torch.Tensor) and data.dtype in ID_DTYPES:
        if data.ndim != 2:
            raise _not_2d(data, "data")
        return data.tolist()
    if isinstance(data, Mapping) and "input_ids" in data:
        return _encoding_records(data)
    return None


def check_records(models: Sequence[Any], records: Sequence[Any] | None) -> None:
    """Let each model that can (``model.check_records``) check records held in memory,
    so token ids it cannot read fail before any block is read; a stream is checked as
    its blocks arrive."""
    if records is None:
        return
    for m in models:
        check = getattr(m, "check_records", None)
        if check is not None:
            check(records)


def _encoding_records(enc: Mapping[str, Any]) -> list[list[int]]:
    """A ``BatchEncoding``'s records: each row of ``input_ids`` where its mask is 1."""
    what = type(enc).__name__
    ids = _rows(enc["input_ids"], f"{what}['input_ids']")
    mask = enc.get("attention_mask")
    if mask is None:
        return [r.tolist() for r in ids]
    mask = _rows(mask, f"{what}['attention_mask']")
    shapes = [(len(i), len(m)) for i, m in zip(ids, mask, strict=False)]
    if len(mask) != len(ids) or any(a != b for a, b in shapes):
        i = next((k for k, (a, b) in enumerate(shapes) if a != b), min(len(ids), len(mask)))
        said = (
            f"{len(mask)} rows but its input_ids {len(ids)}"
            if len(mask) != len(ids)
            else f"{shapes[i][1]} positions in row {i} but its input_ids {shapes[i][0]}"
        )
        raise TokenIdsError(
            f"{what}['attention_mask'] has {said}: the mask must mark each id. Pass the "
            "tokenizer's output as it came, or a mask built for these ids (ids != pad_token_id)."
        )
    out = []
    for row, m in zip(ids, mask, strict=True):
        if m.dtype.is_floating_point or not bool(((m == 0) | (m == 1)).all()):
            raise TokenIdsError(
                f"{what}['attention_mask'] holds values other than 0 and 1; a record is the "
                "ids its mask marks with 1: pass the tokenizer's attention_mask (or mask.long())."
            )
        out.append(row[m.bool()].tolist())
    return out


def _rows(value: Any, what: str) -> list[torch.Tensor]:
    """The rows of ``input_ids`` or ``attention_mask``: one 1-D integer tensor per record.

    A tensor or array must be 2-D (1-D: ``tokenizer(text)``, one record); a list may be a
    list of rows of different lengths (tokenized without padding) or one flat row.
    """
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        rows = [_as_tensor(r, what) for r in value]
    else:
        t = _as_tensor(value, what)
        if t.ndim == 1:  # tokenizer(text), not tokenizer([text]): one record
            t = t[None]
        if t.ndim != 2:
            raise _not_2d(t, what)
        rows = list(t)
    for r in rows:
        if r.ndim != 1 or not (r.dtype in ID_DTYPES or r.dtype == torch.bool or r.numel() == 0):
            kind = str(r.dtype).removeprefix("torch.")
            raise TokenIdsError(
                f"{what} holds {kind} values; token ids and masks are integers: pass the "
                "tokenizer's output as it came (or .long())."
            )
    return rows


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    """``value`` (a tensor, an array, a list) as a tensor, or a TokenIdsError."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        t = torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError) as exc:
        raise TokenIdsError(
            f"{what} is not a table of token ids ({type(value).__name__}: {exc}); pass the "
            "tokenizer's output as it came."
        ) from None
    return t.long() if t.numel() == 0 else t


def _not_2d(t: torch.Tensor, what: str) -> TokenIdsError:
    shape = tuple(t.shape)
    if t.ndim == 1:
        fix = (
            "a 1-D tensor is one record: pass ids[None] (one row), or a list of id lists "
            "for several"
        )
    else:
        fix = (
            "token ids as data are (records, tokens): one row per record; reshape it, or "
            "pass list(tensor) if each slice is one record of another kind"
        )
    return TokenIdsError(
        f"{what} is a {t.ndim}-D tensor of integers {shape}, read as token ids; {fix}."
    )
