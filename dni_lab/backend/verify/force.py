"""Force chosen units to given values inside the forward pass (ablation, oracle, generation).

For a plain layer, a forward hook overwrites the units in the layer's output, so
every later layer sees the forced values. For a recurrent layer that is not
enough: a unit's hidden state also feeds the next time step. The hook therefore
recomputes the recurrent module step by step, overwriting the units' hidden
state after every step, so the recurrence itself runs with the forced values
(what the DNI paper means by forcing a neuron's hidden state). An address whose
units are a module's *input* (a transformer's per-head outputs, ``attn.hook_z``,
read as the input of the attention's out projection) is forced in a forward
pre-hook, so the projection itself runs on the forced values. Hooks are removed
on exit, also on error.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import LayerError
from ..extraction.layouts import first_tensor
from ..extraction.models import Model
from ..hf.capture import first_input
from ..hf.names import reads_input

_CELLS = {"LSTM": torch.lstm_cell, "GRU": torch.gru_cell}


@contextlib.contextmanager
def force_units(
    model: Model, addr: str, units: Sequence[int], values: float | torch.Tensor
) -> Iterator[None]:
    """Within the block, units ``units`` of address ``addr`` take ``values``.

    Parameters
    ----------
    model : Model
    addr : str
        A resolved address: a module (``"lstm"``, ``"head"``), a stacked
        recurrent layer (``"lstm.l0"``) or a transformer block's per-head outputs
        (``"model.layers.0.attn.hook_z"``, the out projection's input); cell
        states cannot be forced.
    units : sequence of int
        Indices within the layer.
    values : float or Tensor
        A constant (0 ablates), or a ``(R, T, len(units))`` pattern for the batch
        about to run (positions past ``T`` are forced to 0). On a transformer
        (:class:`~dni_lab.backend.hf.HFModel`) ``T`` counts symbols: each pattern row
        lands on its token, and special tokens and padding keep their values.
    """
    base, k, cell = Model.split_address(addr)
    if cell:
        raise LayerError(f"cannot force cell states ({addr!r}); force the hidden state instead.")
    forceable = getattr(model, "forceable", None)
    if forceable is not None and not forceable(addr):
        raise LayerError(
            f"units of {addr!r} are read from a module's output (a slice of a fused "
            "projection, or attention to a target), not the output itself, and cannot be "
            "forced alone; force the heads' outputs (attn.hook_z) or the block instead."
        )
    mod = model._module(base if k is not None else addr)
    idx = torch.as_tensor(list(units), dtype=torch.long)
    slots = getattr(model, "symbol_slots", None)
    # forced units must be the units the model reads there: a transformer's per-head
    # address is read at its out projection's input, but a real module path is read at
    # its output even when it is named like one (a TransformerLens hook point hook_z)
    if reads_input(addr) and addr not in model.layers:
        handle = mod.register_forward_pre_hook(_input_hook(idx, values, slots), with_kwargs=True)
    else:
        if isinstance(mod, nn.RNNBase):
            layer = mod.num_layers - 1 if k is None else k
            hook = _recurrent_hook(layer, idx, values)
        elif model.reads_layouts:
            hook = _layout_hook(model, addr, idx, values)
        else:
            hook = _output_hook(idx, values, slots)
        handle = mod.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _pattern(values: float | torch.Tensor, like: torch.Tensor, R: int, T: int, k: int):
    """``values`` as a ``(R, T, k)`` tensor (constants broadcast, short patterns zero-padded)."""
    v = torch.as_tensor(values, dtype=like.dtype, device=like.device)
    if v.dim() == 0:
        return v.expand(R, T, k)
    if v.dim() != 3 or v.shape[0] != R or v.shape[2] != k:
        raise LayerError(
            f"forced values of shape {tuple(v.shape)} do not fit a batch of {R} records and "
            f"{k} units; pass a constant or a (records, symbols, units) tensor."
        )
    if v.shape[1] < T:
        v = torch.cat([v, v.new_zeros(R, T - v.shape[1], k)], dim=1)
    return v[:, :T]


def _at_symbols(t: torch.Tensor, i: torch.Tensor, values, slots) -> None:
    """Force units ``i`` of ``t`` (``(R, T_tokens, D)``) at the symbols' token positions only.

    A transformer's special tokens and padding are not symbols: they keep their values,
    and symbol ``j`` of a record takes pattern row ``j`` wherever its token sits.
    """
    index, real = slots
    k = len(i)
    where = index[..., None].expand(-1, -1, k)
    sub = t[..., i]
    v = _pattern(values, t, index.shape[0], index.shape[1], k)
    # tail slots of shorter records point at non-symbol tokens: write their own value back
    v = torch.where(real[..., None], v, sub.gather(1, where))
    t[..., i] = sub.scatter(1, where, v)


def _forced(t: torch.Tensor, idx: torch.Tensor, values, symbol_slots) -> torch.Tensor:
    """A copy of ``t`` (a layer's output or a module's input) with units ``idx`` forced."""
    t = t.clone()
    i = idx.to(t.device)
    slots = symbol_slots(t) if symbol_slots is not None else None
    if slots is not None:
        _at_symbols(t, i, values, slots)
    elif t.dim() == 3:  # (R, T, D): a sequence
        t[..., i] = _pattern(values, t, t.shape[0], t.shape[1], len(i))
    elif t.dim() == 2:  # (R, D): one vector per record
        t[:, i] = _pattern(values, t, t.shape[0], 1, len(i))[:, 0]
    elif t.dim() == 4 and torch.as_tensor(values).dim() == 0:  # (R, C, H, W): channels
        t[:, i] = float(values)
    else:
        raise LayerError(f"cannot force units of a tensor of shape {tuple(t.shape)} to a pattern.")
    return t


def _output_hook(idx: torch.Tensor, values: float | torch.Tensor, symbol_slots=None):
    def hook(_mod, _args, _kwargs, out):
        first = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(first, torch.Tensor):
            raise LayerError("the layer's output holds no tensor to force units in.")
        t = _forced(first, idx, values, symbol_slots)
        if isinstance(out, (tuple, list)):
            return type(out)([t, *out[1:]])
        return t

    return hook


def _layout_hook(model: Model, addr: str, idx: torch.Tensor, values: float | torch.Tensor):
    """Force units on exactly the axes the address is read on (its :class:`Layout`)."""
    layout = model.layout(addr) if model.has_widths else None
    where = f"layer {addr!r} of model {model.name!r}"
    if layout is not None and "f" in layout.axes and torch.as_tensor(values).dim() != 0:
        raise LayerError(f"{where}: frames as symbols take constant forced values only.")

    def hook(_mod, _args, _kwargs, out):
        nonlocal layout
        if layout is None:  # no probe pass yet: only what is declared or fixed by the kind
            t = model.layouts[addr].select(out, where) if addr in model.layouts else \
                first_tensor(out, where)
            layout = model.static_layout(addr, t.dim())
            if layout is None:
                raise LayerError(
                    f"{where}: its layout comes from the probe pass; resolve the units "
                    "first (dl.inspect, or model.layer_widths(records, device))."
                )
        t = layout.select(out, where)
        forced = layout.write(t, idx, values, None, where, model.prefix_of(addr))
        return replace_output(out, t, forced)

    return hook


def replace_output(out: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    """``out`` with the tensor ``old`` (one of its items) replaced by ``new``."""
    if out is old:
        return new
    if isinstance(out, (tuple, list)):
        return type(out)(replace_output(o, old, new) for o in out)
    if isinstance(out, dict):
        fixed = dict(out)
        for key, value in out.items():
            fixed[key] = replace_output(value, old, new)
        try:
            return type(out)(fixed)
        except (TypeError, ValueError):
            return fixed
    fields = getattr(out, "__dataclass_fields__", None)
    if fields:
        changes = {f: new for f in fields if getattr(out, f, None) is old}
        return dataclasses.replace(out, **changes) if changes else out
    return out


def _input_hook(idx: torch.Tensor, values: float | torch.Tensor, symbol_slots=None):
    """A forward pre-hook forcing units of the module's first input (as ``.input`` reads it).

    The first tensor argument, positional or by keyword: Hugging Face attention modules
    take their hidden states by keyword.
    """

    def hook(mod, args, kwargs):
        try:
            x = first_input(mod, args, kwargs)  # the tensor reading ``.input`` takes
        except StopIteration:
            x = None
        if not isinstance(x, torch.Tensor):
            raise LayerError("the module's input holds no tensor to force units in.")
        forced = _forced(x, idx, values, symbol_slots)
        if args and args[0] is x:
            return (forced, *args[1:]), kwargs
        return args, {k: forced if v is x else v for k, v in kwargs.items()}

    return hook


def _recurrent_hook(layer: int, idx: torch.Tensor, values: float | torch.Tensor):
    def hook(mod, args, kwargs, _out):
        x = args[0] if args else kwargs["input"]
        hx = args[1] if len(args) > 1 else kwargs.get("hx")
        if isinstance(x, nn.utils.rnn.PackedSequence):
            raise LayerError("cannot force units of a recurrent layer fed a PackedSequence.")
        return step_recurrent(mod, x, hx, layer, idx, values)

    return hook


def step_recurrent(
    mod: nn.RNNBase,
    x: torch.Tensor,
    hx: Any,
    layer: int,
    idx: torch.Tensor,
    values: float | torch.Tensor,
) -> tuple[torch.Tensor, Any]:
    """Run ``mod`` one time step at a time, forcing ``idx`` of layer ``layer`` after each step.

    Returns what ``mod`` returns: ``(output, h_n)`` or, for an LSTM, ``(output, (h_n, c_n))``.
    """
    if mod.bidirectional or getattr(mod, "proj_size", 0):
        raise LayerError("forcing units of bidirectional or projected RNNs is not supported.")
    kind = type(mod).__name__ if isinstance(mod, (nn.LSTM, nn.GRU)) else mod.mode
    cell = _CELLS.get(kind) or (torch.rnn_tanh_cell if kind == "RNN_TANH" else torch.rnn_relu_cell)
    lstm = isinstance(mod, nn.LSTM)
    seq = x if mod.batch_first else x.transpose(0, 1)
    B, T, _ = seq.shape
    zeros = seq.new_zeros(mod.num_layers, B, mod.hidden_size)
    h0, c0 = (hx if hx is not None else (zeros, zeros)) if lstm else (hx, None)
    h0 = zeros if h0 is None else h0
    i = idx.to(seq.device)
    forced = _pattern(values, seq, B, T, len(i))
    h_n, c_n = [], []
    for j in range(mod.num_layers):
        w = [
            getattr(mod, f"{p}_l{j}", None)
            for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        h, c, outs = h0[j], (c0[j] if lstm else None), []
        for t in range(T):
            if lstm:
                h, c = cell(seq[:, t], (h, c), *w)
            else:
                h = cell(seq[:, t], h, *w)
            if j == layer:
                h = h.index_copy(1, i, forced[:, t])
            outs.append(h)
        # Dropout between layers is a training-time operation; checks run in eval mode.
        seq = torch.stack(outs, dim=1)
        h_n.append(h)
        c_n.append(c)
    out = seq if mod.batch_first else seq.transpose(0, 1)
    hn = torch.stack(h_n)
    return (out, (hn, torch.stack(c_n))) if lstm else (out, hn)
