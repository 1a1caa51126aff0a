"""Patched passes that start where the patch is: the blocks before it replayed, not run.

Every copy in a patched batch is the target run until the patched site, so the blocks
before it compute what the target run already did. While a patched pass runs, each of
those blocks is swapped for a :class:`Replay` that returns the target run's output of the
last of them (repeated once per copy), and the original blocks are put back on exit, also
on error or a Stop. A site that *is* a block's output (``resid_post``, ``resid_pre`` of a
later block) is written into the replayed value itself, so that block is skipped too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..extraction.models import Model


class Replay(nn.Module):
    """A block that returns a value it was given, whatever it is called with."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def forward(self, *_args: Any, **_kwargs: Any) -> Any:
        return self.value


def blocks(model: Model) -> nn.ModuleList | None:
    """The model's block list (``transformer.h``), or None where it has none."""
    path = getattr(model, "_blocks", None)
    if not path:
        return None
    mods = model.module.get_submodule(path)
    return mods if isinstance(mods, nn.ModuleList) else None


def block_of(model: Model, module: nn.Module) -> tuple[int, bool]:
    """``(index, is_the_block)`` of the block holding ``module``; ``(-1, False)`` outside."""
    for i, b in enumerate(blocks(model) or ()):
        if module is b:
            return i, True
        if any(module is m for m in b.modules()):
            return i, False
    return -1, False


@contextlib.contextmanager
def block_outputs(model: Model, keep: dict[int, Any]) -> Iterator[None]:
    """Within the block, every block's output of the passes run is kept in ``keep``."""
    handles = [
        b.register_forward_hook(lambda _m, _a, out, i=i: keep.__setitem__(i, out))
        for i, b in enumerate(blocks(model) or ())
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _repeat(out: Any, copies: int, rows: int) -> tuple[Any, torch.Tensor]:
    """``out`` with its per-record tensors repeated ``copies`` times; its first tensor."""

    def rep(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == rows:
            return t.repeat(copies, *([1] * (t.dim() - 1)))
        return t

    if isinstance(out, (tuple, list)):
        items = [rep(t) for t in out]
        return type(out)(items), items[0]
    first = rep(out)
    return first, first


def _with_first(out: Any, first: torch.Tensor) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)([first, *out[1:]])
    return first


@contextlib.contextmanager
def replayed(
    model: Model,
    last: int,
    output: Any,
    copies: int,
    rows: int,
    edit: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Iterator[None]:
    """Blocks ``0..last`` replay ``output`` (block ``last``'s target output), ``edit``-ed.

    Nothing is replayed when ``last`` is negative.
    """
    mods = blocks(model)
    if mods is None or last < 0:
        yield
        return
    value, first = _repeat(output, copies, rows)
    if edit is not None:
        value = _with_first(value, edit(first))
    saved = [mods[i] for i in range(last + 1)]
    try:
        for i in range(last + 1):
            mods[i] = Replay(value)
        yield
    finally:
        for i, b in enumerate(saved):
            mods[i] = b
