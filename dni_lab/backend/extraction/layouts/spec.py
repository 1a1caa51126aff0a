"""A layout: which axis of a module's output holds records, symbols and units.

A layout is written as one letter per axis of the output tensor, separated by spaces:

``n``
    records (the batch axis);
``s``
    a symbol axis; two ``s`` axes are a 2-D map whose pixels are the symbols
    (row-major), resized to an image record's height and width when the model asks;
``u``
    a units axis; several are flattened row-major (heads × head dims: unit
    ``h * d_head + d``);
``r``
    an axis inside one symbol, reduced with ``reduce="mean"`` or ``"max"``
    (a spectrogram's frequencies when its time steps are the symbols);
``f``
    frames as symbols: the batch axis holds every record's frames one after the
    other, record ``i`` contributing ``symbols(record_i)`` of them.

The same object reads a view ``(records, symbols, units)`` out of the tensor and
writes forced values back into exactly the axes it read, so ablation acts on what
scoring scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ...errors import LayerError
from .outputs import pick

_LETTERS = frozenset("nsurf")
_REDUCE = ("mean", "max")


@dataclass(frozen=True)
class Layout:
    """How one module output maps onto (records, symbols, units).

    Parameters
    ----------
    spec : str
        One letter per axis (``"n s u"``, ``"n u s"``, ``"s n u"``, ``"n u s s"``,
        ``"n s u u"``, ``"n u r s"``, ``"f u"``); see the module docstring.
    reduce : {"mean", "max"}, optional
        How ``r`` axes are reduced; required when the spec has one.
    output : int or str, optional
        Which tensor of a tuple, dict, dataclass or ``ModelOutput`` output is read
        (an index or a key/attribute); the first tensor by default.

    Examples
    --------
    >>> Layout("n u s").axes
    ('n', 'u', 's')
    """

    spec: str
    reduce: str | None = None
    output: int | str | None = None

    def __post_init__(self) -> None:
        axes = tuple(self.spec.split())
        bad = [a for a in axes if a not in _LETTERS]
        if bad or not axes:
            raise LayerError(
                f"layout {self.spec!r}: use one letter per axis from n (records), s (symbols), "
                f"u (units), r (reduced inside a symbol), f (frames), e.g. 'n u s'."
            )
        batch = axes.count("n") + axes.count("f")
        if batch != 1:
            raise LayerError(
                f"layout {self.spec!r} needs exactly one batch axis: 'n' (records) or 'f' "
                "(every record's frames, one after the other)."
            )
        if axes.count("s") > 2 or ("f" in axes and "s" in axes):
            raise LayerError(
                f"layout {self.spec!r}: at most two 's' axes (a 2-D map), and none beside 'f' "
                "(with frames as symbols each frame is one symbol)."
            )
        if "r" in axes and self.reduce not in _REDUCE:
            raise LayerError(
                f"layout {self.spec!r} has an 'r' axis; pass reduce='mean' or reduce='max' "
                "to say how it is reduced inside a symbol."
            )
        if self.reduce is not None and self.reduce not in _REDUCE:
            raise LayerError(f"reduce={self.reduce!r}: use 'mean' or 'max'.")

    @property
    def axes(self) -> tuple[str, ...]:
        """The letters, one per axis."""
        return tuple(self.spec.split())

    @property
    def ndim(self) -> int:
        """The number of axes the output tensor must have."""
        return len(self.axes)

    def __str__(self) -> str:
        extra = f", reduce={self.reduce!r}" if self.reduce else ""
        extra += f", output={self.output!r}" if self.output is not None else ""
        return f"Layout({self.spec!r}{extra})" if extra else repr(self.spec)

    # -- reading ------------------------------------------------------------
    def select(self, out: Any, where: str) -> torch.Tensor:
        """The tensor this layout reads from a module's output (:func:`.outputs.pick`)."""
        if self.output is None:
            return first_tensor(out, where)
        return pick(out, self.output, where, self.spec)

    def width(self, shape: torch.Size) -> int:
        """Units per symbol for an output of ``shape``."""
        return math.prod(int(n) for a, n in zip(self.axes, shape, strict=True) if a == "u")

    def check(self, t: torch.Tensor, where: str) -> None:
        """Raise when ``t`` cannot have this layout."""
        if t.dim() != self.ndim:
            raise LayerError(
                f"{where}: layout {self} has {self.ndim} axes but the output has shape "
                f"{tuple(t.shape)}; declare a layout with one letter per axis."
            )

    def view(self, t: torch.Tensor, counts: list[int], image_hw: tuple[int, int] | None,
             where: str) -> torch.Tensor:
        """``t`` as ``(records, positions, units)``; positions are symbol slots.

        ``counts`` are the records' symbol counts (used by frames); ``image_hw`` resizes
        a 2-D map's pixels to the records' image size when given.
        """
        self.check(t, where)
        axes = self.axes
        order = _order(axes)
        x = t.permute(*order)  # batch, s..., r..., u...
        nb, ns, nr = 1, axes.count("s"), axes.count("r")
        if nr:
            dims = tuple(range(nb + ns, nb + ns + nr))
            x = x.float().mean(dims) if self.reduce == "mean" else x.amax(dims)
        if "f" in axes:
            return _frames_to_records(x.reshape(x.shape[0], -1), counts, where)
        if ns == 2:
            if image_hw is not None and tuple(x.shape[1:3]) != image_hw:
                # interpolate wants channels first: (R, H, W, U...) -> (R, U, H, W) and back
                y = x.reshape(*x.shape[:3], -1).movedim(-1, 1).float()
                y = F.interpolate(y, size=image_hw, mode="bilinear", align_corners=False)
                x = y.movedim(1, -1)
            x = x.flatten(1, 2)
        elif ns == 0:
            x = x.unsqueeze(1)  # one vector per record: one position
        return x.reshape(x.shape[0], x.shape[1], -1)

    def map_units(self, t: torch.Tensor, fn: Any, where: str) -> torch.Tensor:
        """``t`` with ``fn`` applied to each symbol's units vector, axes put back.

        ``fn`` maps ``(..., units)`` to the same shape (a feature set's reconstruction);
        a ``Conv2d`` map's channels are its units at every pixel.
        """
        self.check(t, where)
        order = _order(self.axes)
        x = t.permute(*order)
        n_u = self.axes.count("u")
        lead = x.shape[: x.dim() - n_u]
        y = fn(x.reshape(*lead, -1)).reshape(x.shape)
        return y.permute(*sorted(range(len(order)), key=order.__getitem__))

    # -- writing ------------------------------------------------------------
    def write(self, t: torch.Tensor, idx: torch.Tensor, values: torch.Tensor | float,
              counts: list[int] | None, where: str, prefix: int = 0) -> torch.Tensor:
        """A copy of ``t`` whose units ``idx`` hold ``values`` on exactly the axes read.

        ``values`` is a constant or ``(records, positions, len(idx))`` for the positions
        the view has (before any resize; a resized map takes constants only). Axes
        reduced by ``r`` take the value at every one of their positions; the first
        ``prefix`` positions (a BOS token) keep their values.
        """
        self.check(t, where)
        axes = self.axes
        order = _order(axes)
        x = t.clone()
        v = x.permute(*order)  # a view: writing into it writes into x
        nb, ns, nr = 1, axes.count("s"), axes.count("r")
        ushape = v.shape[nb + ns + nr:]
        cols = torch.zeros(math.prod(ushape) or 1, dtype=torch.bool, device=x.device)
        cols[idx.to(x.device)] = True
        cols = cols.view(*ushape) if ushape else cols
        value = torch.as_tensor(values, dtype=x.dtype, device=x.device)
        pos_shape = v.shape[nb:nb + ns] if ns else ()
        if value.dim() == 0 and not prefix:
            v[(..., *_mask_index(cols, len(ushape)))] = value
            return x
        if ns == 2 and value.dim() == 3 and value.shape[1] != math.prod(pos_shape):
            raise LayerError(
                f"{where}: forced values give {value.shape[1]} pixels for its "
                f"{tuple(pos_shape)} map (a map resized to the image when read takes a "
                "constant only); pass a constant or one value per map pixel."
            )
        if prefix:
            if ns != 1 or nr:
                raise LayerError(
                    f"{where}: prefix= needs a layout with one 's' axis and no 'r' axis."
                )
            kept = v.flatten(nb + ns)[:, :prefix][..., idx.to(x.device)]
            rest = value.expand(v.shape[0], pos_shape[0] - prefix, len(idx)) \
                if value.dim() == 0 else value
            value = torch.cat([kept.to(x.dtype), rest[:, : pos_shape[0] - prefix]], 1)
        if "f" in axes:
            value = _records_to_frames(value, counts or [], where)
        n_pos = math.prod(pos_shape) if pos_shape else 1
        if value.dim() != 3 or value.shape[0] != v.shape[0] or value.shape[2] != len(idx):
            raise LayerError(
                f"{where}: forced values of shape {tuple(value.shape)} do not fit {v.shape[0]} "
                f"rows and {len(idx)} units; pass a constant or a (records, symbols, units) tensor."
            )
        if value.shape[1] < n_pos:
            value = torch.cat([value, value.new_zeros(value.shape[0], n_pos - value.shape[1],
                                                      value.shape[2])], 1)
        value = value[:, :n_pos].reshape(v.shape[0], *pos_shape, len(idx))
        for _ in range(nr):
            value = value.unsqueeze(nb + ns)
        # index the unit axes of the permuted view itself: flattening them could copy
        # (units on axes that are not adjacent, as in (batch, head, pos, d_head)), and a
        # write into a copy would never reach the output
        if not ushape:
            v[...] = value[..., 0].expand_as(v).to(x.dtype)
            return x
        where_u = torch.unravel_index(idx.to(x.device), tuple(ushape))
        target_shape = (*v.shape[: nb + ns + nr], len(idx))
        v[(..., *where_u)] = value.expand(target_shape).to(x.dtype)
        return x


def _order(axes: tuple[str, ...]) -> list[int]:
    """Axis positions in the order batch, symbols, reduced, units."""
    rank = {"n": 0, "f": 0, "s": 1, "r": 2, "u": 3}
    return sorted(range(len(axes)), key=lambda i: (rank[axes[i]], i))


def _mask_index(cols: torch.Tensor, n_u: int) -> tuple:
    if n_u == 0:
        return ()
    return tuple(torch.nonzero(cols, as_tuple=True))


def _frames_to_records(x: torch.Tensor, counts: list[int], where: str) -> torch.Tensor:
    """``(frames, units)`` of records one after the other → ``(R, T, units)``, zero-padded."""
    if x.shape[0] != sum(counts):
        raise LayerError(
            f"{where}: frames as symbols, but the batch holds {x.shape[0]} frames for records "
            f"of {sum(counts)} symbols; encode() must emit exactly symbols(record) frames per "
            "record, one record after the other."
        )
    T = max(counts) if counts else 0
    out = x.new_zeros(len(counts), T, x.shape[-1])
    for i, part in enumerate(torch.split(x, counts)):
        out[i, : len(part)] = part
    return out


def _records_to_frames(value: torch.Tensor, counts: list[int], where: str) -> torch.Tensor:
    if value.dim() != 3 or value.shape[0] != len(counts):
        raise LayerError(f"{where}: forced values must be (records, symbols, units) for frames.")
    parts = [value[i, :c] for i, c in enumerate(counts)]
    return torch.cat(parts)[:, None, :] if parts else value[:0, :1]


def first_tensor(out: Any, where: str = "the module") -> torch.Tensor:
    """The first tensor of an output: a tensor, tuple/list, dict, dataclass or ModelOutput."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out:
        return first_tensor(out[0], where)
    if isinstance(out, Mapping) and out:
        return first_tensor(next(iter(out.values())), where)
    fields = getattr(out, "__dataclass_fields__", None)
    if fields:
        for name in fields:
            value = getattr(out, name, None)
            if isinstance(value, torch.Tensor):
                return value
    raise LayerError(
        f"{where}: its output ({type(out).__name__}) holds no tensor to read units from."
    )


def as_layout(value: Any, where: str) -> Layout:
    """A declared layout: a :class:`Layout` or its spec string."""
    if isinstance(value, Layout):
        return value
    if isinstance(value, str):
        return Layout(value)
    raise LayerError(f"{where}: a layout is a string such as 'n u s' or dl.Layout(...), "
                     f"got {type(value).__name__}.")
