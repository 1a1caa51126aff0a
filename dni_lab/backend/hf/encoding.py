"""Records → a transformer's batch, and where each symbol of the batch sits.

A :class:`Layout` says, for symbol ``t`` of record ``r``, which batch row and which
token position hold it. Usually row ``r`` and the ``t``-th non-special,
non-padding token. Two cases change that:

* **long documents**: with ``stride=s`` a record longer than the model's positions
  runs as several windows (rows) of ``max_length`` tokens, consecutive windows
  sharing ``s`` tokens. Each token is read once, from the first window in which it
  has at least ``s`` tokens of left context (the first window for the record's
  opening tokens), so overlaps are scored once. ``truncate=True`` keeps the
  tokens that fit instead.
* **record-level units** (``pool="cls"|"last"|"mean"``): one symbol per record, the
  first attended token (``[CLS]`` on BERT), the last attended token, or the mean
  over attended tokens (special tokens included, as sentence encoders pool).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import names

RECORD_POOLS = ("cls", "last", "mean")


@dataclass
class Layout:
    """Where the symbols of one batch sit in its ``(rows, tokens)`` grid.

    Attributes
    ----------
    rows, index : torch.Tensor
        ``(R, T_symbols)``: the batch row and the token position of each symbol slot
        (a shorter record's tail slots point at some token of its own; ``count`` hides them).
    count : torch.Tensor
        ``(R,)`` symbols per record.
    weights : torch.Tensor or None
        ``(R, T_tokens)`` mean-pooling weights (``pool="mean"``), else None.
    windowed : bool
        Whether some record runs as several rows.
    targets : dict or None
        ``{pair name: (R, T_symbols)}`` target symbol per symbol, -1 for none.
    """

    rows: torch.Tensor
    index: torch.Tensor
    count: torch.Tensor
    weights: torch.Tensor | None = None
    windowed: bool = False
    targets: dict[str, torch.Tensor] | None = None  # pair hypotheses' targets (attention.py)
    # (n_tokens, device) -> flat_slots' answer: every layer of a batch reads the same slots
    _slots: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def to(self, device: torch.device) -> Layout:
        w = None if self.weights is None else self.weights.to(device)
        t = None if self.targets is None else {k: v.to(device) for k, v in self.targets.items()}
        return Layout(
            self.rows.to(device), self.index.to(device), self.count.to(device), w, self.windowed,
            t,
        )

    def flat_slots(self, n_tokens: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each symbol slot sits in a ``(rows * n_tokens, D)`` view, and the tail slots.

        Returns ``(flat, tail)`` on ``device``: ``flat`` ``(R * T_symbols,)`` the row of the
        view each slot reads, ``tail`` the slots past their record's ``count``. Computed once
        per layout and token count: a block's layers all read the same slots, and each
        small index operation costs more than the copy it feeds when jobs share the CPU.
        """
        key = (n_tokens, str(device))
        got = self._slots.get(key)
        if got is None:
            rows, index = torch.broadcast_tensors(self.rows, self.index)
            flat = (rows * n_tokens + index).reshape(-1).to(device)
            slots = torch.arange(rows.shape[1], device=self.count.device)
            tail = (slots[None, :] >= self.count[:, None]).reshape(-1).nonzero().flatten()
            got = self._slots[key] = (flat, tail.to(device))
        return got

    @property
    def per_token(self) -> bool:
        """One row per record and one token per symbol: forcing can write symbols back."""
        return not self.windowed and self.weights is None


def encode(
    tokenizer: Any,
    records: list[str],
    max_length: int | None,
    truncate: bool,
    stride: int | None,
    record_pool: str | None,
) -> tuple[dict[str, torch.Tensor], Layout]:
    """The tokenizer's batch for ``records`` (padded) and its :class:`Layout`."""
    kw: dict[str, Any] = dict(padding=True, return_tensors="pt", return_special_tokens_mask=True)
    if max_length is not None and (truncate or stride is not None):
        kw.update(truncation=True, max_length=max_length)
        if stride is not None:
            kw.update(stride=stride, return_overflowing_tokens=True)
    enc = tokenizer(list(records), **kw)
    sample = enc.pop("overflow_to_sample_mapping", None)
    enc.pop("num_truncated_tokens", None)
    mask = enc["attention_mask"].bool()
    keep = mask & ~enc.pop("special_tokens_mask").bool()
    R = len(records)
    if record_pool is not None:
        layout = record_layout(mask, record_pool)
    elif sample is None or len(sample) == R:
        layout = token_layout(keep)
    else:
        window = max_length - tokenizer.num_special_tokens_to_add()
        layout = _window_layout(keep, torch.as_tensor(sample), R, window - stride, stride)
    return dict(enc), layout


def token_layout(keep: torch.Tensor) -> Layout:
    """One row per record; ``keep`` ``(R, T_tokens)`` marks the tokens that are symbols."""
    n = keep.sum(1)
    T = int(n.max()) if len(n) else 0
    # positions of the real tokens, in order; a shorter record's tail slots point at
    # its padding or special tokens, which the symbol mask hides
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :T]
    rows = torch.arange(len(keep))[:, None].expand_as(order)
    return Layout(rows, order, n)


def record_layout(mask: torch.Tensor, how: str) -> Layout:
    """One symbol per record (``pool=how``) of a batch whose ``mask`` marks its tokens."""
    R, T = mask.shape
    pos = torch.arange(T)[None, :].expand(R, -1)
    if how == "cls":
        index = torch.where(mask, pos, T).min(1).values
    else:
        index = torch.where(mask, pos, -1).max(1).values
    weights = None
    if how == "mean":
        m = mask.float()
        weights = m / m.sum(1, keepdim=True).clamp(min=1)
    rows = torch.arange(R)[:, None]
    return Layout(rows, index[:, None], torch.ones(R, dtype=torch.long), weights)


def _window_layout(keep: torch.Tensor, sample: torch.Tensor, R: int, step: int, s: int) -> Layout:
    """Each symbol from the first window that gives it ``s`` tokens of left context."""
    per_row = keep.sum(1)
    n = torch.zeros(R, dtype=torch.long).index_add_(0, sample, per_row)
    T = int(n.max())
    rows = torch.zeros(R, T, dtype=torch.long)
    index = torch.zeros(R, T, dtype=torch.long)
    k_of = torch.zeros(len(sample), dtype=torch.long)  # window number within its record
    for w in range(1, len(sample)):
        k_of[w] = k_of[w - 1] + 1 if sample[w] == sample[w - 1] else 0
    for w in range(len(sample)):
        r, k = int(sample[w]), int(k_of[w])
        pos = torch.nonzero(keep[w]).flatten()
        g = k * step + torch.arange(len(pos))  # the symbols this window holds
        # a later window's first s tokens are the previous window's tail: read there
        own = slice(s if k else 0, None)
        rows[r, g[own]] = w
        index[r, g[own]] = pos[own]
    return Layout(rows, index, n, windowed=True)


def gather(t: torch.Tensor, layout: Layout, n_tokens: int | None, heads: tuple) -> torch.Tensor:
    """``(rows, T_tokens, D)`` → ``(R, T_symbols, D)``, on the layout's device.

    A new tensor; a shorter record's tail slots (past its ``count``) hold zeros.

    A per-token, per-head map (``(rows, T, H, D)`` or ``(rows, H, T, D)``) is read
    head-major first (:func:`.names.token_major`), a ``(rows * T, D)`` one (OPT
    flattens its MLP's input) unflattened; a map that is not one row per token
    (attention weights, a pooled output) is returned as it is.
    """
    if t.dim() == 4:
        t = names.token_major(t, n_tokens, *heads)
    n_rows = layout.weights.shape[0] if layout.weights is not None else int(layout.rows.max()) + 1
    if t.dim() == 2 and n_tokens and t.shape[0] == n_rows * n_tokens:
        t = t.unflatten(0, (n_rows, n_tokens))  # rows and tokens flattened (OPT's MLP)
    if t.dim() != 3 or t.shape[1] != n_tokens:
        return t
    if t.shape[0] == 1 and n_rows != 1:  # a broadcast output (position embeddings)
        t = t.expand(n_rows, -1, -1)
    if layout.weights is not None:
        out = (t * layout.weights.to(t.device, t.dtype)[..., None]).sum(1, keepdim=True)
        return out.to(layout.rows.device)
    # one index_select over (rows * tokens) rows: a third of advanced indexing's time
    flat, tail = layout.flat_slots(t.shape[1], t.device)
    out = t.reshape(-1, t.shape[-1]).index_select(0, flat)
    # a shorter record's tail slots read zeros, so the extractor need not mask a copy
    if len(tail):
        out.index_fill_(0, tail, 0)
    shape = torch.broadcast_shapes(layout.rows.shape, layout.index.shape)
    return out.view(*shape, t.shape[-1]).to(layout.rows.device)


def positions_from_arange(module: nn.Module) -> bool:
    """Whether the model numbers positions 0..T-1 whatever the mask (GPT-2, BERT, ...).

    Those need ``position_ids`` under left padding. RoBERTa-style embeddings (a
    position table with a ``padding_idx``) derive positions from the padding
    themselves, offset by it; passing ours would shift them.
    """
    if "position_ids" not in inspect.signature(module.forward).parameters:
        return False
    return not any(
        isinstance(m, nn.Embedding) and m.padding_idx is not None and "position" in name
        for name, m in module.named_modules()
    )
