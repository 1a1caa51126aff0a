"""How a :class:`~dni_lab.probe.Probe` learns: from records to its attributes ending in ``_``.

:class:`Fitting` is the part of ``Probe`` that fits: ``fit`` reads the layer and the
labels (:mod:`.reading`) and hands the reading to ``_fit_reading`` (shared with
:mod:`.sweep`, which reads every layer in one pass), which standardises and solves
(:mod:`.newton`, :mod:`.solver`), picks the F1 threshold, scores the training and
out-of-fold AUROC, and binds the probe to the model and data it learned from (the
sidecar's content, :mod:`.storage`). The private steps (``_learn``, ``_logits``,
``_cv_auroc``, ``_bind``) are shared with :mod:`.evaluation`, :mod:`.frames` and
:mod:`.transfer`, which refit or score probes on rows already read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from scipy.special import expit

from ..backend.errors import DNIError
from ..backend.hypothesis.hypotheses import as_family
from . import newton, solver, storage
from .reading import Reading, as_model, binary_targets, model_sha256, read

POOLS = ("mean", "max", "last")


class Fitting:
    """``Probe.fit`` and the steps it shares with the reports (a mixin of ``Probe``)."""

    layer: str
    units: Sequence[int] | None
    C: float
    penalty: str
    folds: int | None
    record_pool: str
    block_size: int
    device: Any
    tol: float
    max_iter: int

    def fit(
        self,
        model: Any,
        records: Iterable[Any],
        hypothesis: Any = None,
        *,
        labels: Sequence[Any] | None = None,
    ) -> Any:
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
        return self._fit_reading(model, r, hypothesis)

    def _fit_reading(self, model: Any, r: Reading, hypothesis: Any = None) -> Any:
        """Fit on a layer already read (``r``, with its labels): what :meth:`fit` does after
        reading, shared with :func:`~.sweep.sweep`, which reads every layer in one pass.

        ``hypothesis`` is None where ``r.y`` came from ``labels=``.
        """
        what = "labels" if hypothesis is None else "the hypothesis"
        rows, y = binary_targets(r.y, what)
        # float32 rows as read: the solver makes the one float64 copy it needs
        X = r.X if len(rows) == len(r.X) else r.X[torch.from_numpy(rows)]
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

    def _learn(
        self,
        X: torch.Tensor,
        y: np.ndarray,
        start: tuple[torch.Tensor, float] | None = None,
    ) -> None:
        """Standardise, fit, keep: ``mean_``, ``scale_``, ``coef_``, ``intercept_``.

        ``start``: slopes and intercept on the *raw* units to start the L2 fit from (a
        fold's fit starts from the full one, put on the fold's own standardisation).
        """
        rows = newton.standardise(X)
        warm = None
        if start is not None:
            u, c = start
            warm = ((u * rows.scale).numpy(), c + float(rows.mean @ u))
        fit = solver.fit_logistic(
            rows,
            torch.from_numpy(np.asarray(y, dtype=np.float64)),
            float(self.C),
            self.penalty,
            self.tol,
            self.max_iter,
            warm,
        )
        solver.warn_unconverged(fit, self.penalty, self.tol, self.max_iter)
        self.mean_, self.scale_ = rows.mean.numpy(), rows.scale.numpy()
        self.coef_ = fit.coef[None, :]
        self.intercept_ = np.array([fit.intercept])
        self.n_iter_ = fit.n_iter
        self.n_features_in_ = X.shape[1]
        self.classes_ = np.array([0, 1])

    def _cv_auroc(self, X: torch.Tensor, y: np.ndarray, record: np.ndarray) -> float:
        """The AUROC of out-of-fold logits, each fold scored by a probe fitted without it."""
        fold = record % self.folds
        z = np.empty(len(y))
        keep = {k: getattr(self, k) for k in ("mean_", "scale_", "coef_", "intercept_", "n_iter_")}
        # every fold starts from the fit on all rows: a few Newton steps from there
        start = newton.raw_slopes(
            torch.from_numpy(self.mean_),
            torch.from_numpy(self.scale_),
            torch.from_numpy(np.ascontiguousarray(self.coef_[0])),
            float(self.intercept_[0]),
        )
        for f in range(self.folds):
            held = fold == f
            if held.all() or len(np.unique(y[~held])) < 2:
                self.__dict__.update(keep)
                return float("nan")  # a fold whose complement holds one class: no probe
            self._learn(X[torch.from_numpy(~held)], y[~held], start)
            z[held] = self._logits(X[torch.from_numpy(held)])
        self.__dict__.update(keep)  # the probe is the fit on every row
        return solver.auroc(z, y)

    def _logits(self, X: torch.Tensor) -> np.ndarray:
        return newton.logits(X, self.mean_, self.scale_, self.coef_[0], float(self.intercept_[0]))

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
