"""Run by sae-lens' side environment (``make saelens-env``), not by dni_lab's: synthetic
activations with planted features from ``sae_lens.synthetic`` for ``bench_scorecard.py``.

Usage: ``<side python> benchmarks/scorecard_side.py OUT.safetensors N_FEATURES D_HIDDEN N_SAMPLES``

Writes ``hidden`` (samples × hidden: what a model layer would hold), ``features`` (samples
× features: the true feature activations) and ``dictionary`` (features × hidden: the true
feature directions), all float32.
"""

import sys

import torch
from sae_lens.synthetic import ActivationGenerator, FeatureDictionary
from safetensors.torch import save_file

out, n_features, d_hidden, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
# firing probabilities from common to rare, as in SAELens' synthetic benchmarks
probs = torch.linspace(0.08, 0.01, n_features)
gen = ActivationGenerator(n_features, firing_probabilities=probs, std_firing_magnitudes=0.2,
                          mean_firing_magnitudes=1.0)
fd = FeatureDictionary(n_features, d_hidden, seed=0)
with torch.no_grad():
    feats = gen.sample(n)
    hidden = fd(feats)
save_file({"hidden": hidden.float().contiguous(), "features": feats.float().contiguous(),
           "dictionary": fd.feature_vectors.detach().float().contiguous()}, out)
print(f"sae_lens.synthetic: {n_features} features in {d_hidden} dims, {n} samples")
