"""``dl.Probe``: a linear probe on one layer, fitted once, kept, applied later.

A scikit-learn estimator in its contract: ``__init__`` stores parameters and nothing
else, :meth:`Probe.fit` learns attributes ending in ``_``, ``get_params``/``set_params``
work. What differs is the data: a probe reads a model and records (its layer's
activations, one row per symbol) instead of a matrix, so every method takes
``(model, records)``.

The class is assembled from rooms: :class:`.fitting.Fitting` (``fit`` and the steps it
shares), :class:`.applying.Applying` (logits, probabilities, ``apply``) and
:class:`.reporting.Reporting` (``report``, ``nulls``, ``transfer``, ``sweep``); this
module holds the parameters, scikit-learn's parameter protocol and the files.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch

from ..backend.errors import DNIError
from . import frames, storage
from .applying import Applying
from .fitting import POOLS, Fitting
from .reporting import Reporting

__all__ = ["POOLS", "Probe"]


class Probe(Fitting, Applying, Reporting):
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
        ``"l2"`` (``||w||² / 2``, Newton's method in float64) or ``"l1"`` (``||w||₁``, the
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
        The solver's tolerance (L2: largest gradient entry of the objective divided by
        ``C · n``, what scikit-learn's ``lbfgs`` stops on; L1: largest Newton step).
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
