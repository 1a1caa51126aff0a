"""What a feature dashboard shows about one latent, as Polars frames (no widget here).

For a latent of a feature set over some records: its top activations binned by
quantile (each example's symbols with their activations and, if given, a
hypothesis's values under them), the distribution of its nonzero activations, its
logit effects (``W_U · W_dec[latent]``: the tokens it promotes and suppresses, for a
model with an unembedding), the hypotheses it scores best in a score frame, and the
neurons of its hook it correlates with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from ..backend.engine.levels import decided_for_model
from ..backend.errors import DNIError
from ..backend.extraction.extract import Extractor, on_device, resolve_device, symbol_mask
from ..backend.extraction.models import Model
from ..backend.hypothesis.hypotheses import hypothesis_block
from ..backend.verify.common import single_signal, symbols_of
from .base import FeatureSet
from .quality import blocks, hook_address

_F64 = torch.float64


@dataclass
class LatentSummary:
    """One latent's dashboard data (see :func:`summarize`)."""

    feature_set: str
    latent: int
    firing_rate: float
    examples: pl.DataFrame  # bin, record, position, symbol, activation[, hypothesis]
    density: pl.DataFrame  # lo, hi, count of the nonzero activations
    logits: pl.DataFrame | None  # side (top/bottom), token, effect
    hypotheses: pl.DataFrame | None  # the score frame's rows of this latent, best first
    neurons: pl.DataFrame  # unit, r: the hook's neurons most correlated with the latent


def _texts(model: Model, record: Any, n: int) -> list[str]:
    offsets = getattr(model, "offsets", None)
    if offsets is not None and isinstance(record, str):
        return [record[a:b] for a, b in offsets(record)][:n]
    return [str(s) for s in symbols_of(record)][:n]


def logit_weights(model: Model, fs: FeatureSet, latent: int) -> torch.Tensor | None:
    """``W_U · W_dec[latent]`` over the vocabulary (float64), or None without an LM head,
    a tokenizer or a matching width."""
    head = getattr(model.module, "get_output_embeddings", lambda: None)()
    tok = getattr(model, "tokenizer", None)
    if head is None or tok is None or head.weight.shape[1] != fs.d_out:
        return None
    with torch.no_grad():
        return head.weight.detach().double() @ fs.W_dec[latent].detach().double().to(
            head.weight.device
        )


def _logit_effects(model: Model, fs: FeatureSet, latent: int, n: int) -> pl.DataFrame | None:
    effect = logit_weights(model, fs, latent)
    if effect is None:
        return None
    tok = model.tokenizer
    k = min(n, effect.numel())
    rows = []
    for side, (vals, ids) in (("top", effect.topk(k)), ("bottom", (-effect).topk(k))):
        sign = 1.0 if side == "top" else -1.0
        for v, i in zip(vals.tolist(), ids.tolist(), strict=True):
            rows.append({"side": side, "token": tok.decode([i]), "effect": sign * v})
    return pl.DataFrame(rows)


def summarize(
    model: Model,
    fs: FeatureSet,
    latent: int,
    records: Sequence[Any],
    hypothesis: Any = None,
    frame: pl.DataFrame | None = None,
    n_bins: int = 4,
    per_bin: int = 3,
    n_neurons: int = 10,
    n_tokens: int = 10,
    block_size: int = 64,
    device: str | torch.device = "auto",
) -> LatentSummary:
    """A latent's dashboard data over ``records``.

    Parameters
    ----------
    model, fs, latent
        The model, the feature set at its hook, and the latent's index.
    records : sequence
        Records to read (their per-symbol activations of this latent are kept).
    hypothesis : callable, optional
        A hypothesis whose values run under each example's symbols.
    frame : polars.DataFrame, optional
        A score frame: its rows of this latent, best ``|unit_score|`` first.
    n_bins, per_bin : int
        Quantile bins of the records' peak activation (bin ``n_bins - 1`` holds the
        highest), and the examples shown per bin (the highest of each bin).
    n_neurons, n_tokens : int
        Neurons and logit-effect tokens (each side) listed.
    """
    if not 0 <= int(latent) < fs.d_sae:
        raise DNIError(f"feature set {fs.name!r} has latents 0..{fs.d_sae - 1}; got {latent}.")
    latent, dev = int(latent), resolve_device(device)
    records = list(records)
    addr = hook_address(model, fs)
    fs = fs.to(dev).eval()
    ex = Extractor(model, {addr: None}, "activation", dev)
    acts: list[np.ndarray] = []
    n = 0
    s_a = s_aa = torch.zeros((), dtype=_F64, device=dev)
    s_x = s_xx = s_ax = None
    with on_device(model, dev), torch.inference_mode():
        first = 0
        for block in blocks(records, block_size):
            mask = symbol_mask(model, block, dev)
            X = ex(block, mask, first)[addr]
            a = fs.encode(X)[..., latent].to(_F64) * mask
            counts = mask.sum(1).tolist()
            acts += [a[r, :c].cpu().numpy() for r, c in enumerate(counts)]
            Xm, am = X[mask].to(_F64), a[mask]
            n += Xm.shape[0]
            s_a, s_aa = s_a + am.sum(), s_aa + (am * am).sum()
            sx, sxx, sax = Xm.sum(0), (Xm * Xm).sum(0), am @ Xm
            s_x = sx if s_x is None else s_x + sx
            s_xx = sxx if s_xx is None else s_xx + sxx
            s_ax = sax if s_ax is None else s_ax + sax
            first += len(block)
    if n == 0:
        raise DNIError("summarize needs records with at least one symbol.")
    cov = s_ax - s_a * s_x / n
    den = torch.sqrt(((s_aa - s_a * s_a / n) * (s_xx - s_x * s_x / n)).clamp_min(0))
    r = torch.where(den > 0, cov / den.clamp_min(1e-300), torch.nan).cpu().numpy()
    order = np.argsort(-np.nan_to_num(np.abs(r), nan=-1.0))[:n_neurons]
    neurons = pl.DataFrame({"unit": order.astype(np.int64), "r": r[order]})
    flat = np.concatenate(acts)
    nonzero = flat[flat != 0]
    edges = np.linspace(0.0, float(nonzero.max()) if nonzero.size else 1.0, 21)
    hist = np.histogram(nonzero, bins=edges)[0] if nonzero.size else np.zeros(20, int)
    density = pl.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": hist.astype(np.int64)})
    examples = _examples(model, records, acts, hypothesis, n_bins, per_bin)
    hyps = None
    if frame is not None:
        hyps = (
            frame.filter((pl.col("layer") == fs.address) & (pl.col("unit") == latent))
            .sort(pl.col("unit_score").abs(), descending=True, nulls_last=True)
        )
    return LatentSummary(
        feature_set=fs.address,
        latent=latent,
        firing_rate=float((flat != 0).mean()),
        examples=examples,
        density=density,
        logits=_logit_effects(model, fs, latent, n_tokens),
        hypotheses=hyps,
        neurons=neurons,
    )


def _examples(model, records, acts, hypothesis, n_bins, per_bin) -> pl.DataFrame:
    peaks = np.asarray([a.max() if a.size else 0.0 for a in acts])
    active = np.flatnonzero(peaks > 0)
    schema = {"bin": pl.Int64, "record": pl.Int64, "position": pl.Int64,
              "symbol": pl.String, "activation": pl.Float64}  # fmt: skip
    if hypothesis is not None:
        schema["hypothesis"] = pl.Float64
    if not active.size:
        return pl.DataFrame(schema=schema)
    ranked = active[np.argsort(peaks[active], kind="stable")]  # ascending peak
    fam = single_signal(hypothesis) if hypothesis is not None else None
    # the level decided once over the records, as a run does: never from one record's counts
    aligned = decided_for_model(model, [fam], records)[0] if fam is not None else None
    rows = []
    for b, part in enumerate(np.array_split(ranked, min(n_bins, len(ranked)))):
        for rec in part[::-1][:per_bin]:  # the highest of the bin first
            rec = int(rec)
            a = acts[rec]
            h = None
            if aligned is not None:
                h = hypothesis_block([aligned], [records[rec]], [len(a)], rec, None)[0, : len(a), 0]
            for t, text in enumerate(_texts(model, records[rec], len(a))):
                row = {"bin": b, "record": rec, "position": t, "symbol": text,
                       "activation": float(a[t])}  # fmt: skip
                if h is not None:
                    row["hypothesis"] = float(h[t])
                rows.append(row)
    return pl.DataFrame(rows, schema=schema)
