"""Steering vectors from a hypothesis or a probe, and what they do to generated text.

``dl.steering_vector(model, records, hypothesis, name)`` is the difference of means of
the activation at ``name`` over the symbols where the hypothesis holds and where it
does not (read as a probe reads them, :mod:`.reading`: a transformer's tokens take
character and word values pooled over their spans); ``probe=`` gives a fitted
:class:`~.estimator.Probe`'s direction in the layer's own units instead.
:func:`random_direction` is the null: a random direction of the same norm.
:func:`steering_report` generates from the same prompts steered by the vector, by
nulls and not at all (``dl.generate``), evaluates the hypothesis on each generated
text and compares each condition with the null, prompt by prompt.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..backend.engine.levels import decided_for_model
from ..backend.errors import DNIError
from ..backend.hf.generation import generate
from ..backend.hypothesis.hypotheses import as_family, hypothesis_block
from .reading import as_model, binary_targets, read


def steering_vector(
    model: Any,
    records: Iterable[Any] | None = None,
    hypothesis: Any = None,
    name: str | None = None,
    *,
    probe: Any = None,
    block_size: int = 256,
    device: str | torch.device = "auto",
) -> torch.Tensor:
    """A steering vector for ``name``: the hypothesis's difference of means, or a probe's.

    Parameters
    ----------
    model : dl.Model
        The model read (``dl.Model.from_hf(module, tokenizer)`` to steer generation).
    records : iterable, optional
        The records read (with ``hypothesis``).
    hypothesis : callable, optional
        A binary hypothesis (0/1 per symbol, NaN where undefined).
    name : str, optional
        The layer: a TransformerLens hook name, nnsight path or address.
    probe : dl.Probe, optional
        Instead of ``records`` and ``hypothesis``: a fitted probe, whose direction in the
        layer's units (``coef_ / scale_``, the slope on the raw activations) is returned
        at unit norm; ``name`` defaults to its layer.
    block_size, device
        As ``dl.activations`` reads.

    Returns
    -------
    torch.Tensor
        ``(width,)`` float32: ``mean(x | holds) - mean(x | does not)``, or the probe's
        unit direction. Pass it as ``dl.generate(..., steer={name: vector})``.

    Raises
    ------
    DNIError
        Neither a hypothesis nor a probe (or both); a hypothesis that never holds or
        always does on ``records``; an unfitted probe.
    LevelError
        The hypothesis's level is not declared and no record of ``records`` separates
        its possible levels (it is decided once, from the records whose counts differ).
    """
    if probe is not None:
        if records is not None or hypothesis is not None:
            raise DNIError("steering_vector takes records and a hypothesis, or probe=; "
                           "not both.")  # fmt: skip
        coef = getattr(probe, "coef_", None)
        if coef is None:
            raise DNIError("the probe is not fitted; call probe.fit(model, records, "
                           "hypothesis) first.")  # fmt: skip
        w = torch.as_tensor(np.asarray(coef, dtype=np.float64)[0] / probe.scale_)
        if name is not None and model.resolve_layer(name) != probe.address_:
            raise DNIError(f"the probe reads {probe.address_!r}, not {name!r}; leave name out "
                           "or steer the probe's layer.")  # fmt: skip
        return (w / w.norm().clamp_min(1e-30)).float()
    if records is None or hypothesis is None or name is None:
        raise DNIError("steering_vector needs records, a hypothesis and a layer name "
                       "(or probe=, a fitted dl.Probe).")  # fmt: skip
    r = read(as_model(model), records, name, None, block_size, device, hypothesis=hypothesis)
    rows, y = binary_targets(r.y, f"hypothesis {getattr(hypothesis, '__name__', hypothesis)!r}")
    X = r.X[torch.as_tensor(rows)].double()
    pos = torch.as_tensor(y == 1)
    return (X[pos].mean(0) - X[~pos].mean(0)).float()


def random_direction(vector: Any, seed: int = 0) -> torch.Tensor:
    """A random direction with the norm of ``vector`` (Gaussian, then rescaled), seeded.

    Parameters
    ----------
    vector : array-like
        A 1-D steering vector.
    seed : int
        Seeds the draw: the same seed, the same null.

    Returns
    -------
    torch.Tensor
        ``(len(vector),)`` float32 of norm ``||vector||``.
    """
    v = torch.as_tensor(np.asarray(vector, dtype=np.float64))
    if v.dim() != 1 or v.numel() == 0:
        raise DNIError(f"a steering vector is 1-D; got shape {tuple(v.shape)}.")
    g = torch.randn(v.shape[0], generator=torch.Generator().manual_seed(int(seed)),
                    dtype=torch.float64)  # fmt: skip
    return (g / g.norm() * v.norm()).float()


def hypothesis_rates(model: Any, hypothesis: Any, texts: Sequence[str]) -> np.ndarray:
    """Per text, the mean of the hypothesis over its symbols as ``model`` reads them.

    NaN values (undefined there) are left out; a text with no defined symbol is NaN.
    """
    # decided once over all the texts: a one-token text alone does not say the level
    family = decided_for_model(model, [as_family(hypothesis)], list(texts))[0]
    if len(family.signals()) != 1:
        raise DNIError(f"hypothesis {family.name!r} has {len(family.signals())} signals; "
                       "steering reports one.")  # fmt: skip
    n = [model.symbols(t) if t else 0 for t in texts]
    H = hypothesis_block([family], list(texts), n, 0, None)
    out = np.full(len(texts), np.nan)
    for i, k in enumerate(n):
        vals = H[i, :k, 0].astype(np.float64)
        vals = vals[~np.isnan(vals)]
        out[i] = vals.mean() if vals.size else np.nan
    return out


def _interval(d: np.ndarray) -> tuple[float, float, float]:
    """Mean of paired differences and its 95% t interval (NaN with under two prompts)."""
    from scipy import stats

    d = d[np.isfinite(d)]
    if d.size == 0:
        return np.nan, np.nan, np.nan
    mean = float(d.mean())
    if d.size < 2:
        return mean, np.nan, np.nan
    half = float(stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size))
    return mean, mean - half, mean + half


def steering_report(
    model: Any,
    prompts: Sequence[str],
    hypothesis: Any,
    name: str,
    vector: Any,
    *,
    max_new_tokens: int = 20,
    scale: float = 1.0,
    n_null: int = 3,
    seed: int = 0,
    positions: str = "all",
    per_prompt: bool = False,
) -> pl.DataFrame:
    """How steering with ``vector`` at ``name`` changes the hypothesis's rate in generated text.

    Generates (greedily) from ``prompts`` three ways: steered by ``scale · vector``,
    steered by ``n_null`` random directions of the same norm (:func:`random_direction`,
    seeds ``seed, seed + 1, ...``; their rates averaged per prompt), and not steered.
    The hypothesis is evaluated on each generated text (:func:`hypothesis_rates`).

    Parameters
    ----------
    model : HFModel
    prompts : sequence of str
    hypothesis : callable
    name : str
        The steered layer.
    vector : array-like
        The steering vector (:func:`steering_vector`).
    max_new_tokens, scale, positions
        As :func:`dl.generate <dni_lab.backend.hf.generation.generate>`.
    n_null : int
        Random directions in the null.
    seed : int
        The first null's seed.
    per_prompt : bool
        Return one row per (condition, prompt) with its text and rate instead.

    Returns
    -------
    pl.DataFrame
        One row per condition (``steered``, ``null``, ``none``): ``condition``,
        ``rate`` (mean over prompts), ``diff_vs_null`` (mean over prompts of the
        condition's rate minus the null's), ``ci_low`` / ``ci_high`` (its 95% t
        interval over prompts) and ``n_prompts`` (prompts with a defined rate in both).
    """
    if isinstance(n_null, bool) or not isinstance(n_null, int) or n_null < 1:
        raise DNIError(f"n_null must be a whole number of at least 1, got {n_null!r}.")
    prompts = [prompts] if isinstance(prompts, str) else list(prompts)

    def run(steer: dict | None) -> tuple[list[str], np.ndarray]:
        g = generate(model, prompts, max_new_tokens, steer=steer, scale=scale,
                     positions=positions)  # fmt: skip
        return g.texts, hypothesis_rates(model, hypothesis, g.texts)

    # the steered run first: a vector of the wrong width fails before any other pass
    texts, rates = {}, {}
    texts["steered"], rates["steered"] = run({name: vector})
    nulls = [run({name: random_direction(vector, seed + k)}) for k in range(n_null)]
    texts["null"] = [" | ".join(t) for t in zip(*(n[0] for n in nulls), strict=True)]
    rates["null"] = _nanmean(np.stack([n[1] for n in nulls]), 0)
    texts["none"], rates["none"] = run(None)
    if per_prompt:
        return pl.DataFrame({
            "condition": [c for c in texts for _ in prompts],
            "prompt": list(prompts) * len(texts),
            "text": [t for c in texts for t in texts[c]],
            "rate": np.concatenate([rates[c] for c in texts]),
        })  # fmt: skip
    rows = []
    for c in ("steered", "null", "none"):
        d = rates[c] - rates["null"]
        mean, lo, hi = _interval(d)
        rows.append((c, float(_nanmean(rates[c])), mean, lo, hi, int(np.isfinite(d).sum())))
    return pl.DataFrame(rows, orient="row", schema={
        "condition": pl.String, "rate": pl.Float64, "diff_vs_null": pl.Float64,
        "ci_low": pl.Float64, "ci_high": pl.Float64, "n_prompts": pl.Int64,
    })  # fmt: skip


def _nanmean(a: np.ndarray, axis: int | None = None) -> Any:
    """``np.nanmean`` without its warning on all-NaN slices (they are NaN, as meant)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis)
