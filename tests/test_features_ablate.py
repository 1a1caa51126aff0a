"""Verifying latents: ablation against density-matched random latents, permutation q-values
and the untrained baseline with a feature set as the units."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from feature_sets import identity_set

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.extraction.extract import symbol_mask
from dni_lab.features.ablate import edited, matched_sets


@pytest.fixture
def lm():
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="m")


def test_editing_a_latent_changes_only_its_direction(lm):
    recs = random_records(6, seed=1)
    x = encode_chars(recs)
    mod = lm.module
    with torch.no_grad():
        h = mod.lstm(mod.embed(x))[0]
        want = mod.head(torch.cat([h[..., :3], torch.zeros_like(h[..., 3:4]), h[..., 4:]], -1))
        fs = identity_set(12, "lstm")
        with edited(lm, fs, [3, 15], 0.0):
            got = lm.forward(x)
        torch.testing.assert_close(got, want)
        with edited(lm, fs, [3], 1.0):  # scale 1 changes nothing, whatever the error term
            torch.testing.assert_close(lm.forward(x), mod(x))
        lossy = F.TopKSAE(12, 16, "lstm", name="lossy", k=2)
        for p in lossy.parameters():
            p.copy_(torch.randn(p.shape))
        with edited(lm, lossy, [0, 1, 2], 1.0):  # the error term keeps the output exact
            torch.testing.assert_close(lm.forward(x), mod(x), atol=1e-5, rtol=1e-5)


def test_random_sets_match_the_firing_rates():
    rates = np.r_[np.full(10, 0.5), np.geomspace(1e-4, 1e-1, 90), np.zeros(5)]
    sets = matched_sets(rates, [12, 50], 20, np.random.default_rng(0), pool=5)
    for s in sets:
        assert 12 not in s and 50 not in s and (rates[s] > 0).all() and len(set(s)) == 2
        assert abs(np.log(rates[s[0]] / rates[12])) < abs(np.log(rates[95] / rates[12]))
        assert abs(np.log(rates[s[1]] / rates[50])) < 0.5


def test_ablate_reports_top_against_random_latents(lm):
    recs = random_records(160, seed=2)
    trained = F.train_sae(lm, recs, "lstm", d_sae=48, k=4, verbose=False)
    fs = trained.features
    rates = F.firing_rates(lm, fs, recs)
    top = [int(np.argmax(rates))]
    def ev(records, out, device):  # the head's first logit, over the real symbols
        mask = symbol_mask(lm, records, device)
        return float(out[..., 0][mask[:, : out.shape[1]]].sum()), int(mask.sum())

    v = F.ablate(lm, fs, top, recs[:80], evaluate=ev, n_random=6)
    assert v.frame.height == 7 and v.frame["set"].to_list()[0] == "top"
    assert v.summary["feature_set"] == "lstm:topk-48-k4"
    per_k = v.summary["per_k"]
    assert 0 < per_k["p_value"][0] <= 1 and per_k["k"][0] == 1
    assert v.frame["drop"][0] == pytest.approx(v.summary["baseline"] - v.frame["score"][0])
    with pytest.raises(dl.DNIError, match="latents 0..47"):
        F.ablate(lm, fs, [48], recs[:10], evaluate=ev)


def test_permutation_q_values_and_untrained_baseline_take_a_feature_set(lm, hyps):
    recs = random_records(120, seed=3)
    fs = identity_set(12, "lstm")
    p = dl.verify.permutation_test(lm, hyps, recs, units=[fs], n_permutations=50)
    assert set(p["layer"]) == {"lstm:identity"} and p["q_value"].is_not_null().sum() > 0
    base = dl.verify.untrained_baseline(lm, hyps, recs, units=[fs])
    assert "above_untrained" in base.frame.columns and set(base.frame["layer"]) == {"lstm:identity"}
