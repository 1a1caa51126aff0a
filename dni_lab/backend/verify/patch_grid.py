"""Patching grids: every layer × position (or layer × head) of a site patched, in one call.

What TransformerLens' ``get_act_patch_resid_pre`` and ``get_act_patch_attn_head_out_all_pos``
sweep: for each cell (a layer's symbol position, or a head), the source run's value of the
site is written into the target run there and a metric of the output is read. The clean
and corrupted runs happen once per batch of pairs (the source run's values of every layer
kept from it), and the patched runs are batched: one forward pass holds many cells, each
a copy of the target records with its own cell patched.

Every grid carries a null: the same grid with each record's source values taken from
another pair of the same length (a random derangement), so a cell's effect reads against
what patching an unrelated record there does (``null_p``: the share of null cells moving
the metric as far).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError, LayerError
from ..extraction.extract import on_device, resolve_device, to_device
from ..extraction.models import Model, _first_tensor
from ..hf.model import _takes_use_cache
from .common import Verification
from .grid_replay import block_of, block_outputs, replayed
from .grid_sites import SITES, SiteHook, check_site, grid_cells, pair_lengths, write_cells
from .patching import Metric, _last_symbol

#: elements of logits one patched forward pass may hold (rows × tokens × vocabulary)
_OUTPUT_BUDGET = 2**26


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

    def __call__(self, records: list[Any], output: torch.Tensor, pairs: torch.Tensor):
        if self.user is not None:
            vals = torch.as_tensor(self.user(records, output, pairs), dtype=torch.float64)
        else:
            logits = _last_symbol(self.model, records, output)
            want = self.ids[pairs].to(logits.device)
            vals = (logits.gather(1, want[:, :1]) - logits.gather(1, want[:, 1:]))[:, 0]
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


def capture(model: Model, hooks: dict[int, SiteHook], batch: dict, keep: dict) -> torch.Tensor:
    """Run ``batch`` once, keeping each layer's site values in ``keep``; the output."""
    stack = [hooks[L].hooked(lambda t, L=L: keep.__setitem__(L, t.detach().clone())) for L in hooks]
    for h in stack:
        h.__enter__()
    try:
        return _first_tensor(model.forward(batch))
    finally:
        for h in reversed(stack):
            h.__exit__(None, None, None)


def replicated(batch: dict, copies: int, n: int) -> dict:
    """The model's inputs of ``batch`` (its tensors of ``n`` rows) ``copies`` times over."""
    out = {k: v.repeat(copies, *([1] * (v.dim() - 1))) for k, v in batch.items()
           if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n}  # fmt: skip
    return out


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
        layer × head, or layer × head × position).
    by : {"position", "head", "head_position"}, optional
        How cells split the site: positions (residual and block outputs), heads over all
        positions (the default on per-head sites) or heads per position.
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
        Also patch each record with another same-length pair's source values.
    seed : int
        The null's pairing.
    device : str or torch.device
    batch_size : int
        Record pairs per batch (cells are batched on top, within a memory budget).

    Returns
    -------
    Verification
        ``frame``: one row per cell: ``layer``, ``head``, ``position`` (null where the cell
        spans that axis), ``metric`` (mean over pairs, patched), ``effect`` (minus the
        target run's mean), ``recovered`` (share of the source − target difference), and
        with ``null``: ``null_metric``, ``null_effect``, ``null_p``. ``summary``: ``site``,
        ``by``, ``direction``, ``clean``, ``corrupted``, ``forwards`` (passes run),
        ``null_sd`` (spread of the null effects), ``null_unpaired`` (pairs of a length no
        other pair has: their null is their own patch).
    """
    g = plan_grid(model, clean, corrupted, site, by, layers, heads, answers, direction)
    clean, corrupted, lengths = g.clean, g.corrupted, g.lengths
    n, S = len(clean), max(lengths)
    gm = GridMetric(model, metric, g.ids, n)
    run = GridRun(model, g.site, g.by, g.layers, g.heads, S, gm)
    rng = np.random.default_rng(seed)
    dev = resolve_device(device)
    with on_device(model, dev), torch.inference_mode():
        run.resolve()
        for group in length_groups(lengths, batch_size):
            perm = derangement(len(group), rng) if null else None
            run.unpaired += int(null and len(group) == 1)  # its null is its own patch
            run.batch(group, clean, corrupted, direction, perm, dev)
    return run.result(direction, null)


class GridRun:
    """The sums of one grid over its batches of pairs."""

    def __init__(self, model, site, by, layers, heads, S, metric):
        self.model, self.site, self.by, self.layers, self.S = model, site, by, layers, S
        self.metric = metric
        self.head, self.pos = grid_cells(by, S, heads)
        C = len(self.head)
        self.sums = {k: torch.zeros(len(layers), C, dtype=torch.float64) for k in ("p", "n")}
        self.base = {"clean": 0.0, "corrupted": 0.0}
        self.n, self.forwards, self.unpaired = 0, 0, 0

    def resolve(self) -> None:
        self.hooks = {L: SiteHook.resolve(self.model, self.site, L) for L in self.layers}
        # which block holds each layer's site: the blocks before it are replayed
        self.where = {L: block_of(self.model, h.module) for L, h in self.hooks.items()}

    def batch(self, group, clean, corrupted, direction, perm, dev) -> None:
        m, pairs = self.model, torch.as_tensor(group)
        recs_c, recs_x = [clean[i] for i in group], [corrupted[i] for i in group]
        src_recs, tgt_recs = (recs_c, recs_x) if direction == "denoise" else (recs_x, recs_c)
        src_vals: dict[int, torch.Tensor] = {}
        tgt_vals: dict[int, torch.Tensor] = {}
        readers = {L: h.reader or h for L, h in self.hooks.items()}
        b_src = to_device(m.encode(src_recs), dev)
        out_src = capture(m, readers, b_src, src_vals)
        b_tgt = to_device(m.encode(tgt_recs), dev)
        # the target's layout stays the model's; its values only where written as a change
        moved = {L: h.reader for L, h in self.hooks.items() if h.reader is not None}
        self.tgt_blocks: dict[int, Any] = {}
        with block_outputs(m, self.tgt_blocks):
            out_tgt = capture(m, moved, b_tgt, tgt_vals)
        self.forwards += 2
        slots = m.symbol_slots(out_tgt)
        if slots is None:
            raise DNIError(f"model {m.name!r} does not output one row per token; no grid.")
        tokens, real = slots
        by_name = {"denoise": (out_src, out_tgt), "noise": (out_tgt, out_src)}[direction]
        self.metric.fill(*by_name, recs_c, recs_x, pairs)
        v_src = self.metric(src_recs, out_src, pairs)
        v_tgt = self.metric(tgt_recs, out_tgt, pairs)
        src_key, tgt_key = (
            ("clean", "corrupted") if direction == "denoise" else ("corrupted", "clean")
        )
        self.base[src_key] += float(v_src.sum())
        self.base[tgt_key] += float(v_tgt.sum())
        self.n += len(group)
        R, T = out_tgt.shape[0], out_tgt.shape[1]
        live = (self.pos < tokens.shape[1]).nonzero()[:, 0]  # cells past this batch: unpatched
        vocab = out_tgt.shape[-1] if out_tgt.dim() == 3 else 1
        chunk = max(1, min(len(live), _OUTPUT_BUDGET // max(1, R * T * vocab)))
        for k, L in enumerate(self.layers):
            for key in ("p", "n") if perm is not None else ("p",):
                values = src_vals[L] if key == "p" else src_vals[L][perm]
                if L in tgt_vals:  # written as a change of another site's values
                    values = values - tgt_vals[L]
                self.sums[key][k] += float(v_tgt.sum())  # cells left unpatched
                for i in range(0, len(live), chunk):
                    cells = live[i : i + chunk]
                    got = self._patched(L, values, cells, b_tgt, tgt_recs, pairs, tokens, real)
                    self.sums[key][k, cells] += got - float(v_tgt.sum())

    def _patched(self, L, values, cells, batch, recs, pairs, tokens, real) -> torch.Tensor:
        """Per cell: the metric summed over the batch's records, the cell patched."""
        hook, R = self.hooks[L], len(recs)
        head, pos = self.head[cells], self.pos[cells]

        def edit(t):
            v = values if hook.reader is None else t[:R] + values  # copies agree up to here
            return write_cells(t, v, head, pos, tokens, real, hook.head_dim)

        inputs = replicated(batch, len(cells), R)
        if _takes_use_cache(type(self.model.module)):
            inputs["use_cache"] = False  # a key/value cache costs copies no metric reads
        b, whole = self.where[L]
        last = b if whole else b - 1  # a block's own output is written into its replay
        out_last = self.tgt_blocks.get(last)
        if out_last is None:
            last, whole = -1, False
        hooked = contextlib.nullcontext() if whole else hook.hooked(edit)
        with replayed(self.model, last, out_last, len(cells), R, edit if whole else None), hooked:
            out = _first_tensor(self.model.module(**inputs))
        self.forwards += 1
        return torch.stack(
            [self.metric(recs, out[c * R : (c + 1) * R], pairs).sum() for c in range(len(cells))]
        )

    def result(self, direction: str, null: bool) -> Verification:
        n = self.n
        base = {k: v / n for k, v in self.base.items()}
        src, tgt = (base["clean"], base["corrupted"]) if direction == "denoise" else (
            base["corrupted"], base["clean"])  # fmt: skip
        span = src - tgt
        C = len(self.head)
        metric = (self.sums["p"] / n).numpy()
        cols: dict[str, Any] = {
            "layer": np.repeat(self.layers, C),
            "head": np.tile(self.head.numpy(), len(self.layers)),
            "position": np.tile(self.pos.numpy(), len(self.layers)),
            "metric": metric.ravel(),
            "effect": metric.ravel() - tgt,
            "recovered": (metric.ravel() - tgt) / span if span else np.full(metric.size, np.nan),
        }
        summary: dict[str, Any] = {
            "site": self.site, "by": self.by, "direction": direction, **base,
            "layers": self.layers, "forwards": self.forwards,
        }  # fmt: skip
        if null:
            nm = (self.sums["n"] / n).numpy().ravel()
            ne = nm - tgt
            cols.update(null_metric=nm, null_effect=ne)
            a = np.sort(np.abs(ne))
            hits = len(a) - np.searchsorted(a, np.abs(cols["effect"]), side="left")
            cols["null_p"] = (1 + hits) / (len(a) + 1)
            summary["null_sd"] = float(ne.std())
            summary["null_unpaired"] = self.unpaired  # pairs no other pair is as long as
        frame = pl.DataFrame(cols).with_columns(
            pl.when(pl.col(c) >= 0).then(pl.col(c)).cast(pl.Int64).alias(c)
            for c in ("head", "position")
        )
        return Verification(frame, summary)
