"""Deterministic shards and the measure states they produce.

A shard is one block of the single-process loop: records ``first .. first + len - 1``
of the data, cut by the driver exactly as :meth:`Inspection._parts` cuts them (a file's
blocks are described, not read: the worker reads its own). A worker
folds a shard into *fresh* measure states; the driver merges those states in shard
order, so after shard ``k`` the merged state is what one process holds after block
``k``. Because a shard depends only on its record indices, a shard whose worker died is
read again by another and yields the same states.

Two things make a fresh state merge like the single-process one:

* **Calibration.** IoU thresholds and mutual-information bin edges are fixed by the
  first block a state reads; a fresh state of block 7 would calibrate on block 7 and
  refuse to merge. Workers therefore start from a *fork* of the merged state after
  block 0: its calibration with its counts emptied (:func:`fork`).
* **Device.** States cross machines on the CPU (:func:`moved`); a driver without a GPU
  merges what GPU workers computed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..engine.sources import Part
from ..measures import Measure

#: Measures whose state calibrates on its first block, and the fields that count what
#: was read (emptied by a fork; everything else, the calibration, is kept). A user
#: measure that calibrates gives itself a ``fork(state)`` method instead.
_COUNTS: dict[str, tuple[str, ...]] = {
    "IoU": ("inter", "a", "b", "n", "n_records", "n_undef", "a_undef"),
    "MutualInformation": ("joint", "u_count", "n", "n_records", "n_undef", "u_undef"),
}


#: Measures whose ``merge`` is not order-exact (``logreg``: averaged warm-start weights,
#: a per-state plateau history), by class name. Workers keep their blocks' behaviors as
#: Ray objects and a holder actor (probes.py) updates these states from them, in record
#: order: the same answer as one process; the driver receives results, not behaviors.
#: A measure says otherwise with a ``merge_exact`` attribute.
_NOT_EXACT = frozenset({"LogReg"})


def merges_exactly(measure: Measure) -> bool:
    """Whether merging fresh per-block states in order equals one state reading them."""
    flag = getattr(measure, "merge_exact", None)
    return bool(flag) if flag is not None else type(measure).__name__ not in _NOT_EXACT


@dataclass
class Block:
    """One block's behaviors of a state's units, for a measure a holder updates."""

    U: torch.Tensor
    H: torch.Tensor
    mask: torch.Tensor


class Deferred(Measure):
    """Stands in on a worker for a measure that does not merge exactly: keeps the block."""

    def __init__(self, measure: Measure) -> None:
        self.measure = measure
        self.name = measure.name
        self.joint = measure.joint

    def start(self, n_units: int, n_hyps: int, device: Any = "cpu", info: Any = None) -> None:
        return None

    def update(self, state: Any, U: torch.Tensor, H: torch.Tensor, mask: torch.Tensor) -> Block:
        return Block(U, H, mask)


def forkable(measure: Measure) -> bool:
    """Whether workers must start ``measure``'s states from a fork of block 0's state."""
    return callable(getattr(measure, "fork", None)) or type(measure).__name__ in _COUNTS


def fork(measure: Measure, state: Any) -> Any:
    """An empty state with ``state``'s calibration: blocks it reads merge with ``state``.

    Parameters
    ----------
    measure : Measure
        The measure that owns ``state``.
    state : Any
        A state that has read the run's first block.

    Returns
    -------
    Any
        A deep copy of ``state`` whose counts are zero.
    """
    own = getattr(measure, "fork", None)
    if callable(own):
        return own(state)
    out = copy.deepcopy(state)
    for name in _COUNTS[type(measure).__name__]:
        value = getattr(out, name)
        if isinstance(value, torch.Tensor):
            setattr(out, name, torch.zeros_like(value))
        elif value is not None:
            setattr(out, name, type(value)(0))
    return out


def moved(obj: Any, device: torch.device | str) -> Any:
    """``obj`` with every tensor (and recorded device) on ``device``; shares nothing moved.

    Walks dataclasses, plain objects, lists, tuples and dicts: measure states are plain
    objects that merge across machines (the Measure protocol in docs/architecture.md).
    """
    device = torch.device(device)
    return _walk(obj, lambda t: t.to(device), device, {})


def _walk(obj: Any, f: Callable[[torch.Tensor], torch.Tensor], device: torch.device,
          seen: dict[int, Any]) -> Any:  # fmt: skip
    if isinstance(obj, torch.Tensor):
        return f(obj)
    if isinstance(obj, torch.device):
        return device
    if isinstance(obj, (list, tuple)):
        items = [_walk(v, f, device, seen) for v in obj]
        return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
    if isinstance(obj, dict):
        return {k: _walk(v, f, device, seen) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        if id(obj) in seen:
            return seen[id(obj)]
        out = copy.copy(obj)
        seen[id(obj)] = out
        for k, v in vars(obj).items():
            object.__setattr__(out, k, _walk(v, f, device, seen))  # frozen dataclasses too
        return out
    return obj


@dataclass
class Trimmed:
    """A tensor whose last slices along its first dimension are zero, sent without them.

    A fresh state of one block fills few of its parts: ``corr``'s 20 jackknife buckets
    receive a block's groups in turn, so a block of 8 groups leaves 12 buckets zero.
    """

    head: torch.Tensor
    rows: int

    def full(self) -> torch.Tensor:
        tail = torch.zeros((self.rows - len(self.head), *self.head.shape[1:]),
                           dtype=self.head.dtype, device=self.head.device)  # fmt: skip
        return torch.cat([self.head, tail])


def trimmed(obj: Any) -> Any:
    """``obj`` (a state, on the CPU) with each tensor's zero tail left out (exact)."""
    return _walk(obj, _trim, torch.device("cpu"), {})


def untrimmed(obj: Any) -> Any:
    """What :func:`trimmed` left out, put back: zeros of the same dtype."""
    if isinstance(obj, Trimmed):
        return obj.full()
    if isinstance(obj, (list, tuple)):
        items = [untrimmed(v) for v in obj]
        return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
    if isinstance(obj, dict):
        return {k: untrimmed(v) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.Tensor)) and not callable(obj):
        for k, v in vars(obj).items():
            if isinstance(v, (Trimmed, list, tuple, dict)) or hasattr(v, "__dict__"):
                object.__setattr__(obj, k, untrimmed(v))
    return obj


def _trim(t: torch.Tensor) -> Any:
    if t.ndim == 0 or len(t) < 2 or t.is_sparse or t.numel() == 0:
        return t
    nz = t.reshape(len(t), -1).ne(0).any(1).nonzero()
    keep = int(nz[-1]) + 1 if len(nz) else 0
    return Trimmed(t[:keep].clone(), len(t)) if keep < len(t) else t


def payload_bytes(obj: Any) -> int:
    """Bytes of the tensors and arrays in ``obj`` (what a worker's answer ships, roughly).

    Walks what :func:`moved` walks; pickling overhead and plain Python numbers are left
    out, so this is the array payload a driver receives.
    """
    seen: set[int] = set()
    total = 0

    def visit(x: Any) -> None:
        nonlocal total
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, Trimmed):
            visit(x.head)
        elif isinstance(x, torch.Tensor):
            total += x.nelement() * x.element_size()
        elif hasattr(x, "nbytes") and hasattr(x, "dtype"):  # numpy arrays
            total += int(x.nbytes)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
        elif isinstance(x, dict):
            for v in x.values():
                visit(v)
        elif hasattr(x, "__dict__") and not isinstance(x, type) and not callable(x):
            for v in vars(x).values():
                visit(v)

    visit(obj)
    return total


@dataclass
class Shard:
    """One block of records, numbered like the single-process loop numbers it.

    ``part`` carries the records when they live in the driver's memory, and only where
    they are (a file's row group, a Dataset block) when the worker can read them itself.
    """

    index: int
    part: Part

    @property
    def first(self) -> int:
        return self.part.first


class InOrder:
    """Hands out results in shard order, whatever order workers finish in."""

    def __init__(self) -> None:
        self.next = 0
        self._held: dict[int, Any] = {}

    def put(self, index: int, value: Any) -> None:
        self._held[index] = value

    def ready(self) -> list[tuple[int, Any]]:
        """The results that continue the sequence, removed from the buffer.

        ``next`` moves past all of them at once: it counts the results handed out, not
        those the caller merged (a caller may stop inside the batch).
        """
        out = []
        while self.next in self._held:
            out.append((self.next, self._held.pop(self.next)))
            self.next += 1
        return out

    def __len__(self) -> int:
        return len(self._held)
