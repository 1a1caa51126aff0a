"""Attribution patching: every unit's (or head's) patching effect from one gradient.

Exact activation patching (:func:`~.patching.patching`) runs the model once per patched
set. Attribution patching (Nanda 2023; Syed et al. 2023) estimates all of them at once to
first order: the change of the metric when units ``S`` of the target run take the source
run's values is about ``Σ_{t, u∈S} ∂metric/∂a[t, u] · (a_source[t, u] − a_target[t, u])``,
the gradient taken on the target run. With ``exact=True`` every unit (head) is also
patched exactly, one at a time, and the summary gives the rank correlation of the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError
from ..extraction.extract import on_device, resolve_device, symbol_mask
from ..extraction.models import Model
from .common import Verification, address_and_width, batches
from .gradients import Metric, MetricGradients
from .patching import (
    _check_pairs,
    _positions,
    _predicted,
    _Runs,
    choice_size,
    logit_difference,
)


def attribution_patching(
    model: Model,
    clean: Sequence[Any],
    corrupted: Sequence[Any],
    layer: str | int,
    *,
    per: str = "unit",
    positions: Sequence[int] | None = None,
    metric: Metric | None = None,
    answers: Sequence[tuple[Any, Any]] | None = None,
    direction: str = "denoise",
    exact: bool = False,
    device: str | torch.device = "auto",
    batch_size: int = 64,
) -> Verification:
    """Estimate the patching effect of every unit (or head) of ``layer`` from gradients.

    Parameters
    ----------
    model : Model
    clean, corrupted : sequence
        Record pairs, position by position, as for :func:`~.patching.patching`.
    layer : str or int
        A forceable layer: an address or TransformerLens name (``"blocks.0.attn.hook_z"``
        for heads, ``"blocks.3.hook_resid_post"``).
    per : {"unit", "head"}
        Score single units, or heads (``head_dim`` units of a per-head layer) summed.
    positions : sequence of int, optional
        Symbol positions patched (negative: from each record's end); all by default.
    metric, answers :
        As for :func:`~.patching.patching` (default: the logit difference of ``answers``,
        or of each run's own top token at the last symbol).
    direction : {"denoise", "noise"}
        ``"denoise"``: clean values into the corrupted run (gradient on the corrupted
        run); ``"noise"``: corrupted values into the clean run.
    exact : bool
        Also patch every unit (head) exactly, one at a time (one forward pass over the
        target records each), and report the rank correlation with the estimate.
    device : str or torch.device
    batch_size : int
        Records per forward pass.

    Returns
    -------
    Verification
        ``frame``: one row per unit (``unit``) or head (``head``): ``attribution`` (the
        estimated change of the mean metric), ``recovered_est`` (its share of the source
        − target difference), ``rank`` (1: largest attribution), and with ``exact``:
        ``exact`` (the patched change) and ``recovered``. ``summary``: ``layer``, ``per``,
        ``direction``, ``clean``, ``corrupted`` (unpatched metric means) and, with
        ``exact``, ``spearman`` and ``top_agrees`` (the same unit ranks first).
    """
    if per not in ("unit", "head"):
        raise DNIError(f"per must be 'unit' or 'head', not {per!r}.")
    if direction not in ("denoise", "noise"):
        raise DNIError(f"direction must be 'denoise' or 'noise', not {direction!r}.")
    clean, corrupted = list(clean), list(corrupted)
    _check_pairs(model, clean, corrupted)
    dev = resolve_device(device)
    with on_device(model, dev):
        addr, width = address_and_width(model, layer, clean, dev)
        size = choice_size(model, addr, width, per == "head")
        if metric is None:
            metric = logit_difference(model, answers or _predicted(model, clean, corrupted, dev))
        source, target = (clean, corrupted) if direction == "denoise" else (corrupted, clean)
        grads = MetricGradients(model, [addr], metric, dev)
        total = torch.zeros(width, dtype=torch.float64)
        tgt_sum = 0.0
        for (first, src), (_, tgt) in zip(
            batches(source, batch_size), batches(target, batch_size), strict=True
        ):
            a_src = grads.extractor(src, symbol_mask(model, src, dev))[addr].detach()
            vals, g, mask, m = grads(tgt, first)
            where = _positions(mask, positions)[..., None]
            delta = (a_src - vals[addr]) * where
            total += (g[addr] * delta).sum((0, 1)).to(torch.float64).cpu()
            tgt_sum += float(m.sum())
        n = len(target)
        run = _Runs(model, addr, source, target, positions, metric, dev, batch_size)
        # the target run's metric came with its gradients (the forced values are its own)
        src_m, tgt_m = run.score(source), tgt_sum / n
        base = {"clean": src_m, "corrupted": tgt_m}
        if direction == "noise":
            base = {"clean": tgt_m, "corrupted": src_m}
        if src_m == tgt_m:
            raise DNIError(
                f"the metric is {src_m} on clean and corrupted records alike: nothing to "
                "attribute. Check the pairs and the answers."
            )
        attribution = (total / n).view(-1, size).sum(1).numpy()
        span = src_m - tgt_m
        key = "unit" if per == "unit" else "head"
        frame = pl.DataFrame({
            key: np.arange(len(attribution)),
            "attribution": attribution,
            "recovered_est": attribution / span,
        })  # fmt: skip
        summary: dict[str, Any] = {"layer": addr, "per": per, "direction": direction, **base}
        if exact:
            effect = np.array([
                run.patched(np.arange(c * size, (c + 1) * size)) - tgt_m
                for c in range(len(attribution))
            ])  # fmt: skip
            frame = frame.with_columns(
                pl.Series("exact", effect),
                pl.Series("recovered", effect / span),
            )
            from scipy.stats import spearmanr  # scipy.stats costs ~0.7 s at import

            rho = spearmanr(attribution, effect).statistic
            summary["spearman"] = float(rho)
            summary["top_agrees"] = int(np.argmax(attribution)) == int(np.argmax(effect))
    frame = frame.with_columns(
        pl.col("attribution").rank("ordinal", descending=True).cast(pl.Int64).alias("rank")
    )
    return Verification(frame, summary)
