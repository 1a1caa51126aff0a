"""``stop_at_layer=k``: which names a stop after block ``k`` reaches, and the stop itself.

A forward pre-hook on whatever runs after block ``k`` (block ``k + 1``, or the first module
after the blocks) raises :class:`StopAtLayer`; :func:`wrap_forward` puts a ``forward`` around
the model's that catches it and returns None, so the Extractor keeps the values captured so
far, as when a Hugging Face model stops early by itself. Names read after the stop are
refused, or left out when a glob or callable chose them, before any pass (:func:`reached`).
The blocks are the entries of the list (``nn.ModuleList``, or timm's ``nn.Sequential``) that
holds the model's positional layers (a Sequential that is the whole model is none).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from torch import nn

from ..errors import DNIError, LayerError


class StopAtLayer(Exception):
    """Raised by the hook after block ``k``; the wrapped ``forward`` returns None."""


def reached(
    model: Any,
    units: list[Any],
    patterns: list[tuple[str, Any, Any]],
    chosen: set[str],
    stop_at_layer: Any,
) -> tuple[list[Any], list[tuple[str, Any, Any]]]:
    """The names a stop after block ``stop_at_layer`` reaches, checked before any pass.

    A name a glob or callable chose (``chosen``) past the stop is left out; a name the
    caller gave past it raises.

    Raises
    ------
    DNIError
        ``stop_at_layer`` is not a block of the model, or the model has no block list.
    LayerError
        A name the caller gave is read after the stop, or the filter chose only such names.
    """
    if stop_at_layer is None:
        return units, patterns
    blocks = block_paths(model)
    n = len(blocks)
    if not blocks:
        raise DNIError(
            f"stop_at_layer: model {model.name!r} has no list of blocks to stop in; leave "
            "stop_at_layer out."
        )
    k = stop_at_layer
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) < n:
        raise DNIError(
            f"stop_at_layer must be a block from 0 to {n - 1} (model {model.name!r} has {n} "
            f"blocks), not {k!r}."
        )
    k = int(k)

    def late(name: Any) -> str | None:  # the address of a name read after block k
        head = name[0] if isinstance(name, tuple) and name else name
        address = getattr(head, "address", None) or model.resolve_layer(head)
        b = block_of(model, blocks, address)
        return address if b is None or b > k else None

    out_units, out_patterns, refused = [], [], []
    for u in units:
        addr = late(u)
        if addr is None:
            out_units.append(u)
        elif not (isinstance(u, str) and u in chosen):
            refused.append((u, addr))
    for p in patterns:
        b = block_of(model, blocks, p[2].address)
        if b is not None and b <= k:
            out_patterns.append(p)
        elif p[0] not in chosen:
            refused.append((p[0], p[2].address))
    if refused:
        name, addr = refused[0]
        raise LayerError(
            f"{name!r} ({addr}) is read after block {k}, where stop_at_layer={k} ends the "
            f"forward pass; raise stop_at_layer or leave the name out ({len(refused)} such "
            f"name{'s' if len(refused) > 1 else ''})."
        )
    if not out_units and not out_patterns:
        raise LayerError(
            f"the names filter chose names of model {model.name!r} read after block {k} only; "
            f"stop_at_layer={k} ends the forward pass before them."
        )
    return out_units, out_patterns


def block_paths(model: Any) -> list[str]:
    """The module path of each block (an entry of the model's block list), or []."""
    out = []
    for p in model.positional_layers():
        parts = p.split(".")
        found = None
        for j in range(len(parts), 0, -1):  # the innermost ancestor held by a block list
            parent = ".".join(parts[: j - 1])
            mod = model.module.get_submodule(parent) if parent else model.module
            # timm's blocks are an nn.Sequential; a whole model that is one is no block list
            if isinstance(mod, nn.ModuleList) or (parent and isinstance(mod, nn.Sequential)):
                found = ".".join(parts[:j])
                break
        if found is None:
            return []
        out.append(found)
    return out


def block_of(model: Any, blocks: list[str], address: str) -> int | None:
    """The block ``address`` is read in; -1 before the blocks, None after them.

    An address under block ``i``'s path is in block ``i``; any other is placed by its
    module's position in ``named_modules()`` (embeddings before the block list, a final
    norm and a head after it).
    """
    for i, b in enumerate(blocks):
        if address == b or address.startswith(b + "."):
            return i
    if not blocks:
        return None
    module = model.module
    order = {id(m): j for j, (_n, m) in enumerate(module.named_modules())}
    last = module.get_submodule(blocks[-1])
    end = max(order[id(m)] for m in last.modules())
    try:
        at = order.get(id(model._module(address)))
    except (AttributeError, LayerError):
        at = None
    return None if at is None or at > end else -1


def raise_stop(_mod: nn.Module, _args: tuple) -> None:
    raise StopAtLayer


def wrap_forward(model: Any, stack: contextlib.ExitStack) -> None:
    """``model.forward`` returns None where the stop hook ended the pass; put back on exit."""
    own = vars(model).get("forward")
    inner = model.forward

    def forward(batch: Any) -> Any:
        try:
            return inner(batch)
        except StopAtLayer:  # every name was read before block stop + 1
            return None

    model.forward = forward

    def restore() -> None:
        if own is None:
            del model.forward
        else:
            model.forward = own

    stack.callback(restore)
