"""The layers of a Hugging Face model: addresses, virtual taps, heads and the capture.

:class:`HFLayers` is the part of :class:`~.model.HFModel` that names and reads layers:
module addresses plus each block's virtual ones (:mod:`.hooks`: ``hook_z``, gated MLP
neurons, the mid residual stream, fused q/k/v slices), computed taps made when first
named (:mod:`.computed`), TransformerLens and nnsight names translated (:mod:`.names`),
attention pair units (:mod:`.attention`), the widths probe (a module called twice never
stops a pass) and the capture that gathers outputs per symbol and ends the forward pass
once every address fired (:mod:`.capture`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import DNIError, LayerError, did_you_mean
from ..extraction.models import Model, to_device
from . import attention, capture, computed, hooks, names, patterns, seq2seq


class HFLayers(Model):
    """Layer addressing and capture of :class:`~.model.HFModel` (its base class)."""

    @property
    def addresses(self) -> list[str]:
        """Module addresses plus each block's virtual ones (``{block}.attn.hook_z``, ...).

        See :mod:`.hooks`: per-head outputs, gated MLP neurons, the mid residual stream
        and GPT-2's fused q/k/v are not a module's output and get an address of their own.
        """
        return super().addresses + list(self._taps) + list(self._attn)

    def hook_names(self) -> list[str]:
        """The TransformerLens hook names this model translates (``blocks.0.attn.hook_z``, ...).

        What ``dl.activations(names=...)``' globs and callables choose among, before
        :attr:`addresses`; some may still not resolve (see :func:`.hooks.tl_names`).
        """
        return hooks.tl_names(self.module, self._blocks, self._n_blocks, self._taps)

    def positional_layers(self) -> list[str]:
        """The blocks: position ``i`` is block ``i``, and the default units."""
        return [f"{self._blocks}.{i}" for i in range(self._n_blocks)]

    def resolve_layer(self, layer: str | int) -> str:
        """An address, a block position, a TransformerLens hook or an nnsight path."""
        known = set(self.addresses) if isinstance(layer, str) else set()
        if isinstance(layer, str) and layer not in known and self._add_tap(layer):
            known.add(layer)
        if isinstance(layer, str) and layer not in known:
            mapped = names.translate(layer, self._blocks, self._n_blocks, self.module, self._taps)
            if mapped is not None and mapped not in known and self._add_tap(mapped):
                known.add(mapped)
            if mapped is not None and mapped not in known:
                raise LayerError(
                    f"{layer!r} maps to {mapped!r}, which model {self.name!r} does not have."
                    f"{did_you_mean(mapped, self.addresses)}"
                )
            layer = mapped or layer
        if isinstance(layer, str) and layer not in known:
            layer = seq2seq.translate(layer, self._decoder_blocks) or layer
        address = super().resolve_layer(layer)
        seq2seq.needs_rule(self, address)
        return address

    def _add_tap(self, address: str) -> bool:
        """Make the computed or ``.input`` tap ``address`` names (:mod:`.computed`), if any.

        It joins :attr:`addresses` after every other address (earlier units keep their
        positions), and the next :meth:`layer_widths` measures it.
        """
        tap = computed.lazy_tap(self.module, address, self._blocks, self._heads[1])
        if tap is None:
            return False
        self._taps[address] = tap
        self._widths, self._probed = {}, False  # measured again, with it, on the next call
        return True

    def _module(self, name: str) -> nn.Module:
        tap = self._taps.get(name)
        if tap is not None:
            return self.module.get_submodule(tap.module)
        if name in self._attn:
            return self.module.get_submodule(self._attn[name][0])
        return super()._module(name)

    def token_id(self, token: int | str) -> int:
        """The id of ``token``: an id as it is, or a string the tokenizer keeps whole."""
        if not isinstance(token, str):
            return super().token_id(token)
        ids = self.tokenizer(str(token), add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise DNIError(
                f"{token!r} is {len(ids)} tokens for model {self.name!r}'s tokenizer; give one "
                "token (a string the tokenizer keeps whole, or its id)."
            )
        return int(ids[0])

    def forceable(self, address: str) -> bool:
        """Whether forcing ``address`` can hook one module's input or output as a whole.

        A slice of a fused projection (GPT-2's ``attn.hook_q``) cannot: its units are
        not that module's units; nor can a computed value (``hook_normalized``,
        ``hook_result``, ``hook_rot_q``: :mod:`.computed`).
        """
        tap = self._taps.get(address)
        plain = tap is None or (tap.start is None and tap.kind is None)
        return address not in self._attn and plain

    def with_heads(self, frame: Any) -> Any:
        """A score frame with a ``head`` column: ``unit // head_dim`` on per-head layers.

        Rows of this model on ``attn.hook_q``, ``hook_k``, ``hook_v``, ``hook_z``,
        ``hook_rot_q/k``, ``hook_q/k_normed`` (and on the projections they map to) get
        their head; ``attn.hook_result`` rows ``unit // d_model``; every other row gets
        null. Keys and values under GQA have fewer heads, the same ``head_dim``.
        """
        import polars as pl

        layers = frame.filter(pl.col("mid") == self.name)["layer"].unique().to_list()
        dims = {a: d for a in layers if (d := self._head_dim_of(a)) is not None}
        dim = pl.col("layer").replace_strict(dims, default=None, return_dtype=pl.Int64)
        head = pl.when(pl.col("mid") == self.name).then(pl.col("unit") // dim)
        return frame.with_columns(head.cast(pl.Int64).alias("head"))

    def attention_to(
        self, pair: attention.Pair, name: str | None = None, blocks: Sequence[int] | None = None
    ) -> list[str]:
        """Units that read each head's attention to the token ``pair`` names (:mod:`.attention`).

        Parameters
        ----------
        pair : callable
            ``pair(record) -> [target of token 0, ...]``: per token (symbol) the index of
            the token it should attend to, or None.
        name : str, optional
            Names the addresses (``{block}.attn.to_{name}``); ``pair.__name__`` by default.
        blocks : sequence of int, optional
            Block positions; every block by default.

        Returns
        -------
        list of str
            One address per block, one unit per head: the attention weight from each
            symbol to its target (0 where there is none). Score it with ``diffmeans``
            against ``dni_lab.backend.hf.attention.has_target(pair)``.
        """
        return attention.register(self, pair, name, blocks)

    def attention_patterns(self) -> patterns.Patterns:
        """``attn.hook_pattern`` / ``hook_attn_scores``, read by ``dl.activations``."""
        return patterns.Patterns(self)

    def _head_dim_of(self, address: str) -> int | None:
        tap = self._taps.get(address)
        if tap is not None and tap.kind == "result":  # heads x d_model units
            return getattr(getattr(self.module, "config", None), "hidden_size", None)
        if tap is not None and tap.kind is not None:  # rotated q/k; q/k norms' normalized
            address = tap.module
        per_head = address.endswith(hooks.PER_HEAD) or any(
            address == hooks.role_or_none(self.module, b, r)
            for b in self.positional_layers()
            for r in ("q", "k", "v", "q_norm", "k_norm")
        )
        return self._heads[1] if per_head else None

    def _probe_widths(self, sample: list[Any], device: torch.device) -> dict[str, int]:
        # a module the forward pass calls twice (a shared layer) must not stop it at its
        # first call: count calls during the probe pass, which runs every module
        calls: dict[str, int] = {}
        with contextlib.ExitStack() as stack:
            for a in self.layers:
                count = functools.partial(capture.count_call, calls, a)
                stack.callback(self._module(a).register_forward_hook(count).remove)
            widths = super()._probe_widths(sample, device)
        self._repeated = {a for a, n in calls.items() if n > 1}
        heads = getattr(getattr(self.module, "config", None), "num_attention_heads", None)
        widths.update({a: heads for a in self._attn if isinstance(heads, int)})
        # virtual addresses are no module's output: hook_z is the out projection's input,
        # heads × head_dim units, which is not hidden_size when head_dim is set apart
        # from it (Qwen3, Gemma); read the projection, or measure where it does not say
        found = {
            a: names.input_width(self._module(a)) if t.side == "input" and not t.kind else None
            for a, t in self._taps.items()
        }
        widths.update({a: w for a, w in found.items() if w is not None})
        unknown = sorted(a for a, w in found.items() if w is None)
        if unknown:
            with torch.inference_mode(), self.capture(unknown) as store:
                self.forward(to_device(self.encode(sample), device))
            widths.update({a: int(store[a].shape[-1]) for a in unknown})
        return widths

    @contextlib.contextmanager
    def capture(self, addresses: Sequence[str]) -> Iterator[dict[str, Any]]:
        """Hooks as in :class:`Model`; captured outputs come back in symbol order.

        Virtual addresses (:mod:`.hooks`) are read by a forward pre-hook on their
        module's input, or as a slice of its output. Once every address has fired,
        the forward pass stops (:meth:`forward` returns None): units in block ``k``
        run blocks ``<= k`` only, never the LM head. ``stop_early = False`` on the
        model turns that off; so does a module the probe pass saw called twice.
        """
        virtual = [a for a in addresses if a in self._taps]
        plain = [a for a in addresses if a not in self._taps]
        store = capture.SymbolStore(self)
        pending = set(addresses)
        if not self.stop_early or pending & self._repeated or not pending:
            pending = None  # a hook never stops the pass
        attn = [a for a in plain if a in self._attn]
        plain = [a for a in plain if a not in self._attn]
        with super().capture(plain) as raw, contextlib.ExitStack() as stack:
            capture.keep_taps(self.module, {a: self._taps[a] for a in virtual}, store, stack)
            if attn:  # only eager attention returns its weights
                stack.enter_context(attention.eager(self.module))
            for a in attn:
                keep = capture.keep_attention(store, a, self, self._attn[a][1])
                stack.callback(self._module(a).register_forward_hook(keep).remove)
            if pending is not None:  # after the keeping hooks: on one module they run in order
                capture.stop_after(
                    {a: (self._module(a), a in self._taps and self._taps[a].side == "input")
                     for a in addresses},
                    pending,
                    stack,
                )  # fmt: skip
            store.raw = raw
            yield store
