"""Ablation and oracle tests (DNI workshop paper §5.2): what the model loses without the units.

*Remove top-k* zeroes the k best units in the forward pass (their hidden state,
inside the recurrence for RNNs) and measures task accuracy; the same for random
sets of k units gives the null. If the units carry what the hypothesis
describes and the task needs it, removing them hurts more than removing random
units. *Oracle* forces the units to the hypothesis pattern scaled to [-1, 1]:
if the units encode the hypothesis, the model should do about as well as with
its own values, and better than with random units forced to the same pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import torch

from .. import api
from ..engine.levels import decided_for_model
from ..engine.params import keyword_options
from ..errors import DNIError
from ..extraction.extract import on_device, resolve_device
from ..extraction.models import Model
from ..hypothesis.hypotheses import hypothesis_block
from .common import (
    RandomSetOptions,
    RandomSets,
    Verification,
    address_and_width,
    batches,
    check_units,
    compare_sets,
    forward_output,
    random_unit_sets,
    single_signal,
    symbols_of,
)
from .force import force_units
from .vacuous import check_layer_feeds, one_set_reason, possible_sets, warn_one_set

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

#: ``evaluate(records, output, device) -> (sum of per-item scores, number of items)`` per batch.
Evaluate = Callable[[list[Any], torch.Tensor, torch.device], tuple[float, int]]


def next_symbol_accuracy(
    model: Model,
    target: Callable[[Any], bool] | None = None,
    among: Sequence[Any] | None = None,
    score: str = "accuracy",
) -> Evaluate:
    """Accuracy (or log-likelihood) of predicting symbol t+1 from the output at symbol t.

    Assumes what the char-LSTMs of the library do: ``encode`` returns a ``(R, T)``
    tensor of symbol ids and the module's output ``(R, T, V)`` scores the same ids.
    On a transformer (:class:`~dni_lab.backend.hf.HFModel` with a language-model head)
    a symbol is a token: the logits at token ``j`` score the id of token ``j + 1``,
    special tokens and padding skipped; ``target`` then sees each token's text.

    Parameters
    ----------
    model : Model
    target : callable, optional
        ``target(symbol) -> bool`` keeps only some targets (e.g. ``str.isdigit``).
    among : sequence of symbols, optional
        Predict among these symbols only: with ``target=str.isdigit`` and
        ``among="01234"`` this is the DNI paper's "accuracy for predicting the
        value of the nesting digit", which needs the depth, not *whether* a digit
        comes next (often a coin flip in the grammar).
    score : {"accuracy", "log_likelihood"}
        Argmax accuracy, or the mean log-probability of the true symbol (it also
        sees damage that does not flip the argmax).
    """
    if score not in ("accuracy", "log_likelihood"):
        raise DNIError(f"score must be 'accuracy' or 'log_likelihood', not {score!r}.")
    if hasattr(model, "symbol_slots"):
        if among is not None:
            raise DNIError(
                f"among= names characters; model {model.name!r} predicts tokens. Pass "
                "evaluate=your_function(records, output, device) -> (score sum, items)."
            )
        return _next_token(model, target, score)
    cols = None if among is None else torch.as_tensor(model.encode([str(s) for s in among]))[:, 0]

    def evaluate(records: list[Any], output: torch.Tensor, device: torch.device):
        ids = torch.as_tensor(model.encode(records)).to(device)
        T = ids.shape[1]
        keep = torch.zeros(ids.shape, dtype=torch.bool, device=device)
        for r, rec in enumerate(records):
            syms = symbols_of(rec)[1 : model.symbols(rec)]
            ok = [True] * len(syms) if target is None else [bool(target(s)) for s in syms]
            keep[r, : len(ok)] = torch.as_tensor(ok, dtype=torch.bool, device=device)
        out, nxt, keep = output[:, : T - 1].double(), ids[:, 1:], keep[:, : T - 1]
        if cols is not None:  # scores of the allowed symbols only; targets outside are dropped
            c = cols.to(device)
            hit = nxt[..., None] == c
            keep &= hit.any(-1)
            out, nxt = out[..., c], hit.double().argmax(-1)
        return _scored(out, nxt, keep, score)

    return evaluate


def _scored(out: torch.Tensor, nxt: torch.Tensor, keep: torch.Tensor, score: str):
    """``(score sum, items)`` of logits ``out`` for targets ``nxt`` where ``keep``."""
    if score == "accuracy":
        per = (out.argmax(-1) == nxt).double()
    else:
        per = torch.log_softmax(out, -1).gather(-1, nxt[..., None])[..., 0]
    return float(per[keep].sum()), int(keep.sum())


def _next_token(model: Any, target: Callable[[Any], bool] | None, score: str) -> Evaluate:
    """:func:`next_symbol_accuracy` for a transformer: tokens are the symbols."""

    def evaluate(records: list[Any], output: torch.Tensor, device: torch.device):
        slots = model.symbol_slots(output)
        if slots is None:
            raise DNIError(
                f"model {model.name!r} outputs {tuple(output.shape)}, not logits per token; "
                "pass evaluate=your_function(records, output, device) -> (score sum, items)."
            )
        index, real = slots
        ids = model.encode(records)["input_ids"].to(output.device).gather(1, index)
        logits = output.gather(1, index[..., None].expand(-1, -1, output.shape[-1]))
        keep = real[:, 1:].clone()
        if target is not None:
            for r, rec in enumerate(records):
                texts = [rec[a:b] for a, b in model.offsets(rec)[1:]]
                ok = torch.as_tensor([bool(target(t)) for t in texts], dtype=torch.bool)
                keep[r, : len(texts)] &= ok.to(keep.device)
        return _scored(logits[:, :-1].double(), ids[:, 1:], keep, score)

    return evaluate


def _score(model, records, addr, units, values, evaluate, dev, batch_size) -> float:
    """Mean score of ``evaluate`` over ``records`` with ``units`` forced (``None``: untouched)."""
    total, count = 0.0, 0
    with torch.inference_mode():
        for first, recs in batches(records, batch_size):
            v = values(first, recs) if callable(values) else values
            if units is None:
                out = forward_output(model, recs, dev)
            else:
                with force_units(model, addr, units, v):
                    out = forward_output(model, recs, dev)
            s, c = evaluate(recs, out, dev)
            total, count = total + s, count + c
    if count == 0:
        raise DNIError("the evaluation function scored no items; check its target filter.")
    return total / count


def _compare(
    name: str,
    model: Model,
    records: Sequence[Any],
    layer: str | int,
    units: Sequence[int],
    ks: Sequence[int] | None,
    evaluate: Evaluate | None,
    draws: RandomSets,
    values_for: Callable[[np.ndarray], Any],
) -> Verification:
    """Score top-k units and random k-sets under the intervention ``values_for(unit_set)``."""
    dev, rng = resolve_device(draws.device), np.random.default_rng(draws.seed)
    batch_size = draws.batch_size
    with on_device(model, dev):
        addr, width = address_and_width(model, layer, records, dev)
        ranked = check_units(units, width, addr)
        ks = sorted({int(k) for k in (ks or [len(ranked)])})
        if ks[0] < 1 or ks[-1] > len(ranked):
            raise DNIError(f"k must lie in 1..{len(ranked)} (the number of ranked units).")
        evaluate = evaluate or next_symbol_accuracy(model)
        check_layer_feeds(model, addr, width, records, dev)  # a tap: nothing to verify
        base = _score(model, records, addr, None, 0.0, evaluate, dev, batch_size)
        rows = []
        for k in ks:
            sets = [
                ranked[:k],
                *random_unit_sets(
                    width, k, draws.n_random, ranked[:k] if draws.exclude else [], rng
                ),
            ]
            for d, s in enumerate(sets):
                score = _score(
                    model, records, addr, s.tolist(), values_for(s), evaluate, dev, batch_size
                )
                rows.append(
                    dict(
                        test=name,
                        k=k,
                        set="top" if d == 0 else "random",
                        draw=d - 1,
                        units=s.tolist(),
                        score=score,
                    )
                )
    frame = pl.DataFrame(rows).with_columns(baseline=pl.lit(base), drop=base - pl.col("score"))
    per_k, void = [], {}
    for k in ks:
        sub = frame.filter(pl.col("k") == k)
        top = float(sub.filter(pl.col("set") == "top")["score"][0])
        rand = sub.filter(pl.col("set") == "random")["score"].to_numpy()
        out = k if draws.exclude else 0
        why = one_set_reason(width, k, out, draws.n_random)
        if why:
            void[k] = why
        possible = possible_sets(width, k, out)
        per_k.append(compare_sets(k, top, rand, greater=False, possible=possible, reason=why))
    warn_one_set(addr, void)
    summary = {
        "layer": addr,
        "units": ranked.tolist(),
        "baseline": base,
        "per_k": pl.DataFrame(per_k),
    }
    return Verification(frame, summary)


def _signal_range(fam, records, n_sym, batch_size) -> tuple[float, float]:
    """Minimum and maximum of a one-signal family over the real symbols of ``records``."""
    lo, hi = np.inf, -np.inf
    for f, recs in batches(records, batch_size):
        n = np.asarray(n_sym[f : f + len(recs)])
        h = hypothesis_block([fam], recs, n.tolist(), f, None)[..., 0]
        vals = h[np.arange(h.shape[1])[None, :] < n[:, None]]
        vals = vals[~np.isnan(vals)]  # undefined symbols (NaN) have no value to span
        if len(vals):
            lo, hi = min(lo, float(vals.min())), max(hi, float(vals.max()))
    return lo, hi


def ablation(
    model: Model,
    records: Sequence[Any],
    layer: str | int,
    units: Sequence[int],
    ks: Sequence[int] | None = None,
    *,
    evaluate: Evaluate | None = None,
    **options: Unpack[RandomSetOptions],
) -> Verification:
    """Remove top-k: zero the first ``k`` of ``units`` vs ``k`` random units; task score each.

    Parameters
    ----------
    units : sequence of int
        Units of ``layer`` ranked best first (e.g. from a score frame).
    ks : sequence of int, optional
        Values of k (default: all of ``units``).
    evaluate : callable, optional
        ``evaluate(records, output, device) -> (score sum, items)`` per batch;
        default :func:`next_symbol_accuracy`.
    **options
        :class:`RandomSetOptions`: ``n_random`` random k-sets per k, drawn outside
        the top k when ``exclude``; ``seed``, ``device``, ``batch_size``.

    Returns
    -------
    Verification
        ``frame``: one row per (k, unit set) with ``score``, ``baseline`` and ``drop``.
        ``summary``: ``baseline`` and ``per_k`` (top score, random mean/std, the
        empirical p-value of the top set scoring this low among random sets,
        ``possible_sets``: how many distinct random k-sets the draw can give, and
        ``reason``: why the p-value is null, where that is 1 and every random set is the
        same set; a :class:`~.vacuous.VacuousComparisonWarning` says so too).

    Raises
    ------
    LayerError
        When forcing every unit of ``layer`` leaves the model's output bitwise unchanged
        (a tap whose output the model never uses), before any unit set runs.
    """
    draws = keyword_options(RandomSets, "ablation", options)
    return _compare("ablation", model, records, layer, units, ks, evaluate, draws, _zeros)


def _zeros(unit_set: np.ndarray) -> float:
    """Ablation's intervention: the units' value is 0 at every symbol."""
    return 0.0


def oracle(
    model: Model,
    records: Sequence[Any],
    layer: str | int,
    units: Sequence[int],
    hypothesis: Any,
    ks: Sequence[int] | None = None,
    signs: Sequence[float] | None = None,
    *,
    evaluate: Evaluate | None = None,
    **options: Unpack[RandomSetOptions],
) -> Verification:
    """Oracle-k: force the top ``k`` units to the hypothesis pattern scaled to [-1, 1].

    The pattern is ``2 (h - min) / (max - min) - 1`` over all symbols of
    ``records``; a symbol where the hypothesis is undefined (NaN or None) takes 0,
    the pattern's midpoint. A unit anti-correlated with the hypothesis gets the negated
    pattern: ``signs`` per unit, or the sign of its ``corr`` with the hypothesis
    over ``records`` (the DNI paper notes the sign may need tuning). Random
    k-sets get the same pattern with the signs of their own correlations.
    Other parameters and the result as in :func:`ablation`.
    """
    draws = keyword_options(RandomSets, "oracle", options)
    raw = single_signal(hypothesis)
    fam = decided_for_model(model, [raw], records)[0]  # per token, its level decided once
    n_sym = [model.symbols(r) for r in records]
    lo, hi = _signal_range(fam, records, n_sym, draws.batch_size)
    if hi <= lo:
        raise DNIError(
            f"hypothesis {raw.name!r} is constant over the records; no pattern to force."
        )
    if signs is None:
        f = api.inspect(
            model,
            [raw],
            ["corr"],
            records,
            units=[(layer, "*")],
            eps=None,
            device=draws.device,
            cache=False,
        )
        sign_of = np.sign(np.nan_to_num(f.sort("unit")["unit_score"].to_numpy())) + 0.0
        sign_of[sign_of == 0] = 1.0
    else:
        sign_of = None

    def values_for(unit_set: np.ndarray):
        if signs is not None:
            pos = {int(u): i for i, u in enumerate(units)}
            sg = np.array([signs[pos[int(u)]] if int(u) in pos else 1.0 for u in unit_set])
        else:
            sg = sign_of[unit_set]

        def per_batch(first: int, recs: list[Any]) -> torch.Tensor:
            h = hypothesis_block([fam], recs, n_sym[first : first + len(recs)], first, None)
            pattern = 2 * (h[..., 0] - lo) / (hi - lo) - 1
            # an undefined symbol (NaN) has no value to force: the pattern's midpoint, 0
            pattern = np.nan_to_num(pattern, nan=0.0)
            return torch.as_tensor(pattern[..., None] * sg[None, None, :], dtype=torch.float32)

        return per_batch

    return _compare("oracle", model, records, layer, units, ks, evaluate, draws, values_for)
