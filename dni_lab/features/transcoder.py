"""Transcoders (SAELens ``transcoder``, ``skip_transcoder``, ``jumprelu_transcoder``).

A transcoder encodes one hook's activation (``hook``, width ``d_in``) and
reconstructs another (``hook_out``, width ``d_out``): an MLP's input and output.
Its input is never shifted by ``b_dec`` (``b_dec`` lives in the output space), and
its reconstruction is not un-normalized. A skip transcoder adds ``x W_skipᵀ``
(``W_skip`` is ``(d_out, d_in)``) to the reconstruction.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..backend.errors import DNIError
from .base import FeatureSet
from .jumprelu import JumpReLUSAE


class Transcoder(FeatureSet):
    """ReLU transcoder from ``hook`` to ``hook_out``."""

    architecture = "transcoder"

    def __init__(self, *args, **kwargs) -> None:
        if kwargs.get("apply_b_dec_to_input"):
            raise DNIError(
                f"transcoder {kwargs.get('name') or self.architecture!r}: apply_b_dec_to_input is "
                "not defined for transcoders (b_dec lives in the output space); set it to False."
            )
        kwargs["apply_b_dec_to_input"] = False
        super().__init__(*args, **kwargs)

    def process_out(self, out: torch.Tensor) -> torch.Tensor:
        return out  # the output space was never normalized

    def decode(self, z: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        return z.to(self.dtype) @ self.W_dec + self.b_dec


def _skip_decode(self: Transcoder, z: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
    """The transcoder's reconstruction plus the skip path ``x W_skipᵀ``."""
    if x is None:
        raise DNIError(
            f"skip transcoder {self.name!r}: decode(z, x) needs the input x for its skip "
            "path; call forward(x) or pass x."
        )
    return Transcoder.decode(self, z) + x.to(self.dtype) @ self.W_skip.T


class SkipTranscoder(Transcoder):
    """ReLU transcoder plus a linear skip path ``x W_skipᵀ``."""

    architecture = "skip_transcoder"
    extra: ClassVar[dict[str, tuple[str, ...]]] = {"W_skip": ("d_out", "d_in")}
    decode = _skip_decode


class JumpReLUTranscoder(Transcoder):
    """JumpReLU transcoder: ``ReLU(pre) · [pre > threshold]``."""

    architecture = "jumprelu_transcoder"
    sparse = True
    extra: ClassVar[dict[str, tuple[str, ...]]] = {"threshold": ("d_sae",)}
    activate = JumpReLUSAE.activate


class JumpReLUSkipTranscoder(JumpReLUTranscoder):
    """JumpReLU transcoder plus the skip path."""

    architecture = "jumprelu_skip_transcoder"
    extra: ClassVar[dict[str, tuple[str, ...]]] = {
        "threshold": ("d_sae",),
        "W_skip": ("d_out", "d_in"),
    }
    decode = _skip_decode
