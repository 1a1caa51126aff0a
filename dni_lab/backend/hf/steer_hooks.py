"""Steering vectors added inside a Hugging Face model's forward pass, checked before it runs.

``dl.generate(..., steer={name: vector})`` adds ``scale · vector`` to the value at a
hook name at every position of every forward pass (or, with ``positions="new"``,
only in the passes over generated tokens). A name that is a module's output (the
residual stream after a block, ``blocks.3.hook_resid_post``; an attention or MLP
output) is steered by a forward hook that returns the shifted output; the heads'
outputs (``attn.hook_z``, the out projection's input) by a forward pre-hook that
shifts that input, so the projection reads the steered heads. What is no value the
rest of the model reads as a whole cannot be steered, and says so before any
forward pass: a slice of a fused projection (GPT-2's ``attn.hook_q``), a computed
value (``hook_normalized``), or a norm's input (``hook_resid_mid`` is ``ln_2``'s
input, but the residual sum reads it before the norm: steer ``hook_attn_out``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DNIError, LayerError


@dataclass
class Steer:
    """One steering vector, resolved: where it goes and what is added there."""

    name: str  # as the caller gave it
    address: str  # the resolved address
    module: str  # the module hooked
    at_input: bool  # a pre-hook on the module's first input (attn.hook_z)
    vector: torch.Tensor  # (width,) float32, scale applied


def _vector(name: str, value: Any, width: int, scale: float) -> torch.Tensor:
    """``value`` as a finite ``(width,)`` float32 tensor times ``scale``, or a clear error."""
    try:
        v = torch.as_tensor(np.asarray(value.detach().cpu() if torch.is_tensor(value) else value,
                                       dtype=np.float32))  # fmt: skip
    except (TypeError, ValueError) as e:
        raise DNIError(
            f"steer[{name!r}] is {type(value).__name__}, not a vector of numbers ({e}); "
            f"pass a 1-D tensor or array of {width} values."
        ) from None
    if v.dim() != 1 or v.shape[0] != width:
        raise DNIError(
            f"steer[{name!r}] has shape {tuple(v.shape)}, but {name!r} is {width} units wide; "
            f"pass a 1-D vector of {width} values (dl.steering_vector(model, records, "
            f"hypothesis, {name!r}) makes one)."
        )
    if not torch.isfinite(v).all():
        raise DNIError(f"steer[{name!r}] holds NaN or infinite values; pass a finite vector.")
    return v * float(scale)


def resolve(
    model: Any, steer: Mapping[str, Any] | None, scale: float, widths: Callable[[], dict]
) -> list[Steer]:
    """Each ``steer`` entry resolved and checked: name, steerability and width.

    Parameters
    ----------
    model : HFModel
    steer : mapping or None
        ``{name: vector}``: TransformerLens hook names, nnsight paths or addresses.
    scale : float
        Multiplies every vector.
    widths : callable
        ``() -> {address: width}`` (the model's layer widths; measured once, cached).

    Raises
    ------
    LayerError
        A name the model does not have, or one that cannot be steered as a whole.
    DNIError
        A vector of the wrong width or shape, or not finite; a scale that is not a number.
    """
    if not steer:
        return []
    if not isinstance(steer, Mapping):
        raise DNIError(f"steer= takes a dict {{name: vector}}, not {type(steer).__name__}.")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not np.isfinite(scale):
        raise DNIError(f"scale must be a finite number, got {scale!r}.")
    out = []
    for name, value in steer.items():
        address = model.resolve_layer(name)
        tap = model._taps.get(address)
        module, at_input = address, False
        if tap is not None:
            module, at_input = tap.module, tap.side == "input"
        norm = at_input and "Norm" in type(model.module.get_submodule(module)).__name__
        if not model.forceable(address) or norm:
            why = ("the input of a norm the residual sum does not read (steer the attention "
                   "output, hook_attn_out, or the previous block's hook_resid_post)") if norm \
                else "a slice of a fused projection or a value computed from one"  # fmt: skip
            raise LayerError(
                f"{name!r} ({address!r}) is {why}; it cannot be steered. Steer a module's "
                "output (blocks.N.hook_resid_post, hook_attn_out, hook_mlp_out) or attn.hook_z."
            )
        width = widths().get(address)
        if width is None:
            raise LayerError(f"{name!r} ({address!r}) has no width on model {model.name!r}; "
                             "steer a layer with a tensor output.")  # fmt: skip
        out.append(Steer(str(name), address, module, at_input, _vector(name, value, width, scale)))
    return out


def _shifted(t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return t + v.to(device=t.device, dtype=t.dtype)


def _output_hook(v: torch.Tensor, active: Callable[[], bool]):
    def hook(_mod, _args, out):
        if not active():
            return None
        if isinstance(out, torch.Tensor):
            return _shifted(out, v)
        if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
            return (_shifted(out[0], v), *out[1:])
        raise LayerError(f"a steered module returned {type(out).__name__}, not a tensor or a "
                         "tuple starting with one; steer another name.")  # fmt: skip

    return hook


def _input_hook(v: torch.Tensor, active: Callable[[], bool]):
    def hook(mod, args, kwargs):
        if not active():
            return None
        if args:
            return (_shifted(args[0], v), *args[1:]), kwargs
        # called with keywords only: the forward's first parameter names the input
        first = list(inspect.signature(type(mod).forward).parameters)[1]
        kwargs = {**kwargs, first: _shifted(kwargs[first], v)}
        return args, kwargs

    return hook


def install(
    root: nn.Module, plan: list[Steer], active: Callable[[], bool], stack: contextlib.ExitStack
) -> None:
    """Install ``plan``'s hooks on ``root``; ``stack`` removes them (also on error)."""
    for s in plan:
        mod = root.get_submodule(s.module)
        if s.at_input:
            handle = mod.register_forward_pre_hook(_input_hook(s.vector, active), with_kwargs=True)
        else:
            handle = mod.register_forward_hook(_output_hook(s.vector, active))
        stack.callback(handle.remove)
