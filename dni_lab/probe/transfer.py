"""A fitted probe on another tap: another layer of its model, or another model of its width.

:func:`transfer` reads the same held-out records at the probe's own tap (the model it is
bound to, its layer) and at the new one, scores both against the same labels and reports
the AUROC at each and the drop between them, with a percentile bootstrap interval over
records. One draw of records serves both taps, so the drop's interval is a *paired* one:
what varies between records (a record easy everywhere) cancels instead of widening it.
The transfer is then recorded in ``probe.transfers_``, as :func:`.storage.load` records a
probe loaded with ``allow_other_model=True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl

from ..backend.engine.resolve import as_records
from ..backend.errors import DNIError, LayerError
from . import metrics, storage
from .reading import Reading, as_model, binary_targets, model_sha256, read


def transfer(
    probe: Any,
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
    """:meth:`Probe.transfer`: held-out AUROC at the probe's tap and at a new one, and the drop.

    Returns
    -------
    pl.DataFrame
        ``name, model, layer, value, lo, hi, se``: rows ``auroc_original`` (the probe's
        model and layer), ``auroc_transfer`` (``model`` at ``layer``) and ``auroc_drop``
        (original less transfer; positive when the probe does worse on the new tap).
    """
    if (hypothesis is None) == (labels is None):
        raise DNIError("Probe.transfer takes a hypothesis or labels=..., exactly one of them.")
    if not hasattr(probe, "coef_"):
        raise DNIError("this Probe is not fitted; call fit(model, records, hypothesis) first.")
    if not (isinstance(n_boot, int) and n_boot >= 1):
        raise DNIError(f"n_boot={n_boot!r}: pass a positive number of bootstrap replicates.")
    target = as_model(model)
    tap = probe.layer if layer is None else layer
    target_sha = model_sha256(target)
    src, src_sha = _source(probe, target, target_sha, source)
    recs = list(as_records(records))  # read twice: at the new tap and at the probe's own
    what = "the hypothesis" if labels is None else "labels"

    new = _read(probe, target, recs, tap, hypothesis, labels)
    if new.X.shape[1] != probe.coef_.shape[1]:
        raise LayerError(
            f"layer {tap!r} of model {target.name!r} has {new.X.shape[1]} units; the probe "
            f"weighs {probe.coef_.shape[1]} (fitted on layer {probe.layer!r} of model "
            f"{probe.model_name_!r}). A probe transfers only to a layer of the same width: "
            f"pick a layer of {probe.coef_.shape[1]} units."
        )
    if target_sha == src_sha and new.address == probe.address_:
        raise DNIError(
            f"layer {tap!r} of model {target.name!r} is the probe's own tap; pass layer= "
            "another layer of this model, or another model of the same width."
        )
    own = _read(probe, src, recs, probe.layer, hypothesis, labels)
    parts = []
    for r in (own, new):
        rows, y = binary_targets(r.y, what)
        z = probe._logits(r.X)[rows]
        order = np.argsort(-z, kind="stable")  # sorted once: each replicate's sort is cheap
        parts.append((z[order], y[order], r.record[rows][order]))
    value, lo, hi, se = _paired_bootstrap(parts, n_boot, seed, level)

    probe.transfers_.append(
        storage.transfer_entry(
            {"name": probe.model_name_, "weights_sha256": probe.model_sha256_,
             "layer": probe.layer},
            {"name": target.name, "weights_sha256": target_sha, "layer": tap},
            via="Probe.transfer",
            records=len(recs),
            data_sha256=new.data_sha256,
            auroc={"original": value[0], "transfer": value[1], "drop": value[2]},
        )
    )  # fmt: skip
    return pl.DataFrame(
        {
            "name": ["auroc_original", "auroc_transfer", "auroc_drop"],
            "model": [src.name, target.name, target.name],
            "layer": [probe.layer, tap, tap],
            "value": value,
            "lo": lo,
            "hi": hi,
            "se": se,
        }
    )


def _source(probe: Any, target: Any, target_sha: str, source: Any) -> tuple[Any, str]:
    """The model the probe was fitted on (its weights hash checked), where it is read as is."""
    if source is None:
        if target_sha != probe.model_sha256_:
            raise DNIError(
                f"model {target.name!r} holds other weights than model {probe.model_name_!r}, "
                "the one the probe is bound to; pass that model as source= too, so the "
                "probe's own AUROC is read on the same records."
            )
        return target, target_sha
    src = as_model(source)
    sha = model_sha256(src)
    # strictly the fitted-on weights: a model the probe was transferred to before is not
    # its original tap, so it cannot stand for it
    if sha != probe.model_sha256_:
        raise DNIError(
            f"source= model {src.name!r} holds other weights ({sha[:16]}…) than model "
            f"{probe.model_name_!r} ({probe.model_sha256_[:16]}…), the one the probe is bound "
            "to; pass the model it was fitted on."
        )
    return src, sha


def _read(probe: Any, model: Any, recs: list, layer: str, hypothesis: Any, labels: Any) -> Reading:
    return read(model, recs, layer, probe.units, probe.block_size, probe.device, hypothesis, labels)


def _paired_bootstrap(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    n_boot: int,
    seed: int | None,
    level: float,
) -> tuple[list[float], list[float], list[float], list[float]]:
    """AUROC at each tap and their difference, with intervals from one draw of records.

    The two taps' rows are stacked and resampled by record (``metrics.bootstrap``), so a
    replicate weighs a record alike at both taps; the per-tap AUROCs of each replicate are
    kept beside the difference it returns.
    """
    (z0, y0, g0), (z1, y1, g1) = parts
    n0 = len(z0)
    per_tap: list[tuple[float, float]] = []

    def drop(w: np.ndarray | None) -> float:
        a = metrics.auroc(z0, y0, None if w is None else w[:n0])
        b = metrics.auroc(z1, y1, None if w is None else w[n0:])
        if w is not None:  # the point estimate (w None) is no replicate
            per_tap.append((a, b))
        return a - b

    d, d_lo, d_hi, d_reps = metrics.bootstrap(drop, np.concatenate([g0, g1]), n_boot, seed, level)
    reps = np.array(per_tap).reshape(-1, 2)
    alpha = (1 - level) / 2
    value, lo, hi, se = [], [], [], []
    for k, (z, y) in enumerate(((z0, y0), (z1, y1))):
        ok = reps[:, k][~np.isnan(reps[:, k])]
        value.append(metrics.auroc(z, y))
        q = np.quantile(ok, [alpha, 1 - alpha]) if ok.size else (np.nan, np.nan)
        lo.append(float(q[0]))
        hi.append(float(q[1]))
        se.append(float(np.std(ok)) if ok.size else float("nan"))
    value.append(d)
    lo.append(d_lo)
    hi.append(d_hi)
    se.append(float(np.nanstd(d_reps)))
    return value, lo, hi, se
