"""Feature sets the feature tests share: a lossless one and random ones."""

from __future__ import annotations

import torch

from dni_lab import features as F


def identity_set(d: int, hook: str) -> F.StandardSAE:
    """relu(x) - relu(-x) = x: latent j is x_j's positive part, d + j its negative part."""
    fs = F.StandardSAE(d, 2 * d, hook, name="identity")
    eye = torch.eye(d)
    with torch.no_grad():
        fs.W_enc.copy_(torch.cat([eye, -eye], 1))
        fs.W_dec.copy_(torch.cat([eye, -eye], 0))
    return fs
