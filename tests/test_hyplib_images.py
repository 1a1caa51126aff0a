"""Pixel masks over (H, W) and (C, H, W) arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses.images import (
    Box,
    BoxAround,
    CellEquals,
    bounding_box,
    box_mask,
    cells_equal,
    dilate,
    n_pixels,
)


def _grid(rows: list[str]) -> np.ndarray:
    return np.array([[int(c) for c in r] for r in rows])


G = _grid(["0000", "0700", "0000", "0003"])


def test_cells_equal_2d_and_3d() -> None:
    assert (
        cells_equal(G, 7).astype(int).tolist() == _grid(["0000", "0100", "0000", "0000"]).tolist()
    )
    both = cells_equal(G, [7, 3]).astype(int)
    assert both.sum() == 2 and both[3, 3] == 1
    one_hot = np.eye(8)[G].transpose(2, 0, 1)  # (8, 4, 4)
    np.testing.assert_array_equal(cells_equal(one_hot, 1, channel=7), G == 7)
    vec = np.zeros(8)
    vec[3] = 1
    np.testing.assert_array_equal(cells_equal(one_hot, vec), G == 3)
    with pytest.raises(ValueError, match="channel=k"):
        cells_equal(one_hot, 1)
    with pytest.raises(ValueError, match="shape"):
        cells_equal(np.zeros(5), 0)


def test_dilate_by_hand() -> None:
    m = G == 7
    assert dilate(m, 1).astype(int).tolist() == _grid(["1110", "1110", "1110", "0000"]).tolist()
    assert (
        dilate(m, 1, "manhattan").astype(int).tolist()
        == _grid(["0100", "1110", "0100", "0000"]).tolist()
    )
    corner = dilate(G == 3, 2).astype(int)  # clipped at the border
    assert corner.tolist() == _grid(["0000", "0111", "0111", "0111"]).tolist()
    assert dilate(m, 0).tolist() == m.tolist()
    with pytest.raises(ValueError, match="metric"):
        dilate(m, 1, "euclid")


def test_boxes() -> None:
    assert box_mask((3, 4), 1, 1, 2, 2).astype(int).tolist() == [
        [0, 0, 0, 0],
        [0, 1, 1, 0],
        [0, 1, 1, 0],
    ]
    assert bounding_box(G > 0).sum() == 9  # rows 1..3, cols 1..3
    assert bounding_box(G > 0, pad=1).sum() == 16
    assert not bounding_box(G > 9).any()
    assert Box(0, 0, 0, 1).mask(G).sum() == 2
    assert BoxAround(7, pad=1).mask(G).sum() == 9


def test_hypothesis_objects() -> None:
    h = CellEquals(7, radius=1)
    assert h.name == "cell_7_r1" and h.kind == "binary"
    flat = h(G)
    assert flat.shape == (16,) and flat.dtype == np.float32
    np.testing.assert_array_equal(flat, dilate(G == 7, 1).reshape(-1))  # row-major pixels
    np.testing.assert_array_equal(h(torch.tensor(G)), flat)  # tensors are records too
    arr = evaluate_family(h, G, n_pixels(G), 0)
    assert arr.shape == (16, 1)
    assert n_pixels(np.zeros((6, 15, 19))) == 285
    assert CellEquals(1, channel=2).name == "cell_c2_1"
    # parameters are part of the fingerprint
    fps = {CellEquals(7).fingerprint(), CellEquals(7, radius=1).fingerprint()}
    fps |= {CellEquals(3).fingerprint(), CellEquals(7, radius=1, metric="manhattan").fingerprint()}
    assert len(fps) == 4
    assert CellEquals(7).fingerprint() == CellEquals(7).fingerprint()
    assert Box(0, 0, 1, 1).fingerprint() != Box(0, 0, 1, 2).fingerprint()
