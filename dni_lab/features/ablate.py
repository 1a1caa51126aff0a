"""Verify a latent like a neuron: ablate or steer it and compare with random latents.

Inside the forward pass the hook's output ``x`` becomes
``decode(z') + (x - decode(z))`` with ``z = encode(x)`` and ``z'`` equal to ``z``
but for the chosen latents, scaled by ``scale`` (0 ablates, > 1 steers): the SAE's
error term is kept, so a latent that is never active changes nothing. Random
latent sets are matched to the tested latents' firing rates (a rare latent is
compared with rare latents), since ablating a frequent latent hurts more whatever
it means.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..backend.errors import DNIError
from ..backend.extraction.behaviors import batches
from ..backend.extraction.extract import on_device, resolve_device
from ..backend.extraction.models import Model
from ..backend.verify.ablate import next_symbol_accuracy
from ..backend.verify.common import Verification, compare_sets, forward_output
from .base import FeatureSet
from .quality import activations, hook_address, patched

Evaluate = Callable[[list[Any], torch.Tensor, torch.device], tuple[float, int]]


@contextlib.contextmanager
def edited(model: Model, fs: FeatureSet, latents: Sequence[int], scale: float) -> Iterator[None]:
    """Within the block, ``latents`` of ``fs`` are scaled by ``scale`` at its hook."""
    idx = torch.as_tensor(list(latents), dtype=torch.long)

    def edit(x: torch.Tensor) -> torch.Tensor:
        z = fs.encode(x)
        z2 = z.clone()
        z2[..., idx.to(z.device)] *= scale
        return (fs.decode(z2, x) - fs.decode(z, x)).to(x.dtype) + x  # the error term stays

    with patched(model, hook_address(model, fs), edit):
        yield


def firing_rates(
    model: Model, fs: FeatureSet, records: Sequence[Any], device: str | torch.device = "auto",
    block_size: int = 64,
) -> np.ndarray:  # fmt: skip
    """Share of symbols on which each latent is nonzero, ``(d_sae,)``."""
    dev = resolve_device(device)
    fs = fs.to(dev).eval()
    fired = torch.zeros(fs.d_sae, dtype=torch.float64, device=dev)
    n = 0
    with on_device(model, dev), torch.inference_mode():
        for _, X in activations(model, hook_address(model, fs), records, block_size, dev):
            fired += (fs.encode(X) != 0).sum(0)
            n += X.shape[0]
    return (fired / max(n, 1)).cpu().numpy()


def matched_sets(
    rates: np.ndarray, latents: Sequence[int], n: int, rng: np.random.Generator, pool: int = 20
) -> list[np.ndarray]:
    """``n`` random latent sets, each latent drawn among the ``pool`` latents whose firing
    rate is nearest the tested latent's (the tested ones and dead latents left out)."""
    latents = np.asarray(latents, dtype=np.int64)
    alive = np.setdiff1d(np.flatnonzero(rates > 0), latents)
    if len(alive) < len(latents):
        raise DNIError(
            f"only {len(alive)} other latents fire on these records; random sets of "
            f"{len(latents)} need more (pass more records)."
        )
    logr = np.log(rates[alive])
    out = []
    for _ in range(n):
        chosen: list[int] = []
        for lat in latents:
            near = alive[np.argsort(np.abs(logr - np.log(max(rates[lat], 1e-12))))]
            near = [c for c in near[: pool + len(chosen)] if c not in chosen][:pool]
            chosen.append(int(rng.choice(near)))
        out.append(np.asarray(chosen))
    return out


def ablate(
    model: Model,
    fs: FeatureSet,
    latents: Sequence[int],
    records: Sequence[Any],
    evaluate: Evaluate | None = None,
    scale: float = 0.0,
    n_random: int = 10,
    seed: int = 0,
    batch_size: int = 64,
    device: str | torch.device = "auto",
) -> Verification:
    """Task score with ``latents`` ablated (or scaled) against density-matched random latents.

    Parameters
    ----------
    model : Model
    fs : FeatureSet
        The set the latents belong to, at its hook.
    latents : sequence of int
        The latents under test (e.g. the best for a hypothesis in a score frame).
    records : sequence
        Records to evaluate on.
    evaluate : callable, optional
        ``evaluate(records, output, device) -> (score sum, items)``; defaults to
        ``dl.verify.next_symbol_accuracy(model)``. Pass one with ``target=`` to
        measure the hypothesis-dependent behaviour (e.g. predicting digits).
    scale : float
        What the latents are multiplied by: 0 ablates, above 1 steers.
    n_random, seed, batch_size, device
        Random sets, their seed, records per forward pass, where to run.

    Returns
    -------
    Verification
        ``frame``: one row per evaluated set (``set`` top/random, ``latents``,
        ``score``, ``drop`` from the unedited baseline); ``summary``: ``baseline``,
        ``per_k`` (top vs random mean, std and the empirical p-value of a drop at
        least as large), ``firing_rates`` of the tested latents.
    """
    dev = resolve_device(device)
    latents = [int(i) for i in latents]
    bad = [i for i in latents if not 0 <= i < fs.d_sae]
    if bad or not latents:
        raise DNIError(
            f"feature set {fs.name!r} has latents 0..{fs.d_sae - 1}; got {latents!r}. "
            "Name one latent or more in range."
        )
    evaluate = evaluate or next_symbol_accuracy(model)
    rates = firing_rates(model, fs, records, dev, batch_size)
    rng = np.random.default_rng(seed)
    sets = [np.asarray(latents), *matched_sets(rates, latents, n_random, rng)]

    def score(lat: np.ndarray | None) -> float:
        total, count = 0.0, 0
        ctx = contextlib.nullcontext() if lat is None else edited(model, fs, lat.tolist(), scale)
        with on_device(model, dev), torch.inference_mode(), ctx:
            for _, recs in batches(records, batch_size):
                s, c = evaluate(recs, forward_output(model, recs, dev), dev)
                total, count = total + s, count + c
        if count == 0:
            raise DNIError("the evaluation function scored no items; check its target filter.")
        return total / count

    base = score(None)
    rows = [
        dict(set="top" if d == 0 else "random", draw=d - 1, latents=s.tolist(),
             rate=float(rates[s].mean()), score=score(s))
        for d, s in enumerate(sets)
    ]  # fmt: skip
    frame = pl.DataFrame(rows).with_columns(baseline=pl.lit(base), drop=base - pl.col("score"))
    top = rows[0]["score"]
    rand = [r["score"] for r in rows[1:]]
    summary = {
        "feature_set": fs.address,
        "latents": latents,
        "scale": scale,
        "baseline": base,
        "firing_rates": rates[latents].tolist(),
        "per_k": pl.DataFrame([compare_sets(len(latents), top, rand, greater=scale > 1)]),
    }
    return Verification(frame, summary)
