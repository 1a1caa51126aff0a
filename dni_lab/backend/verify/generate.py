"""Generative verification (Luigi; DNI workshop paper §5.2, Figure 4).

Force the units to a value while sampling from a generative symbol model and
count how often the hypothesis fires in what the model writes. If the units
drive the behaviour the hypothesis describes, forcing them should make it more
frequent than forcing random units of the same number, or forcing none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError, HypothesisError
from ..extraction.extract import on_device, resolve_device
from ..extraction.models import Model
from .common import (
    Verification,
    address_and_width,
    check_units,
    compare_sets,
    forward_output,
    random_unit_sets,
    signal_of,
    single_signal,
)
from .force import force_units
from .vacuous import one_set_reason, possible_sets, warn_one_set


def _sample(
    model: Model, addr, units, value, prompt, n, length, decode, temperature, gen, dev
) -> list[str]:
    """``n`` continuations of ``prompt`` of up to ``length`` symbols, units forced throughout."""
    texts, alive = [prompt] * n, np.ones(n, dtype=bool)
    with torch.inference_mode():
        for _ in range(length):
            if units is None:
                logits = forward_output(model, texts, dev)
            else:
                with force_units(model, addr, units, value):
                    logits = forward_output(model, texts, dev)
            last = torch.as_tensor([len(t) - 1 for t in texts], device=logits.device)
            step = logits[torch.arange(n, device=logits.device), last].double() / temperature
            ids = torch.multinomial(torch.softmax(step, -1).cpu(), 1, generator=gen)[:, 0]
            for r, i in enumerate(ids.tolist()):
                ch = decode([i]) if alive[r] else ""
                alive[r] &= ch != ""  # an empty decode (padding, end) ends the sample
                texts[r] += ch
            if not alive.any():
                break
    return texts


def generative(
    model: Model,
    layer: str | int,
    units: Sequence[int],
    hypothesis: Any,
    decode: Callable[[list[int]], str],
    prompt: str,
    value: float = 1.0,
    ks: Sequence[int] | None = None,
    n_samples: int = 32,
    length: int = 40,
    n_random: int = 5,
    threshold: float = 0.5,
    temperature: float = 1.0,
    exclude: bool = True,
    seed: int = 0,
    device: str | torch.device = "auto",
) -> Verification:
    """Sample with the top ``k`` units forced to ``value``; rate at which the hypothesis fires.

    Parameters
    ----------
    model : Model
        A generative symbol model over strings: the module's output ``(R, T, V)``
        scores the next symbol at every position.
    layer, units
        The layer and its units, ranked best first.
    hypothesis : callable or one-signal family
        Evaluated on every sample; it *fires* on a generated symbol where its value
        exceeds ``threshold``. A sample the hypothesis rejects (raises) is left out
        and counted in ``failed``.
    decode : callable
        ``decode([id]) -> str``: one output class as text (the library's ``Vocab.decode``).
    prompt : str
        The text every sample starts from (at least one symbol).
    value : float
        What the units are forced to at every position (the DNI paper uses 1).
    ks : sequence of int, optional
        Numbers of top units to force (default: all of ``units``).
    n_samples, length, temperature
        Samples per condition, symbols per sample, softmax temperature.
    n_random, exclude, seed
        Random unit sets per k (outside the top k when ``exclude``); the same
        sampling seed serves every condition, so conditions differ only by the forcing.

    Returns
    -------
    Verification
        ``frame``: one row per sample (condition, k, draw, text, ``rate``, ``mean``).
        ``summary``: the firing rate with no forcing, and ``per_k`` (top rate, random
        mean/std, empirical p-value of the top rate among random rates).
    """
    if not prompt:
        raise DNIError("generative needs a non-empty prompt to condition the first sample step.")
    fam = single_signal(hypothesis)
    dev, rng = resolve_device(device), np.random.default_rng(seed)
    rows: list[dict] = []

    def run(cond: str, k: int, draw: int, unit_set) -> None:
        gen = torch.Generator().manual_seed(seed)
        for text in _sample(
            model, addr, unit_set, value, prompt, n_samples, length, decode, temperature, gen, dev
        ):
            n = model.symbols(text)
            try:
                h = signal_of(fam, text, n, len(rows))[len(prompt) :]
            except HypothesisError:
                h = np.full(0, np.nan)
            ok = h.size > 0
            rows.append(
                dict(
                    condition=cond,
                    k=k,
                    draw=draw,
                    text=text[len(prompt) :],
                    units=None if unit_set is None else list(map(int, unit_set)),
                    rate=float((h > threshold).mean()) if ok else None,
                    mean=float(h.mean()) if ok else None,
                )
            )

    with on_device(model, dev):
        addr, width = address_and_width(model, layer, [prompt, prompt], dev)
        ranked = check_units(units, width, addr)
        ks = sorted({int(k) for k in (ks or [len(ranked)])})
        run("none", 0, -1, None)
        for k in ks:
            run("top", k, -1, ranked[:k].tolist())
            for d, s in enumerate(
                random_unit_sets(width, k, n_random, ranked[:k] if exclude else [], rng)
            ):
                run("random", k, d, s.tolist())
    frame = pl.DataFrame(rows)
    rate = lambda df: float(df["rate"].mean()) if df.height else float("nan")  # noqa: E731
    per_k, void = [], {}
    for k in ks:
        sub = frame.filter(pl.col("k") == k)
        top = rate(sub.filter(pl.col("condition") == "top"))
        rand = (
            sub.filter(pl.col("condition") == "random").group_by("draw").agg(pl.col("rate").mean())
        )
        out = k if exclude else 0
        why = void[k] = one_set_reason(width, k, out, n_random)
        per_k.append(compare_sets(k, top, rand["rate"].to_numpy().astype(float), greater=True,
                                  possible=possible_sets(width, k, out), reason=why))  # fmt: skip
    warn_one_set(addr, {k: why for k, why in void.items() if why})
    summary = {
        "layer": addr,
        "units": ranked.tolist(),
        "none": rate(frame.filter(pl.col("condition") == "none")),
        "failed": int(frame["rate"].is_null().sum()),
        "per_k": pl.DataFrame(per_k),
    }
    return Verification(frame, summary)
