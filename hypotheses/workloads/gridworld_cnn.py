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

Accuracy on held-out episodes (seed 0; always answering the most frequent move
scores 0.27-0.30): quick 0.92 (6 epochs, about 7 s of one CPU core), full 0.96
(10 epochs, about 75 s). Training runs on one thread (see :func:`~.store.using_threads`).
"""

from __future__ import annotations

import copy
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
    """Three convolutional blocks and a linear head read at PacMan's cell."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.conv1 = ConvBlock(len(gw.CODES), width // 2)
        self.conv2 = ConvBlock(width // 2, width, dilation=2)
        self.conv3 = ConvBlock(width, width, dilation=4)
        self.head = nn.Linear(width + width // 2, len(gw.MOVES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = self.conv1(x)
        h3 = self.conv3(self.conv2(h1))
        at_pacman = x[:, gw.PACMAN : gw.PACMAN + 1]  # (B, 1, H, W) one-hot
        feats = torch.cat([h1, h3], 1)
        return self.head((feats * at_pacman).sum((2, 3)))


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


def _splits(cfg: dict[str, Any]) -> dict[str, gw.GridData]:
    n = cfg["train_episodes"] + cfg["test_episodes"]
    full = gw.generate(n, seed=cfg["seed"], avoid=cfg["avoid"])
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
    model = GridCNN(cfg["width"])
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
    cfg: dict[str, Any], epoch: int, shared: dict[str, Any], directory: Any = None
) -> tuple[nn.Module, dict[str, Any]]:
    """The model after ``epoch`` epochs: from the store, or from one shared training run."""

    def train(module: nn.Module) -> dict[str, Any]:
        if "states" not in shared:
            with using_threads(1):
                shared["states"], shared["metrics"] = _train_all(cfg)
        module.load_state_dict(shared["states"][epoch])
        return shared["metrics"][epoch]

    return cached_model(
        NAME, {**cfg, "checkpoint": epoch}, lambda: GridCNN(cfg["width"]), train, directory
    )


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
    cfg, shared = config(quick, epochs, seed), {}
    module, meta = _checkpoint(cfg, cfg["epochs"], shared, directory)
    if "states" in shared:  # just trained: store the other epochs too, at no extra cost
        for e in range(cfg["epochs"]):
            _checkpoint(cfg, e, shared, directory)
    return module, encode, meta


def load_checkpoints(
    quick: bool = False, epochs: int | None = None, seed: int = 0, directory: Any = None
) -> list[tuple[int, nn.Module]]:
    """``(epoch, model)`` after every epoch of one training run, epoch 0 untrained."""
    cfg, shared = config(quick, epochs, seed), {}
    return [(e, _checkpoint(cfg, e, shared, directory)[0]) for e in range(cfg["epochs"] + 1)]
