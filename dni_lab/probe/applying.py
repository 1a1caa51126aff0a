"""How a fitted :class:`~dni_lab.probe.Probe` is applied: logits, probabilities, frames.

:class:`Applying` is the part of ``Probe`` that reads new records: each method checks
that the probe is fitted and bound to the model it is given (unless
``allow_other_model=True``), reads the probe's layer (:mod:`.reading`), checks its width
and scores every symbol; :meth:`Applying.apply` returns the scores as a Polars frame
(:func:`.frames.score_frame`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
from scipy.special import expit

from ..backend.errors import DNIError
from . import solver, storage
from .frames import score_frame
from .reading import Reading, as_model, binary_targets, check_width, read


class Applying:
    """``Probe``'s methods on new records (a mixin of ``Probe``)."""

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
