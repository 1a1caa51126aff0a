"""Which tensor of a structured output a layer reads, and how to say so.

A module may return a tuple (``nn.LSTM``'s ``(out, (h, c))``, ``nn.MultiheadAttention``'s
``(out, weights)``, a Hugging Face attention's ``(out, weights)``), a dict, a dataclass
or a ``ModelOutput``. ``Layout(..., output=...)`` picks one item; without it the first
tensor is read. :func:`pick` is that one selection, used by the extraction, the probe
pass and the second probe alike (through :meth:`.spec.Layout.select`), so what the
probes check is what a run reads. :func:`describe` writes an output's structure for an
error or ``dl.check``'s evidence (``tuple of 2: [0] tensor (2, 7, 16), [1] tuple of 2``),
and :func:`alternatives` names the other tensors a question should offer with
``output=``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ...errors import LayerError

#: How many items of a structure an error lists before "..."
_SHOWN = 8


def items(out: Any) -> list[tuple[int | str, Any]]:
    """The top-level items of a structured output as (``output=`` value, item); [] for a tensor.

    Keys for a dict or ``ModelOutput`` (its fields that are set), indices for a tuple or
    list, field names for a dataclass.
    """
    if isinstance(out, torch.Tensor):
        return []
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        return [(k, out[k]) for k in out.keys()]
    if isinstance(out, (tuple, list)):
        return list(enumerate(out))
    fields = getattr(out, "__dataclass_fields__", None)
    return [(name, getattr(out, name, None)) for name in fields] if fields else []


def selector(key: int | str, out: Any) -> str:
    """How ``describe`` writes one item's place: ``[0]``, ``['gate']`` or ``.hidden``."""
    keyed = isinstance(out, (tuple, list, Mapping)) or hasattr(out, "keys")
    return f"[{key!r}]" if keyed else f".{key}"


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)}"
    if value is None:
        return "None"
    n = len(items(value))
    return f"{type(value).__name__} of {n}" if n else type(value).__name__


def describe(out: Any) -> str:
    """An output's structure, one level deep: ``tuple of 2: [0] tensor (2, 7, 16), [1]
    tuple of 2``; a plain tensor is ``tensor (2, 7, 16)``."""
    found = items(out)
    if not found:
        return _short(out)
    shown = ", ".join(f"{selector(k, out)} {_short(v)}" for k, v in found[:_SHOWN])
    more = f", ... ({len(found) - _SHOWN} more)" if len(found) > _SHOWN else ""
    return f"{type(out).__name__} of {len(found)}: {shown}{more}"


def _holds_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or any(_holds_tensor(v) for _k, v in items(value))


def default_key(out: Any) -> int | str | None:
    """The item the first tensor is read from when no ``output=`` is declared (None for a
    plain tensor or a structure that holds none)."""
    return next((k for k, v in items(out) if _holds_tensor(v)), None)


def alternatives(out: Any, read: int | str | None) -> list[int | str]:
    """The ``output=`` values of the top-level tensors other than the item ``read``."""
    return [k for k, v in items(out) if isinstance(v, torch.Tensor) and k != read]


def pick(out: Any, output: int | str, where: str, spec: str = "n s u") -> torch.Tensor:
    """The tensor ``output=`` names in a module's output: the extraction's selection.

    An index or key the output does not have, or an item that is no tensor, is a
    :class:`LayerError` naming the layer (``where``), the output's structure and the
    declaration that reads one of its tensors.
    """
    try:
        if isinstance(out, Mapping) or (isinstance(output, str) and hasattr(out, "keys")):
            t = out[output]
        elif isinstance(output, str):
            t = getattr(out, output)
        else:
            t = out[output]
    except (KeyError, IndexError, AttributeError, TypeError):
        raise LayerError(
            f"{where} returns {describe(out)}, which has no item output={output!r}. "
            f"{_fix(out, spec)}"
        ) from None
    if not isinstance(t, torch.Tensor):
        raise LayerError(
            f"{where} returns {describe(out)}; its item output={output!r} is "
            f"{_short(t)}, not a tensor. {_fix(out, spec)}"
        )
    return t


def _fix(out: Any, spec: str) -> str:
    """The declaration that reads a tensor of ``out`` (one of its top-level tensors)."""
    tensors = [k for k, v in items(out) if isinstance(v, torch.Tensor)]
    if not tensors:
        return ("None of its items is a tensor: read a module inside it, or one that "
                "returns a tensor.")
    listed = ", ".join(repr(k) for k in tensors)
    return (f"Declare which tensor to read (output= one of {listed}), e.g. "
            f"dl.Layout({spec!r}, output={tensors[0]!r}).")


def reading(out: Any, output: int | str | None) -> str:
    """Which tensor of ``out`` is read, for ``dl.check``'s evidence ('' for a tensor)."""
    if isinstance(out, torch.Tensor) or not items(out):
        return ""
    if output is not None:
        return f"reads output={output!r} of {describe(out)}"
    key = default_key(out)
    if key is None:
        return ""
    others = alternatives(out, key)
    offer = (f"; declare output= to read another ({', '.join(f'output={k!r}' for k in others)})"
             if others else "")  # fmt: skip
    inner = dict(items(out))[key]  # a nested first item: output= cannot name its tensor
    place = f"output={key!r}" if isinstance(inner, torch.Tensor) else (
        f"inside item {selector(key, out)}")
    return f"reads the first tensor ({place}) of {describe(out)}{offer}"
