"""Attribution patching on a patching grid's cells: every cell's effect from one gradient.

:func:`~.patch_grid.patch_grid` runs one patched forward pass per cell (batched).
Attribution patching (Nanda 2023; Syed et al. 2023) estimates every cell at once, to first
order: the change of the metric when a cell of the target run takes the source run's
values is about ``Σ_cell ∂metric/∂a · (a_source − a_target)``, the gradient taken on the
target run at every layer of the site together (one forward and one backward pass per
batch of pairs). With ``exact=True`` the exact grid runs too and the summary gives their
rank correlation. The parameters' ``.grad`` are never touched (``torch.autograd.grad``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError
from ..extraction.extract import on_device, resolve_device, to_device
from ..extraction.models import Model, _first_tensor
from .common import Verification
from .gradients import check_metric
from .grid_run import capture
from .grid_sites import SiteHook, grid_cells
from .patch_grid import GridMetric, length_groups, patch_grid, plan_grid
from .patching import Metric, _last_symbol


def attribution_grid(
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
    exact: bool = False,
    device: str | torch.device = "auto",
    batch_size: int = 64,
) -> Verification:
    """Estimate every cell of a patching grid from the metric's gradient.

    Parameters are those of :func:`~.patch_grid.patch_grid` (``site``, ``by``,
    ``layers``, ``heads``, ``metric``, ``answers``, ``direction``, ``device``,
    ``batch_size``), plus:

    exact : bool
        Also run the exact grid (:func:`~.patch_grid.patch_grid`, with its null) and
        compare.

    Returns
    -------
    Verification
        ``frame``: one row per cell: ``layer``, ``head``, ``position``, ``attribution``
        (the estimated change of the mean metric), ``recovered_est`` (its share of the
        source − target difference) and with ``exact``: ``effect`` (the exact change),
        ``recovered``. ``summary``: ``site``, ``by``, ``direction``, ``clean``,
        ``corrupted`` and with ``exact``: ``spearman`` (rank correlation over cells),
        ``top_agrees`` (the same cell ranks first) and ``exact_summary``.
    """
    g = plan_grid(model, clean, corrupted, site, by, layers, heads, answers, direction)
    site, by, clean, corrupted, Ls = g.site, g.by, g.clean, g.corrupted, g.layers
    head, pos = grid_cells(by, max(g.lengths), g.heads)
    gm = GridMetric(model, metric, g.ids, len(clean))
    totals = torch.zeros(len(Ls), len(head), dtype=torch.float64)
    base = {"clean": 0.0, "corrupted": 0.0}
    dev = resolve_device(device)
    with on_device(model, dev):
        hooks = {L: SiteHook.resolve(model, site, L) for L in Ls}
        for group in length_groups(g.lengths, batch_size):
            _batch(model, hooks, gm, group, clean, corrupted, direction, dev, totals, base, by,
                   head, pos)  # fmt: skip
    n = len(clean)
    base = {k: v / n for k, v in base.items()}
    src, tgt = (base["clean"], base["corrupted"])[:: 1 if direction == "denoise" else -1]
    span = src - tgt
    att = (totals / n).numpy().ravel()
    frame = pl.DataFrame({
        "layer": np.repeat(Ls, len(head)),
        "head": np.tile(head.numpy(), len(Ls)),
        "position": np.tile(pos.numpy(), len(Ls)),
        "attribution": att,
        "recovered_est": att / span if span else np.full(att.size, np.nan),
    }).with_columns(
        pl.when(pl.col(c) >= 0).then(pl.col(c)).cast(pl.Int64).alias(c)
        for c in ("head", "position")
    )  # fmt: skip
    summary: dict[str, Any] = {"site": site, "by": by, "direction": direction, **base}
    if exact:
        ex = patch_grid(model, clean, corrupted, site, by=by, layers=Ls, heads=heads,
                        metric=metric, answers=answers, direction=direction, device=device,
                        batch_size=batch_size)  # fmt: skip
        effect = ex.frame["effect"].to_numpy()
        frame = frame.with_columns(
            pl.Series("effect", effect), pl.Series("recovered", ex.frame["recovered"])
        )
        from scipy.stats import spearmanr  # scipy.stats costs ~0.7 s at import

        summary["spearman"] = float(spearmanr(att, effect).statistic)
        summary["top_agrees"] = int(np.argmax(np.abs(att))) == int(np.argmax(np.abs(effect)))
        summary["exact_summary"] = ex.summary
    return Verification(frame, summary)


def _batch(model, hooks, gm, group, clean, corrupted, direction, dev, totals, base, by,
           head, pos) -> None:  # fmt: skip
    """One batch of pairs: the source values, then the target run forward and backward."""
    pairs = torch.as_tensor(group)
    recs_c, recs_x = [clean[i] for i in group], [corrupted[i] for i in group]
    src_recs, tgt_recs = (recs_c, recs_x) if direction == "denoise" else (recs_x, recs_c)
    src_vals: dict[int, torch.Tensor] = {}
    readers = {L: h.reader or h for L, h in hooks.items()}
    with torch.inference_mode():
        out_src = capture(model, readers, to_device(model.encode(src_recs), dev), src_vals)
    leaves: dict[int, torch.Tensor] = {}
    tgt_vals: dict[int, torch.Tensor] = {}

    def open_leaf(L):
        def edit(t):
            # a zero added where the site is written: its gradient is the site's, the
            # forward pass unchanged, the parameters' .grad untouched
            tgt_vals.setdefault(L, t.detach())
            leaves[L] = torch.zeros_like(t, requires_grad=True)
            return t + leaves[L]

        return hooks[L].hooked(edit)

    def read_target(L):  # a site written elsewhere: its own target values
        return hooks[L].reader.hooked(lambda t: tgt_vals.__setitem__(L, t.detach().clone()))

    stack = [read_target(L) for L in hooks if hooks[L].reader is not None]
    stack += [open_leaf(L) for L in hooks]
    with torch.inference_mode(False), torch.enable_grad():  # also under a caller's no_grad
        for h in stack:
            h.__enter__()
        try:
            out_tgt = _first_tensor(model.forward(to_device(model.encode(tgt_recs), dev)))
        finally:
            for h in reversed(stack):
                h.__exit__(None, None, None)
        slots = model.symbol_slots(out_tgt)
        if slots is None:
            raise DNIError(f"model {model.name!r} does not output one row per token; no grid.")
        outs = {"denoise": (out_src, out_tgt), "noise": (out_tgt, out_src)}[direction]
        gm.fill(*(o.detach() for o in outs), recs_c, recs_x, pairs)
        m_tgt = gm_grad(gm, tgt_recs, out_tgt, pairs)
        grads = torch.autograd.grad(m_tgt.sum(), [leaves[L] for L in hooks], allow_unused=True)
    with torch.inference_mode():
        v_src = gm(src_recs, out_src, pairs)
        keys = ("clean", "corrupted") if direction == "denoise" else ("corrupted", "clean")
        base[keys[0]] += float(v_src.sum())
        base[keys[1]] += float(m_tgt.detach().sum())
        tokens, real = slots
        for k, (L, g) in enumerate(zip(hooks, grads, strict=True)):
            if g is None:  # the metric does not read this layer's site
                continue
            contrib = g * (src_vals[L] - tgt_vals[L])  # (R, T, D)
            totals[k] += _per_cell(contrib, by, head, pos, tokens, real, hooks[L].head_dim)


def gm_grad(gm: GridMetric, records, output, pairs) -> torch.Tensor:
    """The metric with its graph (GridMetric's own values are detached, in float64)."""
    if gm.user is not None:
        return check_metric(gm.user(records, output, pairs), len(records))
    logits = _last_symbol(gm.model, records, output)
    want = gm.ids[pairs].to(logits.device)
    return (logits.gather(1, want[:, :1]) - logits.gather(1, want[:, 1:]))[:, 0]


def _per_cell(contrib, by, head, pos, tokens, real, head_dim) -> torch.Tensor:
    """``(C,)``: the contributions summed within each cell, over the batch's records."""
    R, S = tokens.shape
    rows = torch.arange(R, device=contrib.device)[:, None]
    at = contrib[rows, tokens] * real[..., None]  # (R, S, D): at the symbols' tokens
    at = at.to(torch.float64).sum(0).cpu()  # (S, D)
    if by == "position":
        per_pos = at.sum(-1)
        out = torch.zeros(len(pos), dtype=torch.float64)
        live = pos < S
        out[live] = per_pos[pos[live]]
        return out
    per = at.unflatten(-1, (-1, head_dim)).sum(-1)  # (S, H)
    if by == "head":
        return per.sum(0)[head]
    out = torch.zeros(len(pos), dtype=torch.float64)
    live = pos < S
    out[live] = per[pos[live], head[live]]
    return out
