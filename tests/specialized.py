"""The specialized-units parentheses LSTMs (DeepBase §6.1) for the verification and example tests.

Trained once per test process (quick: seconds) into a private model store, set
through ``DNI_LAB_MODELS`` as users set it, and shared by the test modules that
import this one. Units S are trained to follow a hypothesis, so S is the ground
truth the checks must single out:

* ``"paren"`` (is the symbol a parenthesis), DeepBase's Figure 4a, for perturbation;
* ``"depth"`` (nesting depth), for ablation on the value of the nesting digits as
  in the DNI paper: 64 units (the paper's model has 128), so that a random set of
  4 units is a small part of the network, as a random 5 of 128 is in the paper;
  12 epochs, so that the model predicts the digits' values (>= 0.9 accuracy).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile

import pytest
import torch

import dni_lab as dl
from hypotheses.workloads import parens

# Epochs are pinned, so a change of the workload's quick default does not change these tests.
_CONFIG = {"paren": {"hidden": 16, "epochs": 10}, "depth": {"hidden": 64, "epochs": 12}}
_STORE = tempfile.TemporaryDirectory(prefix="dni-models-")


@functools.cache
def specialized(hyp: str = "paren") -> tuple[dl.Model, list[int], dict]:
    """``(model, S, meta)`` of a quick specialized LSTM (|S| = 4, w = 0.5)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DNI_LAB_MODELS", _STORE.name)
        module, encode, meta = parens.load_specialized(
            4, 0.5, hyp, quick=True, seed=0, **_CONFIG[hyp]
        )
    return dl.Model(module, encode=encode, name=f"parens-{hyp}"), meta["specialized_units"], meta


def hypothesis(hyp: str = "paren"):
    """The signal S was trained on, as a named continuous hypothesis."""
    return dl.hypothesis(parens.HYPOTHESES[hyp], name=hyp, kind="continuous")


def records(n: int, seed: int, unique: bool = False) -> list[str]:
    recs = parens.records(n, seed=seed)
    return list(dict.fromkeys(recs)) if unique else recs


@contextlib.contextmanager
def one_thread():
    """One intra-op thread: on a shared 2-core machine, two threads contend and crawl."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)
