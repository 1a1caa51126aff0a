"""Outputs of a model whose capture already holds records first (Hugging Face models).

Such a model (``reads_layouts = False``) reads no :class:`~.spec.Layout`: its captured
tensors are ``(records, positions, units)`` sequences, ``(records, channels, h, w)``
maps or ``(records, units)`` vectors by construction, and :func:`gathered_symbols`
turns them into ``(records, symbols, units)``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ...errors import LayerError


def gathered_symbols(
    t: torch.Tensor, records: list[Any], T: int, addr: str, model_name: str, resize: bool
) -> torch.Tensor:
    """A captured output of a model that reads no layouts as ``(R, T, D)``, position t =
    symbol t.

    Parameters
    ----------
    t : torch.Tensor
        ``(R, T', D)`` sequences, ``(R, C, H, W)`` maps (a symbol is a pixel) or ``(R, D)``
        vectors (one position).
    records : list
        The block's records (an image record's height and width size the maps).
    T : int
        The block's longest record's symbols.
    addr, model_name : str
        For the errors.
    resize : bool
        Resize maps to the image's size (``Model(resize=)``).

    Returns
    -------
    torch.Tensor
        ``(R, T, D)``.
    """
    if t.dim() == 4:  # (R, C, h, w) convolutional map: a symbol is a pixel
        shape = getattr(records[0], "shape", None)
        if shape is None or len(shape) < 2:
            raise LayerError(f"layer {addr!r} outputs a 2-D map but the records are not images.")
        H = int(shape[-2])
        W = int(shape[-1])
        if t.shape[-2:] != (H, W):
            if not resize:
                raise LayerError(
                    f"layer {addr!r} outputs maps of {tuple(t.shape[-2:])}, the input is {(H, W)}; "
                    "use Model(..., resize=True) to resize maps to the input."
                )
            t = F.interpolate(t.float(), size=(H, W), mode="bilinear", align_corners=False)
        t = t.flatten(2).transpose(1, 2)
    elif t.dim() == 2:
        t = t[:, None, :]
    elif t.dim() != 3:
        raise LayerError(
            f"layer {addr!r} outputs shape {tuple(t.shape)}; dni_lab reads (R, T, D) sequences, "
            "(R, C, H, W) maps and (R, D) vectors."
        )
    if t.shape[0] != len(records):
        raise LayerError(
            f"layer {addr!r} returned {t.shape[0]} rows for {len(records)} records; if it is "
            "time-major, use batch_first or a module that returns (R, T, D)."
        )
    if t.shape[1] < T:
        raise LayerError(
            f"layer {addr!r} of model {model_name!r} has {t.shape[1]} positions but a record has "
            f"{T} symbols; make encode() emit one position per symbol or pass Model(symbols=...)."
        )
    return t[:, :T]
