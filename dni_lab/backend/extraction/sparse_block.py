"""A block of unit behaviors that are mostly zero, kept as its nonzeros.

A TopK or JumpReLU feature set gives each symbol a few active latents out of
thousands. :class:`SparseBlock` holds, per symbol, the ``k`` (largest count in the
block) latent indices and values, zeros where fewer fired; measures that know it
(corr, diffmeans: ``update_sparse``) fold it with sparse × dense products, the
others read :meth:`SparseBlock.dense`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SparseBlock:
    """Behaviors ``(R, T, width)`` stored as ``k`` (index, value) pairs per symbol.

    Parameters
    ----------
    values : torch.Tensor
        ``(R, T, k)`` float values; a pair of value 0 contributes nothing.
    indices : torch.Tensor
        ``(R, T, k)`` int64 unit indices in ``0..width-1``, distinct within a symbol
        (a unit appears at most once per symbol, as ``torch.topk`` gives them).
    width : int
        Units in the block.
    """

    values: torch.Tensor
    indices: torch.Tensor
    width: int

    @property
    def shape(self) -> tuple[int, int, int]:
        R, T, _ = self.values.shape
        return (R, T, self.width)

    @property
    def device(self) -> torch.device:
        return self.values.device

    def dense(self) -> torch.Tensor:
        """The block as an ordinary ``(R, T, width)`` float32 tensor."""
        out = torch.zeros(self.shape, dtype=torch.float32, device=self.values.device)
        return out.scatter_add_(-1, self.indices, self.values.float())

    def masked(self, mask: torch.Tensor) -> SparseBlock:
        """Values zeroed at symbols outside ``mask`` ``(R, T)``."""
        kept = self.values * mask[..., None].to(self.values.dtype)
        return SparseBlock(kept, self.indices, self.width)
