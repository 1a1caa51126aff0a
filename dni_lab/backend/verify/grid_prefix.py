"""Patched passes that start at the patched token: the target's keys and values before it.

In a causal language model a patch at token ``t`` changes nothing before ``t``: every
layer's keys and values of tokens ``0..t-1`` are the target run's. So a patched copy
needs only its tokens from ``t`` on, attending to the target run's cached keys and
values of the others (what generation with a key/value cache does). TransformerLens'
helpers run every token of every copy; this is where a layer × position grid saves most.

:class:`Prefix` holds the target run's key/value cache and hands each patched pass a
fresh one cut at its first token, repeated once per copy. It is used only where it is
shown to hold: a decoder-only model whose cache is Hugging Face's dynamic one, and a
first check per grid that an unpatched pass from the middle reproduces the target run's
output there (else every pass runs from token 0, as before).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..extraction.models import _first_tensor

#: how far a pass started mid-record may differ from the full one and still be trusted
_CHECK_TOL = 1e-4


def _cache_kwarg(module: torch.nn.Module) -> str | None:
    """The keyword a module's ``forward`` takes its key/value cache by, if any."""
    try:
        params = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):  # a forward without a signature
        return None
    if "use_cache" not in params:
        return None
    return next((k for k in ("cache", "past_key_values") if k in params), None)


def causal_lm(module: torch.nn.Module) -> bool:
    """A decoder-only model that generates: what it computes at token t reads only 0..t."""
    cfg = getattr(module, "config", None)
    if cfg is None or getattr(cfg, "is_encoder_decoder", False):
        return False
    gen = getattr(module, "can_generate", None)
    return bool(callable(gen) and gen()) and _cache_kwarg(module) is not None


class Prefix:
    """The target run's keys and values of a batch, cut at a token for a patched pass.

    Parameters
    ----------
    cache : transformers.DynamicCache
        The target run's cache (``use_cache=True``), one layer per block; this object
        is reused for every pass (its layers are set afresh before each).
    kwarg : str
        The keyword the model's ``forward`` takes it by (``cache`` or ``past_key_values``).
    """

    def __init__(self, cache: Any, kwarg: str) -> None:
        self.cache, self.kwarg = cache, kwarg
        self.kv = [(layer.keys, layer.values) for layer in cache.layers]
        self.checked_ = False

    @classmethod
    def of(cls, module: torch.nn.Module, output: Any) -> Prefix | None:
        """The prefix of a target run's ``output``, or None where passes must start at 0."""
        kwarg = _cache_kwarg(module)
        if kwarg is None or not causal_lm(module):
            return None
        cache = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
        layers = getattr(cache, "layers", None)
        # only the plain dynamic cache: a sliding or quantized one holds other than all tokens
        if not layers or any(type(x).__name__ != "DynamicLayer" for x in layers):
            return None
        if any(not isinstance(getattr(x, "keys", None), torch.Tensor) for x in layers):
            return None
        return cls(cache, kwarg)

    def inputs(self, inputs: dict, start: int, copies: int) -> dict:
        """``inputs`` (``copies`` × the batch) from token ``start`` on, with the cache of
        the tokens before it; the attention mask stays whole (it spans cache and input)."""
        for layer, (k, v) in zip(self.cache.layers, self.kv, strict=True):
            layer.keys = k[..., :start, :].repeat(copies, 1, 1, 1)
            layer.values = v[..., :start, :].repeat(copies, 1, 1, 1)
        n = inputs["input_ids"].shape[1]
        out = {
            key: t[:, start:] if key != "attention_mask" and t.dim() >= 2 and t.shape[1] == n
            else t
            for key, t in inputs.items() if isinstance(t, torch.Tensor)
        }  # fmt: skip
        out[self.kwarg], out["use_cache"] = self.cache, True
        return out

    def check(self, module: torch.nn.Module, inputs: dict, output: torch.Tensor) -> bool:
        """Whether a pass from the middle of the batch gives the target's ``output`` there."""
        n = inputs["input_ids"].shape[1]
        start = n // 2
        if start < 1:
            return False
        try:
            got = module(**self.inputs(inputs, start, 1))
        except Exception:  # a model whose cache path differs: every pass from token 0
            return False
        got = _first_tensor(got)
        want = output[:, start:]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return False
        scale = max(1.0, float(want.abs().max()))
        self.checked_ = bool((got - want).abs().max() <= _CHECK_TOL * scale)
        return self.checked_
