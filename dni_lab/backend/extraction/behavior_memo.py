"""Recent blocks' unit behaviors, kept on their model so that a repeated query skips
the forward pass.

In a notebook the same query runs again and again over one model and one set of
records, with another hypothesis, measure or filter: the hypotheses come from their
cache, so the model's forward pass is most of what such a warm call costs (about 60 of
100 ms for 30,000 symbols of a 128-unit LSTM). A :class:`BehaviorMemo` lives on each
:class:`~dni_lab.backend.extraction.models.Model` and holds the behaviors of its latest blocks,
least recently used first out, up to ``DNI_LAB_BEHAVIOR_MEMO_MB`` (64 MiB by default;
0 turns it off). A block larger than that is never kept, so a scan of the paper's
workload (1.8 GB of behaviors) holds at most one budget's worth and pays nothing else.

An entry is only served back to the very same computation: the key holds every
parameter and buffer's identity, storage and in-place version counter (an optimizer
step, a ``load_state_dict`` or a ``.data`` swap all change it), the user's hooks (an
ablation changes behaviors, not weights), the extracted units, the behavior kind, the
device and the records' content hash.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _global_hooks

_OURS = "dni_lab.backend.extraction.models"  # the engine's own capture hooks leave the state alone

__all__ = ["BehaviorMemo", "memo_bytes", "model_state"]


def memo_bytes() -> int:
    """The per-model budget: ``$DNI_LAB_BEHAVIOR_MEMO_MB`` MiB (default 64, 0 = off)."""
    raw = os.environ.get("DNI_LAB_BEHAVIOR_MEMO_MB", "64")
    try:
        mb = float(raw)
    except ValueError:
        raise ValueError(
            f"DNI_LAB_BEHAVIOR_MEMO_MB={raw!r} is not a number; set it to the MiB of unit "
            "behaviors a model may keep for repeated queries (0 turns the memo off)."
        ) from None
    return max(0, int(mb * (1 << 20)))


def model_state(module: nn.Module) -> tuple[int, ...]:
    """Changes whenever what a forward pass computes may change without a new module.

    Every parameter and buffer's identity, storage and in-place version counter
    (optimizer steps, ``load_state_dict``, ``.data`` swaps), and the ids of the
    user's hooks, module-level and global (an ablation or a forcing hook changes the
    behaviors with the weights untouched; hook ids are never reused).
    """
    out: list[int] = []
    for t in list(module.parameters()) + list(module.buffers()):
        # accelerate's offload hooks swap weights in under inference mode: such tensors
        # keep no version counter (and cannot change outside inference mode)
        out += (id(t), _storage_ptr(t), -1 if t.is_inference() else t._version)
    for m in module.modules():
        for hooks in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks):
            out += (k for k, fn in hooks.items() if getattr(fn, "__module__", "") != _OURS)
    out += (-1, *_global_hooks._global_forward_hooks, *_global_hooks._global_forward_pre_hooks)
    return tuple(out)


def _storage_ptr(t: torch.Tensor) -> int:
    """Where ``t``'s values live; a sparse tensor has no one pointer: its values' do."""
    if t.layout != torch.strided:
        try:
            return t._values().data_ptr() if t.is_sparse else -2
        except RuntimeError:  # an uncoalesced or compressed layout: its layout stands in
            return -2
    return t.data_ptr()


class BehaviorMemo:
    """A small LRU of ``key -> {address: behaviors}`` with a byte budget.

    Parameters
    ----------
    max_bytes : int, optional
        Budget; :func:`memo_bytes` when omitted (read once, at construction).
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = memo_bytes() if max_bytes is None else max_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, dict[str, torch.Tensor]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # a background run and the notebook share a model

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def get(self, key: Hashable) -> dict[str, torch.Tensor] | None:
        """The behaviors stored under ``key`` (refreshed as most recent), else None."""
        with self._lock:
            parts = self._entries.get(key)
            if parts is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return dict(parts)

    def put(self, key: Hashable, parts: dict[str, torch.Tensor]) -> None:
        """Keep ``parts`` under ``key``, dropping the oldest entries to stay in budget."""
        size = sum(t.numel() * t.element_size() for t in parts.values())
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _size(old)
            while self._entries and self._bytes + size > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= _size(dropped)
            self._entries[key] = dict(parts)
            self._bytes += size

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __getstate__(self) -> dict[str, Any]:
        # A model sent to a worker travels without its memo (tensors the worker never needs).
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_bytes"])


def _size(parts: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in parts.values())
