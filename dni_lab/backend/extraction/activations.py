"""``dl.activations``: a model's activations by name, as tensors and as a long frame.

What TransformerLens's ``run_with_cache(names_filter=...)`` and nnsight's ``.save()``
give, read the way ``dl.inspect`` reads units: names (module paths, TransformerLens hook
names, nnsight paths on a Hugging Face model) resolve through ``model.resolve_layer``,
the engine's :class:`~.extract.Extractor` reads them in blocks of records (a Hugging Face
model's forward pass stops after the last block a name needs), and values are laid out
per *symbol* (a token of an HF model, without special tokens or padding; a character of a
string record; a pixel of an image map, as the model's layouts say).

A cache holds padded ``(records, symbols, units)`` tensors in the model's floating dtype
(as TransformerLens keeps them: float32 for a float32 model) on the CPU plus each
record's symbol count (``lengths``); positions past a record's length are 0. Attention
patterns (``attn.hook_pattern``, ``hook_attn_scores``) are ``(records, heads, tokens,
tokens)``, TransformerLens's shape, with each record's token count in
``pattern_lengths`` (:mod:`.activation_passes`). With ``stream=True`` the call yields one
cache per block instead, so memory stays bounded by one block whatever the data's size.
On a Hugging Face model each pass's values go straight into the cache's tensors as the
pass makes them (:mod:`.activation_writes`): no second copy at the peak, padding never
resident.
The cache itself and its TransformerLens methods are :mod:`.activation_cache` and
:mod:`.activation_stacks`. A name read whole is resolved once and read at its address, so
names of one value share one tensor; a model keeps its last plans (names resolved, probe
pass), so a loop calling ``dl.activations`` per batch plans once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DNIError, LayerError
from .activation_cache import SHAPES, ActivationCache
from .activation_passes import Passes, split_names
from .activation_stacks import describe
from .activation_writes import writable
from .extract import Extractor, metric_gradients, on_device, resolve_device, symbol_mask
from .models import Model
from .stop_at_layer import reached

__all__ = ["ActivationCache", "activations"]

#: plans kept per model (names resolved, probe pass, Extractor), so that a loop that calls
#: dl.activations per batch, as TransformerLens users call run_with_cache, pays once
_PLANS_KEPT = 8


class _Plans(dict):
    """A model's recent plans, in the model's own ``__dict__`` (a plan refers to its
    model, so a cache outside it would keep the model alive); they never travel: a
    pickled model (a cluster's worker) gets none."""

    def __reduce__(self) -> tuple:
        return (_Plans, ())

#: a name and its unit selection: ``"blocks.3.hook_resid_post"`` or ``(name, [0, 5])``
Name = str | tuple[str, Any]


def activations(
    model: Model | nn.Module,
    data: Iterable[Any],
    names: Sequence[Name] | str | Callable[[str], bool],
    *,
    block_size: int = 256,
    forward_batch: int | None = None,
    device: str | torch.device = "auto",
    stream: bool = False,
    grad: Callable[[list[Any], torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    stop_at_layer: int | None = None,
    shapes: str = "units",
) -> ActivationCache | Iterator[ActivationCache]:
    """Read the activations at ``names`` over ``data``: an :class:`ActivationCache`.

    Parameters
    ----------
    model : Model or nn.Module
        A :class:`~dni_lab.Model` (``dl.Model.from_hf(module, tokenizer)`` for a
        transformer); a bare module is wrapped as ``dl.Model(module)``.
    data : iterable, tensor or BatchEncoding
        The records (a list, any iterable; read block by block), or token ids: a 2-D
        integer tensor, a ``BatchEncoding`` (padding dropped through its attention
        mask) or a list of id lists, one record per row (:mod:`~dni_lab.backend.engine.token_ids`).
    names : sequence, str or callable
        Addresses, TransformerLens hook names or nnsight paths
        (``"blocks.3.hook_resid_post"``, ``"transformer.h.3.attn.hook_z"``), each
        alone (every unit) or as ``(name, units)`` with unit indices; or a feature set
        (``dl.features``: SAE latents, a logit lens), named in the cache by its layer
        ``"{hook}:{name}"``. A glob (``"blocks.*.hook_resid_post"``, also inside a list)
        or a callable ``name -> bool`` (TransformerLens's ``names_filter``,
        ``lambda name: name.endswith("hook_z")``) selects among the model's
        TransformerLens hook names (a Hugging Face model's) and its addresses
        (:mod:`.name_filters`). On a Hugging Face model, ``blocks.N.attn.hook_pattern``
        and ``hook_attn_scores`` (alone, or ``(name, heads)``) are attention patterns,
        ``(records, heads, tokens, tokens)`` (:mod:`.activation_passes`); a filter
        selects them too.
    block_size : int
        Records per block (per forward pass unless ``forward_batch`` cuts it).
    forward_batch : int, optional
        Most records per forward pass; a block is cut into passes over records of
        similar length (less padding).
    device : str or torch.device
        Where the model runs (``"auto"``: CUDA, then MPS, else the CPU). Values come
        back on the CPU.
    stream : bool
        Yield one cache per block (its :attr:`~ActivationCache.first` says where it
        starts in the data) instead of one cache over all the data: memory stays
        bounded by a block. The model is held on ``device`` in eval mode only while a
        block runs; between blocks it is as the caller left it.
    grad : callable, optional
        ``grad(records, output, index) -> (R,)``, a metric of the model's output (such
        as ``dl.verify.logit_difference(model, answers)``; ``index``: the records'
        positions in the data). The cache then also holds, for each name,
        ``"{name}_grad"`` (TransformerLens's key): the gradient of the metric's sum with
        respect to the name's units at each symbol, and ``cache.metric``. A block then
        runs the whole model forward and backward once more per address (``forward_batch``
        does not cut those passes); the parameters' ``.grad`` are left untouched. Feature sets and
        units read from part of a module's output take no gradient.
    stop_at_layer : int, optional
        End every forward pass after block ``stop_at_layer`` (0-based, inclusive: block
        ``k`` runs, block ``k + 1`` does not; TransformerLens's ``stop_at_layer=k + 1``).
        A name read after that block raises before any pass. Without it a Hugging Face
        model already stops after the last block a name needs.
    shapes : {"units", "transformer_lens"}
        ``"transformer_lens"``: a per-head name read whole comes back in
        TransformerLens's shape, ``(records, tokens, heads, d_head)`` (``hook_result``:
        ``(records, tokens, heads, d_model)``), a view of the same storage; ``"units"``
        (default): ``(records, symbols, heads·d_head)``, as ``dl.inspect`` reads units.

    Returns
    -------
    ActivationCache or iterator of ActivationCache
        ``cache[name]``: ``(records, symbols, units)`` in the model's dtype, padded with 0 past
        ``cache.lengths``; an attention pattern ``(records, heads, tokens, tokens)``, 0 past
        ``cache.pattern_lengths``; ``cache.frame(name)`` / ``cache.to_polars()``: long frames.
        On a transformer the cache has TransformerLens's methods too: ``.to``,
        ``.stack``, ``accumulated_resid``, ``decompose_resid``, ``apply_ln_to_stack``,
        ``logit_attrs`` (:mod:`.activation_stacks`).

    Raises
    ------
    LayerError
        For a name the model does not have (with the names it does), a glob or callable
        that selects none, or a name past ``stop_at_layer``, before any block runs.
    DNIError
        ``stop_at_layer`` outside the model's blocks, or with ``grad=`` (a gradient needs
        the model's output); ``shapes`` not one of ``"units"``, ``"transformer_lens"``.
    TokenIdsError
        Token ids that cannot be records (a 3-D or float tensor, a mask of another shape,
        ids outside the vocabulary), before any block runs.
    """
    if isinstance(model, nn.Module):
        model = Model(model)
    if not isinstance(model, Model):
        raise DNIError(
            f"dl.activations takes a dl.Model (or an nn.Module), not {type(model).__name__}; "
            "wrap a transformer with dl.Model.from_hf(module, tokenizer)."
        )
    from ..engine.resolve import as_records, is_feature_set
    from ..engine.token_ids import check_records

    if shapes not in SHAPES:
        raise DNIError(f"shapes must be one of {SHAPES}, not {shapes!r}.")

    # a glob or callable: the names chosen; attention patterns are read apart
    names, patterns, chosen = split_names(model, names, is_feature_set)
    names, patterns = reached(model, names, patterns, chosen, stop_at_layer)
    if not names and not patterns:
        raise LayerError("no names given; pass names=['blocks.0.hook_resid_post', ...].")
    if grad is not None and (patterns or stop_at_layer is not None):
        raise DNIError(
            "grad= takes the gradient of a metric of the model's output: it cannot stop at a "
            "layer (stop_at_layer=) or read attention patterns; make a call without grad= "
            "for those."
        )
    if not (isinstance(block_size, int) and block_size > 0):
        raise DNIError(f"block_size must be a positive count, not {block_size!r}.")
    dev = resolve_device(device)
    records = as_records(data)  # token ids: one id list per record
    if isinstance(records, Sequence):
        check_records([model], records)  # ids a model cannot read fail before any block
    blocks = _blocks(records, block_size)
    how = (names, patterns, stop_at_layer, (shapes, describe(model)))
    if stream:
        return _stream(model, blocks, how, dev, forward_batch, grad)
    with on_device(model, dev):
        parts = list(_run(model, blocks, how, dev, forward_batch, grad))
    if not parts:
        raise DNIError("data holds no records; pass at least one record.")
    head = parts[0]
    values = {n: [t for p in parts for t in p._values[n]] for n in head._values}
    lengths = torch.cat([p.lengths for p in parts])
    metric = None if grad is None else torch.cat([p.metric for p in parts])
    tokens = torch.cat([p.pattern_lengths for p in parts]) if head.patterns else None
    return ActivationCache(values, lengths, head.addresses, head.units, metric=metric,
                           pattern_lengths=tokens, patterns=head.patterns, shapes=shapes,
                           model=head.model)  # fmt: skip


def _stream(model, blocks, how, dev, forward_batch, grad) -> Iterator[ActivationCache]:
    """One cache per block; the model on ``dev`` in eval mode only while a block runs."""
    plan = None
    for first, recs in blocks:
        with on_device(model, dev):
            plan = plan or _planned(model, how, recs, dev, forward_batch, grad)
            cache = _block(model, plan, first, recs, dev)
        yield cache


def _run(model, blocks, how, dev, forward_batch, grad) -> Iterator[ActivationCache]:
    plan = None
    for first, recs in blocks:
        plan = plan or _planned(model, how, recs, dev, forward_batch, grad)
        yield _block(model, plan, first, recs, dev)


def _blocks(data: Iterable[Any], size: int) -> Iterator[tuple[int, list[Any]]]:
    """``(first, records)`` blocks of an iterable, read lazily (a generator stays one)."""
    it = iter(data)
    first = 0
    while True:
        recs = list(itertools.islice(it, size))
        if not recs:
            return
        yield first, recs
        first += len(recs)


def _planned(model: Model, how: tuple, sample: list[Any], dev, forward_batch, grad):
    """:func:`_plan`, reused from an earlier call with the same names on the same model."""
    names, patterns, stop_at_layer, (shapes, _transformer) = how
    if grad is not None or not all(isinstance(n, (str, tuple)) for n in names):
        return _plan(model, how, sample, dev, forward_batch, grad)  # feature sets: fresh
    tree = tuple(id(m) for m in model.module.modules())  # a module swapped: plan again
    key = (id(model), repr(names), repr([p[:2] for p in patterns]), stop_at_layer, shapes,
           str(dev), forward_batch, tree)  # fmt: skip
    plans = vars(model).setdefault("_activation_plans", _Plans())
    plan = plans.get(key)
    if plan is None:
        plan = _plan(model, how, sample, dev, forward_batch, grad)
        if len(plans) >= _PLANS_KEPT:
            plans.pop(next(iter(plans)))
        plans[key] = plan
    return plan


def _plan(model: Model, how: tuple, sample: list[Any], dev, forward_batch, grad):
    """Names → addresses and unit indices, the Extractor reading their union, and the
    :class:`~.activation_passes.Passes` around it (None: the Extractor's pass alone)."""
    from ..engine.resolve import is_feature_set, resolve_units

    names, patterns, stop_at_layer, shape = how
    if not names:  # patterns alone: no units, no probe pass
        ex = Extractor(model, {}, "activation", dev, forward_batch=forward_batch, keep_dtype=True)
        return ex, {}, {}, {}, Passes(model, patterns, {}, stop_at_layer), shape
    pairs = [(n, "*") if isinstance(n, str) or is_feature_set(n) else tuple(n) for n in names]
    bad = [p for p in pairs if len(p) != 2 or not (isinstance(p[0], str) or is_feature_set(p[0]))]
    if bad:
        raise LayerError(
            f"cannot read name {bad[0]!r}; pass a name, a (name, [unit indices]) pair or a "
            "feature set (dl.features)."
        )
    # a name read whole is resolved once and read by its address: aliases of one value
    # (blocks.0.hook_out, blocks.0.hook_resid_post) are one group, one capture, one tensor
    whole = {i: model.resolve_layer(p[0]) for i, p in enumerate(pairs)
             if isinstance(p[0], str) and isinstance(p[1], str) and p[1] == "*"}  # fmt: skip
    specs: list[list[Any]] = []
    group_of: dict[Any, int] = {}
    for i, p in enumerate(pairs):
        key = ("*", whole[i]) if i in whole else ("pair", i)
        if key not in group_of:
            group_of[key] = len(specs)
            specs.append([(whole[i], "*")] if i in whole else [p])
    mu = resolve_units(model, specs, sample[:2], dev)
    # each name's columns within its address's union of units; a feature set goes by its layer
    layers = mu.layers.astype(str)
    found, first_col = np.unique(layers, return_index=True)
    starts = dict(zip(found.tolist(), first_col.tolist(), strict=True))
    addresses, units, cols = {}, {}, {}
    for i, (name, _sel) in enumerate(pairs):
        g = mu.groups[group_of[("*", whole[i]) if i in whole else ("pair", i)]]
        addr = layers[g.cols[0]]
        key = name.address if is_feature_set(name) else name
        addresses[key] = addr
        units[key] = mu.units[g.cols]
        cols[key] = torch.as_tensor(g.cols - starts[addr])
    ex = Extractor(model, mu.layer_units, "activation", dev, mu.features,
                   forward_batch=forward_batch, keep_dtype=True)  # fmt: skip
    if grad is not None:
        sets = [n for n, _ in pairs if is_feature_set(n)]
        if sets:
            raise LayerError(
                f"no gradients through feature set {sets[0].address!r}: its latents are "
                "read, never written back; ask for the gradient at its hook instead."
            )
        ex = metric_gradients(model, sorted(set(addresses.values())), grad, dev)
    passes = None
    if patterns or stop_at_layer is not None or writable(model, ex):
        passes = Passes(model, patterns, addresses, stop_at_layer)
    return ex, addresses, units, cols, passes, shape


def _block(model: Model, plan, first: int, recs: list[Any], dev) -> ActivationCache:
    ex, addresses, units, cols, passes, (shapes, transformer) = plan
    metric, grads, patterns, tokens = None, {}, {}, None
    if passes is not None:  # patterns or a stop: the same batches, with hooks around them
        mask = symbol_mask(model, recs, dev)
        out, patterns, tokens = passes.block(ex, recs, mask, first)
    elif isinstance(ex, Extractor):
        mask = symbol_mask(model, recs, dev)
        # the memo is skipped: a cache's tensors are the caller's, to keep or change
        out = ex._batched(recs, mask, first)
    else:  # MetricGradients: the values and the metric's gradient in one pass
        out, grads, mask, metric = ex(recs, first)
    values, grad_names = {}, {}
    for name, addr in addresses.items():
        # MetricGradients reads every unit of an address: columns are then unit indices
        c = torch.as_tensor(units[name]) if grads else cols[name]
        values[name] = [_columns(out[addr], c)]
        if grads:
            values[f"{name}_grad"] = [_columns(grads[addr], c)]
            grad_names[f"{name}_grad"] = addr
    lengths = mask.sum(1).cpu().to(torch.int64)
    units = {**units, **{g: units[g[: -len("_grad")]] for g in grad_names}}
    if patterns:
        values.update({n: [t] for n, t in patterns.items()})
        addresses = {**addresses, **{n: t.address for n, t in passes.taps.items()}}
        units = {**units, **passes.heads}
    cache = ActivationCache(values, lengths, {**addresses, **grad_names}, units, first,
                            None if metric is None else metric.cpu(), tokens,
                            list(patterns), shapes, transformer)  # fmt: skip
    return cache


def _columns(t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Columns ``c`` of ``t`` on the CPU (``t`` itself when ``c`` is every column)."""
    whole = len(c) == t.shape[-1] and bool((c == torch.arange(len(c))).all())
    return (t if whole else t[..., c.to(t.device)]).cpu()
