"""Score every latent against its own explanation, with a binary measure and early stopping.

Each latent ``i`` has its own explanation ``e_i``: the pairs wanted are the diagonal
``(i, h(e_i))``, not every latent against every explanation. A per-unit measure in
``dl.inspect`` scores the whole cross product of its units and hypotheses, and an
``auroc``/``prf1`` state holds ``buckets × units × (2·bins + 1) × (hypotheses + 1)``
counts, so one inspection of 10,000 latents × thousands of explanations is out of reach
(and, per latent, all but one of its columns would be waste).

:func:`score_explanations` therefore

1. compiles each distinct text once (:func:`~.explanation_grammar.compile_explanation`)
   and gives explanations that compile to the same hypothesis one ``hid``
   (``"expl_<hash>"``), so "fires on digits" and "digits" are read once;
2. packs the hypotheses into *chunks*: hypotheses are taken in order with their latents
   until a chunk holds ``chunk_latents`` latents or ``chunk_hypotheses`` hypotheses (a
   hypothesis shared by more latents than fit is split over several chunks);
3. runs one ``dl.inspect`` per chunk, ``units=[(features, chunk_latents)]``, the
   chunk's hypotheses as one family per level (one pass over a record evaluates all of
   them), the measure and ``eps``; and keeps, of its frame, only each latent's rows
   for its own explanations.

So every pair is scored by the real measure with its own early stopping, and the waste
is bounded: a latent is scored against at most ``chunk_hypotheses`` hypotheses, while
the number of inspections (each reading at least the records the jackknife needs) is
about ``max(latents / chunk_latents, hypotheses / chunk_hypotheses)``. Where many latents
share a hypothesis (character classes), chunks fill with latents and waste nothing.
A chunk stops reading when all its pairs are within eps, the off-diagonal ones included
(the engine has no notion of pairs that do not matter): a rare hypothesis in a chunk
keeps that chunk reading. ``data`` is read once per chunk, so it must be re-iterable.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import polars as pl

from ..backend.errors import DNIError
from ..backend.hypothesis.hypotheses import HypothesisFamily
from ..backend.measures import get_measure, measure_class
from .explanation_grammar import Compiled, compile_explanation
from .explanations import read_explanations

COLUMNS = {
    "latent": pl.Int64(),
    "explanation": pl.String(),
    "compiled": pl.Boolean(),
    "reason": pl.String(),
    "hid": pl.String(),
    "score": pl.Float64(),
    "err": pl.Float64(),
    "converged": pl.Boolean(),
    "records_read": pl.Int64(),
}


class ExplanationFamily(HypothesisFamily):
    """Compiled explanations of one level, evaluated together, one signal each."""

    kind = "binary"

    def __init__(self, compiled: dict[str, Compiled], level: str) -> None:
        self.compiled = dict(compiled)
        self.level = level
        self.name = f"explanations_{level}"

    def signals(self) -> list[str]:
        return list(self.compiled)

    def hids(self) -> list[str]:
        return list(self.compiled)

    def evaluate(self, record: Any) -> np.ndarray:
        return np.stack([c.values(record) for c in self.compiled.values()], axis=1)

    def get_params(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "signals": {h: c.__fingerprint__() for h, c in self.compiled.items()},
        }


def score_explanations(
    model: Any,
    features: Any,
    explanations: Any,
    data: Any,
    measure: Any = "auroc",
    eps: float | None = 0.05,
    *,
    bins: int = 32,
    chunk_latents: int = 256,
    chunk_hypotheses: int = 32,
    block_size: int = 256,
    cache: Any = False,
    **inspect_kwargs: Any,
) -> pl.DataFrame:
    """Score each latent's explanation as a binary hypothesis on the latent.

    Parameters
    ----------
    model : Model
        The model the feature set attaches to.
    features : FeatureSet
        The set whose latents the explanations describe.
    explanations : pl.DataFrame, path, list or dict
        A frame with ``latent`` and ``explanation`` columns (:func:`read_explanations`'
        frame), or anything :func:`read_explanations` reads.
    data : sequence or path
        Text records; read once per chunk, so a list, a table or a path, not a generator.
    measure : str or Measure
        ``"auroc"`` or ``"prf1"`` (built with ``bins``), or a binary Measure object.
    eps : float or None
        Early stopping, as in ``dl.inspect``.
    bins : int
        Cell edges per latent of a measure given by name (its state is ``buckets ×
        latents × (2·bins + 1) × (hypotheses + 1)`` counts per chunk).
    chunk_latents, chunk_hypotheses : int
        The most latents and distinct hypotheses of one inspection (see the module).
    block_size, cache, **inspect_kwargs
        Passed to ``dl.inspect`` (``max_records``, ``device``, ``cluster``, ...).

    Returns
    -------
    pl.DataFrame
        One row per explanation, in order: ``latent, explanation, compiled, reason`` (why
        it was not compiled, or why its score is null), ``hid`` (shared by explanations
        that compile alike), ``score, err, converged, records_read`` (the inspection's
        ``unit_score``, ``err``, ``converged`` and ``n_records``).
    """
    from ..backend.api import inspect

    table = _as_table(explanations)
    _check_latents(table, features)
    if iter(data) is data:
        raise DNIError(
            "data is an iterator; score_explanations reads it once per chunk of latents: "
            "pass a list, a table or a path."
        )
    meas = _measure(measure, bins)
    comp = {t: compile_explanation(t, model) for t in table["explanation"].unique().to_list()}
    hid_of = {t: "expl_" + hashlib.sha256(c.key.encode()).hexdigest()[:12]
              for t, c in comp.items() if c.ok}  # fmt: skip
    by_hid = {hid_of[t]: c for t, c in comp.items() if c.ok}
    rows = table.select(
        "latent",
        "explanation",
        pl.col("explanation")
        .replace_strict(hid_of, default=None, return_dtype=pl.String)
        .alias("hid"),
    )
    pairs = rows.drop_nulls("hid").select("latent", "hid").unique(maintain_order=True)
    scored = []
    for latents, hids in _chunks(pairs, chunk_latents, chunk_hypotheses):
        fams = [
            ExplanationFamily({h: by_hid[h] for h in hids if by_hid[h].level == lvl}, lvl)
            for lvl in ("char", "token")
            if any(by_hid[h].level == lvl for h in hids)
        ]
        frame = inspect(model, fams, [meas], data, units=[(features, latents)], eps=eps,
                        block_size=block_size, cache=cache, **inspect_kwargs)  # fmt: skip
        scored.append(
            frame.select(
                pl.col("unit").alias("latent"), "hid", pl.col("unit_score").alias("score"),
                "err", "converged", pl.col("n_records").alias("records_read"),
                pl.col("reason").alias("score_reason"),
            ).join(pairs, on=["latent", "hid"], how="semi")
        )  # fmt: skip
    schema = {"latent": pl.Int64(), "hid": pl.String(), "score": pl.Float64(),
              "err": pl.Float64(), "converged": pl.Boolean(), "records_read": pl.Int64(),
              "score_reason": pl.String()}  # fmt: skip
    scores = pl.concat(scored) if scored else pl.DataFrame(schema=schema)
    # a pair can fall in two chunks' cross products (its hypothesis split over chunks, its
    # latent in both): either row is that pair's score; keep the first
    scores = scores.unique(["latent", "hid"], keep="first", maintain_order=True)
    reasons = {t: c.reason for t, c in comp.items() if not c.ok}
    out = rows.join(scores, on=["latent", "hid"], how="left", maintain_order="left")
    return out.select(
        "latent",
        "explanation",
        pl.col("hid").is_not_null().alias("compiled"),
        pl.coalesce(
            pl.col("explanation").replace_strict(reasons, default=None, return_dtype=pl.String),
            pl.col("score_reason"),
        ).alias("reason"),
        "hid", "score", "err", "converged", "records_read",
    ).cast(COLUMNS)  # fmt: skip


def _as_table(explanations: Any) -> pl.DataFrame:
    table = (
        explanations if isinstance(explanations, pl.DataFrame) else read_explanations(explanations)
    )
    missing = [c for c in ("latent", "explanation") if c not in table.columns]
    if missing:
        raise DNIError(
            f"explanations lack columns {missing}; pass read_explanations(...)'s frame or a "
            "frame with 'latent' and 'explanation'."
        )
    return table.select(pl.col("latent").cast(pl.Int64), pl.col("explanation").cast(pl.String))


def _check_latents(table: pl.DataFrame, features: Any) -> None:
    d_sae = int(features.d_sae)
    bad = table.filter((pl.col("latent") < 0) | (pl.col("latent") >= d_sae))["latent"]
    if len(bad):
        raise DNIError(
            f"explanations name latents {bad.unique().sort().head(5).to_list()} but feature set "
            f"{getattr(features, 'name', '?')!r} has {d_sae} (0..{d_sae - 1}); are they the "
            "explanations of another set?"
        )
    if table["explanation"].null_count():
        raise DNIError("explanations hold null texts; drop or fill those rows first.")


def _measure(measure: Any, bins: int) -> Any:
    if isinstance(measure, str) and measure in ("auroc", "prf1"):
        return measure_class(measure)(bins=bins)
    meas = get_measure(measure)
    if "binary" not in getattr(meas, "kinds", ("binary",)):
        raise DNIError(
            f"measure {meas.name!r} does not score binary hypotheses; use 'auroc' or 'prf1'."
        )
    return meas


def _chunks(
    pairs: pl.DataFrame, max_latents: int, max_hyps: int
) -> list[tuple[list[int], list[str]]]:
    """Hypotheses with their latents, packed in order into chunks within both limits."""
    if max_latents < 1 or max_hyps < 1:
        raise DNIError("chunk_latents and chunk_hypotheses must be at least 1.")
    groups = pairs.group_by("hid", maintain_order=True).agg(pl.col("latent").unique().sort())
    chunks: list[tuple[list[int], list[str]]] = []
    latents: set[int] = set()
    hids: list[str] = []
    for hid, lats in groups.iter_rows():
        for k in range(0, len(lats), max_latents):
            piece = set(lats[k : k + max_latents])
            if hids and (len(latents | piece) > max_latents or len(hids) >= max_hyps):
                chunks.append((sorted(latents), hids))
                latents, hids = set(), []
            latents |= piece
            hids.append(hid)
    if hids:
        chunks.append((sorted(latents), hids))
    return chunks
