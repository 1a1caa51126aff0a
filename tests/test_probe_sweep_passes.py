"""Probe.sweep reads every layer in one pass: the same probes and AUROCs as fitting
``Probe(layer)`` layer by layer (an LSTM and a tiny GPT-2), from one forward pass per block
of records for all layers (and one more per block on the untrained copy)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from conftest import paren, random_records
from test_probe_fit import planted_model

import dni_lab as dl
from dni_lab.probe import metrics
from dni_lab.probe.sweep import COLUMNS, _split

NULLS = {"n_controls": 2, "n_directions": 3, "seed": 1}


def per_layer(model, records, hypothesis, layers, untrained=None, labels=None, n_boot=50,
              **params):  # fmt: skip
    """The sweep as it was: ``Probe(layer).fit`` per layer, each reading its own layer (and
    its nulls reading it again), one frame row per layer."""
    train, held, train_labels, held_labels = _split(list(records), labels, 4)
    probes, rows = {}, []
    for depth, layer in enumerate(layers):
        p = dl.Probe(layer, **{"folds": None, **params}).fit(
            model, train, hypothesis, labels=train_labels
        )
        z, r = p._read(model, held, False, hypothesis, held_labels)
        at = ~np.isnan(r.y)
        z, y, groups = z[at], r.y[at], r.record[at]
        auc, lo, hi, _ = metrics.bootstrap(
            lambda w, z=z, y=y: metrics.auroc(z, y, w), groups, n_boot, NULLS["seed"], 0.95
        )
        nulls = p.nulls(model, held, hypothesis, labels=held_labels, train=train,
                        train_labels=train_labels, untrained=untrained, **NULLS)  # fmt: skip
        got = {x["null"]: x for x in nulls.iter_rows(named=True)}
        rows.append({
            "layer": layer, "depth": depth, "n_units": int(p.coef_.shape[1]),
            "auroc": auc, "lo": lo, "hi": hi, "train_auroc": p.train_auroc_,
            "control_auroc": got["control_task"]["auroc"],
            "selectivity": auc - got["control_task"]["auroc"],
            "random_auroc": got["random_direction"]["auroc"],
            "random_max": got["random_direction"]["hi"],
            "untrained_auroc": got.get("untrained_model", {}).get("auroc"),
        })  # fmt: skip
        probes[layer] = p
    return probes, pl.DataFrame(rows, schema=COLUMNS)


def assert_same(sw, probes, frame):
    assert list(sw.probes) == list(probes)
    for layer, p in probes.items():
        q = sw.probes[layer]
        for k in ("coef_", "intercept_", "mean_", "scale_", "units_"):
            np.testing.assert_allclose(getattr(q, k), getattr(p, k), rtol=0, atol=1e-6)
        assert q.threshold_ == pytest.approx(p.threshold_, abs=1e-6)
        assert (q.address_, q.model_sha256_, q.training_) == (p.address_, p.model_sha256_,
                                                              p.training_)  # fmt: skip
    assert sw.frame.columns == frame.columns
    for got, want in zip(sw.frame.iter_rows(), frame.iter_rows(), strict=True):
        for a, b in zip(got, want, strict=True):
            if isinstance(b, float) and not math.isnan(b):
                assert a == pytest.approx(b, abs=1e-6)
            else:
                assert a == b or (a != a and b != b)  # NaN alike


class Counter:
    """Forward passes of a model: a forward pre-hook on the module every pass runs first
    (removed when the ``with`` block ends)."""

    def __init__(self, module):
        self.calls = 0
        self.handle = module.register_forward_pre_hook(self._count)

    def _count(self, *_):
        self.calls += 1

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.handle.remove()


def blocks(n_records: int, block_size: int) -> int:
    """One forward pass per block of the training records and per block of the held-out."""
    n_held = n_records // 4
    return math.ceil((n_records - n_held) / block_size) + math.ceil(n_held / block_size)


# -- an LSTM ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lstm():
    model = planted_model()
    return model, random_records(48, seed=5), dl.verify.untrained_copy(model, seed=2)


def test_an_lstm_sweep_equals_fitting_each_layer(lstm):
    model, recs, base = lstm
    layers = model.layers  # embed, lstm (replayed sub-layers' union) and head
    sw = dl.Probe.sweep(model, recs, paren, untrained=base, n_boot=50, **NULLS)
    assert_same(sw, *per_layer(model, recs, paren, layers, untrained=base))
    assert sw.frame["untrained_auroc"].is_not_null().all()


def test_labels_instead_of_a_hypothesis_give_the_same_sweep(lstm):
    model, recs, _ = lstm
    rng = np.random.default_rng(0)
    labels = [(rng.random(len(r)) < 0.4).astype(float) for r in recs]
    sw = dl.Probe.sweep(model, recs, labels=labels, layers=["lstm", "embed"], n_boot=50,
                        C=0.5, **NULLS)  # fmt: skip
    assert_same(sw, *per_layer(model, recs, None, ["lstm", "embed"], labels=labels, C=0.5))


def test_one_forward_pass_per_block_for_every_layer(lstm):
    model, recs, base = lstm
    kw = {"untrained": base, "n_boot": 5, "n_directions": 1, "block_size": 16}
    dl.Probe.sweep(model, recs, paren, **kw)  # plans made (each model's probe pass) once
    with Counter(model.module.embed) as ours, Counter(base.module.embed) as theirs:
        dl.Probe.sweep(model, recs, paren, **kw)
        assert ours.calls == blocks(len(recs), 16) == 4  # 36 training (3) + 12 held out (1)
        assert theirs.calls == blocks(len(recs), 16)  # the untrained copy's own single pass
        ours.calls = theirs.calls = 0
        per_layer(model, recs, paren, model.layers, untrained=base, n_boot=5, block_size=16)
    # per layer, fit + held-out score and the nulls' reads: each block twice per layer
    n = len(model.layers) * blocks(len(recs), 16)
    assert ours.calls >= 2 * n and theirs.calls >= n


# -- a tiny GPT-2 (built from a config, random weights) --------------------------------
@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from hf_workload import corpus, keyword, tiny_gpt2

    module, tok = tiny_gpt2(corpus(120, seed=1), n_layer=2)
    model = dl.Model.from_hf(module, tok, name="g")
    return model, corpus(48, seed=3), keyword, dl.verify.untrained_copy(model, seed=1)


def test_a_gpt2_sweep_equals_fitting_each_layer(gpt2):
    model, recs, keyword, base = gpt2
    layers = ["transformer.h.0", "transformer.h.1", "transformer.ln_f"]
    sw = dl.Probe.sweep(model, recs, keyword, layers=layers, untrained=base, n_boot=50,
                        C=0.1, **NULLS)  # fmt: skip
    assert_same(sw, *per_layer(model, recs, keyword, layers, untrained=base, C=0.1))


def test_a_gpt2_sweep_runs_one_pass_per_block(gpt2):
    model, recs, keyword, base = gpt2
    layers = ["transformer.h.0", "transformer.h.1"]
    kw = {"layers": layers, "untrained": base, "n_boot": 5, "n_directions": 1,
          "block_size": 16, "C": 0.1}  # fmt: skip
    dl.Probe.sweep(model, recs, keyword, **kw)
    with Counter(model.module.transformer.wte) as ours, \
            Counter(base.module.transformer.wte) as theirs:  # fmt: skip
        dl.Probe.sweep(model, recs, keyword, **kw)
    assert ours.calls == theirs.calls == blocks(len(recs), 16) == 4


def test_bad_counts_are_refused_before_any_pass(lstm):
    model, recs, _ = lstm
    with Counter(model.module.embed) as seen:
        with pytest.raises(dl.DNIError, match="n_directions=0: pass a positive count"):
            dl.Probe.sweep(model, recs, paren, n_directions=0)
        with pytest.raises(dl.DNIError, match="penalty='l3'"):
            dl.Probe.sweep(model, recs, paren, penalty="l3")
    assert seen.calls == 0
