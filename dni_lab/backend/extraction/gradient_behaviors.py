"""The behaviors other than the activation: its gradient with respect to the input, a
metric's gradient (:class:`dni_lab.verify.GradientOf`) and a user's function.

The :class:`~.extract.Extractor` captures activations; these turn them into the behavior
a run asked for, per unit and symbol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import BehaviorError
from .models import Model

#: Makes ``MetricGradients(model, addresses, metric, device)``; verify/gradients.py
#: registers it on import (verification builds on extraction, never the reverse).
_METRIC_GRADIENTS: Callable[..., Any] | None = None


def register_metric_gradients(factory: Callable[..., Any]) -> None:
    """Set the maker of metric gradients (:class:`dni_lab.verify.MetricGradients`)."""
    global _METRIC_GRADIENTS
    _METRIC_GRADIENTS = factory


def metric_gradients(model: Model, addrs: list[str], metric: Any, device) -> Any:
    """A ``MetricGradients`` reader of ``addrs`` (``dni_lab.verify`` must be imported)."""
    if _METRIC_GRADIENTS is None:
        import importlib

        importlib.import_module("dni_lab")  # registers verify's MetricGradients
    assert _METRIC_GRADIENTS is not None
    return _METRIC_GRADIENTS(model, addrs, metric, device)


def input_leaf(model: Model, batch: Any, stack: contextlib.ExitStack) -> tuple[Any, list]:
    """Make the input differentiable: the first embedding's output, else the float input."""
    leaf: list[torch.Tensor] = []
    emb = next((m for m in model.module.modules() if isinstance(m, nn.Embedding)), None)
    if emb is not None:

        def hook(_m, _i, out):
            out = out.detach().requires_grad_(True)
            leaf.append(out)
            return out

        stack.callback(emb.register_forward_hook(hook).remove)
        return batch, leaf
    if isinstance(batch, torch.Tensor) and batch.is_floating_point():
        batch = batch.detach().requires_grad_(True)
        leaf.append(batch)
        return batch, leaf
    raise BehaviorError(
        f"model {model.name!r}: behavior='gradient' needs an nn.Embedding or a float input "
        "tensor to differentiate with respect to."
    )


def input_gradient(
    act: torch.Tensor, leaf: list, mask: torch.Tensor, records: list, model: Model | None = None
) -> torch.Tensor:
    """Per unit u and symbol t: size of ∂(Σ_t' a_u(t')) / ∂x_t, the input at symbol t."""
    x = leaf[0]
    # a model whose symbols are not its positions (padding side, special tokens) maps them
    gather = getattr(model, "gather_symbols", None)
    m = mask[..., None].to(act.dtype)
    cols = []
    for u in range(act.shape[-1]):
        (g,) = torch.autograd.grad((act[..., u : u + 1] * m).sum(), x, retain_graph=True)
        if g.dim() == 4:  # image input (R, C, H, W): sum over channels per pixel
            g = g.abs().sum(1).flatten(1)
        else:  # embedded tokens (R, T, E): L2 norm over the embedding
            g = (gather(g) if gather is not None else g).norm(dim=-1)
        cols.append(g[:, : mask.shape[1]])
    return torch.stack(cols, dim=-1) if cols else act.detach()


def apply_function(fn: Callable, act: torch.Tensor, records: list, addr: str) -> torch.Tensor:
    """A user's behavior function on ``act`` ``(R, T, D)``; its output must keep the shape."""
    out = torch.as_tensor(fn(act, records))
    if out.shape != act.shape:
        raise BehaviorError(
            f"behavior function {getattr(fn, '__name__', fn)!r} returned shape {tuple(out.shape)} "
            f"for layer {addr!r}; expected {tuple(act.shape)} (records, symbols, units)."
        )
    return out
