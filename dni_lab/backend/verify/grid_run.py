"""One patching grid's passes: the baselines once per batch, then the patched copies.

A batch of ``R`` record pairs runs its source and target once (every layer's site values
of the source kept, and each block's output of the target). A patched pass then holds
many copies of the target records: ``cells × halves × R`` rows, row ``(c·H + h)·R + r``
being record ``r`` with cell ``c`` patched from the source values of half ``h``: the
record's own pair (the grid) or its null partner (the null grid, in the same pass). Each
pass starts where its patch is: the blocks before the site are replayed
(:mod:`.grid_replay`) and, in a causal language model, the tokens before the patched one
are the target run's keys and values (:mod:`.grid_prefix`).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError
from ..extraction.extract import to_device
from ..extraction.models import Model, _first_tensor
from ..hf.model import _takes_use_cache
from .common import Verification
from .grid_pattern import PatternHook, check_layouts
from .grid_prefix import Prefix, causal_lm
from .grid_replay import Inner, block_of, block_outputs, replayed
from .grid_sites import SiteHook, grid_cells

#: elements of logits one patched forward pass may hold (rows × tokens × vocabulary)
_OUTPUT_BUDGET = 2**26
#: tokens one patched forward pass may hold on a CPU (rows × tokens): past it, a bigger
#: pass costs more per token (its activations leave the CPU's caches) than another does
_TOKEN_BUDGET = 2**10
#: the same on an accelerator, where a bigger pass keeps more of it busy
_ACCELERATOR_TOKEN_BUDGET = 2**16


def capture(model: Model, hooks: dict[int, SiteHook], batch: dict, keep: dict,
            raw: bool = False) -> Any:  # fmt: skip
    """Run ``batch`` once, keeping each layer's site values in ``keep``; the output (its
    first tensor, or all of it with ``raw``)."""
    stack = [hooks[L].hooked(lambda t, L=L: keep.__setitem__(L, t.detach().clone())) for L in hooks]
    for h in stack:
        h.__enter__()
    try:
        out = model.forward(batch)
        return out if raw else _first_tensor(out)
    finally:
        for h in reversed(stack):
            h.__exit__(None, None, None)


def replicated(batch: dict, copies: int, n: int) -> dict:
    """The model's inputs of ``batch`` (its tensors of ``n`` rows) ``copies`` times over."""
    out = {k: v.repeat(copies, *([1] * (v.dim() - 1))) for k, v in batch.items()
           if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n}  # fmt: skip
    return out


class GridRun:
    """The sums of one grid (and its null) over its batches of pairs."""

    def __init__(self, model, site, by, layers, heads, S, metric):
        self.model, self.site, self.by, self.layers, self.S = model, site, by, layers, S
        self.metric = metric
        self.head, self.pos = grid_cells(by, S, heads)
        C = len(self.head)
        self.sums = {k: torch.zeros(len(layers), C, dtype=torch.float64) for k in ("p", "n")}
        self.base = {"clean": 0.0, "corrupted": 0.0}
        self.n, self.forwards, self.unpaired = 0, 0, 0
        # passes start at the patched token: decided by a check on the first batch; never
        # for a whole head (its first token is 0) nor a pattern (it rewrites every query)
        late = by != "head" and site != "pattern" and causal_lm(model.module)
        self.prefix_ok: bool | None = None if late else False

    def resolve(self) -> None:
        self.keeps = "logits_to_keep" in _params(self.model.module)
        self.hooks = {L: PatternHook.resolve(self.model, L) if self.site == "pattern"
                      else SiteHook.resolve(self.model, self.site, L) for L in self.layers}
        # which block holds each layer's site: the blocks before it are replayed
        self.where = {L: block_of(self.model, h.module) for L, h in self.hooks.items()}
        # a site inside a block: the part of the block before it replayed as well
        self.inner = {}
        for L, h in self.hooks.items():
            b, whole = self.where[L]
            part = None if whole or h.start is not None else Inner.of(self.model, b, h.module,
                                                                     h.side)  # fmt: skip
            if part is not None:
                self.inner[L] = part

    def batch(self, group, clean, corrupted, direction, perm, dev) -> None:
        m, pairs = self.model, torch.as_tensor(group)
        recs_c, recs_x = [clean[i] for i in group], [corrupted[i] for i in group]
        src_recs, tgt_recs = (recs_c, recs_x) if direction == "denoise" else (recs_x, recs_c)
        src_vals: dict[int, torch.Tensor] = {}
        tgt_vals: dict[int, torch.Tensor] = {}
        readers = {L: h.reader or h for L, h in self.hooks.items()}
        b_src, b_tgt = to_device(m.encode(src_recs), dev), to_device(m.encode(tgt_recs), dev)
        if self.site == "pattern":  # a pattern is written query onto query, key onto key
            check_layouts(b_src, b_tgt, list(group))
        out_src = capture(m, readers, b_src, src_vals)
        # the target's layout stays the model's; its values only where written as a change
        moved = {L: h.reader for L, h in self.hooks.items() if h.reader is not None}
        self.tgt_blocks: dict[int, Any] = {}
        run = {**b_tgt, "use_cache": True} if self.prefix_ok is not False else b_tgt
        kept: dict[int, dict] = {L: {} for L in self.inner}
        with contextlib.ExitStack() as stack:
            stack.enter_context(block_outputs(m, self.tgt_blocks))
            for L, part in self.inner.items():
                stack.enter_context(part.kept(kept[L]))
            raw = capture(m, moved, run, tgt_vals, raw=True)
        self.kept = {L: k for L, k in kept.items() if self.inner[L].holds(k)}
        out_tgt = _first_tensor(raw)
        self.forwards += 2
        slots = m.symbol_slots(out_tgt)
        if slots is None:
            raise DNIError(f"model {m.name!r} does not output one row per token; no grid.")
        tokens, real = slots
        by_name = {"denoise": (out_src, out_tgt), "noise": (out_tgt, out_src)}[direction]
        self.metric.fill(*by_name, recs_c, recs_x, pairs)
        v_src = self.metric(src_recs, out_src, pairs)
        v_tgt = self.metric(tgt_recs, out_tgt, pairs)
        keys = ("clean", "corrupted") if direction == "denoise" else ("corrupted", "clean")
        self.base[keys[0]] += float(v_src.sum())
        self.base[keys[1]] += float(v_tgt.sum())
        self.n += len(group)
        R = out_tgt.shape[0]
        inputs = {k: v for k, v in b_tgt.items()
                  if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == R}  # fmt: skip
        prefix = self._prefix(raw, inputs, out_tgt)
        H = 1 if perm is None else 2
        live = (self.pos < tokens.shape[1]).nonzero()[:, 0]  # cells past this batch: unpatched
        plan = self._plan(live, tokens, real, prefix is not None, H * R, out_tgt)
        t = _Target(tgt_recs, pairs, tokens, real, inputs, out_tgt, H, prefix,
                    self.metric.last_tokens(tgt_recs, out_tgt))  # fmt: skip
        unpatched = float(v_tgt.sum())
        for k, L in enumerate(self.layers):
            src = src_vals[L] if perm is None else torch.cat([src_vals[L], src_vals[L][perm]])
            if L in tgt_vals:  # written as a change of another site's values
                src = src - tgt_vals[L].repeat(H, *([1] * (src.dim() - 1)))
            self.sums["p"][k] += unpatched  # cells left unpatched
            self.sums["n"][k] += unpatched if H == 2 else 0.0
            for start, cells in plan:
                got = self._patched(L, src, cells, start, t) - unpatched  # (C, H)
                self.sums["p"][k, cells] += got[:, 0]
                if H == 2:
                    self.sums["n"][k, cells] += got[:, 1]

    def _prefix(self, raw, inputs, out_tgt) -> Prefix | None:
        """The target's keys and values, where passes may start at the patched token."""
        if self.prefix_ok is False:
            return None
        prefix = Prefix.of(self.model.module, raw)
        if prefix is None:  # no cache these passes can start from
            self.prefix_ok = False
        elif self.prefix_ok is None:
            self.prefix_ok = prefix.check(self.model.module, inputs, out_tgt)
            self.forwards += 1
        return prefix if self.prefix_ok else None

    def _plan(self, live, tokens, real, cut, rows, out) -> list[tuple[int, torch.Tensor]]:
        """``(first token, cells)`` of each patched pass: cells that patch from the same
        token share a pass (as many as the budgets allow), which starts there."""
        T = out.shape[1]
        vocab = out.shape[-1] if out.dim() == 3 else 1
        budget = _TOKEN_BUDGET if out.device.type == "cpu" else _ACCELERATOR_TOKEN_BUDGET
        start = torch.zeros(len(self.pos), dtype=torch.long)
        if cut:  # a cell's first token: the earliest of its symbol over the records
            S = tokens.shape[1]
            p = self.pos.clamp(0, S - 1)
            tok = torch.where(real[:, p], tokens[:, p], T - 1).min(0).values.cpu()
            start = torch.where(self.pos >= 0, tok, 0)
        plan = []
        for s in sorted({int(x) for x in start[live]}):
            cells = live[start[live] == s]
            n = T - s
            chunk = max(1, min(_OUTPUT_BUDGET // max(1, rows * n * vocab),
                               budget // max(1, rows * n)))  # fmt: skip
            plan += [(s, cells[i : i + chunk]) for i in range(0, len(cells), chunk)]
        return plan

    def _patched(self, L, values, cells, start, t: _Target) -> torch.Tensor:
        """``(C, H)``: per cell and half, the metric summed over the batch's records."""
        hook, R, H = self.hooks[L], len(t.recs), t.H
        head, pos, C = self.head[cells], self.pos[cells], len(cells)
        vals = values[:, start:] if start else values
        toks, real = (t.tokens - start).repeat(H, 1), t.real.repeat(H, 1)

        def edit(x):
            v = vals if hook.reader is None else x[: H * R] + vals  # copies agree up to here
            return hook.write(x, v, head, pos, toks, real)

        inputs = replicated(t.inputs, C * H, R)
        if start:
            inputs = t.prefix.inputs(inputs, start, C * H)
        elif _takes_use_cache(type(self.model.module)):
            inputs["use_cache"] = False  # a key/value cache costs copies no metric reads
        b, whole = self.where[L]
        last = b if whole else b - 1  # a block's own output is written into its replay
        out_last = self.tgt_blocks.get(last)
        if out_last is None:
            last, whole = -1, False
        if L in self.kept:  # the block's part before the site replayed, the site written
            hooked = self.inner[L].replayed(self.kept[L], C * H, R, start, edit)
        else:
            hooked = contextlib.nullcontext() if whole else hook.hooked(edit)
        n = inputs["input_ids"].shape[1] if "input_ids" in inputs else None
        one = t.last is not None and n is not None and bool((t.last >= start).all())
        if one and self.keeps:  # the LM head on the tokens the metric reads, not on all
            inputs["logits_to_keep"] = n - int((t.last - start).min())
        with replayed(self.model, last, out_last, C * H, R, edit if whole else None, start), \
                hooked:  # fmt: skip
            out = _first_tensor(self.model.module(**inputs))
        self.forwards += 1
        if one:  # the built-in metric reads one token per record: no whole output needed
            rows = torch.arange(C * H * R, device=out.device)
            at = t.last - start - (n - out.shape[1])  # where the kept logits begin
            logits = out[rows, at.to(out.device).repeat(C * H)]
            got = self.metric.of_logits(logits, t.pairs.repeat(C * H))
            return got.view(C, H, R).sum(-1)
        if start:  # the tokens before the patch: the target's own output
            pre = t.out[:, :start].repeat(C * H, *([1] * (out.dim() - 1)))
            out = torch.cat([pre, out], 1)
        got = [self.metric(t.recs, out[j * R : (j + 1) * R], t.pairs).sum() for j in range(C * H)]
        return torch.stack(got).view(C, H)

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
            "fused_activations": getattr(self, "fused", 0),
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


def _params(module: torch.nn.Module) -> set[str]:
    """The keywords a module's ``forward`` takes."""
    try:
        return set(inspect.signature(type(module).forward).parameters)
    except (TypeError, ValueError):  # a forward without a signature
        return set()


class _Target:
    """What every patched pass of a batch reads of its target run."""

    def __init__(self, recs, pairs, tokens, real, inputs, out, H, prefix, last):
        self.recs, self.pairs, self.tokens, self.real = recs, pairs, tokens, real
        self.inputs, self.out, self.H, self.prefix, self.last = inputs, out, H, prefix, last
