"""A grid's passes with GPT-2's GELU as one fused kernel: the same function, computed once.

Transformers' ``NewGELUActivation`` (GPT-2's ``gelu_new``) computes the tanh GELU
``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` as six elementwise operations, each a pass
over the MLP's hidden activations: on a CPU it costs more than the MLP's matrix
products. PyTorch's ``gelu(x, approximate="tanh")`` is the same function in one fused
kernel (the two agree to float rounding). While a grid runs, every such activation of
the model without hooks of its own is swapped for the fused one (the clean, corrupted
and patched passes alike, so a grid reads one function), and put back on exit, also on
an error or a Stop. TransformerLens' helpers run the module as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

#: transformers' activations that compute the tanh GELU elementwise, step by step
_STEPWISE_TANH_GELU = {("transformers.activations", "NewGELUActivation")}
#: how far the fused kernel may be from the module on a sweep of inputs to be swapped in
_TOLERANCE = 1e-5


class FusedTanhGelu(nn.Module):
    """The tanh GELU in one kernel (``torch.nn.functional.gelu(x, approximate="tanh")``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x, approximate="tanh")


def _stepwise(m: nn.Module) -> bool:
    kind = (type(m).__module__, type(m).__name__)
    hooked = m._forward_hooks or m._forward_pre_hooks or m._forward_hooks_with_kwargs
    return kind in _STEPWISE_TANH_GELU and not hooked


def _agrees(m: nn.Module) -> bool:
    """The module and the fused kernel agree on a sweep of inputs (checked, not assumed)."""
    x = torch.linspace(-10.0, 10.0, 2001)
    with torch.inference_mode():
        return bool((m(x) - FusedTanhGelu()(x)).abs().max() <= _TOLERANCE)


@contextlib.contextmanager
def fused_activations(module: nn.Module) -> Iterator[int]:
    """Within the block, ``module``'s step-by-step tanh GELUs are the fused kernel; yields
    how many were swapped."""
    swaps = [(parent, name, child) for parent in module.modules()
             for name, child in parent.named_children() if _stepwise(child)]  # fmt: skip
    if swaps and not _agrees(swaps[0][2]):
        swaps = []
    try:
        for parent, name, _child in swaps:
            setattr(parent, name, FusedTanhGelu())
        yield len(swaps)
    finally:
        for parent, name, child in swaps:
            setattr(parent, name, child)
