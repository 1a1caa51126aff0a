"""TransformerLens's attention patterns on Hugging Face models, read as tensors.

``blocks.N.attn.hook_pattern`` (the attention weights, after the softmax) and
``blocks.N.attn.hook_attn_scores`` (the scaled scores before it, ``-inf`` where the mask
forbids a key) hold one value per (head, query, key): no units to score, but what a
cache (``dl.activations``) must hold, in TransformerLens's shape
``(records, heads, query_pos, key_pos)``.

Positions are the record's tokens as the model ran them, special tokens included (a BOS
from TransformerLens's ``to_tokens``), padding left out: record ``r``'s pattern is the
one it has run alone, whatever the batch and its padding side. Slots past a record's
token count are 0.

The weights are the attention module's second output under eager attention (the only
kind that returns them; :func:`.attention.eager` switches to it and back). The scores
are the input of the softmax that module calls, caught with a
:class:`torch.overrides.TorchFunctionMode` held only while the module runs: the exact
values the model computed, with the model's own scaling, soft-capping and rotation, on
every architecture whose eager attention calls one softmax.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import LayerError
from .attention import eager
from .hooks import role

#: TransformerLens hook → what it reads
KINDS = {"hook_pattern": "pattern", "hook_attn_scores": "scores"}
_TL = re.compile(r"^blocks\.(?P<i>\d+)\.attn\.(?P<hook>hook_pattern|hook_attn_scores)$")
_SOFTMAX = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax,
            torch.special.softmax)  # fmt: skip


@dataclass(frozen=True)
class PatternTap:
    """One attention pattern name, resolved.

    Attributes
    ----------
    address : str
        Its address: ``{block}.attn.hook_pattern`` / ``hook_attn_scores``.
    module : str
        The attention module whose weights (or softmax input) it reads.
    block : int
        The block's position.
    kind : {"pattern", "scores"}
        After the softmax, or the scores before it.
    """

    address: str
    module: str
    block: int
    kind: str


class Patterns:
    """The attention patterns of one :class:`~dni_lab.backend.hf.HFModel`.

    Parameters
    ----------
    model : HFModel
        The model (its blocks, its module, the layout of the batch last run).
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def names(self) -> list[str]:
        """Every pattern name of the model, TransformerLens's order within a block."""
        n = 0 if self.model._decoder is not None else self.model._n_blocks
        hooks = ("hook_attn_scores", "hook_pattern")
        return [f"blocks.{i}.attn.{h}" for i in range(n) for h in hooks]

    @property
    def heads(self) -> int:
        """Query heads: the pattern's second axis."""
        config = getattr(self.model.module, "config", None)
        return int(getattr(config, "num_attention_heads", 0) or 0)

    def resolve(self, name: Any) -> PatternTap | None:
        """The pattern ``name`` reads, or None when it names no pattern.

        Takes the TransformerLens name (``blocks.0.attn.hook_pattern``, also the
        TransformerLens 4 bridge's) and the address (``transformer.h.0.attn.hook_pattern``).

        Raises
        ------
        LayerError
            A block the model does not have, or an encoder–decoder model.
        """
        if not isinstance(name, str):
            return None
        m = _TL.match(name)
        blocks = self.model._blocks
        if m is None:
            prefix = f"{blocks}."
            rest = name[len(prefix) :] if name.startswith(prefix) else ""
            m = _TL.match(f"blocks.{rest}") if rest else None
        if m is None:
            return None
        i, hook = int(m.group("i")), m.group("hook")
        if self.model._decoder is not None:
            raise LayerError(
                f"{name!r}: model {self.model.name!r} is an encoder-decoder model; attention "
                "patterns are read on decoder-only and encoder-only models."
            )
        n = self.model._n_blocks
        if i >= n:
            raise LayerError(f"{name!r}: model {self.model.name!r} has {n} blocks (0..{n - 1}).")
        block = f"{blocks}.{i}"
        module = role(self.model.module, block, "attn_weights")
        return PatternTap(f"{block}.attn.{hook}", module, i, KINDS[hook])

    @contextlib.contextmanager
    def reading(self, taps: Sequence[PatternTap]) -> Iterator[list[dict[str, Any]]]:
        """Hooks that read ``taps`` during the forward passes run inside the context.

        Yields a list that gets one dict per forward pass, ``{address: (values, tokens)}``:
        ``(R, heads, T, T)`` in the model's dtype on the CPU, ``T`` the pass's longest record
        in tokens, and each record's token count (:func:`per_record`). The model runs
        eager attention inside the context; every hook, mode and the attention
        implementation are put back on exit, also after an error or a stopped pass.
        """
        module = self.model.module
        passes: list[dict[str, Any]] = []
        seen: dict[str, Any] = {}
        by_module: dict[str, list[PatternTap]] = {}
        for t in taps:
            by_module.setdefault(t.module, []).append(t)
        with contextlib.ExitStack() as stack:
            stack.enter_context(eager(module))

            def start(_mod: nn.Module, args: tuple, kwargs: dict) -> None:
                ids = kwargs.get("input_ids", args[0] if args else None)
                seen["mask"] = kwargs.get("attention_mask")
                seen["shape"] = None if ids is None else tuple(ids.shape[:2])
                passes.append({})

            stack.callback(module.register_forward_pre_hook(start, with_kwargs=True).remove)
            modes: list[_SoftmaxInput] = []
            stack.callback(_close, modes)  # a pass stopped inside attention leaves one open
            for path, group in by_module.items():
                attn = module.get_submodule(path)
                if any(t.kind == "scores" for t in group):  # the softmax's input
                    stack.callback(attn.register_forward_pre_hook(_opener(modes)).remove)
                hook = attn.register_forward_hook(self._keeper(group, modes, seen, passes))
                stack.callback(hook.remove)
            yield passes

    def _keeper(self, group: list[PatternTap], modes: list, seen: dict, passes: list):
        want_scores = any(t.kind == "scores" for t in group)

        def hook(_mod: nn.Module, _args: tuple, out: Any) -> None:
            raw = None
            if want_scores and modes:
                mode = modes.pop()
                mode.__exit__(None, None, None)
                raw = mode.last
            weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            layout = self.model._layout
            if layout is not None and layout.windowed:
                raise LayerError(
                    f"{group[0].address!r}: the batch holds windows of long records "
                    "(stride=); attention patterns are read per record: use truncate=True."
                )
            for t in group:
                value = raw if t.kind == "scores" else weights
                if not isinstance(value, torch.Tensor) or value.dim() != 4:
                    what = "called no softmax" if t.kind == "scores" else "returned no weights"
                    raise LayerError(
                        f"{t.address!r}: the attention module {t.module!r} {what} under eager "
                        "attention, so its pattern cannot be read on this architecture."
                    )
                if t.kind == "scores":  # masked keys: -inf, as TransformerLens gives them
                    floor = torch.finfo(value.dtype).min / 2
                    # in place: the softmax that read it has run, nothing reads it again
                    value = value.masked_fill_(value <= floor, float("-inf"))
                passes[-1][t.address] = per_record(value, seen.get("mask"))

        return hook


def per_record(t: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, H, T, T)`` → ``(rows, H, n, n)`` over each row's real tokens, on the CPU.

    ``mask`` is the batch's ``(rows, T)`` attention mask (None: every token is real).
    Tokens keep their order, padding on either side is dropped, and slots past a row's
    token count are 0. Returns the values and each row's token count (``(rows,)`` int64).
    """
    R, H, T, _ = t.shape
    if mask is None:
        return t.detach().cpu(), torch.full((R,), T, dtype=torch.int64)
    real = mask.to(t.device).bool()[:, -T:]
    n = real.sum(1)
    Tm = int(n.max()) if R else 0
    inside = torch.arange(T, device=t.device)[None, :] < n[:, None]
    if Tm == T and torch.equal(real, inside):  # right padding: the pass's own tensor, no copy
        keep = inside[:, None, :, None] & inside[:, None, None, :]
        # in place: the module has returned, and its weights are read by nothing after it
        return t.detach().masked_fill_(~keep, 0.0).cpu(), n.cpu().to(torch.int64)
    # a stable sort puts each row's real tokens first, in their order
    idx = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices[:, :Tm]
    rows = t.gather(2, idx[:, None, :, None].expand(R, H, Tm, T))
    out = rows.gather(3, idx[:, None, None, :].expand(R, H, Tm, Tm))
    valid = torch.arange(Tm, device=t.device)[None, :] < n[:, None]
    keep = valid[:, None, :, None] & valid[:, None, None, :]
    return out.masked_fill(~keep, 0.0).detach().cpu(), n.cpu().to(torch.int64)


class _SoftmaxInput(TorchFunctionMode):
    """Keeps the input of the last softmax over a 4-D tensor called while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.last: torch.Tensor | None = None

    def __torch_function__(
        self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in _SOFTMAX and args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
            self.last = args[0]
        return func(*args, **kwargs)


def _opener(modes: list[_SoftmaxInput]):
    def pre(_mod: nn.Module, _args: tuple) -> None:
        mode = _SoftmaxInput()
        mode.__enter__()
        modes.append(mode)

    return pre


def _close(modes: list[_SoftmaxInput]) -> None:
    """Leave the modes a pass stopped inside attention left open, innermost first."""
    while modes:
        modes.pop().__exit__(None, None, None)
