"""A block's activations written into its tensors while the forward pass makes them.

``dl.activations`` keeps every value it reads. The Extractor's way (hooks keep each
captured tensor until the pass ends, then each is gathered into a new per-symbol
tensor, then copied into the block's) holds a pass's values two or three times at
the peak. On a Hugging Face model (its captures already records first, its batch's
symbol slots known: ``symbol_slots``) :class:`Writer` instead:

* allocates each address's block tensor once, with :func:`zeros`: memory the OS
  zero-fills on first write, so slots past a record's symbols, never written, cost no
  memory (a cache over records of unequal length is mostly its real symbols);
* copies each record's symbols straight from the captured tensor into its rows,
  one forward hook per transformer block draining what the capture's hooks kept, so a
  pass holds at most one block's captures besides the cache;
* writes a tensor two addresses captured as one object (an attention module's output
  and its output projection's, GPT-2's dropout being the identity in eval mode) once,
  into one tensor both names share;
* computes a captured ``nn.Linear`` after the blocks (a language model's head, whose
  logits are most of such a cache) from its input, at real symbols only, straight into
  the cache a slice of its weight at a time, and ends the pass there;
* hands what a block's passes freed back to the OS (glibc's ``malloc_trim``) once the
  block is read, so a loop over blocks does not grow by what its passes once held.

Values are the Extractor's, in the model's floating dtype: 0 past a record's symbols, a
NaN or inf at a real symbol raising :class:`~dni_lab.backend.errors.BehaviorError` naming
its record.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import math
import mmap
from typing import Any

import torch

from .extract import Extractor, _check_finite
from .layouts.gathered import gathered_symbols
from .models import to_device

#: the head's weight rows multiplied at a time (kept in cache across a pass's records)
_HEAD_CHUNK_BYTES = 2 << 20
#: below this a tensor's pages are mostly written anyway: plain ``torch.zeros``
_MAPPED_BYTES = 1 << 20


def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A CPU tensor of zeros whose pages the OS maps on first write.

    ``torch.zeros`` writes every byte; an anonymous memory map is zero-filled by the OS
    page by page as it is first written, so the padding of a cache, never written, is
    never resident. (numpy's ``zeros`` is lazy too, but asks for huge pages: a 2 MiB
    page is resident as soon as one of its bytes is written.)
    """
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if size < _MAPPED_BYTES:
        return torch.zeros(shape, dtype=dtype)
    # the tensor holds a reference to the map: it is unmapped when the tensor goes
    return torch.frombuffer(mmap.mmap(-1, size), dtype=dtype).view(shape)


@functools.cache
def _trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def give_back() -> None:
    """Hand the pages a pass freed back to the OS.

    A pass frees its captured tensors as it drains them; glibc keeps such freed
    chunks resident wherever a cache's tensors pinned the heap, so a loop over blocks
    would grow by what their passes once held. Called once per block.
    """
    trim = _trim()
    if trim is not None:
        trim(0)


def writable(model: Any, ex: Any) -> bool:
    """Whether :class:`Writer` can read ``ex``'s units: activations of a model whose
    captures come back records first with known symbol slots, no feature set."""
    return (
        isinstance(ex, Extractor)
        and isinstance(ex.behavior, str)
        and ex.behavior == "activation"
        and not ex.features
        and not model.reads_layouts
        and callable(getattr(model, "symbol_slots", None))
        and callable(getattr(model, "gather_symbols", None))
    )


#: each record's (row in the block, symbols, first token or -1) and the token index
Spans = tuple[list[tuple[int, int, int]], torch.Tensor]


class Writer:
    """Writes one forward pass's values into a block's tensors as the pass runs.

    Parameters
    ----------
    model : Model
        A model :func:`writable` accepts.
    ex : Extractor
        The planned units (addresses and unit selections) and the device.
    blocks : list of str
        The module path of each transformer block: their forward hooks drain the
        capture (none: the pass's values are written when it ends).
    """

    def __init__(self, model: Any, ex: Extractor, blocks: list[str]) -> None:
        self.model = model
        self.ex = ex
        self.blocks = blocks
        self.alias: dict[str, str] = {}  # address -> the address whose tensor it shares
        self._cols: dict[str, torch.Tensor | None] = {}
        self._head_address: str | None = None  # "" once none was found
        self._weight_bound: tuple | None = None  # (weight version, max row L1, max |bias|)

    def run(
        self,
        recs: list[Any],
        mask: torch.Tensor,
        first: int,
        rows: torch.Tensor,
        units: dict[str, torch.Tensor],
        shape: tuple[int, int],
    ) -> None:
        """One forward pass over ``recs`` (rows ``rows`` of the block), into ``units``.

        ``mask`` is the pass's ``(len(recs), T)`` symbol mask, ``shape`` the block's
        ``(records, symbols)``; ``units[address]`` is allocated on its first value.
        """
        ex, model = self.ex, self.model
        ex.padding.real += int(mask.sum())
        ex.padding.slots += mask.numel()
        counts = mask.sum(1).tolist()
        state = _Pass(recs, mask, first, rows, counts, units, shape)
        with torch.inference_mode():
            batch = to_device(model.encode(list(recs)), ex.device)
            with contextlib.ExitStack() as stack:
                store = stack.enter_context(model.capture(list(ex.layer_units)))
                module = model.module
                for path in self.blocks:  # after the capture's hooks: they run first
                    hook = module.get_submodule(path).register_forward_hook(
                        lambda *_a, s=store: self._drain(s, state)
                    )
                    stack.callback(hook.remove)
                head = self.head()
                if head is not None:
                    hook = module.get_submodule(head).register_forward_pre_hook(
                        lambda m, args, s=store: self._head(m, args, s, state)
                    )
                    stack.callback(hook.remove)
                model.forward(batch)
            self._drain(store, state)  # what the last block's capture (or a stop) left
        missing = [a for a in ex.layer_units if a not in state.seen]
        if missing:
            from ..errors import LayerError

            raise LayerError(
                f"layer {missing[0]!r} of model {model.name!r} did not run in the forward "
                "pass; pick a layer that the module calls."
            )

    def head(self) -> str | None:
        """The address of a captured ``nn.Linear`` after the blocks (a language model's
        head), whose output :meth:`_head` computes record by record into the cache."""
        if self._head_address is not None:
            return self._head_address or None
        module, found, order = self.model.module, "", -1
        where = {path: j for j, (path, _m) in enumerate(module.named_modules())}
        taps = getattr(self.model, "_taps", {})
        repeated = getattr(self.model, "_repeated", set())
        for addr in self.ex.layer_units:
            if addr in taps or addr in repeated or addr not in where or not self.blocks:
                continue
            if any(addr == b or addr.startswith(b + ".") for b in self.blocks):
                continue
            mod = module.get_submodule(addr)
            if type(mod) is torch.nn.Linear and where[addr] > order:
                found, order = addr, where[addr]
        after_blocks = found and order > max(where.get(b, -1) for b in self.blocks)
        self._head_address = found if after_blocks else ""
        return self._head_address or None

    def _head(self, mod: torch.nn.Linear, args: tuple, store: Any, state: _Pass) -> None:
        """Before the head runs: its output, only at real symbols, straight into the
        cache (slices of the weight times each record), and the pass ends (nothing reads
        later).

        A batch's logits are the largest value a language model's cache holds; computed
        whole, they would be held twice while copied, and computed at padding too.
        """
        from ..hf.capture import StopForward

        self._drain(store, state)
        addr = self._head_address
        later = [a for a in self.ex.layer_units if a != addr and a not in state.seen]
        x = args[0] if args else None
        if later or not isinstance(x, torch.Tensor) or x.dim() != 3 or addr in self.alias:
            return  # something is read after the head, or its input is not per token
        got = state.spans(self.model.symbol_slots(x))
        some = self._cols_of(addr, mod.out_features) is not None  # a selection: the module runs
        if got is None or x.shape[0] != len(state.recs) or some:
            return
        w, b = mod.weight, mod.bias
        dest = self._dest(addr, mod.out_features, state, mod.weight.dtype)
        direct = dest.dtype == w.dtype == x.dtype and w.device == dest.device == x.device
        spans = [(i, r, n, start) for i, (r, n, start) in enumerate(got[0]) if n]
        srcs = [x[i, start : start + n] if start >= 0 else x[i].index_select(0, got[1][i, :n])
                for i, _r, n, start in spans]  # fmt: skip
        if direct:
            # a slice of the weight's rows at a time, kept in cache across the records:
            # one product per record streams the whole weight from memory each time
            step = max(256, _HEAD_CHUNK_BYTES // max(1, w.shape[1] * w.element_size()))
            for c0 in range(0, w.shape[0], step):
                wc = w[c0 : c0 + step].t()
                bc = None if b is None else b[c0 : c0 + step]
                for (_i, r, n, _s), src in zip(spans, srcs, strict=True):
                    out = dest[r, :n, c0 : c0 + step]  # rows of a row-major matrix: no copy
                    if bc is None:
                        torch.mm(src, wc, out=out)
                    else:
                        torch.addmm(bc, src, wc, out=out)
        else:
            for (_i, r, n, _s), src in zip(spans, srcs, strict=True):
                dest[r, :n].copy_(torch.nn.functional.linear(src, w, b))
        finite = self._bounded(mod, srcs) or all(
            bool(torch.isfinite(dest[r, :n].sum())) for _i, r, n, _s in spans
        )
        state.seen.add(addr)
        if not finite:  # a NaN: name where (a copy of this pass's rows, only then)
            mask = state.mask.cpu()
            got = dest[state.rows, : mask.shape[1]]
            _check_finite(got, self.model, addr, mask, state.first, state.rows)
        raise StopForward

    def _bounded(self, mod: torch.nn.Linear, srcs: list[torch.Tensor]) -> bool:
        """Whether every output of ``mod`` on ``srcs`` is surely finite, without reading them:
        ``|x . w + b| <= max|x| * max_row ||w||_1 + max|b|``, far below the dtype's largest
        (NaN anywhere makes the bound NaN: False). The weight's part is kept per version."""
        w, b = mod.weight, mod.bias
        key = (w.data_ptr(), w._version, None if b is None else (b.data_ptr(), b._version))
        if self._weight_bound is None or self._weight_bound[0] != key:
            wb = float(w.detach().abs().sum(1).max()) if w.numel() else 0.0
            bb = float(b.detach().abs().max()) if b is not None and b.numel() else 0.0
            self._weight_bound = (key, wb, bb)
        _key, wb, bb = self._weight_bound
        xb = max((float(x.abs().max()) for x in srcs if x.numel()), default=0.0)
        return xb * wb + bb < torch.finfo(w.dtype).max / 8

    def start_block(self) -> None:
        """A new block: which names share a tensor is decided again on its first pass."""
        self.alias = {}

    def _drain(self, store: Any, state: _Pass) -> None:
        """Write and drop every value the capture holds (all alive: none shares memory
        with another unless it is a view of it, so a tensor's place names its object)."""
        objects: dict[tuple, str] = {}
        ready = getattr(store, "ready", {})
        for where in (ready, getattr(store, "raw", {})):
            for addr in list(where):
                self._write(addr, where.pop(addr), state, objects, ready=where is ready)
        for addr in list(dict.keys(store)):
            self._write(addr, dict.pop(store, addr), state, objects)

    def _write(
        self, addr: str, t: Any, state: _Pass, objects: dict[tuple, str], ready: bool = False
    ) -> None:
        if addr not in self.ex.layer_units:
            return
        state.seen.add(addr)
        key = None
        if isinstance(t, torch.Tensor):
            key = (t.data_ptr(), t.dtype, t.device, tuple(t.shape), t.stride())
            twin = objects.get(key)
            if twin is not None and twin != addr:
                if self.alias.get(addr) == twin:
                    return  # written once already, into the tensor both names share
                if not state.started and addr not in state.units and twin in state.units:
                    self.alias[addr] = twin  # one object: one tensor for both names
                    state.units[addr] = state.units[twin]
                    return
            objects.setdefault(key, addr)
        if addr in self.alias:  # no longer one object: its own tensor from now on
            state.units[addr] = state.units[self.alias.pop(addr)].clone()
        spans = None
        if not ready and isinstance(t, torch.Tensor) and t.dim() == 3:
            spans = state.spans(self.model.symbol_slots(t))
        if spans is not None and t.shape[0] in (1, len(state.recs)):
            self._copy_slots(addr, t, spans, state)
        else:  # windows, pooled records, per-head maps: the model's own gather
            g = t if ready else self.model.gather_symbols(t)
            T = state.mask.shape[1]
            g = gathered_symbols(g, state.recs, T, addr, self.model.name, self.model.resize)
            g = self._select(addr, g)
            dest = self._dest(addr, g.shape[-1], state, g.dtype)
            dest[state.rows, :T] = g.detach().cpu()
            t = g
        if not bool(torch.isfinite(t.sum())):  # a NaN somewhere: at a real symbol?
            got = state.units[addr][state.rows, : state.mask.shape[1]]
            _check_finite(got, self.model, addr, state.mask.cpu(), state.first, state.rows)

    def _copy_slots(self, addr: str, t: torch.Tensor, spans: Spans, state: _Pass) -> None:
        """Each record's symbols from ``t`` (``(rows, tokens, D)``) into its rows."""
        spans, index = spans
        cols = self._cols_of(addr, t.shape[-1])
        dest = self._dest(addr, t.shape[-1] if cols is None else len(cols), state, t.dtype)
        one = t.shape[0] == 1
        for i, (r, n, start) in enumerate(spans):
            src = t[0 if one else i]
            src = src[start : start + n] if start >= 0 else src.index_select(0, index[i, :n])
            if cols is not None:
                src = src[:, cols.to(src.device)]
            dest[r, :n].copy_(src)

    def _cols_of(self, addr: str, width: int) -> torch.Tensor | None:
        """The selected units of ``addr`` (None: every unit, in order)."""
        if addr not in self._cols:
            idx = self.ex._selection.get(addr)
            whole = idx is None or (
                len(idx) == width and bool((idx == torch.arange(width)).all())
            )
            self._cols[addr] = None if whole else idx
        return self._cols[addr]

    def _select(self, addr: str, g: torch.Tensor) -> torch.Tensor:
        cols = self._cols_of(addr, g.shape[-1])
        return g if cols is None else g[..., cols.to(g.device)]

    def _dest(self, addr: str, width: int, state: _Pass, dtype: torch.dtype) -> torch.Tensor:
        """The block's tensor of ``addr``, allocated at its first write in the captured
        floating dtype (the model's: a bfloat16 model's cache takes half a float32 one's
        memory, as TransformerLens's does); float32 for anything else."""
        dest = state.units.get(addr)
        if dest is None:
            dtype = dtype if dtype.is_floating_point else torch.float32
            dest = state.units[addr] = zeros(*state.shape, width, dtype=dtype)
        return dest


class _Pass:
    """What one forward pass writes: its records, rows in the block, the block's tensors."""

    def __init__(self, recs, mask, first, rows, counts, units, shape) -> None:
        self.recs = recs
        self.mask = mask
        self.first = first
        self.rows = rows
        self.counts = counts
        self.units = units
        self.shape = shape
        self.started = bool(units)  # an earlier pass of the block wrote already
        self.seen: set[str] = set()
        self._spans: dict[tuple, Spans | None] = {}

    def spans(self, slots: tuple[torch.Tensor, torch.Tensor] | None) -> Spans | None:
        """``(row in the block, symbols, first token)`` per record (first token -1 where
        the record's symbols are not consecutive tokens) and the token index, from
        ``symbol_slots``; None where its counts are not the pass's (another layout).
        Once per pass and layout."""
        if slots is None:
            return None
        index, real = slots
        key = (index.data_ptr(), tuple(index.shape))
        if key not in self._spans:
            idx = index.cpu()
            n_of = real.sum(1).tolist()
            rows = self.rows.tolist()
            out: list[tuple[int, int, int]] | None = []
            for i, n in enumerate(self.counts):
                n = int(n)
                if i >= len(n_of) or int(n_of[i]) != n:
                    out = None
                    break
                if n == 0:
                    out.append((rows[i], 0, 0))
                    continue
                a, b = int(idx[i, 0]), int(idx[i, n - 1])
                run = b - a == n - 1 and bool((idx[i, 1:n] - idx[i, : n - 1] == 1).all())
                out.append((rows[i], n, a if run else -1))
            self._spans[key] = None if out is None else (out, index)
        return self._spans[key]
