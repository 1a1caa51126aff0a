"""Architecture names (SAELens' ``architecture`` values) → feature-set classes."""

from __future__ import annotations

from typing import Any

import torch

from ..backend.errors import DNIError
from .base import FeatureSet
from .directions import Directions
from .gated import GatedSAE
from .jumprelu import JumpReLUSAE
from .standard import StandardSAE
from .topk import TopKSAE
from .transcoder import JumpReLUSkipTranscoder, JumpReLUTranscoder, SkipTranscoder, Transcoder

ARCHITECTURES: dict[str, type[FeatureSet]] = {
    cls.architecture: cls
    for cls in (
        StandardSAE,
        GatedSAE,
        TopKSAE,
        JumpReLUSAE,
        Transcoder,
        SkipTranscoder,
        JumpReLUTranscoder,
        JumpReLUSkipTranscoder,
        Directions,
    )
}


def feature_class(architecture: str, source: str) -> type[FeatureSet]:
    """The class of ``architecture``, or an error naming ``source`` and the known ones."""
    cls = ARCHITECTURES.get(architecture)
    if cls is None:
        raise DNIError(
            f"{source}: unknown feature-set architecture {architecture!r}; dni_lab reads "
            f"{sorted(ARCHITECTURES)}."
        )
    return cls


def with_weights(
    fs: FeatureSet, weights: dict[str, torch.Tensor], source: str, cast: bool = False
) -> FeatureSet:
    """Fill ``fs`` from ``weights`` (SAELens names), checking names, shapes and dtypes.

    ``cast`` converts tensors of another dtype to the set's; otherwise such a tensor
    is an error, since the file and its config disagree about what was saved.
    """
    own = fs.state_dict()
    missing = sorted(set(own) - set(weights))
    if missing:
        raise DNIError(
            f"{source} lacks the weights {missing} that a {fs.architecture!r} feature set needs "
            f"(it holds {sorted(weights)}); is the file complete and the architecture right?"
        )
    state: dict[str, Any] = {}
    for key, ref in own.items():
        t = weights[key]
        if tuple(t.shape) != tuple(ref.shape):
            raise DNIError(
                f"{source}: {key} has shape {tuple(t.shape)}, the config implies "
                f"{tuple(ref.shape)} (d_in={fs.d_in}, d_sae={fs.d_sae}, d_out={fs.d_out})."
            )
        if t.dtype != ref.dtype and not cast:
            stored, said = (str(d).removeprefix("torch.") for d in (t.dtype, ref.dtype))
            raise DNIError(
                f"{source}: {key} is stored as {stored} but the config says dtype {said}; "
                f"pass dtype='{stored}' (or the one you want) to dl.features.load to cast."
            )
        state[key] = t.to(ref.dtype)
    fs.load_state_dict(state)
    return fs
