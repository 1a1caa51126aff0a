"""The standard SAE: ``z = ReLU((x - b_dec) W_enc + b_enc)`` (SAELens ``standard``)."""

from __future__ import annotations

from .base import FeatureSet


class StandardSAE(FeatureSet):
    """ReLU latents; see :class:`~dni_lab.features.base.FeatureSet` for the parameters."""

    architecture = "standard"
