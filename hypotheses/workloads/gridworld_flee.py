"""The grid-world CNN imitating an agent that flees the ghost: a policy that needs a ghost detector.

:mod:`~hypotheses.workloads.gridworld_cnn` imitates :func:`gw.agent_move`, whose
move depends on the ghost only when the ghost sits next to its path, and it
reads features only at PacMan's cell; no unit of it tracks the ghost (notebook
06's first version). Here the agent is :func:`gw.flee_move`: with the ghost
within ``radius`` = 8 maze steps (about half of the maps) it steps away from
the ghost, otherwise it heads for the nearest dot as before, so the ghost
changes the correct move in about one map in six and must be *located* in
every map to know which case applies.

The network is the same :class:`~.gridworld_cnn.GridCNN` with ``head="pool"``:
besides the PacMan-cell read-out, the head reads each ``conv3`` channel's
maximum over the grid. Why: with the read-out alone, the ghost matters only
through what the dilated convolutions carry to PacMan's cell; with the pooled
features, a channel that fires *at the ghost's cell* (and knows from its
receptive field where PacMan stands relative to it) reaches the move directly,
so locating the ghost pays off wherever it is. ``blind=True`` trains the same
network with the ghost's cell shown as empty: the accuracy a policy without the
ghost reaches on these maps.

Training and storage are :mod:`~.gridworld_cnn`'s (deterministic under
``seed``, one checkpoint per epoch). Accuracy numbers live in notebook 06 and
``docs/models.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from hypotheses import gridworld as gw

from . import gridworld_cnn as cnn

NAME = "gridworld-flee-cnn"
LAYERS = cnn.LAYERS
RADIUS = 8
QUICK = {"train_episodes": 60, "test_episodes": 20, "epochs": 8, "width": 16}
FULL = {"train_episodes": 160, "test_episodes": 40, "epochs": 12, "width": 32}
encode = cnn.encode


def config(
    quick: bool = False, epochs: int | None = None, seed: int = 0, blind: bool = False
) -> dict[str, Any]:
    """Everything that determines the trained weights (see :func:`load`)."""
    cfg = dict(QUICK if quick else FULL)
    if epochs is not None:
        cfg["epochs"] = epochs
    return {
        **cfg, "seed": seed, "avoid": 2, "batch": 128, "lr": 5e-3, "version": 2,
        "policy": "flee", "radius": RADIUS, "head": "pool", "blind": blind,
    }  # fmt: skip


def data(quick: bool = False, seed: int = 0, split: str = "test") -> gw.GridData:
    """The episodes a model of this ``quick``/``seed`` was trained ("train") or tested on."""
    return cnn._splits(config(quick, seed=seed))[split]


def load(
    quick: bool = False,
    epochs: int | None = None,
    seed: int = 0,
    blind: bool = False,
    directory: Any = None,
) -> tuple[nn.Module, Callable[[Sequence[Any]], torch.Tensor], dict[str, Any]]:
    """The trained CNN, its ``encode`` function and its metadata (accuracy, history).

    As :func:`.gridworld_cnn.load` (``quick``: 60 training episodes, 16 channels
    and 8 epochs instead of 160, 32 and 12), plus ``blind``: the ghost-blind
    baseline, the same network and data with the ghost's cell shown as empty.
    """
    module, meta = cnn.load_config(NAME, config(quick, epochs, seed, blind), directory)
    return module, encode, meta


def load_checkpoints(
    quick: bool = False, epochs: int | None = None, seed: int = 0, directory: Any = None
) -> list[tuple[int, nn.Module]]:
    """``(epoch, model)`` after every epoch of one training run, epoch 0 untrained."""
    return cnn.checkpoints_config(NAME, config(quick, epochs, seed), directory)


def _mazes(frames: Sequence[Any]) -> list[gw.Maze]:
    """The maze of each map, built once per wall layout (all-pairs paths cost milliseconds)."""
    built: dict[bytes, gw.Maze] = {}
    out = []
    for f in frames:
        walls = np.asarray(f) == gw.WALL
        key = walls.tobytes()
        if key not in built:
            built[key] = gw.build_maze(walls)
        out.append(built[key])
    return out


def ghost_distance(frames: Sequence[Any]) -> np.ndarray:
    """Maze distance from PacMan to the ghost in each map."""
    out = np.empty(len(frames), dtype=np.int64)
    for i, (f, maze) in enumerate(zip(frames, _mazes(frames), strict=True)):
        grid = np.asarray(f)
        g, p = (maze.index.reshape(-1)[np.argmax(grid == v)] for v in (gw.GHOST, gw.PACMAN))
        out[i] = maze.dist[g, p]
    return out


def ghost_decides(frames: Sequence[Any], radius: int = RADIUS) -> np.ndarray:
    """Maps whose fleeing move changes when the ghost is taken off the map."""
    out = np.zeros(len(frames), dtype=bool)
    for i, (f, maze) in enumerate(zip(frames, _mazes(frames), strict=True)):
        grid = np.asarray(f)
        gone = np.where(grid == gw.GHOST, gw.EMPTY, grid)
        out[i] = gw.flee_move(grid, maze, radius) != gw.flee_move(gone, maze, radius)
    return out


def labels(frames: Sequence[gw.Frame]) -> np.ndarray:
    """The agent's recorded move in each frame."""
    return np.array([f.episode.moves[f.t] for f in frames], dtype=np.int64)


def move_accuracy(records: list[Any], output: torch.Tensor, device: torch.device):
    """``dl.verify.ablation``'s ``evaluate``: correct moves and frames in a batch."""
    y = torch.as_tensor(labels(records), device=device)
    return float((output.argmax(1) == y).sum()), len(records)


def accuracy(module: nn.Module, frames: Sequence[gw.Frame], blind: bool = False) -> float:
    """Move accuracy of ``module`` on ``frames``; ``blind`` erases the ghost at test time."""
    x = encode(frames)
    if blind:
        x = cnn.erase_ghost(x)
    with torch.no_grad():
        pred = module(x).argmax(1).numpy()
    return float((pred == labels(frames)).mean())


def cell_edits(record: Any, k: int) -> list[tuple[np.ndarray, None]]:
    """Perturbations of a map at cell ``k`` (row-major) for ``dl.verify.RecordRules``.

    On a free cell (empty or dot): move the ghost there (its old cell becomes
    empty), and toggle the dot there. The hypothesis labels them: moving the
    ghost changes ``gw.ghost()`` at ``k`` (treatment), the dot does not (baseline).
    """
    grid = np.array(record, dtype=np.int8)  # a plain copy: no episode, the map alone counts
    r, c = divmod(int(k), grid.shape[1])
    if grid[r, c] not in (gw.EMPTY, gw.DOT):
        return []
    moved = np.where(grid == gw.GHOST, gw.EMPTY, grid).astype(np.int8)
    moved[r, c] = gw.GHOST
    toggled = grid.copy()
    toggled[r, c] = gw.DOT if grid[r, c] == gw.EMPTY else gw.EMPTY
    return [(moved, None), (toggled, None)]
