"""Levels decided once outside runs, and a one-character record in a token model's corpus.

Issue 47 item 6: a corpus with ``'9'`` (one character, one word, one token) stopped a
token-level run, and code that reads hypotheses outside ``dl.inspect`` (``dl.verify``,
``dl.features.summarize``) still decided each record's level from its own counts. Here a
tiny GPT-2 over a byte-level BPE trained on the spot (nothing downloads) reads a
character-level hypothesis with no declaration, and every path must give what the
same hypothesis gives with ``level="char"`` declared; a corpus where no record separates
the levels is asked up front with the ``level=`` that settles it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.errors import HypothesisError
from dni_lab.backend.hypothesis.hypotheses import as_family, for_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from feature_sets import identity_set  # noqa: E402

from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

# '9' first: a per-record decision stops on it before any separating record is read
DATA = ["9", "12 34 ab", "the cat 7", "hello world", "9", "a 1 b 22", "dog 5", "9 9 x"] * 2
ALL_ONE_TOKEN = ["9", "7", "a", "9", "x", "5"]  # one character, word and token each
UNITS = [("transformer.h.0", "*")]


@pytest.fixture(scope="module")
def model() -> dl.Model:
    return tiny_gpt2()


def tiny_gpt2() -> dl.Model:
    """A one-block GPT-2 over a byte-level BPE trained here (no hub)."""
    train = ["the cat sat on the mat", "12 34 56", "hello world", "a dog ran 7 9"]
    tok = bpe(train * 20, vocab_size=262)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=16, n_layer=1,
                                  n_head=2, bos_token_id=None, eos_token_id=None)  # fmt: skip
    return dl.Model.from_hf(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="tiny")


def digits(r: str) -> list[float]:
    return [float(c.isdigit()) for c in r]


def undeclared() -> dl.Hypothesis:
    return dl.hypothesis(digits, name="digit", kind="binary")


def declared() -> dl.Hypothesis:
    return dl.hypothesis(digits, name="digit", kind="binary", level="char")


def test_the_records_have_the_counts_the_tests_rely_on(model):
    assert model.symbols("9") == 1 and all(model.symbols(r) == 1 for r in ALL_ONE_TOKEN)
    assert model.symbols("12 34 ab") not in (len("12 34 ab"), 3)  # separates char and word
    # the old per-record reading: on '9' alone the level is a guess, so it raised
    (aligned,) = for_model([as_family(undeclared())], model)
    with pytest.raises(HypothesisError, match="equal counts do not say which"):
        aligned.evaluate("9")


def test_inspect_runs_to_the_end_with_the_values_of_a_declared_level(model):
    kw = {"data": DATA, "units": UNITS, "eps": None, "cache": False, "block_size": 4}
    got = dl.inspect(model, [undeclared()], **kw)
    want = dl.inspect(model, [declared()], **kw)
    assert dl.provenance(got)["records_read"] == len(DATA)
    assert dl.provenance(got)["levels"][0]["level"] == "char"
    a, b = got["unit_score"].to_numpy(), want["unit_score"].to_numpy()
    assert np.isfinite(a).sum() > 0
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_feature_set_over_a_corpus_with_a_one_character_record(model):
    fs = identity_set(16, "transformer.h.0")  # latents: the hook's positive and negative parts
    kw = {"data": DATA, "units": [fs], "eps": None, "cache": False, "block_size": 4}
    got = dl.inspect(model, [undeclared()], ["corr"], **kw)
    want = dl.inspect(model, [declared()], ["corr"], **kw)
    assert got.height == 32 and dl.provenance(got)["records_read"] == len(DATA)
    np.testing.assert_allclose(got["unit_score"].to_numpy(), want["unit_score"].to_numpy(),
                               atol=1e-6)  # fmt: skip


def test_permutation_test_decides_the_level_once(model):
    kw = {"units": UNITS, "n_permutations": 19, "unique": False, "device": "cpu"}
    got = dl.verify.permutation_test(model, [undeclared()], DATA, **kw)
    want = dl.verify.permutation_test(model, [declared()], DATA, **kw)
    for col in ("unit_score", "p_value"):
        np.testing.assert_allclose(got[col].to_numpy(), want[col].to_numpy(), atol=1e-9)


def test_control_task_decides_the_level_once(model):
    got = dl.verify.control_task(undeclared(), DATA, seed=1, model=model)
    want = dl.verify.control_task(declared(), DATA, seed=1, model=model)
    assert got.table == want.table and got.fallback == want.fallback


def test_oracle_decides_the_level_once(model):
    kw = {"ks": [1], "n_random": 2, "device": "cpu"}
    got = dl.verify.oracle(model, DATA, "transformer.h.0", [0, 1], undeclared(), **kw)
    want = dl.verify.oracle(model, DATA, "transformer.h.0", [0, 1], declared(), **kw)
    assert got.frame.equals(want.frame)


def test_summary_examples_read_the_decided_level(model):
    fs = identity_set(16, "transformer.h.0")
    got = F.summarize(model, fs, 3, DATA, hypothesis=undeclared(), n_bins=2, per_bin=8)
    want = F.summarize(model, fs, 3, DATA, hypothesis=declared(), n_bins=2, per_bin=8)
    assert got.examples.height > 0 and got.examples.equals(want.examples)
    assert "9" in got.examples["symbol"].to_list() or got.examples["record"].is_in([0, 4]).any()


def test_a_corpus_of_one_token_records_is_asked_up_front(model):
    with pytest.raises(dl.LevelError, match=r"level='char' or level='word' or level='token'"):
        dl.verify.permutation_test(model, [undeclared()], ALL_ONE_TOKEN, units=UNITS,
                                   n_permutations=9, unique=False, device="cpu")  # fmt: skip
    with pytest.raises(dl.LevelError, match="Declare it"):
        dl.verify.control_task(undeclared(), ALL_ONE_TOKEN, model=model)
    # the one-line fix: declared, the same corpus runs
    frame = dl.verify.permutation_test(model, [declared()], ALL_ONE_TOKEN, units=UNITS,
                                       n_permutations=9, unique=False, device="cpu")  # fmt: skip
    assert frame.height == 16
