"""The gated SAE (Rajamanoharan et al. 2024; SAELens ``gated``).

A gate decides which latents fire, ``x W_enc + b_gate > 0``; a magnitude path
that shares ``W_enc`` rescaled per latent by ``exp(r_mag)`` says how much,
``ReLU(x (W_enc · exp(r_mag)) + b_mag)``. There is no ``b_enc``.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .base import FeatureSet


class GatedSAE(FeatureSet):
    """Gated latents: gate ``x W_enc + b_gate > 0`` times magnitude ``ReLU(...)``."""

    architecture = "gated"
    has_b_enc = False
    extra: ClassVar[dict[str, tuple[str, ...]]] = {
        "b_gate": ("d_sae",),
        "b_mag": ("d_sae",),
        "r_mag": ("d_sae",),
    }

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        active = (x @ self.W_enc + self.b_gate > 0).to(self.dtype)
        magnitude = torch.relu(x @ (self.W_enc * self.r_mag.exp()) + self.b_mag)
        return active * magnitude
