"""Unit behaviors per block of records, on the chosen device.

The extractor runs ``encode`` and the module once per block with hooks on the
requested addresses, turns every captured output into ``(R, T, D)`` where
position ``t`` is symbol ``t`` (recurrent layers replayed layer by layer,
convolutional maps resized to the input and flattened to pixels), and applies
the requested behavior: the activation, its gradient with respect to the input,
or a user function.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import BehaviorError, LayerError
from ..hypothesis.cache import block_key
from .behavior_memo import model_state
from .devices import on_device, resolve_device, symbol_mask
from .gradient_behaviors import (
    apply_function,
    input_gradient,
    input_leaf,
    metric_gradients,
    register_metric_gradients,
)
from .layouts.gathered import gathered_symbols
from .length_batches import length_batches
from .models import Model, to_device
from .rnn_replay import RnnReplay
from .sparse_block import SparseBlock

# the names other modules import from here, wherever they live now
__all__ = [
    "Extractor", "Padding", "as_indices", "metric_gradients", "on_device",
    "register_metric_gradients", "resolve_device", "symbol_mask", "to_device",
]  # fmt: skip

Behavior = str | Callable[[torch.Tensor, list[Any]], torch.Tensor]


@dataclass
class Padding:
    """Symbol slots of the forward passes run so far: real ones and all (padded) ones."""

    real: int = 0
    slots: int = 0

    @property
    def waste(self) -> float:
        """The padded share of all slots (0 when nothing ran)."""
        return 1 - self.real / self.slots if self.slots else 0.0



class Extractor:
    """Extract behaviors of one model, block after block.

    Parameters
    ----------
    model : Model
    layer_units : dict
        ``{address: indices or None}``; ``None`` keeps every unit of the layer.
    behavior : {"activation", "gradient"} or callable
    device : torch.device
    features : dict, optional
        ``{layer name: (hook address, feature set)}``: layers whose units are a feature
        set's latents, encoded from the hook's activation once per block.
    sparse : bool
        Return all the latents of a sparse set (TopK, JumpReLU) as a
        :class:`~.sparse_block.SparseBlock` (activations only); the caller densifies.
    forward_batch : int, optional
        Most records per forward pass; a longer block runs as several passes over
        records of similar length (:func:`.length_batches.length_batches`: at least
        half full, cut where padding is least), its behaviors put back in record order.
    padding : Padding, optional
        Counts the symbol slots the forward passes padded.
    """

    def __init__(
        self,
        model: Model,
        layer_units: dict[str, Any],
        behavior: Behavior,
        device: torch.device,
        features: dict[str, tuple[str, Any]] | None = None,
        sparse: bool = False,
        forward_batch: int | None = None,
        padding: Padding | None = None,
        keep_dtype: bool = False,
    ) -> None:
        self.model = model
        #: store a unit's values in the model's floating dtype (``dl.activations``: a cache,
        #: as TransformerLens keeps it); the measures read float32
        self.keep_dtype = keep_dtype
        self.layer_units = layer_units
        self.behavior = behavior
        self.device = device
        self.forward_batch = forward_batch
        self.padding = padding if padding is not None else Padding()
        self._replay = RnnReplay(model.split_address)
        self.features = {a: (h, _placed(fs, device)) for a, (h, fs) in (features or {}).items()}
        self._selection = {
            a: None if i is None else torch.as_tensor(np.asarray(i).ravel(), dtype=torch.long)
            for a, i in layer_units.items()
        }
        self._in_order = {
            a: i is None or bool((i == torch.arange(len(i))).all())
            for a, i in self._selection.items()
        }
        self._units_key = tuple(
            (a, None if i is None else tuple(np.asarray(i).ravel().tolist()))
            for a, i in layer_units.items()
        ) + tuple((a, fs.fingerprint()) for a, (_h, fs) in self.features.items())
        self._sparse = {
            a
            for a, (_h, fs) in self.features.items()
            if sparse and behavior == "activation" and getattr(fs, "sparse", False)
            and _all_units(layer_units[a], fs.d_sae)
        }
        self._gradients = None  # a GradientOf behavior's MetricGradients, made once
        if getattr(behavior, "metric_gradient", False) and self.features:
            raise LayerError(
                f"no gradients through feature sets ({sorted(self.features)}): latents are "
                "read, never written back; take the gradient at their hook instead."
            )
        if not (
            behavior in ("activation", "gradient")
            or callable(behavior)
            or getattr(behavior, "metric_gradient", False)
        ):
            raise BehaviorError(
                f"unknown behavior {behavior!r}; use 'activation', 'gradient' or a function "
                "(activations (R, T, D), records) -> tensor of the same shape."
            )

    def __call__(
        self,
        records: list[Any],
        mask: torch.Tensor,
        first: int = 0,
        records_key: str | None = None,
    ) -> dict[str, torch.Tensor]:
        """Behaviors of the planned units: ``{address: (R, T, n_selected)}`` float32.

        ``first`` is the position of ``records[0]`` in the data, so that errors name
        the record a user can find; ``records_key`` is the block's
        :func:`~.cache.block_key` when the caller has it.
        """
        key = self._memo_key(records, records_key)
        if key is not None:
            hit = self.model.behavior_memo.get(key)
            if hit is not None:
                return hit
        out = self._batched(records, mask, first)
        if key is not None:
            self.model.behavior_memo.put(key, out)
        return out

    def _memo_key(self, records: list[Any], records_key: str | None) -> tuple | None:
        memo = getattr(self.model, "behavior_memo", None)
        if memo is None or not memo.max_bytes or not isinstance(self.behavior, str):
            return None  # a behavior function may depend on anything: always recompute
        if self._sparse:
            return None  # sparse blocks are not tensors the memo can size
        state = model_state(self.model.module)
        rkey = records_key or block_key(records)
        return (state, self._units_key, self.behavior, str(self.device), rkey)

    def _batched(
        self, records: list[Any], mask: torch.Tensor, first: int
    ) -> dict[str, torch.Tensor]:
        """The block in forward batches of records of similar length, back in record order."""
        n = mask.sum(1)
        B = self.forward_batch
        if B is None or len(records) <= B:
            self.padding.real += int(n.sum())
            self.padding.slots += mask.numel()
            return self._extract(records, mask, first)
        parts: dict[str, list[tuple[torch.Tensor, int, Any]]] = {}
        for rows in length_batches(n, B):  # similar lengths, cut where padding is least
            T = int(n[rows].max())
            sub = mask[rows.to(mask.device), :T]
            self.padding.real += int(sub.sum())
            self.padding.slots += sub.numel()
            # errors name records by their place in the data: the batch is not contiguous
            part = self._extract([records[i] for i in rows.tolist()], sub, first, rows)
            for addr, t in part.items():
                parts.setdefault(addr, []).append((rows, T, t))
        shape = (len(records), mask.shape[1])
        return {addr: _reassemble(p, shape) for addr, p in parts.items()}

    def _extract(
        self, records: list[Any], mask: torch.Tensor, first: int, rows: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        if self.model.reads_layouts and not self.model.has_widths:
            # layouts come from the probe pass (data flow through every module): run it
            # once, before this block's hooks go on
            self.model.layer_widths(records[:2], self.device)
        if getattr(self.behavior, "metric_gradient", False):
            return self._metric_gradients(records, mask, first, rows)
        grad = self.behavior == "gradient"
        ctx = torch.enable_grad() if grad else torch.inference_mode()
        with ctx:
            batch = to_device(self.model.encode(list(records)), self.device)
            leaf = None
            with contextlib.ExitStack() as stack:
                if grad:
                    batch, leaf = input_leaf(self.model, batch, stack)
                hooks = [a for a in self.layer_units if a not in self.features]
                hooks += [h for h, _fs in self.features.values() if h not in hooks]
                store = stack.enter_context(self.model.capture(hooks))
                self.model.forward(batch)
            out = {}
            pad = _padding_slots(mask)  # once for every layer of the batch
            for addr in self.layer_units:
                if addr in self.features:  # latents: the hook's activation, encoded
                    hook, fs = self.features[addr]
                    x = self._symbols(hook, store, records, mask)
                    if addr in self._sparse:
                        values, index = fs.encode_sparse(x)
                        values = values.detach().float()
                        values = _check_finite(values, self.model, addr, mask, first)
                        out[addr] = SparseBlock(values, index, fs.d_sae)
                        continue
                    act = fs.encode(x).float()
                else:
                    act = self._symbols(addr, store, records, mask)
                idx = self._selection[addr]
                if idx is not None and not (len(idx) == act.shape[-1] and self._in_order[addr]):
                    act = act[..., idx.to(act.device)]  # every unit in order needs no copy
                if grad:
                    act = input_gradient(act, leaf, mask, records, self.model)
                elif callable(self.behavior):
                    act = apply_function(self.behavior, act, records, addr)
                act = act.detach()
                if not (self.keep_dtype and act.is_floating_point()):
                    act = act.float()
                out[addr] = _check_finite(act, self.model, addr, mask, first, rows, pad)
        return out

    def _metric_gradients(self, records, mask, first, rows) -> dict[str, torch.Tensor]:
        """A :class:`~dni_lab.verify.GradientOf` behavior: the metric's gradient per unit."""
        if self._gradients is None:
            self._gradients = metric_gradients(
                self.model, list(self.layer_units), self.behavior.metric, self.device
            )
        _values, grads, _mask, _metric = self._gradients(records, first)
        out = {}
        for addr, g in grads.items():
            idx = self._selection[addr]
            if idx is not None:
                g = g[..., idx.to(g.device)]
            out[addr] = _check_finite(g.float(), self.model, addr, mask, first, rows)
        return out

    def _symbols(
        self, addr: str, store: dict, records: list[Any], mask: torch.Tensor
    ) -> torch.Tensor:
        T = mask.shape[1]
        raw = store.get(addr)
        if raw is None:
            raise LayerError(
                f"layer {addr!r} of model {self.model.name!r} did not run in the forward pass; "
                "pick a layer that the module calls."
            )
        if isinstance(raw, tuple) and raw and raw[0] == "rnn":
            t = self._replay(addr, *raw[1:])
        else:
            t = raw
        if self.model.reads_layouts:
            counts = mask.sum(1).tolist()  # symbols per record: the mask already counted them
            return self.model.symbol_view(addr, t, records, T, counts)
        return gathered_symbols(t, records, T, addr, self.model.name, self.model.resize)


def _reassemble(parts: list[tuple[torch.Tensor, int, Any]], shape: tuple[int, int]) -> Any:
    """One block's behaviors (a tensor or a :class:`SparseBlock`) from its forward batches."""
    def put(fields: list[torch.Tensor], width: int) -> torch.Tensor:
        out = fields[0].new_zeros(*shape, width)
        for (rows, T, _), f in zip(parts, fields, strict=True):
            out[rows.to(f.device), :T, : f.shape[-1]] = f
        return out

    ts = [t for _, _, t in parts]
    if not isinstance(ts[0], SparseBlock):
        return put(ts, ts[0].shape[-1])
    k = max(t.values.shape[-1] for t in ts)  # pairs of value 0 pad the narrower batches
    return SparseBlock(
        put([t.values for t in ts], k), put([t.indices for t in ts], k), ts[0].width
    )


def _all_units(idx: Any, width: int) -> bool:
    """Whether ``idx`` selects every unit of a ``width``-wide layer, in order."""
    if idx is None:
        return True
    idx = np.asarray(idx).ravel()
    return len(idx) == width and bool((idx == np.arange(width)).all())


def _placed(fs: Any, device: torch.device) -> Any:
    """The feature set on ``device`` in eval mode (a copy when it lives elsewhere)."""
    if not isinstance(fs, nn.Module):
        return fs
    tensors = list(fs.parameters()) + list(fs.buffers())
    if tensors and tensors[0].device != torch.device(device):
        fs = copy.deepcopy(fs).to(device)
    return fs.eval()


def _check_finite(
    act: torch.Tensor,
    model: Model,
    addr: str,
    mask: torch.Tensor,
    first: int = 0,
    rows: torch.Tensor | None = None,
    pad: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act`` with zeros at the padding slots; a :class:`BehaviorError` naming the first
    NaN or inf at a real symbol. ``pad``: :func:`_padding_slots` of ``mask``, if known."""
    # One reduction decides the usual case: a sum is finite only if every value is
    # (a finite overflow to inf only sends us to the exact check below).
    if bool(torch.isfinite(act.sum())):
        pad = _padding_slots(mask) if pad is None else pad
        # padding slots that already hold zeros (HFModel gathers them so) need no masked
        # copy; reading them costs what the padding holds, not the block
        if not len(pad):
            return act
        if act.dim() == 3 and act.is_contiguous():  # a view: no copy of the block
            held = act.view(-1, act.shape[-1]).index_select(0, pad.to(act.device))
        else:
            held = act[~mask]
        if not bool(held.any()):
            return act
        return act.masked_fill(~mask[..., None], 0.0)
    bad = ~torch.isfinite(act) & mask[..., None]
    if bool(bad.any()):
        r, t, u = (int(i) for i in torch.nonzero(bad)[0])
        r = int(rows[r]) if rows is not None else r
        raise BehaviorError(
            f"model {model.name!r}, layer {addr!r}: NaN or inf behavior at unit {u}, symbol {t} "
            f"of record {first + r} of the data; check the model's weights and inputs "
            "(e.g. torch.isfinite on its parameters)."
        )
    return act.masked_fill(~mask[..., None], 0.0)


def _padding_slots(mask: torch.Tensor) -> torch.Tensor:
    """The padding slots of an ``(R, T)`` symbol mask, as indices into its ``R * T`` slots."""
    return (~mask).reshape(-1).nonzero().flatten()


def as_indices(sel: Any, width: int, addr: str, model_name: str) -> np.ndarray:
    """Normalize ``"*"``, an int or a list of ints into validated unit indices."""
    if isinstance(sel, str) and sel == "*":
        return np.arange(width)
    idx = np.atleast_1d(np.asarray(sel))
    if idx.dtype.kind not in "iu":
        raise LayerError(f"units of layer {addr!r} must be '*' or integer indices, got {sel!r}.")
    bad = idx[(idx < 0) | (idx >= width)]
    if len(bad):
        raise LayerError(
            f"layer {addr!r} of model {model_name!r} has {width} units (0..{width - 1}); "
            f"unit index {int(bad[0])} is out of range."
        )
    return idx.astype(np.int64)
