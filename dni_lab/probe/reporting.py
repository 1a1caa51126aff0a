"""What a fitted :class:`~dni_lab.probe.Probe` is reported with, and the nulls beside it.

:class:`Reporting` is the part of ``Probe`` that scores it on held-out records and beside
what it would get without the concept: ``report`` and ``reliability`` (the statistics
probe users report, :mod:`.evaluation` and :mod:`.metrics`), ``nulls`` (control task,
random directions, an untrained copy), ``transfer`` (another layer or model of its
width, :mod:`.transfer`) and ``sweep`` (one probe per layer, :mod:`.sweep`). Each method
states the contract; the work is in those modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from . import evaluation, metrics
from .sweep import LayerSweep
from .sweep import sweep as run_sweep
from .transfer import transfer as transfer_probe


class Reporting:
    """``Probe``'s reports, nulls, transfer and layer sweep (a mixin of ``Probe``)."""

    def report(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
        n_boot: int = 1000,
        seed: int | None = 0,
        level: float = 0.95,
        fprs: Sequence[float] = metrics.FPRS,
        n_bins: int = 10,
        bins: str = "equal_mass",
        allow_other_model: bool = False,
    ) -> pl.DataFrame:
        """The statistics a probe is reported with, on held-out ``records``.

        Parameters
        ----------
        model, records, hypothesis, labels
            As in :meth:`score`: the labels the probe's logits are scored against.
        n_boot, seed, level : int, int or None, float
            Bootstrap replicates over *records* (a record's symbols are drawn together),
            the generator's seed and the percentile interval's coverage.
        fprs : sequence of float
            False-positive rates, each in (0, 1), to report the recall at.
        n_bins, bins : int, {"equal_mass", "equal_width"}
            The calibration bins (:mod:`dni_lab.probe.metrics`).

        Returns
        -------
        pl.DataFrame
            ``name, value, lo, hi, se``, one row per statistic: ``auroc``,
            ``recall_at_fpr_<f>`` per FPR, ``ece_<bins>_<n_bins>`` and ``f1_at_threshold``
            (F1 of ``probability >= threshold_``); ``se`` is the replicates' deviation.
        """
        return evaluation.report(
            self, model, records, hypothesis, labels=labels, n_boot=n_boot, seed=seed,
            level=level, fprs=fprs, n_bins=n_bins, bins=bins,
            allow_other_model=allow_other_model,
        )  # fmt: skip

    def reliability(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
        n_bins: int = 10,
        bins: str = "equal_mass",
        allow_other_model: bool = False,
    ) -> pl.DataFrame:
        """The reliability plot's table: ``bin, mean_predicted, observed_rate, count``, one
        row per bin of predicted probability that holds symbols (see :meth:`report`)."""
        return evaluation.reliability(
            self, model, records, hypothesis, labels=labels, n_bins=n_bins, bins=bins,
            allow_other_model=allow_other_model,
        )  # fmt: skip

    def nulls(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
        train: Iterable[Any] | None = None,
        train_labels: Sequence[Any] | None = None,
        untrained: Any = None,
        n_controls: int = 3,
        n_directions: int = 10,
        seed: int = 0,
        allow_other_model: bool = False,
    ) -> pl.DataFrame:
        """The probe's AUROC beside what it gets without the concept.

        Parameters
        ----------
        model, records, hypothesis, labels
            As in :meth:`score`: the held-out records and their labels.
        train, train_labels : optional
            The records the probe was fitted on (and their labels, with ``labels=``).
            Given, every probe below is fitted on ``train`` and scored on ``records``
            (``task`` is this fitted probe); without them, every one (``task``
            included) is refitted and scored out of fold over ``records``, ``folds``
            folds of records (5 where ``folds`` is None).
        untrained : dl.Model, optional
            An untrained copy of the model (``dl.verify.untrained_copy``); the same probe
            is fitted on its layer. Not built here.
        n_controls, n_directions, seed : int
            Control tasks and random directions drawn, from ``seed`` on.

        Returns
        -------
        pl.DataFrame
            One row per null, ``null, auroc, sd, lo, hi, n, difference, scored``:
            ``task``; ``control_task`` (a 0/1 label per symbol *type*, the model's own:
            a token id on a transformer, a character on a character model; positive
            types drawn until their symbols' share is the task's base rate; the same
            probe fitted on it); ``random_direction`` (the probe's standardisation and
            a Gaussian direction of ``||coef_||``); ``untrained_model``. ``auroc`` is the
            mean over draws, ``sd``, ``lo``, ``hi`` their deviation, min and max, ``n``
            the draws with both classes; ``difference`` is the task's AUROC less the
            row's: Hewitt & Liang's selectivity on the ``control_task`` row.
        """
        return evaluation.nulls(
            self, model, records, hypothesis, labels=labels, train=train,
            train_labels=train_labels, untrained=untrained, n_controls=n_controls,
            n_directions=n_directions, seed=seed, allow_other_model=allow_other_model,
        )  # fmt: skip

    def transfer(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
        layer: str | None = None,
        source: Any = None,
        n_boot: int = 1000,
        seed: int | None = 0,
        level: float = 0.95,
    ) -> pl.DataFrame:
        """The probe on another tap: ``layer`` of ``model`` (default: the probe's layer).

        Scores held-out ``records`` (labels as in :meth:`score`) at the probe's own tap and
        at the new one, and records the transfer in ``transfers_``. The new tap is another
        layer of the model the probe is bound to, or another model (pass the bound one as
        ``source=``); a layer of another width is refused, naming both widths.

        Returns
        -------
        pl.DataFrame
            ``name, model, layer, value, lo, hi, se``: ``auroc_original``,
            ``auroc_transfer`` and ``auroc_drop`` (original less transfer), each with a
            paired percentile bootstrap interval over records (``n_boot``, ``seed``,
            ``level``) and the replicates' deviation ``se``.
        """
        return transfer_probe(
            self, model, records, hypothesis, labels=labels, layer=layer, source=source,
            n_boot=n_boot, seed=seed, level=level,
        )  # fmt: skip

    @classmethod
    def sweep(
        cls,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        layers: Sequence[str] | None = None,
        labels: Sequence[Any] | None = None,
        test: Iterable[Any] | None = None,
        test_labels: Sequence[Any] | None = None,
        holdout: int = 4,
        untrained: Any = None,
        n_boot: int = 200,
        n_controls: int = 1,
        n_directions: int = 5,
        seed: int = 0,
        level: float = 0.95,
        **params: Any,
    ) -> LayerSweep:
        """One probe per layer, scored held out, with its nulls: a layer sweep.

        Every layer is read in one pass over the records: one forward pass per block of
        the training records and one per block of the held-out ones for all layers (the
        same again over ``untrained=``), the hypothesis or labels evaluated once. Each
        layer's probe is then fitted from its columns, as ``Probe(layer).fit`` fits it,
        and its nulls computed from the same readings. Every layer's float32 rows are
        held at once; the float64 copies the nulls fit on, one layer at a time.

        Parameters
        ----------
        model, records, hypothesis, labels
            As in :meth:`fit`: the training records and their labels.
        layers : sequence of str, optional
            The layers, in order of depth (default: ``model.layers``).
        test, test_labels : optional
            Held-out records (and labels, with ``labels=``); without them, one record in
            ``holdout`` (``i % holdout == holdout - 1``) is held out of ``records``.
        untrained : dl.Model, optional
            An untrained copy (``dl.verify.untrained_copy``): its AUROC per layer is a null.
        n_boot, seed, level : int, int, float
            The AUROC's percentile bootstrap over held-out records.
        n_controls, n_directions : int
            Control tasks and random directions per layer (:meth:`nulls`).
        **params
            The probe's parameters (``C``, ``penalty``, ``units``, ...; ``folds`` defaults
            to None here: the sweep scores held out).

        Returns
        -------
        LayerSweep
            ``probes`` (layer to fitted probe), ``frame`` (one row per layer: ``layer,
            depth, n_units, auroc, lo, hi, train_auroc, control_auroc, selectivity,
            random_auroc, random_max, untrained_auroc``), ``chart()`` (AUROC against
            depth with intervals and nulls) and ``best()``.
        """
        return run_sweep(
            cls, model, records, hypothesis, layers=layers, labels=labels, test=test,
            test_labels=test_labels, holdout=holdout, untrained=untrained, n_boot=n_boot,
            n_controls=n_controls, n_directions=n_directions, seed=seed, level=level, **params,
        )  # fmt: skip
