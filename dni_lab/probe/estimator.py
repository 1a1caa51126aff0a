"""``dl.Probe``: a linear probe on one layer, fitted once, kept, applied later.

A scikit-learn estimator in its contract: ``__init__`` stores parameters and nothing
else, :meth:`Probe.fit` learns attributes ending in ``_``, ``get_params``/``set_params``
work. What differs is the data: a probe reads a model and records (its layer's
activations, one row per symbol) instead of a matrix, so every method takes
``(model, records)``.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from scipy.special import expit

from ..backend.errors import DNIError
from ..backend.hypothesis.hypotheses import as_family
from . import evaluation, frames, metrics, solver, storage
from .frames import score_frame
from .reading import Reading, as_model, binary_targets, check_width, model_sha256, read
from .sweep import LayerSweep
from .sweep import sweep as run_sweep
from .transfer import transfer as transfer_probe

POOLS = ("mean", "max", "last")


class Probe:
    """A logistic-regression probe of a binary concept on one layer's units.

    The probe standardises each unit (``mean_``, ``scale_``: over the training symbols)
    and scores a symbol ``x`` as the logit ``((x - mean_) / scale_) @ coef_[0] +
    intercept_[0]``; its probability is the logit's sigmoid, and it predicts the concept
    where that probability reaches ``threshold_``.

    Parameters
    ----------
    layer : str
        The layer read: a module address, a TransformerLens hook name or an nnsight path
        (as ``dl.activations`` takes them).
    units : sequence of int, optional
        The unit indices read (default: all of the layer's).
    C : float
        Inverse regularisation strength, scikit-learn's: the objective is
        ``penalty(w) + C · Σ log-loss`` over the training symbols, intercept unpenalised.
    penalty : {"l2", "l1"}
        ``"l2"`` (``||w||² / 2``, scipy's L-BFGS-B in float64) or ``"l1"`` (``||w||₁``, the
        ``logreg`` measure's Newton solver, which zeroes coefficients exactly).
    folds : int or None
        Folds of records for ``cv_auroc_``, the out-of-fold AUROC (record ``i`` is in
        fold ``i % folds``; each fold's probe is fitted and standardised without it).
        None skips it.
    record_pool : {"mean", "max", "last"}
        How a record's score is made from its symbols' logits (:meth:`apply`).
    block_size : int
        Records per forward pass.
    device : str or torch.device
        Where the model runs (``"auto"``: CUDA, then MPS, else the CPU).
    tol : float
        The solver's tolerance (L2: largest gradient entry; L1: largest Newton step).
    max_iter : int
        The most solver steps; a fit that stops on it warns.

    Attributes
    ----------
    coef_ : np.ndarray
        ``(1, n_units)`` slopes on the standardised units.
    intercept_ : np.ndarray
        ``(1,)`` the intercept.
    mean_, scale_ : np.ndarray
        ``(n_units,)`` each unit's mean and standard deviation over the training symbols
        (a constant unit's scale is 1).
    threshold_ : float
        The probability threshold of the highest F1 on the training symbols (predict the
        concept where ``probability >= threshold_``); ``train_f1_`` is that F1. It is
        chosen on the data the probe was fitted on, so it is optimistic for new data.
    train_auroc_, cv_auroc_ : float
        AUROC on the training symbols, and out of fold (None without ``folds``).
    units_, address_ : np.ndarray, str
        The unit indices and the module address read.
    model_name_, model_sha256_ : str
        The model the probe is bound to (:meth:`save`, :meth:`load`).
    training_ : dict
        What it was fitted on: records, symbols, positives, ``data_sha256``, the hypothesis.
    transfers_ : list of dict
        Models it was loaded onto with ``allow_other_model=True`` (:meth:`load`).
    """

    def __init__(
        self,
        layer: str,
        *,
        units: Sequence[int] | None = None,
        C: float = 1.0,
        penalty: str = "l2",
        folds: int | None = 5,
        record_pool: str = "mean",
        block_size: int = 256,
        device: str | torch.device = "auto",
        tol: float = 1e-8,
        max_iter: int = 500,
    ) -> None:
        self.layer = layer
        self.units = units
        self.C = C
        self.penalty = penalty
        self.folds = folds
        self.record_pool = record_pool
        self.block_size = block_size
        self.device = device
        self.tol = tol
        self.max_iter = max_iter

    # -- scikit-learn's parameter protocol -------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The ``__init__`` parameters by name."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {p: getattr(self, p) for p in names}

    def set_params(self, **params: Any) -> Probe:
        """Set ``__init__`` parameters; an unknown name is refused."""
        known = self.get_params()
        for k, v in params.items():
            if k not in known:
                raise DNIError(f"Probe has no parameter {k!r}; it has {sorted(known)}.")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        return f"Probe({self.layer!r}, C={self.C}, penalty={self.penalty!r})"

    # -- fitting -------------------------------------------------------------------------
    def fit(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
    ) -> Probe:
        """Fit on ``records``: the layer's activations against a hypothesis or labels.

        Parameters
        ----------
        model : dl.Model or nn.Module
            The model read; the probe is bound to its weights (``model_sha256_``).
        records : iterable
            The training records (read into a list: activations and labels read them).
        hypothesis : callable or dl.Hypothesis, optional
            A binary hypothesis, one value per symbol (a transformer's tokens take
            character and word values pooled over their spans, as in ``dl.inspect``).
        labels : sequence, optional
            Instead of a hypothesis, one entry per record: a 0/1 number (the record's
            label, read at each of its symbols) or one 0/1 value per symbol. NaN is
            "undefined here": neither trained on nor scored.

        Returns
        -------
        Probe
            ``self``, fitted.
        """
        self._check_params()
        if (hypothesis is None) == (labels is None):
            raise DNIError("Probe.fit takes a hypothesis or labels=..., exactly one of them.")
        model = as_model(model)
        r = read(
            model, records, self.layer, self.units, self.block_size, self.device, hypothesis, labels
        )
        rows, y = binary_targets(r.y, "the hypothesis" if labels is None else "labels")
        X = r.X[torch.from_numpy(rows)].double()
        if self.folds is not None and r.n_records < self.folds:
            raise DNIError(
                f"folds={self.folds} needs at least {self.folds} records; {r.n_records} were "
                "given. Pass more records, fewer folds, or folds=None."
            )
        self._learn(X, y)
        z = self._logits(X)
        self.threshold_, self.train_f1_ = solver.f1_threshold(expit(z), y)
        self.train_auroc_ = solver.auroc(z, y)
        self.cv_auroc_ = None if self.folds is None else self._cv_auroc(X, y, r.record[rows])
        self._bind(model, r, hypothesis, y, source="fit")
        return self

    def _check_params(self) -> None:
        if not (isinstance(self.C, (int, float)) and self.C > 0):
            raise DNIError(f"C={self.C!r}: pass a positive inverse regularisation strength.")
        if self.penalty not in ("l1", "l2"):
            raise DNIError(f"penalty={self.penalty!r}: use 'l2' or 'l1'.")
        if self.folds is not None and not (isinstance(self.folds, int) and self.folds >= 2):
            raise DNIError(f"folds={self.folds!r}: pass a count of at least 2, or None.")
        if self.record_pool not in POOLS:
            raise DNIError(f"record_pool={self.record_pool!r}: use one of {POOLS}.")

    def _learn(self, X: torch.Tensor, y: np.ndarray) -> None:
        """Standardise, fit, keep: ``mean_``, ``scale_``, ``coef_``, ``intercept_``."""
        mean = X.mean(0)
        scale = X.std(0, correction=0)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant unit
        fit = solver.fit_logistic(
            (X - mean) / scale,
            torch.from_numpy(y),
            float(self.C),
            self.penalty,
            self.tol,
            self.max_iter,
        )
        solver.warn_unconverged(fit, self.penalty, self.tol, self.max_iter)
        self.mean_, self.scale_ = mean.numpy(), scale.numpy()
        self.coef_ = fit.coef[None, :]
        self.intercept_ = np.array([fit.intercept])
        self.n_iter_ = fit.n_iter
        self.n_features_in_ = X.shape[1]
        self.classes_ = np.array([0, 1])

    def _cv_auroc(self, X: torch.Tensor, y: np.ndarray, record: np.ndarray) -> float:
        """The AUROC of out-of-fold logits, each fold scored by a probe fitted without it."""
        fold = record % self.folds
        z = np.empty(len(y))
        keep = {k: getattr(self, k) for k in ("mean_", "scale_", "coef_", "intercept_")}
        for f in range(self.folds):
            held = fold == f
            if held.all() or len(np.unique(y[~held])) < 2:
                return float("nan")  # a fold whose complement holds one class: no probe
            self._learn(X[torch.from_numpy(~held)], y[~held])
            z[held] = self._logits(X[torch.from_numpy(held)])
        self.__dict__.update(keep)  # the probe is the fit on every row
        return solver.auroc(z, y)

    def _logits(self, X: torch.Tensor) -> np.ndarray:
        mean, scale = torch.from_numpy(self.mean_), torch.from_numpy(self.scale_)
        coef = torch.from_numpy(np.ascontiguousarray(self.coef_[0]))
        return (((X.double() - mean) / scale) @ coef + float(self.intercept_[0])).numpy()

    def _bind(self, model: Any, r: Reading, hypothesis: Any, y: np.ndarray, source: str) -> None:
        """What the probe is bound to and learned from (the sidecar's content)."""
        self.units_, self.address_ = r.units, r.address
        self.model_name_, self.model_sha256_ = model.name, model_sha256(model)
        self.layout_ = storage.layout_of(model, r.address)
        self.symbols_ = storage.symbol_level(model)
        fam = None if hypothesis is None else as_family(hypothesis)
        self.level_ = getattr(fam, "level", None) or ("record" if r.y is None else None)
        self.training_ = {
            "source": source,
            "records": r.n_records,
            "symbols": len(y),
            "positives": int(y.sum()),
            "data_sha256": r.data_sha256,
            "hypothesis": None
            if fam is None
            else {"name": fam.name, "fingerprint": fam.fingerprint()},
        }
        if fam is None:  # labels: their values, hashed
            self.training_["labels_sha256"] = hashlib.sha256(y.tobytes()).hexdigest()
        self.transfers_ = []

    # -- applying ------------------------------------------------------------------------
    def _read(
        self,
        model: Any,
        records: Iterable[Any],
        allow_other_model: bool,
        hypothesis: Any = None,
        labels: Any = None,
    ) -> tuple[np.ndarray, Reading]:
        if not hasattr(self, "coef_"):
            raise DNIError("this Probe is not fitted; call fit(model, records, hypothesis) first.")
        model = as_model(model)
        if not allow_other_model:
            storage.require_same_model(self, model, "this probe")
        r = read(
            model,
            records,
            self.layer,
            self.units,  # None: every unit, so another width is told as such
            self.block_size,
            self.device,
            hypothesis,
            labels,
        )
        check_width(r, self.coef_.shape[1], self.layer)
        return self._logits(r.X), r

    def decision_function(
        self, model: Any, records: Iterable[Any], *, allow_other_model: bool = False
    ) -> np.ndarray:
        """The logit of every symbol, records in order: ``(n_symbols,)`` float64.

        ``allow_other_model=True`` applies the probe to a model with other weights than
        the one it is bound to (otherwise refused, naming both).
        """
        return self._read(model, records, allow_other_model)[0]

    def predict_proba(
        self, model: Any, records: Iterable[Any], *, allow_other_model: bool = False
    ) -> np.ndarray:
        """``(n_symbols, 2)``: each symbol's probability of not holding and of holding."""
        p = expit(self.decision_function(model, records, allow_other_model=allow_other_model))
        return np.stack([1 - p, p], axis=1)

    def predict(
        self, model: Any, records: Iterable[Any], *, allow_other_model: bool = False
    ) -> np.ndarray:
        """``(n_symbols,)`` 0/1: where the probability reaches ``threshold_``."""
        p = self.predict_proba(model, records, allow_other_model=allow_other_model)[:, 1]
        return (p >= self.threshold_).astype(np.int64)

    def score(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
        allow_other_model: bool = False,
    ) -> float:
        """The AUROC of the probe's logits against a hypothesis or labels (as in :meth:`fit`),
        over the symbols where they are defined; both classes must occur."""
        if (hypothesis is None) == (labels is None):
            raise DNIError("Probe.score takes a hypothesis or labels=..., exactly one of them.")
        z, r = self._read(model, records, allow_other_model, hypothesis, labels)
        rows, y = binary_targets(r.y, "the hypothesis" if labels is None else "labels")
        return solver.auroc(z[rows], y)

    def apply(
        self,
        model: Any,
        records: Iterable[Any],
        *,
        per: str = "symbol",
        allow_other_model: bool = False,
    ) -> pl.DataFrame:
        """The probe's scores as a frame.

        Parameters
        ----------
        per : {"symbol", "record"}
            ``"symbol"``: one row per symbol, ``record``, ``symbol``, ``score`` (the
            logit), ``probability``, ``predicted`` (``probability >= threshold_``) and
            ``record_score`` (its record's). ``"record"``: one row per record, ``record``,
            ``symbols``, ``score`` (``record_pool`` of its logits), ``probability``,
            ``predicted``.
        """
        if per not in ("symbol", "record"):
            raise DNIError(f"per={per!r}: use 'symbol' or 'record'.")
        z, r = self._read(model, records, allow_other_model)
        return score_frame(r, z, self.threshold_, self.record_pool, per)

    # -- what users report, and the nulls beside it -------------------------------------
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

    # -- from a frame, to and from a file ----------------------------------------------
    @classmethod
    def from_frame(
        cls,
        frame: pl.DataFrame,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        **kwargs: Any,
    ) -> Probe:
        """A probe from a ``logreg`` inspection's rows (see :func:`.frames.from_frame`)."""
        return frames.from_frame(cls, frame, model, records, hypothesis, **kwargs)

    def save(self, path: str | Path) -> Path:
        """Write the probe: safetensors weights and a JSON sidecar (see :mod:`.storage`)."""
        return storage.save(self, path)

    @classmethod
    def load(cls, path: str | Path, *, model: Any, allow_other_model: bool = False) -> Probe:
        """Read a probe saved by :meth:`save`, checked against ``model`` (:mod:`.storage`)."""
        return storage.load(cls, path, model=model, allow_other_model=allow_other_model)
