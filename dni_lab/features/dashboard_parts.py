"""What the latent dashboard adds to a latent's summary, as Polars frames (no widget here).

The latents whose decoder rows point the same way, the distribution of the latent's
direct logit weights over the whole vocabulary, its explanation and score when one
is given, and what ablating it does to the loss at each token of its top examples
(``dl.features.ablate``'s edit: the latent's contribution removed, the SAE's error
term kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from ..backend.errors import DNIError
from ..backend.extraction.behaviors import batches
from ..backend.extraction.extract import on_device
from ..backend.verify.common import forward_output
from .ablate import edited
from .base import FeatureSet
from .summary import LatentSummary, logit_weights

EXPLANATION_COLUMNS = ("latent", "explanation", "score")


@dataclass
class LatentDashboardData(LatentSummary):
    """A :class:`LatentSummary` with the dashboard's further parts (see :func:`parts`)."""

    nearest: pl.DataFrame | None = None  # latent, cosine: best first
    logit_weights: pl.DataFrame | None = None  # lo, hi, count over the vocabulary
    explanation: pl.DataFrame | None = None  # explanation, score: best first
    ablation: pl.DataFrame | None = None  # record, position, symbol, logprob, ablated_logprob,
    # loss_change


def nearest_latents(fs: FeatureSet, latent: int, n: int = 10) -> pl.DataFrame:
    """The ``n`` other latents whose ``W_dec`` rows have the highest cosine with ``latent``'s.

    A zero row (a dead latent) has cosine 0 with every row.
    """
    with torch.no_grad():
        W = fs.W_dec.detach().double()
        unit = W / W.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
        cos = unit @ unit[latent]
        cos[latent] = -torch.inf
        vals, ids = cos.topk(min(int(n), fs.d_sae - 1))
    return pl.DataFrame({"latent": ids.cpu().numpy().astype(np.int64),
                         "cosine": vals.cpu().numpy()})  # fmt: skip


def logit_weight_histogram(model: Any, fs: FeatureSet, latent: int, bins: int = 20):
    """Histogram (``lo, hi, count``) of ``W_U · W_dec[latent]`` over the whole vocabulary.

    The weights are the summary's logit effects (:func:`.summary.logit_weights`) of every
    token, never decoded; ``None`` where the summary has none (no unembedding or
    tokenizer, or another width).
    """
    weights = logit_weights(model, fs, latent)
    if weights is None:
        return None
    w = weights.cpu().numpy()
    lo, hi = float(w.min()), float(w.max())
    if lo == hi:  # one value: a bin around it
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(w, bins=np.linspace(lo, hi, int(bins) + 1))
    return pl.DataFrame({"lo": edges[:-1], "hi": edges[1:], "count": counts.astype(np.int64)})


def explanation_rows(
    latent: int,
    explanation: str | None = None,
    explanation_score: float | None = None,
    explanations: pl.DataFrame | None = None,
) -> pl.DataFrame | None:
    """The latent's explanation(s) and score(s), best score first; ``None`` if none given.

    ``explanations`` is any frame with columns ``latent, explanation, score`` (e.g. a
    frame of scored explanations); its rows of ``latent`` are kept.
    """
    if explanations is not None and (explanation is not None or explanation_score is not None):
        raise DNIError(
            "the dashboard got both explanation= and explanations=; pass the string (with "
            "explanation_score=) or the frame of scored explanations, not both."
        )
    if explanations is not None:
        if not isinstance(explanations, pl.DataFrame):
            raise DNIError(
                f"explanations= must be a Polars DataFrame with columns {EXPLANATION_COLUMNS}, "
                f"not {type(explanations).__name__}."
            )
        missing = [c for c in EXPLANATION_COLUMNS if c not in explanations.columns]
        if missing:
            raise DNIError(
                f"the explanations frame lacks columns {missing} (it has "
                f"{explanations.columns}); it needs {list(EXPLANATION_COLUMNS)}."
            )
        own = explanations.filter(pl.col("latent") == latent).select("explanation", "score")
        return own.cast({"explanation": pl.String, "score": pl.Float64}).sort(
            "score", descending=True, nulls_last=True
        )
    if explanation is None:
        if explanation_score is not None:
            raise DNIError("explanation_score= needs the explanation= it scores.")
        return None
    score = None if explanation_score is None else float(explanation_score)
    return pl.DataFrame({"explanation": [str(explanation)], "score": [score]},
                        schema={"explanation": pl.String, "score": pl.Float64})  # fmt: skip


def _next_logprobs(model: Any, records: list[Any], output: torch.Tensor) -> list[np.ndarray] | None:
    """Per record, ``log p(symbol t | symbols < t)`` for t >= 1 (float64); ``None`` when
    ``output`` is not next-symbol logits (as ``dl.verify.next_symbol_accuracy`` reads them)."""
    if hasattr(model, "symbol_slots"):  # a transformer: tokens are the symbols
        slots = model.symbol_slots(output)
        if slots is None:
            return None
        index, real = slots
        ids = model.encode(records)["input_ids"].to(output.device).gather(1, index)
        logits = output.gather(1, index[..., None].expand(-1, -1, output.shape[-1]))
        counts = real.sum(1).tolist()
    else:
        ids = model.encode(records)
        if not torch.is_tensor(ids) or output.dim() != 3 or output.shape[:2] != ids.shape:
            return None
        if ids.numel() and int(ids.max()) >= output.shape[-1]:  # not scores of the symbol ids
            return None
        ids, logits = ids.to(output.device), output
        counts = [model.symbols(r) for r in records]
    lp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    return [lp[r, : max(c - 1, 0)].cpu().numpy() for r, c in enumerate(counts)]


def ablation_effects(
    model: Any,
    fs: FeatureSet,
    latent: int,
    records: Sequence[Any],
    examples: pl.DataFrame,
    device: torch.device,
    batch_size: int = 16,
) -> pl.DataFrame | None:
    """Each top example's per-token loss change when ``latent`` is ablated.

    One row per symbol of each record in ``examples`` (the summary's): ``logprob`` and
    ``ablated_logprob`` of that symbol given the ones before it, and ``loss_change =
    logprob - ablated_logprob`` (positive: the latent helped predict the symbol). The
    first symbol has no prediction (nulls). ``None`` for a model whose output is not
    next-symbol logits.
    """
    schema = {"record": pl.Int64, "position": pl.Int64, "symbol": pl.String,
              "logprob": pl.Float64, "ablated_logprob": pl.Float64,
              "loss_change": pl.Float64}  # fmt: skip
    shown = examples.unique(["record", "position"], keep="first", maintain_order=True)
    ids = list(dict.fromkeys(shown["record"].to_list()))
    if not ids:
        return pl.DataFrame(schema=schema)
    recs = [records[i] for i in ids]
    clean: list[np.ndarray] = []
    ablated: list[np.ndarray] = []
    with on_device(model, device), torch.inference_mode():
        for _, part in batches(recs, batch_size):
            lp = _next_logprobs(model, part, forward_output(model, part, device))
            if lp is None:
                return None
            with edited(model, fs, [latent], 0.0):
                ablated += _next_logprobs(model, part, forward_output(model, part, device))
            clean += lp
    rows = []
    for rec, a, b in zip(ids, clean, ablated, strict=True):
        sym = shown.filter(pl.col("record") == rec).sort("position")
        for t, s in zip(sym["position"].to_list(), sym["symbol"].to_list(), strict=True):
            lp, lq = (float(a[t - 1]), float(b[t - 1])) if 1 <= t <= len(a) else (None, None)
            rows.append({"record": rec, "position": t, "symbol": s, "logprob": lp,
                         "ablated_logprob": lq,
                         "loss_change": None if lp is None else lp - lq})  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def parts(
    model: Any,
    fs: FeatureSet,
    summary: LatentSummary,
    records: Sequence[Any],
    device: torch.device,
    n_nearest: int = 10,
    logit_bins: int = 20,
    explanation: str | None = None,
    explanation_score: float | None = None,
    explanations: pl.DataFrame | None = None,
    ablation: bool = True,
) -> LatentDashboardData:
    """``summary`` with the nearest latents, logit-weight histogram, explanation and
    (``ablation=True``) per-token ablation effects on its examples."""
    latent = summary.latent
    return LatentDashboardData(
        **vars(summary),
        nearest=nearest_latents(fs, latent, n_nearest),
        logit_weights=logit_weight_histogram(model, fs, latent, logit_bins),
        explanation=explanation_rows(latent, explanation, explanation_score, explanations),
        ablation=ablation_effects(model, fs, latent, records, summary.examples, device)
        if ablation
        else None,
    )
