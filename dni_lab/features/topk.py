"""The TopK SAE (Gao et al. 2024; SAELens ``topk``): the ``k`` largest pre-activations.

``pre = x W_enc + b_enc``, scaled by the decoder rows' norms first when
``rescale_acts_by_decoder_norm`` (the SAE was trained as if its decoder were
normalized; decode divides them out again). The ``k`` largest entries of each
row keep ``ReLU(value)``, the rest are zero.
"""

from __future__ import annotations

from typing import Any

import torch

from ..backend.errors import DNIError
from .base import FeatureSet


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Zeros but for each row's ``k`` largest entries, which keep ``ReLU(value)``."""
    values, indices = torch.topk(pre, k=k, dim=-1, sorted=False)
    return torch.zeros_like(pre).scatter_(-1, indices, values.relu())


class TopKSAE(FeatureSet):
    """TopK latents.

    Parameters
    ----------
    k : int
        Latents kept per input.
    rescale_acts_by_decoder_norm : bool
        Select and decode as if the decoder rows had unit norm.
    **kwargs
        As :class:`~dni_lab.features.base.FeatureSet`.
    """

    architecture = "topk"
    sparse = True

    def __init__(self, *args: Any, k: int, rescale_acts_by_decoder_norm: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0 < int(k) <= self.d_sae:
            raise DNIError(f"TopK feature set {self.name!r}: k={k} must be in 1..{self.d_sae}.")
        self.k = int(k)
        self.rescale_acts_by_decoder_norm = bool(rescale_acts_by_decoder_norm)

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.rescale_acts_by_decoder_norm:
            pre = pre * self.W_dec.norm(dim=-1)
        return topk_relu(pre, self.k)

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` (value, index) pairs of each row, without the dense latents."""
        if x.shape[-1] != self.d_in:
            return super().encode_sparse(x)  # its error names the width
        pre = self.hidden_pre(self.process_in(x))
        if self.rescale_acts_by_decoder_norm:
            pre = pre * self.W_dec.norm(dim=-1)
        values, indices = torch.topk(pre, k=self.k, dim=-1, sorted=False)
        return values.relu(), indices

    def decode(self, z: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        if self.rescale_acts_by_decoder_norm:
            z = z.to(self.dtype) / self.W_dec.norm(dim=-1)
        return super().decode(z, x)

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "k": self.k,
            "rescale_acts_by_decoder_norm": self.rescale_acts_by_decoder_norm,
        }
