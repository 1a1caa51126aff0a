"""How a reference char-LSTM is trained and cached: one recipe per workload, one loader.

The arithmetic, Boolean, parentheses and Python-source workloads differ only in
their records, sizes and schedule and a few extras (other targets, an auxiliary
loss, metrics of their own). Each states those in a :class:`Recipe`; its
``load`` does the rest the same way for all: the store key, the seeded model,
the training run, the evaluation. A workload module exposes ``load = RECIPE.load``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import charlm
from .store import cached_model

#: Encoded inputs and per-step targets, as :func:`charlm.train` takes them.
XY = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Records:
    """A workload's training and held-out records.

    ``notes`` (e.g. the source files read) are kept in the model's metadata; unlike
    the records they are not part of its store key.
    """

    train: Sequence[str]
    test: Sequence[str]
    notes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """One reference char-LSTM: its data, sizes and schedule, and its extras.

    Parameters
    ----------
    name : str
        Store name, e.g. ``"arith-lstm"``.
    records : callable
        ``records(quick, seed) -> Records``.
    hidden, embed : int
        Default LSTM units (layer ``"lstm"``) and the embedding width.
    epochs : (int, int)
        Default epochs of the quick and of the full variant.
    batch_size, lr : training schedule (see :func:`charlm.train`).
    settings : mapping
        Workload-specific store-key entries (grammar depth, record length, ...).
    n_out : int, optional
        Output classes; the vocabulary size (next-character prediction) by default.
    targets : callable
        ``targets(vocab, records) -> (x, y)``; next-character targets by default.
    train_options : callable, optional
        ``train_options(records, train_xy)``: extra :func:`charlm.train` arguments
        (an auxiliary loss, an activity penalty).
    report : callable, optional
        ``report(module, records, test_xy)``: extra metadata kept with the model.
    """

    name: str
    records: Callable[[bool, int], Records]
    hidden: int
    embed: int
    epochs: tuple[int, int]
    batch_size: int = 64
    lr: float = 5e-3
    settings: Mapping[str, Any] = field(default_factory=dict)
    n_out: int | None = None
    targets: Callable[[charlm.Vocab, Sequence[str]], XY] = charlm.next_char_data
    train_options: Callable[[Records, XY], Mapping[str, Any]] | None = None
    report: Callable[[nn.Module, Records, XY], Mapping[str, Any]] | None = None

    def load(
        self,
        quick: bool = False,
        hidden: int | None = None,
        epochs: int | None = None,
        seed: int = 0,
        directory: str | os.PathLike | None = None,
    ) -> tuple[nn.Module, charlm.Vocab, dict[str, Any]]:
        """The model, trained on first use and cached in the model store.

        Parameters
        ----------
        quick : bool
            The quick variant: less data and fewer epochs (seconds; for tests and tours).
        hidden : int, optional
            LSTM units; the recipe's default if None.
        epochs : int, optional
            Overrides the recipe's quick/full epoch count.
        seed : int
            Seeds the records, initialisation and data order.
        directory : path, optional
            Model store directory (default ``$DNI_LAB_MODELS``).

        Returns
        -------
        module, encode, meta
            The model (eval mode), its encoder (a :class:`charlm.Vocab`) and the
            store metadata: training statistics, held-out ``accuracy`` and the
            baselines of :func:`charlm.evaluate`, then the recipe's own entries.
        """
        hidden = self.hidden if hidden is None else hidden
        epochs = charlm.default(epochs, quick, *self.epochs)
        data = self.records(quick, seed)
        vocab = charlm.Vocab()
        config = {
            "hidden": hidden,
            "embed": self.embed,
            "epochs": epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "seed": seed,
            "quick": quick,
            "data": charlm.data_digest(data.train),
            "trainer": charlm.TRAINER_VERSION,
            "threads": charlm.THREADS,
            **self.settings,
        }

        def fit(module: nn.Module) -> dict[str, Any]:
            train_xy = self.targets(vocab, data.train)
            test_xy = self.targets(vocab, data.test)
            extra = self.train_options(data, train_xy) if self.train_options else {}
            stats = charlm.train(
                module,
                *train_xy,
                epochs=epochs,
                batch_size=self.batch_size,
                lr=self.lr,
                seed=seed,
                **extra,
            )
            meta = {**stats, **charlm.evaluate(module, train_xy, test_xy)}
            if self.report is not None:
                meta.update(self.report(module, data, test_xy))
            return {**meta, **data.notes}

        def build() -> nn.Module:
            return charlm.CharLSTM(vocab, hidden, embed=self.embed, n_out=self.n_out)

        module, meta = cached_model(self.name, config, charlm.seeded(build, seed), fit, directory)
        return module, vocab, meta
