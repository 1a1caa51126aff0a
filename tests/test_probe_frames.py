"""``Probe.from_frame``: a probe from a ``logreg`` inspection's rows, through
``dl.features.from_probe``, with its intercept and threshold fitted on records."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records
from scipy.special import expit

import dni_lab as dl
from dni_lab.backend.measures.logreg import LogReg


@pytest.fixture(scope="module")
def lm() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture(scope="module")
def records() -> list[str]:
    return random_records(200)


@pytest.fixture(scope="module")
def frame(lm, records) -> pl.DataFrame:
    return dl.inspect(lm, [paren], [LogReg(unit_score="coef")], records,
                      units=[("lstm", "*")], eps=None)  # fmt: skip


def test_the_frames_probe_is_its_direction_plus_a_fitted_intercept(lm, records, frame):
    probe = dl.Probe.from_frame(frame, lm, records, paren)
    dirs = dl.features.from_probe(frame, lm, records)
    cache = dl.activations(lm, records, [dirs])
    latent = np.concatenate([cache.record(i, dirs.address)[:, 0].numpy()
                             for i in range(len(records))])  # fmt: skip
    z = probe.decision_function(lm, records)
    # the same direction (float32 latents against float64 logits), shifted by the intercept
    np.testing.assert_allclose(z - probe.intercept_[0], latent, atol=1e-4)
    # the intercept is the one the probe's slopes want on these records: zero gradient
    y = np.concatenate([[c in "()" for c in r] for r in records])
    assert abs(float((expit(z) - y).mean())) < 1e-9
    assert probe.train_auroc_ > 0.85 and probe.score(lm, records, paren) == probe.train_auroc_
    assert probe.training_["source"] == "logreg frame"
    assert probe.penalty == "l1" and 0 < probe.threshold_ < 1


def test_it_needs_the_hypothesis_and_one_of_them(lm, records, frame):
    with pytest.raises(dl.DNIError, match="slopes, not its intercept"):
        dl.Probe.from_frame(frame, lm, records)
    with pytest.raises(dl.DNIError, match="no logreg rows of 'other'"):
        dl.Probe.from_frame(frame, lm, records, paren, hid="other")
