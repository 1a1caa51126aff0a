"""A small CNN that plays the grid world by imitating the scripted agent.

The network reads a map as six one-hot planes (one per cell code, see
:func:`hypotheses.gridworld.one_hot`) and predicts the agent's next move
(←↑→↓). Its convolutional blocks ``conv1``..``conv3`` keep the 15 x 19 grid
(padding, no pooling), so a unit is a channel and its behavior has one value
per map cell, aligned with the pixel masks of :mod:`hypotheses.images` and
:mod:`hypotheses.gridworld` (``dl.Model`` counts ``H * W`` symbols for arrays).
The head reads the last block's features at PacMan's cell: the move depends on
what surrounds PacMan, wherever he is.

Training is deterministic under ``seed`` and cached with
:func:`~hypotheses.workloads.store.cached_model`; one training run stores a
checkpoint per epoch (epoch 0 is the untrained network) for "when does the
ghost detector appear?" studies (:func:`load_checkpoints`).

The same machinery (:func:`load_config`, :func:`checkpoints_config`) trains
the variants of :mod:`~hypotheses.workloads.gridworld_flee`: another agent to
imitate (``policy``), a head that also pools over the grid (``head="pool"``)
and a ghost-blind baseline (``blind``); configs without those keys are this
module's, stored under the same keys as before.

Accuracy on held-out episodes (seed 0; always answering the most frequent move
scores 0.27-0.30): quick 0.92 (6 epochs, about 7 s of one CPU core), full 0.96
(10 epochs, about 75 s). Training runs on one thread (see :func:`~.store.using_threads`).
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from hypotheses import gridworld as gw

from .store import cached_model, using_threads

NAME = "gridworld-cnn"
LAYERS = ("conv1", "conv2", "conv3")
QUICK = {"train_episodes": 40, "test_episodes": 15, "epochs": 6, "width": 16}
FULL = {"train_episodes": 120, "test_episodes": 40, "epochs": 10, "width": 32}


class ConvBlock(nn.Module):
    """3x3 convolution (optionally dilated) and ReLU; the grid keeps its size."""

    def __init__(self, c_in: int, c_out: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=dilation, dilation=dilation)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class GridCNN(nn.Module):
    """Three convolutional blocks and a linear head read at PacMan's cell.

    Parameters
    ----------
    width : int
        Channels of ``conv2``/``conv3`` (``conv1`` has half).
    head : {"pacman", "pool"}
        "pacman" reads ``conv1`` and ``conv3`` at PacMan's cell; "pool" also
        reads the global max over the grid of every ``conv3`` channel, so a
        feature computed anywhere (at the ghost's cell, say) reaches the move.
    blind : bool
        Show the ghost's cell as empty (:func:`erase_ghost`): the "ghost-blind" baseline of
        :mod:`~hypotheses.workloads.gridworld_flee`.
    """

    def __init__(self, width: int = 32, head: str = "pacman", blind: bool = False) -> None:
        super().__init__()
        if head not in ("pacman", "pool"):
            raise ValueError(f"GridCNN: head must be 'pacman' or 'pool', not {head!r}.")
        self.head_kind, self.blind = head, blind
        self.conv1 = ConvBlock(len(gw.CODES), width // 2)
        self.conv2 = ConvBlock(width // 2, width, dilation=2)
        self.conv3 = ConvBlock(width, width, dilation=4)
        n_in = width + width // 2 + (width if head == "pool" else 0)
        self.head = nn.Linear(n_in, len(gw.MOVES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blind:  # a copy: the caller's batch keeps its ghost
            x = erase_ghost(x)
        h1 = self.conv1(x)
        h3 = self.conv3(self.conv2(h1))
        at_pacman = x[:, gw.PACMAN : gw.PACMAN + 1]  # (B, 1, H, W) one-hot
        feats = (torch.cat([h1, h3], 1) * at_pacman).sum((2, 3))
        if self.head_kind == "pool":
            feats = torch.cat([feats, h3.amax((2, 3))], 1)
        return self.head(feats)


def erase_ghost(x: torch.Tensor) -> torch.Tensor:
    """A copy of one-hot maps ``x`` with the ghost's cell shown as an empty cell.

    Zeroing the ghost's plane alone would still mark its cell (the only cell with no
    code at all), and a "blind" network could find the ghost there.
    """
    x = x.clone()
    x[:, gw.CODES.index("empty")] += x[:, gw.GHOST]
    x[:, gw.GHOST] = 0
    return x


def encode(maps: Sequence[Any]) -> torch.Tensor:
    """A batch of maps as a ``(B, 6, 15, 19)`` float tensor."""
    return torch.from_numpy(gw.one_hot(maps))


def config(quick: bool = False, epochs: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Everything that determines the trained weights."""
    cfg = dict(QUICK if quick else FULL)
    if epochs is not None:
        cfg["epochs"] = epochs
    return {**cfg, "seed": seed, "avoid": 2, "batch": 128, "lr": 5e-3, "version": 1}


def data(quick: bool = False, seed: int = 0, split: str = "test") -> gw.GridData:
    """The episodes a model of this ``quick``/``seed`` was trained ("train") or tested on."""
    return _splits(config(quick, seed=seed))[split]


def agent_of(cfg: dict[str, Any]) -> Callable[[np.ndarray, gw.Maze], int] | None:
    """The scripted agent a config imitates: ``None`` (:func:`gw.agent_move`) or the fleeing one."""
    if cfg.get("policy", "avoid") == "avoid":
        return None
    if cfg["policy"] == "flee":
        return functools.partial(gw.flee_move, radius=cfg["radius"], avoid=cfg["avoid"])
    raise ValueError(f"unknown grid-world policy {cfg['policy']!r}; use 'avoid' or 'flee'.")


def build(cfg: dict[str, Any]) -> GridCNN:
    """An untrained network of the architecture ``cfg`` names."""
    return GridCNN(cfg["width"], cfg.get("head", "pacman"), cfg.get("blind", False))


def _splits(cfg: dict[str, Any]) -> dict[str, gw.GridData]:
    n = cfg["train_episodes"] + cfg["test_episodes"]
    full = gw.generate(n, seed=cfg["seed"], avoid=cfg["avoid"], agent=agent_of(cfg))
    cut = cfg["train_episodes"]  # split by episode: no test map is a neighbour of a train map
    out = {}
    for split, eps in (("train", full.episodes[:cut]), ("test", full.episodes[cut:])):
        frames = [f for e in eps for f in e.frames]
        out[split] = gw.GridData(frames, np.array([m for e in eps for m in e.moves]), eps)
    return out


def _train_all(cfg: dict[str, Any]) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, Any]]]:
    """Train once; return the state and metrics after every epoch (0 = untrained)."""
    start = time.perf_counter()
    splits = _splits(cfg)
    train, test = splits["train"], splits["test"]
    x, y = encode(train.frames), torch.from_numpy(train.moves)
    xt, yt = encode(test.frames), torch.from_numpy(test.moves)
    torch.manual_seed(cfg["seed"])
    model = build(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    majority = float(np.bincount(test.moves, minlength=4).max() / len(test.moves))

    def metrics(epoch: int) -> dict[str, Any]:
        model.eval()
        with torch.no_grad():
            acc = float((model(xt).argmax(1) == yt).float().mean())
        model.train()
        return {
            "epoch": epoch,
            "accuracy": round(acc, 4),
            "majority_rate": round(majority, 4),
            "n_train": len(y),
            "n_test": len(yt),
            "train_seconds": round(time.perf_counter() - start, 2),
            "layers": list(LAYERS),
            "symbols": "pixels of the 15x19 map, row-major",
        }

    states, history = [copy.deepcopy(model.state_dict())], [metrics(0)]
    for epoch in range(1, cfg["epochs"] + 1):
        for idx in torch.randperm(len(y), generator=gen).split(cfg["batch"]):
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        states.append(copy.deepcopy(model.state_dict()))
        history.append(metrics(epoch))
    for h in history:
        h["history"] = [g["accuracy"] for g in history]
    return states, history


def _checkpoint(
    name: str, cfg: dict[str, Any], epoch: int, shared: dict[str, Any], directory: Any = None
) -> tuple[nn.Module, dict[str, Any]]:
    """The model after ``epoch`` epochs: from the store, or from one shared training run."""

    def train(module: nn.Module) -> dict[str, Any]:
        if "states" not in shared:
            with using_threads(1):
                shared["states"], shared["metrics"] = _train_all(cfg)
        module.load_state_dict(shared["states"][epoch])
        return shared["metrics"][epoch]

    return cached_model(name, {**cfg, "checkpoint": epoch}, lambda: build(cfg), train, directory)


def load_config(
    name: str, cfg: dict[str, Any], directory: Any = None
) -> tuple[nn.Module, dict[str, Any]]:
    """The last epoch's model of the run ``cfg``; a fresh run stores every epoch's checkpoint."""
    shared: dict[str, Any] = {}
    module, meta = _checkpoint(name, cfg, cfg["epochs"], shared, directory)
    if "states" in shared:  # just trained: store the other epochs too, at no extra cost
        for e in range(cfg["epochs"]):
            _checkpoint(name, cfg, e, shared, directory)
    return module, meta


def checkpoints_config(
    name: str, cfg: dict[str, Any], directory: Any = None
) -> list[tuple[int, nn.Module]]:
    """``(epoch, model)`` after every epoch of the run ``cfg``, epoch 0 untrained."""
    shared: dict[str, Any] = {}
    return [(e, _checkpoint(name, cfg, e, shared, directory)[0]) for e in range(cfg["epochs"] + 1)]


def load(
    quick: bool = False, epochs: int | None = None, seed: int = 0, directory: Any = None
) -> tuple[nn.Module, Callable[[Sequence[Any]], torch.Tensor], dict[str, Any]]:
    """The trained CNN, its ``encode`` function and its metadata (accuracy, history).

    Parameters
    ----------
    quick : bool
        40 training episodes, 16 channels and 6 epochs instead of 120, 32 and 10.
    epochs : int, optional
        Overrides the quick/full epoch count.
    seed : int
        Seeds the episodes (:func:`data`) and the initialization.
    directory : path, optional
        Model store directory (default ``$DNI_LAB_MODELS``); one training run
        stores every epoch's checkpoint.
    """
    module, meta = load_config(NAME, config(quick, epochs, seed), directory)
    return module, encode, meta


def load_checkpoints(
    quick: bool = False, epochs: int | None = None, seed: int = 0, directory: Any = None
) -> list[tuple[int, nn.Module]]:
    """``(epoch, model)`` after every epoch of one training run, epoch 0 untrained."""
    return checkpoints_config(NAME, config(quick, epochs, seed), directory)
