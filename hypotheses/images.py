"""Mask hypotheses over image and grid arrays: one value per pixel.

A record is an array of shape ``(H, W)`` (a grid of cell codes, a grey image)
or ``(C, H, W)`` (channels first, as PyTorch convolutions read them). A symbol
is a pixel, in row-major order, so a record has ``H * W`` symbols
(:func:`n_pixels`, which is also ``dl.Model``'s default for arrays).
Convolutional layers that keep the ``H x W`` grid then align one activation
per pixel with these masks.

Each hypothesis is a :class:`~dni_lab.backend.hypothesis.hypotheses.HypothesisFamily` of one
binary signal whose parameters enter its fingerprint; calling it returns the
flat mask, ``mask(record)`` the ``(H, W)`` one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dni_lab.backend.hypothesis.hypotheses import HypothesisFamily


def as_array(record: Any) -> np.ndarray:
    """``record`` as a plain ``(H, W)`` or ``(C, H, W)`` numpy array (tensors too)."""
    if hasattr(record, "detach"):
        record = record.detach().cpu().numpy()
    arr = np.asarray(record)
    if arr.ndim not in (2, 3):
        raise ValueError(f"image records are (H, W) or (C, H, W) arrays, got shape {arr.shape}.")
    return arr


def n_pixels(record: Any) -> int:
    """Number of symbols of an image record: ``H * W``."""
    shape = as_array(record).shape
    return int(shape[-2] * shape[-1])


def dilate(mask: np.ndarray, radius: int = 1, metric: str = "chebyshev") -> np.ndarray:
    """Grow a boolean ``(H, W)`` mask to every cell within ``radius`` of a True cell.

    ``metric="chebyshev"`` grows squares (the 8-neighbourhood at radius 1),
    ``"manhattan"`` grows diamonds (the 4-neighbourhood at radius 1).
    """
    if metric not in ("chebyshev", "manhattan"):
        raise ValueError(f"dilate: unknown metric {metric!r}; use chebyshev or manhattan.")
    mask = np.asarray(mask, dtype=bool)
    if radius <= 0:
        return mask.copy()
    h, w = mask.shape
    padded = np.pad(mask, radius)
    out = np.zeros_like(mask)
    # OR of shifted copies: radius is small, so (2r+1)^2 slices beat a convolution.
    for dr in range(-radius, radius + 1):
        for dc in range(-radius, radius + 1):
            if metric == "manhattan" and abs(dr) + abs(dc) > radius:
                continue
            out |= padded[radius + dr : radius + dr + h, radius + dc : radius + dc + w]
    return out


def box_mask(shape: tuple[int, int], top: int, left: int, bottom: int, right: int) -> np.ndarray:
    """Boolean ``(H, W)`` mask of rows ``top..bottom`` and columns ``left..right`` (inclusive)."""
    out = np.zeros(shape, dtype=bool)
    out[max(top, 0) : bottom + 1, max(left, 0) : right + 1] = True
    return out


def bounding_box(mask: np.ndarray, pad: int = 0) -> np.ndarray:
    """The smallest box holding every True cell of ``mask``, grown by ``pad`` cells."""
    rows, cols = np.nonzero(mask)
    if len(rows) == 0:
        return np.zeros(np.shape(mask), dtype=bool)
    return box_mask(
        np.shape(mask), rows.min() - pad, cols.min() - pad, rows.max() + pad, cols.max() + pad
    )


def cells_equal(record: Any, value: Any, channel: int | None = None) -> np.ndarray:
    """Boolean ``(H, W)`` mask of the cells equal to ``value``.

    For ``(H, W)`` records ``value`` is a scalar or a sequence of accepted
    values. For ``(C, H, W)`` records pass ``channel`` (compare that plane) or a
    ``value`` of length ``C`` (compare the whole channel vector of each pixel).
    """
    arr = as_array(record)
    if arr.ndim == 3 and channel is not None:
        arr = arr[channel]
    if arr.ndim == 2:
        return np.isin(arr, np.asarray(value)) if np.ndim(value) else arr == value
    vec = np.asarray(value)
    if vec.shape != (arr.shape[0],):
        raise ValueError(
            f"record has {arr.shape[0]} channels: pass channel=k, or a value of length "
            f"{arr.shape[0]} to compare whole pixels (got {value!r})."
        )
    return (arr == vec[:, None, None]).all(axis=0)


class MaskHypothesis(HypothesisFamily):
    """Base class: a binary per-pixel hypothesis defined by :meth:`mask`."""

    kind = "binary"

    def mask(self, record: Any) -> np.ndarray:
        """Boolean ``(H, W)`` mask of ``record``."""
        raise NotImplementedError

    def signals(self) -> list[str]:
        return [self.name]

    def evaluate(self, record: Any) -> dict[str, np.ndarray]:
        return {self.name: self(record)}

    def __call__(self, record: Any) -> np.ndarray:  # type: ignore[override]
        return self.mask(record).reshape(-1).astype(np.float32)


class CellEquals(MaskHypothesis):
    """Cells equal to ``value`` (see :func:`cells_equal`), optionally dilated.

    Parameters
    ----------
    value : scalar or sequence
        Cell code(s), or a whole pixel's channel vector.
    channel : int, optional
        Plane to compare in ``(C, H, W)`` records.
    radius : int
        Dilation radius (0: the cells themselves).
    metric : {"chebyshev", "manhattan"}
        Dilation neighbourhood.
    name : str, optional
        Hypothesis name; derived from the parameters by default.
    """

    def __init__(
        self,
        value: Any,
        channel: int | None = None,
        radius: int = 0,
        metric: str = "chebyshev",
        name: str | None = None,
    ) -> None:
        self.value, self.channel, self.radius, self.metric = value, channel, radius, metric
        self.name = name or _auto_name("cell", value, channel, radius)

    def mask(self, record: Any) -> np.ndarray:
        return dilate(cells_equal(record, self.value, self.channel), self.radius, self.metric)


class Box(MaskHypothesis):
    """A fixed box: rows ``top..bottom``, columns ``left..right``, inclusive."""

    def __init__(self, top: int, left: int, bottom: int, right: int, name: str | None = None):
        self.top, self.left, self.bottom, self.right = top, left, bottom, right
        self.name = name or f"box_{top}_{left}_{bottom}_{right}"

    def mask(self, record: Any) -> np.ndarray:
        shape = as_array(record).shape[-2:]
        return box_mask(shape, self.top, self.left, self.bottom, self.right)


class BoxAround(MaskHypothesis):
    """The bounding box of the cells equal to ``value``, grown by ``pad`` cells."""

    def __init__(
        self, value: Any, channel: int | None = None, pad: int = 0, name: str | None = None
    ) -> None:
        self.value, self.channel, self.pad = value, channel, pad
        self.name = name or _auto_name("box_around", value, channel, pad)

    def mask(self, record: Any) -> np.ndarray:
        return bounding_box(cells_equal(record, self.value, self.channel), self.pad)


def _auto_name(prefix: str, value: Any, channel: int | None, grow: int) -> str:
    vals = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    name = f"{prefix}_" + "_".join(str(v) for v in vals)
    if channel is not None:
        name = f"{prefix}_c{channel}_" + name[len(prefix) + 1 :]
    return name + (f"_r{grow}" if grow else "")
