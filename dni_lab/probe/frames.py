"""Probes and frames: a :class:`~dni_lab.probe.Probe` from a ``logreg`` inspection's rows,
and a probe's scores as a frame (:func:`score_frame`).

The rows hold the probe's slopes (``LogReg(unit_score="coef")``: on units standardised
over the symbols read); :func:`dni_lab.features.from_probe` turns them into a direction
on the raw units and the mean it is centred on, and the probe keeps that direction
(``scale_`` is then 1). The rows hold no intercept, so it is fitted here on ``records``
with the slopes held fixed: the logreg intercept is unpenalised, so on the records the
inspection read this is the intercept its probe had. The threshold is then chosen as
:meth:`Probe.fit` chooses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
from scipy.special import expit

from ..backend.engine.provenance import provenance
from ..backend.errors import DNIError
from ..features.directions import from_probe
from . import solver
from .reading import Reading, as_model, binary_targets, read


def from_frame(
    cls: type,
    frame: pl.DataFrame,
    model: Any,
    records: Iterable[Any],
    hypothesis: Any = None,
    *,
    labels: Sequence[Any] | None = None,
    hid: str | None = None,
    unit_score: str | None = None,
    block_size: int = 256,
    device: str | torch.device = "auto",
) -> Any:
    """A probe from ``frame``'s ``logreg`` rows of one hypothesis on one layer.

    Parameters
    ----------
    frame : pl.DataFrame
        A score frame of ``dl.inspect(..., measures=[LogReg(unit_score="coef")])``.
    model : dl.Model
        The model the frame was computed on.
    records : iterable
        Records to measure the units' standard deviations and fit the intercept and
        threshold on (the inspection's own, to reproduce its probe).
    hypothesis : callable or dl.Hypothesis, optional
        The hypothesis the rows were fitted to (or ``labels=``, as in :meth:`Probe.fit`):
        the frame names it, but holds no way to compute it.
    hid : str, optional
        Which hypothesis's rows, where the frame holds several.
    unit_score : str, optional
        ``"coef"`` for a frame without provenance (filtered, read back from a file).
    """
    if (hypothesis is None) == (labels is None):
        raise DNIError(
            "Probe.from_frame needs the hypothesis (or labels=) the frame's probe was fitted "
            "to: the rows keep its slopes, not its intercept, which is fitted on records."
        )
    rows = frame.filter(pl.col("measure") == "logreg")
    hids = list(dict.fromkeys(rows["hid"].to_list()))
    if hid is None:
        if len(hids) != 1:
            raise DNIError(f"the frame's logreg rows hold hypotheses {hids}; pass hid=... .")
        hid = hids[0]
    if hid not in hids:
        raise DNIError(f"the frame has no logreg rows of {hid!r}; it has {hids}.")
    model = as_model(model)
    records = list(records)
    dirs = from_probe(
        frame,
        model,
        records,
        measure="logreg",
        name=f"probe-{hid}",
        block_size=block_size,
        device=device,
        unit_score=unit_score,
    )
    j = dirs.meta["latent_names"].index(hid)
    params = (provenance(frame) or {}).get("measure_params", {}).get("logreg", {})
    probe = cls(
        str(rows["layer"][0]),
        C=float(params.get("C", 1.0)),
        penalty="l1",
        folds=None,
        block_size=block_size,
        device=device,
    )
    r = read(model, records, probe.layer, None, block_size, device, hypothesis, labels)
    at, y = binary_targets(r.y, "the hypothesis" if labels is None else "labels")
    probe.mean_ = dirs.b_dec.detach().double().numpy()
    probe.scale_ = np.ones_like(probe.mean_)
    probe.coef_ = dirs.W_enc[:, j].detach().double().numpy()[None, :]
    probe.intercept_ = np.zeros(1)
    z = probe._logits(r.X[torch.from_numpy(at)])
    probe.intercept_ = np.array([solver.fit_intercept(torch.from_numpy(z), torch.from_numpy(y))])
    z = z + probe.intercept_[0]
    probe.threshold_, probe.train_f1_ = solver.f1_threshold(expit(z), y)
    probe.train_auroc_, probe.cv_auroc_, probe.n_iter_ = solver.auroc(z, y), None, 0
    probe.n_features_in_, probe.classes_ = probe.coef_.shape[1], np.array([0, 1])
    probe._bind(model, r, hypothesis, y, source="logreg frame")
    return probe


def score_frame(r: Reading, z: np.ndarray, threshold: float, pool: str, per: str) -> pl.DataFrame:
    """Logits ``z`` of the symbols of ``r`` as :meth:`Probe.apply`'s frame, ``per`` symbol or
    record; a record's score is its symbols' logits pooled by ``pool``."""
    frame = pl.DataFrame({"record": r.record, "symbol": r.symbol, "score": z})
    col = pl.col("score")
    pooled = {"mean": col.mean(), "max": col.max(), "last": col.last()}[pool]
    if per == "symbol":
        frame = frame.with_columns(record_score=pooled.over("record"))
        head, tail = ["record", "symbol"], ["record_score"]
    else:
        symbols = pl.len().cast(pl.Int64).alias("symbols")
        frame = frame.group_by("record", maintain_order=True).agg(symbols, pooled)
        head, tail = ["record", "symbols"], []
    p = expit(frame["score"].to_numpy())  # as predict_proba computes it
    frame = frame.with_columns(probability=p, predicted=p >= threshold)
    return frame.select(*head, "score", "probability", "predicted", *tail)
