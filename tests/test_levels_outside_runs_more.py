"""Levels decided once in the probe, steering and behaviors paths (issue 49).

``tests/test_levels_outside_runs.py`` switched ``dl.verify`` and feature summaries to
:func:`~dni_lab.backend.engine.levels.decided_for_model`; here the other readers of a
hypothesis outside ``dl.inspect`` are held to the same rule on the same tiny GPT-2 over a
byte-level BPE trained on the spot: a character-level hypothesis with no declaration, over
a corpus whose first record is ``'9'`` (one character, word and token: evidence of
nothing), gives what ``level="char"`` declared gives, and a corpus where no record
separates the levels is asked up front.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.extraction.behaviors import BehaviorSource
from dni_lab.probe.steering import hypothesis_rates

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from test_levels_outside_runs import (  # noqa: E402
    ALL_ONE_TOKEN,
    DATA,
    declared,
    tiny_gpt2,
    undeclared,
)

LAYER = "transformer.h.0"


@pytest.fixture(scope="module")
def model() -> dl.Model:
    return tiny_gpt2()


def test_the_corpus_starts_with_a_record_that_separates_nothing(model):
    assert DATA[0] == "9" and model.symbols("9") == 1
    assert model.symbols("12 34 ab") not in (len("12 34 ab"), 3)


def test_probe_fit_reads_the_decided_level(model):
    kw = {"folds": None, "device": "cpu", "block_size": 4}
    got = dl.Probe(LAYER, **kw).fit(model, DATA, undeclared())
    want = dl.Probe(LAYER, **kw).fit(model, DATA, declared())
    assert np.isfinite(np.asarray(got.coef_)).all()
    np.testing.assert_allclose(np.asarray(got.coef_), np.asarray(want.coef_), atol=1e-9)
    np.testing.assert_allclose(got.mean_, want.mean_, atol=1e-9)


def test_probe_fit_asks_up_front_when_no_record_separates_the_levels(model):
    with pytest.raises(dl.LevelError, match="level='char'"):
        dl.Probe(LAYER, folds=None, device="cpu").fit(model, ALL_ONE_TOKEN, undeclared())


def test_steering_vector_reads_the_decided_level(model):
    got = dl.steering_vector(model, DATA, undeclared(), LAYER, device="cpu", block_size=4)
    want = dl.steering_vector(model, DATA, declared(), LAYER, device="cpu", block_size=4)
    assert got.shape == (16,) and torch.isfinite(got).all() and got.norm() > 0
    torch.testing.assert_close(got, want)


def test_steering_rates_decide_once_over_the_texts(model):
    got = hypothesis_rates(model, undeclared(), DATA)
    want = hypothesis_rates(model, declared(), DATA)
    assert np.isfinite(got[0])  # the '9' text is read at the decided level, not refused
    np.testing.assert_allclose(got, want, equal_nan=True)


def test_behavior_signal_reads_the_decided_level(model):
    got = BehaviorSource({"tiny": model}, DATA, [undeclared()], device="cpu")
    want = BehaviorSource({"tiny": model}, DATA, [declared()], device="cpu")
    (hid,) = got.signals
    idx = [0, 4]  # only '9' records: per record these would say nothing
    a = got.signal(hid, idx, got.model("tiny"))
    b = want.signal(hid, idx, want.model("tiny"))
    assert len(a) == 2 and all(x.shape == (1,) for x in a)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    # decided once per hypothesis and model, then kept
    clone = got.model("tiny")
    first = got._decided(hid, got.signals[hid][0], clone)
    assert got._decided(hid, got.signals[hid][0], clone) is first
