"""Directions as a feature set: PCA components of a layer, or the weights of a fitted probe.

A :class:`Directions` set has no nonlinearity: latent ``i`` is the projection
``(x - mean) · w_i``, and decoding maps latents back through the pseudo-inverse
(``Wᵀ`` for orthonormal PCA components). It attaches and scores like any other set
(``units=[dirs]``), which lets a probe's direction or a principal component compete
with neurons and SAE latents in one score frame. Its ``architecture`` is
``"directions"``: dni_lab saves and loads it in SAELens' layout, SAELens does not read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..backend.engine.provenance import provenance
from ..backend.errors import DNIError
from ..backend.extraction.extract import on_device, resolve_device
from ..backend.extraction.models import Model
from .base import FeatureSet
from .quality import activations

_F64 = torch.float64


class Directions(FeatureSet):
    """Linear latents ``z = (x - b_dec) W_enc + b_enc``; ``meta["latent_names"]`` names them."""

    architecture = "directions"

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return pre

    @classmethod
    def from_weights(
        cls,
        W: torch.Tensor | np.ndarray,
        hook: str,
        mean: torch.Tensor | np.ndarray | None = None,
        name: str = "directions",
        latent_names: Sequence[str] | None = None,
    ) -> Directions:
        """Directions from a ``(d_in, n)`` matrix, centred on ``mean`` (zeros by default)."""
        W = torch.as_tensor(np.asarray(W), dtype=torch.float32)
        if W.dim() != 2:
            raise DNIError(f"directions {name!r}: W must be (d_in, n), got {tuple(W.shape)}.")
        d_in, n = W.shape
        meta = {"latent_names": list(latent_names)} if latent_names is not None else {}
        fs = cls(d_in, n, hook, name=name, apply_b_dec_to_input=True, meta=meta)
        with torch.no_grad():
            fs.W_enc.copy_(W)
            fs.W_dec.copy_(torch.linalg.pinv(W.double()).float())
            if mean is not None:
                fs.b_dec.copy_(torch.as_tensor(np.asarray(mean), dtype=torch.float32))
        return fs.requires_grad_(False)


def _moments(
    model: Model, hook: str, records: Iterable[Any], device: Any, block_size: int, second: bool
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Count, sum and (co)variance sums of the hook's activations, streamed in float64."""
    dev = resolve_device(device)
    addr = model.resolve_layer(hook)
    n, s, q = 0, None, None
    with on_device(model, dev), torch.inference_mode():
        for _, X in activations(model, addr, records, block_size, dev):
            X = X.to(_F64)
            s = X.sum(0) if s is None else s + X.sum(0)
            sq = X.T @ X if second else (X * X).sum(0)
            q = sq if q is None else q + sq
            n += X.shape[0]
    if n < 2:
        raise DNIError(f"hook {hook!r}: fewer than 2 symbols read; pass more records.")
    return n, s, q


def pca(
    model: Model,
    records: Iterable[Any],
    hook: str,
    n_components: int = 16,
    name: str | None = None,
    block_size: int = 64,
    device: str | torch.device = "auto",
) -> Directions:
    """The top principal components of ``hook``'s activations, as a feature set.

    The covariance is accumulated block by block (``d_in × d_in``, never the
    activations); components are unit vectors, each signed so that its largest
    entry is positive. ``explained_variance_ratio_`` holds each component's share.
    """
    n, s, q = _moments(model, hook, records, device, block_size, second=True)
    mean = s / n
    cov = (q - n * torch.outer(mean, mean)) / (n - 1)
    vals, vecs = torch.linalg.eigh(cov)
    order = torch.argsort(vals, descending=True)[:n_components]
    W = vecs[:, order]
    flip = torch.sign(W.gather(0, W.abs().argmax(0, keepdim=True)))
    W = W * flip
    fs = Directions.from_weights(
        W, hook, mean, name=name or f"pca{n_components}",
        latent_names=[f"pc{i}" for i in range(W.shape[1])],
    )  # fmt: skip
    fs.explained_variance_ratio_ = (vals[order] / vals.clamp_min(0).sum()).cpu().numpy()
    return fs


def from_probe(
    frame: pl.DataFrame,
    model: Model,
    records: Iterable[Any],
    measure: str | None = None,
    hook: str | None = None,
    name: str | None = None,
    block_size: int = 64,
    device: str | torch.device = "auto",
    unit_score: str | None = None,
) -> Directions:
    """One direction per hypothesis from a fitted ``logreg`` or ``ridge`` score frame.

    A ridge coefficient multiplies the raw unit; a logreg coefficient the unit
    standardized over the symbols read, so its direction is ``coef / std`` with the
    standard deviations measured here over ``records``. Latent ``i`` is then the probe's
    output for hypothesis ``i`` less its intercept. The frame's rows of each hypothesis
    must come from one layer of ``model`` (units missing from the frame weigh 0).

    A direction needs coefficients: a ``logreg`` frame must come from
    ``LogReg(unit_score="coef")`` (its default, ``"loading"``, shows each unit's
    correlation with the probe's output, which is no weight). What the rows hold is read
    from the frame's provenance; a frame without it (filtered, or read back from a file)
    says so with ``unit_score="coef"``.
    """
    measures = sorted(set(frame["measure"]) & {"logreg", "ridge"})
    if measure is None:
        if len(measures) != 1:
            raise DNIError(
                f"from_probe needs a frame of one probe measure (logreg or ridge); it holds "
                f"{measures or sorted(set(frame['measure']))}. Pass measure='logreg' or 'ridge'."
            )
        measure = measures[0]
    if measure == "logreg":
        _require_coefficients(frame, unit_score)
    rows = frame.filter(pl.col("measure") == measure)
    layers = sorted(set(rows["layer"]))
    if len(layers) != 1:
        raise DNIError(
            f"from_probe reads one layer's probe; the frame's {measure} rows come from {layers}. "
            "Filter the frame to one layer first."
        )
    hook = hook or layers[0]
    n, s, q = _moments(model, hook, records, device, block_size, second=False)
    mean = s / n
    std = ((q - n * mean * mean) / (n - 1)).clamp_min(0).sqrt()
    hids = list(dict.fromkeys(rows["hid"].to_list()))
    W = torch.zeros(len(mean), len(hids), dtype=_F64)
    for j, hid in enumerate(hids):
        sub = rows.filter((pl.col("hid") == hid) & pl.col("unit_score").is_not_null())
        units = torch.tensor(sub["unit"].to_list(), dtype=torch.long)
        if len(units) and int(units.max()) >= len(mean):
            raise DNIError(
                f"the frame names unit {int(units.max())} of {hook!r}, which is {len(mean)} wide."
            )
        coef = torch.tensor(sub["unit_score"].to_list(), dtype=_F64)
        if measure == "logreg":
            s_u = std.cpu()[units]
            coef = torch.where(s_u > 0, coef / s_u.clamp_min(1e-12), 0.0)
        W[units, j] = coef
    return Directions.from_weights(
        W, hook, mean.cpu(), name=name or f"{measure}-directions", latent_names=hids
    )


def _require_coefficients(frame: pl.DataFrame, unit_score: str | None) -> None:
    """A logreg frame's unit scores must be coefficients: told, or read from provenance."""
    if unit_score is None:
        record = provenance(frame) or {}
        unit_score = (record.get("measure_params") or {}).get("logreg", {}).get("unit_score")
    fix = ("inspect with measures=[LogReg(unit_score='coef')] (from "
           "dni_lab.backend.measures.logreg) and pass that frame")  # fmt: skip
    if unit_score is None:
        raise DNIError(
            "from_probe cannot tell whether this logreg frame's unit scores are coefficients "
            "(the frame has no provenance: filtered or read back). If it came from "
            f"LogReg(unit_score='coef'), pass unit_score='coef'; otherwise {fix}."
        )
    if unit_score != "coef":
        raise DNIError(
            f"this logreg frame's unit scores are {unit_score!r}s (LogReg's default: each "
            f"unit's correlation with the probe's output), not weights; {fix}."
        )
