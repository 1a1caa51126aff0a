"""Module kinds whose output layout is fixed by what the module computes.

One rule per kind: given the module and the number of axes of its output, the
layout, or None when the kind does not decide it. A ``Linear`` acts on the last
axis, so its units are there whatever the other axes are; a ``Conv1d`` writes
channels on axis 1; a recurrent module's time axis follows ``batch_first``.
Adding a kind is one entry in :data:`RULES`.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

Rule = Callable[[nn.Module, int], "str | None"]


def _last_axis(_mod: nn.Module, ndim: int) -> str | None:
    return {1: "u", 2: "n u", 3: "n s u"}.get(ndim)


def _channels_1d(_mod: nn.Module, ndim: int) -> str | None:
    return {2: "n u", 3: "n u s"}.get(ndim)


def _channels_2d(_mod: nn.Module, ndim: int) -> str | None:
    return {4: "n u s s"}.get(ndim)


def _batch_first(first: bool, ndim: int) -> str | None:
    if ndim == 2:
        return "n u"
    if ndim == 3:
        return "n s u" if first else "s n u"
    return None


def _recurrent(mod: nn.Module, ndim: int) -> str | None:
    return _batch_first(bool(getattr(mod, "batch_first", False)), ndim)


def _attention(mod: nn.Module, ndim: int) -> str | None:
    return _batch_first(bool(getattr(mod, "batch_first", False)), ndim)


def _transformer_layer(mod: nn.Module, ndim: int) -> str | None:
    attn = getattr(mod, "self_attn", None)
    return _batch_first(bool(getattr(attn, "batch_first", False)), ndim)


def _transformer_stack(mod: nn.Module, ndim: int) -> str | None:
    layers = getattr(mod, "layers", None)
    if not layers:
        return None
    return _transformer_layer(layers[0], ndim)


def _vector(_mod: nn.Module, ndim: int) -> str | None:
    return "n u" if ndim == 2 else None


_LAST = (nn.Linear, nn.Bilinear, nn.Embedding, nn.LayerNorm, nn.EmbeddingBag)
if hasattr(nn, "RMSNorm"):
    _LAST += (nn.RMSNorm,)

#: Kinds whose units are the last axis whatever the others are.
UNITS_LAST = _LAST

#: (module types, rule), first match wins; subclasses match their base's rule.
RULES: list[tuple[tuple[type, ...], Rule]] = [
    (_LAST, _last_axis),
    (
        (nn.Conv1d, nn.ConvTranspose1d, nn.BatchNorm1d, nn.InstanceNorm1d, nn.MaxPool1d,
         nn.AvgPool1d, nn.AdaptiveAvgPool1d, nn.AdaptiveMaxPool1d, nn.LPPool1d),
        _channels_1d,
    ),
    (
        (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.InstanceNorm2d, nn.MaxPool2d,
         nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.LPPool2d, nn.Dropout2d,
         nn.Upsample, nn.PixelShuffle),
        _channels_2d,
    ),
    ((nn.RNNBase,), _recurrent),
    ((nn.MultiheadAttention,), _attention),
    ((nn.TransformerEncoderLayer, nn.TransformerDecoderLayer), _transformer_layer),
    ((nn.TransformerEncoder, nn.TransformerDecoder), _transformer_stack),
    ((nn.Flatten,), _vector),
]

#: Modules that act on each value alone: their output has their input's axes.
ELEMENTWISE: tuple[type, ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid, nn.Softplus,
    nn.Softsign, nn.Tanhshrink, nn.Threshold, nn.LogSigmoid, nn.Dropout, nn.AlphaDropout,
    nn.Identity,
)


def kind_layout(mod: nn.Module, ndim: int) -> str | None:
    """The layout a module's kind fixes for an output of ``ndim`` axes, if any."""
    for kinds, rule in RULES:
        if isinstance(mod, kinds):
            return rule(mod, ndim)
    return None


def readings(ndim: int) -> list[str]:
    """The plausible layouts of an output of ``ndim`` axes, for an error that lists them."""
    return {
        1: ["n"],
        2: ["n u", "f u"],
        3: ["n s u", "n u s", "s n u", "f u r (with reduce=)"],
        4: ["n u s s", "n s s u", "n s u u", "n u r s (with reduce=)"],
    }.get(ndim, ["n s u ... (one letter per axis)"])
