"""Patching grids: every layer × position (or layer × head) of a site patched, in one call.

What TransformerLens' ``get_act_patch_resid_pre`` and ``get_act_patch_attn_head_out_all_pos``
sweep: for each cell (a layer's symbol position, or a head), the source run's value of the
site is written into the target run there and a metric of the output is read. The clean
and corrupted runs happen once per batch of pairs (the source run's values of every layer
kept from it), and the patched runs are batched: one forward pass holds many cells, each
a copy of the target records with its own cell patched, and each pass starts where its
patch is (:mod:`.grid_run`: the blocks, the part of a block and, in a causal language
model, the tokens before the patch are the target run's, not computed again).

Every grid carries a null: the same grid with each record's source values taken from
another pair of the same length (a random derangement), computed in the same passes as
the grid, so a cell's effect reads against what patching an unrelated record there does
(``null_p``: the share of null cells moving the metric as far). :func:`patch_grid`'s
``null`` says exactly what it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import DNIError, LayerError
from ..extraction.extract import on_device, resolve_device
from ..extraction.models import Model
from ..hf.attention import eager
from .common import Verification
from .grid_kernels import fused_activations
from .grid_run import GridRun
from .grid_sites import SITES, check_site, pair_lengths
from .patching import Metric, _last_symbol


def grid_layers(model: Model, layers: Sequence[int] | None) -> list[int]:
    """The blocks swept (all by default); one that does not exist raises, naming the range."""
    n = getattr(model, "_n_blocks", None)
    if not isinstance(n, int) or not hasattr(model, "symbol_slots"):
        raise DNIError(
            f"patching grids read a transformer's blocks; model {getattr(model, 'name', model)!r} "
            "is no dl.Model.from_hf transformer. Use dl.verify.patching per layer instead."
        )
    out = list(range(n)) if layers is None else [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n]
    if bad or not out:
        raise LayerError(
            f"layers {bad or out} do not exist: model {model.name!r} has blocks 0..{n - 1}."
        )
    return out


def grid_heads(model: Model, site: str, heads: Sequence[int] | None) -> list[int]:
    """The heads swept on a per-head site (all by default); unknown ones raise."""
    cfg = getattr(model.module, "config", None)
    n_q = getattr(cfg, "num_attention_heads", None)
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_q
    n = n_kv if site in ("k", "v") else n_q
    if not isinstance(n, int):
        raise LayerError(f"model {model.name!r} does not say how many heads it has.")
    out = list(range(n)) if heads is None else [int(h) for h in heads]
    bad = [h for h in out if not 0 <= h < n]
    if bad or not out:
        raise LayerError(
            f"heads {bad or out} do not exist at {site!r}: model {model.name!r} has heads "
            f"0..{n - 1} there."
        )
    return out


def answer_ids(model: Model, answers: Sequence[tuple[Any, Any]], n: int) -> torch.Tensor:
    """``(n, 2)`` token ids of each pair's (right, wrong) answer, checked before any pass."""
    ids = torch.as_tensor([[model.token_id(a) for a in pair] for pair in answers])
    if ids.dim() != 2 or ids.shape != (n, 2):
        raise DNIError(
            f"answers must hold one (right, wrong) pair of tokens per record pair: {n} pairs, "
            f"answers of shape {tuple(ids.shape)}."
        )
    return ids


@dataclass(frozen=True)
class GridPlan:
    """A grid's arguments checked before any forward pass (a grid and its attribution)."""

    site: str
    by: str
    clean: list[Any]
    corrupted: list[Any]
    lengths: list[int]
    layers: list[int]
    heads: list[int]
    ids: torch.Tensor | None


def plan_grid(model: Model, clean: Sequence[Any], corrupted: Sequence[Any], site: str,
              by: str | None, layers: Sequence[int] | None, heads: Sequence[int] | None,
              answers: Sequence[tuple[Any, Any]] | None, direction: str) -> GridPlan:  # fmt: skip
    """Check every argument of a grid, in one place, before the model runs."""
    site, by = check_site(site, by)
    if direction not in ("denoise", "noise"):
        raise DNIError(f"direction must be 'denoise' or 'noise', not {direction!r}.")
    clean, corrupted = list(clean), list(corrupted)
    lengths = pair_lengths(model, clean, corrupted)
    Ls = grid_layers(model, layers)
    hs = grid_heads(model, site, heads) if SITES[site][1] else []
    ids = None if answers is None else answer_ids(model, answers, len(clean))
    return GridPlan(site, by, clean, corrupted, lengths, Ls, hs, ids)


class GridMetric:
    """The metric of one batch: the user's, or the logit difference of ``ids`` (filled per
    batch from each run's own top token when no answers were given)."""

    def __init__(self, model: Model, metric: Metric | None, ids: torch.Tensor | None, n: int):
        self.model, self.user = model, metric
        self.ids = ids if ids is not None else torch.zeros(n, 2, dtype=torch.long)
        self.predict = metric is None and ids is None

    def fill(self, clean_out, corrupted_out, records, corrupted, pairs) -> None:
        """Without answers: the clean run's top token is right, the corrupted run's wrong."""
        if self.predict:
            a = _last_symbol(self.model, records, clean_out).argmax(-1)
            b = _last_symbol(self.model, corrupted, corrupted_out).argmax(-1)
            self.ids[pairs] = torch.stack([a, b], 1).cpu()

    def last_tokens(self, records: list[Any], output: torch.Tensor) -> torch.Tensor | None:
        """``(R,)``: the token of each record's last symbol, the one token the built-in
        metric reads (None with the user's metric, which may read any)."""
        if self.user is not None:
            return None
        slots = self.model.symbol_slots(output)
        if slots is None:
            return None
        index = slots[0]
        n = torch.as_tensor([self.model.symbols(r) for r in records], device=index.device)
        return index.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]

    def of_logits(self, logits: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """The built-in logit difference of rows of last-symbol ``logits`` (``(M, V)``)."""
        want = self.ids[pairs].to(logits.device)
        vals = (logits.gather(1, want[:, :1]) - logits.gather(1, want[:, 1:]))[:, 0]
        return vals.to(torch.float64).cpu()

    def __call__(self, records: list[Any], output: torch.Tensor, pairs: torch.Tensor):
        if self.user is not None:
            vals = torch.as_tensor(self.user(records, output, pairs), dtype=torch.float64)
        else:
            vals = self.of_logits(_last_symbol(self.model, records, output), pairs)
        if vals.shape != (len(records),):
            raise DNIError(
                f"the metric returned shape {tuple(vals.shape)} for a batch of "
                f"{len(records)} records; return one value per record."
            )
        return vals.to(torch.float64).cpu()


def length_groups(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Pair indices in batches of one length each (a null partner has the same length);
    a lone last pair joins the batch before it, so it has partners too."""
    by: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by.setdefault(n, []).append(i)
    out = []
    for g in by.values():
        parts = [g[i : i + batch_size] for i in range(0, len(g), batch_size)]
        if len(parts) > 1 and len(parts[-1]) == 1:
            last = parts.pop()
            parts[-1] = parts[-1] + last
        out += parts
    return out


def derangement(n: int, rng: np.random.Generator) -> torch.Tensor:
    """A random permutation with no fixed point (the identity for one record)."""
    order = rng.permutation(n)
    perm = np.empty(n, dtype=np.int64)
    perm[order] = np.roll(order, -1)
    return torch.as_tensor(perm)


def patch_grid(
    model: Model,
    clean: Sequence[Any],
    corrupted: Sequence[Any],
    site: str = "resid_pre",
    *,
    by: str | None = None,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    metric: Metric | None = None,
    answers: Sequence[tuple[Any, Any]] | None = None,
    direction: str = "denoise",
    null: bool = True,
    seed: int = 0,
    device: str | torch.device = "auto",
    batch_size: int = 64,
) -> Verification:
    """Patch every cell of a site's grid between clean and corrupted runs.

    Parameters
    ----------
    model : Model
        A Hugging Face transformer (``dl.Model.from_hf``).
    clean, corrupted : sequence
        Record pairs, position by position; a pair's records have as many symbols.
    site : str
        ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out`` (cells:
        layer × position) or ``z`` (alias ``head_out``), ``q``, ``k``, ``v`` (cells:
        layer × head, or layer × head × position), or ``pattern`` (cells: layer × head,
        all positions): the head's attention weights after the softmax, every (query,
        key), with its output recomputed as that pattern times the target run's values
        (TransformerLens' ``get_act_patch_attn_head_pattern_all_pos``; run under eager
        attention; :mod:`.grid_pattern`). A pattern per (query, key) cell, as
        ``get_act_patch_attn_head_pattern_dest_src_pos``, is not offered.
    by : {"position", "head", "head_position"}, optional
        How cells split the site: positions (residual and block outputs), heads over all
        positions (the default on per-head sites) or heads per position (not for
        ``pattern``).
    layers, heads : sequence of int, optional
        Blocks and heads swept (all by default).
    metric : callable, optional
        ``metric(records, output, pairs) -> (R,)``; default the logit difference of
        ``answers`` at each record's last symbol.
    answers : sequence of (right, wrong), optional
        Per pair, for the default metric; default each run's own top token (clean's right).
    direction : {"denoise", "noise"}
        ``"denoise"``: clean values into the corrupted run; ``"noise"``: the reverse.
    null : bool
        Also the null grid, in the same forward passes as the grid. Pairs are batched by
        length (``batch_size`` at most); within a batch of ``R`` pairs a random
        derangement ``π`` (drawn from ``seed``; no pair is its own partner) gives each pair
        ``r`` a partner ``π(r)``, and the null cell of pair ``r`` is pair ``r``'s target
        run with the cell written from pair ``π(r)``'s source run (its clean values when
        denoising, its corrupted ones when noising), the metric read with pair ``r``'s
        answers. A pair no other pair is as long as has no partner: its null is its own
        patch (counted in ``null_unpaired``).
    seed : int
        The null's pairing: one derangement per batch, drawn in batch order from
        ``numpy.random.default_rng(seed)``.
    device : str or torch.device
    batch_size : int
        Record pairs per batch (cells are batched on top, within a memory budget).

    Returns
    -------
    Verification
        ``frame``: one row per cell: ``layer``, ``head``, ``position`` (null where the cell
        spans that axis), ``metric`` (mean over pairs, patched), ``effect`` (minus the
        target run's mean), ``recovered`` (share of the source − target difference), and
        with ``null``: ``null_metric`` (the null cell's mean over pairs), ``null_effect``
        (minus the target run's mean) and ``null_p`` (``(1 + k) / (1 + N)``: ``k`` of the
        grid's ``N`` null cells, every layer's, move the metric at least as far as the
        cell does, in absolute value). ``summary``: ``site``,
        ``by``, ``direction``, ``clean``, ``corrupted``, ``forwards`` (passes run),
        ``null_sd`` (spread of the null effects), ``null_unpaired`` (pairs of a length no
        other pair has: their null is their own patch), ``fused_activations`` (GPT-2's
        step-by-step tanh GELUs run as one fused kernel during the grid: the same
        function to float rounding, :mod:`.grid_kernels`).
    """
    g = plan_grid(model, clean, corrupted, site, by, layers, heads, answers, direction)
    clean, corrupted, lengths = g.clean, g.corrupted, g.lengths
    n, S = len(clean), max(lengths)
    gm = GridMetric(model, metric, g.ids, n)
    run = GridRun(model, g.site, g.by, g.layers, g.heads, S, gm)
    rng = np.random.default_rng(seed)
    dev = resolve_device(device)
    # a pattern is written where eager attention computes it: every pass runs eager
    attn = eager(model.module) if g.site == "pattern" else contextlib.nullcontext()
    with on_device(model, dev), torch.inference_mode(), attn, \
            fused_activations(model.module) as k:  # fmt: skip
        run.resolve()
        run.fused = k
        for group in length_groups(lengths, batch_size):
            perm = derangement(len(group), rng) if null else None
            run.unpaired += int(null and len(group) == 1)  # its null is its own patch
            run.batch(group, clean, corrupted, direction, perm, dev)
    return run.result(direction, null)
