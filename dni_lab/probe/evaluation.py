"""A fitted probe on held-out records: the statistics users report and the nulls beside them.

:func:`report` and :func:`reliability` read the probe's logits against labels and hand
them to :mod:`.metrics`. :func:`nulls` compares the probe's AUROC with what it would get
without the concept: a control task per symbol *type* (Hewitt & Liang's selectivity, the
types from :func:`dni_lab.backend.verify.controls.symbol_types`: a transformer's token
ids), random directions of the probe's norm, and the same probe on an untrained copy the
user passes. It reads, then hands the readings to :func:`null_rows`; :mod:`.sweep`, which
reads every layer in one pass, builds each layer's splits (:func:`split_part`) and calls
:func:`null_rows` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
from scipy.special import expit

from ..backend.engine.resolve import as_records
from ..backend.errors import DNIError
from ..backend.verify.controls import binary_control_table, symbol_types
from . import metrics, solver, storage
from .reading import Reading, as_model, binary_targets, check_width, read

DEFAULT_FOLDS = 5  # out-of-fold scoring of the nulls when the probe itself has folds=None


def _one_of(hypothesis: Any, labels: Any, where: str) -> None:
    if (hypothesis is None) == (labels is None):
        raise DNIError(f"{where} takes a hypothesis or labels=..., exactly one of them.")


def _held_out(
    probe: Any, model: Any, records: Any, hypothesis: Any, labels: Any, allow_other_model: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The probe's logits, the 0/1 labels and each row's record, where labels are defined."""
    z, r = probe._read(model, records, allow_other_model, hypothesis, labels)
    rows, y = binary_targets(r.y, "the hypothesis" if labels is None else "labels")
    return z[rows], y, r.record[rows]


def report(
    probe: Any,
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
    """:meth:`Probe.report`: AUROC, recall at each FPR, ECE and F1 with record intervals."""
    _one_of(hypothesis, labels, "Probe.report")
    for f in fprs:  # bad arguments are refused before the model runs
        metrics.check_fpr(f)
    metrics.bin_index(np.zeros(0), n_bins, bins)
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise DNIError(f"n_boot={n_boot!r}: pass a positive number of bootstrap replicates.")
    z, y, groups = _held_out(probe, model, records, hypothesis, labels, allow_other_model)
    return metrics.summary(
        z, y, groups, probe.threshold_, fprs=fprs, n_bins=n_bins, bins=bins,
        n_boot=n_boot, seed=seed, level=level,
    )  # fmt: skip


def reliability(
    probe: Any,
    model: Any,
    records: Iterable[Any],
    hypothesis: Any = None,
    *,
    labels: Sequence[Any] | None = None,
    n_bins: int = 10,
    bins: str = "equal_mass",
    allow_other_model: bool = False,
) -> pl.DataFrame:
    """:meth:`Probe.reliability`: the reliability plot's table of the probe's probabilities."""
    _one_of(hypothesis, labels, "Probe.reliability")
    metrics.bin_index(np.zeros(0), n_bins, bins)
    z, y, _ = _held_out(probe, model, records, hypothesis, labels, allow_other_model)
    return metrics.reliability_table(expit(z), y, n_bins, bins)


def record_types(model: Any, recs: list) -> np.ndarray:
    """Each symbol's type (:func:`symbol_types`), records in order: what a control labels."""
    return np.concatenate([np.asarray(symbol_types(model, x), dtype=object) for x in recs])


def split_part(model: Any, r: Reading, types: np.ndarray | None, what: str, width: int,
               layer: str) -> dict[str, Any]:  # fmt: skip
    """One reading's rows where labels are defined, as the nulls fit on them: ``X`` in
    float64 (the one float64 copy of the layer), ``y``, ``record`` and (for the control
    task) ``types``."""
    check_width(r, width, layer)
    rows, y = binary_targets(r.y, what)
    if types is not None and len(types) != len(r.record):
        raise DNIError(
            f"model {model.name!r} reads {len(r.record)} symbols of these records "
            f"but types {len(types)}; the control task needs one type per symbol."
        )
    sel = torch.from_numpy(rows)
    return {"X": r.X[sel].double(), "y": y, "record": r.record[rows],
            "types": None if types is None else types[rows]}  # fmt: skip


class _Split:
    """One model's reading of the training and held-out records, with task labels.

    Without training records the held-out records serve as both, out of fold: record
    ``i`` is scored by a probe fitted without fold ``i % folds``.
    """

    def __init__(self, test: dict[str, Any], train: dict[str, Any] | None) -> None:
        self.test, self.train = test, train

    @classmethod
    def read(cls, model: Any, probe: Any, test: list, train: list | None, args: dict) -> _Split:
        """Read the probe's layer of ``model`` over both sets of records."""
        model = as_model(model)

        def part(recs: list, labels: Any) -> dict[str, Any]:
            r = read(model, recs, probe.layer, probe.units, probe.block_size, probe.device,
                     args["hypothesis"], labels)  # fmt: skip
            what = "the hypothesis" if labels is None else "labels"
            types = record_types(model, recs)
            return split_part(model, r, types, what, probe.coef_.shape[1], probe.layer)

        tested = part(test, args["labels"])
        return cls(tested, None if train is None else part(train, args["train_labels"]))


def _auroc(fresh: Any, split: _Split, folds: int, table: dict | None = None) -> float:
    """Fit ``fresh`` (a clone of the probe) and score it held out: on the task's labels, or
    on the control's (``table``: a label per symbol type)."""

    def labels(part: dict) -> np.ndarray:
        if table is None:
            return part["y"]
        return np.array([table.get(t, 0.0) for t in part["types"].tolist()])

    fit_on = split.test if split.train is None else split.train
    y = labels(fit_on)
    if y.min() == y.max():
        return float("nan")  # a control with one class where it is fitted: no probe
    fresh._learn(fit_on["X"], y)
    if split.train is None:  # out of fold over the held-out records (Probe's own CV)
        fresh.folds = folds
        return fresh._cv_auroc(fit_on["X"], y, fit_on["record"])
    return solver.auroc(fresh._logits(split.test["X"]), labels(split.test))


def nulls(
    probe: Any,
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
    """:meth:`Probe.nulls`: the task's AUROC beside the control task, random directions and
    an untrained copy, each as the same probe scored the same way."""
    _one_of(hypothesis, labels, "Probe.nulls")
    if (labels is None) != (train_labels is None) and train is not None:
        raise DNIError("with labels=, pass train_labels= for the train records (and vice versa).")
    for name, n in (("n_controls", n_controls), ("n_directions", n_directions)):
        if not (isinstance(n, int) and n >= 1):
            raise DNIError(f"{name}={n!r}: pass a positive count.")
    if not hasattr(probe, "coef_"):
        raise DNIError("this Probe is not fitted; call fit(model, records, hypothesis) first.")
    test = list(as_records(records))
    tr = None if train is None else list(as_records(train))
    args = {"hypothesis": hypothesis, "labels": labels, "train_labels": train_labels}
    folds = probe.folds or DEFAULT_FOLDS
    if not allow_other_model:
        storage.require_same_model(probe, as_model(model), "this probe")
    split = _Split.read(model, probe, test, tr, args)
    base = None if untrained is None else _Split.read(untrained, probe, test, tr, args)
    return null_rows(probe, split, base, folds, n_controls, n_directions, seed)


def null_rows(
    probe: Any,
    split: _Split,
    base: _Split | None,
    folds: int,
    n_controls: int,
    n_directions: int,
    seed: int,
) -> pl.DataFrame:
    """:func:`nulls`' frame from readings already made: ``split`` (the model's), ``base``
    (the untrained copy's, or None). Shared with :func:`~.sweep.sweep`, which reads
    every layer once and builds one layer's splits at a time."""

    def clone() -> Any:  # the same probe, unfitted (sklearn.base.clone's contract)
        return type(probe)(**{**probe.get_params(), "folds": None})

    held_out = split.train is not None
    scored = "held_out" if held_out else f"out_of_fold_{folds}"
    te = split.test
    # held out: the fitted probe itself; out of fold: the same probe refitted per fold
    if held_out:
        task = solver.auroc(probe._logits(te["X"]), te["y"])
    else:
        task = _auroc(clone(), split, folds)
    rows = [("task", task, None, None, None, 1)]

    # (a) a label per symbol type with the task's base rate, the same probe fitted on it
    fit_on = split.train or te
    rate = float(fit_on["y"].mean())
    ctrl = []
    for k in range(n_controls):
        table = binary_control_table(fit_on["types"], rate, seed + k)
        ctrl.append(_auroc(clone(), split, folds, table))
    rows.append(("control_task", *_spread(ctrl)))

    # (b) random directions of the probe's norm through its own standardisation
    rng = np.random.default_rng(seed)
    norm = float(np.linalg.norm(probe.coef_[0]))
    Xs = (te["X"] - torch.from_numpy(probe.mean_)) / torch.from_numpy(probe.scale_)
    rand = []
    for _ in range(n_directions):
        v = rng.standard_normal(probe.coef_.shape[1])
        v *= norm / np.linalg.norm(v)
        rand.append(solver.auroc((Xs @ torch.from_numpy(v)).numpy(), te["y"]))
    rows.append(("random_direction", *_spread(rand)))

    # (c) the same probe on an untrained copy the user built (never built here)
    if base is not None:
        rows.append(("untrained_model", _auroc(clone(), base, folds), None, None, None, 1))
    frame = pl.DataFrame(rows, schema=["null", "auroc", "sd", "lo", "hi", "n"], orient="row")
    return frame.with_columns(difference=pl.lit(task) - pl.col("auroc"), scored=pl.lit(scored))


def _spread(values: list[float]) -> tuple[float, float, float, float, int]:
    """Mean, standard deviation, min and max over seeds (NaNs, one-class draws, left out)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan"), float("nan"), 0
    return float(v.mean()), float(v.std()), float(v.min()), float(v.max()), int(v.size)
