"""A stacked RNN's inner layers, recomputed from the input captured at the module.

``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` return only their last layer's outputs; an address
such as ``lstm.1`` (layer 1 of a stacked module) or ``lstm.0.cell`` (its cell state) is
read by replaying the stack layer by layer on single-layer copies that share its weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import LayerError


class RnnReplay:
    """Single-layer replicas of stacked RNN modules, made once per (module, layer).

    Parameters
    ----------
    split_address : callable
        The model's ``split_address``: an address → ``(module name, layer, cell)``.
    """

    def __init__(self, split_address: Callable[[str], tuple[str, int | None, bool]]) -> None:
        self.split_address = split_address
        self._replicas: dict[tuple[int, int], nn.Module] = {}

    def __call__(self, addr: str, mod: nn.RNNBase, x: torch.Tensor, hx: Any) -> torch.Tensor:
        """Recompute stacked layer ``k`` (and its cell state) from the captured input."""
        _, k, cell = self.split_address(addr)
        k = mod.num_layers - 1 if k == -1 else k
        dirs = 2 if mod.bidirectional else 1
        for j in range(k + 1):
            layer = self._layer(mod, j)
            h0 = _slice_hx(hx, j, dirs)
            if j < k or not cell:
                x, _ = layer(x, h0)
                continue
            if dirs == 2:
                raise LayerError(f"cell states of bidirectional layer {addr!r} are not supported.")
            return _cells(layer, x, h0)
        return x if mod.batch_first else x.transpose(0, 1)

    def _layer(self, mod: nn.RNNBase, j: int) -> nn.RNNBase:
        key = (id(mod), j)
        if key not in self._replicas:
            insize = mod.input_size if j == 0 else mod.hidden_size * (2 if mod.bidirectional else 1)
            kw = dict(batch_first=mod.batch_first, bidirectional=mod.bidirectional, bias=mod.bias)
            if isinstance(mod, nn.RNN):
                kw["nonlinearity"] = mod.nonlinearity
            rep = type(mod)(insize, mod.hidden_size, num_layers=1, **kw)
            state = {}
            for name in rep.state_dict():
                state[name] = getattr(mod, name.replace("_l0", f"_l{j}"))
            rep.load_state_dict(state)
            self._replicas[key] = rep.to(x_device(mod)).eval()
        return self._replicas[key]


def x_device(mod: nn.Module) -> torch.device:
    """The device of ``mod``'s first parameter."""
    return next(mod.parameters()).device


def _slice_hx(hx: Any, j: int, dirs: int) -> Any:
    if hx is None:
        return None
    if isinstance(hx, tuple):
        return tuple(h[j * dirs : (j + 1) * dirs] for h in hx)
    return hx[j * dirs : (j + 1) * dirs]


def _cells(layer: nn.LSTM, x: torch.Tensor, h0: Any) -> torch.Tensor:
    """Cell state at every time step: step the single-layer LSTM one position at a time."""
    tdim = 1 if layer.batch_first else 0
    state = h0
    cells = []
    for t in range(x.shape[tdim]):
        xt = x.narrow(tdim, t, 1)
        _, state = layer(xt, state)
        cells.append(state[1][0])  # (B, H) for one direction
    return torch.stack(cells, dim=1)
