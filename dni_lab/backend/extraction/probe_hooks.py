"""What the probe pass runs with: the module in eval mode, batches moved, outputs seen.

Helpers of :mod:`.readings`' probe pass, also used by every other reader: :func:`eval_mode`
(every submodule's own ``training`` flag put back, so a model is left as found),
:func:`to_device` for an encoded batch, and :func:`see`, the probe's forward hook that
keeps what each module returned and was given and counts calls on different values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import LayerError
from .layouts import Layout, Seen, first_input, first_tensor
from .layouts.outputs import alternatives, default_key, describe


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a tensor, or the tensors of a tuple/list/dict, to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def see(seen: dict, addr: str, layout: Layout | None, calls: dict[str, int]) -> Callable:
    """A probe hook: what the module returned (the tensor read) and was given, how often.

    The tensor is the one a run reads (:meth:`.layouts.Layout.select`: the declared
    ``output=``, else the first). A declared ``output=`` that the output does not have
    is that address's error, kept in ``seen`` as a string naming the layer, the output's
    structure and the fix: the other addresses stay readable. A structured output keeps
    its structure and its other tensors, which a layout question offers with ``output=``.
    """

    def hook(mod, args, kwargs, out):
        where = f"layer {addr!r} ({type(mod).__name__})"
        try:
            t = layout.select(out, where) if layout is not None else first_tensor(out, where)
        except LayerError as exc:
            if layout is not None:
                seen[addr] = str(exc)
            return  # no tensor output: not a readable address
        before = seen.get(addr)
        # a module run again on the same values (TransformerLens applies ln1 to the
        # query, key and value inputs alike) has one output; other values make two
        if before is None:
            calls[addr] = 1
        elif not (isinstance(before, Seen) and before.out.shape == t.shape
                  and torch.equal(before.out, t)):
            calls[addr] += 1
        if isinstance(out, torch.Tensor):
            seen[addr] = Seen(t, first_input(args, kwargs))
        else:
            read = layout.output if layout is not None and layout.output is not None else (
                default_key(out))
            seen[addr] = Seen(t, first_input(args, kwargs), describe(out),
                              tuple(alternatives(out, read)))

    return hook


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode; every submodule's own ``training`` flag put back on exit.

    ``module.train(flag)`` on the way out would set every submodule to the top's flag:
    an eval-mode network inside a fresh (train-mode) wrapper would come back training.
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, flag in modes:
            m.training = flag  # the attribute itself: train() would recurse into children
