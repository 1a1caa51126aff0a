"""Perturbation verification (DeepBase §4.4): do swaps that change the hypothesis move the units?

For a record and a position k, the symbol s_k is replaced in two ways: a
*baseline* swap keeps the hypothesis value at k (``h(...s_b)[k] == h(...s_k)[k]``),
a *treatment* swap changes it. The prefix s_1..s_{k-1} is unchanged, and the
change of the units' activation at k, Δ = act(perturbed)[k] - act(original)[k],
is recorded for every swap. If the units follow the hypothesis, treatment Δs
form a cluster apart from baseline Δs; the silhouette score of the two labels
measures that, and random unit sets of the same size give its null.

Swap rules only propose *candidates* (a vocabulary that keeps inputs plausible:
digits and parentheses, conjunctions, a grammar's terminals); the hypothesis
itself labels each candidate baseline or treatment, unless a rule states the
label explicitly. :class:`~.rules.RecordRules` propose whole perturbed records
instead of symbols, for records whose symbols are not their items (images,
grid-world maps): the same paired design, Δ read at the edited position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import torch

from ..engine.params import keyword_options
from ..errors import DNIError, HypothesisError
from ..extraction.extract import on_device, resolve_device
from ..extraction.models import Model
from .common import (
    RandomSetOptions,
    RandomSets,
    Verification,
    address_and_width,
    check_units,
    empirical_p,
    random_unit_sets,
    replace_symbol,
    signal_of,
    single_signal,
    symbol_activations,
    symbols_of,
)
from .rules import RecordRules, Rules, candidates
from .vacuous import one_set_reason, possible_sets, warn_one_set

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack


def silhouette_score(X: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette (Euclidean) of points ``X`` under ``labels``; scikit-learn's definition.

    A point alone in its cluster scores 0. Distances are computed in row chunks,
    so memory stays linear in the number of points.
    """
    X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    _, lab = np.unique(np.asarray(labels), return_inverse=True)
    if lab.max(initial=0) < 1:
        return float("nan")
    onehot = torch.nn.functional.one_hot(torch.as_tensor(lab), int(lab.max()) + 1).double()
    sizes = onehot.sum(0)
    out = []
    for s in range(0, len(X), 1024):
        sums = torch.cdist(X[s : s + 1024], X) @ onehot  # (chunk, clusters)
        own = onehot[s : s + 1024].bool()
        n_own = sizes[torch.as_tensor(lab[s : s + 1024])]
        a = sums[own] / (n_own - 1).clamp_min(1)
        b = (sums / sizes).masked_fill(own, float("inf")).min(1).values
        sil = (b - a) / torch.maximum(a, b).clamp_min(1e-300)
        out.append(torch.where((n_own > 1) & (torch.maximum(a, b) > 0), sil, 0.0))
    return float(torch.cat(out).mean())


def _symbol_at(record: Any, k: int) -> Any:
    """Symbol ``k`` of a record: an item, or for an array the ``k``-th value in row-major order."""
    if hasattr(record, "shape") and len(record.shape) > 1:
        return np.asarray(record).reshape(-1)[k]
    return symbols_of(record)[k]


def _draw_swaps(model, records, fam, rules, max_pairs, per_record, tol, rng) -> list[dict]:
    """Per drawn (record, position): one baseline and one treatment swap (a paired design)."""
    whole = isinstance(rules, RecordRules)  # candidates are perturbed records, not symbols
    rows: list[dict] = []
    for i in rng.permutation(len(records)):
        rec, i = records[i], int(i)
        n = model.symbols(rec)
        if not whole and n != len(symbols_of(rec)):
            raise DNIError(
                "perturbation needs records whose symbols are their items (str, list); for "
                "images and maps pass RecordRules(propose) that rewrite whole records."
            )
        h0 = signal_of(fam, rec, n, i)
        done = 0
        for k in rng.permutation(n):
            cands = candidates(rules, rec, int(k))
            found: dict[str, tuple] = {}
            for j in rng.permutation(len(cands)):
                s, label = cands[j]
                if not whole and isinstance(rec, str) and not (isinstance(s, str) and len(s) == 1):
                    continue  # one character replaces one character: prefixes stay aligned
                pert = s if whole else replace_symbol(rec, int(k), s)
                if whole and model.symbols(pert) != n:
                    raise DNIError(
                        f"{rules!r} proposed a record of {model.symbols(pert)} symbols for one "
                        f"of {n}; a perturbed record must keep the symbol count."
                    )
                try:
                    h1 = signal_of(fam, pert, n, i)[k]
                except HypothesisError:
                    continue  # e.g. a parser that rejects the perturbed record
                if label is None:
                    label = "baseline" if abs(h1 - h0[k]) <= tol else "treatment"
                found.setdefault(label, (s, pert, float(h1)))
                if len(found) == 2:
                    break
            if len(found) < 2:
                continue
            for label in ("baseline", "treatment"):
                s, pert, h1 = found[label]
                rows.append(
                    dict(
                        record=i,
                        position=int(k),
                        original=str(_symbol_at(rec, int(k))),
                        replacement=str(_symbol_at(pert, int(k)) if whole else s),
                        kind=label,
                        h_original=float(h0[k]),
                        h_perturbed=h1,
                        perturbed=pert,
                    )
                )
            done += 1
            if done >= per_record:
                break
        if len(rows) >= 2 * max_pairs:
            break
    return rows


def _acts_at(model, addr, dev, recs, positions, batch_size) -> np.ndarray:
    """Activations of every unit of ``addr`` at ``positions[i]`` of ``recs[i]``: ``(n, width)``."""
    out = []
    for first, acts, _ in symbol_activations(model, recs, addr, None, dev, batch_size):
        pos = torch.as_tensor(positions[first : first + acts.shape[0]], device=acts.device)
        out.append(acts[torch.arange(acts.shape[0], device=acts.device), pos].double().cpu())
    return torch.cat(out).numpy()


def perturbation(
    model: Model,
    records: Sequence[Any],
    layer: str | int,
    units: Sequence[int],
    hypothesis: Any,
    rules: Rules,
    *,
    max_pairs: int = 500,
    per_record: int = 1,
    tol: float = 1e-6,
    **options: Unpack[RandomSetOptions],
) -> Verification:
    """Baseline vs treatment swaps; silhouette of the units' activation changes vs random sets.

    Parameters
    ----------
    model, records, layer
        The model, the records to perturb, and the layer of the units.
    units : sequence of int
        The unit set under test (e.g. the top units of a score frame).
    hypothesis : callable or one-signal family
        The hypothesis the units are thought to follow.
    rules : SwapRules, vocabulary, mapping or function
        Candidate replacements (see :func:`candidates`); the library supplies
        :func:`char_classes`, :func:`word_classes` and :func:`grammar_terminals`.
        :class:`RecordRules` propose whole perturbed records (images, maps).
    max_pairs, per_record : int
        At most ``max_pairs`` baseline/treatment pairs, ``per_record`` positions per record.
    tol : float
        Hypothesis values closer than ``tol`` count as unchanged.
    **options
        :class:`RandomSetOptions`: ``n_random`` random unit sets of the same size,
        drawn outside ``units`` when ``exclude``; ``seed`` (it seeds the draws of
        records, positions, candidates and random sets), ``device``, ``batch_size``.

    Returns
    -------
    Verification
        ``frame``: one row per swap (record, position, symbols, kind, hypothesis values,
        ``delta_norm`` and ``delta`` of the units). ``summary``: ``silhouette`` of the
        units, ``random_silhouettes`` and their mean/std, the empirical ``p_value`` of
        the units' silhouette among the random sets' (null, with a ``reason``, where
        ``possible_sets`` — the distinct random sets the draw can give — is 1), counts,
        and ``sets`` (a frame).
    """
    draws = keyword_options(RandomSets, "perturbation", options)
    dev, rng = resolve_device(draws.device), np.random.default_rng(draws.seed)
    batch_size = draws.batch_size
    fam = single_signal(hypothesis)
    with on_device(model, dev):
        addr, width = address_and_width(model, layer, records, dev)
        U = check_units(units, width, addr)
        rows = _draw_swaps(model, records, fam, rules, max_pairs, per_record, tol, rng)
        if not rows:
            raise DNIError(
                f"no position of the records has both a baseline and a treatment swap for "
                f"hypothesis {fam.name!r} under rules {rules!r}; widen the rules."
            )
        pos = [r["position"] for r in rows]
        after = _acts_at(model, addr, dev, [r.pop("perturbed") for r in rows], pos, batch_size)
        before = _acts_at(model, addr, dev, [records[r["record"]] for r in rows], pos, batch_size)
    delta = after - before
    labels = np.array([r["kind"] == "treatment" for r in rows])
    sets = [U, *random_unit_sets(width, len(U), draws.n_random, U if draws.exclude else [], rng)]
    sil = [silhouette_score(delta[:, s], labels) for s in sets]
    frame = pl.DataFrame(rows).with_columns(
        delta_norm=pl.Series(np.linalg.norm(delta[:, U], axis=1)),
        delta=pl.Series(delta[:, U].tolist(), dtype=pl.List(pl.Float64)),
    )
    rand = np.asarray(sil[1:])
    out = len(U) if draws.exclude else 0
    why = one_set_reason(width, len(U), out, draws.n_random)
    warn_one_set(addr, {len(U): why} if why else {})
    summary = {
        "layer": addr,
        "units": U.tolist(),
        "hypothesis": fam.name,
        "silhouette": sil[0],
        "random_silhouettes": rand.tolist(),
        "random_mean": float(rand.mean()) if rand.size else float("nan"),
        "random_std": float(rand.std()) if rand.size else float("nan"),
        "p_value": None if why else empirical_p(sil[0], rand),
        "possible_sets": possible_sets(width, len(U), out),
        "reason": why,
        "n_baseline": int((~labels).sum()),
        "n_treatment": int(labels.sum()),
        "mean_change": {
            k: float(frame.filter(pl.col("kind") == k)["delta_norm"].mean())
            for k in ("baseline", "treatment")
        },
        "sets": pl.DataFrame(
            {
                "set": ["units"] + [f"random{i}" for i in range(len(rand))],
                "units": [s.tolist() for s in sets],
                "silhouette": sil,
            }
        ),
    }
    return Verification(frame, summary)
