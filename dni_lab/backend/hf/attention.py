"""Attention as behavior: how much each head attends to the token a pair hypothesis names.

An attention pattern is one value per (head, query, key), not one per symbol. A *pair
hypothesis* ``pair(record) -> [target of token 0, target of token 1, ...]`` names, for
each symbol, the symbol it should attend to (the matching bracket, the previous
occurrence) or None. :meth:`HFModel.attention_to` turns one into units: a virtual
address ``{block}.attn.to_{name}`` with one unit per head, whose behavior at symbol ``t``
is the head's attention weight from ``t`` to ``pair(record)[t]`` (0 where it names none).
Scored with ``diffmeans`` against :func:`has_target` (1 where the pair names a target),
a unit's score is the head's mean attention to the named token, minus 0; with the same
early stopping, errors and live table as any unit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import DNIError
from .hooks import role

PREFIX = "attn.to_"

Pair = Callable[[str], Sequence[int | None]]


def targets(pair: Pair, record: str, n: int, name: str) -> torch.Tensor:
    """``(n,)`` long: the target symbol of each of ``record``'s ``n`` symbols, -1 for none."""
    out = list(pair(record))
    if len(out) != n:
        raise ValueError(
            f"pair hypothesis {name!r} returned {len(out)} targets for a record of {n} "
            f"tokens: {record[:40]!r}; return one target (a token index or None) per token."
        )
    bad = [j for j in out if j is not None and not 0 <= int(j) < n]
    if bad:
        raise ValueError(
            f"pair hypothesis {name!r} names token {bad[0]} in a record of {n} tokens: "
            f"{record[:40]!r}; targets are token indices 0..{n - 1} or None."
        )
    return torch.as_tensor([-1 if j is None else int(j) for j in out], dtype=torch.long)


def has_target(pair: Pair, name: str | None = None) -> Any:
    """The binary hypothesis "this token has a target" for ``pair``, one value per token."""
    from ..hypothesis.hypotheses import hypothesis

    def fn(record: str) -> list[float]:
        return [0.0 if j is None else 1.0 for j in pair(record)]

    fn.__name__ = name or f"has_{getattr(pair, '__name__', 'target')}"
    return hypothesis(kind="binary", level="token")(fn)


def read(weights: torch.Tensor, index: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per symbol and head, the weight on the target: ``(R, T_symbols, heads)``.

    ``weights`` is ``(R, heads, T_tokens, T_tokens)``; ``index`` ``(R, T_symbols)`` the
    token of each symbol; ``target`` ``(R, T_symbols)`` the target symbol or -1.
    """
    R = weights.shape[0]
    key = index.gather(1, target.clamp(min=0))  # the target's token position
    rows = torch.arange(R, device=weights.device)[:, None].expand_as(index)
    w = weights[rows, :, index, key]  # (R, T_symbols, heads)
    return w.masked_fill((target < 0)[..., None], 0.0)


@contextlib.contextmanager
def eager(module: nn.Module) -> Iterator[None]:
    """Run ``module`` with eager attention (the only kind that returns its weights)."""
    config = getattr(module, "config", None)
    before = getattr(config, "_attn_implementation", None)
    switch = before not in (None, "eager") and hasattr(module, "set_attn_implementation")
    if switch:
        module.set_attn_implementation("eager")
    try:
        yield
    finally:
        if switch:
            module.set_attn_implementation(before)


def register(model: Any, pair: Pair, name: str | None, blocks: Sequence[int] | None) -> list[str]:
    """:meth:`HFModel.attention_to`'s work: one address per block, one unit per head."""
    name = name or getattr(pair, "__name__", "pair")
    if not name.isidentifier():
        raise DNIError(f"attention_to: name {name!r} must be an identifier; pass name='...'.")
    model._pairs[name] = pair
    picked = range(model._n_blocks) if blocks is None else blocks
    out = []
    for i in picked:
        block = model.resolve_layer(int(i))
        addr = f"{block}.{PREFIX}{name}"
        model._attn[addr] = (role(model.module, block, "attn_weights"), name)
        out.append(addr)
    heads = getattr(getattr(model.module, "config", None), "num_attention_heads", None)
    if model._widths and isinstance(heads, int):
        model._widths.update({a: heads for a in out})
    model.behavior_memo.clear()  # a pair under a reused name reads other targets
    return out


def target_grid(model: Any, pair: Pair, name: str, records: list[str], T: int) -> torch.Tensor:
    """``(R, T)`` target symbol of each symbol (-1: none, and skipped records)."""
    full = torch.full((len(records), T), -1, dtype=torch.long)
    for i, r in enumerate(records):
        if not model.skips(r):
            t = targets(pair, r, model.symbols(r), name)
            full[i, : len(t)] = t
    return full
