"""Learned features as units: SAE latents and transcoders, loaded, trained and scored.

>>> sae = dl.features.load("saes/resid_1")                    # doctest: +SKIP
>>> frame = dl.inspect(model, hyps, ["corr"], data, units=[sae])  # doctest: +SKIP

A feature set attaches to its model's hook: the extractor reads the hook's
activation, the set encodes it once per block, and every measure scores its
latents as units of the layer ``"{hook}:{name}"``.
"""

from __future__ import annotations

from .ablate import ablate, firing_rates
from .architectures import ARCHITECTURES
from .base import FeatureSet
from .dashboard import dashboard
from .directions import Directions, from_probe, pca
from .explanation_grammar import Compiled, compile_explanation
from .explanation_scoring import score_explanations
from .explanations import read_explanations
from .formats.saelens import save
from .gated import GatedSAE
from .jumprelu import JumpReLUSAE
from .loading import load
from .logit_lens import LogitLens, logit_lens
from .quality import Quality, evaluate
from .standard import StandardSAE
from .summary import LatentSummary, summarize
from .topk import TopKSAE
from .train import TrainedSAE, train_sae
from .transcoder import JumpReLUSkipTranscoder, JumpReLUTranscoder, SkipTranscoder, Transcoder

__all__ = [
    "ARCHITECTURES",
    "Compiled",
    "Directions",
    "FeatureSet",
    "GatedSAE",
    "JumpReLUSAE",
    "JumpReLUSkipTranscoder",
    "JumpReLUTranscoder",
    "LatentSummary",
    "LogitLens",
    "Quality",
    "SkipTranscoder",
    "StandardSAE",
    "TopKSAE",
    "TrainedSAE",
    "Transcoder",
    "ablate",
    "compile_explanation",
    "dashboard",
    "evaluate",
    "firing_rates",
    "from_probe",
    "load",
    "logit_lens",
    "pca",
    "read_explanations",
    "save",
    "score_explanations",
    "summarize",
    "train_sae",
]
