"""The zoo's own reading of a module's output: (records, symbols, units), written from the
layout contract, never from dni_lab's code.

A reading is a layout string, one letter per axis of the output tensor (``n`` records,
``s`` a symbol axis, two ``s`` a 2-D map flattened row-major, ``u`` units, several
flattened row-major, ``r`` reduced per symbol, ``f`` frames of every record concatenated
on the batch axis), plus ``reduce`` and which tensor of a structured output to take.
Recurrent sub-layers (``lstm.l0``, ``lstm.l1.cell``) are recomputed here from the
module's weights with ``nn.LSTMCell``/``nn.GRUCell`` steps, an independent route.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Read:
    """An expected reading: ``layout`` letters, ``reduce`` for ``r`` axes, ``output`` pick.

    ``prefix`` overrides the model's for this module (a vision transformer's patch
    embedding has none); ``grid`` reads a 2-D map at its own size (its pixels are the
    patches), never resized to the image.
    """

    layout: str
    reduce: str | None = None
    output: int | str | None = None
    prefix: int | None = None
    grid: bool = False


@dataclass(frozen=True)
class Refuse:
    """An expected refusal before any data is read: the ``DNIError`` subclass's name."""

    kind: str = "LayerError"
    why: str = ""


class ReadingError(Exception):
    """The reading does not fit the records (the contract says dni_lab must refuse)."""


def first_tensor(out: Any) -> torch.Tensor | None:
    """The first tensor of a tensor, tuple/list, dict, dataclass or ``ModelOutput``."""
    if isinstance(out, torch.Tensor):
        return out
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        out = [getattr(out, f.name) for f in dataclasses.fields(out)]
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for v in out:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


def pick(out: Any, output: int | str | None) -> torch.Tensor | None:
    """The tensor a reading names: ``output`` (an index or key) or the first tensor."""
    if output is None:
        return first_tensor(out)
    if isinstance(output, str):
        return out[output] if isinstance(out, Mapping) else getattr(out, output)
    return out[output]


def read(
    out: Any,
    spec: Read,
    counts: Sequence[int],
    image_hw: tuple[int, int] | None = None,
    resize: bool = True,
    prefix: int = 0,
) -> list[np.ndarray]:
    """Per record a float64 ``(symbols, units)`` array, as the contract reads ``out``.

    ``counts`` are the records' symbol counts; ``image_hw`` the records' height and width
    when they are images (a 2-D map is resized to it). Raises :class:`ReadingError` where
    the contract says dni_lab must refuse (axes that do not fit the records).
    """
    t = pick(out, spec.output)
    if not isinstance(t, torch.Tensor):
        raise ReadingError(f"output {spec.output!r} is not a tensor")
    letters = spec.layout.split()
    if len(letters) != t.dim():
        raise ReadingError(f"layout {spec.layout!r} for a {t.dim()}-D output")
    t = t.detach().cpu().float()
    batch = [i for i, c in enumerate(letters) if c in "nf"]
    s_axes = [i for i, c in enumerate(letters) if c == "s"]
    u_axes = [i for i, c in enumerate(letters) if c == "u"]
    r_axes = [i for i, c in enumerate(letters) if c == "r"]
    if len(batch) != 1 or not u_axes or len(s_axes) > 2:
        raise ReadingError(f"layout {spec.layout!r} has no reading")
    x = t.permute(batch + s_axes + u_axes + r_axes)
    if r_axes:
        flat = x.flatten(len(batch + s_axes + u_axes))
        x = flat.mean(-1) if spec.reduce == "mean" else flat.amax(-1)
    B = x.shape[0]
    if len(s_axes) == 2:  # a 2-D map: pixels are the symbols
        h, w = x.shape[1:3]
        x = x.flatten(3)  # (B, h, w, U)
        if image_hw is not None and (h, w) != tuple(image_hw):
            if not resize:
                raise ReadingError(f"map {(h, w)} is not the image's {image_hw}")
            m = x.permute(0, 3, 1, 2)  # the contract resizes bilinearly, corners not aligned
            m = F.interpolate(m, size=tuple(image_hw), mode="bilinear", align_corners=False)
            x = m.permute(0, 2, 3, 1)
        x = x.flatten(1, 2)
    elif len(s_axes) == 1:
        x = x.flatten(2)
    else:
        x = x.flatten(1)[:, None, :]  # a record-level reading: one position
    x = x.double().numpy()
    if letters[batch[0]] == "f":  # frames of all records, in record order
        if x.shape[1] != 1 or B != sum(counts):
            raise ReadingError(f"{B} frames for {sum(counts)} symbols")
        ends = np.cumsum(counts)
        return [x[e - c : e, 0] for c, e in zip(counts, ends, strict=True)]
    if B != len(counts):
        raise ReadingError(f"{B} rows for {len(counts)} records")
    if x.shape[1] - prefix != max(counts):
        raise ReadingError(f"{x.shape[1]} positions (prefix {prefix}) for {max(counts)} symbols")
    return [x[i, prefix : prefix + c] for i, c in enumerate(counts)]


def replay_rnn(
    mod: nn.RNNBase, x: torch.Tensor, layer: int, cell: bool, counts: Sequence[int]
) -> list[np.ndarray]:
    """Layer ``layer``'s outputs (or LSTM cell states) per record, stepped by hand.

    ``x`` is the module's input as it received it; each layer runs as explicit
    ``LSTMCell``/``GRUCell``/``RNNCell`` steps over time, both directions when bidirectional.
    """
    if cell and mod.bidirectional:
        raise ReadingError("cell states of a bidirectional layer have no contract reading")
    seq = x.detach().float() if mod.batch_first else x.detach().float().transpose(0, 1)
    dirs = 2 if mod.bidirectional else 1
    cells_out = None
    for k in range(layer + 1):
        outs = []
        for d in range(dirs):
            sfx = f"_l{k}" + ("_reverse" if d else "")
            h_seq, c_seq = _steps(mod, seq.flip(1) if d else seq, sfx)
            outs.append(h_seq.flip(1) if d else h_seq)
            cells_out = c_seq
        seq = torch.cat(outs, -1)
    y = cells_out if cell else seq
    return [y[i, :c].double().numpy() for i, c in enumerate(counts)]


def _steps(mod: nn.RNNBase, seq: torch.Tensor, sfx: str) -> tuple[torch.Tensor, Any]:
    w_ih, w_hh = getattr(mod, "weight_ih" + sfx), getattr(mod, "weight_hh" + sfx)
    b_ih = getattr(mod, "bias_ih" + sfx) if mod.bias else None
    b_hh = getattr(mod, "bias_hh" + sfx) if mod.bias else None
    B, H = seq.shape[0], mod.hidden_size
    h = seq.new_zeros(B, H)
    c = seq.new_zeros(B, H)
    hs, cs = [], []
    with torch.no_grad():
        for t in range(seq.shape[1]):
            xt = seq[:, t]
            gi = xt @ w_ih.float().T + (b_ih.float() if b_ih is not None else 0)
            gh = h @ w_hh.float().T + (b_hh.float() if b_hh is not None else 0)
            if isinstance(mod, nn.LSTM):
                i, f, g, o = (gi + gh).chunk(4, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            elif isinstance(mod, nn.GRU):
                ri, zi, ni = gi.chunk(3, -1)
                rh, zh, nh = gh.chunk(3, -1)
                r, z = torch.sigmoid(ri + rh), torch.sigmoid(zi + zh)
                n = torch.tanh(ni + r * nh)
                h = (1 - z) * n + z * h
            else:
                act = torch.tanh if mod.nonlinearity == "tanh" else torch.relu
                h = act(gi + gh)
            hs.append(h)
            cs.append(c)
    return torch.stack(hs, 1), torch.stack(cs, 1)
