"""The ``pattern`` site of a patching grid: one head's attention weights, after the softmax.

TransformerLens' ``get_act_patch_attn_head_pattern_all_pos`` writes the source run's
``hook_pattern`` of one head (every (query, key) weight) into the target run, and the
head's output is then that pattern times the target run's values; everything else is
the target run's. A Hugging Face attention computes its weights inside one function
(GPT-2's ``eager_attention_forward``: scores, mask, softmax, ``weights @ V``), so there
is no module whose output is the pattern. :class:`PatternHook` therefore catches the
one softmax the attention module calls while it runs (a
:class:`torch.overrides.TorchFunctionMode` held only during that module's forward, under
eager attention) and puts the written pattern in its place: the module's own code then
computes ``pattern @ V``, merges the heads and projects, exactly as it would have.

Every hook and mode is put back on exit, also after an error or a Stop. An attention
module that calls no softmax, or more than one, or one whose output is not
``(rows, heads, query, key)``, cannot be patched this way: a :class:`LayerError` names
the layer and what is supported.

A pattern is patched over all positions only (TransformerLens'
``get_act_patch_attn_head_pattern_dest_src_pos``, one (query, key) cell at a time, is not
offered). Query rows of every token are written, padding included: with the source's and
the target's token layouts equal (checked per batch, :func:`check_layouts`), a padded
row is read by no real token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import DNIError, LayerError
from ..extraction.models import Model
from ..hf.roles import role

_SOFTMAX = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax,
            torch.special.softmax)  # fmt: skip
#: what a pattern grid can patch, for the errors
SUPPORTED = (
    "attention modules whose eager forward computes their weights with one softmax of "
    "shape (rows, heads, query, key) and multiplies them with the values (GPT-2, LLaMA-style)"
)


class _Softmax(TorchFunctionMode):
    """While an attention module runs: its softmax's output passed through ``edit``."""

    def __init__(self, edit: Callable[[torch.Tensor], torch.Tensor | None]) -> None:
        super().__init__()
        self.edit, self.calls = edit, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _SOFTMAX:
            self.calls += 1
            if self.calls == 1:  # a second softmax is refused when the module returns
                new = self.edit(out)
                out = out if new is None else new
        return out


class PatternHook:
    """Block ``layer``'s attention pattern, as a grid site (:class:`.grid_sites.SiteHook`'s
    interface: ``hooked``, ``write``, ``module``, ``side``)."""

    side = "pattern"  # neither a module's input nor its output: no Inner replay
    start = stop = head_dim = reader = None

    def __init__(self, name: str, model_name: str, path: str, module: nn.Module,
                 heads: int) -> None:  # fmt: skip
        self.name, self.model_name, self.path = name, model_name, path
        self.module, self.heads = module, heads

    @classmethod
    def resolve(cls, model: Model, layer: int) -> PatternHook:
        """Block ``layer``'s attention module, found by its role in the block."""
        name = f"blocks.{layer}.attn.hook_pattern"
        blocks, n = getattr(model, "_blocks", None), getattr(model, "_n_blocks", None)
        if getattr(model, "_decoder", None) is not None or not blocks or not isinstance(n, int):
            raise LayerError(
                f"{name}: model {model.name!r} has no decoder-only or encoder-only block list; "
                f"pattern grids patch {SUPPORTED}."
            )
        path = role(model.module, f"{blocks}.{layer}", "attn_weights")
        cfg = getattr(model.module, "config", None)
        heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
        return cls(name, model.name, path, model.module.get_submodule(path), heads)

    def _refuse(self, what: str) -> LayerError:
        return LayerError(
            f"{self.name} of model {self.model_name!r}: the attention module {self.path!r} "
            f"{what} under eager attention, so its pattern cannot be patched; pattern grids "
            f"patch {SUPPORTED}. Patch q or k (what makes the pattern) instead."
        )

    @contextlib.contextmanager
    def hooked(self, edit: Callable[[torch.Tensor], torch.Tensor | None]) -> Iterator[None]:
        """Within the block, ``edit(pattern)`` runs at every pass of the attention module
        (``(rows, heads, query, key)``); it may return the pattern to use in its place."""
        modes: list[_Softmax] = []

        def checked(t: torch.Tensor) -> torch.Tensor | None:
            if t.dim() != 4 or t.shape[1] != self.heads or t.shape[-1] < t.shape[-2]:
                raise self._refuse(f"computed a softmax of shape {tuple(t.shape)}, not "
                                   f"(rows, {self.heads} heads, query, key),")  # fmt: skip
            return edit(t)

        def pre(_mod, _args):
            mode = _Softmax(checked)
            mode.__enter__()
            modes.append(mode)

        def post(_mod, _args, _out):
            mode = modes.pop()
            mode.__exit__(None, None, None)
            if mode.calls != 1:
                raise self._refuse(f"called {mode.calls} softmaxes (one expected)")

        handles = [self.module.register_forward_pre_hook(pre),
                   self.module.register_forward_hook(post)]  # fmt: skip
        try:
            yield
        finally:
            while modes:  # a pass stopped inside the module leaves its mode open
                modes.pop().__exit__(None, None, None)
            for h in handles:
                h.remove()

    def write(self, x: torch.Tensor, src: torch.Tensor, head: torch.Tensor,
              *_: Any) -> torch.Tensor:  # fmt: skip
        """``x`` (``(C·M, heads, T, T)``: C cells of M rows) with cell ``c``'s head taken
        from ``src`` (``(M, heads, T, T)``) in every row of that cell."""
        C, M = len(head), src.shape[0]
        if x.shape[0] != C * M or x.shape[-2:] != src.shape[-2:]:
            raise DNIError(
                f"{self.name}: a patched pass of {tuple(x.shape)} cannot take patterns of "
                f"{tuple(src.shape)}; this is a bug in the grid's passes, please report it."
            )
        out = x.clone()
        rows = torch.arange(C * M, device=x.device)
        h = head.to(x.device).repeat_interleave(M)
        out[rows, h] = src[rows % M, h].to(x.dtype)
        return out


def check_layouts(src: dict, tgt: dict, group: list[int]) -> None:
    """The source and target batches of a pattern grid hold their tokens alike (the same
    attention mask, every row the same), so a pattern writes position onto position."""
    a, b = src.get("attention_mask"), tgt.get("attention_mask")
    ids_a, ids_b = src.get("input_ids"), tgt.get("input_ids")
    same = ids_a is None or ids_b is None or ids_a.shape == ids_b.shape
    if same and a is not None and b is not None:
        same = a.shape == b.shape and torch.equal(a, b) and bool((a == a[:1]).all())
    if not same:
        raise DNIError(
            f"pairs {group}: their clean and corrupted records do not hold their tokens at the "
            "same positions (same symbol counts, different token layouts), so a pattern "
            "cannot be written query onto query; give pairs of the same token count."
        )
