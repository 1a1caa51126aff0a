"""Patched passes that start where the patch is: the blocks before it replayed, not run.

Every copy in a patched batch is the target run until the patched site, so the blocks
before it compute what the target run already did. While a patched pass runs, each of
those blocks is swapped for a :class:`Replay` that returns the target run's output of the
last of them (repeated once per copy), and the original blocks are put back on exit, also
on error or a Stop. A site that *is* a block's output (``resid_post``, ``resid_pre`` of a
later block) is written into the replayed value itself, so that block is skipped too. A
site inside a block replays the block's part before it (:class:`Inner`: the attention
under ``z``, ``attn_out`` and ``resid_mid``, the MLP under ``mlp_out``).
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


def _repeat(out: Any, copies: int, rows: int, start: int = 0) -> tuple[Any, torch.Tensor]:
    """``out`` with its per-record tensors repeated ``copies`` times; its first tensor (the
    hidden states) from token ``start`` on."""

    def rep(t: Any, cut: bool = False) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == rows:
            t = t[:, start:] if cut and start else t
            return t.repeat(copies, *([1] * (t.dim() - 1)))
        return t

    if isinstance(out, (tuple, list)):
        items = [rep(t, i == 0) for i, t in enumerate(out)]
        return type(out)(items), items[0]
    first = rep(out, True)
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
    start: int = 0,
) -> Iterator[None]:
    """Blocks ``0..last`` replay ``output`` (block ``last``'s target output), ``edit``-ed,
    from token ``start`` on (a pass that starts there: :mod:`.grid_prefix`).

    Nothing is replayed when ``last`` is negative.
    """
    mods = blocks(model)
    if mods is None or last < 0:
        yield
        return
    value, first = _repeat(output, copies, rows, start)
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


class Inner:
    """Where a site inside a block sits: the block's child that holds it (its *part*: the
    attention, the MLP). Within a patched pass the part is replayed too: its target
    output with the site written (the site *is* its output), or the site's module run on
    the written site (the site is that module's input and the module's output is the
    part's, as an attention's output projection). What comes before the site in the part
    (the attention itself, under a head's output) is then not computed."""

    def __init__(self, block: nn.Module, name: str, part: nn.Module, site: nn.Module) -> None:
        self.block, self.name, self.part, self.site = block, name, part, site

    @classmethod
    def of(cls, model: Model, b: int, site: nn.Module, side: str) -> Inner | None:
        """The part of block ``b`` holding ``site``, where it can be replayed."""
        mods = blocks(model)
        if mods is None or not 0 <= b < len(mods):
            return None
        for name, part in mods[b].named_children():
            if part is site:
                return cls(mods[b], name, part, site) if side == "output" else None
            if side == "input" and any(site is m for m in part.modules()):
                return cls(mods[b], name, part, site)
        return None

    @contextlib.contextmanager
    def kept(self, keep: dict) -> Iterator[None]:
        """Within the block, the target run's part output (and the site module's input
        and output) are kept in ``keep``."""
        hs = [self.part.register_forward_hook(lambda _m, _a, o: keep.__setitem__("part", o))]
        if self.site is not self.part:
            hs.append(self.site.register_forward_pre_hook(
                lambda _m, a: keep.__setitem__("input", a[0])))  # fmt: skip
            hs.append(self.site.register_forward_hook(
                lambda _m, _a, o: keep.__setitem__("output", o)))  # fmt: skip
        try:
            yield
        finally:
            for h in hs:
                h.remove()

    def holds(self, keep: dict) -> bool:
        """Whether the part's output is the site module's, exactly (checked per batch)."""
        if "part" not in keep:
            return False
        if self.site is self.part:
            return True
        out = keep.get("output")
        first = keep["part"][0] if isinstance(keep["part"], (tuple, list)) else keep["part"]
        same = isinstance(out, torch.Tensor) and out.shape == first.shape
        return same and torch.equal(out, first)

    @contextlib.contextmanager
    def replayed(self, keep: dict, copies: int, rows: int, start: int,
                 edit: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:  # fmt: skip
        """Within the block, the part returns its target output with the site ``edit``-ed."""
        value, first = _repeat(keep["part"], copies, rows, start)
        if self.site is self.part:
            value = _with_first(value, edit(first))
        else:
            x = keep["input"][:, start:]
            x = x.repeat(copies, *([1] * (x.dim() - 1)))
            value = _with_first(value, self.site(edit(x)))
        setattr(self.block, self.name, Replay(value))
        try:
            yield
        finally:
            setattr(self.block, self.name, self.part)
