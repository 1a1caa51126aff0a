"""SQL auto-completion char-LSTM (DeepBase §6.3).

Records are windows of 30 characters, cut every 5 characters from queries of
the SQL grammar (:mod:`hypotheses.grammars.sql`). The model reads a window and
predicts each next character; the paper's task, the window's last character
from the 29 before it, is the last of those predictions and is reported
separately as ``last_char_accuracy``. 128 units by default; the scalability
benchmark uses ``hidden=512``.

:func:`load_checkpoints` gives the model after every epoch (epoch 0 is the
untrained initialisation) for "how do units evolve during training" studies.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from . import charlm
from .store import cached_model

NAME = "sql-lstm"
WIDTH = 30
STRIDE = 5


def records(n_queries: int, seed: int = 0, n_rules: int | None = None) -> list[str]:
    """Windows (:class:`~hypotheses.windows.Window`) of ``n_queries`` generated queries."""
    from hypotheses.grammars import sql as grammar

    queries = grammar.generate(n_queries, seed=seed, n_rules=n_rules)
    return grammar.windows(queries, width=WIDTH, stride=STRIDE)


def _settings(
    quick: bool, hidden: int, epochs: int | None, seed: int, n_rules: int | None
) -> dict[str, Any]:
    # Larger models see less data so that every variant trains within its time
    # budget: a step costs ~10x more at 512 units than at 128.
    small = hidden <= 128
    return {
        "hidden": hidden,
        "embed": 32,
        "epochs": charlm.default(epochs, quick, 3 if small else 2, 8 if small else 3),
        "n_queries": (250 if small else 120) if quick else (2000 if small else 800),
        "batch_size": 64,
        "lr": 5e-3,
        "seed": seed,
        "n_rules": n_rules,
        "width": WIDTH,
        "stride": STRIDE,
        "quick": quick,
        "trainer": charlm.TRAINER_VERSION,
        "threads": charlm.THREADS,
    }


def _last_char_accuracy(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    # The last scored step of each window is the prediction of its last character.
    last = (y != charlm.IGNORE).long().cumsum(1).argmax(1)
    y_last = torch.full_like(y, charlm.IGNORE)
    rows = torch.arange(len(y))
    y_last[rows, last] = y[rows, last]
    return charlm.accuracy(module, x, y_last)


class _Trainer:
    """Trains one configuration once, keeping per-epoch weights for checkpoints."""

    def __init__(self, config: dict[str, Any], keep_epochs: bool) -> None:
        self.config = config
        self.keep_epochs = keep_epochs
        self.vocab = charlm.Vocab()
        c = config
        self.train_recs = records(c["n_queries"], seed=c["seed"], n_rules=c["n_rules"])
        self.test_recs = records(max(100, c["n_queries"] // 5), c["seed"] + 7919, c["n_rules"])
        config["data"] = charlm.data_digest(self.train_recs)
        self.snapshots: dict[int, tuple[dict[str, torch.Tensor], dict[str, Any]]] | None = None

    def build(self) -> nn.Module:
        """A fresh model, initialised from the seed."""
        c = self.config

        def make() -> nn.Module:
            return charlm.CharLSTM(self.vocab, c["hidden"], embed=c["embed"])

        return charlm.seeded(make, c["seed"])()

    def _metrics(self, module: nn.Module, train_xy: tuple, test_xy: tuple) -> dict[str, Any]:
        return {
            **charlm.evaluate(module, train_xy, test_xy),
            "last_char_accuracy": round(_last_char_accuracy(module, *test_xy), 4),
        }

    def fit(self, module: nn.Module) -> dict[str, Any]:
        """Train ``module`` in place; with ``keep_epochs`` also snapshot every epoch."""
        c = self.config
        train_xy = charlm.next_char_data(self.vocab, self.train_recs)
        test_xy = charlm.next_char_data(self.vocab, self.test_recs)
        snaps: dict[int, tuple[dict[str, torch.Tensor], dict[str, Any]]] = {}

        def snapshot(epoch: int, m: nn.Module) -> None:
            state = {k: v.detach().clone() for k, v in m.state_dict().items()}
            snaps[epoch] = (state, {"epoch": epoch, **self._metrics(m, train_xy, test_xy)})

        if self.keep_epochs:
            snapshot(0, module)
        stats = charlm.train(
            module,
            *train_xy,
            epochs=c["epochs"],
            batch_size=c["batch_size"],
            lr=c["lr"],
            seed=c["seed"],
            on_epoch=snapshot if self.keep_epochs else None,
        )
        meta = {**stats, **self._metrics(module, train_xy, test_xy)}
        if self.keep_epochs:  # the final checkpoint is the final model: same metadata
            snaps[c["epochs"]] = (snaps[c["epochs"]][0], meta)
        self.snapshots = snaps
        return meta

    def restore(self, epoch: int) -> Callable[[nn.Module], dict[str, Any]]:
        """A ``train`` callable for the store that loads the epoch's snapshot."""

        def fit_epoch(module: nn.Module) -> dict[str, Any]:
            if self.snapshots is None:  # first store miss: one run serves all epochs
                self.fit(self.build())
            state, metrics = self.snapshots[epoch]
            module.load_state_dict(state)
            return dict(metrics)

        return fit_epoch


def load(
    quick: bool = False,
    hidden: int = 128,
    epochs: int | None = None,
    seed: int = 0,
    checkpoints: bool = False,
    n_rules: int | None = None,
    directory: str | os.PathLike | None = None,
) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
    """The SQL auto-completion LSTM, trained on first use and cached.

    Parameters
    ----------
    quick : bool
        Fewer queries and epochs (seconds; for tests and tours). Full: 2,000
        queries (800 above 128 units), about 25,000 windows.
    hidden : int
        LSTM units: 128 by default, 512 for the scalability benchmark.
    epochs : int, optional
        Overrides the default (quick 3, full 8; above 128 units quick 2, full 3).
    seed : int
        Seeds the queries, the initialisation and the data order.
    checkpoints : bool
        Also return the per-epoch models in ``meta["checkpoints"]`` as
        ``[(epoch, module), ...]`` (see :func:`load_checkpoints`).
    n_rules : int, optional
        SQL grammar size (:func:`hypotheses.grammars.sql.rule_counts`); the full grammar if None.
    directory : path, optional
        Model store directory (default ``$DNI_LAB_MODELS``).

    Returns
    -------
    module, encode, meta
        The trained model (eval mode), its encoder and the store metadata:
        ``accuracy`` (held-out next character over all window positions),
        ``last_char_accuracy`` (the paper's task), baselines, timings.
    """
    trainer = _Trainer(_settings(quick, hidden, epochs, seed, n_rules), checkpoints)
    if checkpoints:
        models, meta = _checkpoints(trainer, directory)
        return models[-1][1], trainer.vocab, {**meta, "checkpoints": models}
    return _final(trainer, directory)


def _final(
    trainer: _Trainer, directory: str | os.PathLike | None
) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
    fit = trainer.restore(trainer.config["epochs"]) if trainer.keep_epochs else trainer.fit
    module, meta = cached_model(NAME, trainer.config, trainer.build, fit, directory)
    return module, trainer.vocab, meta


def load_checkpoints(
    quick: bool = False,
    hidden: int = 128,
    epochs: int | None = None,
    seed: int = 0,
    n_rules: int | None = None,
    directory: str | os.PathLike | None = None,
) -> list[tuple[int, nn.Module]]:
    """The SQL model after each epoch, ``[(0, untrained), (1, ...), ..., (epochs, final)]``.

    One training run produces every checkpoint; each is cached on its own
    (config plus ``"checkpoint": epoch``) and the last one is the model that
    :func:`load` returns with the same arguments.
    """
    trainer = _Trainer(_settings(quick, hidden, epochs, seed, n_rules), True)
    return _checkpoints(trainer, directory)[0]


def _checkpoints(
    trainer: _Trainer, directory: str | os.PathLike | None
) -> tuple[list[tuple[int, nn.Module]], dict[str, Any]]:
    """Every epoch's model (epoch 0 untrained) from one training run, and the final metadata."""
    base = dict(trainer.config)
    out = []
    for epoch in range(base["epochs"]):
        config = {**base, "checkpoint": epoch}
        module, _ = cached_model(NAME, config, trainer.build, trainer.restore(epoch), directory)
        out.append((epoch, module))
    module, _, meta = _final(trainer, directory)
    out.append((base["epochs"], module))
    return out, meta
