"""Activation patching: does a unit set carry what separates a clean record from a corrupted one?

Pairs of records are given: a *clean* one and a *corrupted* one that differs where the
answer does (``"When Mary and John went, John gave it to"`` → ``Mary``, with ``Mary``
replaced). The units' values from one run are written into the other run (through
:func:`~.force.force_units`, at every symbol or only at chosen positions) and a metric of
the output is read: by default the logit difference between the clean and the corrupted
answer at each record's last token. If the units carry the difference, patching them
moves the metric most of the way; random unit sets of the same size (random *heads* when
heads are patched) give the null, and an empirical p-value says how often a random set
moved it as far.

``direction="denoise"`` (the default) patches clean values into the corrupted run:
does the set *suffice* to restore the answer? ``"noise"`` patches corrupted values into
the clean run: is the set *necessary*? ``recovered`` is the share of the way from the
patched run's own metric to the source run's: 1 the set carries all of it, 0 none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import torch

from ..engine.params import keyword_options
from ..errors import DNIError, LayerError
from ..extraction.extract import on_device, resolve_device
from ..extraction.models import Model
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
    symbol_activations,
)
from .force import force_units
from .vacuous import one_set_reason, possible_sets, warn_one_set

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+
    from typing_extensions import Unpack

#: ``metric(records, output, pairs) -> (R,)``: one value per record of a batch; ``pairs``
#: holds the batch's pair indices (LongTensor), for per-pair answers.
Metric = Callable[[list[Any], torch.Tensor, torch.Tensor], torch.Tensor]


def logit_difference(model: Model, answers: Sequence[tuple[Any, Any]]) -> Metric:
    """The logit of the right answer minus the wrong one at each record's last token.

    Parameters
    ----------
    model : Model
        A transformer with a language-model head (``dl.Model.from_hf``).
    answers : sequence of (right, wrong)
        One pair of tokens per record pair: token ids, or strings of one token each.
    """
    if not hasattr(model, "symbol_slots"):
        raise DNIError(
            f"logit_difference reads logits per token; model {model.name!r} is no "
            "dl.Model.from_hf transformer. Pass metric=your_function(records, output, pairs)."
        )
    ids = torch.as_tensor([[model.token_id(a) for a in pair] for pair in answers])
    if ids.dim() != 2 or ids.shape[1] != 2:
        raise DNIError("answers must hold one (right, wrong) pair of tokens per record pair.")

    def metric(records: list[Any], output: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        logits = _last_symbol(model, records, output)
        want = ids[pairs].to(logits.device)
        return (logits.gather(1, want[:, :1]) - logits.gather(1, want[:, 1:]))[:, 0]

    return metric


def _last_symbol(model: Any, records: list[Any], output: torch.Tensor) -> torch.Tensor:
    """``(R, V)``: each record's output at its last symbol's token."""
    slots = model.symbol_slots(output) if output is not None else None
    if slots is None:
        shape = None if output is None else tuple(output.shape)
        raise DNIError(
            f"model {model.name!r} outputs {shape}, not logits per token (an LM head); "
            "pass metric=your_function(records, output, pairs) -> one value per record."
        )
    index, _real = slots
    n = torch.as_tensor([model.symbols(r) for r in records], device=index.device)
    pos = index.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]
    return output[torch.arange(len(records), device=output.device), pos.to(output.device)]


def patching(
    model: Model,
    clean: Sequence[Any],
    corrupted: Sequence[Any],
    layer: str | int,
    units: Sequence[int] | None = None,
    *,
    heads: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
    metric: Metric | None = None,
    answers: Sequence[tuple[Any, Any]] | None = None,
    direction: str = "denoise",
    **options: Unpack[RandomSetOptions],
) -> Verification:
    """Patch ``units`` (or ``heads``) of ``layer`` between clean and corrupted runs.

    Parameters
    ----------
    model : Model
    clean, corrupted : sequence
        Record pairs, position by position; a pair's records have as many symbols.
    layer : str or int
        The layer patched: an address, a TransformerLens name (``"blocks.1.attn.hook_z"``
        for per-head outputs, patched at the out projection's input) or a position.
    units : sequence of int, optional
        Units of ``layer`` to patch; or give ``heads``.
    heads : sequence of int, optional
        Heads of a per-head layer (``attn.hook_z``): each brings its ``head_dim`` units;
        the random sets are then random heads of the same layer.
    positions : sequence of int, optional
        Symbol positions patched (negative ones count from each record's end: ``-1`` is
        its last symbol); every symbol by default.
    metric : callable, optional
        ``metric(records, output, pairs) -> (R,)`` per batch (``pairs``: the batch's
        pair indices); default :func:`logit_difference` with ``answers``.
    answers : sequence of (right, wrong), optional
        Per pair, for the default metric; default: the token each run predicts at its
        last symbol (clean's as right, corrupted's as wrong).
    direction : {"denoise", "noise"}
        ``"denoise"``: clean values into the corrupted run; ``"noise"``: corrupted
        values into the clean run.
    **options
        :class:`RandomSetOptions`: ``n_random``, ``exclude``, ``seed``, ``device``,
        ``batch_size``.

    Returns
    -------
    Verification
        ``frame``: one row per unit set (``set`` "tested" or "random", ``units``,
        ``heads``, ``metric``: the mean over pairs with the set patched, ``recovered``).
        ``summary``: ``clean`` and ``corrupted`` (unpatched means), ``per_k`` (the tested
        set's ``recovered`` against the random sets': mean, std, empirical p-value of a
        random set recovering as much), ``layer``, ``units``, ``heads``, ``direction``.
    """
    draws = keyword_options(RandomSets, "patching", options)
    if direction not in ("denoise", "noise"):
        raise DNIError(f"direction must be 'denoise' or 'noise', not {direction!r}.")
    clean, corrupted = list(clean), list(corrupted)
    _check_pairs(model, clean, corrupted)
    if (units is None) == (heads is None):
        raise DNIError("give units=[...] or heads=[...] to patch (one of them).")
    dev, rng = resolve_device(draws.device), np.random.default_rng(draws.seed)
    with on_device(model, dev):
        addr, width = address_and_width(model, layer, clean, dev)
        size, tested = _tested(model, addr, width, units, heads)
        n_choices = width // size  # heads of the layer, or its units
        if metric is None:
            metric = logit_difference(model, answers or _predicted(model, clean, corrupted, dev))
        source, target = (clean, corrupted) if direction == "denoise" else (corrupted, clean)
        run = _Runs(model, addr, source, target, positions, metric, dev, draws.batch_size)
        base = {"clean": run.score(clean), "corrupted": run.score(corrupted)}
        src = base["clean" if direction == "denoise" else "corrupted"]
        tgt = base["corrupted" if direction == "denoise" else "clean"]
        if src == tgt:
            raise DNIError(
                f"the metric is {src} on clean and corrupted records alike: nothing to "
                "recover. Check the pairs and the answers."
            )
        k = len(tested)
        exclude = tested if draws.exclude else []
        sets = [np.asarray(tested), *random_unit_sets(n_choices, k, draws.n_random, exclude, rng)]
        rows = []
        for d, s in enumerate(sets):
            cols = np.concatenate([np.arange(c * size, (c + 1) * size) for c in s])
            value = run.patched(cols)
            rows.append(
                dict(
                    test="patching",
                    k=k,
                    set="tested" if d == 0 else "random",
                    draw=d - 1,
                    units=cols.tolist(),
                    heads=s.tolist() if heads is not None else None,
                    metric=value,
                    recovered=(value - tgt) / (src - tgt),
                )
            )
    frame = pl.DataFrame(rows)
    rec = frame["recovered"].to_numpy()
    out = k if draws.exclude else 0
    why = one_set_reason(n_choices, k, out, draws.n_random)
    warn_one_set(addr, {k: why} if why else {})
    per_k = [
        compare_sets(k, float(rec[0]), rec[1:], greater=True,
                     possible=possible_sets(n_choices, k, out), reason=why)
    ]  # fmt: skip
    summary = {
        "layer": addr,
        "units": frame["units"][0].to_list(),
        "heads": None if heads is None else list(map(int, tested)),
        "positions": None if positions is None else list(positions),
        "direction": direction,
        **base,
        "per_k": pl.DataFrame(per_k),
    }
    return Verification(frame, summary)


def _check_pairs(model: Model, clean: list[Any], corrupted: list[Any]) -> None:
    if not clean or len(clean) != len(corrupted):
        raise DNIError(
            f"patching needs record pairs: {len(clean)} clean and {len(corrupted)} corrupted "
            "records given; pass as many of each (at least one), pair by pair."
        )
    for i, (a, b) in enumerate(zip(clean, corrupted, strict=True)):
        if model.symbols(a) != model.symbols(b):
            raise DNIError(
                f"pair {i}: the clean record has {model.symbols(a)} symbols, the corrupted "
                f"one {model.symbols(b)}; patching writes symbol t into symbol t, so a "
                "pair's records must be as long (in the model's symbols)."
            )


def _tested(model, addr, width, units, heads) -> tuple[int, np.ndarray]:
    """``(units per choice, chosen indices)``: heads of ``head_dim`` units, or single units."""
    size = choice_size(model, addr, width, heads is not None)
    if heads is None:
        return size, check_units(units, width, addr)
    return size, check_units(heads, width // size, f"{addr} (heads)")


def choice_size(model, addr: str, width: int, per_head: bool) -> int:
    """Units per patched choice of ``addr``: 1, or ``head_dim`` on a per-head layer."""
    if not per_head:
        return 1
    dim_of = getattr(model, "_head_dim_of", None)  # HFModel: per-head addresses' head_dim
    dim = dim_of(addr) if dim_of is not None else None
    if not dim or width % dim:
        raise LayerError(
            f"layer {addr!r} of model {model.name!r} is not read per head; patch heads on "
            "a per-head layer (blocks.N.attn.hook_z), or give units=[...]."
        )
    return dim


def _predicted(model, clean, corrupted, dev) -> list[tuple[int, int]]:
    """Per pair: the clean run's and the corrupted run's top token at the last symbol."""
    out = []
    with torch.inference_mode():
        for (_, a), (_, b) in zip(batches(clean, 256), batches(corrupted, 256), strict=True):
            top_a = _last_symbol(model, a, forward_output(model, a, dev)).argmax(-1)
            top_b = _last_symbol(model, b, forward_output(model, b, dev)).argmax(-1)
            out += list(zip(top_a.tolist(), top_b.tolist(), strict=True))
    return out


class _Runs:
    """The source run's values at ``addr`` (read once, at the first patched run) and the
    target run, patched or not."""

    def __init__(self, model, addr, source, target, positions, metric, dev, batch_size):
        self.model, self.addr, self.source, self.target = model, addr, source, target
        self.positions, self.metric, self.dev, self.batch_size = positions, metric, dev, batch_size
        self._patterns: list[torch.Tensor] | None = None

    @property
    def patterns(self) -> list[torch.Tensor]:
        """Per batch: ``(R, T, width)`` values to force (unpatched runs never need them)."""
        if self._patterns is None:
            self._patterns = []
            m, addr, dev, B = self.model, self.addr, self.dev, self.batch_size
            for (_f, src, mask), (_g, tgt, _m) in zip(
                symbol_activations(m, self.source, addr, None, dev, B),
                symbol_activations(m, self.target, addr, None, dev, B),
                strict=True,
            ):
                where = _positions(mask, self.positions)
                self._patterns.append(torch.where(where[..., None], src, tgt))
        return self._patterns

    def score(self, records: list[Any], cols: np.ndarray | None = None) -> float:
        total, count = 0.0, 0
        with torch.inference_mode():
            for b, (first, recs) in enumerate(batches(records, self.batch_size)):
                pairs = torch.arange(first, first + len(recs))
                if cols is None:
                    out = forward_output(self.model, recs, self.dev)
                else:
                    v = self.patterns[b][..., torch.as_tensor(cols)]
                    with force_units(self.model, self.addr, cols.tolist(), v):
                        out = forward_output(self.model, recs, self.dev)
                vals = torch.as_tensor(self.metric(recs, out, pairs), dtype=torch.float64)
                if vals.shape != (len(recs),):
                    raise DNIError(
                        f"the metric returned shape {tuple(vals.shape)} for a batch of "
                        f"{len(recs)} records; return one value per record."
                    )
                total, count = total + float(vals.sum()), count + len(recs)
        return total / count

    def patched(self, cols: np.ndarray) -> float:
        return self.score(self.target, cols)


def _positions(mask: torch.Tensor, positions: Sequence[int] | None) -> torch.Tensor:
    """``(R, T)`` bool: the symbol slots patched (negative positions from each record's end)."""
    if positions is None:
        return mask
    n = mask.sum(1)
    where = torch.zeros_like(mask)
    for p in positions:
        at = n + p if p < 0 else torch.full_like(n, p)
        ok = (at >= 0) & (at < n)
        if not bool(ok.any()):
            raise DNIError(f"position {p} is outside every record; positions count symbols.")
        rows = ok.nonzero()[:, 0]
        where[rows, at[rows]] = True
    return where
