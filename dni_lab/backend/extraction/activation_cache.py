"""``ActivationCache``: what ``dl.activations`` returns, with TransformerLens's cache methods.

A cache holds padded ``(records, symbols, units)`` tensors in the model's floating dtype
(as the Extractor reads them), plus each record's symbol count (``lengths``); positions past a
record's length are 0. Attention patterns are ``(records, heads, tokens, tokens)``.
With ``shapes="transformer_lens"`` a per-head name is a view in TransformerLens's shape
(``hook_q``/``k``/``v``/``z``: ``(records, tokens, heads, d_head)``; ``hook_result``:
``(records, tokens, heads, d_model)``): no copy is made.

On a transformer the cache also answers as TransformerLens's ``ActivationCache`` does
(:mod:`.activation_stacks`): ``cache["resid_post", 3]``, any alias of a name it holds
(``blocks.3.hook_out`` for ``blocks.3.hook_resid_post``), ``.to(device)``,
``.stack(...)`` / ``stack_activation``, ``accumulated_resid``, ``decompose_resid`` and
``apply_ln_to_stack``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError
from .activation_stacks import Stacks, Transformer, act_name

#: What ``shapes=`` takes.
SHAPES = ("units", "transformer_lens")


class ActivationCache(Stacks):
    """Activations of some names over some records: ``cache[name]`` is ``(R, T, U)``.

    Attributes
    ----------
    names : list of str
        The names as the caller gave them (selections dropped), in order.
    addresses : dict
        ``{name: resolved address}`` (a TransformerLens name and its module path).
    units : dict
        ``{name: unit indices}`` of each name's layer, in column order.
    lengths : torch.Tensor
        ``(R,)`` int64: each record's symbol count; slots past it are padding (0).
    first : int
        The data position of record 0 (a streamed block's offset; 0 for a whole run).
    metric : torch.Tensor or None
        ``(R,)`` float64: the metric per record when gradients were asked (``grad=``).
    patterns : list of str
        The names that are attention patterns: ``cache[name]`` is ``(R, heads, T, T)``
        over tokens, ``units[name]`` their heads.
    pattern_lengths : torch.Tensor or None
        ``(R,)`` int64: each record's token count, the patterns' positions (special tokens
        included, padding not); None without patterns.
    shapes : {"units", "transformer_lens"}
        How a per-head name comes back: ``(R, T, heads·d_head)`` units, or
        TransformerLens's ``(R, T, heads, d_head)`` (a view of the same storage).
    model : Transformer or None
        What the TransformerLens methods read of the model (blocks, norms, heads); None
        for a model that is no transformer.
    """

    def __init__(
        self,
        values: dict[str, list[torch.Tensor]],
        lengths: torch.Tensor,
        addresses: dict[str, str],
        units: dict[str, np.ndarray],
        first: int = 0,
        metric: torch.Tensor | None = None,
        pattern_lengths: torch.Tensor | None = None,
        patterns: list[str] | None = None,
        shapes: str = "units",
        model: Transformer | None = None,
    ) -> None:
        self._values = values
        self.metric = metric
        self.patterns = list(patterns or [])
        self.pattern_lengths = pattern_lengths
        self.lengths = lengths
        self.addresses = addresses
        self.units = units
        self.names = list(addresses)
        self.first = first
        self.shapes = shapes
        self.model = model

    @property
    def n_records(self) -> int:
        return int(self.lengths.shape[0])

    def keys(self) -> list[str]:
        return list(self.names)

    def values(self) -> list[torch.Tensor]:
        return [self[n] for n in self.names]

    def items(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, self[n]) for n in self.names]

    def __contains__(self, name: object) -> bool:
        try:
            self._name(name)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def _name(self, name: Any) -> str:
        if isinstance(name, tuple):  # TransformerLens's ("resid_post", 3) / ("scale", 2, "ln1")
            name = act_name(*name)
        if name in self.addresses:
            return name
        by_address = [n for n, a in self.addresses.items() if a == name]
        if not by_address and self.model is not None and isinstance(name, str):
            try:  # another name of an address held: blocks.3.hook_out, transformer.h.3
                address = self.model.resolve(name)
            except (DNIError, KeyError, ValueError, AttributeError):
                address = None
            by_address = [n for n, a in self.addresses.items() if a == address]
        if by_address:
            return by_address[0]
        if isinstance(name, str) and "." not in name and not name.startswith("hook_"):
            try:  # TransformerLens's cache["scale"]: ln_final.hook_scale
                return self._name(act_name(name))
            except KeyError:
                pass
        held = ", ".join(repr(n) for n in self.names[:12])
        more = f", ... ({len(self.names)} names)" if len(self.names) > 12 else ""
        raise KeyError(
            f"{name!r} is not in this activation cache; it holds {held}{more} "
            "(pass the name to dl.activations(names=[...]))."
        )

    def _raw(self, key: str) -> torch.Tensor:
        """The stored tensor of ``key``: blocks of different lengths padded into one, once."""
        parts = self._values[key]
        if len(parts) > 1:  # blocks differ in length: pad them to the longest, once
            T = max(p.shape[-2] for p in parts)
            pad = (lambda p: (0, T - p.shape[-1], 0, T - p.shape[-2])) if key in self.patterns \
                else (lambda p: (0, 0, 0, T - p.shape[1]))  # fmt: skip
            parts[:] = [torch.cat([torch.nn.functional.pad(p, pad(p)) for p in parts])]
        return parts[0]

    def __getitem__(self, name: Any) -> torch.Tensor:
        """``(R, T, U)``, ``T`` the longest record's symbols; 0 past ``lengths``.

        An attention pattern: ``(R, heads, T, T)``, ``T`` the longest record's tokens; 0
        past ``pattern_lengths``. With ``shapes="transformer_lens"``, a per-head name
        read whole is ``(R, T, heads, d_head)`` (``hook_result``: ``(R, T, heads,
        d_model)``), a view. ``name`` may also be TransformerLens's ``(name, layer)`` or
        ``(name, layer, sublayer)`` shorthand, or any name of an address the cache holds.
        """
        key = self._name(name)
        t = self._raw(key)
        shape = self._unit_shape(key, t.shape[-1])
        return t if shape is None else t.unflatten(-1, shape)

    def _unit_shape(self, key: str, width: int) -> tuple[int, int] | None:
        """TransformerLens's trailing shape of per-head name ``key``; None: as stored."""
        if self.shapes != "transformer_lens" or self.model is None or key in self.patterns:
            return None
        u = self.units.get(key)
        if u is None or len(u) != width or not np.array_equal(u, np.arange(width)):
            return None  # a selection of units has no head axis to restore
        return self.model.head_axes(key, self.addresses[key], width)

    def record(self, i: int, name: str) -> torch.Tensor:
        """Record ``i``'s values of ``name``: ``(symbols, units)`` (a pattern: ``(heads,
        tokens, tokens)``), no padding."""
        if self._name(name) in self.patterns:
            n = int(self.pattern_lengths[i])
            return self[name][i, :, :n, :n]
        return self[name][i, : int(self.lengths[i])]

    def to(self, device: str | torch.device) -> ActivationCache:
        """Move every tensor to ``device`` (TransformerLens's ``cache.to``); returns the cache.

        ``lengths`` and ``pattern_lengths`` stay on the CPU: they index frames.
        """
        for key in self._values:
            self._values[key] = [self._raw(key).to(device)]
        return self

    def frame(self, name: str) -> pl.DataFrame:
        """A long frame of ``name``: ``record``, ``symbol``, ``unit``, ``value``, real symbols only.

        ``record`` counts from :attr:`first` (a record's position in the data), ``unit``
        is the unit's index in its layer. An attention pattern's frame has ``record``,
        ``head``, ``query``, ``key``, ``value`` over each record's tokens.
        """
        key = self._name(name)
        t = self._raw(key).detach().cpu()
        if key in self.patterns:
            return pattern_frame(t.float(), self.pattern_lengths, self.units[key], self.first)
        _, T, U = t.shape
        real = torch.arange(T)[None, :] < self.lengths[:, None]
        r, s = real.nonzero(as_tuple=True)
        vals = t[r, s].float().numpy()  # (n real symbols, U)
        n = len(r)
        return pl.DataFrame(
            {
                "record": np.repeat(r.numpy() + self.first, U).astype(np.int64),
                "symbol": np.repeat(s.numpy(), U).astype(np.int64),
                "unit": np.tile(self.units[key], n).astype(np.int64),
                "value": vals.reshape(-1).astype(np.float32),
            }
        )

    def to_polars(self) -> pl.DataFrame:
        """Every name's :meth:`frame`, one after another, with a leading ``name`` column.

        With attention patterns, a row has the columns of both kinds, null where its kind
        has none (a pattern's ``unit``, a unit's ``head``).
        """
        frames = [self.frame(n).select(pl.lit(n).alias("name"), pl.all()) for n in self.names]
        return pl.concat(frames, how="diagonal" if self.patterns else "vertical")

    def __repr__(self) -> str:
        shapes = {n: tuple(self[n].shape) for n in self.names}
        return f"ActivationCache({self.n_records} records, {shapes})"


def pattern_frame(
    t: torch.Tensor, tokens: torch.Tensor, heads: np.ndarray, first: int
) -> pl.DataFrame:
    """A pattern's long frame: ``record``, ``head``, ``query``, ``key``, ``value``.

    Each record's own tokens only (``tokens``: its count); ``record`` counts from
    ``first``, ``head`` is the head's index in the layer.
    """
    _R, H, T, _ = t.shape
    inside = torch.arange(T)[None, :] < tokens[:, None]  # (R, T)
    real = inside[:, :, None] & inside[:, None, :]
    r, q, k = real.nonzero(as_tuple=True)
    vals = t.permute(0, 2, 3, 1)[r, q, k].numpy()  # (n pairs, H)
    n = len(r)
    return pl.DataFrame(
        {
            "record": np.repeat(r.numpy() + first, H).astype(np.int64),
            "head": np.tile(np.asarray(heads), n).astype(np.int64),
            "query": np.repeat(q.numpy(), H).astype(np.int64),
            "key": np.repeat(k.numpy(), H).astype(np.int64),
            "value": vals.reshape(-1).astype(np.float32),
        }
    )
