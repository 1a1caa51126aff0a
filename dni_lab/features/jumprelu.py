"""The JumpReLU SAE (Rajamanoharan et al. 2024; SAELens ``jumprelu``).

``z = ReLU(pre) · [pre > threshold]`` with ``pre = x W_enc + b_enc``: a latent is
either off or above its own threshold, so most latents are exactly zero.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .base import FeatureSet


class JumpReLUSAE(FeatureSet):
    """JumpReLU latents, one learned ``threshold`` per latent."""

    architecture = "jumprelu"
    sparse = True
    extra: ClassVar[dict[str, tuple[str, ...]]] = {"threshold": ("d_sae",)}

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return torch.relu(pre) * (pre > self.threshold).to(pre.dtype)
