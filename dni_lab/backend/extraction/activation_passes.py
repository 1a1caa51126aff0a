"""What ``dl.activations`` adds around the Extractor's pass: attention patterns, ``stop_at_layer``.

* **Attention patterns** (``blocks.N.attn.hook_pattern``, ``hook_attn_scores``) are one
  value per (head, query, key): no units, so the Extractor does not read them. A model
  that has them (a Hugging Face one: ``model.attention_patterns()``,
  :mod:`dni_lab.backend.hf.patterns`) reads them with hooks of its own, in the same
  forward passes as the units, per record ``(heads, tokens, tokens)``.
* **``stop_at_layer=k``** ends every forward pass after block ``k`` (:mod:`.stop_at_layer`):
  a forward pre-hook on whatever runs next raises, a wrapper around the model's ``forward``
  catches it, and the Extractor gets the values captured so far. A name past block ``k`` is
  refused before any pass.

The model is left as found: hooks removed, its ``forward`` and ``stop_early`` put back,
its attention implementation restored, also after an error.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import LayerError
from .activation_writes import Writer, give_back, writable, zeros
from .extract import Extractor, _reassemble, as_indices
from .length_batches import length_batches
from .name_filters import expand_names, is_glob
from .stop_at_layer import block_of, block_paths, raise_stop, wrap_forward


def split_names(
    model: Any, names: Any, is_feature_set: Callable[[Any], bool]
) -> tuple[list[Any], list[tuple[str, Any, Any]], set[str]]:
    """``names`` as unit names (globs and callables expanded) and attention patterns.

    Parameters
    ----------
    model : Model
        The model; one without ``attention_patterns`` has no pattern names.
    names : str, sequence or callable
        What ``dl.activations`` was given.
    is_feature_set : callable
        Recognises a feature set (``dl.features``).

    Returns
    -------
    units : list
        Names and ``(name, units)`` pairs the Extractor reads.
    patterns : list of (name, heads, PatternTap)
        Each pattern name, its head selection (``"*"``: every head) and where it is read.
    chosen : set of str
        The names a glob or callable chose (not named by the caller): a stop leaves out
        those it never reaches, as TransformerLens's cache lacks hooks that did not run.
    """
    one = is_feature_set(names) or isinstance(names, (str, tuple))
    if not one and callable(names):
        entries: list[Any] = [names]
    else:
        entries = [names] if one else list(names)
    reader = getattr(model, "attention_patterns", None)
    pats = reader() if reader is not None else None
    units: list[Any] = []
    patterns: list[tuple[str, Any, Any]] = []
    chosen: set[str] = set()
    for n in entries:
        if is_glob(n) or (callable(n) and not is_feature_set(n)):
            keep = (lambda c, g=n: fnmatch.fnmatchcase(c, g)) if isinstance(n, str) else n
            picked = [(p, "*", pats.resolve(p)) for p in (pats.names() if pats else []) if keep(p)]
            more = _others(model, n if callable(n) else [n], is_feature_set, bool(picked))
            patterns += picked
            units += more
            chosen |= {p for p, _h, _t in picked} | {u for u in more if isinstance(u, str)}
            continue
        if pats is None:
            units.append(n)
            continue
        head = n[0] if isinstance(n, tuple) and n else n
        tap = pats.resolve(head) if isinstance(head, str) else None
        if tap is None:
            units.append(n)
        else:
            patterns.append((head, n[1] if isinstance(n, tuple) and len(n) == 2 else "*", tap))
    return units, patterns, chosen


def _others(model: Any, names: Any, is_feature_set: Callable, have_patterns: bool) -> list[Any]:
    """The unit names a filter selects; none is no error when it selected patterns."""
    try:
        return expand_names(model, names, is_feature_set)
    except LayerError:
        if have_patterns:
            return []
        raise


class Passes:
    """Attention patterns and a stop after block ``stop``, around the Extractor's passes.

    Parameters
    ----------
    model : Model
        The model.
    patterns : list of (name, heads, PatternTap)
        From :func:`split_names`.
    addresses : dict
        ``{name: address}`` of the unit names.
    stop_at_layer : int or None
        The caller's block to stop after (None: no stop asked), checked by
        :func:`.stop_at_layer.reached`.
    """

    def __init__(
        self,
        model: Any,
        patterns: list[tuple[str, Any, Any]],
        addresses: dict[str, str],
        stop_at_layer: int | None,
    ) -> None:
        self.model = model
        self.taps = {name: tap for name, _heads, tap in patterns}
        heads = model.attention_patterns().heads if patterns else 0
        self.heads = {name: as_indices(sel, heads, tap.address, model.name)
                      for name, sel, tap in patterns}  # fmt: skip
        self.blocks = block_paths(model)  # stop_at_layer was checked (stop_at_layer.reached)
        where = {**addresses, **{n: t.address for n, t in self.taps.items()}}
        needed = [block_of(model, self.blocks, a) for a in where.values()]
        if stop_at_layer is not None:
            self.stop: int | None = int(stop_at_layer)
        elif patterns and needed and all(b is not None for b in needed):
            self.stop = max(0, *needed)  # as a Hugging Face pass stops by itself: no later block
        else:
            self.stop = None
        self._writer: Writer | None = None

    def writer(self, ex: Any) -> Writer | None:
        """The :class:`~.activation_writes.Writer` of ``ex``'s units, if it can read them."""
        if self._writer is None or self._writer.ex is not ex:
            self._writer = Writer(self.model, ex, self.blocks) if writable(self.model, ex) else None
        return self._writer

    def _stop_module(self) -> nn.Module | None:
        """What runs right after block ``stop``: the next block, or the first module after."""
        module = self.model.module
        if self.stop + 1 < len(self.blocks):
            return module.get_submodule(self.blocks[self.stop + 1])
        last = module.get_submodule(self.blocks[-1])
        inside = {id(m) for m in last.modules()}
        after = False
        for _n, m in module.named_modules():
            if id(m) in inside:
                after = True
            elif after and not any(True for _ in m.children()):
                return m
        return None  # nothing runs after the last block: the pass ends by itself

    @contextlib.contextmanager
    def running(self) -> Iterator[list[dict[str, Any]]]:
        """The hooks for the passes run inside; yields the patterns read, one dict per pass."""
        model = self.model
        passes: list[dict[str, Any]] = []
        with contextlib.ExitStack() as stack:
            if self.taps:
                stop_early = model.stop_early
                # the model's own stop fires once its captured units did: patterns of
                # later blocks would never run; this pass stops after self.stop instead
                model.stop_early = False
                stack.callback(setattr, model, "stop_early", stop_early)
                reader = model.attention_patterns()
                taps = list({t.address: t for t in self.taps.values()}.values())
                passes = stack.enter_context(reader.reading(taps))
            after = self._stop_module() if self.stop is not None else None
            if after is not None:
                stack.callback(after.register_forward_pre_hook(raise_stop).remove)
                wrap_forward(model, stack)
            yield passes

    def block(
        self, ex: Extractor, recs: list[Any], mask: torch.Tensor, first: int
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        """One block's units, patterns and tokens per record, in the Extractor's batches.

        Returns
        -------
        units : dict
            ``{address: (R, T, U)}``, as :meth:`Extractor._batched` gives them.
        patterns : dict
            ``{name: (R, heads, T_tokens, T_tokens)}`` in the model's dtype on the CPU, 0 past a
            record's tokens.
        tokens : torch.Tensor
            ``(R,)`` int64: each record's token count (the patterns' positions).
        """
        n = mask.sum(1)
        B = ex.forward_batch
        groups: list[torch.Tensor | None] = (
            [None] if B is None or len(recs) <= B else list(length_batches(n, B))
        )
        parts: dict[str, list[tuple[torch.Tensor, int, Any]]] = {}
        read: list[tuple[torch.Tensor, dict[str, Any]]] = []
        all_rows = torch.arange(len(recs))
        shape = (len(recs), mask.shape[1])
        # each pass's values go straight into the block's tensors, which are known in
        # shape from the first pass: a pass's copy is freed as the next one runs
        units: dict[str, Any] = {}
        writer = self.writer(ex)
        if writer is not None:
            writer.start_block()
        with self.running() as passes:
            for rows in groups:
                if rows is None:
                    sub, sub_mask = recs, mask
                else:
                    T = int(n[rows].max())
                    sub, sub_mask = [recs[i] for i in rows.tolist()], mask[rows.to(mask.device), :T]
                seen = len(passes)
                r = all_rows if rows is None else rows
                if writer is not None:  # straight into the block's tensors, pass by pass
                    writer.run(sub, sub_mask, first, r, units, shape)
                    read.append((r, passes[seen] if len(passes) > seen else {}))
                    continue
                out = ex._extract(sub, sub_mask, first, rows)
                for addr, t in out.items():
                    if rows is None:
                        units[addr] = t
                    elif isinstance(t, torch.Tensor) and t.dim() == 3:
                        if addr not in units:
                            units[addr] = t.new_zeros(*shape, t.shape[-1])
                        units[addr][r.to(t.device), : t.shape[1]] = t
                    else:  # a sparse block (feature set latents): reassembled at the end
                        parts.setdefault(addr, []).append((r, sub_mask.shape[1], t))
                del out
                read.append((r, passes[seen] if len(passes) > seen else {}))
        for a in list(parts):
            units[a] = _reassemble(parts.pop(a), shape)
        patterns, tokens = self._patterns(read, len(recs))
        if writer is not None:
            give_back()
        return units, patterns, tokens

    def _patterns(
        self, read: list[tuple[torch.Tensor, dict[str, Any]]], R: int
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        tokens = torch.zeros(R, dtype=torch.int64)
        if not self.taps:
            return {}, tokens
        for name, tap in self.taps.items():
            if any(tap.address not in got for _r, got in read):
                raise LayerError(
                    f"{name!r}: the forward pass did not reach {tap.module!r} (the model "
                    "stopped before it, or does not call it)."
                )
        first = next(iter(self.taps.values())).address
        T = max(int(got[first][1].max()) if len(got[first][1]) else 0 for _r, got in read)
        for rows, got in read:
            tokens[rows] = got[first][1]
        out: dict[str, torch.Tensor] = {}
        by_address: dict[tuple[str, bytes], torch.Tensor] = {}
        last = {tap.address: name for name, tap in self.taps.items()}
        for name, tap in self.taps.items():
            heads = np.asarray(self.heads[name])
            key = (tap.address, heads.tobytes())
            if key in by_address:  # another name of the same pattern: the same tensor
                out[name] = by_address[key]
                continue
            every = len(heads) == self.model.attention_patterns().heads and bool(
                (heads == np.arange(len(heads))).all()
            )
            if len(read) == 1 and every:  # one pass, every head: its tensor as it is
                full = read[0][1][tap.address][0]
            else:
                h = torch.as_tensor(heads)
                full = zeros(R, len(heads), T, T, dtype=read[0][1][tap.address][0].dtype)
                for rows, got in read:
                    t, n = got[tap.address]
                    t = t if every else t[:, h]
                    # each record's own tokens only: the rest of t and of full are 0
                    for i, (r, k) in enumerate(zip(rows.tolist(), n.tolist(), strict=True)):
                        full[r, :, :k, :k].copy_(t[i, :, :k, :k])
            out[name] = by_address[key] = full
            if last[tap.address] == name:  # the passes' copies go: no 2x peak
                for _rows, got in read:
                    if got[tap.address][0] is not full:
                        got.pop(tap.address)
        return out, tokens
